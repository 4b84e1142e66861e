// The Coordinator's Submission: a job spec checked (defaults, paths,
// validation, the data described, outputs not shared with a running job)
// and queued.
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/cluster/job_plan.h"
#include "common/cluster/job_spec.h"
#include "common/io/bert_example.h"
#include "common/io/file_util.h"
#include "common/io/record_index.h"
#include "common/io/tfrecord.h"
#include "common/ps/checkpoint.h"
#include "common/ps/example_ledger.h"
#include "common/status.h"
#include "glog/logging.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_internal.h"
#include "server/coordinator/job_store.h"
#include "common/cluster/path_policy.h"

namespace bertps {

using coordinator_internal::EvalGlobs;
using coordinator_internal::HasEval;

namespace coordinator_internal {
namespace {

struct ExampleShape {
  int seq = 0;
  int preds = 0;
};

// The shape of a train data file's first example (its tokens and masked
// positions), which the workers size their buffers by.
absl::StatusOr<ExampleShape> FirstExampleShape(const JobSpec& spec,
                                               const std::string& path) {
  ExampleShape shape;
  ASSIGN_OR_RETURN(std::unique_ptr<io::TFRecordReader> reader,
                   io::TFRecordReader::Open(path));
  std::string record;
  ASSIGN_OR_RETURN(bool got, reader->Next(&record));
  if (!got) return shape;
  if (spec.task() == PRETRAIN) {
    absl::StatusOr<io::PretrainExample> e = io::DecodePretrainExample(record);
    if (!e.ok()) {
      return Annotate(e.status(), absl::StrCat(path, " record 0 (offset 0)"));
    }
    shape.seq = static_cast<int>(e->input_ids.size());
    shape.preds = static_cast<int>(e->masked_lm_ids.size());
  } else if (spec.task() == CLASSIFY) {
    absl::StatusOr<io::ClassifyExample> e = io::DecodeClassifyExample(record);
    if (!e.ok()) {
      return Annotate(e.status(), absl::StrCat(path, " record 0 (offset 0)"));
    }
    shape.seq = static_cast<int>(e->input_ids.size());
  }
  return shape;
}

}  // namespace

// The job's directories, made once every check that can refuse the job has
// passed: job_dir, and tensorboard_dir, which the coordinator writes itself
// (a directory it cannot write is found now, not after the training).
absl::Status MakeJobDirs(const JobSpec& spec, const std::string& id) {
  if (!spec.job_dir().empty()) {
    const std::string& dir = spec.job_dir();
    const std::string marker = absl::StrCat(dir, "/", kJobDirMarker);
    std::error_code ec;
    if (std::filesystem::exists(dir, ec)) {
      // Two jobs never share a directory: one that exists is taken only
      // when it is empty (made for the job by its user).
      absl::StatusOr<std::string> owner = io::ReadFileToString(marker, 256);
      if (owner.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "job spec: job_dir \"", dir, "\" is job ",
            absl::StripAsciiWhitespace(*owner),
            "'s directory; give each job its own (bertpsctl resubmit makes "
            "a new one)"));
      }
      if (!std::filesystem::is_directory(dir, ec) ||
          !std::filesystem::is_empty(dir, ec)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "job spec: job_dir \"", dir, "\" exists and is not empty: a job "
            "directory is the job's own (name a new or an empty one)"));
      }
    }
    std::filesystem::create_directories(dir, ec);
    if (ec || !std::filesystem::is_directory(dir)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job spec: job_dir \"", dir, "\": cannot create it",
          ec ? absl::StrCat(" (", ec.message(), ")") : std::string(
                                                            " (not a directory)")));
    }
    if (absl::Status st = io::WriteFileAtomically(marker, id + "\n");
        !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job spec: job_dir \"", dir, "\": cannot write it (",
          st.message(), ")"));
    }
  }
  if (!spec.tensorboard_dir().empty()) {
    if (absl::Status st = io::CheckWritableDir(
            spec.tensorboard_dir(),
            absl::StrCat("tensorboard_dir \"", spec.tensorboard_dir(), "\""));
        !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec: ", st.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DataFile>> DescribeData(const JobSpec& spec,
                                                   const PathRoots& roots) {
  std::vector<std::string> globs(spec.data().begin(), spec.data().end());
  // Each match checked against the roots before it is opened.
  ASSIGN_OR_RETURN(std::vector<std::string> files,
                   io::MatchShardFiles(globs, 0, 1, [&](const std::string& f) {
                     return CheckInputFile("input file", f, roots);
                   }));
  std::vector<DataFile> out;
  for (const std::string& f : files) {
    // The record index the workers read through: built here once (or
    // loaded), so they load it instead of reading the framing again.
    ASSIGN_OR_RETURN(io::RecordIndex index,
                     io::LoadOrBuildRecordIndex(f, io::DefaultIndexCacheDir()));
    DataFile d;
    d.set_path(f);
    d.set_bytes(index.file_size);
    d.set_records(static_cast<int64_t>(index.offsets.size()));
    if (out.empty()) {
      // Every example has the first one's shape (the workers check each):
      // one record read, of the first file.
      ASSIGN_OR_RETURN(ExampleShape shape, FirstExampleShape(spec, f));
      d.set_seq_length(shape.seq);
      d.set_masked_positions(shape.preds);
    }
    out.push_back(std::move(d));
  }
  return out;
}

absl::Status SetDataOrigin(JobSpec* spec) {
  CheckpointSpec* c = spec->mutable_checkpoint();
  c->clear_origin();
  if (c->restore().empty()) return absl::OkStatus();
  // A directory: its newest complete checkpoint now, so that every shard
  // (and every restart before the job's own first checkpoint) reads the
  // same one.
  std::string manifest = c->restore();
  if (!absl::EndsWith(manifest, ".json")) {
    absl::StatusOr<std::string> m = ps::LatestManifest(manifest);
    if (!m.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job spec: checkpoint.restore: ", m.status().message()));
    }
    manifest = *m;
    c->set_restore(manifest);
  }
  absl::StatusOr<ps::Manifest> m = ps::ReadManifest(manifest);
  if (!m.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job spec: checkpoint.restore: ", m.status().message()));
  }
  if (c->restore_as() == CheckpointSpec::NEW_PHASE) return absl::OkStatus();
  // Continued: the data goes on where the checkpoint's updates left it, in
  // this job's geometry (its batch, workers, accumulation).
  if (m->version > spec->steps()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job spec: checkpoint.restore: the checkpoint is of update ",
        m->version, ", past the job's steps (", spec->steps(),
        "); a continued run counts steps from its start (restore_as: "
        "NEW_PHASE starts them at 0)"));
  }
  int64_t position = m->version * PlanOf(*spec).examples_per_update;
  if (!m->example_ledger.empty()) {
    absl::StatusOr<ps::ExampleLedger> ledger =
        ps::ExampleLedger::Parse(m->example_ledger);
    if (!ledger.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec: checkpoint.restore: ", manifest,
                       ": its example ledger: ", ledger.status().message()));
    }
    const auto ranges = ledger->ranges();
    position = ranges.empty() ? 0 : ranges.back().second;
  }
  c->mutable_origin()->set_update(m->version);
  c->mutable_origin()->set_position(position);
  return absl::OkStatus();
}

}  // namespace coordinator_internal

absl::StatusOr<std::string> Coordinator::Submit(JobSpec spec,
                                                const std::string& owner) {
  // The job is in the store before anyone hears of it (AddJob); a start it
  // caused is too, before the client's answer.
  ASSIGN_OR_RETURN(std::string id, AddJob(std::move(spec), owner));
  if (absl::Status st = FlushIfUrgent(); !st.ok()) {
    LOG(WARNING) << "job " << id << " is stored, its start not yet: " << st;
  }
  return id;
}

absl::StatusOr<std::string> Coordinator::AddJob(JobSpec spec,
                                                const std::string& owner) {
  // The coordinator's to set (SetDataOrigin), from the checkpoint itself.
  if (spec.has_checkpoint()) spec.mutable_checkpoint()->clear_origin();
  ApplyJobDefaults(&spec);
  // The job's directory: its id is taken now (a refused submission leaves a
  // gap in the ids), so that the directory can be named after it.
  std::string reserved;
  if (spec.job_dir().empty() && !options_.jobs_root.empty()) {
    absl::MutexLock l(&mu_);
    reserved = NewJobIdLocked();
    spec.set_job_dir(absl::StrCat(options_.jobs_root, "/", reserved));
  }
  ApplyJobDirDefaults(&spec);
  // Paths first: validation reads a config.json model, counting reads data.
  // Nothing is created before every check that can refuse the job passed
  // (MakeJobDirs, at the end).
  RETURN_IF_ERROR(CheckJobPaths(spec, options_.roots));
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  int64_t examples = 0;
  std::vector<DataFile> data_files;
  if (spec.task() == PRETRAIN || spec.task() == CLASSIFY) {
    absl::StatusOr<int64_t> n = 0;
    if (options_.describe_data) {
      absl::StatusOr<std::vector<DataFile>> files = options_.describe_data(spec);
      if (files.ok()) {
        data_files = std::move(*files);
        for (const DataFile& f : data_files) *n += f.records();
      } else {
        n = files.status();
      }
    } else {
      n = options_.count_examples(spec);
    }
    if (!n.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec: data: ", n.status().message()));
    }
    if (*n == 0) return absl::InvalidArgumentError("job spec: data: no examples");
    examples = *n;
  }
  if (spec.task() == EVAL && !absl::EndsWith(spec.eval_checkpoint(), ".json")) {
    // A checkpoint directory: its newest manifest now, so every item of the
    // round reads the same version.
    absl::StatusOr<std::string> m = ps::LatestManifest(spec.eval_checkpoint());
    if (!m.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec: eval_checkpoint: ", m.status().message()));
    }
    spec.set_eval_checkpoint(*m);
  }
  std::vector<WorkItem> items;
  if (spec.task() == PREPROCESS) {
    std::vector<std::string> globs(spec.data().begin(), spec.data().end());
    absl::StatusOr<std::vector<WorkItem>> w =
        MakeWorkItems(globs, spec.preprocess().shards(), options_.roots);
    if (!w.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec: data: ", w.status().message()));
    }
    items = std::move(*w);
  }
  if (spec.task() == EVAL || HasEval(spec)) {
    absl::StatusOr<std::vector<WorkItem>> w =
        MakeWorkItems(EvalGlobs(spec), spec.eval().shards(), options_.roots);
    if (!w.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec: eval.data: ", w.status().message()));
    }
  }
  absl::StatusOr<MemoryEstimate> memory =
      coordinator_internal::EstimateMemory(spec, data_files);
  if (!memory.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job spec: ", memory.status().message()));
  }
  if (spec.steps() == 0 && spec.epochs() > 0) {
    // What the workers, the shards and the LR schedule run to (the plan's
    // updates); steps now say it (a valid spec, as stored).
    spec.set_steps(PlanOf(spec).UpdatesForEpochs(spec.epochs(), examples));
    spec.set_epochs(0);
  }
  if ((spec.task() == PRETRAIN || spec.task() == CLASSIFY)) {
    RETURN_IF_ERROR(coordinator_internal::SetDataOrigin(&spec));
  }
  absl::ReleasableMutexLock l(&mu_);
  RETURN_IF_ERROR(CheckMemberMemoryLocked(spec, *memory));
  // Two jobs that write to the same place would overwrite each other's
  // checkpoints, exports or records: refused while the other may write.
  for (const auto& [mine_field, mine_path] : JobOutputPaths(spec)) {
    const std::string mine = LexicalNormal(mine_path);
    for (const auto& [other_id, other] : jobs_) {
      if (IsFinal(other.status.state())) continue;
      for (const auto& [field, path] : JobOutputPaths(other.status.spec())) {
        if (LexicalNormal(path) != mine) continue;
        return absl::FailedPreconditionError(absl::StrCat(
            "job spec: ", mine_field, " \"", mine, "\" is the ", field,
            " of job ", other_id, " (", JobState_Name(other.status.state()),
            "), which writes there; give each job its own"));
      }
    }
    if (outputs_being_made_.count(mine) > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job spec: ", mine_field, " \"", mine,
          "\" is an output of a job being submitted now; give each job its "
          "own"));
    }
  }
  // Every check passed: the job's id, its directories and (with a store)
  // its record, those two outside the lock, the outputs reserved meanwhile.
  std::vector<std::string> outputs;
  for (const auto& [field, path] : JobOutputPaths(spec)) {
    outputs.push_back(LexicalNormal(path));
  }
  outputs_being_made_.insert(outputs.begin(), outputs.end());
  const std::string id =
      reserved.empty() ? NewJobIdLocked() : reserved;
  Job job;
  job.examples_per_epoch = examples;
  job.status.set_id(id);
  job.status.set_owner(owner);
  *job.status.mutable_spec() = spec;
  job.status.set_state(PENDING);
  job.status.set_submit_time_ms(NowMs());
  *job.status.mutable_memory() = *memory;
  job.status.mutable_progress()->set_total_steps(PlanOf(spec).updates);
  for (DataFile& f : data_files) *job.status.add_data_files() = std::move(f);
  for (WorkItem& w : items) {
    Item it;
    it.item = std::move(w);
    job.work.push_back(std::move(it));
  }
  job.status.set_items_total(static_cast<int>(job.work.size()));
  const bool store = options_.store != nullptr;
  JobRecord record;
  if (store) record = RecordLocked(job);
  l.Release();
  const absl::Status made = coordinator_internal::MakeJobDirs(spec, id);
  // Acknowledged means durable: the job is written before anyone hears of
  // it; a store that cannot take it refuses the submission, and nothing is
  // queued.
  absl::Status stored;
  if (made.ok() && store) stored = options_.store->Put(id, record);
  absl::MutexLock relock(&mu_);
  for (const std::string& o : outputs) {
    outputs_being_made_.erase(outputs_being_made_.find(o));
  }
  RETURN_IF_ERROR(made);
  if (!stored.ok()) {
    store_error_ = stored.ToString();
    return absl::UnavailableError(absl::StrCat(
        "the coordinator's job store cannot write (", stored.message(),
        "): job ", id, " was not submitted"));
  }
  if (store) {
    job.stored_state = PENDING;
    job.stored_incarnation = 0;
    job.durable = job.status;
  }
  Job& added = jobs_[id] = std::move(job);
  EventLocked(added, "submitted");
  queue_.push_back(id);
  StartJobsLocked();
  return id;
}

}  // namespace bertps

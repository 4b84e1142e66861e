#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/io/bert_example.h"
#include "common/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "nlohmann/json.hpp"
#include "server/ps/checkpoint.h"
#include "server/coordinator/job_spec.h"
#include "server/coordinator/job_store.h"
#include "glog/logging.h"

namespace bertps {
namespace {

absl::StatusOr<int64_t> CountRecords(const JobSpec& spec) {
  std::vector<std::string> globs(spec.data().begin(), spec.data().end());
  ASSIGN_OR_RETURN(auto stream, io::ExampleStream::Open(globs));
  std::string record;
  int64_t n = 0;
  for (;;) {
    ASSIGN_OR_RETURN(bool got, stream->Next(&record));
    if (!got) break;
    ++n;
  }
  return n;
}

// *into += from, recursively: numbers add, objects merge, anything else
// keeps the first value seen.
void MergeCounts(const nlohmann::ordered_json& from,
                 nlohmann::ordered_json* into) {
  for (auto it = from.begin(); it != from.end(); ++it) {
    nlohmann::ordered_json& dst = (*into)[it.key()];
    if (dst.is_null()) {
      dst = it.value();
    } else if (it.value().is_object() && dst.is_object()) {
      MergeCounts(it.value(), &dst);
    } else if (it.value().is_number_integer() && dst.is_number_integer()) {
      dst = dst.get<int64_t>() + it.value().get<int64_t>();
    } else if (it.value().is_number() && dst.is_number()) {
      dst = dst.get<double>() + it.value().get<double>();
    }
  }
}

int StagesOf(const JobSpec& s) { return std::max(1, s.pipeline().stages()); }

// What a trained job waits for before it can succeed.
constexpr char kLedgerWait[] =
    "shard 0's count of the examples of the last update";

// Examples one update of the shards consumes: BSP a global batch (every
// worker's batch); ASP/SSP one worker's push.
int64_t ExamplesPerUpdate(const JobSpec& s) {
  const int64_t b = s.batch_size();
  return s.consistency().mode() == BSP ? b * s.num_workers() : b;
}
bool IsTrainer(Role r) { return r == TRAIN || r == STAGE_ROLE; }

bool IsPool(Role r) { return r == PREPROCESS_ROLE || r == EVAL_ROLE; }

bool HasEval(const JobSpec& s) {
  return (s.task() == PRETRAIN || s.task() == CLASSIFY) &&
         s.eval().data_size() > 0;
}

std::vector<std::string> EvalGlobs(const JobSpec& s) {
  if (s.task() == EVAL && s.eval().data_size() == 0) {
    return {s.data().begin(), s.data().end()};
  }
  return {s.eval().data().begin(), s.eval().data().end()};
}

}  // namespace

namespace {

// `path` without "." components, repeated or trailing slashes (lexically;
// a relative path stays relative).
std::string NormalPath(absl::string_view path) {
  std::vector<absl::string_view> parts;
  for (absl::string_view p : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (p != ".") parts.push_back(p);
  }
  return absl::StrCat(absl::StartsWith(path, "/") ? "/" : "",
                      absl::StrJoin(parts, "/"));
}

// The output locations of a job: (field, normalized path) pairs.
std::vector<std::pair<const char*, std::string>> OutputsOf(const JobSpec& s) {
  std::vector<std::pair<const char*, std::string>> out;
  if (!s.checkpoint().dir().empty()) {
    out.emplace_back("checkpoint.dir", NormalPath(s.checkpoint().dir()));
  }
  if (!s.export_path().empty()) {
    out.emplace_back("export_path", NormalPath(s.export_path()));
  }
  if (!s.output_dir().empty()) {
    out.emplace_back("output_dir", NormalPath(s.output_dir()));
  }
  return out;
}

}  // namespace

bool IsFinal(JobState s) {
  return s == SUCCEEDED || s == FAILED || s == CANCELLED;
}

absl::StatusOr<std::vector<WorkItem>> MakeWorkItems(
    const std::vector<std::string>& globs, int shards) {
  ASSIGN_OR_RETURN(std::vector<std::string> files, io::MatchShardFiles(globs));
  const int n = static_cast<int>(files.size());
  const int parts = shards <= n ? 1 : (shards + n - 1) / n;
  std::vector<WorkItem> items;
  for (const std::string& f : files) {
    for (int p = 0; p < parts; ++p) {
      WorkItem w;
      w.set_index(static_cast<int>(items.size()));
      w.set_input(f);
      w.set_part(p);
      w.set_parts(parts);
      items.push_back(std::move(w));
    }
  }
  return items;
}

absl::Status AddEvalStats(const EvalStats& b, EvalStats* a) {
  if (a->num_labels() == 0 && a->confusion_size() == 0) {
    a->set_num_labels(b.num_labels());
    a->mutable_confusion()->Resize(b.confusion_size(), 0);
  }
  if (a->num_labels() != b.num_labels() ||
      a->confusion_size() != b.confusion_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "eval statistics: ", b.num_labels(), " labels (", b.confusion_size(),
        " cells) do not add to ", a->num_labels(), " labels"));
  }
  a->set_examples(a->examples() + b.examples());
  a->set_mlm_loss_sum(a->mlm_loss_sum() + b.mlm_loss_sum());
  a->set_mlm_weight(a->mlm_weight() + b.mlm_weight());
  a->set_mlm_correct(a->mlm_correct() + b.mlm_correct());
  a->set_nsp_correct(a->nsp_correct() + b.nsp_correct());
  a->set_nsp_loss_sum(a->nsp_loss_sum() + b.nsp_loss_sum());
  a->set_cls_loss_sum(a->cls_loss_sum() + b.cls_loss_sum());
  for (int i = 0; i < b.confusion_size(); ++i) {
    a->set_confusion(i, a->confusion(i) + b.confusion(i));
  }
  return absl::OkStatus();
}

EvalMetrics MetricsOf(const EvalStats& st,
                      const std::vector<std::string>& label_names) {
  EvalMetrics m;
  *m.mutable_stats() = st;
  m.set_examples(st.examples());
  const double n = std::max<int64_t>(st.examples(), 1);
  if (st.num_labels() == 0) {
    const double w = std::max(st.mlm_weight(), 1e-12);
    m.set_mlm_accuracy(st.mlm_correct() / w);
    m.set_mlm_loss(st.mlm_loss_sum() / w);
    m.set_mlm_perplexity(std::exp(m.mlm_loss()));
    m.set_nsp_accuracy(st.nsp_correct() / n);
    m.set_nsp_loss(st.nsp_loss_sum() / n);
    return m;
  }
  const int L = st.num_labels();
  auto cell = [&](int t, int p) -> int64_t {
    const int i = t * L + p;
    return i < st.confusion_size() ? st.confusion(i) : 0;
  };
  int64_t correct = 0;
  double f1_sum = 0;
  for (int c = 0; c < L; ++c) {
    int64_t tp = cell(c, c), predicted = 0, actual = 0;
    for (int k = 0; k < L; ++k) {
      predicted += cell(k, c);
      actual += cell(c, k);
    }
    correct += tp;
    ClassMetrics* cm = m.add_classes();
    cm->set_label(c < static_cast<int>(label_names.size())
                      ? label_names[c]
                      : absl::StrCat(c));
    cm->set_precision(predicted ? double(tp) / predicted : 0);
    cm->set_recall(actual ? double(tp) / actual : 0);
    const double pr = cm->precision() + cm->recall();
    cm->set_f1(pr > 0 ? 2 * cm->precision() * cm->recall() / pr : 0);
    cm->set_support(actual);
    f1_sum += cm->f1();
  }
  m.set_accuracy(correct / n);
  m.set_loss(st.cls_loss_sum() / n);
  m.set_macro_f1(f1_sum / L);
  return m;
}

Coordinator::Coordinator(CoordinatorOptions options)
    : options_([&] {
        if (!options.count_examples) options.count_examples = CountRecords;
        return options;
      }()),
      instance_(absl::StrFormat(
          "%08x", static_cast<uint32_t>(std::random_device()() ^
                                        absl::ToUnixNanos(absl::Now())))) {}

int64_t Coordinator::NowMs() const {
  return absl::ToUnixMillis(options_.now());
}

absl::StatusOr<std::string> Coordinator::Submit(JobSpec spec) {
  ApplyJobDefaults(&spec);
  // Paths first: validation reads a config.json model, counting reads data.
  RETURN_IF_ERROR(CheckJobPaths(spec, options_.roots));
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  int64_t examples = 0;
  if (spec.task() == PRETRAIN || spec.task() == CLASSIFY) {
    absl::StatusOr<int64_t> n = options_.count_examples(spec);
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
        MakeWorkItems(globs, spec.preprocess().shards());
    if (!w.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec: data: ", w.status().message()));
    }
    items = std::move(*w);
  }
  if (spec.task() == EVAL || HasEval(spec)) {
    absl::StatusOr<std::vector<WorkItem>> w =
        MakeWorkItems(EvalGlobs(spec), spec.eval().shards());
    if (!w.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec: eval.data: ", w.status().message()));
    }
  }
  const int64_t per_update = ExamplesPerUpdate(spec);
  int64_t total = spec.steps();
  if (total == 0 && spec.epochs() > 0) {
    total = (spec.epochs() * examples + per_update - 1) / per_update;
    spec.set_steps(total);  // what the workers and the LR schedule run to
    spec.set_epochs(0);     // steps now say it (a valid spec, as stored)
  }
  absl::MutexLock l(&mu_);
  // Two jobs that write to the same place would overwrite each other's
  // checkpoints, exports or records: refused while the other may write.
  for (const auto& [mine_field, mine] : OutputsOf(spec)) {
    for (const auto& [other_id, other] : jobs_) {
      if (IsFinal(other.status.state())) continue;
      for (const auto& [field, path] : OutputsOf(other.status.spec())) {
        if (path != mine) continue;
        return absl::FailedPreconditionError(absl::StrCat(
            "job spec: ", mine_field, " \"", mine, "\" is the ", field,
            " of job ", other_id, " (", JobState_Name(other.status.state()),
            "), which writes there; give each job its own"));
      }
    }
  }
  const std::string id = absl::StrFormat("job-%06d", next_job_++);
  Job& job = jobs_[id];
  job.examples_per_epoch = examples;
  job.status.set_id(id);
  *job.status.mutable_spec() = spec;
  job.status.set_state(PENDING);
  job.status.set_submit_time_ms(NowMs());
  job.status.mutable_progress()->set_total_steps(total);
  for (WorkItem& w : items) {
    Item it;
    it.item = std::move(w);
    job.work.push_back(std::move(it));
  }
  job.status.set_items_total(static_cast<int>(job.work.size()));
  EventLocked(job, "submitted");
  queue_.push_back(id);
  StartJobsLocked();
  return id;
}

absl::StatusOr<JobStatus> Coordinator::Get(const std::string& id) const {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job ", id));
  return it->second.status;
}

std::vector<JobStatus> Coordinator::List() const {
  absl::MutexLock l(&mu_);
  std::vector<JobStatus> out;
  for (const auto& [id, job] : jobs_) {
    out.push_back(job.status);
    out.back().clear_history();
  }
  return out;
}

ListJobsResponse Coordinator::ListPage(int page_size, const std::string& after,
                                       size_t max_bytes) const {
  const int limit = page_size <= 0 ? 100 : std::min(page_size, 1000);
  ListJobsResponse resp;
  size_t bytes = 0;
  absl::MutexLock l(&mu_);
  for (auto it = jobs_.upper_bound(after); it != jobs_.end(); ++it) {
    if (resp.jobs_size() == limit) {
      resp.set_next_page_token(resp.jobs(resp.jobs_size() - 1).id());
      break;
    }
    JobStatus s = it->second.status;
    s.clear_history();
    const size_t size = s.ByteSizeLong();
    if (resp.jobs_size() > 0 && bytes + size > max_bytes) {
      resp.set_next_page_token(resp.jobs(resp.jobs_size() - 1).id());
      break;
    }
    bytes += size;
    *resp.add_jobs() = std::move(s);
  }
  return resp;
}

absl::Status Coordinator::Cancel(const std::string& id) {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job ", id));
  Job& job = it->second;
  if (IsFinal(job.status.state())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", id, " already ended: ", JobState_Name(job.status.state())));
  }
  FinishLocked(job, CANCELLED, "cancelled by request");
  return absl::OkStatus();
}

absl::StatusOr<std::vector<JobEvent>> Coordinator::WaitForEvents(
    const std::string& id, int64_t* seq, absl::Time deadline) {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job ", id));
  const Job* job = &it->second;
  // Sequence numbers count every event of the job; a watcher that fell
  // behind by more than max_events misses the dropped ones.
  auto total = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return job->events_dropped + static_cast<int64_t>(job->events.size());
  };
  auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return total() > *seq; };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  const int64_t from =
      std::min(std::max(*seq, job->events_dropped), total()) - job->events_dropped;
  std::vector<JobEvent> out(job->events.begin() + from, job->events.end());
  *seq = total();
  return out;
}

absl::StatusOr<RegisterResponse> Coordinator::Register(
    const RegisterRequest& r) {
  if (r.role() != PS && !IsTrainer(r.role()) && !IsPool(r.role())) {
    return absl::InvalidArgumentError(
        absl::StrCat("register: role ", Role_Name(r.role()),
                     " is not served by this coordinator yet"));
  }
  if (r.role() == STAGE_ROLE && r.address().empty()) {
    return absl::InvalidArgumentError(
        "register: a pipeline-stage member needs its StageService address");
  }
  if (r.role() == PS && r.address().empty()) {
    return absl::InvalidArgumentError(
        "register: a parameter-server member needs its address");
  }
  absl::MutexLock l(&mu_);
  // A shard or stage registering at the address of a live member of its role
  // is that member's process started again: the old one is gone (two
  // processes cannot listen on one address), so its job recovers now rather
  // than after the member timeout.
  if (!r.address().empty()) {
    for (auto& [id, old] : members_) {
      if (old.alive && old.role == r.role() && old.address == r.address()) {
        old.alive = false;
        LoseMemberLocked(old, "was restarted (a new process registered at "
                              "its address)");
      }
    }
  }
  Member m;
  // Ids carry this coordinator's instance, so a member still holding an id
  // from before a restart is told "unknown member" rather than taken for
  // another member.
  m.id = absl::StrFormat("m%d-%s", next_member_++, instance_);
  m.role = r.role();
  m.address = r.address();
  m.last_seen = options_.now();
  members_[m.id] = m;
  RegisterResponse resp;
  resp.set_member_id(m.id);
  resp.set_heartbeat_ms(options_.heartbeat_ms);
  TickLocked();
  return resp;
}

absl::StatusOr<HeartbeatResponse> Coordinator::Heartbeat(
    const HeartbeatRequest& r) {
  absl::MutexLock l(&mu_);
  auto mit = members_.find(r.member_id());
  if (mit == members_.end()) {
    return absl::NotFoundError(
        absl::StrCat("unknown member ", r.member_id(), ": register again"));
  }
  Member& m = mit->second;
  m.last_seen = options_.now();
  m.alive = true;
  if (r.leaving()) {
    // Shutting down: results and reports still count; then the member's
    // lease, slot or shard is taken back at once.
    if (IsPool(m.role)) {
      for (const WorkResult& res : r.results()) TakeResultLocked(m, r.job_id(), res);
    } else if (IsTrainer(m.role) && !m.job.empty() && r.job_id() == m.job &&
               m.told) {
      Job& job = jobs_[m.job];
      if (job.status.state() == RUNNING &&
          r.incarnation() == job.status.incarnation()) {
        for (const StepReport& s : r.steps()) RecordLocked(job, m.index, s);
      }
    }
    m.alive = false;
    LoseMemberLocked(m, "left (shut down)");
    members_.erase(mit);
    TickLocked();
    HeartbeatResponse resp;
    resp.mutable_assignment()->set_stop(true);
    return resp;
  }
  if (IsPool(m.role)) {
    for (const WorkResult& res : r.results()) TakeResultLocked(m, r.job_id(), res);
    TickLocked();
    if (m.job.empty()) LeaseLocked(m);
    HeartbeatResponse resp;
    *resp.mutable_assignment() = AssignmentLocked(m);
    return resp;
  }
  // Reports, errors and "done" count only from a member that was sent this
  // job under its current id (not from work begun before a restart).
  if (!r.job_id().empty() && r.job_id() == m.job && m.told) {
    Job& job = jobs_[m.job];
    // Only from the current start of the job (not a part begun before the
    // job was started again).
    if (job.status.state() == RUNNING &&
        r.incarnation() == job.status.incarnation()) {
      if (IsTrainer(m.role)) {
        for (const StepReport& s : r.steps()) RecordLocked(job, m.index, s);
      }
      if (m.role == PS && m.index == 0 && !r.example_ledger().empty()) {
        TakeLedgerLocked(job, r);
      }
      if (!r.error().empty()) {
        FinishLocked(job, FAILED,
                     absl::StrCat(m.role == PS ? "parameter-server shard "
                                  : m.role == STAGE_ROLE ? "pipeline slot "
                                                         : "worker ",
                                  m.index, " (member ", m.id, "): ", r.error()));
      } else if (r.done() && IsTrainer(m.role)) {
        job.slot_done[m.index] = true;
        if (!job.training_done &&
            std::all_of(job.slot_done.begin(), job.slot_done.end(),
                        [](bool d) { return d; })) {
          job.training_done = true;
          AdvanceLocked(job, job.status.progress().total_steps());
          const JobSpec& spec = job.status.spec();
          if (HasEval(spec) && !spec.eval().no_final()) {
            if (job.last_checkpoint.empty()) {
              FinishLocked(job, FAILED,
                           "final eval: no checkpoint was reported (set "
                           "checkpoint.dir)");
            } else {
              bool have = false;
              for (const Round& rd : job.rounds) {
                have |= rd.version == job.last_checkpoint_version;
              }
              if (!have) {
                AddRoundLocked(job, "final", job.last_checkpoint_version,
                               job.last_checkpoint);
              }
              EventLocked(job, "training done; final eval");
            }
          }
          MaybeSucceedLocked(job);
        }
      }
    }
  }
  TickLocked();
  Member& me = members_[r.member_id()];
  if (me.role == PS && !me.job.empty()) {
    Job& job = jobs_[me.job];
    if (me.told && r.job_id() == me.job &&
        r.incarnation() == job.status.incarnation() && r.error().empty()) {
      job.ready_shards.insert(me.id);
    }
  }
  HeartbeatResponse resp;
  *resp.mutable_assignment() = AssignmentLocked(me);
  if (!me.job.empty() && resp.assignment().job_id() == me.job &&
      !resp.assignment().wait()) {
    me.told = true;
  }
  return resp;
}

void Coordinator::Tick() {
  absl::MutexLock l(&mu_);
  TickLocked();
}

void Coordinator::TickLocked() {
  const absl::Time now = options_.now();
  if (last_tick_ != absl::InfinitePast() &&
      now - last_tick_ > options_.stall_threshold) {
    resumed_at_ = now;
    LOG(WARNING) << "the coordinator stalled for " << (now - last_tick_)
                 << "; members have " << options_.member_timeout
                 << " from now to be heard before any is declared dead";
  }
  last_tick_ = now;
  for (auto& [id, m] : members_) {
    if (!m.alive ||
        now - std::max(m.last_seen, resumed_at_) <= options_.member_timeout) {
      continue;
    }
    m.alive = false;
    LoseMemberLocked(m, "stopped answering");
  }
  for (auto& [id, job] : jobs_) {
    if (job.status.state() != RUNNING) continue;
    FillShardsLocked(job);
    FillSlotsLocked(job);
    SetWaitingLocked(job, RunningWaitLocked(job));
  }
  StartJobsLocked();
}

std::string Coordinator::RunningWaitLocked(const Job& job) const {
  if (job.training_done) {
    return job.ledger_version < job.status.progress().total_steps()
               ? kLedgerWait
               : "";
  }
  std::vector<std::string> shards, slots;
  for (size_t i = 0; i < job.shards.size(); ++i) {
    if (job.shards[i].empty()) shards.push_back(absl::StrCat(i));
  }
  for (size_t i = 0; i < job.slots.size(); ++i) {
    if (job.slots[i].empty() && !job.slot_done[i]) {
      slots.push_back(absl::StrCat(i));
    }
  }
  const bool stages = StagesOf(job.status.spec()) > 1;
  std::string what;
  if (!shards.empty()) {
    what = absl::StrCat("an idle parameter-server daemon for shard",
                        shards.size() > 1 ? "s " : " ",
                        absl::StrJoin(shards, ", "));
  }
  if (!slots.empty()) {
    absl::StrAppend(&what, what.empty() ? "" : "; ", "an idle ",
                    stages ? "stage daemon for slot" : "train worker for slot",
                    slots.size() > 1 ? "s " : " ", absl::StrJoin(slots, ", "),
                    " (the other workers wait at the next step)");
  }
  return what;
}

void Coordinator::SetWaitingLocked(Job& job, const std::string& what) {
  if (job.status.waiting() == what) return;
  if (what.empty()) {
    EventLocked(job, absl::StrCat("no longer waiting for ",
                                  job.status.waiting()));
    job.status.clear_waiting();
    job.status.clear_waiting_since_ms();
    return;
  }
  if (job.status.waiting().empty()) job.status.set_waiting_since_ms(NowMs());
  job.status.set_waiting(what);
  EventLocked(job, absl::StrCat("waiting for ", what));
}

void Coordinator::LoseMemberLocked(Member& m, const std::string& how) {
  if (m.job.empty()) return;
  if (IsPool(m.role)) {
    ReleaseLocked(m);
    return;
  }
  Job& job = jobs_[m.job];
  const int index = m.index;
  m.job.clear();
  m.index = -1;
  if (job.status.state() != RUNNING || index < 0) return;
  if (job.training_done) {  // only eval rounds remain: no shard is needed
    EventLocked(job, absl::StrCat(Role_Name(m.role), " ", index, " (member ",
                                  m.id, ") ", how, " after training"));
    return;
  }
  if (m.role == PS) {
    if (index < static_cast<int>(job.shards.size()) &&
        job.shards[index] == m.id) {
      job.shards[index].clear();
      job.status.set_ps_addresses(index, "");
    }
    RestartLocked(job, absl::StrCat("parameter-server shard ", index,
                                    " (member ", m.id, " at ", m.address,
                                    ") ", how));
  } else if (m.role == STAGE_ROLE) {
    const int S = StagesOf(job.status.spec());
    if (index < static_cast<int>(job.slots.size())) job.slots[index].clear();
    RestartLocked(job, absl::StrCat("pipeline stage ", index % S,
                                    " of replica ", index / S, " (member ",
                                    m.id, " at ", m.address, ") ", how));
  } else {
    if (index < static_cast<int>(job.slots.size()) &&
        job.slots[index] == m.id) {
      job.slots[index].clear();
    }
    EventLocked(job, absl::StrCat("worker ", index, " (member ", m.id, ") ",
                                  how, "; its slot is free"));
  }
}

int64_t Coordinator::RewindLocked(Job& job) {
  // Every shard restores the newest checkpoint (the job's own restore
  // point, or its initial values, if there is none yet), so all agree on
  // the step; the workers resume there and redo the steps after it.
  const int64_t from =
      job.last_checkpoint.empty() ? 0 : job.last_checkpoint_version;
  if (!job.last_checkpoint.empty()) {
    job.status.mutable_spec()->mutable_checkpoint()->set_restore(
        job.last_checkpoint);
  }
  // Steps after the checkpoint are reported again.
  job.counted.erase(job.counted.lower_bound({from, -1}), job.counted.end());
  job.counted_floor = std::min(job.counted_floor, from);
  job.step_loss.clear();
  job.last_report.clear();
  auto* history = job.status.mutable_history();
  while (!history->empty() && history->rbegin()->step() > from) {
    history->RemoveLast();
  }
  job.status.mutable_progress()->set_step(0);
  job.ledger_version = -1;  // the restored shards report theirs
  AdvanceLocked(job, from);
  return from;
}

void Coordinator::RestartLocked(Job& job, const std::string& why) {
  const JobSpec& spec = job.status.spec();
  const int max = spec.checkpoint().max_restarts() == 0
                      ? kDefaultMaxRestarts
                      : std::max(0, spec.checkpoint().max_restarts());
  if (job.status.restarts() >= max) {
    FinishLocked(job, FAILED,
                 absl::StrCat(why, "; no restart left (checkpoint.max_restarts ",
                              max, ")"));
    return;
  }
  job.status.set_restarts(job.status.restarts() + 1);
  job.status.set_incarnation(job.status.incarnation() + 1);
  const int64_t from = RewindLocked(job);
  job.ready_shards.clear();
  // Members still in the job are sent the new incarnation on their next
  // heartbeat: shards reinstall and restore, trainers wait for them.
  for (auto& [id, m] : members_) {
    if (m.job == job.status.id()) m.told = false;
  }
  EventLocked(job, absl::StrCat("restart ", job.status.restarts(), " of ", max,
                                ": ", why, "; resuming from ",
                                job.last_checkpoint.empty()
                                    ? std::string("the start")
                                    : absl::StrCat("the checkpoint of step ",
                                                   from)));
}

void Coordinator::FillShardsLocked(Job& job) {
  for (size_t i = 0; i < job.shards.size(); ++i) {
    if (!job.shards[i].empty()) continue;
    for (auto& [id, m] : members_) {
      if (m.alive && m.job.empty() && m.role == PS) {
        m.job = job.status.id();
        m.index = static_cast<int>(i);
        m.told = false;
        job.shards[i] = m.id;
        job.status.set_ps_addresses(static_cast<int>(i), m.address);
        EventLocked(job, absl::StrCat("shard ", i, " is member ", m.id, " at ",
                                      m.address));
        break;
      }
    }
  }
}

void Coordinator::StartJobsLocked() {
  // Train jobs start in FIFO order (a later one waits for an earlier one's
  // members); PREPROCESS and EVAL jobs, which use the pools, start as soon
  // as their pool has a live member.
  bool train_blocked = false;
  for (auto qit = queue_.begin(); qit != queue_.end();) {
    Job& job = jobs_[*qit];
    if (job.status.state() != PENDING) {
      qit = queue_.erase(qit);
      continue;
    }
    const JobSpec& spec = job.status.spec();
    int pool[2] = {0, 0};  // live preprocess, eval members
    for (const auto& [id, m] : members_) {
      if (!m.alive) continue;
      if (m.role == PREPROCESS_ROLE) ++pool[0];
      if (m.role == EVAL_ROLE) ++pool[1];
    }
    if (spec.task() == PREPROCESS || spec.task() == EVAL) {
      if (pool[spec.task() == PREPROCESS ? 0 : 1] == 0) {
        SetWaitingLocked(job, spec.task() == PREPROCESS
                                  ? "a preprocess worker to register"
                                  : "an eval worker to register");
        ++qit;
        continue;
      }
      SetWaitingLocked(job, "");
      qit = queue_.erase(qit);
      job.status.set_state(RUNNING);
      job.status.set_start_time_ms(NowMs());
      if (spec.task() == EVAL) {
        AddRoundLocked(job, "final", 0, spec.eval_checkpoint());
      }
      EventLocked(job, absl::StrCat("running: ", job.work.size(), " item(s)"));
      continue;
    }
    if (train_blocked) {
      SetWaitingLocked(job, "the train jobs submitted before it to start");
      ++qit;
      continue;
    }
    // Pipeline jobs take num_workers replicas x stages stage members.
    const int S = StagesOf(spec);
    const Role trainer = S > 1 ? STAGE_ROLE : TRAIN;
    std::vector<Member*> ps, train;
    for (auto& [id, m] : members_) {
      if (!m.alive || !m.job.empty()) continue;
      if (m.role == PS) ps.push_back(&m);
      if (m.role == trainer) train.push_back(&m);
    }
    if (static_cast<int>(ps.size()) < spec.num_ps_shards() ||
        static_cast<int>(train.size()) < spec.num_workers() * S ||
        (HasEval(spec) && pool[1] == 0)) {
      train_blocked = true;  // FIFO: later train jobs wait for this one
      std::string members = absl::StrCat(
          ps.size(), "/", spec.num_ps_shards(), " idle parameter-server "
          "daemons, ", train.size(), "/", spec.num_workers() * S, " idle ",
          S > 1 ? "stage daemons" : "train workers");
      if (HasEval(spec) && pool[1] == 0) {
        absl::StrAppend(&members, ", an eval worker");
      }
      SetWaitingLocked(job, absl::StrCat("members: ", members));
      const std::string why = absl::StrCat("job ", *qit, " waits for ",
                                           members);
      if (why != last_wait_) {
        LOG(INFO) << why;
        last_wait_ = why;
      }
      ++qit;
      continue;
    }
    SetWaitingLocked(job, "");
    qit = queue_.erase(qit);
    job.shards.clear();
    job.status.clear_ps_addresses();
    job.ready_shards.clear();
    for (int i = 0; i < spec.num_ps_shards(); ++i) {
      ps[i]->job = job.status.id();
      ps[i]->index = i;
      ps[i]->told = false;
      job.shards.push_back(ps[i]->id);
      job.status.add_ps_addresses(ps[i]->address);
    }
    job.slots.assign(spec.num_workers() * S, "");
    job.slot_done.assign(spec.num_workers() * S, false);
    job.status.set_incarnation(job.status.incarnation() + 1);
    job.status.set_state(RUNNING);
    if (job.status.start_time_ms() == 0) job.status.set_start_time_ms(NowMs());
    FillSlotsLocked(job);
    EventLocked(job, absl::StrCat("running on ", spec.num_ps_shards(),
                                  " shard(s) and ", spec.num_workers(),
                                  " worker(s)"));
  }
}

void Coordinator::FillSlotsLocked(Job& job) {
  for (size_t i = 0; i < job.slots.size(); ++i) {
    if (!job.slots[i].empty() || job.slot_done[i]) continue;
    const Role trainer = StagesOf(job.status.spec()) > 1 ? STAGE_ROLE : TRAIN;
    for (auto& [id, m] : members_) {
      if (m.alive && m.job.empty() && m.role == trainer) {
        m.job = job.status.id();
        m.told = false;
        m.index = static_cast<int>(i);
        job.slots[i] = m.id;
        EventLocked(job, absl::StrCat("worker ", i, " is member ", m.id));
        break;
      }
    }
  }
}

void Coordinator::FinishLocked(Job& job, JobState state,
                               const std::string& reason) {
  if (IsFinal(job.status.state())) return;
  if (state == SUCCEEDED) AdvanceLocked(job, job.status.progress().total_steps());
  job.status.set_state(state);
  job.status.set_reason(reason);
  job.status.set_end_time_ms(NowMs());
  job.status.clear_waiting();
  job.status.clear_waiting_since_ms();
  EventLocked(job, reason.empty() ? JobState_Name(state)
                                  : absl::StrCat(JobState_Name(state), ": ",
                                                 reason));
  // Members keep the job until their next heartbeat tells them to stop.
  for (auto& [id, m] : members_) {
    if (m.job == job.status.id()) {
      m.job.clear();
      m.index = -1;
    }
  }
}

void Coordinator::RecordLocked(Job& job, int slot, const StepReport& r) {
  // A checkpoint counts even on a repeated report (ASP/SSP: a restarted
  // worker 0 writes the final one after its last step).
  const int64_t ckpt_version =
      r.checkpoint_version() > 0 ? r.checkpoint_version() : r.step() + 1;
  if (!r.checkpoint().empty() && ckpt_version > job.last_checkpoint_version) {
    job.last_checkpoint = r.checkpoint();
    job.last_checkpoint_version = ckpt_version;
    const JobSpec& spec = job.status.spec();
    const int64_t every = spec.eval().every_steps();
    if (HasEval(spec) && every > 0 && ckpt_version % every == 0) {
      AddRoundLocked(job, absl::StrCat("step-", ckpt_version), ckpt_version,
                     r.checkpoint());
    }
  }
  if (r.step() < job.counted_floor) return;  // a repeat of an old step
  if (!job.counted.insert({r.step(), slot}).second) return;  // a repeat
  // Bounded memory: steps far behind the newest report are forgotten.
  constexpr int64_t kWindow = 1000;
  if (r.step() - kWindow > job.counted_floor) {
    job.counted_floor = r.step() - kWindow;
    job.counted.erase(job.counted.begin(),
                      job.counted.lower_bound({job.counted_floor, -1}));
  }
  JobProgress* p = job.status.mutable_progress();
  job.last_report[slot] = r;
  // Examples: global batch t is a fixed range of the data, consumed once
  // step t is applied, whichever worker (or replacement) computed it. So the
  // count follows the shards' version, not the reports, which a dying
  // worker may never send.
  AdvanceLocked(job, std::max(r.version(), r.step() + 1));
  // The loss comes from the train workers, or from each replica's last
  // pipeline stage.
  const int S = StagesOf(job.status.spec());
  if (S > 1 && slot % S != S - 1) return;
  // BSP: a step's loss is the mean of its workers' (each a share of the
  // global batch); ASP/SSP: every push is an update of its own, at the
  // shards' version.
  const bool bsp = job.status.spec().consistency().mode() == BSP;
  const int64_t key = bsp ? r.step() : r.version() - 1;
  auto& acc = job.step_loss[key];
  acc.first += r.loss();
  acc.second += 1;
  if (!bsp || acc.second == static_cast<int>(job.slots.size()) / S) {
    const double loss = acc.first / acc.second;
    job.step_loss.erase(key);
    p->set_loss(loss);
    p->set_learning_rate(r.learning_rate());
    double pull = 0, compute = 0, push = 0, wait = 0;
    for (const auto& [s, rep] : job.last_report) {
      pull += rep.pull_ms();
      compute += rep.compute_ms();
      push += rep.push_ms();
      wait += rep.wait_ms();
    }
    const double n = std::max<size_t>(1, job.last_report.size());
    p->set_pull_ms(pull / n);
    p->set_compute_ms(compute / n);
    p->set_push_ms(push / n);
    p->set_wait_ms(wait / n);
    if (r.examples() > 0) job.tokens_per_example = double(r.tokens()) / r.examples();
    if (static_cast<size_t>(job.status.history_size()) < options_.max_history) {
      LossPoint* lp = job.status.add_history();
      lp->set_step(key + 1);
      lp->set_loss(loss);
      lp->set_learning_rate(r.learning_rate());
    }
    EventLocked(job, absl::StrCat("step ", key + 1));
  }
}

void Coordinator::AdvanceLocked(Job& job, int64_t applied) {
  JobProgress* p = job.status.mutable_progress();
  applied = std::min(applied, p->total_steps());
  if (applied <= p->step()) return;
  p->set_step(applied);
  // The epoch the plan is in; the counts come from shard 0's ledger.
  const int64_t e = job.examples_per_epoch;
  const int64_t planned = applied * ExamplesPerUpdate(job.status.spec());
  if (e > 0 && planned > 0) p->set_epoch((planned - 1) / e);
}

void Coordinator::TakeLedgerLocked(Job& job, const HeartbeatRequest& r) {
  if (r.applied_version() < job.ledger_version) return;  // an older report
  absl::StatusOr<ps::ExampleLedger> l =
      ps::ExampleLedger::Parse(r.example_ledger());
  if (!l.ok()) {
    LOG(WARNING) << job.status.id() << ": shard 0's example ledger: "
                 << l.status();
    return;
  }
  job.ledger = std::move(*l);
  job.ledger_version = r.applied_version();
  CountExamplesLocked(job);
  MaybeSucceedLocked(job);
}

void Coordinator::CountExamplesLocked(Job& job) {
  JobProgress* p = job.status.mutable_progress();
  const int64_t consumed = job.ledger.applied();
  p->set_examples(consumed);
  p->set_examples_applied_twice(job.ledger.twice());
  p->clear_examples_per_epoch();
  const int64_t e = job.examples_per_epoch;
  const auto ranges = job.ledger.ranges();
  if (e > 0 && !ranges.empty()) {
    for (int64_t epoch = 0; epoch * e < ranges.back().second; ++epoch) {
      p->add_examples_per_epoch(job.ledger.Covered(epoch * e, (epoch + 1) * e));
    }
  }
  const double secs = absl::ToDoubleSeconds(
      options_.now() - absl::FromUnixMillis(job.status.start_time_ms()));
  if (secs > 0) {
    p->set_examples_per_sec(consumed / secs);
    p->set_tokens_per_sec(p->examples_per_sec() * job.tokens_per_example);
  }
}

void Coordinator::EventLocked(Job& job, const std::string& message) {
  // Events carry the status without the parts that grow with the job (the
  // loss history, the per-epoch counts: those are in GetJob's status). They
  // are moved aside while the status is copied: clearing them in the copy
  // would keep their storage (protobuf keeps cleared elements for reuse).
  JobEvent e;
  google::protobuf::RepeatedPtrField<LossPoint> history;
  google::protobuf::RepeatedField<int64_t> per_epoch;
  history.Swap(job.status.mutable_history());
  per_epoch.Swap(job.status.mutable_progress()->mutable_examples_per_epoch());
  *e.mutable_status() = job.status;
  history.Swap(job.status.mutable_history());
  per_epoch.Swap(job.status.mutable_progress()->mutable_examples_per_epoch());
  e.set_message(message);
  job.events.push_back(std::move(e));
  while (job.events.size() > std::max<size_t>(1, options_.max_events)) {
    job.events.pop_front();
    ++job.events_dropped;
  }
  PersistLocked(job);
}

void Coordinator::PersistLocked(const Job& job) {
  if (options_.store == nullptr) return;
  JobRecord r;
  *r.mutable_status() = job.status;
  r.set_examples_per_epoch(job.examples_per_epoch);
  for (const Item& it : job.work) {
    JobRecord::ItemState* s = r.add_items();
    *s->mutable_item() = it.item;
    s->set_done(it.done);
    if (it.done) *s->mutable_result() = it.result;
  }
  for (const Round& rd : job.rounds) {
    JobRecord::RoundState* s = r.add_rounds();
    s->set_name(rd.name);
    s->set_version(rd.version);
    s->set_checkpoint(rd.checkpoint);
    s->set_first(rd.first);
    s->set_count(rd.count);
    s->set_done(rd.done);
    s->set_finished(rd.finished);
  }
  r.set_training_done(job.training_done);
  r.set_last_checkpoint(job.last_checkpoint);
  r.set_last_checkpoint_version(job.last_checkpoint_version);
  r.set_tokens_per_example(job.tokens_per_example);
  absl::Status st = options_.store->Put(job.status.id(), r);
  if (!st.ok()) LOG(ERROR) << st;
}

absl::Status Coordinator::Recover() {
  if (options_.store == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<JobRecord> records, options_.store->LoadAll());
  absl::MutexLock l(&mu_);
  for (JobRecord& r : records) {
    const std::string id = r.status().id();
    int64_t n = 0;
    if (absl::StartsWith(id, "job-") && absl::SimpleAtoi(id.substr(4), &n)) {
      next_job_ = std::max(next_job_, n + 1);
    }
    Job& job = jobs_[id];
    job.status = std::move(*r.mutable_status());
    job.examples_per_epoch = r.examples_per_epoch();
    for (JobRecord::ItemState& s : *r.mutable_items()) {
      Item it;
      it.item = std::move(*s.mutable_item());
      it.done = s.done();
      it.result = std::move(*s.mutable_result());
      job.work.push_back(std::move(it));
    }
    for (const JobRecord::RoundState& s : r.rounds()) {
      Round rd;
      rd.name = s.name();
      rd.version = s.version();
      rd.checkpoint = s.checkpoint();
      rd.first = s.first();
      rd.count = s.count();
      // Items of the round done, recounted (their results were kept).
      for (int i = rd.first; i < rd.first + rd.count &&
                             i < static_cast<int>(job.work.size());
           ++i) {
        rd.done += job.work[i].done;
      }
      rd.finished = s.finished();
      job.rounds.push_back(rd);
    }
    job.training_done = r.training_done();
    job.last_checkpoint = r.last_checkpoint();
    job.last_checkpoint_version = r.last_checkpoint_version();
    job.tokens_per_example = r.tokens_per_example();
    const JobState state = job.status.state();
    const Task task = job.status.spec().task();
    if (state == PENDING) {
      queue_.push_back(id);
      EventLocked(job, "coordinator restarted: queued");
    } else if (IsFinal(state)) {
      EventLocked(job, absl::StrCat("restored: ", JobState_Name(state)));
    } else if (state == RUNNING && (task == PRETRAIN || task == CLASSIFY) &&
               !job.training_done) {
      // Members re-register without their assignments: start the job again
      // from its newest checkpoint.
      const int64_t from = RewindLocked(job);
      job.status.set_state(PENDING);
      job.status.clear_ps_addresses();
      queue_.push_back(id);
      EventLocked(job, job.last_checkpoint.empty()
                           ? "coordinator restarted: the job starts again"
                           : absl::StrCat("coordinator restarted: resuming from "
                                          "the checkpoint of step ", from));
    } else if (state == RUNNING) {
      EventLocked(job, "coordinator restarted: items not done are leased again");
    }
  }
  return absl::OkStatus();
}

Assignment Coordinator::AssignmentLocked(const Member& m) const {
  Assignment a;
  if (m.job.empty()) {
    a.set_stop(true);  // idle: leave whatever job the member still runs
    return a;
  }
  const Job& job = jobs_.at(m.job);
  a.set_job_id(m.job);
  if (!IsPool(m.role)) a.set_incarnation(job.status.incarnation());
  if (IsTrainer(m.role) && job.ready_shards.size() < job.shards.size()) {
    a.set_wait(true);  // not yet: the shards are installing this incarnation
    return a;
  }
  if (m.role == PS && std::find(job.shards.begin(), job.shards.end(),
                                std::string()) != job.shards.end()) {
    a.set_wait(true);  // not yet: a lost shard's index has no member (peers)
    return a;
  }
  *a.mutable_spec() = job.status.spec();
  a.set_index(m.index);
  if (IsPool(m.role)) {
    *a.mutable_item() = job.work[m.index].item;
  }
  if (m.role == STAGE_ROLE) {
    const int S = StagesOf(job.status.spec());
    const int first = (m.index / S) * S;
    for (int k = first; k < first + S; ++k) {
      auto it = members_.find(job.slots[k]);
      a.add_peers(it == members_.end() ? "" : it->second.address);
    }
  }
  for (const std::string& s : job.status.ps_addresses()) a.add_ps_addresses(s);
  return a;
}

void Coordinator::ReleaseLocked(Member& m) {
  if (m.job.empty()) return;
  auto it = jobs_.find(m.job);
  if (it != jobs_.end() && m.index >= 0 &&
      m.index < static_cast<int>(it->second.work.size())) {
    Item& item = it->second.work[m.index];
    if (item.holder == m.id && !item.done) {
      item.holder.clear();
      EventLocked(it->second,
                  absl::StrCat("item ", m.index, " (member ", m.id,
                               ") given back; it will be redone"));
    }
  }
  m.job.clear();
  m.index = -1;
}

void Coordinator::LeaseLocked(Member& m) {
  const bool eval = m.role == EVAL_ROLE;
  for (auto& [id, job] : jobs_) {
    if (job.status.state() != RUNNING) continue;
    const bool pre = job.status.spec().task() == PREPROCESS;
    if (pre == eval) continue;  // preprocess members take preprocess items
    if (eval && job.rounds.empty()) continue;
    for (size_t i = 0; i < job.work.size(); ++i) {
      Item& item = job.work[i];
      if (item.done || !item.holder.empty()) continue;
      if (eval && item.item.round().empty()) continue;
      item.holder = m.id;
      m.job = id;
      m.index = static_cast<int>(i);
      return;
    }
  }
}

void Coordinator::TakeResultLocked(Member& m, const std::string& job_id,
                                   const WorkResult& r) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  Job& job = it->second;
  if (m.job == job_id && m.index == r.index()) {
    m.job.clear();
    m.index = -1;
  }
  if (job.status.state() != RUNNING) return;
  if (r.index() < 0 || r.index() >= static_cast<int>(job.work.size())) return;
  Item& item = job.work[r.index()];
  if (item.done) return;  // redone by another member: counted once
  if (!r.error().empty()) {
    FinishLocked(job, FAILED,
                 absl::StrCat("item ", r.index(), " (", item.item.input(),
                              " part ", item.item.part(), "/",
                              item.item.parts(), ", member ", m.id,
                              "): ", r.error()));
    return;
  }
  item.done = true;
  item.holder.clear();
  item.result = r;
  job.status.set_items_done(job.status.items_done() + 1);
  if (job.status.spec().task() == PREPROCESS) {
    job.status.set_records_written(job.status.records_written() + r.records());
    EventLocked(job, absl::StrCat("item ", r.index(), " done: ", r.records(),
                                  " records"));
  }
  for (Round& round : job.rounds) {
    if (r.index() >= round.first && r.index() < round.first + round.count) {
      if (++round.done == round.count) FinishRoundLocked(job, round);
    }
  }
  MaybeSucceedLocked(job);
}

void Coordinator::AddRoundLocked(Job& job, const std::string& name,
                                 int64_t version,
                                 const std::string& checkpoint) {
  absl::StatusOr<std::vector<WorkItem>> items =
      MakeWorkItems(EvalGlobs(job.status.spec()), job.status.spec().eval().shards());
  if (!items.ok()) {
    FinishLocked(job, FAILED, absl::StrCat("eval round ", name, ": ",
                                           items.status().message()));
    return;
  }
  Round round;
  round.name = name;
  round.version = version;
  round.checkpoint = checkpoint;
  round.first = static_cast<int>(job.work.size());
  round.count = static_cast<int>(items->size());
  for (WorkItem& w : *items) {
    Item it;
    it.item = std::move(w);
    it.item.set_index(static_cast<int>(job.work.size()));
    it.item.set_round(name);
    it.item.set_checkpoint(checkpoint);
    it.item.set_version(version);
    job.work.push_back(std::move(it));
  }
  job.rounds.push_back(round);
  job.status.set_items_total(static_cast<int>(job.work.size()));
  EventLocked(job, absl::StrCat("eval ", name, ": ", round.count, " item(s)"));
}

void Coordinator::FinishRoundLocked(Job& job, Round& round) {
  EvalStats total;
  int64_t version = round.version;
  for (int i = round.first; i < round.first + round.count; ++i) {
    absl::Status st = AddEvalStats(job.work[i].result.eval(), &total);
    if (!st.ok()) {
      FinishLocked(job, FAILED, absl::StrCat("eval ", round.name, ": ",
                                             st.message()));
      return;
    }
    version = std::max(version, job.work[i].result.version());
  }
  const JobSpec& spec = job.status.spec();
  std::vector<std::string> names(spec.label_names().begin(),
                                 spec.label_names().end());
  if (names.empty()) {
    names.assign(spec.preprocess().labels().begin(),
                 spec.preprocess().labels().end());
  }
  EvalMetrics m = MetricsOf(total, names);
  m.set_round(round.name);
  m.set_step(version);
  m.set_time_ms(NowMs());
  round.finished = true;
  *job.status.add_evals() = m;
  EventLocked(job,
              total.num_labels() > 0
                  ? absl::StrFormat("eval %s at step %d: accuracy %.4f, macro-F1 "
                                    "%.4f over %d examples",
                                    round.name, version, m.accuracy(),
                                    m.macro_f1(), m.examples())
                  : absl::StrFormat("eval %s at step %d: MLM accuracy %.4f, "
                                    "perplexity %.2f, NSP accuracy %.4f over "
                                    "%d examples",
                                    round.name, version, m.mlm_accuracy(),
                                    m.mlm_perplexity(), m.nsp_accuracy(),
                                    m.examples()));
}

void Coordinator::MaybeSucceedLocked(Job& job) {
  if (job.status.state() != RUNNING) return;
  const Task task = job.status.spec().task();
  if ((task == PRETRAIN || task == CLASSIFY) && !job.training_done) return;
  for (const Item& item : job.work) {
    if (!item.done) return;
  }
  if (task == PRETRAIN || task == CLASSIFY) {
    const int64_t total = job.status.progress().total_steps();
    if (job.ledger_version < total) {
      SetWaitingLocked(job, kLedgerWait);
      return;
    }
    SetWaitingLocked(job, "");
    // Each example of the plan's updates exactly once: one range from the
    // start of the stream, nothing twice (backup workers drop the pushes
    // that come late: gaps, but still nothing twice).
    const JobSpec& spec = job.status.spec();
    const int64_t want = total * ExamplesPerUpdate(spec);
    const auto ranges = job.ledger.ranges();
    const bool exact = ranges.size() == 1 && ranges[0].first == 0 &&
                       ranges[0].second == want;
    if (job.ledger.twice() > 0 ||
        (!exact && spec.consistency().backup_workers() == 0)) {
      std::string got;
      for (size_t i = 0; i < ranges.size() && i < 4; ++i) {
        absl::StrAppend(&got, i ? ", " : "", "[", ranges[i].first, ", ",
                        ranges[i].second, ")");
      }
      if (ranges.size() > 4) absl::StrAppend(&got, ", ...");
      FinishLocked(job, FAILED,
                   absl::StrCat("data accounting: the ", total,
                                " updates should consume stream positions [0, ",
                                want, ") once each; shard 0 applied ",
                                got.empty() ? "none" : got, " with ",
                                job.ledger.twice(), " applied twice"));
      return;
    }
  }
  if (task == PREPROCESS) {
    // The cleaning reports of the items, merged in item order.
    nlohmann::ordered_json merged = nlohmann::ordered_json::object();
    for (const Item& item : job.work) {
      if (item.result.report_json().empty()) continue;
      nlohmann::ordered_json j = nlohmann::ordered_json::parse(
          item.result.report_json(), nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) continue;
      MergeCounts(j, &merged);
    }
    job.status.set_preprocess_report(merged.dump());
  }
  FinishLocked(job, SUCCEEDED, "");
}

}  // namespace bertps

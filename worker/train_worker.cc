#include "worker/train_worker.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/cluster/memory_plan.h"
#include "common/io/file_util.h"
#include "common/kernels/threads.h"
#include "common/model/batch_view.h"
#include "common/optim/optimizer.h"
#include "common/status.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"
#include "worker/batch_reader.h"
#include "worker/checkpoint_finisher.h"

namespace bertps {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The slots a worker computes, ascending: its own and also_workers.
std::vector<int> SlotsOf(const TrainWorkerOptions& o) {
  std::vector<int> v = o.also_workers;
  v.push_back(o.worker);
  std::sort(v.begin(), v.end());
  return v;
}


}  // namespace

TrainWorker::TrainWorker(const TrainWorkerOptions& options)
    : options_(options),
      slots_(SlotsOf(options)),
      read_slots_(slots_),
      mm_(options.precision),
      prepare_thread_(std::make_unique<SerialThread>("train prepare")) {}
TrainWorker::~TrainWorker() = default;

absl::StatusOr<std::unique_ptr<TrainWorker>> TrainWorker::Create(
    const TrainWorkerOptions& o) {
  const JobPlan& plan = o.plan;
  if (o.worker < 0 || o.worker >= plan.replicas) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker index ", o.worker, " outside [0, ", plan.replicas, ")"));
  }
  if (plan.batch <= 0 || plan.batch > (1 << 20) || plan.updates < 0) {
    return absl::InvalidArgumentError(
        "batch must be in [1, 2^20] and steps >= 0");
  }
  if (!(o.simulate_compute_ms >= 0) || o.simulate_compute_ms > 3.6e6) {
    return absl::InvalidArgumentError(absl::StrCat(
        "simulate_compute_ms must be in [0, 3600000], got ",
        o.simulate_compute_ms));
  }
  if (plan.accumulation < 1 || plan.accumulation > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "accumulation must be in [1, 1024], got ", plan.accumulation));
  }
  if (o.data.empty()) return absl::InvalidArgumentError("no training data");
  if (!o.also_workers.empty() || o.slot_feed != nullptr) {
    if (plan.mode != BSP) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a worker computes several slots only under BSP, not ",
          ConsistencyMode_Name(plan.mode),
          " (its pushes are updates of their own)"));
    }
    const std::vector<int> all = SlotsOf(o);
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i] < 0 || all[i] >= plan.replicas ||
          (i > 0 && all[i] == all[i - 1])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "worker slot ", all[i], " is outside [0, ", plan.replicas,
            ") or named twice"));
      }
    }
  }
  if (SlotsOf(o).front() == 0) {  // slot 0's holder: exports, checkpoints
    // Worker 0 writes these at the end of the run: found unwritable now,
    // not after all the training.
    if (IsHfModelDir(o.export_path)) {
      RETURN_IF_ERROR(io::CheckWritableDir(
          o.export_path, absl::StrCat("export_path ", o.export_path)));
    } else if (!o.export_path.empty()) {
      const size_t slash = o.export_path.rfind('/');
      RETURN_IF_ERROR(io::CheckWritableDir(
          slash == std::string::npos ? "." : o.export_path.substr(0, slash),
          absl::StrCat("export_path ", o.export_path)));
    }
    if (!o.export_hf.vocab_path.empty()) {
      // Copied into the export directory at the end: checked now.
      absl::Status v =
          CheckHfVocabulary(o.export_hf.vocab_path, o.config.vocab_size);
      if (!v.ok()) return Annotate(v, "vocab");
    }
    if (!o.checkpoint_dir.empty()) {
      RETURN_IF_ERROR(io::CheckWritableDir(
          o.checkpoint_dir, absl::StrCat("checkpoint dir ", o.checkpoint_dir)));
    }
  }
  std::unique_ptr<TrainWorker> w(new TrainWorker(o));
  PsClientOptions po = o.ps;
  po.pull_bf16_products =
      w->mm_.precision() == kernels::Precision::kBf16 && !o.pull_fp32;
  ASSIGN_OR_RETURN(w->client_, PsClient::Connect(po, o.config, o.task));
  // The shards serve the same plan: its workers and its mode.
  const DescribeResponse& d = w->client_->description(0);
  if (d.num_workers() != plan.pushers) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the shards expect ", d.num_workers(),
        " workers, this worker's plan has ", plan.pushers));
  }
  if (d.mode() != plan.mode) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the shards run ", ConsistencyMode_Name(d.mode()),
        ", this worker's plan ", ConsistencyMode_Name(plan.mode)));
  }
  if ((!o.also_workers.empty() || o.slot_feed != nullptr) &&
      d.backup_workers() > 0) {
    return absl::FailedPreconditionError(
        "a worker computes several slots only without backup workers (a "
        "step may end without a slot's push)");
  }
  // The data through its record indices (built once per file, or loaded);
  // sequence and prediction lengths from the first example.
  ASSIGN_OR_RETURN(w->source_,
                   io::IndexedExampleSource::Open(
                       o.data,
                       o.index_cache_dir.empty() ? io::DefaultIndexCacheDir()
                                                 : o.index_cache_dir,
                       o.expected_files));
  w->source_->set_shuffle(o.shuffle, o.seed);
  w->source_->set_max_open_files(o.max_open_files);
  std::string record;
  RETURN_IF_ERROR(w->source_->Read(0, &record));
  if (o.task == BertTask::kPretrain) {
    ASSIGN_OR_RETURN(io::PretrainExample e, io::DecodePretrainExample(record));
    w->seq_ = static_cast<int>(e.input_ids.size());
    w->preds_ = static_cast<int>(e.masked_lm_ids.size());
  } else {
    ASSIGN_OR_RETURN(io::ClassifyExample e, io::DecodeClassifyExample(record));
    w->seq_ = static_cast<int>(e.input_ids.size());
  }
  if (o.simulate_compute_ms > 0) {
    // Parameters and gradients each in one tile mapped over the model's
    // length: the pulls and pushes copy every byte as a real worker's do,
    // but the worker holds two tiles, not two copies of the model.
    const int64_t n = w->client_->layout().total_size();
    ASSIGN_OR_RETURN(w->sim_params_, TiledBuffer::Create(n));
    ASSIGN_OR_RETURN(w->sim_grads_, TiledBuffer::Create(n));
    w->memory_need_.bytes = static_cast<int64_t>(
        w->sim_params_.resident_bytes() + w->sim_grads_.resident_bytes());
    w->memory_need_.detail = absl::StrCat(n, " parameters, simulated compute");
    w->memory_limit_ =
        o.memory_limit.bytes > 0 ? o.memory_limit : DetectMemoryLimit();
    RETURN_IF_ERROR(CheckFits(absl::StrCat("train worker ", o.worker),
                              w->memory_need_.bytes, w->memory_need_.detail,
                              w->memory_limit_, kMemoryHeadroom));
    // Fixed, small, finite, of both signs: a function of the index within
    // the tile alone (element i is element i % tile).
    float* g = w->sim_grads_.data();
    for (int64_t i = 0; i < std::min(n, w->sim_grads_.tile_elements()); ++i) {
      const uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
      g[i] = 1e-4f * (static_cast<float>((h >> 16) % 2001) - 1000.f) / 1000.f;
    }
  } else {
    w->memory_need_ =
        TrainWorkerMemoryNeed(o.config, o.task, static_cast<int>(plan.batch),
                              w->seq_, w->preds_);
    w->memory_limit_ =
        o.memory_limit.bytes > 0 ? o.memory_limit : DetectMemoryLimit();
    RETURN_IF_ERROR(CheckFits(absl::StrCat("train worker ", o.worker),
                              w->memory_need_.bytes, w->memory_need_.detail,
                              w->memory_limit_, kMemoryHeadroom));
    if (w->mm_.precision() != o.precision) {
      LOG(WARNING) << "the job asks for "
                   << kernels::PrecisionName(o.precision)
                   << " products; this CPU has no native bf16 (oneDNN: "
                   << kernels::Bf16Hardware() << "), so this worker computes "
                   << kernels::PrecisionName(w->mm_.precision())
                   << " (its step reports say so)";
    }
    absl::StatusOr<std::unique_ptr<BertModel<float>>> model =
        BertModel<float>::Create(o.config, o.task,
                                 static_cast<int>(plan.batch), w->seq_,
                                 std::max(w->preds_, 1), &w->mm_);
    if (!model.ok()) {
      if (model.status().code() == absl::StatusCode::kResourceExhausted) {
        return w->MemoryError(model.status().message());
      }
      return model.status();
    }
    w->model_ = *std::move(model);
  }
  // Forward's parameter groups: the embeddings but the word table (whose
  // rows come first), each layer, the rest (with the whole word table).
  w->groups_.assign(ParamGroupRest(o.config) + 1, {});
  const auto& tensors = w->layout().tensors();
  for (size_t t = 0; t < tensors.size(); ++t) {
    const std::string& name = tensors[t].name;
    int g = ParamGroupRest(o.config);
    int layer = -1;
    if (name != "bert.embeddings.word_embeddings.weight" &&
        absl::StartsWith(name, "bert.embeddings.")) {
      g = kParamGroupEmbeddings;
    } else if (std::sscanf(name.c_str(), "bert.encoder.layer.%d.", &layer) == 1) {
      g = ParamGroupOfLayer(layer);
    }
    w->groups_[g].push_back(static_cast<int>(t));
  }
  return w;
}

absl::Status TrainWorker::MemoryError(absl::string_view cause) const {
  return OutOfMemoryError(absl::StrCat("train worker ", options_.worker),
                          cause, memory_need_.bytes, memory_need_.detail,
                          memory_limit_);
}

absl::Status TrainWorker::ReadBatch(int64_t step, io::BertBatch* out) {
  // Each slot w's E = B x accumulation examples of global batch `step`,
  // read where they lie (the stream wraps around at the end of the data:
  // epochs), in slot order.
  std::vector<int64_t> firsts;
  {
    absl::MutexLock l(&read_mu_);
    for (int slot : read_slots_) {
      firsts.push_back(options_.plan.FirstExample(slot, step));
    }
  }
  return ReadExampleRanges(source_.get(), firsts, push_examples(),
                           {options_.task, seq_, preds_}, options_.config,
                           out);
}

std::vector<int> TrainWorker::SlotsFor(int64_t step) {
  std::vector<int> current;
  {
    absl::MutexLock l(&read_mu_);
    current = read_slots_;
  }
  if (options_.slot_feed == nullptr) return current;
  std::vector<int> want = options_.slot_feed->Get();
  std::sort(want.begin(), want.end());
  if (want == current) return current;
  auto has = [](const std::vector<int>& v, int k) {
    return std::find(v.begin(), v.end(), k) != v.end();
  };
  bool valid = has(want, options_.worker) && has(want, 0) == has(current, 0);
  for (size_t i = 0; i < want.size(); ++i) {
    valid = valid && want[i] >= 0 && want[i] < options_.plan.replicas &&
            (i == 0 || want[i] != want[i - 1]);
  }
  if (!valid) return current;  // the member starts this part again
  LOG(INFO) << "worker " << options_.worker << ": slots "
            << absl::StrJoin(current, ",") << " become "
            << absl::StrJoin(want, ",") << " at step " << step;
  // Batches read ahead are of the old slots: read again from this step.
  const bool prefetching = prefetcher_ != nullptr;
  prefetcher_.reset();
  {
    absl::MutexLock l(&read_mu_);
    read_slots_ = want;
  }
  if (prefetching) {
    const int64_t steps = options_.plan.WorkerSteps(options_.worker);
    prefetcher_ = std::make_unique<io::BatchPrefetcher>(
        [this](int64_t t, io::BertBatch* out) { return ReadBatch(t, out); },
        options_.prefetch_batches, step, std::max(step, steps));
  }
  return want;
}

absl::Status TrainWorker::Prepare(int64_t step, io::BertBatch* batch,
                                  std::vector<int>* slots,
                                  double* mlm_denominator,
                                  double* example_denominator,
                                  double* wait_ms, double* input_ms,
                                  Clock::time_point* read_done) {
  const bool bsp = options_.plan.mode == BSP;
  const auto r0 = Clock::now();
  *slots = SlotsFor(step);
  RETURN_IF_ERROR(prefetcher_ != nullptr ? prefetcher_->Take(step, batch)
                                         : ReadBatch(step, batch));
  const auto r1 = Clock::now();
  if (input_ms != nullptr) *input_ms += Ms(r0, r1);
  if (read_done != nullptr) *read_done = r1;
  *mlm_denominator = 0;
  *example_denominator = 0;
  if (bsp && client_->description(0).backup_workers() == 0) {
    // Global loss denominators, so that the pushes add up to one big
    // batch's gradient.
    // (Every slot's batch at once: shard 0 answers when all are known.)
    const auto t0 = Clock::now();
    std::vector<AnnounceRequest> requests(slots->size());
    const size_t per_slot = batch->masked_lm_weights.size() / slots->size();
    for (size_t j = 0; j < slots->size(); ++j) {
      AnnounceRequest& a = requests[j];
      a.set_worker((*slots)[j]);
      a.set_step(step);
      double w = 0;
      for (size_t i = j * per_slot; i < (j + 1) * per_slot; ++i) {
        w += batch->masked_lm_weights[i];
      }
      a.set_mlm_weight(w);
      a.set_examples(push_examples());
    }
    AnnounceResponse totals;
    if (requests.size() == 1) {
      ASSIGN_OR_RETURN(totals, client_->Announce(requests[0]));
    } else {
      ASSIGN_OR_RETURN(std::vector<AnnounceResponse> all,
                       client_->AnnounceAll(requests));
      totals = all[0];
    }
    *mlm_denominator = totals.mlm_weight_total() + 1e-5;
    *example_denominator = static_cast<double>(totals.examples_total());
    *wait_ms += Ms(t0, Clock::now());
  }
  return absl::OkStatus();
}

absl::Status TrainWorker::Run() {
  kernels::UseConfiguredThreads();  // a member runs this on its own thread
  const JobPlan& plan = options_.plan;
  const bool bsp = plan.mode == BSP;
  const int worker = options_.worker;
  // This worker's steps: those whose update tickets are in the plan.
  const int64_t steps = plan.WorkerSteps(worker);
  // A restarted worker joins at the shards' current step.
  int64_t start = 0;
  int64_t applied = 0;  // the shards' version
  {
    ASSIGN_OR_RETURN(std::vector<StatsResponse> stats, client_->Stats());
    applied = stats[0].version();
    start = bsp ? applied : stats[0].worker_clock(worker);
  }
  // Slot 0's holder writes the checkpoints and the export.
  const bool checkpoints = HasSlot(0) && !options_.checkpoint_dir.empty() &&
                           plan.checkpoints;
  // ASP/SSP: the shards hold the tickets at or past each cut until its
  // checkpoint is written (JobPlan::NextCut); worker 0 writes every
  // checkpoint due up to a ticket before pushing it.
  int64_t next_checkpoint = plan.NextCheckpoint(applied);
  // The batches of steps [start, steps) are read ahead.
  prefetcher_ = std::make_unique<io::BatchPrefetcher>(
      [this](int64_t step, io::BertBatch* out) { return ReadBatch(step, out); },
      options_.prefetch_batches, start, std::max(start, steps));
  // Complete checkpoints not reported yet, oldest first.
  std::vector<CheckpointFinisher::Done> reportable;
  bool final_written = false;
  // `unless_past`: nothing if the shards are past `version` already;
  // `unless_pushed` also nothing if a shard holds this worker's push of
  // that step (PsClient::CheckpointUnlessPast).
  // Asynchronous checkpoints (the default): the step waits only while the
  // shards copy their state; `finisher` completes each one.
  std::unique_ptr<CheckpointFinisher> finisher;
  if (checkpoints && !options_.synchronous_checkpoints) {
    finisher = std::make_unique<CheckpointFinisher>(client_.get(),
                                                    options_.log);
  }
  // What the finisher completed, for the next report.
  auto take_finished = [&](bool drain) -> absl::Status {
    if (finisher == nullptr) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::vector<CheckpointFinisher::Done> d,
                     drain ? finisher->Drain() : finisher->Take());
    for (CheckpointFinisher::Done& done : d) {
      reportable.push_back(std::move(done));
    }
    return absl::OkStatus();
  };
  // A step's report, naming the newest checkpoint not reported yet and,
  // in earlier_checkpoints, the older ones.
  auto report = [&](TrainStepReport& rep) {
    for (size_t i = 0; i < reportable.size(); ++i) {
      if (i + 1 < reportable.size()) {
        rep.earlier_checkpoints.push_back(
            {std::move(reportable[i].manifest), reportable[i].version});
      } else {
        rep.checkpoint = std::move(reportable[i].manifest);
        rep.checkpoint_version = reportable[i].version;
      }
    }
    reportable.clear();
    if (options_.on_step) options_.on_step(rep);
  };
  // A started checkpoint: to the finisher (logged with what the step
  // waited for it).
  auto started = [&](int64_t version,
                     std::optional<PsClient::PendingCheckpoint> p,
                     double blocked_ms) {
    if (!p.has_value()) return;
    if (options_.log) {
      // What the step waited for: the shards' copy (and a write of the
      // previous checkpoint still in flight), or, overlapped, what of it
      // the next step's pull and compute did not cover.
      nlohmann::ordered_json j;
      j["checkpoint_started"] = version;
      j["blocked_ms"] = blocked_ms;
      j["copy_ms"] = p->copy_ms;
      *options_.log << j.dump() << std::endl;
    }
    finisher->Add(*std::move(p));
  };
  // BSP: a cut's START runs beside the next step's pull and compute, and
  // that step's push waits for its answer (before_push_): the shards copy
  // the cut's state before the next update can begin (it needs this
  // worker's push), and the step does not wait for the update of the cut
  // to end nor for the copy, unless they take longer than a pull and a
  // forward and backward.
  std::future<absl::StatusOr<std::optional<PsClient::PendingCheckpoint>>>
      starting;
  int64_t starting_version = -1;
  // However Run() ends, no later step calls into this Run's locals.
  auto clear_hook = absl::MakeCleanup([this] { before_push_ = nullptr; });
  auto resolve_start = [&]() -> absl::Status {
    before_push_ = nullptr;
    if (!starting.valid()) return absl::OkStatus();
    const auto t0 = Clock::now();
    absl::StatusOr<std::optional<PsClient::PendingCheckpoint>> p =
        starting.get();
    RETURN_IF_ERROR(p.status());
    started(starting_version, *std::move(p),
            std::chrono::duration<double, std::milli>(Clock::now() - t0)
                .count());
    return absl::OkStatus();
  };
  // A checkpoint the step waits for whole (the final one; one written
  // again by a part started again; every one when synchronous). Those in
  // the background are complete first, so LATEST moves forward only.
  auto write_checkpoint = [&](int64_t version, bool unless_past = false,
                              bool unless_pushed = false) -> absl::Status {
    RETURN_IF_ERROR(resolve_start());
    RETURN_IF_ERROR(take_finished(/*drain=*/true));
    const auto t0 = Clock::now();
    if (unless_past) {
      ASSIGN_OR_RETURN(std::optional<std::string> m,
                       client_->CheckpointUnlessPast(
                           options_.checkpoint_dir, version,
                           unless_pushed ? 0 : -1));
      if (!m.has_value()) {
        if (unless_pushed) {
          LOG(INFO) << "worker 0 started again at step " << version
                    << ": its checkpoint is not written again (a shard is "
                    << "past it or holds worker 0's push of it, pushed after "
                    << "the checkpoint)";
        }
        return absl::OkStatus();
      }
      reportable.push_back({*std::move(m), version});
    } else {
      ASSIGN_OR_RETURN(std::string m,
                       client_->Checkpoint(options_.checkpoint_dir, version));
      reportable.push_back({std::move(m), version});
    }
    if (options_.log) {
      nlohmann::ordered_json j;
      j["checkpoint"] = reportable.back().manifest;
      j["version"] = version;
      // What the step waited for: the whole write.
      j["blocked_ms"] = std::chrono::duration<double, std::milli>(
                            Clock::now() - t0)
                            .count();
      *options_.log << j.dump() << std::endl;
    }
    return absl::OkStatus();
  };
  // A checkpoint before the last update: in the background, or whole when
  // synchronous. `unless_past` as in write_checkpoint; `overlapped` (BSP)
  // as resolve_start says.
  auto cut_checkpoint = [&](int64_t version, bool unless_past = false,
                            bool overlapped = false) -> absl::Status {
    if (finisher == nullptr) return write_checkpoint(version, unless_past);
    RETURN_IF_ERROR(resolve_start());
    auto start = [this, version, unless_past]()
        -> absl::StatusOr<std::optional<PsClient::PendingCheckpoint>> {
      if (unless_past) {
        return client_->StartCheckpointUnlessPast(options_.checkpoint_dir,
                                                  version);
      }
      ASSIGN_OR_RETURN(PsClient::PendingCheckpoint p,
                       client_->StartCheckpoint(options_.checkpoint_dir,
                                                version));
      return std::optional<PsClient::PendingCheckpoint>(std::move(p));
    };
    if (overlapped) {
      starting = std::async(std::launch::async, start);
      starting_version = version;
      before_push_ = resolve_start;
      return absl::OkStatus();
    }
    const auto t0 = Clock::now();
    ASSIGN_OR_RETURN(std::optional<PsClient::PendingCheckpoint> p, start());
    started(version, std::move(p),
            std::chrono::duration<double, std::milli>(Clock::now() - t0)
                .count());
    return absl::OkStatus();
  };
  // ASP/SSP: the checkpoints due before update `ticket` (the cuts below
  // the last update).
  auto write_cuts_before = [&](int64_t ticket) -> absl::Status {
    for (; next_checkpoint > 0 && next_checkpoint <= ticket &&
           next_checkpoint < plan.updates;
         next_checkpoint = plan.NextCheckpoint(next_checkpoint)) {
      RETURN_IF_ERROR(cut_checkpoint(next_checkpoint));
    }
    return absl::OkStatus();
  };
  // BSP: a worker 0 started again at a checkpoint's step may have ended
  // between that step and its checkpoint: the checkpoint is written now (the
  // same bits again if it was), so none is skipped. The shards hold that
  // version until this slot pushes (a slot taken back may run briefly on
  // two members) -- unless one holds this slot's push of it already: after
  // a failover a shard may be inside that step, waiting for the norms of
  // the promoted peer, which waits for this slot's push again, so a
  // checkpoint would wait for ever (docs/ps.md "Replicas").
  if (checkpoints && bsp && start < plan.updates && plan.CheckpointDue(start)) {
    // (Past it, or this slot's push of it held: the member that pushed
    // that step wrote it.)
    RETURN_IF_ERROR(write_checkpoint(start, /*unless_past=*/true,
                                     /*unless_pushed=*/true));
  }
  auto begin = Clock::now();
  int64_t examples_done = 0;  // by this worker's slots since `begin`
  double loss_sum = 0;
  int64_t count = 0;
  TrainStepReport sum;
  for (int64_t step = start; step < steps; ++step) {
    if (options_.cancel != nullptr && options_.cancel->load()) {
      return absl::CancelledError("the job was stopped");
    }
    if (checkpoints && !bsp) {
      RETURN_IF_ERROR(write_cuts_before(plan.Ticket(worker, step)));
    }
    ASSIGN_OR_RETURN(std::vector<TrainStepReport> reps, StepSlots(step));
    examples_done += push_examples() * static_cast<int64_t>(reps.size());
    // The step's timings are in each slot's report (each slot's own
    // compute); the log sums the first's, with every slot's loss.
    const TrainStepReport& rep = reps[0];
    for (const TrainStepReport& r : reps) {
      loss_sum += r.loss / static_cast<double>(reps.size());
    }
    ++count;
    sum.pull_ms += rep.pull_ms;
    sum.pull_bytes += rep.pull_bytes;
    sum.compute_ms += rep.compute_ms;
    sum.compute_cpu_ms += rep.compute_cpu_ms;
    sum.push_ms += rep.push_ms;
    sum.wait_ms += rep.wait_ms;
    sum.input_ms += rep.input_ms;
    // BSP: worker 0 writes the checkpoints the plan has due (every
    // checkpoint_every steps and after the last step) before reporting the
    // step, so the report names the manifest (the coordinator evaluates it).
    // (Unless the shards are past it: a slot being taken back runs on two
    // members for a moment, and the other one wrote it.)
    if (checkpoints && bsp && plan.CheckpointDue(step + 1)) {
      if (step + 1 < plan.updates) {
        RETURN_IF_ERROR(cut_checkpoint(step + 1, /*unless_past=*/true,
                                       /*overlapped=*/true));
      } else {
        RETURN_IF_ERROR(write_checkpoint(step + 1, /*unless_past=*/true));
      }
    }
    const bool last = step + 1 >= steps;
    if (checkpoints && !bsp && last) {
      // The remaining cuts, then the last update (every worker's pushes),
      // before this step's report so that it names the final checkpoint.
      RETURN_IF_ERROR(write_cuts_before(plan.updates));
      RETURN_IF_ERROR(write_checkpoint(plan.updates));
      final_written = true;
    }
    // The checkpoint completed (in the background) or written while this
    // step was done.
    RETURN_IF_ERROR(take_finished(/*drain=*/false));
    for (TrainStepReport& r : reps) report(r);  // checkpoints with the first
    if (options_.log && ((step + 1) % options_.log_every == 0 || last)) {
      const double secs =
          std::chrono::duration<double>(Clock::now() - begin).count();
      nlohmann::ordered_json j;
      j["worker"] = options_.worker;
      j["step"] = step + 1;
      j["loss"] = loss_sum / count;
      const int64_t examples = examples_done;
      j["examples_per_sec"] = examples / secs;
      j["tokens_per_sec"] = examples * seq_ / secs;
      j["pull_ms"] = sum.pull_ms / count;
      j["pull_bytes"] = sum.pull_bytes / count;
      j["compute_ms"] = sum.compute_ms / count;
      j["compute_cpu_ms"] = sum.compute_cpu_ms / count;
      j["push_ms"] = sum.push_ms / count;
      j["wait_ms"] = sum.wait_ms / count;
      j["input_ms"] = sum.input_ms / count;
      *options_.log << j.dump() << std::endl;
      loss_sum = 0;
      count = 0;
      sum = TrainStepReport();
    }
  }
  if (checkpoints && !bsp && !final_written) {
    // Restarted after its last step: the final checkpoint all the same,
    // reported with a repeat of that step (counted once).
    RETURN_IF_ERROR(write_cuts_before(plan.updates));
    RETURN_IF_ERROR(write_checkpoint(plan.updates));
    if (start > 0) {
      TrainStepReport rep;
      rep.slot = options_.worker;
      rep.step = start - 1;
      rep.version = plan.updates;
      report(rep);
    }
  }
  // Every checkpoint complete (the last one was waited for; this only
  // surfaces an error of one before it).
  RETURN_IF_ERROR(resolve_start());
  RETURN_IF_ERROR(take_finished(/*drain=*/true));
  if (HasSlot(0) && !options_.export_path.empty()) {
    // Wait for the last update to be applied everywhere (every mode). The
    // pull names the version, not a step of this worker's: step 0 (SSP
    // would otherwise wait for every worker's clock to reach `updates` -
    // staleness, which under ASP/SSP counts a worker's own steps, about
    // updates / N, and never comes).
    std::vector<float> scratch(layout().total_size());
    RETURN_IF_ERROR(
        client_->Pull(0, plan.updates, /*step=*/0, scratch.data()).status());
    RETURN_IF_ERROR(client_->Export(options_.export_path, options_.export_hf));
  }
  return absl::OkStatus();
}

}  // namespace bertps

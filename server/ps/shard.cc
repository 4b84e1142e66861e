// ShardCore: creation, the published snapshots that pulls read, Describe
// and Stats. Pushes: shard_push.cc; the update: shard_update.cc; exchanges
// between shards: shard_exchange.cc; checkpoints: shard_checkpoint.cc.
#include "server/ps/shard.h"

#include <algorithm>
#include <cerrno>
#include <functional>
#include <new>
#include <system_error>
#include <cstdio>
#include <cmath>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/model/weights.h"
#include "glog/logging.h"
#include "common/cluster/memory_plan.h"
#include "common/io/half.h"
#include "common/status.h"
#include "common/ps/checkpoint.h"

namespace bertps {
namespace ps {

absl::Status Snapshot::WaitFirst(absl::Time deadline) const {
  absl::MutexLock l(&mu);
  auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return first_done || !failed.ok();
  };
  if (!mu.AwaitWithDeadline(absl::Condition(&done), deadline)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "version ", version, ": the update's first rows not done in time"));
  }
  return failed;
}

absl::Status Snapshot::WaitSlices(int count, absl::Time deadline) const {
  absl::MutexLock l(&mu);
  auto done = [this, count]() ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return slices_done >= count || !failed.ok();
  };
  if (!mu.AwaitWithDeadline(absl::Condition(&done), deadline)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "version ", version, ": the update not done in time"));
  }
  return failed;
}

bool Snapshot::Complete() const {
  absl::MutexLock l(&mu);
  return slices_done == kAllSlices && first_done;
}

bool Snapshot::FirstReady() const {
  absl::MutexLock l(&mu);
  return first_done || !failed.ok();
}

bool Snapshot::SlicesReady(int count) const {
  absl::MutexLock l(&mu);
  return slices_done >= count || !failed.ok();
}

ShardCore::ShardCore(const ShardOptions& options, PeerLink* peers,
                     ReplicaLink* replicas, ParamLayout layout,
                     PartitionPlan plan)
    : options_(options),
      peers_(peers),
      replicas_(replicas),
      layout_(std::move(layout)),
      plan_(std::move(plan)),
      state_slots_(optim::StateSlots(options.optimizer)),
      waits_(std::make_unique<Waitlist>("shard-waits")),
      finish_thread_(std::make_unique<SerialThread>("push-finish")),
      writer_(std::make_unique<CheckpointWriter>(
          options.fs, options.shard, options.num_shards)) {}

ShardCore::~ShardCore() {
  // Calls still waiting get their answer (the core is whole until they
  // did), pushes being finished end, then the update queued last runs to
  // its end.
  waits_->Stop();
  finish_thread_.reset();
  update_thread_.reset();
  background_thread_.reset();
  writer_.reset();  // the checkpoint being written is written whole
}

void ShardCore::Abort(const absl::Status& why) {
  {
    absl::MutexLock l(&mu_);
    if (broken_.ok()) broken_ = why;
  }
  waits_->Poke();
  absl::MutexLock l(&ex_mu_);
  if (aborted_.ok()) aborted_ = why;
  stop_sending_ = true;
}

static absl::Status LoadInitialWeights(const std::string& path,
                                       const ParamLayout& layout,
                                       float* full) {
  std::string file = path;
  std::string tmp;
  if (absl::EndsWith(path, "manifest.json")) {
    // A checkpoint (e.g. of pretraining): exported once to safetensors, so
    // the shared encoder tensors load by name into this task's layout.
    tmp = absl::StrCat(path, ".init-", getpid(), ".safetensors");
    RETURN_IF_ERROR(ExportCheckpoint(path, tmp));
    file = tmp;
  }
  absl::StatusOr<WeightsReport> r =
      LoadBertWeights(file, layout, AllowMissing::kHeads, full);
  if (!tmp.empty()) std::remove(tmp.c_str());
  if (!r.ok()) return Annotate(r.status(), absl::StrCat("init_weights ", path));
  LOG(INFO) << "init_weights " << path << ": " << r->loaded.size()
            << " tensors loaded, " << r->missing.size()
            << " left initialised (task head), " << r->skipped.size()
            << " skipped";
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ShardCore>> ShardCore::Create(
    const ShardOptions& o, PeerLink* peers, ReplicaLink* replicas) {
  RETURN_IF_ERROR(o.config.Validate());
  RETURN_IF_ERROR(optim::ValidateConfig(o.optimizer));
  if (o.num_shards < 1 || o.shard < 0 || o.shard >= o.num_shards) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard index ", o.shard, " outside [0, ", o.num_shards, ")"));
  }
  const JobPlan& jp = o.job_plan;
  if (jp.pushers < 1) {
    return absl::InvalidArgumentError("the plan's workers must be >= 1");
  }
  if (jp.consistent_cuts && jp.checkpoint_every < 1) {
    return absl::InvalidArgumentError("consistent cuts need checkpoint_every");
  }
  // One schedule: the plan's (the optimizer config's copy must agree).
  if (o.optimizer.learning_rate != jp.learning_rate ||
      o.optimizer.warmup_steps != jp.warmup_updates ||
      o.optimizer.total_steps != jp.updates) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer schedule (learning_rate ", o.optimizer.learning_rate,
        ", warmup_steps ", o.optimizer.warmup_steps, ", total_steps ",
        o.optimizer.total_steps, ") differs from the job plan's (",
        jp.learning_rate, ", ", jp.warmup_updates, ", ", jp.updates, ")"));
  }
  if (o.backup_workers < 0 || o.backup_workers >= jp.pushers) {
    return absl::InvalidArgumentError(
        absl::StrCat("backup_workers must be in [0, num_workers), got ",
                     o.backup_workers));
  }
  if (o.staleness < 0) return absl::InvalidArgumentError("staleness < 0");
  if (o.term < 0) return absl::InvalidArgumentError("term < 0");
  if (o.num_shards > 1 && peers == nullptr) {
    return absl::InvalidArgumentError("several shards need a PeerLink");
  }
  ParamLayout layout = ParamLayout::ForBert(o.config, o.task);
  ASSIGN_OR_RETURN(PartitionPlan plan, PartitionPlan::Make(layout, o.num_shards));
  ASSIGN_OR_RETURN(MemoryNeed need,
                   ShardMemoryNeed(o.config, o.task, o.optimizer, o.num_shards,
                                   jp.pushers, o.shard));
  const MemoryLimit limit =
      o.memory_limit.bytes > 0 ? o.memory_limit : DetectMemoryLimit();
  const std::string what = absl::StrCat("parameter-server shard ", o.shard);
  RETURN_IF_ERROR(
      CheckFits(what, need.bytes, need.detail, limit, kMemoryHeadroom));
  // Short of memory after all (the estimate is below what the process
  // really maps): an error naming the need and the limit, not an abort.
  try {
    return Make(o, peers, replicas, std::move(layout), std::move(plan));
  } catch (const std::bad_alloc&) {
    return OutOfMemoryError(what, "std::bad_alloc", need.bytes, need.detail,
                            limit);
  } catch (const std::system_error& e) {
    return OutOfMemoryError(what, e.what(), need.bytes, need.detail, limit);
  }
}

absl::StatusOr<std::unique_ptr<ShardCore>> ShardCore::Make(
    const ShardOptions& o, PeerLink* peers, ReplicaLink* replicas,
    ParamLayout layout, PartitionPlan plan) {
  const JobPlan& jp = o.job_plan;
  std::unique_ptr<ShardCore> core(
      new ShardCore(o, peers, replicas, std::move(layout), std::move(plan)));
  ShardCore& c = *core;
  const int64_t n = c.shard_size();
  // The same initial values as a single process with this seed: initialise
  // the whole model, keep this shard's slices.
  std::vector<float> full(c.layout_.total_size());
  InitBertParams(c.layout_, o.config, o.init_seed, full.data());
  if (!o.init_weights.empty()) {
    RETURN_IF_ERROR(LoadInitialWeights(o.init_weights, c.layout_, full.data()));
  }
  absl::MutexLock ul(&c.update_mu_);
  absl::MutexLock l(&c.mu_);
  c.params_.resize(n);
  for (int i : c.local_slices()) {
    const SliceSpec& s = c.plan_.slices()[i];
    const int64_t base = c.layout_.tensors()[s.tensor].offset;
    std::memcpy(c.params_.data() + s.shard_offset, full.data() + base + s.begin,
                sizeof(float) * s.size());
    c.by_name_[s.name].push_back(i);
  }
  c.state_.assign(static_cast<size_t>(c.state_slots_) * n, 0.0f);
  if (optim::NeedsTrustRatio(o.optimizer.kind)) c.update_scratch_.resize(n);
  c.aggregate_.resize(n);
  for (size_t t = 0; t < c.layout_.tensors().size(); ++t) {
    if (c.plan_.pieces(static_cast<int>(t)) > 1) {
      c.split_tensors_.push_back(static_cast<int>(t));
    }
  }
  // Update order: the word embedding last.
  for (bool word : {false, true}) {
    for (int i : c.local_slices()) {
      const bool is_word = c.plan_.slices()[i].name ==
                           "bert.embeddings.word_embeddings.weight";
      if (is_word == word) c.update_order_.push_back(i);
    }
  }
  // Update groups: contiguous runs of local slices, cut at equal shares of
  // the shard's elements.
  {
    const auto& local = c.local_slices();
    const int groups = std::max<int>(
        1, std::min<int>(o.update_threads, static_cast<int>(local.size())));
    c.update_groups_.assign(groups, {});
    int64_t done = 0;
    int g = 0;
    for (int i : local) {
      c.update_groups_[g].push_back(i);
      done += c.plan_.slices()[i].size();
      if (g + 1 < groups && done * groups >= (g + 1) * n) ++g;
    }
    while (!c.update_groups_.empty() && c.update_groups_.back().empty()) {
      c.update_groups_.pop_back();
    }
    if (c.update_groups_.size() > 1) {
      c.group_pool_ = std::make_unique<Eigen::ThreadPool>(
          static_cast<int>(c.update_groups_.size()) - 1,
          /*allow_spinning=*/false);
    }
  }
  c.update_thread_ = std::make_unique<SerialThread>("shard update");
  c.background_thread_ =
      std::make_unique<SerialThread>("shard update (rest)", o.update_nice);
  c.backup_ = o.backup;
  c.term_ = o.term;
  c.last_step_.assign(jp.pushers, -1);
  c.clock_.assign(jp.pushers, 0);
  c.next_cut_ = jp.NextCut(0);
  c.PublishLocked();
  if (jp.checkpoints) {
    // The checkpoint buffer: the file's tensors and a generous header.
    const int64_t slices =
        static_cast<int64_t>(c.plan_.shard_slices(o.shard).size());
    c.writer_->Prefault(int64_t{4} * (1 + c.state_slots_) * c.shard_size() +
                        (int64_t{1} << 20) + 512 * (1 + c.state_slots_) * slices);
  }
  return core;
}

std::shared_ptr<Snapshot> ShardCore::FreeSnapshotLocked() {
  // Reuse a snapshot buffer no pull holds any more.
  for (auto& s : snapshot_pool_) {
    if (s.use_count() == 1 && s != published_ && s != pending_) {
      absl::MutexLock l(&s->mu);
      s->first_done = true;
      s->slices_done = Snapshot::kAllSlices;
      s->failed = absl::OkStatus();
      s->first_tensor = -1;
      s->first_rows.clear();
      return s;
    }
  }
  auto snap = std::make_shared<Snapshot>();
  snapshot_pool_.push_back(snap);
  return snap;
}

void ShardCore::PublishLocked() {
  DCHECK(!params_behind_) << "publishing a stale params_";
  std::shared_ptr<Snapshot> snap = FreeSnapshotLocked();
  snap->params.assign(params_.begin(), params_.end());
  snap->version = version_;
  published_ = snap;
  waits_->Poke();
}

const float* ShardCore::CurrentParams() {
  if (!params_behind_) return params_.data();
  absl::MutexLock l(&mu_);
  return published_->params.data();
}

void ShardCore::CatchUpParams() {
  if (!params_behind_) return;
  // Copied without mu_ (pulls and pushes go on): published_ changes only
  // with update_mu_, held here.
  const float* current = CurrentParams();
  std::memcpy(params_.data(), current, sizeof(float) * params_.size());
  params_behind_ = false;
}

int64_t ShardCore::version() const {
  absl::MutexLock l(&mu_);
  return version_;
}

absl::Status ShardCore::CheckAlive() const {
  if (!broken_.ok()) return broken_;
  if (backup_) {
    // UNAVAILABLE (tried again): a worker told of a failover may call the
    // promoted backup before its own daemon heard of the promotion.
    return absl::UnavailableError(absl::StrCat(
        "shard ", options_.shard, " here is a backup (term ", term_,
        "): it serves nothing until promoted"));
  }
  return absl::OkStatus();
}

DescribeResponse ShardCore::Describe() const {
  DescribeResponse r;
  r.set_shard_index(options_.shard);
  r.set_num_shards(options_.num_shards);
  r.set_model_config_json(options_.config.ToJson());
  r.set_task(std::string(BertTaskName(options_.task)));
  for (int i : local_slices()) {
    const SliceSpec& s = plan_.slices()[i];
    SliceInfo* si = r.add_slices();
    si->set_name(s.name);
    si->set_begin(s.begin);
    si->set_end(s.end);
    for (int64_t d : layout_.tensors()[s.tensor].shape) si->add_tensor_shape(d);
  }
  r.set_mode(mode());
  r.set_num_workers(workers());
  r.set_optimizer(std::string(optim::OptimizerKindName(options_.optimizer.kind)));
  r.set_staleness(options_.staleness);
  r.set_backup_workers(options_.backup_workers);
  r.set_state_slots(state_slots_);
  absl::MutexLock l(&mu_);
  r.set_version(version_);
  return r;
}

bool ShardCore::SnapshotReadyLocked(int64_t min_version, int64_t step) const {
  if (!CheckAlive().ok()) return true;
  switch (mode()) {
    case BSP:
      return version_ >= min_version ||
             (pending_ != nullptr && pending_->version >= min_version);
    case SSP: {
      const int64_t slowest = *std::min_element(clock_.begin(), clock_.end());
      return slowest >= step - options_.staleness && version_ >= min_version;
    }
    default:  // ASP: a pull that names a version (an export) waits for it
      return version_ >= min_version;
  }
}

absl::StatusOr<std::shared_ptr<const Snapshot>> ShardCore::AcquireSnapshot(
    int worker, int64_t min_version, int64_t step, absl::Time deadline) {
  deadline = std::min(deadline, absl::Now() + options_.wait_timeout);
  absl::MutexLock l(&mu_);
  auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return SnapshotReadyLocked(min_version, step);
  };
  auto cond = absl::Condition(&ready);
  if (!mu_.AwaitWithDeadline(cond, deadline)) {
    if (mode() == SSP) {
      int slow = static_cast<int>(std::min_element(clock_.begin(), clock_.end()) -
                                  clock_.begin());
      return absl::DeadlineExceededError(absl::StrCat(
          "shard ", options_.shard, ": worker ", worker, " at step ", step,
          " waited for the slowest worker (", slow, ", at step ", clock_[slow],
          ") beyond staleness ", options_.staleness));
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "shard ", options_.shard, ": version ", min_version,
        " not reached (at ", version_, "; ", staged_.size(), " of ",
        workers() - options_.backup_workers,
        " pushes of the current step arrived)"));
  }
  RETURN_IF_ERROR(CheckAlive());
  if (mode() == BSP && version_ < min_version) {
    return std::shared_ptr<const Snapshot>(pending_);  // being made
  }
  return std::shared_ptr<const Snapshot>(published_);
}


StatsResponse ShardCore::Stats() const {
  StatsResponse r;
  absl::MutexLock l(&mu_);
  r.set_version(version_);
  r.set_pushes_applied(pushes_applied_);
  r.set_pushes_duplicate(pushes_duplicate_);
  r.set_pushes_rejected(pushes_rejected_);
  r.set_bytes_in(bytes_in_);
  for (int64_t c : clock_) r.add_worker_clock(c);
  for (int64_t s : last_step_) r.add_last_step(s);
  r.set_example_ledger(ledger_.Serialize());
  r.set_last_grad_norm(last_grad_norm_);
  r.set_last_learning_rate(last_lr_);
  r.set_term(term_);
  r.set_backup(backup_);
  r.set_steps_replicated(steps_replicated_);
  if (replicas_ != nullptr) r.set_live_backups(replicas_->LiveBackups());
  return r;
}

}  // namespace ps
}  // namespace bertps

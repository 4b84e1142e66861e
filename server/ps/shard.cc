#include "server/ps/shard.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <thread>
#include <cstdio>
#include <cmath>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/model/weights.h"
#include "glog/logging.h"
#include "common/io/half.h"
#include "common/status.h"
#include "common/ps/checkpoint.h"

namespace bertps {
namespace ps {

namespace {

constexpr int kPhaseNorm = 0;
constexpr int kPhaseLamb = 1;

absl::string_view ModeName(ConsistencyMode m) {
  switch (m) {
    case BSP:
      return "BSP";
    case ASP:
      return "ASP";
    case SSP:
      return "SSP";
    default:
      return "?";
  }
}

}  // namespace

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

bool Snapshot::SlicesReady(int count) const {
  absl::MutexLock l(&mu);
  return slices_done >= count || !failed.ok();
}

ShardCore::ShardCore(const ShardOptions& options, PeerLink* peers,
                     ParamLayout layout, PartitionPlan plan)
    : options_(options),
      peers_(peers),
      layout_(std::move(layout)),
      plan_(std::move(plan)),
      state_slots_(optim::StateSlots(options.optimizer)) {}

ShardCore::~ShardCore() {
  std::thread t;
  {
    absl::MutexLock l(&mu_);
    t = std::move(apply_thread_);
  }
  if (t.joinable()) t.join();
}

void ShardCore::Abort(const absl::Status& why) {
  {
    absl::MutexLock l(&mu_);
    if (broken_.ok()) broken_ = why;
  }
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
    const ShardOptions& o, PeerLink* peers) {
  RETURN_IF_ERROR(o.config.Validate());
  RETURN_IF_ERROR(optim::ValidateConfig(o.optimizer));
  if (o.num_shards < 1 || o.shard < 0 || o.shard >= o.num_shards) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard index ", o.shard, " outside [0, ", o.num_shards, ")"));
  }
  if (o.num_workers < 1) {
    return absl::InvalidArgumentError("num_workers must be >= 1");
  }
  if (o.backup_workers < 0 || o.backup_workers >= o.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("backup_workers must be in [0, num_workers), got ",
                     o.backup_workers));
  }
  if (o.staleness < 0) return absl::InvalidArgumentError("staleness < 0");
  if (o.num_shards > 1 && peers == nullptr) {
    return absl::InvalidArgumentError("several shards need a PeerLink");
  }
  ParamLayout layout = ParamLayout::ForBert(o.config, o.task);
  ASSIGN_OR_RETURN(PartitionPlan plan, PartitionPlan::Make(layout, o.num_shards));
  {
    // The whole model while initialising, then this shard's slice: the
    // parameters, the snapshot being made, the aggregate, optimizer state,
    // one staging buffer per worker (BSP) and a spare.
    int64_t n = 0;
    for (const SliceSpec& s : plan.slices()) {
      if (s.shard == o.shard) n += s.size();
    }
    const int64_t slots = optim::StateSlots(o.optimizer);
    const int64_t f = static_cast<int64_t>(sizeof(float));
    const int64_t need =
        layout.total_size() * f + n * f * (4 + slots + o.num_workers);
    RETURN_IF_ERROR(CheckFits(
        absl::StrCat("parameter-server shard ", o.shard), need,
        absl::StrCat(n, " of the model's ", layout.total_size(),
                     " parameters on ", o.num_shards, " shard(s), ", slots,
                     " optimizer slot(s), ", o.num_workers,
                     " worker staging buffer(s); use more shards or a "
                     "smaller model"),
        o.memory_limit.bytes > 0 ? o.memory_limit : DetectMemoryLimit()));
  }
  std::unique_ptr<ShardCore> core(
      new ShardCore(o, peers, std::move(layout), std::move(plan)));
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
  c.last_step_.assign(o.num_workers, -1);
  c.clock_.assign(o.num_workers, 0);
  if (o.mode != BSP && o.checkpoint_every > 0) {
    c.next_cut_ = o.checkpoint_every;
  }
  c.PublishLocked();
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

absl::Status ShardCore::CheckAlive() const { return broken_; }

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
  r.set_mode(options_.mode);
  r.set_num_workers(options_.num_workers);
  r.set_optimizer(std::string(optim::OptimizerKindName(options_.optimizer.kind)));
  r.set_staleness(options_.staleness);
  r.set_backup_workers(options_.backup_workers);
  r.set_state_slots(state_slots_);
  absl::MutexLock l(&mu_);
  r.set_version(version_);
  return r;
}

absl::StatusOr<std::shared_ptr<const Snapshot>> ShardCore::AcquireSnapshot(
    int worker, int64_t min_version, int64_t step, absl::Time deadline) {
  deadline = std::min(deadline, absl::Now() + options_.wait_timeout);
  absl::MutexLock l(&mu_);
  auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    if (!broken_.ok()) return true;
    switch (options_.mode) {
      case BSP:
        return version_ >= min_version ||
               (pending_ != nullptr && pending_->version >= min_version);
      case SSP: {
        const int64_t slowest =
            *std::min_element(clock_.begin(), clock_.end());
        return slowest >= step - options_.staleness && version_ >= min_version;
      }
      default:  // ASP: a pull that names a version (an export) waits for it
        return version_ >= min_version;
    }
  };
  auto cond = absl::Condition(&ready);
  if (!mu_.AwaitWithDeadline(cond, deadline)) {
    if (options_.mode == SSP) {
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
        options_.num_workers - options_.backup_workers,
        " pushes of the current step arrived)"));
  }
  RETURN_IF_ERROR(CheckAlive());
  if (options_.mode == BSP && version_ < min_version) {
    return std::shared_ptr<const Snapshot>(pending_);  // being made
  }
  return std::shared_ptr<const Snapshot>(published_);
}

absl::StatusOr<std::unique_ptr<ShardCore::PushSession>> ShardCore::BeginPush(
    const PushHeader& header) {
  if (header.worker() < 0 || header.worker() >= options_.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("push from worker ", header.worker(), " outside [0, ",
                     options_.num_workers, ")"));
  }
  if (header.step() < 0) {
    return absl::InvalidArgumentError("push with a negative step");
  }
  if (!std::isfinite(header.grad_sq_sum()) || header.grad_sq_sum() < 0) {
    return absl::InvalidArgumentError(
        "push header grad_sq_sum is not finite (NaN/Inf gradient)");
  }
  auto session = std::make_unique<PushSession>();
  session->header = header;
  {
    absl::MutexLock l(&mu_);
    RETURN_IF_ERROR(CheckAlive());
    if (options_.mode == BSP && header.step() > version_) {
      // A push for the version being made waits until it is (its worker
      // pulled that version's last pieces just before they were counted).
      auto made = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return !broken_.ok() || version_ >= header.step() ||
               pending_ == nullptr || pending_->version < header.step();
      };
      mu_.AwaitWithDeadline(absl::Condition(&made),
                            absl::Now() + options_.wait_timeout);
      RETURN_IF_ERROR(CheckAlive());
    }
    if (header.step() <= last_step_[header.worker()]) {
      session->duplicate = true;
    } else if (options_.mode == BSP && header.step() > version_) {
      ++pushes_rejected_;
      return absl::OutOfRangeError(
          absl::StrCat("push for step ", header.step(), " from worker ",
                       header.worker(), " is ahead of version ", version_));
    } else if (options_.mode == BSP && header.step() < version_) {
      ++pushes_rejected_;
      return absl::FailedPreconditionError(absl::StrCat(
          "push for step ", header.step(), " from worker ", header.worker(),
          " is stale: step already applied (version ", version_, ")"));
    }
  }
  session->grad = TakeBuffer();
  session->next.resize(local_slices().size());
  session->row_seen.resize(local_slices().size());
  session->rows_done.assign(local_slices().size(), 0);
  for (size_t i = 0; i < local_slices().size(); ++i) {
    session->next[i] = plan_.slices()[local_slices()[i]].begin;
  }
  return session;
}

AlignedVector<float> ShardCore::TakeBuffer() {
  {
    absl::MutexLock l(&mu_);
    if (!free_buffers_.empty()) {
      AlignedVector<float> b = std::move(free_buffers_.back());
      free_buffers_.pop_back();
      return b;
    }
  }
  return AlignedVector<float>(shard_size());
}

void ShardCore::ReturnBuffer(AlignedVector<float> buffer) {
  if (buffer.size() != static_cast<size_t>(shard_size())) return;
  absl::MutexLock l(&mu_);
  free_buffers_.push_back(std::move(buffer));
}

absl::Status ShardCore::AddChunk(PushSession* s, const TensorChunk& chunk) {
  return AddChunk(s, ChunkRef::Of(chunk));
}

absl::Status ShardCore::AddChunk(PushSession* s, const ChunkRef& chunk) {
  auto it = by_name_.find(chunk.name);
  if (it == by_name_.end()) {
    const bool known = layout_.Find(chunk.name) != nullptr;
    return absl::InvalidArgumentError(absl::StrCat(
        "shard ", options_.shard, ": ",
        known ? "tensor has no slice on this shard: " : "unknown tensor: ",
        chunk.name));
  }
  const ParamSpec& spec = *layout_.Find(chunk.name);
  if (!chunk.shape.empty() && chunk.shape != spec.shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("wrong shape for ", chunk.name));
  }
  int elem = 0;
  if (chunk.dtype == F32) {
    elem = 4;
  } else if (chunk.dtype == BF16) {
    elem = 2;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient chunk of ", chunk.name, " must be F32 or BF16"));
  }
  if (chunk.data_bytes % elem != 0 || chunk.data_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk of ", chunk.name, " has ", chunk.data_bytes,
        " bytes, not a positive multiple of ", elem));
  }
  if (!chunk.rows.empty()) {
    return AddRowChunk(s, chunk, spec, it->second, elem);
  }
  const int64_t n = static_cast<int64_t>(chunk.data_bytes) / elem;
  const int64_t off = chunk.offset;
  // Find the local slice containing [off, off + n).
  for (int idx : it->second) {
    const SliceSpec& sl = plan_.slices()[idx];
    if (off < sl.begin || off >= sl.end) continue;
    if (off + n > sl.end) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk of ", chunk.name, " [", off, ", ", off + n,
          ") crosses the slice end ", sl.end));
    }
    const size_t local = std::find(local_slices().begin(),
                                   local_slices().end(), idx) -
                         local_slices().begin();
    if (s->rows_done[local] > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "range chunk of ", chunk.name, " after row chunks of the same slice"));
    }
    if (off != s->next[local]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk of ", chunk.name, " at element ", off,
          " is out of order or overlapping (expected ", s->next[local], ")"));
    }
    float* dst = s->grad.data() + sl.shard_offset + (off - sl.begin);
    // F32: checked as it is copied, in one pass. BF16: widened and checked
    // block by block, each block while it is in cache.
    ChunkRef::Reader reader(chunk);
    bool finite = true;
    if (elem == 4) {
      finite = reader.ReadFinite(dst, n, StreamStaging());
    } else {
      constexpr int64_t kBlock = 4096;  // elements
      std::vector<uint16_t> bf16(std::min(n, kBlock));
      for (int64_t at = 0; at < n && finite; at += kBlock) {
        const int64_t len = std::min(kBlock, n - at);
        reader.Read(bf16.data(), 2 * len);
        for (int64_t i = 0; i < len; ++i) dst[at + i] = io::Bf16ToF32(bf16[i]);
        finite = optim::AllFinite(dst + at, len);
      }
    }
    if (!finite) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradient of ", chunk.name, " has NaN or Inf in elements [", off,
          ", ", off + n, ")"));
    }
    s->next[local] = off + n;
    s->bytes += static_cast<int64_t>(chunk.data_bytes);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("chunk of ", chunk.name, " at element ", off,
                   " is outside this shard's slices of the tensor"));
}

absl::Status ShardCore::SetNextFirst(PushSession* s, const TensorRows& r) {
  const ParamSpec* spec = layout_.Find(r.name());
  if (spec == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("next_first of unknown tensor ", r.name()));
  }
  if (s->next_first_tensor >= 0) {
    return absl::InvalidArgumentError("a push carries one next_first");
  }
  const int64_t num_rows = spec->shape.empty() ? 1 : spec->shape[0];
  for (int k = 0; k < r.rows_size(); ++k) {
    if (r.rows(k) < 0 || r.rows(k) >= num_rows ||
        (k > 0 && r.rows(k) <= r.rows(k - 1))) {
      return absl::InvalidArgumentError(
          absl::StrCat("next_first row ", r.rows(k), " of ", r.name(),
                       " is out of range or not increasing"));
    }
  }
  s->next_first_tensor = static_cast<int>(spec - layout_.tensors().data());
  s->next_first_rows.assign(r.rows().begin(), r.rows().end());
  return absl::OkStatus();
}

absl::Status ShardCore::AddRowChunk(PushSession* s, const ChunkRef& chunk,
                                    const ParamSpec& spec,
                                    const std::vector<int>& slices, int elem) {
  const int64_t num_rows = spec.shape.empty() ? 1 : spec.shape[0];
  const int64_t row = num_rows > 0 ? spec.size / num_rows : 0;
  const std::vector<int64_t>& rows = chunk.rows;
  if (chunk.offset != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row chunk of ", chunk.name, " with an offset (", chunk.offset, ")"));
  }
  if (chunk.data_bytes != rows.size() * static_cast<size_t>(row) * elem) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row chunk of ", chunk.name, " has ", chunk.data_bytes, " bytes for ",
        rows.size(), " rows of ", row, " elements"));
  }
  // Every row: in range, increasing, in one of this shard's slices (slices
  // are row ranges), not yet received. Checked before anything is copied.
  std::vector<std::pair<size_t, float*>> dst(rows.size());  // (local, at)
  size_t local = 0;
  const SliceSpec* sl = nullptr;
  for (size_t k = 0; k < rows.size(); ++k) {
    const int64_t r = rows[k];
    if (r < 0 || r >= num_rows || (k > 0 && r <= rows[k - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row chunk of ", chunk.name, ": row ", r,
          " is out of range or not increasing"));
    }
    const int64_t at = r * row;
    if (sl == nullptr || at < sl->begin || at >= sl->end) {
      sl = nullptr;
      for (int idx : slices) {
        const SliceSpec& c = plan_.slices()[idx];
        if (at >= c.begin && at < c.end) {
          sl = &c;
          local = std::find(local_slices().begin(), local_slices().end(),
                            idx) -
                  local_slices().begin();
          break;
        }
      }
      if (sl == nullptr || sl->begin % row != 0 || sl->end % row != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "row chunk of ", chunk.name, ": row ", r,
            " is outside this shard's slices of the tensor"));
      }
      if (s->next[local] != sl->begin) {
        return absl::InvalidArgumentError(absl::StrCat(
            "row chunk of ", chunk.name, " after range chunks of the same slice"));
      }
      if (s->row_seen[local].empty()) {
        s->row_seen[local].assign(sl->size() / row, 0);
      }
    }
    if (s->row_seen[local][(at - sl->begin) / row]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row chunk of ", chunk.name, ": row ", r, " was already received"));
    }
    dst[k] = {local, s->grad.data() + sl->shard_offset + (at - sl->begin)};
  }
  ChunkRef::Reader reader(chunk);
  std::vector<uint16_t> bf16(elem == 2 ? row : 0);
  const bool stream = StreamStaging();
  for (size_t k = 0; k < rows.size(); ++k) {
    float* d = dst[k].second;
    bool finite;
    if (elem == 4) {
      finite = reader.ReadFinite(d, row, stream);
    } else {
      reader.Read(bf16.data(), 2 * row);
      for (int64_t i = 0; i < row; ++i) d[i] = io::Bf16ToF32(bf16[i]);
      finite = optim::AllFinite(d, row);
    }
    if (!finite) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradient of ", chunk.name, " has NaN or Inf in row ", rows[k]));
    }
  }
  for (size_t k = 0; k < rows.size(); ++k) {
    const size_t l = dst[k].first;
    const SliceSpec& c = plan_.slices()[local_slices()[l]];
    const int64_t at = rows[k] * row;
    s->row_seen[l][(at - c.begin) / row] = 1;
    ++s->rows_done[l];
  }
  s->bytes += static_cast<int64_t>(chunk.data_bytes);
  return absl::OkStatus();
}

absl::StatusOr<PushResponse> ShardCore::FinishPush(
    std::unique_ptr<PushSession> s, absl::Time deadline) {
  deadline = std::min(deadline, absl::Now() + options_.wait_timeout);
  for (size_t i = 0; i < local_slices().size(); ++i) {
    const SliceSpec& sl = plan_.slices()[local_slices()[i]];
    if (s->rows_done[i] > 0) {
      const int64_t rows = static_cast<int64_t>(s->row_seen[i].size());
      if (s->rows_done[i] == rows) continue;
      ReturnBuffer(std::move(s->grad));
      absl::MutexLock l(&mu_);
      ++pushes_rejected_;
      return absl::InvalidArgumentError(absl::StrCat(
          "incomplete push from worker ", s->header.worker(), ": ", sl.name,
          " received ", s->rows_done[i], " of ", rows, " rows"));
    }
    if (s->next[i] != sl.end) {
      ReturnBuffer(std::move(s->grad));
      absl::MutexLock l(&mu_);
      ++pushes_rejected_;
      return absl::InvalidArgumentError(absl::StrCat(
          "incomplete push from worker ", s->header.worker(), ": ", sl.name,
          " received ", s->next[i] - sl.begin, " of ", sl.size(),
          " elements"));
    }
  }
  const int w = s->header.worker();
  const int64_t step = s->header.step();
  PushResponse resp;
  if (options_.mode == BSP) {
    absl::MutexLock l(&mu_);
    bytes_in_ += s->bytes;
    if (step <= last_step_[w] || s->duplicate) {
      ++pushes_duplicate_;
      resp.set_duplicate(true);
      resp.set_version(version_);
      free_buffers_.push_back(std::move(s->grad));
      return resp;
    }
    if (step != version_ || updating_) {
      ++pushes_rejected_;
      free_buffers_.push_back(std::move(s->grad));
      return absl::FailedPreconditionError(absl::StrCat(
          "push for step ", step, " from worker ", w,
          " arrived after the step completed (version ", version_, ")"));
    }
    last_step_[w] = step;
    staged_[w] = std::move(s->grad);
    staged_examples_[w] = {s->header.first_example(), s->header.examples()};
    if (s->next_first_tensor >= 0 &&
        (hint_tensor_ < 0 || hint_tensor_ == s->next_first_tensor)) {
      hint_tensor_ = s->next_first_tensor;
      std::vector<int64_t> merged;
      std::set_union(hint_rows_.begin(), hint_rows_.end(),
                     s->next_first_rows.begin(), s->next_first_rows.end(),
                     std::back_inserter(merged));
      hint_rows_ = std::move(merged);
    }
    ++pushes_applied_;
    const int needed = options_.num_workers - options_.backup_workers;
    if (static_cast<int>(staged_.size()) >= needed) {
      RETURN_IF_ERROR(ApplyBspLocked(deadline));
    }
    resp.set_version(version_);
    return resp;
  }
  // ASP / SSP: apply this push now (after a checkpoint cut it must wait
  // for, see ShardOptions::checkpoint_every).
  {
    absl::MutexLock l(&mu_);
    bytes_in_ += s->bytes;
    if (step <= last_step_[w] || s->duplicate) {
      ++pushes_duplicate_;
      resp.set_duplicate(true);
      resp.set_version(version_);
      free_buffers_.push_back(std::move(s->grad));
      return resp;
    }
    const int64_t ticket = step * options_.num_workers + w;
    auto below_cut = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return !broken_.ok() || next_cut_ == 0 || ticket < next_cut_;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&below_cut), deadline)) {
      free_buffers_.push_back(std::move(s->grad));
      return absl::DeadlineExceededError(absl::StrCat(
          "shard ", options_.shard, ": the push of update ticket ", ticket,
          " (worker ", w, ", step ", step, ") waited for the checkpoint of "
          "version ", next_cut_, ", which nobody wrote (at version ", version_,
          ")"));
    }
    if (!broken_.ok()) {
      free_buffers_.push_back(std::move(s->grad));
      return broken_;
    }
    last_step_[w] = step;
  }
  absl::Status st;
  {
    absl::MutexLock ul(&update_mu_);
    int64_t v;
    {
      absl::MutexLock l(&mu_);
      v = version_;
    }
    st = ApplyStep(v, s->grad.data(), 1.0f, s->header.grad_sq_sum(), deadline);
    absl::MutexLock l(&mu_);
    if (st.ok()) {
      ++version_;
      ++clock_[w];
      ++pushes_applied_;
      ledger_.Add(s->header.first_example(), s->header.examples());
      PublishLocked();
    } else {
      broken_ = st;
    }
    resp.set_version(version_);
  }
  ReturnBuffer(std::move(s->grad));
  RETURN_IF_ERROR(st);
  return resp;
}

absl::Status ShardCore::ApplyBspLocked(absl::Time deadline) {
  // Sum the staged gradients in worker order; one thread runs the update
  // with mu_ released (pulls keep reading the published snapshot).
  updating_ = true;
  std::map<int, AlignedVector<float>> staged = std::move(staged_);
  staged_.clear();
  applying_examples_ = std::move(staged_examples_);
  staged_examples_.clear();
  const int64_t v = version_;
  const int contributors = static_cast<int>(staged.size());
  // With the workers' next rows known (and an element-wise optimizer), the
  // next version is published while it is made: pulls send its final
  // pieces as the update goes.
  std::shared_ptr<Snapshot> next;
  if (hint_tensor_ >= 0 && !optim::NeedsTrustRatio(options_.optimizer.kind)) {
    next = FreeSnapshotLocked();
    next->params.resize(shard_size());
    next->version = v + 1;
    next->first_tensor = hint_tensor_;
    next->first_rows = std::move(hint_rows_);
    {
      absl::MutexLock sl(&next->mu);
      next->first_done = false;
      next->slices_done = 0;
    }
    pending_ = next;  // pulls of v + 1 may start: they wait for each piece
  }
  hint_tensor_ = -1;
  hint_rows_.clear();
  if (next != nullptr) {
    // The update runs on its own thread and this push is answered now: the
    // workers wait for the new version's pieces in their pulls instead.
    // The previous step's thread is past its last use of mu_ (a step
    // completes only after it published its version): joined under mu_.
    if (apply_thread_.joinable()) apply_thread_.join();
    apply_thread_ = std::thread([this, staged = std::move(staged), next, v,
                                 contributors, deadline]() mutable {
      RunBspStep(std::move(staged), std::move(next), v, contributors,
                 deadline);
    });
    return broken_;
  }
  mu_.Unlock();
  RunBspStep(std::move(staged), nullptr, v, contributors, deadline);
  mu_.Lock();
  return broken_;
}

void ShardCore::RunBspStep(std::map<int, AlignedVector<float>> staged,
                           std::shared_ptr<Snapshot> next, int64_t v,
                           int contributors, absl::Time deadline) {
  absl::Status st;
  {
    absl::MutexLock ul(&update_mu_);
    const float* agg = staged.begin()->second.data();
    if (staged.size() > 1) {  // one push is its own sum: no copy
      float* sum = aggregate_.data();
      const int64_t n = shard_size();
      bool first = true;
      for (auto& [worker, g] : staged) {
        if (first) {
          std::memcpy(sum, g.data(), sizeof(float) * n);
          first = false;
        } else {
          for (int64_t i = 0; i < n; ++i) sum[i] += g[i];
        }
      }
      agg = sum;
    }
    // With backup workers each push used its own batch's denominators: the
    // step averages them. Without, the workers used the global batch's
    // denominators (Announce) and the sum is the big batch's gradient.
    const float scale =
        options_.backup_workers > 0 ? 1.0f / contributors : 1.0f;
    st = ApplyStep(v, agg, scale, std::nullopt, deadline, next.get());
    if (next != nullptr && !st.ok()) {
      absl::MutexLock sl(&next->mu);
      next->failed = st;
    }
    mu_.Lock();
    pending_ = nullptr;
    if (st.ok()) {
      ++version_;
      for (auto& [worker, g] : staged) ++clock_[worker];
      for (const auto& [worker, ex] : applying_examples_) {
        ledger_.Add(ex.first, ex.second);
      }
      if (next != nullptr) {
        published_ = next;  // already filled, piece by piece
        params_behind_ = true;
      } else {
        PublishLocked();
      }
    } else {
      broken_ = Annotate(st, absl::StrCat("shard ", options_.shard,
                                          ": applying step ", v));
    }
    updating_ = false;
    for (auto& [worker, g] : staged) free_buffers_.push_back(std::move(g));
    mu_.Unlock();
  }
}

namespace {

// Lowers the calling thread's CPU priority by `by` nice levels (Linux keeps
// nice per thread; at most 19); a refusal only costs speed.
void LowerThisThreadPriority(int by) {
  const id_t tid = static_cast<id_t>(gettid());
  errno = 0;
  const int now = getpriority(PRIO_PROCESS, tid);  // -1 is a valid value
  if (errno == 0 && now < 19 &&
      setpriority(PRIO_PROCESS, tid, std::min(19, now + by)) == 0) {
    return;
  }
  if (errno != 0) {
    LOG_FIRST_N(WARNING, 1) << "shard: cannot lower the update thread's "
                               "priority: " << std::strerror(errno);
  }
}

}  // namespace

absl::Status ShardCore::ApplyInOrder(int64_t step_index, const float* grad,
                                     float scale, Snapshot* into) {
  const optim::OptimizerConfig& oc = options_.optimizer;
  // Out of place: this version is read where it lies (params_, or the
  // published snapshot, which pulls may still be sending; only read here)
  // and the next is written into `into` alone -- one pass over the shard's
  // parameters fewer than updating params_ and copying. params_ is then
  // behind until an update in place, a checkpoint or a restore needs it.
  float* const params = const_cast<float*>(CurrentParams());  // only read
  DCHECK(params != into->params.data());
  float* const state = state_.data();
  // Updates elements [a, b) of local slice sl into `into`.
  auto run = [&](const SliceSpec& sl, int64_t a, int64_t b) -> absl::Status {
    if (b <= a) return absl::OkStatus();
    optim::Slice s;
    const int64_t at = sl.shard_offset + (a - sl.begin);
    s.param = params + at;
    s.grad = grad + at;
    s.state = state + static_cast<int64_t>(state_slots_) * sl.shard_offset +
              (a - sl.begin);
    s.n = b - a;
    s.slot_stride = sl.size();
    s.decay = sl.decay;
    s.param_out = into->params.data() + at;
    return optim::StepSlice(oc, step_index, s, scale);
  };
  const std::vector<int64_t>& rows = into->first_rows;
  auto row_size = [&](const SliceSpec& sl) {
    return RowSize(layout_.tensors()[sl.tensor]);
  };
  // The first rows: runs of consecutive rows within each slice.
  for (int i : update_order_) {
    const SliceSpec& sl = plan_.slices()[i];
    if (sl.tensor != into->first_tensor) continue;
    const int64_t row = row_size(sl);
    auto it = std::lower_bound(rows.begin(), rows.end(), sl.begin / row);
    while (it != rows.end() && *it * row < sl.end) {
      auto end = it + 1;
      while (end != rows.end() && *end == *(end - 1) + 1 && *end * row < sl.end) ++end;
      RETURN_IF_ERROR(run(sl, *it * row, std::min(sl.end, *(end - 1) * row + row)));
      it = end;
    }
  }
  {
    absl::MutexLock l(&into->mu);
    into->first_done = true;
  }
  if (options_.update_nice > 0) LowerThisThreadPriority(options_.update_nice);
  // Then every slice in update order (the first tensor's other rows).
  for (size_t k = 0; k < update_order_.size(); ++k) {
    const SliceSpec& sl = plan_.slices()[update_order_[k]];
    if (sl.tensor != into->first_tensor) {
      RETURN_IF_ERROR(run(sl, sl.begin, sl.end));
    } else {
      const int64_t row = row_size(sl);
      int64_t from = sl.begin;
      for (auto it = std::lower_bound(rows.begin(), rows.end(), sl.begin / row);
           it != rows.end() && *it * row < sl.end; ++it) {
        RETURN_IF_ERROR(run(sl, from, *it * row));
        from = *it * row + row;
      }
      RETURN_IF_ERROR(run(sl, from, sl.end));
    }
    absl::MutexLock l(&into->mu);
    into->slices_done = static_cast<int>(k + 1);
  }
  absl::MutexLock l(&into->mu);
  into->slices_done = Snapshot::kAllSlices;
  return absl::OkStatus();
}

absl::Status ShardCore::RunGroups(
    const std::function<absl::Status(size_t)>& fn) {
  const size_t n = update_groups_.size();
  std::vector<absl::Status> st(n);
  // Group 0 here, the others on the pool's threads (no thread starts).
  Eigen::Barrier done(n > 1 ? static_cast<unsigned>(n - 1) : 0u);
  for (size_t g = 1; g < n; ++g) {
    group_pool_->Schedule([&, g] {
      st[g] = fn(g);
      done.Notify();
    });
  }
  if (n > 0) st[0] = fn(0);
  done.Wait();
  for (const absl::Status& x : st) RETURN_IF_ERROR(x);
  return absl::OkStatus();
}

absl::Status ShardCore::ApplyStep(int64_t step_index, const float* grad,
                                  float grad_scale,
                                  std::optional<double> grad_sq_sum,
                                  absl::Time deadline, Snapshot* into) {
  const optim::OptimizerConfig& oc = options_.optimizer;
  // Global gradient norm (of the scaled gradient).
  double sq;
  if (grad_sq_sum.has_value()) {
    sq = *grad_sq_sum;
  } else {
    // One sum per slice (on the groups' threads), added in slice order:
    // the same bits for any thread count.
    std::vector<double> part(plan_.slices().size(), 0.0);
    RunGroups([&](size_t g) {
      for (int i : update_groups_[g]) {
        const SliceSpec& sl = plan_.slices()[i];
        part[i] = optim::GradSquaredSum(grad + sl.shard_offset, sl.size());
      }
      return absl::OkStatus();
    }).IgnoreError();
    double sum = 0;
    for (int i : local_slices()) sum += part[i];
    const double local = sum * static_cast<double>(grad_scale) * grad_scale;
    ASSIGN_OR_RETURN(std::vector<double> total,
                     AllReduce(step_index, kPhaseNorm, {local}, deadline));
    sq = total[0];
  }
  if (!std::isfinite(sq)) {
    return absl::InvalidArgumentError("gradient norm is not finite");
  }
  const double norm = std::sqrt(sq);
  const float clip = optim::ClipScale(oc, norm);
  const float scale = grad_scale * clip;
  // Raw buffers taken here, where update_mu_ is held (the analysis does not
  // follow it into the lambda).
  if (into == nullptr) CatchUpParams();  // updated in place
  float* const params = params_.data();
  float* const state = state_.data();
  auto slice_of = [&](const SliceSpec& sl) {
    optim::Slice s;
    s.param = params + sl.shard_offset;
    s.grad = grad + sl.shard_offset;
    s.state = state + static_cast<int64_t>(state_slots_) * sl.shard_offset;
    s.n = sl.size();
    s.decay = sl.decay;
    return s;
  };
  if (into != nullptr) {
    RETURN_IF_ERROR(ApplyInOrder(step_index, grad, scale, into));
  } else if (!optim::NeedsTrustRatio(oc.kind)) {
    RETURN_IF_ERROR(RunGroups([&](size_t g) -> absl::Status {
      for (int i : update_groups_[g]) {
        RETURN_IF_ERROR(optim::StepSlice(oc, step_index,
                                         slice_of(plan_.slices()[i]), scale));
      }
      return absl::OkStatus();
    }));
  } else {
    // LAMB: per-slice update directions and partial norms, whole-tensor
    // totals (exchanged for tensors split over slices), then the update.
    std::map<int, optim::PartialNorms> per_tensor;
    for (int i : local_slices()) {
      const SliceSpec& sl = plan_.slices()[i];
      per_tensor[sl.tensor] += optim::ComputeUpdate(
          oc, step_index, slice_of(sl), scale,
          update_scratch_.data() + sl.shard_offset);
    }
    if (!split_tensors_.empty() && options_.mode == BSP) {
      std::vector<double> local;
      for (int t : split_tensors_) {
        auto it = per_tensor.find(t);
        local.push_back(it == per_tensor.end() ? 0 : it->second.param_sq);
        local.push_back(it == per_tensor.end() ? 0 : it->second.update_sq);
      }
      ASSIGN_OR_RETURN(std::vector<double> total,
                       AllReduce(step_index, kPhaseLamb, local, deadline));
      for (size_t j = 0; j < split_tensors_.size(); ++j) {
        if (per_tensor.count(split_tensors_[j])) {
          per_tensor[split_tensors_[j]] = {total[2 * j], total[2 * j + 1]};
        }
      }
    }
    for (int i : local_slices()) {
      const SliceSpec& sl = plan_.slices()[i];
      const float ratio = optim::TrustRatio(oc, sl.decay, per_tensor[sl.tensor]);
      optim::ApplyUpdate(oc, step_index, slice_of(sl),
                         update_scratch_.data() + sl.shard_offset, ratio);
    }
  }
  absl::MutexLock l(&mu_);
  last_grad_norm_ = norm;
  last_lr_ = optim::LearningRate(oc, step_index);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> ShardCore::AllReduce(
    int64_t version, int phase, std::vector<double> local,
    absl::Time deadline) {
  const int S = options_.num_shards;
  if (S == 1) return local;
  ExchangeRequest req;
  req.set_from_shard(options_.shard);
  req.set_version(version);
  req.set_phase(phase);
  req.set_incarnation(options_.incarnation);
  for (double x : local) req.add_values(x);
  RETURN_IF_ERROR(ReceiveExchange(req));
  for (int peer = 0; peer < S; ++peer) {
    if (peer == options_.shard) continue;
    absl::Status st = peers_->Send(peer, req, deadline, &stop_sending_);
    if (!st.ok()) {
      return Annotate(st, absl::StrCat("sending partial sums of step ",
                                       version, " to shard ", peer));
    }
  }
  const auto key = std::make_pair(version, phase);
  absl::MutexLock l(&ex_mu_);
  auto complete = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ex_mu_) {
    if (!aborted_.ok()) return true;
    auto it = exchange_.find(key);
    if (it == exchange_.end()) return false;
    for (const auto& v : it->second) {
      if (!v.has_value()) return false;
    }
    return true;
  };
  if (!ex_mu_.AwaitWithDeadline(absl::Condition(&complete), deadline)) {
    std::string missing;
    for (int s = 0; s < S; ++s) {
      if (!exchange_[key][s].has_value()) absl::StrAppend(&missing, " ", s);
    }
    return absl::DeadlineExceededError(
        absl::StrCat("shard ", options_.shard, ": no partial sums of step ",
                     version, " from shard(s)", missing));
  }
  RETURN_IF_ERROR(aborted_);
  std::vector<double> total(local.size(), 0.0);
  for (const auto& v : exchange_[key]) {  // shard order: identical everywhere
    for (size_t i = 0; i < total.size(); ++i) total[i] += (*v)[i];
  }
  exchange_.erase(key);
  return total;
}

absl::Status ShardCore::ReceiveExchange(const ExchangeRequest& r) {
  if (r.from_shard() < 0 || r.from_shard() >= options_.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("exchange from unknown shard ", r.from_shard()));
  }
  if (r.incarnation() != options_.incarnation) {
    return absl::AbortedError(absl::StrCat(
        "exchange from shard ", r.from_shard(), " of job incarnation ",
        r.incarnation(), "; this shard serves incarnation ",
        options_.incarnation));
  }
  absl::MutexLock l(&ex_mu_);
  auto& slot = exchange_[{r.version(), r.phase()}];
  if (slot.empty()) slot.resize(options_.num_shards);
  auto& entry = slot[r.from_shard()];
  std::vector<double> values(r.values().begin(), r.values().end());
  if (entry.has_value() && *entry != values) {
    return absl::InvalidArgumentError(absl::StrCat(
        "conflicting partial sums from shard ", r.from_shard(), " for step ",
        r.version()));
  }
  entry = std::move(values);
  return absl::OkStatus();
}

absl::StatusOr<AnnounceResponse> ShardCore::Announce(const AnnounceRequest& r,
                                                     absl::Time deadline) {
  if (options_.shard != 0) {
    return absl::FailedPreconditionError("batch totals are served by shard 0");
  }
  if (r.worker() < 0 || r.worker() >= options_.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("announce from worker ", r.worker(), " outside [0, ",
                     options_.num_workers, ")"));
  }
  // Bounded so that the totals over all workers cannot overflow.
  constexpr int64_t kMaxAnnouncedExamples = int64_t{1} << 40;
  if (!std::isfinite(r.mlm_weight()) || r.mlm_weight() < 0 ||
      r.mlm_weight() > 1e18) {
    return absl::InvalidArgumentError(absl::StrCat(
        "announce from worker ", r.worker(), " for step ", r.step(),
        ": mlm_weight ", r.mlm_weight(), " must be finite and in [0, 1e18]"));
  }
  if (r.examples() < 0 || r.examples() > kMaxAnnouncedExamples) {
    return absl::InvalidArgumentError(absl::StrCat(
        "announce from worker ", r.worker(), " for step ", r.step(),
        ": examples ", r.examples(), " must be in [0, ",
        kMaxAnnouncedExamples, "]"));
  }
  if (r.step() < 0) {
    return absl::InvalidArgumentError("announce with a negative step");
  }
  deadline = std::min(deadline, absl::Now() + options_.wait_timeout);
  absl::MutexLock l(&mu_);
  // Forget steps long gone.
  while (!announces_.empty() && announces_.begin()->first < r.step() - 16) {
    announces_.erase(announces_.begin());
  }
  announces_[r.step()].by_worker[r.worker()] = {r.mlm_weight(), r.examples()};
  const int64_t step = r.step();
  auto all = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    if (!broken_.ok()) return true;
    auto it = announces_.find(step);
    return it != announces_.end() &&
           static_cast<int>(it->second.by_worker.size()) ==
               options_.num_workers;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&all), deadline)) {
    std::string missing;
    for (int w = 0; w < options_.num_workers; ++w) {
      if (!announces_[step].by_worker.count(w)) absl::StrAppend(&missing, " ", w);
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "step ", step, ": no batch from worker(s)", missing));
  }
  RETURN_IF_ERROR(CheckAlive());
  AnnounceResponse resp;
  double wsum = 0;
  int64_t ex = 0;
  for (const auto& [w, v] : announces_[step].by_worker) {  // worker order
    wsum += v.first;
    ex += v.second;
  }
  resp.set_mlm_weight_total(wsum);
  resp.set_examples_total(ex);
  return resp;
}

namespace {

// Per-slice [slot0 | slot1] layout <-> slot-major (checkpoint files).
void ToSlotMajor(const PartitionPlan& plan, int shard, int slots,
                 const float* per_slice, float* slot_major) {
  const int64_t n = plan.shard_size(shard);
  for (int i : plan.shard_slices(shard)) {
    const SliceSpec& s = plan.slices()[i];
    for (int k = 0; k < slots; ++k) {
      std::memcpy(slot_major + k * n + s.shard_offset,
                  per_slice + slots * s.shard_offset + k * s.size(),
                  sizeof(float) * s.size());
    }
  }
}

void FromSlotMajor(const PartitionPlan& plan, int shard, int slots,
                   const float* slot_major, float* per_slice) {
  const int64_t n = plan.shard_size(shard);
  for (int i : plan.shard_slices(shard)) {
    const SliceSpec& s = plan.slices()[i];
    for (int k = 0; k < slots; ++k) {
      std::memcpy(per_slice + slots * s.shard_offset + k * s.size(),
                  slot_major + k * n + s.shard_offset,
                  sizeof(float) * s.size());
    }
  }
}

}  // namespace

absl::StatusOr<CheckpointResponse> ShardCore::Checkpoint(
    const std::string& dir, int64_t version, absl::Time deadline) {
  deadline = std::min(deadline, absl::Now() + options_.wait_timeout);
  {
    absl::MutexLock l(&mu_);
    auto reached = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return !broken_.ok() || (version_ >= version && !updating_);
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&reached), deadline)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "checkpoint: version ", version, " not reached (at ", version_, ")"));
    }
    RETURN_IF_ERROR(CheckAlive());
  }
  absl::MutexLock ul(&update_mu_);
  int64_t v;
  {
    absl::MutexLock l(&mu_);
    // Again, now that no step runs: one that failed since the check above
    // may have left its optimizer state half-updated at this version.
    RETURN_IF_ERROR(CheckAlive());
    v = version_;
  }
  if (v != version) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint of version ", version, " asked, shard is at ", v));
  }
  std::vector<float> slot_major(state_.size());
  ToSlotMajor(plan_, options_.shard, state_slots_, state_.data(),
              slot_major.data());
  ShardSnapshot snap;
  snap.shard = options_.shard;
  snap.num_shards = options_.num_shards;
  snap.version = v;
  snap.plan = &plan_;
  snap.params = CurrentParams();
  snap.state = slot_major.data();
  snap.state_slots = state_slots_;
  ASSIGN_OR_RETURN(ShardFile f, WriteShardCheckpoint(dir, snap));
  CheckpointResponse r;
  {
    absl::MutexLock l(&mu_);
    r.set_example_ledger(ledger_.Serialize());  // of version v (no step ran)
    if (next_cut_ > 0 && v == next_cut_) {
      next_cut_ += options_.checkpoint_every;  // held pushes go on
    }
  }
  r.set_file(f.file);
  r.set_version(v);
  r.set_crc32c(f.crc32c);
  r.set_bytes(f.bytes);
  return r;
}

absl::StatusOr<int64_t> ShardCore::Restore(const std::string& manifest) {
  const int64_t n = shard_size();
  AlignedVector<float> params(n);
  std::vector<float> slot_major(static_cast<size_t>(state_slots_) * n);
  ASSIGN_OR_RETURN(int64_t v, RestoreShard(manifest, layout_, plan_,
                                           options_.shard, state_slots_,
                                           params.data(), slot_major.data()));
  ExampleLedger ledger;
  {
    ASSIGN_OR_RETURN(Manifest m, ReadManifest(manifest));
    if (!m.example_ledger.empty()) {
      absl::StatusOr<ExampleLedger> parsed =
          ExampleLedger::Parse(m.example_ledger);
      if (!parsed.ok()) return Annotate(parsed.status(), manifest);
      ledger = std::move(*parsed);
    }
  }
  absl::MutexLock ul(&update_mu_);
  absl::MutexLock l(&mu_);
  if (updating_ || !staged_.empty()) {
    return absl::FailedPreconditionError(
        "restore while a step is in progress");
  }
  params_ = std::move(params);
  params_behind_ = false;
  FromSlotMajor(plan_, options_.shard, state_slots_, slot_major.data(),
                state_.data());
  version_ = v;
  broken_ = absl::OkStatus();
  ledger_ = std::move(ledger);
  staged_examples_.clear();
  if (options_.mode == BSP) {
    std::fill(clock_.begin(), clock_.end(), v);
  } else {
    // Update tickets j * N + w below v were applied: worker w's steps
    // j < ceil((v - w) / N).
    const int64_t n = options_.num_workers;
    for (int64_t w = 0; w < n; ++w) {
      clock_[w] = v > w ? (v - w + n - 1) / n : 0;
    }
    if (options_.checkpoint_every > 0) {
      next_cut_ = (v / options_.checkpoint_every + 1) * options_.checkpoint_every;
    }
  }
  for (size_t w = 0; w < clock_.size(); ++w) last_step_[w] = clock_[w] - 1;
  announces_.clear();
  hint_tensor_ = -1;
  hint_rows_.clear();
  PublishLocked();
  return v;
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
  r.set_example_ledger(ledger_.Serialize());
  r.set_last_grad_norm(last_grad_norm_);
  r.set_last_learning_rate(last_lr_);
  (void)ModeName;
  return r;
}

}  // namespace ps
}  // namespace bertps

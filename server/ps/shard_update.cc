// ShardCore: the update -- summing a BSP step's pushes, the global norm, and the
// optimizer applied slice by slice (in forward order while pulls read the
// pieces).
#include "server/ps/shard.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "glog/logging.h"

namespace bertps {
namespace ps {

namespace {

constexpr int kPhaseNorm = 0;
constexpr int kPhaseLamb = 1;

}  // namespace

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
  // Not with live backups: a version is published only once they have it.
  if (hint_tensor_ >= 0 && !optim::NeedsTrustRatio(options_.optimizer.kind) &&
      (replicas_ == nullptr || !replicas_->Active())) {
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
    waits_->Poke();
  }
  hint_tensor_ = -1;
  hint_rows_.clear();
  // With live backups the update (and the norm exchange, which may wait for
  // a replaced primary's successor) runs on the update thread too: pushes
  // that come meanwhile, retries among them, are answered at once.
  if (next != nullptr || (replicas_ != nullptr && replicas_->Active())) {
    // The update runs on the update thread and this push is answered now:
    // the workers wait for the new version (or its pieces) in their pulls.
    // Updates run in the order posted; a step completes only after the
    // previous one published its version.
    auto work = std::make_shared<std::map<int, AlignedVector<float>>>(
        std::move(staged));
    update_thread_->Post([this, work, next, v, contributors, deadline] {
      RunBspStep(std::move(*work), next, v, contributors, deadline);
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
    // With live backups (and so no piece-by-piece publishing): the
    // aggregate goes to them before the norms are exchanged (a backup
    // promoted later can complete the step), the norms once applied, and
    // only then is the version published. Decided here, under the update
    // lock, where a backup that joined since ApplyBspLocked is seen (that
    // step may still publish piece by piece: its STAGE, sent before any
    // piece, lets a promoted backup complete it with the same bits).
    const bool replicate = replicas_ != nullptr && replicas_->Active();
    if (replicate) {
      std::vector<int> workers;
      std::vector<int64_t> steps;
      std::vector<std::pair<int64_t, int64_t>> examples;
      {
        absl::MutexLock l(&mu_);
        for (const auto& [worker, g] : staged) {
          workers.push_back(worker);
          steps.push_back(v);
          auto ex = applying_examples_.find(worker);
          examples.push_back(ex == applying_examples_.end()
                                 ? std::make_pair(int64_t{0}, int64_t{0})
                                 : ex->second);
        }
      }
      st = ReplicateStep(ReplicaStep::STAGE, v, agg, scale, nullptr, workers,
                         steps, examples, deadline);
    }
    if (replicate) CrashPoint("exchange", v, options_.shard);
    StepNorms norms;
    // The COMMIT goes to the backups as soon as the norms are known, and
    // they apply the step while this shard does; the version is published
    // only once both are done (a backup ahead of an unpublished version is
    // what a promotion would complete anyway).
    std::future<absl::Status> commit;
    std::function<void(const StepNorms&)> early;
    if (replicate) {
      early = [&](const StepNorms& n) {
        CrashPoint("commit", v, options_.shard);
        ReplicaStep c = MakeReplicaStep(ReplicaStep::COMMIT, v, scale, n);
        commit = std::async(std::launch::async, [this, c, deadline] {
          return replicas_->Replicate(c, nullptr, deadline);
        });
      };
    }
    if (st.ok()) {
      st = ApplyStep(v, agg, scale, &norms, deadline, next.get(), early);
    }
    if (commit.valid()) {
      absl::Status cs = commit.get();
      if (!cs.ok()) {
        cs = Annotate(cs, absl::StrCat("shard ", options_.shard,
                                       ": replicating step ", v));
      } else if (replicas_->LiveBackups() > 0) {
        absl::MutexLock l(&mu_);
        ++steps_replicated_;
      }
      if (st.ok()) st = cs;
      if (st.ok()) CrashPoint("publish", v, options_.shard);
    }  // (ApplyStep calls norms_final on every path that succeeds)
    if (next != nullptr && !st.ok()) {
      absl::MutexLock sl(&next->mu);
      next->failed = st;
    }
    // (The waiters are poked below, once the version or the error is set.)
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
    waits_->Poke();
  }
}

absl::Status ShardCore::ApplyInOrder(int64_t step_index, const float* grad,
                                     float scale, Snapshot* into) {
  const optim::OptimizerConfig& oc = options_.optimizer;
  const float lr = job_plan().LearningRateAt(step_index);
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
    return optim::StepSlice(oc, step_index, lr, s, scale);
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
  waits_->Poke();
  // Then every slice in update order (the first tensor's other rows), on
  // the lower-priority thread: on a host shared with workers, the threads
  // that send the pieces go first.
  auto rest = [&]() -> absl::Status {
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
      {
        absl::MutexLock l(&into->mu);
        into->slices_done = static_cast<int>(k + 1);
      }
      waits_->Poke();
    }
    return absl::OkStatus();
  };
  absl::Status st;
  background_thread_->Run([&] { st = rest(); });
  RETURN_IF_ERROR(st);
  {
    absl::MutexLock l(&into->mu);
    into->slices_done = Snapshot::kAllSlices;
  }
  waits_->Poke();
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

absl::Status ShardCore::ApplyStep(
    int64_t step_index, const float* grad, float grad_scale, StepNorms* norms,
    absl::Time deadline, Snapshot* into,
    const std::function<void(const StepNorms&)>& norms_final) {
  const optim::OptimizerConfig& oc = options_.optimizer;
  const float lr = job_plan().LearningRateAt(step_index);
  // Global gradient norm (of the scaled gradient).
  double sq;
  if (norms->grad_sq.has_value()) {
    sq = *norms->grad_sq;
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
    norms->grad_sq = sq;
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
  if (norms_final && !optim::NeedsTrustRatio(oc.kind)) norms_final(*norms);
  if (into != nullptr) {
    RETURN_IF_ERROR(ApplyInOrder(step_index, grad, scale, into));
  } else if (!optim::NeedsTrustRatio(oc.kind)) {
    RETURN_IF_ERROR(RunGroups([&](size_t g) -> absl::Status {
      for (int i : update_groups_[g]) {
        RETURN_IF_ERROR(optim::StepSlice(oc, step_index, lr,
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
    if (!split_tensors_.empty() && mode() == BSP) {
      if (!norms->lamb.has_value()) {
        std::vector<double> local;
        for (int t : split_tensors_) {
          auto it = per_tensor.find(t);
          local.push_back(it == per_tensor.end() ? 0 : it->second.param_sq);
          local.push_back(it == per_tensor.end() ? 0 : it->second.update_sq);
        }
        ASSIGN_OR_RETURN(norms->lamb,
                         AllReduce(step_index, kPhaseLamb, local, deadline));
      }
      const std::vector<double>& total = *norms->lamb;
      if (total.size() != 2 * split_tensors_.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "LAMB totals: ", total.size(), " values for ",
            split_tensors_.size(), " split tensors"));
      }
      for (size_t j = 0; j < split_tensors_.size(); ++j) {
        if (per_tensor.count(split_tensors_[j])) {
          per_tensor[split_tensors_[j]] = {total[2 * j], total[2 * j + 1]};
        }
      }
    }
    if (norms_final) norms_final(*norms);  // LAMB's totals are known now
    for (int i : local_slices()) {
      const SliceSpec& sl = plan_.slices()[i];
      const float ratio = optim::TrustRatio(oc, sl.decay, per_tensor[sl.tensor]);
      optim::ApplyUpdate(oc, lr, slice_of(sl),
                         update_scratch_.data() + sl.shard_offset, ratio);
    }
  }
  absl::MutexLock l(&mu_);
  last_grad_norm_ = norm;
  last_lr_ = lr;
  return absl::OkStatus();
}

}  // namespace ps
}  // namespace bertps

// ShardCore: checkpoints and restores of the shard's slice and optimizer state
// (common/ps/checkpoint.h).
#include "server/ps/shard.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/ps/checkpoint.h"
#include "common/status.h"
#include "glog/logging.h"

namespace bertps {
namespace ps {

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
      return !CheckAlive().ok() || (version_ >= version && !updating_);
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
  ASSIGN_OR_RETURN(ShardFile f, WriteShardCheckpoint(dir, snap, options_.fs));
  CheckpointResponse r;
  {
    absl::MutexLock l(&mu_);
    r.set_example_ledger(ledger_.Serialize());  // of version v (no step ran)
    if (next_cut_ > 0 && v == next_cut_) {
      next_cut_ = job_plan().NextCut(v);  // held pushes go on
    }
  }
  waits_->Poke();
  r.set_file(f.file);
  r.set_version(v);
  r.set_crc32c(f.crc32c);
  r.set_bytes(f.bytes);
  return r;
}

absl::StatusOr<int64_t> ShardCore::Restore(const std::string& manifest,
                                           bool new_phase,
                                           bool reset_optimizer) {
  const int64_t n = shard_size();
  AlignedVector<float> params(n);
  std::vector<float> slot_major(static_cast<size_t>(state_slots_) * n);
  ASSIGN_OR_RETURN(int64_t v, RestoreShard(manifest, layout_, plan_,
                                           options_.shard, state_slots_,
                                           params.data(), slot_major.data()));
  if (new_phase) {
    v = 0;
    if (reset_optimizer) std::fill(slot_major.begin(), slot_major.end(), 0.0f);
  }
  ExampleLedger ledger;
  if (!new_phase) {
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
  // The update tickets below v were applied: each worker's steps before
  // them.
  for (int w = 0; w < workers(); ++w) clock_[w] = job_plan().StepsBefore(w, v);
  next_cut_ = job_plan().NextCut(v);
  for (size_t w = 0; w < clock_.size(); ++w) last_step_[w] = clock_[w] - 1;
  announces_.clear();
  hint_tensor_ = -1;
  hint_rows_.clear();
  PublishLocked();
  return v;
}

}  // namespace ps
}  // namespace bertps

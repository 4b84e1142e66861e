// ShardCore: checkpoints and restores of the shard's slice and optimizer state
// (common/ps/checkpoint.h), written in the background by a CheckpointWriter.
#include "server/ps/shard.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/ps/checkpoint.h"
#include "common/crash_point.h"
#include "common/status.h"
#include "glog/logging.h"

namespace bertps {
namespace ps {

namespace {

// Per-slice [slot0 | slot1] layout <- slot-major (checkpoint files).
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

CheckpointResponse ResponseOf(const CheckpointWriter::Known& k,
                              int64_t version) {
  CheckpointResponse r;
  r.set_version(version);
  r.set_example_ledger(k.example_ledger);
  r.set_pending(k.pending);
  r.set_copy_ms(k.copy_ms);
  if (!k.pending) {
    r.set_file(k.file.file);
    r.set_crc32c(k.file.crc32c);
    r.set_bytes(k.file.bytes);
    r.set_write_ms(k.write_ms);
  }
  return r;
}

}  // namespace

absl::StatusOr<CheckpointResponse> ShardCore::Checkpoint(
    const std::string& dir, int64_t version, absl::Time deadline,
    CheckpointRequest::Mode mode) {
  deadline = std::min(deadline, absl::Now() + options_.wait_timeout);
  if (mode == CheckpointRequest::COLLECT) {
    CheckpointWriter::Known k = writer_->Collect(dir, version, deadline);
    if (!k.known) {
      return absl::NotFoundError(absl::StrCat(
          "no checkpoint of version ", version, " into ", dir,
          " in flight or written by this shard (its writer was replaced)"));
    }
    if (!k.pending && !k.error.ok()) return k.error;
    return ResponseOf(k, version);
  }
  // A worker 0 started again asks for the checkpoint it had started (one
  // that failed is written again).
  if (CheckpointWriter::Known k = writer_->Find(dir, version);
      k.known && (k.pending || k.error.ok())) {
    if (mode == CheckpointRequest::WAIT) return Durable(dir, version, deadline);
    if (!k.pending && !k.error.ok()) return k.error;
    return ResponseOf(k, version);
  }
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
  // The buffer: once the previous write (if any) ended.
  RETURN_IF_ERROR(writer_->Reserve(deadline));
  std::string ledger;
  double copy_ms = 0;
  {
    absl::MutexLock ul(&update_mu_);
    const auto t0 = std::chrono::steady_clock::now();
    int64_t v;
    {
      absl::MutexLock l(&mu_);
      // Again, now that no step runs: one that failed since the check above
      // may have left its optimizer state half-updated at this version.
      absl::Status alive = CheckAlive();
      if (!alive.ok()) {
        writer_->Release();
        return alive;
      }
      v = version_;
    }
    if (v != version) {
      writer_->Release();
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint of version ", version, " asked, shard is at ", v));
    }
    ShardSnapshot snap;
    snap.shard = options_.shard;
    snap.num_shards = options_.num_shards;
    snap.version = v;
    snap.plan = &plan_;
    snap.params = CurrentParams();
    snap.state = state_.data();
    snap.state_slots = state_slots_;
    snap.state_per_slice = true;
    // The one copy that holds updates back: the state at the boundary,
    // serialized into the writer's buffer.
    absl::Status copied = SerializeShardCheckpoint(snap, writer_->buffer());
    if (!copied.ok()) {
      writer_->Release();
      return copied;
    }
    absl::MutexLock l(&mu_);
    ledger = ledger_.Serialize();  // of version v (no step ran)
    if (next_cut_ > 0 && v == next_cut_) {
      next_cut_ = job_plan().NextCut(v);  // held pushes go on
    }
    copy_ms = std::chrono::duration<double, std::milli>(
                  std::chrono::steady_clock::now() - t0)
                  .count();
  }
  waits_->Poke();
  CrashPoint("ckpt_copy", version, options_.shard);
  writer_->Launch(dir, version, std::move(ledger), copy_ms);
  if (mode == CheckpointRequest::START) {
    return ResponseOf(writer_->Find(dir, version), version);
  }
  return Durable(dir, version, deadline);
}

absl::StatusOr<CheckpointResponse> ShardCore::Durable(const std::string& dir,
                                                      int64_t version,
                                                      absl::Time deadline) {
  CheckpointWriter::Known k = writer_->Collect(dir, version, deadline);
  if (k.pending) {
    return absl::DeadlineExceededError(absl::StrCat(
        "checkpoint of version ", version, " still being written"));
  }
  if (!k.error.ok()) return k.error;
  return ResponseOf(k, version);
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
  // A checkpoint of this version written before the restore is of another
  // state: never answered for again.
  writer_->Forget();
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

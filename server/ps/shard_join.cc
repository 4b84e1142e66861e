// ShardCore: re-replication. A daemon that joins a running job as a backup
// gets its primary's whole state at one version (a copy made between two
// steps, sent while the job goes on), then the steps applied since as
// ordinary ReplicaSteps (docs/ps.md "Replicas").
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/io/crc32c.h"
#include "common/status.h"
#include "glog/logging.h"
#include "server/ps/shard.h"

namespace bertps {
namespace ps {

absl::StatusOr<ShardCore::JoinSnapshot> ShardCore::SnapshotForJoin(
    const std::function<void(int64_t version)>& begin) {
  const int64_t n = shard_size();
  JoinSnapshot snap;
  // Allocated before the lock: only the copy holds up the next step.
  snap.data = HugeBuffer(static_cast<size_t>(n) + state_.size());
  SnapshotHeader& h = snap.header;
  {
    absl::MutexLock ul(&update_mu_);
    {
      absl::MutexLock l(&mu_);
      if (backup_) {
        return absl::FailedPreconditionError(absl::StrCat(
            "shard ", options_.shard, " is a backup: only a primary sends "
            "snapshots"));
      }
      RETURN_IF_ERROR(broken_);
      h.set_incarnation(options_.incarnation);
      h.set_term(term_);
      h.set_version(version_);
      for (int64_t c : clock_) h.add_worker_clock(c);
      for (int64_t s : last_step_) h.add_last_step(s);
      h.set_example_ledger(ledger_.Serialize());
      h.set_pushes_applied(pushes_applied_);
    }
    std::memcpy(snap.data.data(), CurrentParams(), sizeof(float) * n);
    std::memcpy(snap.data.data() + n, state_.data(),
                sizeof(float) * state_.size());
    h.set_params_elements(n);
    h.set_state_elements(static_cast<int64_t>(state_.size()));
    begin(h.version());
  }
  h.set_crc32c(io::Crc32c(snap.data.data(), sizeof(float) * snap.data.size()));
  return snap;
}

absl::Status ShardCore::CheckSnapshotHeader(const SnapshotHeader& h) const {
  const int64_t n = shard_size();
  const std::string what =
      absl::StrCat("snapshot of version ", h.version(), " for shard ",
                   options_.shard);
  if (h.incarnation() != options_.incarnation) {
    return absl::AbortedError(absl::StrCat(
        what, " is of job incarnation ", h.incarnation(), "; this shard "
        "serves incarnation ", options_.incarnation));
  }
  if (h.params_elements() != n ||
      h.state_elements() != static_cast<int64_t>(state_slots_) * n) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " holds ", h.params_elements(), " parameters and ",
        h.state_elements(), " state values; this shard has ", n, " and ",
        static_cast<int64_t>(state_slots_) * n));
  }
  const int workers = this->workers();
  if (h.worker_clock_size() != workers || h.last_step_size() != workers ||
      h.version() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": clocks of ", h.worker_clock_size(), " workers (",
        workers, " expected) or a negative version"));
  }
  for (int w = 0; w < workers; ++w) {
    if (h.worker_clock(w) < 0 || h.worker_clock(w) > h.version() ||
        h.last_step(w) < -1) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": worker ", w, "'s clock ", h.worker_clock(w),
          " or step ", h.last_step(w), " out of range"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ShardCore::InstallSnapshot(const SnapshotHeader& h,
                                                   const float* data) {
  RETURN_IF_ERROR(CheckSnapshotHeader(h));
  const int64_t n = shard_size();
  const int workers = this->workers();
  const std::string what =
      absl::StrCat("snapshot of version ", h.version(), " for shard ",
                   options_.shard);
  const size_t bytes = sizeof(float) * static_cast<size_t>(n + h.state_elements());
  if (io::Crc32c(data, bytes) != h.crc32c()) {
    return absl::DataLossError(absl::StrCat(what, ": checksum mismatch"));
  }
  ExampleLedger ledger;
  if (!h.example_ledger().empty()) {
    absl::StatusOr<ExampleLedger> parsed =
        ExampleLedger::Parse(h.example_ledger());
    if (!parsed.ok()) return Annotate(parsed.status(), what);
    ledger = std::move(*parsed);
  }
  absl::MutexLock ul(&update_mu_);
  absl::MutexLock l(&mu_);
  if (!backup_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard ", options_.shard, " here is a primary (term ", term_,
        "): it takes no snapshot"));
  }
  if (h.term() < term_) {
    return absl::AbortedError(absl::StrCat(
        "shard ", options_.shard, " is at term ", term_,
        ": the primary of term ", h.term(), " was replaced"));
  }
  std::memcpy(params_.data(), data, sizeof(float) * n);
  params_behind_ = false;
  std::memcpy(state_.data(), data + n, sizeof(float) * state_.size());
  term_ = h.term();
  version_ = h.version();
  broken_ = absl::OkStatus();
  for (int w = 0; w < workers; ++w) {
    clock_[w] = h.worker_clock(w);
    last_step_[w] = h.last_step(w);
  }
  ledger_ = std::move(ledger);
  pushes_applied_ = h.pushes_applied();
  replica_stage_.reset();
  next_cut_ = job_plan().NextCut(version_);
  LOG(INFO) << "shard " << options_.shard << ": backup installed the "
            << "primary's snapshot of version " << version_ << " (term "
            << term_ << ")";
  return version_;
}

}  // namespace ps
}  // namespace bertps

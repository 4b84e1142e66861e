// Completes worker 0's asynchronous checkpoints off the step's thread: a
// checkpoint started on every shard (PsClient::StartCheckpoint: the shards
// copied their state, the step goes on) is handed to Add(); on a thread of
// its own the finisher waits until every shard's file is durable, writes
// the manifest and moves LATEST (PsClient::FinishCheckpoint), one
// checkpoint after the other in the order added, so LATEST only moves
// forward. The step loop takes what finished (Take) into its next step
// report, which is how the coordinator learns of a checkpoint: only
// complete ones are ever named, so eval rounds, retention and restarts see
// only those.
//
// Crash point (common/crash_point.h; index 0): "ckpt_manifest" (every
// shard's file durable, the manifest not written).
//
// Thread-safety: thread-safe; one step loop uses it.
#ifndef BERTPS_WORKER_CHECKPOINT_FINISHER_H_
#define BERTPS_WORKER_CHECKPOINT_FINISHER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/ps/ps_client.h"
#include "common/serial_thread.h"

namespace bertps {

class CheckpointFinisher {
 public:
  struct Done {
    std::string manifest;
    int64_t version = 0;
  };

  // `client` must outlive the finisher. `log` (may be null): a JSON line
  // per completed checkpoint.
  CheckpointFinisher(PsClient* client, std::ostream* log);
  // Waits for the checkpoint being completed (a stopped part's client
  // cancels its calls at once).
  ~CheckpointFinisher();

  // Completes `p` after those added before.
  void Add(PsClient::PendingCheckpoint p) ABSL_LOCKS_EXCLUDED(mu_);
  // The checkpoints completed since the last call, oldest first (each must
  // be reported: the coordinator starts an eval round at each one due), or
  // the first completion that failed (the part fails with it, as it
  // would have at a synchronous write). A checkpoint whose shard was lost
  // or replaced meanwhile (Lost: UNAVAILABLE, NOT_FOUND, ABORTED, a stopped
  // part's CANCELLED, DEADLINE_EXCEEDED) is not an error: it is absent, the
  // previous one stays the newest, and the part goes on (the failover
  // handles the shard); a write that failed (a full disk: the shard's
  // error) is.
  absl::StatusOr<std::vector<Done>> Take() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until every checkpoint added is complete (or failed); then Take.
  absl::StatusOr<std::vector<Done>> Drain() ABSL_LOCKS_EXCLUDED(mu_);
  // Checkpoints lost so far.
  int64_t lost() ABSL_LOCKS_EXCLUDED(mu_);

  static bool Lost(const absl::Status& st);

 private:
  PsClient* const client_;
  std::ostream* const log_;
  absl::Mutex mu_;
  int64_t added_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ended_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Done> done_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  int64_t lost_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<SerialThread> thread_;  // last: joined first
};

}  // namespace bertps

#endif  // BERTPS_WORKER_CHECKPOINT_FINISHER_H_

// One shard's background checkpoint writes (CheckpointRequest.mode START /
// COLLECT): the state is serialized into a buffer at the step boundary, under
// the shard's update lock (ShardCore::Checkpoint), and the buffer is written,
// checksummed, fsynced and renamed here, on a thread of its own at a lower
// CPU priority, while steps go on.
//
// At most one write in flight: the buffer is reused (its pages are faulted
// in once; the memory a checkpoint costs is one shard file, held for the
// shard's life), so a cut that comes while the previous write is still
// going waits for it (Reserve) -- no checkpoint is skipped, and the wait
// is logged. The writer remembers the last writes (their keys, the example
// ledger of their version, their file or error), so that worker 0, or a
// worker 0 started again, collects them.
//
// Crash points (common/crash_point.h; index: the shard): "ckpt_written"
// (the data is in the temporary file, not fsynced), "ckpt_synced" (fsynced,
// not renamed), "ckpt_renamed" (durable, not collected: no manifest names
// it yet).
//
// Thread-safety: thread-safe. The buffer is the caller's between Reserve
// and Launch/Release only.
#ifndef BERTPS_SERVER_PS_CHECKPOINT_WRITER_H_
#define BERTPS_SERVER_PS_CHECKPOINT_WRITER_H_

#include <cstdint>
#include <deque>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/io/file_util.h"
#include "common/ps/checkpoint.h"
#include "common/serial_thread.h"

namespace bertps {
namespace ps {

class CheckpointWriter {
 public:
  // `fs` (null: the real file system) must outlive the writer.
  CheckpointWriter(io::FileSystem* fs, int shard, int num_shards);
  // Waits for the write in flight.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // What the writer knows of one checkpoint.
  struct Known {
    bool known = false;    // the write in flight or the last one
    bool pending = false;  // still being written
    absl::Status error;    // of a write that failed
    ShardFile file;        // of a write that is durable
    std::string example_ledger;
    double copy_ms = 0;
    double write_ms = 0;
  };

  // Allocates the buffer for a file of about `bytes` and touches its pages,
  // on the writer's thread (Reserve waits for it): the first cut's copy
  // then costs a copy, not the page faults of a fresh buffer (a BERT-base
  // shard's ~650 MB: ~160,000 faults, several times the copy itself).
  void Prefault(int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

  // Waits until no write is in flight, then reserves the buffer for the
  // caller. DeadlineExceeded at `deadline`.
  absl::Status Reserve(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // The reserved buffer (only between Reserve and Launch/Release).
  std::string* buffer() { return &buffer_; }
  // Gives the buffer back unused.
  void Release() ABSL_LOCKS_EXCLUDED(mu_);
  // Writes the buffer as the shard's file of `version` under `dir` in the
  // background; the buffer stays reserved until the write ended.
  void Launch(const std::string& dir, int64_t version,
              std::string example_ledger, double copy_ms)
      ABSL_LOCKS_EXCLUDED(mu_);

  // What is known of (dir, version) now.
  Known Find(const std::string& dir, int64_t version) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The same, once its write ended or at `deadline` (then pending). A
  // write that ended before the last one is found too (among the last
  // kRemembered).
  Known Collect(const std::string& dir, int64_t version,
                absl::Time deadline) const ABSL_LOCKS_EXCLUDED(mu_);

  // Waits for the write in flight, then forgets the last write (a restored
  // shard's state is another one: its checkpoints are written anew).
  void Forget() ABSL_LOCKS_EXCLUDED(mu_);

  // Cuts that waited for the previous write (for tests and metrics).
  int64_t waited() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  Known FindLocked(const std::string& dir, int64_t version) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Writes that ended before the last one, newest last (at most
  // kRemembered): worker 0 may collect a checkpoint after the next cut
  // began the next write.
  static constexpr size_t kRemembered = 8;
  struct Ended {
    std::string dir;
    int64_t version;
    Known known;
  };

  io::FileSystem* const fs_;
  const int shard_;
  const int num_shards_;
  mutable absl::Mutex mu_;
  bool reserved_ ABSL_GUARDED_BY(mu_) = false;
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool has_last_ ABSL_GUARDED_BY(mu_) = false;
  std::string dir_ ABSL_GUARDED_BY(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = -1;
  std::string ledger_ ABSL_GUARDED_BY(mu_);
  absl::StatusOr<ShardFile> result_ ABSL_GUARDED_BY(mu_);
  double copy_ms_ ABSL_GUARDED_BY(mu_) = 0;
  double write_ms_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t waited_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Ended> ended_ ABSL_GUARDED_BY(mu_);
  // Written by the caller between Reserve and Launch, then read by the
  // write on thread_ until it ended: `reserved_` hands it over.
  std::string buffer_;
  SerialThread thread_;  // last: its destructor runs the write in flight
};

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_SERVER_PS_CHECKPOINT_WRITER_H_

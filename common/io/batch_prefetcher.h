// A worker's batches read ahead on a thread of its own.
//
// BatchPrefetcher reads the batches of steps first, first + 1, ... (up to
// an end) with a caller's read function (read the records through the
// index, check their CRCs, decode and validate them) at most `depth` steps
// ahead of the step taken last, so that in steady state the compute thread
// takes a batch that is already there: bounded memory (depth batches), one
// thread for the worker's life. A read error stops the reading: the step
// that failed returns it when taken, never an earlier one (a read that
// throws std::bad_alloc fails its step with RESOURCE_EXHAUSTED). Taking a step
// other than the next one restarts the reading there (what was read ahead
// is dropped).
//
// Thread-safety: thread-safe; the read function runs on the prefetch thread
// only, one call at a time.
#ifndef BERTPS_COMMON_IO_BATCH_PREFETCHER_H_
#define BERTPS_COMMON_IO_BATCH_PREFETCHER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/io/bert_example.h"

namespace bertps {
namespace io {

class BatchPrefetcher {
 public:
  using ReadFn = std::function<absl::Status(int64_t step, BertBatch* out)>;

  // Reads steps [first, end), at most `depth` (>= 1) ahead of the taker.
  BatchPrefetcher(ReadFn read, int depth, int64_t first, int64_t end);
  ~BatchPrefetcher();  // stops the thread (after its current read)
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // The batch of `step` into *out (waiting until it is read) and its read's
  // status. *wait_ms (optional) adds the time waited.
  absl::Status Take(int64_t step, BertBatch* out, double* wait_ms = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Batches read so far, and how many of them were ready when taken.
  int64_t batches_read() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t taken_ready() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    int64_t step = 0;
    absl::Status status;
    BertBatch batch;
  };
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const ReadFn read_;
  const int depth_;
  mutable absl::Mutex mu_;
  std::deque<Entry> ready_ ABSL_GUARDED_BY(mu_);
  int64_t next_read_ ABSL_GUARDED_BY(mu_);  // the next step to read
  int64_t served_ ABSL_GUARDED_BY(mu_);     // the next step expected
  int64_t end_ ABSL_GUARDED_BY(mu_);
  // Bumped at a restart: a read begun before it is dropped.
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;  // stop after an error
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t batches_read_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t taken_ready_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: starts once the fields above exist
};

}  // namespace io
}  // namespace bertps

#endif  // BERTPS_COMMON_IO_BATCH_PREFETCHER_H_

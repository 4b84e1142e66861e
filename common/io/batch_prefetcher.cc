#include "common/io/batch_prefetcher.h"

#include <algorithm>
#include <chrono>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"

namespace bertps {
namespace io {

BatchPrefetcher::BatchPrefetcher(ReadFn read, int depth, int64_t first,
                                 int64_t end)
    : read_(std::move(read)),
      depth_(std::max(depth, 1)),
      next_read_(first),
      served_(first),
      end_(end),
      thread_([this] { Loop(); }) {}

BatchPrefetcher::~BatchPrefetcher() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void BatchPrefetcher::Loop() {
  BertBatch batch;
  while (true) {
    int64_t step = 0, generation = 0;
    {
      absl::MutexLock l(&mu_);
      auto can_read = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ ||
               (!failed_ && next_read_ < end_ &&
                next_read_ < served_ + depth_);
      };
      mu_.Await(absl::Condition(&can_read));
      if (stop_) return;
      step = next_read_++;
      generation = generation_;
    }
    absl::Status st;
    try {
      st = read_(step, &batch);
    } catch (const std::bad_alloc&) {
      // Short of memory (a tight limit): the step fails, not the process.
      batch = BertBatch();
      st = absl::ResourceExhaustedError(absl::StrCat(
          "out of memory reading the batch of step ", step));
    }
    absl::MutexLock l(&mu_);
    if (generation != generation_) continue;  // restarted meanwhile
    ++batches_read_;
    if (!st.ok()) failed_ = true;
    ready_.push_back(Entry{step, std::move(st), std::move(batch)});
    batch = BertBatch();
  }
}

absl::Status BatchPrefetcher::Take(int64_t step, BertBatch* out,
                                   double* wait_ms) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::MutexLock l(&mu_);
  if (step != served_ || (failed_ && ready_.empty())) {
    // Not the next step (or taken again after an error): read from there.
    ++generation_;
    ready_.clear();
    failed_ = false;
    next_read_ = served_ = step;
  }
  end_ = std::max(end_, step + 1);
  const bool was_ready = !ready_.empty();
  auto arrived = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !ready_.empty();
  };
  mu_.Await(absl::Condition(&arrived));
  Entry e = std::move(ready_.front());
  ready_.pop_front();
  served_ = step + 1;
  if (was_ready) ++taken_ready_;
  *out = std::move(e.batch);
  if (wait_ms != nullptr) {
    *wait_ms += std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
  }
  return e.status;
}

int64_t BatchPrefetcher::batches_read() const {
  absl::MutexLock l(&mu_);
  return batches_read_;
}

int64_t BatchPrefetcher::taken_ready() const {
  absl::MutexLock l(&mu_);
  return taken_ready_;
}

}  // namespace io
}  // namespace bertps

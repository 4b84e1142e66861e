// Handoff<T>: a bounded, ordered hand-off of items from one producing thread
// to a consuming thread of its own, which runs `consume` on each item in
// order. Lets a stream's reader go back to the socket while the previous
// message is still being copied or checked (the two took turns on one
// thread before, and the sender waited on flow control meanwhile).
//
// The first error `consume` returns stops it: later items are dropped, Push
// returns false from then on, and Close() returns that error.
//
// Thread-safety: Push and Close from one producing thread; `consume` runs on
// the handoff's own thread, or on a lane of a ThreadLanes that outlives it. The destructor closes (and joins) if Close was
// not called.
#ifndef BERTPS_COMMON_HANDOFF_H_
#define BERTPS_COMMON_HANDOFF_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/thread_lanes.h"

namespace bertps {

template <typename T>
class Handoff {
 public:
  // depth >= 1: most items waiting for the consumer; Push blocks beyond it,
  // so that a slow consumer holds the producer back (and bounds memory).
  Handoff(size_t depth, std::function<absl::Status(T&)> consume)
      : depth_(depth < 1 ? 1 : depth),
        consume_(std::move(consume)),
        thread_([this] { Run(); }) {}
  // The consumer runs on lane `lane` of `lanes` (no thread of its own).
  Handoff(size_t depth, std::function<absl::Status(T&)> consume,
          ThreadLanes* lanes, int lane)
      : depth_(depth < 1 ? 1 : depth), consume_(std::move(consume)) {
    done_ = lanes->Run(lane, [this] { Run(); });
  }
  ~Handoff() { Close().IgnoreError(); }
  Handoff(const Handoff&) = delete;
  Handoff& operator=(const Handoff&) = delete;

  // Queues `item` (waiting for room). False, and the item dropped, once the
  // consumer failed or the handoff is closed.
  bool Push(T item) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return queue_.size() < depth_ || !error_.ok() || closed_;
    };
    mu_.Await(absl::Condition(&room));
    if (!error_.ok() || closed_) return false;
    queue_.push_back(std::move(item));
    return true;
  }

  // True once `consume` failed (Close() returns its error).
  bool failed() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return !error_.ok();
  }

  // No more items: waits until the consumer took every queued item (or
  // failed); its first error, else OK. Idempotent.
  absl::Status Close() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock l(&mu_);
      closed_ = true;
    }
    if (thread_.joinable()) thread_.join();
    if (done_ != nullptr) done_->WaitForNotification();
    absl::MutexLock l(&mu_);
    return error_;
  }

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_) {
    for (;;) {
      T item;
      {
        absl::MutexLock l(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return !queue_.empty() || closed_;
        };
        mu_.Await(absl::Condition(&ready));
        if (queue_.empty()) return;  // closed and drained
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      absl::Status st = consume_(item);
      if (!st.ok()) {
        absl::MutexLock l(&mu_);
        error_ = std::move(st);
        queue_.clear();
        return;
      }
    }
  }

  const size_t depth_;
  const std::function<absl::Status(T&)> consume_;
  mutable absl::Mutex mu_;
  std::deque<T> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<absl::Notification> done_;  // of the lane's run
  std::thread thread_;  // last: starts once the fields above exist
};

}  // namespace bertps

#endif  // BERTPS_COMMON_HANDOFF_H_

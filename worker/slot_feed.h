// SlotFeed: the slots a running train part computes from its next step on.
// A train member whose part computes several slots serially on one model
// (TrainWorkerOptions::also_workers) sets it when the coordinator takes
// slots of the part's back for a daemon that joined; the part reads it as
// it prepares each step (TrainWorker::Prepare), so it gives them up at a
// step boundary without starting again. A slot it gives up may be computed
// by both for a step or two (the newcomer starts at the shards' step): the
// same bits, applied once.
// Thread-safety: any thread.
#ifndef BERTPS_WORKER_SLOT_FEED_H_
#define BERTPS_WORKER_SLOT_FEED_H_

#include <functional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace bertps {

class SlotFeed {
 public:
  // `slots` ascending. `on_taken` (optional) runs once the part begins a
  // step with the slots Set last (it no longer computes those it gave up).
  explicit SlotFeed(std::vector<int> slots,
                    std::function<void()> on_taken = nullptr)
      : on_taken_(std::move(on_taken)), slots_(std::move(slots)) {}
  void Set(std::vector<int> slots) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    slots_ = std::move(slots);
    pending_ = true;
  }
  std::vector<int> Get() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return slots_;
  }
  // The part begins a step computing `slots` (ascending).
  void Computing(const std::vector<int>& slots) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock l(&mu_);
      if (!pending_ || slots != slots_) return;
      pending_ = false;
    }
    if (on_taken_) on_taken_();
  }

 private:
  const std::function<void()> on_taken_;
  mutable absl::Mutex mu_;
  std::vector<int> slots_ ABSL_GUARDED_BY(mu_);
  bool pending_ ABSL_GUARDED_BY(mu_) = false;  // Set, not yet computing
};

}  // namespace bertps

#endif  // BERTPS_WORKER_SLOT_FEED_H_

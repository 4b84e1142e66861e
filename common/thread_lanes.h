// ThreadLanes: a fixed set of long-lived threads ("lanes") that run a
// client's per-shard tasks (a pull's stream, its copier, a push's sender),
// so that a step creates no thread.
//
// Run(lane, fn) runs fn on thread `lane` when that lane is idle. When it is
// busy (two tasks for the same shard at once: an overlapping pull, a
// checkpoint during a push), fn runs on an extra thread instead, counted in
// extra_threads(): queueing behind the busy task could deadlock (a pull
// waiting for a version that the queued push must produce). The extra
// threads are joined as they end.
//
// Start() starts every lane's thread at once (otherwise each starts at its
// lane's first task), so that a process that cannot start threads (their
// stacks cannot be mapped under a tight memory limit) hears it as an error
// at start. A thread that cannot start later (an extra one) does not abort
// the process: its task runs on the caller's thread instead (logged), which
// at worst waits for the task's own deadline.
//
// Thread-safety: thread-safe. The destructor waits for every task.
#ifndef BERTPS_COMMON_THREAD_LANES_H_
#define BERTPS_COMMON_THREAD_LANES_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace bertps {

class ThreadLanes {
 public:
  ThreadLanes(std::string name, int lanes);
  ~ThreadLanes();
  // Starts the lanes' threads (those not started yet); RESOURCE_EXHAUSTED
  // naming the lanes when one cannot start.
  absl::Status Start() ABSL_LOCKS_EXCLUDED(mu_);
  ThreadLanes(const ThreadLanes&) = delete;
  ThreadLanes& operator=(const ThreadLanes&) = delete;

  // Runs fn on lane `lane` (modulo the lanes), or on an extra thread when
  // that lane is busy; the notification is notified once fn returned.
  std::shared_ptr<absl::Notification> Run(int lane, std::function<void()> fn)
      ABSL_LOCKS_EXCLUDED(mu_);

  // (lanes_ is sized once, in the constructor.)
  int lanes() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return static_cast<int>(lanes_.size());
  }
  // Threads started for tasks: the lanes (once each, at first use) and the
  // extra ones.
  int64_t threads_started() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t extra_threads() const ABSL_LOCKS_EXCLUDED(mu_);
  // Tasks run on the caller's thread because no thread could start.
  int64_t inline_runs() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Lane {
    std::function<void()> task;  // guarded by mu_
    std::shared_ptr<absl::Notification> done;
    bool busy = false;
    std::thread thread;  // started at the lane's first task
  };
  struct Extra {
    std::thread thread;
    bool ended = false;  // guarded by mu_
  };
  void LaneLoop(int lane) ABSL_LOCKS_EXCLUDED(mu_);
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  mutable absl::Mutex mu_;
  std::vector<Lane> lanes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Extra>> extras_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t started_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t extra_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t inline_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace bertps

#endif  // BERTPS_COMMON_THREAD_LANES_H_

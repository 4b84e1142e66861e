// One long-lived thread that runs the functions given to it, one at a time,
// in the order given: work that recurs (a shard's update of every step)
// without a thread created and joined each time.
//
//   SerialThread t("update");
//   t.Post([] { ... });       // runs later, on t's thread
//   t.Run([] { ... });        // runs on t's thread; returns when done
//
// `nice` > 0 lowers the thread's CPU priority by that many levels once, when
// it starts (Linux keeps nice per thread; at most 19): work that should yield
// the CPU to the threads serving RPCs runs there. The destructor runs what
// was posted, then joins.
//
// Thread-safety: thread-safe. Run() must not be called from the thread's
// own functions (it would wait for itself).
#ifndef BERTPS_COMMON_SERIAL_THREAD_H_
#define BERTPS_COMMON_SERIAL_THREAD_H_

#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace bertps {

class SerialThread {
 public:
  explicit SerialThread(std::string name, int nice = 0);
  ~SerialThread();
  SerialThread(const SerialThread&) = delete;
  SerialThread& operator=(const SerialThread&) = delete;

  // Queues fn; it runs after everything posted before it.
  void Post(std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs fn on the thread and waits for it.
  void Run(const std::function<void()>& fn) ABSL_LOCKS_EXCLUDED(mu_);
  // Functions run so far (for tests).
  int64_t ran() const ABSL_LOCKS_EXCLUDED(mu_);
  // The thread's nice level as it read it at start (for tests).
  int nice_at_start() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop(int nice);

  const std::string name_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  int nice_at_start_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ran_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: starts once the fields above exist
};

}  // namespace bertps

#endif  // BERTPS_COMMON_SERIAL_THREAD_H_

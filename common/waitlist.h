// Waitlist: callbacks that run once a condition holds or a deadline passes,
// all on one thread. A server that must wait for events (a version made,
// every worker's announce) holds a waiting call here instead of a thread
// per call, so its thread count does not grow with the number of callers.
//
//   Waitlist w("shard-waits");
//   w.Add([&] { return version() >= 3; }, deadline,
//         [](bool ready) { ... });   // ready: the condition held in time
//   ...                              // whoever changes the version:
//   w.Poke();
//
// After every Poke() the thread evaluates each waiter's `ready` (with no
// lock of the waitlist held: it may take the locks of the state it reads)
// and runs `fire(true)` for those that hold and `fire(false)` for those
// whose deadline passed. It also looks every `poll` without a poke, a net
// for a state change that was not poked: such a late find is counted
// (missed_pokes(), which tests expect to stay 0).
//
// `fire` runs on the waitlist's thread, once, with no lock held, after its
// waiter left the list; it must not block (it may Add again). Stop() (and
// the destructor) fires every waiter left, as its condition then stands.
//
// Thread-safety: thread-safe.
#ifndef BERTPS_COMMON_WAITLIST_H_
#define BERTPS_COMMON_WAITLIST_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace bertps {

class Waitlist {
 public:
  explicit Waitlist(std::string name,
                    absl::Duration poll = absl::Milliseconds(50));
  ~Waitlist();
  Waitlist(const Waitlist&) = delete;
  Waitlist& operator=(const Waitlist&) = delete;

  // Waits for `ready` until `deadline`; see the class comment. After
  // Stop(), fires at once on the caller's thread.
  void Add(std::function<bool()> ready, absl::Time deadline,
           std::function<void(bool ready)> fire) ABSL_LOCKS_EXCLUDED(mu_);
  // Something a waiter's condition reads changed.
  void Poke() ABSL_LOCKS_EXCLUDED(mu_);
  // Fires every waiter left and ends the thread (idempotent).
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  int64_t waiting() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t fired() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t missed_pokes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Waiter {
    std::function<bool()> ready;
    absl::Time deadline;
    std::function<void(bool)> fire;
  };
  void Loop();

  const std::string name_;
  const absl::Duration poll_;
  mutable absl::Mutex mu_;
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  // Waiters taken out by the thread for a look (counted in waiting()).
  int64_t looking_ ABSL_GUARDED_BY(mu_) = 0;
  bool poked_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;  // the thread ended
  int64_t fired_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t missed_pokes_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: starts once the fields above exist
};

}  // namespace bertps

#endif  // BERTPS_COMMON_WAITLIST_H_

// MemberLoop: the one heartbeat loop of every daemon that takes work from
// the coordinator (shard daemons, train workers, pipeline stages, preprocess
// and eval workers). The role a daemon plays is a MemberRole; the loop does
// what all of them share:
// - a heartbeat every interval the coordinator names (at once when the
//   role has news), carrying what the role fills in, and the assignment
//   that comes back handed to the role;
// - a heartbeat that is not answered keeps its contents (the role takes
//   them back) and is tried again after a backoff (RetryPolicy: 100 ms,
//   doubling, at most 2 s, or a third of the coordinator's member timeout
//   when that is shorter);
// - the coordinator away longer than `give_up` (0: never): the role stops
//   its work (it would run on with no one to account for it) and the loop
//   goes on trying; once the coordinator answers again the member says it
//   gave up (its job shows it as an event, and frees its work); a give-up
//   shorter than the coordinator's member timeout is warned about once the
//   coordinator names it (common/timeouts.h CheckGiveUp);
// - a coordinator that restarted forgets the member: the channel registers
//   again announcing what the role runs (MemberRole::Running), so that the
//   coordinator adopts it and the job goes on with no restart;
// - Stop(): the role stops, and the member leaves (the coordinator takes
//   its work back at once, not after the member timeout).
// Thread-safety: Run() on one thread; Stop() from any.
#ifndef BERTPS_COMMON_CLUSTER_MEMBER_LOOP_H_
#define BERTPS_COMMON_CLUSTER_MEMBER_LOOP_H_

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/cluster/member.h"
#include "common/retry.h"
#include "common/timeouts.h"
#include "proto/coordinator.pb.h"

namespace bertps {

class MemberRole {
 public:
  virtual ~MemberRole() = default;
  // What the next heartbeat carries (reports, results, errors, a shard's
  // version and ledger, ...).
  virtual void Fill(HeartbeatRequest* request) = 0;
  // The heartbeat `sent` was not answered: what it carried goes into the
  // next one.
  virtual void Unsent(const HeartbeatRequest& sent) = 0;
  // The coordinator's answer. Returns false when the loop should end (the
  // member's job ended and it exits with it).
  virtual bool Apply(const Assignment& assignment) = 0;
  // What the member runs, announced when it registers again.
  virtual MemberRun Running() = 0;
  // The coordinator was away past the give-up: stop the work (the member
  // stays, idle, and keeps trying).
  virtual void GiveUp() = 0;
  // The loop ends: stop the work and fill the leave's request.
  virtual void End(HeartbeatRequest* last) = 0;
  // The next heartbeat should go at once (news to report).
  virtual bool Urgent() { return false; }
  // Waits until the next heartbeat is due (`interval`), or less when news
  // comes (a shard's replica link); default: sleep(interval).
  virtual void Wait(absl::Duration interval,
                    const std::function<void(absl::Duration)>& sleep) {
    sleep(interval);
  }
};

struct MemberLoopOptions {
  // Stop the work after the coordinator was away this long (0: never).
  absl::Duration give_up = kCoordinatorGiveUp;
  // Retries of unanswered heartbeats (the ceiling is also kept under a
  // third of the coordinator's member timeout).
  RetryPolicy retry;
  // The clock and the sleep (tests fake them).
  std::function<absl::Time()> now = [] { return MonotonicNow(); };
  std::function<void(absl::Duration)> sleep = [](absl::Duration d) {
    absl::SleepFor(d);
  };
};

class MemberLoop {
 public:
  // Neither is owned; both outlive the loop.
  MemberLoop(MemberChannel* channel, MemberRole* role,
             MemberLoopOptions options = MemberLoopOptions());
  // Until Stop() or the role's Apply says to end. OK then.
  absl::Status Run();
  // Before Run().
  void set_give_up(absl::Duration d) { options_.give_up = d; }
  void Stop() { stop_ = true; }
  bool stopping() const { return stop_.load(); }
  // Whether the member gave up on the coordinator (until it is back).
  bool gave_up() const { return gave_up_.load(); }

 private:
  MemberChannel* const channel_;
  MemberRole* const role_;
  MemberLoopOptions options_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> gave_up_{false};
};

}  // namespace bertps

#endif  // BERTPS_COMMON_CLUSTER_MEMBER_LOOP_H_

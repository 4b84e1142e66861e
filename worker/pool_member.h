// PoolMember: a preprocess or eval worker daemon driven by the coordinator.
// Registers with its role, heartbeats, and works on the item the coordinator
// leases to it (one at a time), on a thread of its own; the item's result
// goes back on the next heartbeat, which leases the next item. When the
// coordinator's answer no longer names the item (job cancelled or failed,
// the lease given to another member after a silence), the work is cancelled.
// Item handlers must be pure functions of (spec, item): a redone item gives
// the same result and writes the same bytes.
//
// Thread-safety: Run() from one thread; Stop() and counters from any.
#ifndef BERTPS_WORKER_POOL_MEMBER_H_
#define BERTPS_WORKER_POOL_MEMBER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "common/cluster/member.h"
#include "common/cluster/member_loop.h"
#include "common/timeouts.h"

namespace bertps {

// Does one item. `cancel` turns true when the work is no longer wanted; the
// handler should then return CANCELLED soon. An error other than CANCELLED
// is reported to the coordinator as the item's error (it fails the job).
using ItemHandler = std::function<absl::StatusOr<WorkResult>(
    const JobSpec& spec, const WorkItem& item,
    const std::atomic<bool>& cancel)>;

class PoolMember : private MemberRole {
 public:
  // Dials the coordinator with `security` (common/security.h).
  PoolMember(const std::string& coordinator, Role role, ItemHandler handler,
             const SecurityConfig& security = SecurityConfig());
  ~PoolMember();
  PoolMember(const PoolMember&) = delete;
  PoolMember& operator=(const PoolMember&) = delete;

  // Until Stop() (MemberLoop: a coordinator away for `give_up` makes it
  // cancel its item and wait; 0: never). On Stop() the item in progress is
  // cancelled and its lease handed back.
  absl::Status Run(absl::Duration give_up = kCoordinatorGiveUp);
  void Stop() { loop_.Stop(); }
  int64_t items_done() const { return items_done_.load(); }

 private:
  void StartItem(const Assignment& a);
  void CancelItem();
  // MemberRole.
  void Fill(HeartbeatRequest* request) override;
  void Unsent(const HeartbeatRequest& sent) override;
  bool Apply(const Assignment& a) override;
  MemberRun Running() override;
  void GiveUp() override { CancelItem(); }
  void End(HeartbeatRequest* last) override;
  bool Urgent() override { return urgent_; }

  MemberClient member_;
  MemberLoop loop_{&member_, this};
  const ItemHandler handler_;
  // Results the last heartbeat carried (a lease they answered is not
  // started again), results of other jobs kept for the next one, and
  // whether the next heartbeat goes at once.
  std::vector<std::pair<std::string, WorkResult>> sent_;
  bool urgent_ = false;
  std::atomic<bool> cancel_{false};
  std::atomic<int64_t> items_done_{0};
  std::thread thread_;
  std::string job_;   // job of the item in progress ("" when none)
  int index_ = -1;    // its index
  absl::Mutex mu_;
  std::vector<std::pair<std::string, WorkResult>> results_
      ABSL_GUARDED_BY(mu_);  // (job, result) not yet reported
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // the thread is done
};

}  // namespace bertps

#endif  // BERTPS_WORKER_POOL_MEMBER_H_

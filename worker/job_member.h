// JobMember: the member loop shared by the daemons that take part in train
// jobs (train workers, pipeline stages). Registers with the coordinator,
// heartbeats with the step reports of its part, and runs that part (the
// Runner) on a thread for the assignment it holds:
// - a new job, a new incarnation of the same job (the coordinator started it
//   again after a lost shard or its own restart), a new member id (it
//   registered again) or "stop" ends the running part and starts the new one;
// - a part that ends in a transient failure (a shard unreachable, restarted,
//   still installing or of another incarnation: UNAVAILABLE, ABORTED,
//   DEADLINE_EXCEEDED) is started again after a pause, rejoining at the
//   shards' step, without failing the job; only when it keeps failing for
//   transient_limit without a step is the error reported;
// - Stop() ends the part and tells the coordinator the member leaves, so its
//   slot is given to another member at once.
// A train member may hold several worker slots (its index and
// Assignment.also_indices: slots of lost workers it took over, or of an
// elastic job with fewer members than slots). Where the job allows it
// (set_serial: BSP train jobs without backup workers) it runs them as one
// part computing the slots serially on one model (the part's assignment has
// every slot: its index, the member's own slot, and also_indices). Slots
// taken back from it (for a daemon that joined) it gives up, and slots
// handed to it by a member that drains (Assignment.handed_indices) it
// takes, at its next step boundary, told through a SlotFeed, without
// starting again; a slot added otherwise (taken over from a member lost),
// a handed one whose previous holder left before this part reported a step
// of it, or slot 0 given or taken (its checkpoint and export duties),
// stops the part and starts it again with the new set at the shards' step
// (the step in flight needs the new slot's push).
// Otherwise it runs one part per slot, each on its own thread with the
// assignment's index set to that slot, started, retried and stopped alone.
// Each step report names its slot, and the heartbeat lists the slots whose
// part finished (done_slots).
// A pipeline stage whose replica's stage addresses change (a lost stage's
// slot given to another daemon) is stopped and started again at the shards'
// step with the new addresses, as for a shard's new primary; while a stage
// of its replica has no member, it waits.
// A part that fails with UNAVAILABLE (a shard gone) says so on the next
// heartbeat (HeartbeatRequest.unreachable): the coordinator probes the
// shards at once instead of waiting out their member timeout.
// Thread-safety: Run() from one thread; Stop() and last_report() from any.
#ifndef BERTPS_WORKER_JOB_MEMBER_H_
#define BERTPS_WORKER_JOB_MEMBER_H_

#include <atomic>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/capability.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "common/cluster/member.h"
#include "common/cluster/member_loop.h"
#include "common/timeouts.h"
#include "worker/slot_feed.h"

namespace bertps {

class JobMember : private MemberRole {
 public:
  // Runs this member's part of `assignment` until it ends or *cancel is set;
  // `report` queues a step report for the next heartbeat. A part of several
  // slots (set_serial) gets `slots`, which says the slots it keeps from its
  // next step on when slots are taken from it (null for other parts).
  using Runner = std::function<absl::Status(
      const Assignment& assignment, std::atomic<bool>* cancel,
      const std::function<void(const StepReport&)>& report,
      const std::shared_ptr<SlotFeed>& slots)>;

  JobMember(const std::string& coordinator, Role role, std::string address,
            const SecurityConfig& security, Runner runner);
  ~JobMember();

  // Until Stop() (or the first job's end with ExitWhenJobEnds), on the one
  // member loop (MemberLoop): a coordinator away for `give_up` (0: never)
  // makes it stop its parts and wait for the coordinator.
  absl::Status Run(absl::Duration give_up = kCoordinatorGiveUp);
  void Stop() { loop_.Stop(); }
  // Leave once the work is handed off (SIGTERM): the heartbeats say
  // `draining`; the parts go on until the coordinator's answer says drain
  // (at once, or once the job's other members took this one's slots at
  // their next step boundary), then the member leaves as on Stop(). Any
  // thread.
  void Drain() {
    draining_ = true;
    urgent_ = true;
  }
  void ExitWhenJobEnds() { exit_when_job_ends_ = true; }
  void set_transient_limit(absl::Duration d) { transient_limit_ = d; }
  // Called with the job's id and each step report of a part (on the part's
  // thread). Set before Run().
  using ReportObserver =
      std::function<void(const std::string& job_id, const StepReport& report)>;
  void set_on_report(ReportObserver f) { on_report_ = std::move(f); }
  // Called with every assignment, first thing (set before Run()).
  void set_on_assignment(std::function<void(const Assignment&)> f) {
    on_assignment_ = std::move(f);
  }
  // Whether an assignment's slots run as one part (set before Run()).
  void set_serial(std::function<bool(const Assignment&)> f) {
    serial_ = std::move(f);
  }
  // The member's capability as its latest assignment gave it (the parts'
  // shard calls name it: PsClientOptions::capability).
  std::shared_ptr<const CapabilityHolder> capability() const {
    return capability_;
  }
  StepReport last_report() {
    absl::MutexLock l(&mu_);
    return last_;
  }

  // A part could not reach a shard (UNAVAILABLE): told to the coordinator
  // on the next heartbeat, which probes the shards. Any thread.
  void ReportUnreachable(const std::string& what) {
    absl::MutexLock l(&mu_);
    if (unreachable_.empty()) unreachable_ = what;
  }

  // The health service its server must answer SERVING for (see
  // MemberClient::instance_service).
  const std::string& instance_service() const {
    return member_.instance_service();
  }

  // Whether a failure of a part is worth starting it again.
  static bool IsTransient(const absl::Status& st);

 private:
  // What a part's thread leaves behind.
  struct PartState {
    std::vector<int> slots;  // the slots the part computes
    bool finished = false;   // the part's thread ended
    bool transient = false;  // ... in a transient failure
    bool cancelled = false;  // ... told to stop before its end
    std::string error;
    // Start of the current run of transient failures without a step.
    absl::Time failing_since = absl::InfiniteFuture();
  };
  // A part's thread and its stop flag (of the heartbeat loop only).
  struct Part {
    std::vector<int> slots;  // the slots it computes (the first its key)
    std::thread thread;
    std::unique_ptr<std::atomic<bool>> cancel =
        std::make_unique<std::atomic<bool>>(false);
    absl::Time retry_at = absl::InfiniteFuture();
    // The shards' addresses it was started with: a part that failed is
    // started again at once when a shard index's primary was replaced.
    std::vector<std::string> ps_addresses;
    // Pipeline stages: the replica's stage addresses it was started with;
    // a stage replaced by another daemon restarts the replica's parts at
    // the shards' step (none starts while a stage has no address).
    std::vector<std::string> peers;
    // Told to stop because the addresses changed: started again once ended.
    bool moving = false;
    // A part computing its slots serially (set_serial): the slots it
    // computes from its next step on.
    std::shared_ptr<SlotFeed> feed;
  };
  // Pipeline stages: the stage addresses of slot's replica (those of
  // Assignment.stage_addresses, else Assignment.peers).
  static std::vector<std::string> PeersOf(const Assignment& a, int slot);
  // Starts (or starts again) the part of `slot` of assignment `a`, which
  // computes `slots` (empty: `slot` alone; else `slot`, the own slot, is
  // among them).
  void Start(const Assignment& a, int slot, std::vector<int> slots = {});
  void StopPart(int slot);
  // Starts part.thread running the slot (std::system_error when no thread
  // can start).
  void StartPartThread(Part& part, const Assignment& a, int slot,
                       std::atomic<bool>* cancel);
  void StopParts();

  // MemberRole.
  void Fill(HeartbeatRequest* request) override;
  void Unsent(const HeartbeatRequest& sent) override;
  bool Apply(const Assignment& a) override;
  MemberRun Running() override;
  void GiveUp() override;
  void End(HeartbeatRequest* last) override;
  bool Urgent() override { return urgent_.exchange(false); }
  // The slots of the current assignment: started, moved, retried.
  void FollowSlots(const Assignment& a);
  // The part keyed `slot` (computing `slots`) of assignment `a`: moved,
  // retried or started again as its state says.
  void FollowPart(const Assignment& a, int slot,
                  const std::vector<int>& slots);

  MemberClient member_;
  MemberLoop loop_{&member_, this};
  const Runner runner_;
  ReportObserver on_report_;  // set before Run(), then only read
  std::function<void(const Assignment&)> on_assignment_;  // likewise
  std::function<bool(const Assignment&)> serial_;         // likewise
  std::atomic<bool> exit_when_job_ends_{false};
  std::atomic<bool> draining_{false};
  std::atomic<bool> urgent_{false};  // a heartbeat now (Drain)
  absl::Duration transient_limit_ = absl::Minutes(10);
  // Of the heartbeat loop (Run's thread) only.
  std::map<int, Part> parts_;  // by slot
  std::string job_;            // the job of the parts (running or ended)
  int64_t incarnation_ = 0;
  std::string job_key_;        // the incarnation's (Assignment.job_key)
  const std::shared_ptr<CapabilityHolder> capability_ =
      std::make_shared<CapabilityHolder>();
  int own_ = -1;               // the member's own slot
  // The capability before the latest assignment's (pinned while a part
  // gives slots up: CapabilityHolder::PinIfUnpinned).
  std::string previous_capability_;
  std::vector<StepReport> sent_;  // the reports of the heartbeat in flight

  absl::Mutex mu_;
  std::vector<StepReport> pending_ ABSL_GUARDED_BY(mu_);
  std::map<int, PartState> states_ ABSL_GUARDED_BY(mu_);  // by slot
  // A part's failure to reach a shard (UNAVAILABLE), for the next heartbeat.
  std::string unreachable_ ABSL_GUARDED_BY(mu_);
  StepReport last_ ABSL_GUARDED_BY(mu_);
  // Slots a serial part took at a step boundary from a member that drains
  // (Assignment.handed_indices), until the part reports a step of them.
  std::set<int> live_added_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bertps

#endif  // BERTPS_WORKER_JOB_MEMBER_H_

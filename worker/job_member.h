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
// Thread-safety: Run() from one thread; Stop() and last_report() from any.
#ifndef BERTPS_WORKER_JOB_MEMBER_H_
#define BERTPS_WORKER_JOB_MEMBER_H_

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "common/cluster/member.h"

namespace bertps {

class JobMember {
 public:
  // Runs this member's part of `assignment` until it ends or *cancel is set;
  // `report` queues a step report for the next heartbeat.
  using Runner = std::function<absl::Status(
      const Assignment& assignment, std::atomic<bool>* cancel,
      const std::function<void(const StepReport&)>& report)>;

  JobMember(const std::string& coordinator, Role role, std::string address,
            const SecurityConfig& security, Runner runner);
  ~JobMember();

  // Until Stop() (or the first job's end with ExitWhenJobEnds); fails only
  // if the coordinator cannot be reached for `give_up` in a row.
  absl::Status Run(absl::Duration give_up = absl::Minutes(2));
  void Stop() { stop_ = true; }
  void ExitWhenJobEnds() { exit_when_job_ends_ = true; }
  void set_transient_limit(absl::Duration d) { transient_limit_ = d; }
  // Called with the job's id and each step report of a part (on the part's
  // thread). Set before Run().
  using ReportObserver =
      std::function<void(const std::string& job_id, const StepReport& report)>;
  void set_on_report(ReportObserver f) { on_report_ = std::move(f); }
  StepReport last_report() {
    absl::MutexLock l(&mu_);
    return last_;
  }

  // Whether a failure of a part is worth starting it again.
  static bool IsTransient(const absl::Status& st);

 private:
  void Start(const Assignment& a);
  void StopPart();

  MemberClient member_;
  const Runner runner_;
  ReportObserver on_report_;  // set before Run(), then only read
  std::atomic<bool> stop_{false};
  std::atomic<bool> exit_when_job_ends_{false};
  std::atomic<bool> cancel_{false};
  absl::Duration transient_limit_ = absl::Minutes(10);
  // Of the heartbeat loop (Run's thread) only.
  std::thread thread_;
  std::string job_;          // the job of the part (running or ended)
  int64_t incarnation_ = 0;
  std::string started_as_;   // member id when the part started
  Assignment current_;
  absl::Time retry_at_ = absl::InfiniteFuture();

  absl::Mutex mu_;
  std::vector<StepReport> pending_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;   // the part's thread ended
  bool transient_ ABSL_GUARDED_BY(mu_) = false;  // ... in a transient failure
  std::string error_ ABSL_GUARDED_BY(mu_);
  // Start of the current run of transient failures without a step.
  absl::Time failing_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  StepReport last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bertps

#endif  // BERTPS_WORKER_JOB_MEMBER_H_

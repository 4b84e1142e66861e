// TrainMember: a train worker daemon driven by the coordinator. Registers as
// a TRAIN member, heartbeats with its step reports, runs TrainWorker for the
// slot it is assigned and stops it when told (job cancelled, failed, or the
// slot given to someone else).
// Thread-safety: Run() from one thread; Stop() from any.
#ifndef BERTPS_WORKER_TRAIN_MEMBER_H_
#define BERTPS_WORKER_TRAIN_MEMBER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/security.h"
#include "server/coordinator/member.h"

namespace bertps {

class TrainMember {
 public:
  // Dials the coordinator and the shards with `security`.
  explicit TrainMember(const std::string& coordinator,
                       const SecurityConfig& security = SecurityConfig());
  ~TrainMember();
  // Until Stop(); fails only if the coordinator cannot be reached for
  // `give_up` in a row.
  absl::Status Run(absl::Duration give_up = absl::Minutes(2));
  void Stop() { stop_ = true; }
  // Run() returns (OK) once the first job this worker took part in has
  // ended (finished, failed or cancelled): one process per job, as in a
  // Kubernetes Job.
  void ExitWhenJobEnds() { exit_when_job_ends_ = true; }
  // The last step this member pushed (for metrics); empty before any.
  StepReport last_report() {
    absl::MutexLock l(&mu_);
    return last_;
  }

 private:
  void StartJob(const Assignment& a);
  void StopJob();

  const SecurityConfig security_;
  MemberClient member_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> exit_when_job_ends_{false};
  std::atomic<bool> cancel_{false};
  std::thread thread_;
  std::string job_;
  std::string started_as_;  // member id when the job started            // running or finished job
  absl::Mutex mu_;
  std::vector<StepReport> pending_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::string error_ ABSL_GUARDED_BY(mu_);
  StepReport last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bertps

#endif  // BERTPS_WORKER_TRAIN_MEMBER_H_

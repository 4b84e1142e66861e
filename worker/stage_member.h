// StageMember: a pipeline-stage daemon driven by the coordinator
// (`bertps_worker --role=stage --coordinator HOST:PORT`). Registers as a
// STAGE member with the address its StageService will listen on; when a
// pipeline job (JobSpec.pipeline.stages > 1) gives it slot i, it runs stage
// i % S of replica i / S with the replica's peer addresses from the
// assignment, heartbeats with step reports (the last stage's carry the
// loss), and, as stage 0 of replica 0, writes the job's checkpoints and
// export like train worker 0. A stage that dies fails the job (the
// coordinator names it; the other stages fail fast on their own).
// Thread-safety: Run() from one thread; Stop() from any.
#ifndef BERTPS_WORKER_STAGE_MEMBER_H_
#define BERTPS_WORKER_STAGE_MEMBER_H_

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/security.h"
#include "server/coordinator/member.h"

namespace bertps {

class StageMember {
 public:
  // `listen`: host:port of this daemon's StageService (port 0: a free port
  // is chosen now, so the coordinator can hand the address to the peers).
  static absl::StatusOr<std::unique_ptr<StageMember>> Create(
      const std::string& coordinator, const std::string& listen,
      const SecurityConfig& security);
  ~StageMember();
  absl::Status Run(absl::Duration give_up = absl::Minutes(2));
  void Stop() { stop_ = true; }
  const std::string& address() const { return address_; }

 private:
  StageMember(const std::string& coordinator, std::string address,
              const SecurityConfig& security);
  void StartJob(const Assignment& a);
  void StopJob();

  const std::string address_;
  const SecurityConfig security_;
  MemberClient member_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> cancel_{false};
  std::thread thread_;
  std::string job_;
  std::string started_as_;  // member id when the job started
  absl::Mutex mu_;
  std::vector<StepReport> pending_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::string error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bertps

#endif  // BERTPS_WORKER_STAGE_MEMBER_H_

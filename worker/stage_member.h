// StageMember: a pipeline-stage daemon driven by the coordinator
// (`bertps_worker --role=stage --coordinator HOST:PORT`). Registers as a
// STAGE member with the address its StageService will listen on; when a
// pipeline job (JobSpec.pipeline.stages > 1) gives it slot i, it runs stage
// i % S of replica i / S with the replica's peer addresses from the
// assignment, heartbeats with step reports (the last stage's carry the
// loss), and, as stage 0 of replica 0, writes the job's checkpoints and
// export like train worker 0. The member loop is a JobMember
// (worker/job_member.h). A stage that dies is replaced with no restart: its
// slot goes to an idle stage daemon or, with none, to the member running the
// same stage of another replica as a second part (Assignment.also_indices);
// the replica's other stages end their parts and start again with the new
// addresses at the shards' step. All parts are served by one StageRouter on
// the daemon's address.
// Thread-safety: Run() from one thread; Stop() from any.
#ifndef BERTPS_WORKER_STAGE_MEMBER_H_
#define BERTPS_WORKER_STAGE_MEMBER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/security.h"
#include "common/timeouts.h"
#include "worker/job_member.h"
#include "worker/stage_router.h"

namespace bertps {

class StageMember {
 public:
  // `listen`: host:port of this daemon's StageService, started now for
  // all its parts (port 0: a free port, so the coordinator can hand the
  // address to the peers).
  static absl::StatusOr<std::unique_ptr<StageMember>> Create(
      const std::string& coordinator, const std::string& listen,
      const SecurityConfig& security);
  absl::Status Run(absl::Duration give_up = kCoordinatorGiveUp) {
    return member_.Run(give_up);
  }
  void Stop() { member_.Stop(); }
  const std::string& address() const { return address_; }

 private:
  StageMember(const std::string& coordinator, std::string address,
              const SecurityConfig& security,
              std::unique_ptr<StageRouter> router);
  absl::Status RunPart(const Assignment& a, std::atomic<bool>* cancel,
                       const std::function<void(const StepReport&)>& report);

  const std::string address_;
  const SecurityConfig security_;
  // Serves every part's StageService on address_ (declared before member_:
  // the parts, which member_ ends, use it).
  std::unique_ptr<StageRouter> router_;
  JobMember member_;
};

}  // namespace bertps

#endif  // BERTPS_WORKER_STAGE_MEMBER_H_

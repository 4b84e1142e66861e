// gRPC adapters of the coordinator: JobService (users) and ClusterService
// (daemons), thin layers over Coordinator. WatchJob is a callback call: a
// watcher waiting for the next event holds no thread (all wait on the
// coordinator's one fan-out, Coordinator::WhenEvents).
// Thread-safety: thread-safe.
#ifndef BERTPS_SERVER_COORDINATOR_SERVICE_H_
#define BERTPS_SERVER_COORDINATOR_SERVICE_H_

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/coordinator.grpc.pb.h"
#include "server/coordinator/coordinator.h"

namespace bertps {

// The caller of a call, from its AuthContext (the token check's role and
// token name) and, for a worker token, the member credential in its
// metadata. A server that checks no tokens makes everyone an admin.
Caller CallerOf(const grpc::ServerContextBase& ctx);

// Open watches per token (Caller::token): at most `limit` at once each.
// Thread-safety: thread-safe.
class WatchLimits {
 public:
  explicit WatchLimits(int limit) : limit_(limit) {}
  // OK and counted, or RESOURCE_EXHAUSTED naming the token and the limit.
  absl::Status Begin(const std::string& token) ABSL_LOCKS_EXCLUDED(mu_);
  void End(const std::string& token) ABSL_LOCKS_EXCLUDED(mu_);
  int open(const std::string& token) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int limit_;  // 0: no bound
  mutable absl::Mutex mu_;
  std::map<std::string, int> open_ ABSL_GUARDED_BY(mu_);
};

class JobServiceImpl final
    : public JobService::WithCallbackMethod_WatchJob<JobService::Service> {
 public:
  // At most max_watches_per_token open WatchJob calls per token (0: no
  // bound).
  explicit JobServiceImpl(Coordinator* c, int max_watches_per_token = 256)
      : c_(c), watches_(max_watches_per_token) {}
  grpc::Status SubmitJob(grpc::ServerContext*, const SubmitJobRequest*,
                         SubmitJobResponse*) override;
  grpc::Status GetJob(grpc::ServerContext*, const GetJobRequest*,
                      JobStatus*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const ListJobsRequest*,
                        ListJobsResponse*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const CancelJobRequest*,
                         CancelJobResponse*) override;
  grpc::Status DrainMember(grpc::ServerContext*, const DrainMemberRequest*,
                           DrainMemberResponse*) override;
  grpc::Status RevokeMember(grpc::ServerContext*, const RevokeMemberRequest*,
                            RevokeMemberResponse*) override;
  grpc::ServerWriteReactor<JobEvent>* WatchJob(
      grpc::CallbackServerContext* ctx,
      const WatchJobRequest* request) override;

 private:
  Coordinator* const c_;
  WatchLimits watches_;
};

class ClusterServiceImpl final : public ClusterService::Service {
 public:
  explicit ClusterServiceImpl(Coordinator* c) : c_(c) {}
  grpc::Status Register(grpc::ServerContext*, const RegisterRequest*,
                        RegisterResponse*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const HeartbeatRequest*,
                         HeartbeatResponse*) override;

 private:
  Coordinator* const c_;
};

}  // namespace bertps

#endif  // BERTPS_SERVER_COORDINATOR_SERVICE_H_

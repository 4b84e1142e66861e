// gRPC adapters of the coordinator: JobService (users) and ClusterService
// (daemons), thin layers over Coordinator. WatchJob is a callback call: a
// watcher waiting for the next event holds no thread (all wait on the
// coordinator's one fan-out, Coordinator::WhenEvents).
// Thread-safety: thread-safe.
#ifndef BERTPS_SERVER_COORDINATOR_SERVICE_H_
#define BERTPS_SERVER_COORDINATOR_SERVICE_H_

#include "proto/coordinator.grpc.pb.h"
#include "server/coordinator/coordinator.h"

namespace bertps {

class JobServiceImpl final
    : public JobService::WithCallbackMethod_WatchJob<JobService::Service> {
 public:
  explicit JobServiceImpl(Coordinator* c) : c_(c) {}
  grpc::Status SubmitJob(grpc::ServerContext*, const SubmitJobRequest*,
                         SubmitJobResponse*) override;
  grpc::Status GetJob(grpc::ServerContext*, const GetJobRequest*,
                      JobStatus*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const ListJobsRequest*,
                        ListJobsResponse*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const CancelJobRequest*,
                         CancelJobResponse*) override;
  grpc::ServerWriteReactor<JobEvent>* WatchJob(
      grpc::CallbackServerContext* ctx,
      const WatchJobRequest* request) override;

 private:
  Coordinator* const c_;
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

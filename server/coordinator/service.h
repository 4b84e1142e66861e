// gRPC adapters of the coordinator: JobService (users) and ClusterService
// (daemons), thin layers over Coordinator.
// Thread-safety: thread-safe.
#ifndef BERTPS_SERVER_COORDINATOR_SERVICE_H_
#define BERTPS_SERVER_COORDINATOR_SERVICE_H_

#include "proto/coordinator.grpc.pb.h"
#include "server/coordinator/coordinator.h"

namespace bertps {

class JobServiceImpl final : public JobService::Service {
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
  grpc::Status WatchJob(grpc::ServerContext*, const WatchJobRequest*,
                        grpc::ServerWriter<JobEvent>*) override;

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

#include "server/coordinator/service.h"

#include "common/grpc_status.h"

namespace bertps {

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext*,
                                       const SubmitJobRequest* req,
                                       SubmitJobResponse* resp) {
  absl::StatusOr<std::string> id = c_->Submit(req->spec());
  if (!id.ok()) return ToGrpcStatus(id.status());
  resp->set_id(*id);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext*,
                                    const GetJobRequest* req,
                                    JobStatus* resp) {
  absl::StatusOr<JobStatus> s = c_->Get(req->id());
  if (!s.ok()) return ToGrpcStatus(s.status());
  *resp = *s;
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext*,
                                      const ListJobsRequest* req,
                                      ListJobsResponse* resp) {
  *resp = c_->ListPage(req->page_size(), req->page_token());
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext*,
                                       const CancelJobRequest* req,
                                       CancelJobResponse*) {
  return ToGrpcStatus(c_->Cancel(req->id()));
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* ctx,
                                      const WatchJobRequest* req,
                                      grpc::ServerWriter<JobEvent>* writer) {
  int64_t seq = 0;
  if (req->backlog_only()) {
    absl::StatusOr<std::vector<JobEvent>> events =
        c_->WaitForEvents(req->id(), &seq, absl::Now());
    if (!events.ok()) return ToGrpcStatus(events.status());
    for (const JobEvent& e : *events) {
      if (!writer->Write(e)) break;
    }
    return grpc::Status::OK;
  }
  while (!ctx->IsCancelled()) {
    // Short waits so that a cancelled or expired call is noticed.
    absl::StatusOr<std::vector<JobEvent>> events = c_->WaitForEvents(
        req->id(), &seq, absl::Now() + absl::Milliseconds(500));
    if (!events.ok()) return ToGrpcStatus(events.status());
    for (const JobEvent& e : *events) {
      if (!writer->Write(e)) return grpc::Status::OK;
      if (IsFinal(e.status().state())) return grpc::Status::OK;
    }
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled");
}

grpc::Status ClusterServiceImpl::Register(grpc::ServerContext*,
                                          const RegisterRequest* req,
                                          RegisterResponse* resp) {
  absl::StatusOr<RegisterResponse> r = c_->Register(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *r;
  return grpc::Status::OK;
}

grpc::Status ClusterServiceImpl::Heartbeat(grpc::ServerContext*,
                                           const HeartbeatRequest* req,
                                           HeartbeatResponse* resp) {
  absl::StatusOr<HeartbeatResponse> r = c_->Heartbeat(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *r;
  return grpc::Status::OK;
}

}  // namespace bertps

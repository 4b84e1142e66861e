#include "deploy/probe/probe.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "deploy/probe/health.grpc.pb.h"
#include "grpcpp/client_context.h"

namespace bertps {

absl::Status CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                         const std::string& target, const std::string& service,
                         absl::Duration deadline) {
  using grpc::health::v1::HealthCheckResponse;
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   absl::ToChronoMilliseconds(deadline));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  HealthCheckResponse resp;
  grpc::Status st = stub->Check(&ctx, req, &resp);
  const std::string what =
      service.empty() ? target : absl::StrCat(target, " service '", service, "'");
  if (!st.ok()) {
    absl::Status s = FromGrpcStatus(st);
    return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
  }
  if (resp.status() != HealthCheckResponse::SERVING) {
    return absl::UnavailableError(absl::StrCat(
        what, " is ", HealthCheckResponse::ServingStatus_Name(resp.status())));
  }
  return absl::OkStatus();
}

}  // namespace bertps

// One grpc.health.v1 Check call, for Kubernetes exec probes: the kubelet's
// own gRPC probe speaks plaintext only, while bertps daemons serve TLS (and
// mutual TLS) when configured, so the probe dials with the daemon's own
// security flags (common/security.h) instead.
// Thread-safety: CheckHealth is a free function; call it from any thread.
#ifndef BERTPS_DEPLOY_PROBE_PROBE_H_
#define BERTPS_DEPLOY_PROBE_PROBE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"

namespace bertps {

// OK when `service` ("" = the whole server) reports SERVING before
// `deadline` passes; UNAVAILABLE (NOT_SERVING / UNKNOWN), NOT_FOUND (no such
// service) or the RPC's own error otherwise, naming `target`.
absl::Status CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                         const std::string& target, const std::string& service,
                         absl::Duration deadline);

}  // namespace bertps

#endif  // BERTPS_DEPLOY_PROBE_PROBE_H_

// The one place where absl::Status and grpc::Status are converted.
//
// gRPC and Abseil share the canonical code space (OK=0 ... UNAUTHENTICATED=16),
// so the conversion keeps code and message exactly, in both directions.
// Thread-safety: pure functions.
#ifndef BERTPS_COMMON_GRPC_STATUS_H_
#define BERTPS_COMMON_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace bertps {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace bertps

#endif  // BERTPS_COMMON_GRPC_STATUS_H_

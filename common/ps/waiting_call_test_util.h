// Tests of call cancellation: a call that only ends when cancelled or at its
// deadline.
#ifndef BERTPS_COMMON_PS_WAITING_CALL_TEST_UTIL_H_
#define BERTPS_COMMON_PS_WAITING_CALL_TEST_UTIL_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace bertps {
namespace ps {

// A call on a channel to an address nobody serves, waiting for it to be
// ready until `deadline`: it ends early only if cancelled.
inline grpc::Status WaitingCall(grpc::ClientContext* ctx,
                                absl::Duration deadline) {
  auto channel = grpc::CreateChannel("127.0.0.1:1",
                                     grpc::InsecureChannelCredentials());
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  ctx->set_wait_for_ready(true);
  grpc::GenericStub stub(channel);
  grpc::Slice empty("");
  grpc::ByteBuffer req(&empty, 1), resp;
  absl::Mutex mu;
  bool done = false;
  grpc::Status out;
  stub.UnaryCall(ctx, "/bertps.Nothing/Call", grpc::StubOptions(), &req,
                 &resp, [&](grpc::Status s) {
                   absl::MutexLock l(&mu);
                   out = s;
                   done = true;
                 });
  absl::MutexLock l(&mu);
  mu.Await(absl::Condition(&done));
  return out;
}

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_COMMON_PS_WAITING_CALL_TEST_UTIL_H_

// Calls registered with a CallCanceller are cancelled once its flag is set,
// as are calls registered after; without a flag nothing is.
#include "common/ps/call_canceller.h"

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "common/ps/waiting_call_test_util.h"
#include "grpcpp/grpcpp.h"

namespace bertps {
namespace ps {
namespace {

TEST(CallCanceller, CancelsCallsInFlightOnceTheFlagIsSet) {
  std::atomic<bool> flag{false};
  CallCanceller c(&flag, absl::Milliseconds(20));
  grpc::ClientContext ctx;
  CallCanceller::Scope scope(&c, &ctx);
  const absl::Time t0 = absl::Now();
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(200));
    flag = true;
  });
  grpc::Status st = WaitingCall(&ctx, absl::Seconds(30));
  setter.join();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED) << st.error_message();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_TRUE(c.cancelled());
  // A call registered afterwards is cancelled as it starts.
  grpc::ClientContext later;
  CallCanceller::Scope later_scope(&c, &later);
  EXPECT_EQ(WaitingCall(&later, absl::Seconds(30)).error_code(),
            grpc::StatusCode::CANCELLED);
}

TEST(CallCanceller, WithoutAFlagNothingIsCancelled) {
  CallCanceller c(nullptr);
  grpc::ClientContext ctx;
  CallCanceller::Scope scope(&c, &ctx);
  EXPECT_EQ(WaitingCall(&ctx, absl::Milliseconds(300)).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_FALSE(c.cancelled());
}

}  // namespace
}  // namespace ps
}  // namespace bertps

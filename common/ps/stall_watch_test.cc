// A watched call that makes no progress for its limit is cancelled and
// reported stalled; one that keeps reporting progress is left to its
// deadline; an unwatched one is never touched.
#include "common/ps/stall_watch.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "common/ps/waiting_call_test_util.h"

namespace bertps {
namespace ps {
namespace {

TEST(StallWatch, CancelsACallSilentForItsLimit) {
  StallWatch w(absl::Milliseconds(20));
  grpc::ClientContext ctx;
  w.Watch(&ctx, absl::Milliseconds(300));
  const absl::Time t0 = absl::Now();
  grpc::Status st = WaitingCall(&ctx, absl::Seconds(30));
  const absl::Duration took = absl::Now() - t0;
  EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED) << st.error_message();
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(10));
  EXPECT_TRUE(w.Unwatch(&ctx));
  EXPECT_EQ(w.stalls(), 1);
}

TEST(StallWatch, ACallThatProgressesRunsToItsDeadline) {
  StallWatch w(absl::Milliseconds(20));
  grpc::ClientContext ctx;
  w.Watch(&ctx, absl::Milliseconds(200));
  std::atomic<bool> stop{false};
  std::thread beat([&] {
    while (!stop) {
      w.Progress(&ctx);
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  grpc::Status st = WaitingCall(&ctx, absl::Milliseconds(1200));
  stop = true;
  beat.join();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << st.error_message();
  EXPECT_FALSE(w.Unwatch(&ctx));
  EXPECT_EQ(w.stalls(), 0);
}

TEST(StallWatch, UnwatchedAndZeroLimitCallsAreLeftAlone) {
  StallWatch w(absl::Milliseconds(20));
  grpc::ClientContext a, b;
  w.Watch(&a, absl::ZeroDuration());  // not watched
  w.Watch(&b, absl::Milliseconds(100));
  EXPECT_FALSE(w.Unwatch(&b));  // unwatched before its limit
  EXPECT_EQ(WaitingCall(&a, absl::Milliseconds(400)).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(WaitingCall(&b, absl::Milliseconds(400)).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_FALSE(w.Unwatch(&a));
  EXPECT_EQ(w.stalls(), 0);
}

}  // namespace
}  // namespace ps
}  // namespace bertps

// The one retry policy: waits grow from `initial` by `multiplier` up to
// `max`, reset on success; Retry stops at success, at an error not worth
// retrying, at max_attempts, at the deadline and on cancel.
#include "common/retry.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace bertps {
namespace {

TEST(Backoff, GrowsToItsCeilingAndResets) {
  RetryPolicy p;
  p.initial = absl::Milliseconds(100);
  p.multiplier = 2;
  p.max = absl::Milliseconds(500);
  Backoff b(p);
  EXPECT_EQ(b.Next(), absl::Milliseconds(100));
  EXPECT_EQ(b.Next(), absl::Milliseconds(200));
  EXPECT_EQ(b.Next(), absl::Milliseconds(400));
  EXPECT_EQ(b.Next(), absl::Milliseconds(500));
  EXPECT_EQ(b.Next(), absl::Milliseconds(500));
  EXPECT_EQ(b.failures(), 5);
  b.Reset();
  EXPECT_EQ(b.failures(), 0);
  EXPECT_EQ(b.Next(), absl::Milliseconds(100));
}

struct FakeClock {
  absl::Time t = absl::FromUnixSeconds(100);
  std::vector<absl::Duration> slept;
  std::function<void(absl::Duration)> Sleep() {
    return [this](absl::Duration d) {
      slept.push_back(d);
      t += d;
    };
  }
  std::function<absl::Time()> Now() {
    return [this] { return t; };
  }
};

auto Unavailable = [](const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable;
};

TEST(Retry, UntilSuccess) {
  FakeClock clock;
  int calls = 0;
  absl::Status st = Retry(
      RetryPolicy(),
      [&] {
        return ++calls < 4 ? absl::UnavailableError("down") : absl::OkStatus();
      },
      Unavailable, nullptr, clock.Sleep(), clock.Now());
  EXPECT_TRUE(st.ok());
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(clock.slept.size(), 3u);
}

TEST(Retry, AnErrorNotWorthRetryingEndsAtOnce) {
  FakeClock clock;
  int calls = 0;
  absl::Status st = Retry(
      RetryPolicy(),
      [&] {
        ++calls;
        return absl::InvalidArgumentError("bad");
      },
      Unavailable, nullptr, clock.Sleep(), clock.Now());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(calls, 1);
}

TEST(Retry, AttemptsDeadlineAndCancel) {
  FakeClock clock;
  RetryPolicy p;
  p.max_attempts = 3;
  int calls = 0;
  absl::Status st = Retry(
      p, [&] { ++calls; return absl::UnavailableError("down"); }, Unavailable,
      nullptr, clock.Sleep(), clock.Now());
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(calls, 3);
  EXPECT_NE(st.message().find("after 3 attempts"), absl::string_view::npos);

  RetryPolicy d;
  d.deadline = absl::Seconds(1);
  calls = 0;
  st = Retry(
      d, [&] { ++calls; return absl::UnavailableError("down"); }, Unavailable,
      nullptr, clock.Sleep(), clock.Now());
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  // 100 + 200 + 400 ms slept; the next 800 ms would pass the deadline.
  EXPECT_EQ(calls, 4);

  std::atomic<bool> cancel{false};
  calls = 0;
  st = Retry(
      RetryPolicy(),
      [&] {
        if (++calls == 2) cancel = true;
        return absl::UnavailableError("down");
      },
      Unavailable, &cancel, clock.Sleep(), clock.Now());
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace bertps

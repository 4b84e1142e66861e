#include "common/handoff.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace bertps {
namespace {

TEST(HandoffTest, ConsumesEveryItemInOrder) {
  std::vector<int> seen;  // written by the consumer only, read after Close
  Handoff<int> h(2, [&](int& x) {
    seen.push_back(x);
    return absl::OkStatus();
  });
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(h.Push(i));
  ASSERT_TRUE(h.Close().ok());
  ASSERT_EQ(seen.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(seen[i], i);
}

TEST(HandoffTest, MoveOnlyItems) {
  int sum = 0;
  Handoff<std::unique_ptr<int>> h(1, [&](std::unique_ptr<int>& p) {
    sum += *p;
    return absl::OkStatus();
  });
  for (int i = 1; i <= 10; ++i) ASSERT_TRUE(h.Push(std::make_unique<int>(i)));
  ASSERT_TRUE(h.Close().ok());
  EXPECT_EQ(sum, 55);
}

TEST(HandoffTest, FirstErrorStopsTheConsumerAndIsReturned) {
  std::vector<int> seen;
  Handoff<int> h(4, [&](int& x) {
    seen.push_back(x);
    if (x == 3) return absl::DataLossError("item 3 is bad");
    if (x > 3) return absl::InternalError("consumed after the error");
    return absl::OkStatus();
  });
  bool refused = false;
  for (int i = 0; i < 100 && !refused; ++i) refused = !h.Push(i);
  absl::Status st = h.Close();
  EXPECT_TRUE(h.failed());
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(st.message(), "item 3 is bad");
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3}));
  // With depth 4 the producer can be at most 5 items past the bad one
  // when the refusal comes; it does come.
  EXPECT_TRUE(refused);
  EXPECT_FALSE(h.Push(7));
}

TEST(HandoffTest, ProducerWaitsWhileDepthItemsAreQueued) {
  absl::Notification release;
  std::atomic<int> consumed{0};
  Handoff<int> h(2, [&](int&) {
    release.WaitForNotification();
    consumed.fetch_add(1);
    return absl::OkStatus();
  });
  std::atomic<int> pushed{0};
  std::thread producer([&] {
    for (int i = 0; i < 6; ++i) {
      ASSERT_TRUE(h.Push(i));
      pushed.fetch_add(1);
    }
  });
  // The consumer holds one item and 2 wait: the producer reaches 3 pushes
  // and cannot pass them however long it runs. Give it time to try.
  while (pushed.load() < 3) absl::SleepFor(absl::Milliseconds(1));
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(pushed.load(), 3);
  EXPECT_EQ(consumed.load(), 0);
  release.Notify();
  producer.join();
  ASSERT_TRUE(h.Close().ok());
  EXPECT_EQ(consumed.load(), 6);
}

TEST(HandoffTest, CloseWithoutItemsAndTwice) {
  Handoff<std::string> h(3, [](std::string&) {
    return absl::InternalError("never called");
  });
  EXPECT_TRUE(h.Close().ok());
  EXPECT_TRUE(h.Close().ok());
  EXPECT_FALSE(h.Push("after close"));
}

TEST(HandoffTest, DestructorDrainsWhatWasQueued) {
  std::atomic<int> consumed{0};
  {
    Handoff<int> h(8, [&](int&) {
      consumed.fetch_add(1);
      return absl::OkStatus();
    });
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(h.Push(i));
  }
  EXPECT_EQ(consumed.load(), 5);
}

}  // namespace
}  // namespace bertps

#include "common/waitlist.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace bertps {
namespace {

TEST(WaitlistTest, FiresOnceTheConditionHoldsAfterAPoke) {
  Waitlist w("test", absl::Seconds(30));  // no poll: only the poke wakes it
  std::atomic<int> value{0};
  absl::Notification done;
  std::atomic<int> fires{0};
  bool got = false;
  w.Add([&] { return value.load() >= 2; }, absl::Now() + absl::Seconds(30),
        [&](bool ready) {
          got = ready;
          ++fires;
          done.Notify();
        });
  value = 1;
  w.Poke();
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(done.HasBeenNotified());
  EXPECT_EQ(w.waiting(), 1);
  value = 2;
  w.Poke();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(got);
  w.Poke();
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(fires.load(), 1);
  EXPECT_EQ(w.waiting(), 0);
  EXPECT_EQ(w.missed_pokes(), 0);
}

TEST(WaitlistTest, FiresFalseAtTheDeadline) {
  Waitlist w("test", absl::Seconds(30));
  absl::Notification done;
  bool got = true;
  const absl::Time start = absl::Now();
  w.Add([] { return false; }, start + absl::Milliseconds(100),
        [&](bool ready) {
          got = ready;
          done.Notify();
        });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(got);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
}

TEST(WaitlistTest, AChangeNotPokedIsFoundByThePollAndCounted) {
  Waitlist w("test", absl::Milliseconds(20));
  std::atomic<bool> flag{false};
  absl::Notification done;
  w.Add([&] { return flag.load(); }, absl::Now() + absl::Seconds(30),
        [&](bool) { done.Notify(); });
  absl::SleepFor(absl::Milliseconds(30));
  flag = true;  // no Poke()
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(w.missed_pokes(), 1);
}

TEST(WaitlistTest, StopFiresWhatIsLeftAndLaterAddsFireAtOnce) {
  std::vector<int> fired;  // written on the waitlist's thread, then here
  {
    Waitlist w("test", absl::Seconds(30));
    for (int i = 0; i < 3; ++i) {
      w.Add([] { return false; }, absl::Now() + absl::Hours(1),
            [&fired, i](bool ready) {
              EXPECT_FALSE(ready);
              fired.push_back(i);
            });
    }
    w.Stop();
    EXPECT_EQ(fired.size(), 3u);
    bool now = false;
    w.Add([] { return true; }, absl::Now(), [&](bool ready) { now = ready; });
    EXPECT_TRUE(now);  // on this thread, before Add returned
  }
}

TEST(WaitlistTest, ManyWaitersOneThread) {
  Waitlist w("test");
  std::atomic<int> value{0};
  std::atomic<int> fires{0};
  constexpr int kWaiters = 500;
  for (int i = 0; i < kWaiters; ++i) {
    w.Add([&value, i] { return value.load() > i; },
          absl::Now() + absl::Seconds(30), [&](bool ready) {
            EXPECT_TRUE(ready);
            ++fires;
          });
  }
  for (int v = 1; v <= kWaiters; ++v) {
    value = v;
    w.Poke();
  }
  for (int k = 0; k < 1000 && fires.load() < kWaiters; ++k) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(fires.load(), kWaiters);
  EXPECT_EQ(w.waiting(), 0);
}

}  // namespace
}  // namespace bertps

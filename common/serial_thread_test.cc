#include "common/serial_thread.h"

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace bertps {
namespace {

TEST(SerialThread, RunsInOrderOnOneThread) {
  std::vector<int> order;
  std::vector<std::thread::id> ids;
  {
    SerialThread t("test");
    for (int i = 0; i < 100; ++i) {
      t.Post([&, i] {
        order.push_back(i);
        ids.push_back(std::this_thread::get_id());
      });
    }
    t.Run([] {});
    EXPECT_GE(t.ran(), 100);  // the Run one is counted after it returns
  }
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  for (const auto& id : ids) {
    EXPECT_EQ(id, ids[0]);
    EXPECT_NE(id, std::this_thread::get_id());
  }
}

TEST(SerialThread, DestructorRunsWhatWasPosted) {
  std::atomic<int> n{0};
  {
    SerialThread t("test");
    for (int i = 0; i < 10; ++i) t.Post([&] { ++n; });
  }
  EXPECT_EQ(n.load(), 10);
}

TEST(SerialThread, RunWaitsForItsFunction) {
  SerialThread t("test");
  int x = 0;
  t.Post([&] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); x = 1; });
  t.Run([&] { x *= 2; });
  EXPECT_EQ(x, 2);  // ran after the sleeping one
}

TEST(SerialThread, NiceLowersOnlyItsOwnThread) {
  errno = 0;
  const int mine = getpriority(PRIO_PROCESS, static_cast<id_t>(gettid()));
  ASSERT_EQ(errno, 0);
  SerialThread t("test", 5);
  EXPECT_EQ(t.nice_at_start(), std::min(19, mine + 5));
  EXPECT_EQ(getpriority(PRIO_PROCESS, static_cast<id_t>(gettid())), mine);
  SerialThread plain("test");
  EXPECT_EQ(plain.nice_at_start(), mine);
}

}  // namespace
}  // namespace bertps

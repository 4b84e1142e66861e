#include "common/thread_lanes.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace bertps {
namespace {

TEST(ThreadLanesTest, TasksReuseTheirLanesThread) {
  ThreadLanes lanes("test", 3);
  std::vector<std::thread::id> ids(3);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::shared_ptr<absl::Notification>> done;
    std::vector<std::thread::id> now(3);
    for (int i = 0; i < 3; ++i) {
      done.push_back(lanes.Run(i, [&now, i] { now[i] = std::this_thread::get_id(); }));
    }
    for (auto& d : done) d->WaitForNotification();
    if (round == 0) ids = now;
    EXPECT_EQ(now, ids) << round;
  }
  EXPECT_EQ(lanes.threads_started(), 3);
  EXPECT_EQ(lanes.extra_threads(), 0);
  EXPECT_NE(ids[0], ids[1]);
}

// A task for a busy lane does not queue behind it: here the first task
// waits for the second, which would deadlock in a queue.
TEST(ThreadLanesTest, ABusyLaneSendsTheTaskToAnExtraThread) {
  ThreadLanes lanes("test", 1);
  absl::Notification second_ran;
  auto first = lanes.Run(0, [&] { second_ran.WaitForNotification(); });
  auto second = lanes.Run(0, [&] { second_ran.Notify(); });
  first->WaitForNotification();
  second->WaitForNotification();
  EXPECT_EQ(lanes.extra_threads(), 1);
  // The lane is idle again: used, no new thread.
  std::atomic<int> ran{0};
  for (int i = 0; i < 10; ++i) lanes.Run(0, [&] { ++ran; })->WaitForNotification();
  EXPECT_EQ(ran.load(), 10);
  EXPECT_EQ(lanes.threads_started(), 2);
}

TEST(ThreadLanesTest, DestructionWaitsForRunningTasks) {
  std::atomic<int> ran{0};
  {
    ThreadLanes lanes("test", 2);
    for (int i = 0; i < 4; ++i) {
      lanes.Run(i, [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ++ran;
      });
    }
  }
  EXPECT_EQ(ran.load(), 4);
}

}  // namespace
}  // namespace bertps

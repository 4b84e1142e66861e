#include "common/thread_lanes.h"

#include <sys/resource.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <string>
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

TEST(ThreadLanesTest, StartStartsEveryLaneOnce) {
  ThreadLanes lanes("test", 4);
  ASSERT_TRUE(lanes.Start().ok());
  EXPECT_EQ(lanes.threads_started(), 4);
  ASSERT_TRUE(lanes.Start().ok());
  for (int i = 0; i < 4; ++i) lanes.Run(i, [] {})->WaitForNotification();
  EXPECT_EQ(lanes.threads_started(), 4);
  EXPECT_EQ(lanes.inline_runs(), 0);
}

int64_t MappedBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmSize:", 0) == 0) return std::atoll(line.c_str() + 7) << 10;
  }
  return -1;
}

// Under an address-space limit that leaves no room for a thread's stack
// (ulimit -v): Start() says so (std::thread threw std::system_error, which
// used to end the daemon), and a task whose thread cannot start runs on the
// caller's thread.
TEST(ThreadLanesTest, NoRoomForAThreadIsAnErrorNotACrash) {
  // More lanes than glibc's cache of freed stacks (40 MiB) can serve.
  ThreadLanes lanes("test", 16);
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &saved), 0);
  const int64_t mapped = MappedBytes();
  ASSERT_GT(mapped, 0);
  const rlimit tight{static_cast<rlim_t>(mapped + (int64_t{1} << 20)),
                     saved.rlim_max};
  ASSERT_EQ(setrlimit(RLIMIT_AS, &tight), 0);
  const absl::Status st = lanes.Start();
  std::atomic<int> ran{0};
  const std::thread::id me = std::this_thread::get_id();
  std::thread::id where;
  lanes.Run(15, [&] {
    where = std::this_thread::get_id();
    ++ran;
  })->WaitForNotification();
  ASSERT_EQ(setrlimit(RLIMIT_AS, &saved), 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("cannot start thread"), std::string::npos) << st;
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(where, me);
  EXPECT_EQ(lanes.inline_runs(), 1);
  // With room again the lanes start.
  ASSERT_TRUE(lanes.Start().ok());
  EXPECT_EQ(lanes.threads_started(), 16);
}

}  // namespace
}  // namespace bertps

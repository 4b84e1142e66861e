#include "common/kernels/threads.h"

#include <omp.h>
#include <time.h>

#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace bertps {
namespace kernels {
namespace {

// More threads than CPUs are capped at the CPUs (oversubscribed OpenMP
// threads wait at every barrier for one that is not running).
TEST(Threads, CappedAtTheAvailableCpus) {
  const int cpus = AvailableCpus();
  ASSERT_GE(cpus, 1);
  EXPECT_EQ(SetNumThreads(cpus + 3), cpus);
  EXPECT_EQ(NumThreads(), cpus);
  EXPECT_EQ(omp_get_max_threads(), cpus);
  EXPECT_EQ(SetNumThreads(0), 1);
  EXPECT_EQ(SetNumThreads(1), 1);
  EXPECT_EQ(NumThreads(), 1);
}

double ThreadCpu() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

// The compute CPU counts the work of every thread of the team, and not the
// time the calling thread slept or another thread of the process worked.
TEST(Threads, ComputeCpuCountsTheWholeTeam) {
  const int n = SetNumThreads(AvailableCpus());
  double c0 = ComputeCpuSeconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::thread other([] {
    const double t0 = ThreadCpu();
    while (ThreadCpu() - t0 < 0.1) {
    }
  });
  other.join();
  EXPECT_LT(ComputeCpuSeconds() - c0, 0.03);
  // Each thread of the team spins for 0.1 s of its own CPU.
  c0 = ComputeCpuSeconds();
#pragma omp parallel num_threads(n)
  {
    const double t0 = ThreadCpu();
    while (ThreadCpu() - t0 < 0.1) {
    }
  }
  const double used = ComputeCpuSeconds() - c0;
  EXPECT_GE(used, 0.1 * n);
  EXPECT_LT(used, 0.1 * n + 0.05);
}

}  // namespace
}  // namespace kernels
}  // namespace bertps

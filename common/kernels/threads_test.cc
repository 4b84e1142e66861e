#include "common/kernels/threads.h"

#include <omp.h>

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

}  // namespace
}  // namespace kernels
}  // namespace bertps

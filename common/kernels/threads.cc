#include "common/kernels/threads.h"

#include <omp.h>
#include <sched.h>
#include <time.h>

#include <atomic>

#include "glog/logging.h"

namespace bertps {
namespace kernels {
namespace {
std::atomic<int> configured{0};  // 0: not set (OpenMP's default)
}  // namespace

int AvailableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  const int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
}

int SetNumThreads(int n) {
  n = n < 1 ? 1 : n;
  const int cpus = AvailableCpus();
  if (n > cpus) {
    LOG(WARNING) << n << " compute threads asked for, but this process may "
                 << "run on " << cpus << " CPUs: using " << cpus;
    n = cpus;
  }
  configured = n;
  omp_set_num_threads(n);
  return n;
}

int NumThreads() {
  const int n = configured;
  return n > 0 ? n : omp_get_max_threads();
}

void UseConfiguredThreads() {
  const int n = configured;
  if (n > 0 && omp_get_max_threads() != n) omp_set_num_threads(n);
}

double ComputeCpuSeconds() {
  double total = 0;
  // The team as the kernels run it (the same threads each time).
#pragma omp parallel num_threads(NumThreads()) reduction(+ : total)
  {
    timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0) {
      total += static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
    }
  }
  return total;
}

}  // namespace kernels
}  // namespace bertps

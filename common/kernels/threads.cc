#include "common/kernels/threads.h"

#include <omp.h>

#include <atomic>

namespace bertps {
namespace kernels {
namespace {
std::atomic<int> configured{0};  // 0: not set (OpenMP's default)
}  // namespace

void SetNumThreads(int n) {
  n = n < 1 ? 1 : n;
  configured = n;
  omp_set_num_threads(n);
}

int NumThreads() {
  const int n = configured;
  return n > 0 ? n : omp_get_max_threads();
}

void UseConfiguredThreads() {
  const int n = configured;
  if (n > 0 && omp_get_max_threads() != n) omp_set_num_threads(n);
}

}  // namespace kernels
}  // namespace bertps

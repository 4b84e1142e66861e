// Number of compute threads used by oneDNN products and the OpenMP-parallel
// element-wise kernels. Process-wide (OpenMP's own setting); call it before
// the first step. Thread-safety: call from one thread at start-up.
#ifndef BERTPS_COMMON_KERNELS_THREADS_H_
#define BERTPS_COMMON_KERNELS_THREADS_H_

namespace bertps {
namespace kernels {

void SetNumThreads(int n);
int NumThreads();

}  // namespace kernels
}  // namespace bertps

#endif  // BERTPS_COMMON_KERNELS_THREADS_H_

// Number of compute threads used by oneDNN products and the OpenMP-parallel
// element-wise kernels. OpenMP keeps the setting per thread: SetNumThreads
// sets it for the calling thread and records it; a thread started later
// calls UseConfiguredThreads before it computes (otherwise OpenMP would use
// its default, one thread per core, whatever was asked).
// Thread-safety: SetNumThreads from one thread at start-up; the others from
// any thread.
#ifndef BERTPS_COMMON_KERNELS_THREADS_H_
#define BERTPS_COMMON_KERNELS_THREADS_H_

namespace bertps {
namespace kernels {

void SetNumThreads(int n);
int NumThreads();
// Applies the recorded setting to the calling thread (no-op if none).
void UseConfiguredThreads();

}  // namespace kernels
}  // namespace bertps

#endif  // BERTPS_COMMON_KERNELS_THREADS_H_

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

// Sets n compute threads, at most the CPUs this process may run on
// (AvailableCpus): OpenMP threads beyond them only wait at every barrier for
// one another. Asking for more logs a warning; returns what was set.
int SetNumThreads(int n);
int NumThreads();
// The CPUs in this process's affinity mask (at least 1).
int AvailableCpus();
// Applies the recorded setting to the calling thread (no-op if none).
void UseConfiguredThreads();
// CPU seconds used so far by the calling thread and the OpenMP team it
// computes with (oneDNN's products and the element-wise kernels run on that
// team; its threads live as long as the process). The difference of two
// calls on one thread is the CPU a computation took on all its threads,
// whatever else the process's other threads (transfers, the shards in the
// same process) did meanwhile.
double ComputeCpuSeconds();

}  // namespace kernels
}  // namespace bertps

#endif  // BERTPS_COMMON_KERNELS_THREADS_H_

#include "common/kernels/threads.h"

#include <omp.h>

namespace bertps {
namespace kernels {

void SetNumThreads(int n) { omp_set_num_threads(n < 1 ? 1 : n); }
int NumThreads() { return omp_get_max_threads(); }

}  // namespace kernels
}  // namespace bertps

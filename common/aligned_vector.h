// AlignedVector: a std::vector whose storage starts on a SIMD boundary
// (Eigen's allocator). Vectorised reductions peel their first elements up to
// an aligned address, so on storage of varying alignment the same sum is
// added in a different order from one allocation to the next; buffers whose
// sums feed training (parameters, gradients, activations, optimizer state)
// use this type so that a run is bit-for-bit reproducible.
#ifndef BERTPS_COMMON_ALIGNED_VECTOR_H_
#define BERTPS_COMMON_ALIGNED_VECTOR_H_

#include <vector>

#include "Eigen/Core"

namespace bertps {

template <typename T>
using AlignedVector = std::vector<T, Eigen::aligned_allocator<T>>;

}  // namespace bertps

#endif  // BERTPS_COMMON_ALIGNED_VECTOR_H_

// The body of vecmath.h's functions, included once per build by
// vecmath_avx2.cc and vecmath_avx512.cc, each defining BERTPS_VECMATH_NS
// (the namespace of its functions) first. The AVX-512 build also renames
// Eigen's namespace before this is included, so that Eigen's inline
// functions compiled for AVX-512 are symbols of their own.
#ifndef BERTPS_VECMATH_NS
#error "define BERTPS_VECMATH_NS before including vecmath_impl.h"
#endif

#include <cstdint>

#include "Eigen/Core"

namespace bertps {
namespace kernels {
namespace BERTPS_VECMATH_NS {

using CArr = Eigen::Map<const Eigen::Array<float, Eigen::Dynamic, 1>>;
using Arr = Eigen::Map<Eigen::Array<float, Eigen::Dynamic, 1>>;

float ExpShiftedSum(const float* x, int64_t n, float m) {
  return (CArr(x, n) - m).exp().sum();
}

float ExpShiftedInPlace(float* x, int64_t n, float m) {
  Arr a(x, n);
  a = (a - m).exp();
  return a.sum();
}

void ExpShiftedScaled(float* x, int64_t n, float m, float k) {
  Arr a(x, n);
  a = (a - m).exp() * k;
}

}  // namespace BERTPS_VECMATH_NS
}  // namespace kernels
}  // namespace bertps

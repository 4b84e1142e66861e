// Exponentials of the softmaxes (attention, the MLM head's tiles, the
// classifiers), built twice and chosen at run time for the CPU it runs on:
//   avx512  Eigen's vectorised exp on 16 floats at a time (x86-64-v4:
//           AVX-512F/CD/DQ/BW/VL)
//   avx2    the same on 8 floats (the build's baseline, x86-64-v3)
// BERTPS_MAX_ISA (bf16.h) caps the choice: "avx2" or "generic" keep the
// baseline. Both are accurate to about an ulp (Eigen's AVX-512 exp is a
// polynomial of its own) and add their sums in different orders, so the two
// agree to float rounding, not bit for bit (as oneDNN's products across
// CPUs); one CPU always takes the same path.
//
// The AVX-512 build lives in a namespace of its own, Eigen included
// (vecmath_impl.h), so no inline function compiled for AVX-512 can stand in
// for the baseline's at link time (vecmath_symbols_test checks it).
//
// Thread-safety: pure functions; the choice is made once, thread-safely.
#ifndef BERTPS_COMMON_KERNELS_VECMATH_H_
#define BERTPS_COMMON_KERNELS_VECMATH_H_

#include <cstdint>

namespace bertps {
namespace kernels {

// sum_i exp(x[i] - m).
float ExpShiftedSum(const float* x, int64_t n, float m);
// x[i] = exp(x[i] - m); returns the sum of the new x.
float ExpShiftedInPlace(float* x, int64_t n, float m);
// x[i] = exp(x[i] - m) * k.
void ExpShiftedScaled(float* x, int64_t n, float m, float k);

// Which build the functions above run: "avx512" or "avx2".
const char* VecMathIsa();

// One build's functions (tests compare them; a build the CPU cannot run is
// never chosen).
struct VecMath {
  float (*exp_shifted_sum)(const float*, int64_t, float);
  float (*exp_shifted_in_place)(float*, int64_t, float);
  void (*exp_shifted_scaled)(float*, int64_t, float, float);
};
const VecMath& VecMathAvx2();
// Null where the CPU lacks AVX-512F/CD/DQ/BW/VL.
const VecMath* VecMathAvx512();

}  // namespace kernels
}  // namespace bertps

#endif  // BERTPS_COMMON_KERNELS_VECMATH_H_

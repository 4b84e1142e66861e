#include "common/kernels/vecmath.h"

#include "common/kernels/bf16.h"

namespace bertps {
namespace kernels {

// The two builds (vecmath_avx2.cc, vecmath_avx512.cc).
namespace avx2 {
float ExpShiftedSum(const float* x, int64_t n, float m);
float ExpShiftedInPlace(float* x, int64_t n, float m);
void ExpShiftedScaled(float* x, int64_t n, float m, float k);
}  // namespace avx2
namespace avx512 {
float ExpShiftedSum(const float* x, int64_t n, float m);
float ExpShiftedInPlace(float* x, int64_t n, float m);
void ExpShiftedScaled(float* x, int64_t n, float m, float k);
}  // namespace avx512

namespace {

bool CpuHasAvx512() {
  __builtin_cpu_init();
  // x86-64-v4's AVX-512 subsets, all of which the build may use.
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512cd") &&
         __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}

const VecMath kAvx2 = {avx2::ExpShiftedSum, avx2::ExpShiftedInPlace,
                       avx2::ExpShiftedScaled};
const VecMath kAvx512 = {avx512::ExpShiftedSum, avx512::ExpShiftedInPlace,
                         avx512::ExpShiftedScaled};

const VecMath& Active() {
  // BERTPS_MAX_ISA caps bf16.h's choice; AVX-512 here only where it allows
  // at least its avx512 path.
  static const VecMath* chosen =
      CpuHasAvx512() && ActiveConvertIsa() >= ConvertIsa::kAvx512 ? &kAvx512
                                                                  : &kAvx2;
  return *chosen;
}

}  // namespace

float ExpShiftedSum(const float* x, int64_t n, float m) {
  return Active().exp_shifted_sum(x, n, m);
}
float ExpShiftedInPlace(float* x, int64_t n, float m) {
  return Active().exp_shifted_in_place(x, n, m);
}
void ExpShiftedScaled(float* x, int64_t n, float m, float k) {
  Active().exp_shifted_scaled(x, n, m, k);
}

const char* VecMathIsa() { return &Active() == &kAvx512 ? "avx512" : "avx2"; }

const VecMath& VecMathAvx2() { return kAvx2; }
const VecMath* VecMathAvx512() { return CpuHasAvx512() ? &kAvx512 : nullptr; }

}  // namespace kernels
}  // namespace bertps

// Bulk conversion between float and bfloat16 for the bf16 products
// (matmul.h), chosen at run time for the CPU it runs on:
//   avx512_bf16  VCVTNE2PS2BF16 (AVX512-BF16: Zen 4/5, Cooper Lake,
//                Sapphire/Emerald Rapids)
//   avx512       the same rounding in AVX-512F integer arithmetic
//   avx2         the same rounding in AVX2 integer arithmetic
//   generic      io::F32ToBf16, one value at a time
// All four round to nearest, ties to even, keep NaN a quiet NaN (never Inf)
// and infinities infinite, so they give the same bits (tested).
//
// BERTPS_MAX_ISA (avx512_bf16, avx512, avx2, generic) caps the choice, as
// ONEDNN_MAX_CPU_ISA caps oneDNN's; it is read once, at the first call.
//
// Thread-safety: pure functions; the choice is made once, thread-safely.
#ifndef BERTPS_COMMON_KERNELS_BF16_H_
#define BERTPS_COMMON_KERNELS_BF16_H_

#include <cstdint>

namespace bertps {
namespace kernels {

enum class ConvertIsa { kGeneric = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3 };

// y[i] = bf16(x[i]), i < n; large n on the OpenMP compute threads
// (threads.h).
void FloatToBf16(const float* x, int64_t n, uint16_t* y);
// y[i] = float(x[i]) (exact), i < n.
void Bf16ToFloat(const uint16_t* x, int64_t n, float* y);

// The path the functions above take on this CPU under BERTPS_MAX_ISA.
ConvertIsa ActiveConvertIsa();
const char* ConvertIsaName(ConvertIsa isa);

// The same conversion on a given path (tests; a path the CPU lacks falls back
// to the best it has below it).
void FloatToBf16On(ConvertIsa isa, const float* x, int64_t n, uint16_t* y);

}  // namespace kernels
}  // namespace bertps

#endif  // BERTPS_COMMON_KERNELS_BF16_H_

#include "common/kernels/bf16.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which its
// -Wmaybe-uninitialized reports when they are inlined into a function with a
// target attribute: a false alarm of the compiler's own headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/io/half.h"

namespace bertps {
namespace kernels {
namespace {

void ToBf16Generic(const float* x, int64_t n, uint16_t* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = io::F32ToBf16(x[i]);
}

// Round to nearest even on the bits: (u + 0x7fff + lsb) >> 16; a NaN keeps
// its top half with the quiet bit set.
__attribute__((target("avx2"))) void ToBf16Avx2(const float* x, int64_t n,
                                                uint16_t* y) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i half = _mm256_set1_epi32(0x7fff);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  auto round8 = [&](const float* p) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(hi, one);
    const __m256i r =
        _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(half, lsb)), 16);
    return _mm256_blendv_epi8(r, _mm256_or_si256(hi, quiet), nan);
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // packus interleaves 128-bit lanes: put them back in order.
    const __m256i packed = _mm256_permute4x64_epi64(
        _mm256_packus_epi32(round8(x + i), round8(x + i + 8)), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), packed);
  }
  ToBf16Generic(x + i, n - i, y + i);
}

__attribute__((target("avx512f"))) void ToBf16Avx512(const float* x,
                                                     int64_t n, uint16_t* y) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i half = _mm512_set1_epi32(0x7fff);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_loadu_si512(x + i);
    const __mmask16 nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(hi, one);
    __m512i r =
        _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(half, lsb)), 16);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i),
                        _mm512_maskz_cvtepi32_epi16(0xffff, r));
  }
  ToBf16Generic(x + i, n - i, y + i);
}

// VCVTNE2PS2BF16 rounds the same way but reads float denormals as zero.
__attribute__((target("avx512f,avx512bf16"))) void ToBf16Avx512Bf16(
    const float* x, int64_t n, uint16_t* y) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh r =
        _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(y + i, reinterpret_cast<__m512i>(r));
  }
  ToBf16Generic(x + i, n - i, y + i);
}

ConvertIsa BestOnCpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bf16")) return ConvertIsa::kAvx512Bf16;
  if (__builtin_cpu_supports("avx512f")) return ConvertIsa::kAvx512;
  if (__builtin_cpu_supports("avx2")) return ConvertIsa::kAvx2;
  return ConvertIsa::kGeneric;
}

ConvertIsa Choose() {
  ConvertIsa best = BestOnCpu();
  const char* cap = std::getenv("BERTPS_MAX_ISA");
  if (cap == nullptr) return best;
  const std::string c = cap;
  ConvertIsa limit = best;
  if (c == "generic") limit = ConvertIsa::kGeneric;
  if (c == "avx2") limit = ConvertIsa::kAvx2;
  if (c == "avx512") limit = ConvertIsa::kAvx512;
  if (c == "avx512_bf16") limit = ConvertIsa::kAvx512Bf16;
  return limit < best ? limit : best;
}

}  // namespace

ConvertIsa ActiveConvertIsa() {
  static const ConvertIsa isa = Choose();
  return isa;
}

const char* ConvertIsaName(ConvertIsa isa) {
  switch (isa) {
    case ConvertIsa::kAvx512Bf16:
      return "avx512_bf16";
    case ConvertIsa::kAvx512:
      return "avx512";
    case ConvertIsa::kAvx2:
      return "avx2";
    case ConvertIsa::kGeneric:
      break;
  }
  return "generic";
}

void FloatToBf16On(ConvertIsa isa, const float* x, int64_t n, uint16_t* y) {
  static const ConvertIsa best = BestOnCpu();
  if (isa > best) isa = best;
  switch (isa) {
    case ConvertIsa::kAvx512Bf16:
      return ToBf16Avx512Bf16(x, n, y);
    case ConvertIsa::kAvx512:
      return ToBf16Avx512(x, n, y);
    case ConvertIsa::kAvx2:
      return ToBf16Avx2(x, n, y);
    case ConvertIsa::kGeneric:
      break;
  }
  ToBf16Generic(x, n, y);
}

void FloatToBf16(const float* x, int64_t n, uint16_t* y) {
  const ConvertIsa isa = ActiveConvertIsa();
  // Large operands (an activation or the MLM logits: megabytes) on the
  // configured compute threads, in chunks of whole vectors.
  constexpr int64_t kChunk = int64_t{1} << 16;
  if (n < 2 * kChunk) return FloatToBf16On(isa, x, n, y);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    FloatToBf16On(isa, x + begin, std::min(kChunk, n - begin), y + begin);
  }
}

void Bf16ToFloat(const uint16_t* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(x[i]) << 16;
    std::memcpy(y + i, &u, sizeof(u));
  }
}

}  // namespace kernels
}  // namespace bertps

// Conversions between float (F32) and the 16-bit formats used in checkpoints:
// bfloat16 (BF16: 1 sign, 8 exponent, 7 mantissa bits) and IEEE binary16
// (F16: 1 sign, 5 exponent, 10 mantissa bits).
//
// F32 -> 16-bit conversions round to nearest, ties to even; NaN stays a
// (quiet) NaN with its sign, infinities stay infinite, values too large for
// F16 become infinite. 16-bit -> F32 conversions are exact.
//
// Thread-safety: pure functions.
#ifndef BERTPS_COMMON_IO_HALF_H_
#define BERTPS_COMMON_IO_HALF_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace bertps {
namespace io {

namespace half_internal {
inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
}  // namespace half_internal

// BF16 is the top half of an F32: exact.
inline float Bf16ToF32(uint16_t h) {
  return half_internal::BitsFloat(static_cast<uint32_t>(h) << 16);
}

// Round to nearest even; NaN becomes a quiet NaN (never rounds to Inf).
inline uint16_t F32ToBf16(float f) {
  const uint32_t u = half_internal::FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in F32.
    const float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -mag : mag;
  }
  if (exp == 0x1f) {
    return half_internal::BitsFloat(sign | 0x7f800000u | (mant << 13));
  }
  return half_internal::BitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t F32ToF16(float f) {
  uint32_t u = half_internal::FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u >= 0x7f800000u) {  // Inf or NaN.
    const uint16_t nan_bits =
        u > 0x7f800000u ? static_cast<uint16_t>(0x200u | ((u >> 13) & 0x3ffu))
                        : 0;
    return sign | 0x7c00u | nan_bits;
  }
  if (u >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to Inf.
  if (u < 0x38800000u) {
    // Below the smallest normal (2^-14): subnormal or zero, in units of
    // 2^-24. The scaling is exact; nearbyint rounds ties to even.
    const float units = half_internal::BitsFloat(u) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(units));
  }
  u += 0xfffu + ((u >> 13) & 1u);  // Round to nearest even at bit 13.
  u -= 112u << 23;                 // Rebias the exponent from 127 to 15.
  return sign | static_cast<uint16_t>(u >> 13);
}

}  // namespace io
}  // namespace bertps

#endif  // BERTPS_COMMON_IO_HALF_H_

#include "common/io/half.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace bertps {
namespace io {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(HalfTest, Bf16KnownValues) {
  EXPECT_EQ(Bf16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(Bf16ToF32(0xc000), -2.0f);
  EXPECT_EQ(Bf16ToF32(0x7f80), kInf);
  EXPECT_EQ(Bf16ToF32(0xff80), -kInf);
  EXPECT_TRUE(std::isnan(Bf16ToF32(0x7fc0)));
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBf16(-2.0f), 0xc000);
  EXPECT_EQ(F32ToBf16(kInf), 0x7f80);
  EXPECT_EQ(F32ToBf16(-0.0f), 0x8000);
}

TEST(HalfTest, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between bf16 1.0 (even) and 1 + 2^-7.
  EXPECT_EQ(F32ToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: goes up.
  EXPECT_EQ(F32ToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  // Just above halfway rounds up.
  EXPECT_EQ(F32ToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)),
            0x3f81);
  // The largest finite float rounds to Inf.
  EXPECT_EQ(F32ToBf16(std::numeric_limits<float>::max()), 0x7f80);
}

TEST(HalfTest, Bf16NanStaysNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(nan))));
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(-nan))));
  // A signalling NaN whose payload is only in the low bits must not become
  // Inf when truncated.
  uint32_t snan_bits = 0x7f800001u;
  float snan;
  std::memcpy(&snan, &snan_bits, 4);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(snan))));
}

TEST(HalfTest, Bf16RoundTripIsExactForAll16BitPatterns) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Bf16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToBf16(f), h);
  }
}

TEST(HalfTest, F16KnownValues) {
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0xc000), -2.0f);
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_EQ(F16ToF32(0x0400), std::ldexp(1.0f, -14));  // Smallest normal.
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));  // Smallest subnormal.
  EXPECT_EQ(F16ToF32(0x03ff), 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(F16ToF32(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(F16ToF32(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(F16ToF32(0x8000)));
  EXPECT_EQ(F16ToF32(0x7c00), kInf);
  EXPECT_EQ(F16ToF32(0xfc00), -kInf);
  EXPECT_TRUE(std::isnan(F16ToF32(0x7e00)));
  EXPECT_TRUE(std::isnan(F16ToF32(0x7c01)));
  EXPECT_TRUE(std::isnan(F16ToF32(0xfe00)));
  EXPECT_EQ(F16ToF32(0x3555), 0.333251953125f);
}

TEST(HalfTest, F32ToF16Rounding) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65519.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // Tie goes to even: Inf.
  EXPECT_EQ(F32ToF16(1e10f), 0x7c00);
  EXPECT_EQ(F32ToF16(-kInf), 0xfc00);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);      // Tie to even (0).
  EXPECT_EQ(F32ToF16(3 * std::ldexp(1.0f, -25)), 0x0002);  // Tie to even.
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(F32ToF16(-std::ldexp(1.0f, -30)), 0x8000);
  // 1 + 2^-11 is halfway between 1.0 and the next half: stays at 1.0.
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Largest subnormal rounding up into the smallest normal.
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);
  EXPECT_TRUE(
      std::isnan(F16ToF32(F32ToF16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(HalfTest, F16RoundTripIsExactForAll16BitPatterns) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(F16ToF32(F32ToF16(f))));
      continue;
    }
    ASSERT_EQ(F32ToF16(f), h) << std::hex << h;
  }
}

TEST(HalfTest, F32ToF16MatchesNearestOnRandomValues) {
  // The chosen half must be at least as close as both neighbours.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> exp_dist(-26.0f, 16.0f);
  for (int i = 0; i < 20000; ++i) {
    const float f = std::exp2(exp_dist(rng)) * ((rng() & 1) ? 1.0f : -1.0f);
    if (std::fabs(f) >= 65504.0f) continue;
    const uint16_t h = F32ToF16(f);
    const double err = std::fabs(static_cast<double>(F16ToF32(h)) - f);
    for (int d : {-1, 1}) {
      const uint16_t n = static_cast<uint16_t>(h + d);
      const float nf = F16ToF32(n);
      if (std::isnan(nf) || std::isinf(nf) ||
          std::signbit(nf) != std::signbit(f))
        continue;
      ASSERT_LE(err, std::fabs(static_cast<double>(nf) - f)) << f;
    }
  }
}

}  // namespace
}  // namespace io
}  // namespace bertps

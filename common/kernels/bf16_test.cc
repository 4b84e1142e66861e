#include "common/kernels/bf16.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/io/half.h"
#include "gtest/gtest.h"

namespace bertps {
namespace kernels {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Random bit patterns (every class: normals, denormals, zeros, infinities,
// NaNs with low payloads that a careless rounding would carry into Inf) and
// the ties that decide round-to-even; n not a multiple of any vector width.
std::vector<float> Inputs() {
  std::mt19937 rng(11);
  std::vector<float> v;
  for (int i = 0; i < 100003; ++i) v.push_back(FromBits(rng()));
  for (uint32_t u : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                     0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7f80ffffu,
                     0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu,
                     0x00000001u, 0x007fffffu, 0x00800000u}) {
    v.push_back(FromBits(u));
  }
  return v;
}

bool Denormal(float f) {
  return f != 0 && std::fabs(f) < std::numeric_limits<float>::min();
}

TEST(Bf16, EveryPathRoundsLikeTheScalarReference) {
  const std::vector<float> x = Inputs();
  std::vector<uint16_t> ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) ref[i] = io::F32ToBf16(x[i]);
  for (ConvertIsa isa : {ConvertIsa::kGeneric, ConvertIsa::kAvx2,
                         ConvertIsa::kAvx512, ConvertIsa::kAvx512Bf16}) {
    std::vector<uint16_t> y(x.size(), 0xdead);
    FloatToBf16On(isa, x.data(), x.size(), y.data());
    int64_t mismatches = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (y[i] == ref[i]) continue;
      // The AVX512-BF16 instruction reads float denormals as zero.
      if (isa == ConvertIsa::kAvx512Bf16 && Denormal(x[i]) &&
          (y[i] & 0x7fff) == 0 && (y[i] & 0x8000) == (ref[i] & 0x8000)) {
        continue;
      }
      if (++mismatches < 5) {
        ADD_FAILURE() << ConvertIsaName(isa) << " at " << i << ": " << std::hex
                      << y[i] << " != " << ref[i];
      }
    }
    EXPECT_EQ(mismatches, 0) << ConvertIsaName(isa);
  }
}

TEST(Bf16, NanStaysNanAndTiesGoToEven) {
  const std::vector<float> x = {FromBits(0x7f800001u), FromBits(0x3f808000u),
                                FromBits(0x3f818000u), 1.0f, -2.5f};
  std::vector<uint16_t> y(x.size());
  FloatToBf16(x.data(), x.size(), y.data());
  EXPECT_TRUE(std::isnan(io::Bf16ToF32(y[0])));
  EXPECT_EQ(y[1], 0x3f80);  // tie, even below
  EXPECT_EQ(y[2], 0x3f82);  // tie, even above
  std::vector<float> back(x.size());
  Bf16ToFloat(y.data(), y.size(), back.data());
  EXPECT_EQ(back[3], 1.0f);
  EXPECT_EQ(back[4], -2.5f);
}

// Large inputs go through the threads in chunks: the same bits.
TEST(Bf16, LargeInputsMatchTheScalarReference) {
  std::mt19937 rng(4);
  std::normal_distribution<float> dist;
  std::vector<float> x((int64_t{1} << 18) + 77);
  for (float& v : x) v = dist(rng);
  std::vector<uint16_t> y(x.size());
  FloatToBf16(x.data(), x.size(), y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(y[i], io::F32ToBf16(x[i])) << i;
  }
}

TEST(Bf16, ReportsThePathItTakes) {
  const char* cap = std::getenv("BERTPS_MAX_ISA");
  std::printf("conversion path: %s (BERTPS_MAX_ISA=%s)\n",
              ConvertIsaName(ActiveConvertIsa()), cap ? cap : "unset");
  if (cap != nullptr && std::string(cap) == "generic") {
    EXPECT_EQ(ActiveConvertIsa(), ConvertIsa::kGeneric);
  }
}

}  // namespace
}  // namespace kernels
}  // namespace bertps

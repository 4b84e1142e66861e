#include "common/kernels/vecmath.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace bertps {
namespace kernels {
namespace {

// Logits as softmaxes see them: a spread of a few tens, odd lengths (the
// vector loops' tails), a masked -10000 and -inf.
std::vector<float> Logits(int64_t n, uint32_t seed) {
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = static_cast<float>((seed >> 8) % 60000) / 1000.0f - 40.0f;
  }
  if (n > 3) x[3] = -10000.0f;
  if (n > 5) x[5] = -std::numeric_limits<float>::infinity();
  return x;
}

// Each build against exp in double: a few float ulp per element, and the
// sums to float rounding.
void CheckBuild(const VecMath& vm, const char* name) {
  for (int64_t n : {1, 7, 8, 15, 16, 17, 33, 128, 1000, 30522}) {
    const std::vector<float> x = Logits(n, static_cast<uint32_t>(n));
    float m = -std::numeric_limits<float>::infinity();
    for (float v : x) m = std::max(m, v);
    double want_sum = 0;
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) {
      // Of the float difference, as the kernels take it (its rounding alone
      // moves exp(-40) by 2e-6 relative).
      want[i] = std::exp(static_cast<double>(x[i] - m));
      want_sum += want[i];
    }
    EXPECT_NEAR(vm.exp_shifted_sum(x.data(), n, m), want_sum, 1e-5 * want_sum)
        << name << " n=" << n;
    std::vector<float> y = x;
    EXPECT_NEAR(vm.exp_shifted_in_place(y.data(), n, m), want_sum,
                1e-5 * want_sum)
        << name << " n=" << n;
    std::vector<float> z = x;
    vm.exp_shifted_scaled(z.data(), n, m, 0.25f);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(y[i], want[i], 4e-7 * want[i] + 1e-37) << name << " " << i;
      ASSERT_NEAR(z[i], 0.25 * want[i], 4e-7 * want[i] + 1e-37)
          << name << " " << i;
    }
  }
}

TEST(VecMath, EachBuildMatchesExpInDouble) {
  CheckBuild(VecMathAvx2(), "avx2");
  if (VecMathAvx512() == nullptr) {
    std::printf("SKIPPED part: this CPU has no AVX-512 (the avx512 build is "
                "not run)\n");
    return;
  }
  CheckBuild(*VecMathAvx512(), "avx512");
}

// The builds agree to float rounding: Eigen's AVX-512 exp is a polynomial
// of its own, so an element may differ in its last bits; the sums add in
// another order.
TEST(VecMath, BothBuildsAgreeToARoundingError) {
  if (VecMathAvx512() == nullptr) GTEST_SKIP() << "this CPU has no AVX-512";
  const std::vector<float> x = Logits(30522, 7);
  std::vector<float> a = x, b = x;
  VecMathAvx2().exp_shifted_scaled(a.data(), a.size(), 19.5f, 0.5f);
  VecMathAvx512()->exp_shifted_scaled(b.data(), b.size(), 19.5f, 0.5f);
  int64_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    // Below exp(-87.3) the AVX2 build returns its clamp's 1.5e-39 and the
    // AVX-512 one 0: both nothing beside the row's sum (at least 1).
    if (a[i] < std::numeric_limits<float>::min() &&
        b[i] < std::numeric_limits<float>::min()) {
      continue;
    }
    // Each about an ulp from exp; apart by a few float ulps at most.
    ASSERT_NEAR(a[i], b[i], 5e-7 * std::max(a[i], b[i]))
        << i << ": " << a[i] << " " << b[i];
    differ += a[i] != b[i];
  }
  std::printf("elements that differ: %lld of %zu\n",
              static_cast<long long>(differ), a.size());
  const float sa = VecMathAvx2().exp_shifted_sum(x.data(), x.size(), 19.5f);
  const float sb = VecMathAvx512()->exp_shifted_sum(x.data(), x.size(), 19.5f);
  EXPECT_NEAR(sa, sb, 1e-6 * sa);
}

// Results do not depend on where the data lies (runs must repeat bit for
// bit, and buffers move between runs): each build gives the same bits at
// every offset from a 64-byte boundary.
TEST(VecMath, TheSameBitsWhereverTheDataLies) {
  const std::vector<float> x = Logits(1003, 11);
  std::vector<const VecMath*> builds = {&VecMathAvx2()};
  if (VecMathAvx512() != nullptr) builds.push_back(VecMathAvx512());
  for (const VecMath* vm : builds) {
    float first_sum = 0, first_in_place = 0;
    std::vector<float> first_scaled;
    for (int off = 0; off < 16; ++off) {
      alignas(64) static float buf[1003 + 16];
      float* at = buf + off;
      std::memcpy(at, x.data(), 4 * x.size());
      const float sum = vm->exp_shifted_sum(at, x.size(), 21.0f);
      const float in_place = vm->exp_shifted_in_place(at, x.size(), 21.0f);
      std::memcpy(at, x.data(), 4 * x.size());
      vm->exp_shifted_scaled(at, x.size(), 21.0f, 0.75f);
      std::vector<float> scaled(at, at + x.size());
      if (off == 0) {
        first_sum = sum;
        first_in_place = in_place;
        first_scaled = scaled;
        continue;
      }
      EXPECT_EQ(sum, first_sum) << "offset " << off;
      EXPECT_EQ(in_place, first_in_place) << "offset " << off;
      EXPECT_EQ(scaled, first_scaled) << "offset " << off;
    }
  }
}

// A NaN stays a NaN on every build (a NaN logit must make a NaN loss, which
// the worker then refuses), wherever it lies in the packets.
TEST(VecMath, ANanGivesANan) {
  std::vector<const VecMath*> builds = {&VecMathAvx2()};
  if (VecMathAvx512() != nullptr) builds.push_back(VecMathAvx512());
  for (const VecMath* vm : builds) {
    for (int64_t at : {0, 5, 16, 33}) {
      std::vector<float> x = Logits(37, 5);
      x[at] = std::numeric_limits<float>::quiet_NaN();
      EXPECT_TRUE(std::isnan(vm->exp_shifted_sum(x.data(), x.size(), 10.0f)))
          << at;
      std::vector<float> y = x;
      EXPECT_TRUE(std::isnan(vm->exp_shifted_in_place(y.data(), y.size(), 10.0f)))
          << at;
      EXPECT_TRUE(std::isnan(y[at])) << at;
      EXPECT_FALSE(std::isnan(y[at == 0 ? 1 : 0])) << at;
    }
  }
}

// The dispatch follows the CPU and BERTPS_MAX_ISA.
TEST(VecMath, TheChosenBuildFollowsTheCpuAndTheCap) {
  const char* cap = std::getenv("BERTPS_MAX_ISA");
  const bool capped = cap != nullptr && (std::string(cap) == "avx2" ||
                                         std::string(cap) == "generic");
  const std::string want =
      VecMathAvx512() != nullptr && !capped ? "avx512" : "avx2";
  EXPECT_EQ(VecMathIsa(), want);
  std::printf("vecmath: %s\n", VecMathIsa());
  const std::vector<float> x = Logits(100, 3);
  const VecMath& chosen = want == "avx512" ? *VecMathAvx512() : VecMathAvx2();
  EXPECT_EQ(ExpShiftedSum(x.data(), 100, 20.0f),
            chosen.exp_shifted_sum(x.data(), 100, 20.0f));
}

}  // namespace
}  // namespace kernels
}  // namespace bertps

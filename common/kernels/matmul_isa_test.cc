// Run under ONEDNN_MAX_CPU_ISA=AVX2 or AVX512_CORE and BERTPS_MAX_ISA=avx2 or
// avx512 (BUILD): a bf16 engine on a CPU without native bf16 runs fp32, says
// so, and its products are fp32's; the conversion takes the capped path.
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "common/kernels/bf16.h"
#include "common/kernels/matmul.h"
#include "gtest/gtest.h"

namespace bertps {
namespace kernels {
namespace {

TEST(MatmulIsa, Bf16WithoutNativeSupportRunsFp32AndSaysSo) {
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  ASSERT_TRUE(cap != nullptr && (std::string(cap) == "AVX2" ||
                                 std::string(cap) == "AVX512_CORE"));
  EXPECT_EQ(Bf16Hardware(), "none");
  MatmulEngine engine(Precision::kBf16);
  EXPECT_EQ(engine.precision(), Precision::kFp32);
  EXPECT_EQ(engine.KernelName(GemmDims{2, 8, 8, 8, false, true}).find("bf16"),
            std::string::npos);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist;
  GemmDims d{1, 17, 23, 40, false, true};
  std::vector<float> a(17 * 40), b(23 * 40), c(17 * 23), ref(17 * 23);
  for (float& x : a) x = dist(rng);
  for (float& x : b) x = dist(rng);
  engine.Run(d, a.data(), b.data(), c.data());
  MatmulNaive<float>(d, a.data(), b.data(), ref.data());
  for (size_t i = 0; i < c.size(); ++i) {
    // fp32 accuracy, far below bf16's rounding of the inputs.
    ASSERT_NEAR(c[i], ref[i], 1e-5 * (1 + std::fabs(ref[i]))) << i;
  }
}

TEST(MatmulIsa, ConversionTakesTheCappedPath) {
  const std::string cap = std::getenv("BERTPS_MAX_ISA");
  EXPECT_LE(ActiveConvertIsa(),
            cap == "avx2" ? ConvertIsa::kAvx2 : ConvertIsa::kAvx512);
  std::printf("conversion path: %s\n", ConvertIsaName(ActiveConvertIsa()));
}

}  // namespace
}  // namespace kernels
}  // namespace bertps

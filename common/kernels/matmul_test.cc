#include "common/kernels/matmul.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/io/half.h"
#include "gtest/gtest.h"

namespace bertps {
namespace kernels {
namespace {

std::vector<float> Random(size_t n, std::mt19937* rng) {
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

struct Case {
  int64_t batch, m, n, k;
};

// For every case, layout (A and B stored transposed or not), accumulation
// and alpha: random A, B and C0, then check(d, a, b, c0, alpha, accumulate).
template <typename Check>
void ForEveryLayout(std::initializer_list<Case> cases, uint32_t seed,
                    Check check) {
  std::mt19937 rng(seed);
  for (Case c : cases) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        for (int acc = 0; acc < 2; ++acc) {
          for (float alpha : {1.0f, 0.125f}) {
            SCOPED_TRACE(testing::Message()
                         << "batch=" << c.batch << " m=" << c.m << " ta=" << ta
                         << " tb=" << tb << " acc=" << acc);
            GemmDims d{c.batch, c.m, c.n, c.k, ta == 1, tb == 1};
            const std::vector<float> a = Random(c.batch * c.m * c.k, &rng);
            const std::vector<float> b = Random(c.batch * c.k * c.n, &rng);
            const std::vector<float> c0 = Random(c.batch * c.m * c.n, &rng);
            check(d, a, b, c0, alpha, acc == 1);
            if (testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

TEST(Matmul, OneDnnMatchesNaiveForEveryLayout) {
  MatmulEngine engine;
  ForEveryLayout(
      {Case{1, 5, 7, 3}, Case{1, 33, 17, 64}, Case{3, 16, 8, 12},
       Case{6, 12, 12, 8}},
      7,
      [&](const GemmDims& d, const std::vector<float>& a,
          const std::vector<float>& b, const std::vector<float>& c0,
          float alpha, bool accumulate) {
        std::vector<float> fast = c0, ref = c0;
        engine.Run(d, a.data(), b.data(), fast.data(), alpha, accumulate);
        MatmulNaive<float>(d, a.data(), b.data(), ref.data(), alpha,
                           accumulate);
        for (size_t i = 0; i < ref.size(); ++i) {
          ASSERT_NEAR(fast[i], ref[i], 1e-4 * (1 + std::fabs(ref[i]))) << i;
        }
      });
}

// A bf16 product is the exact product of the bf16-rounded operands, summed
// in float: compared with that product in double, only float accumulation
// error remains (not bf16's 2^-9).
TEST(Matmul, Bf16IsTheProductOfRoundedOperands) {
  MatmulEngine engine(Precision::kBf16);
  std::printf("bf16 hardware: %s, engine runs %s\n", Bf16Hardware().c_str(),
              PrecisionName(engine.precision()));
  if (engine.precision() != Precision::kBf16) {
    GTEST_SKIP() << "no native bf16 here (" << Bf16Hardware()
                 << "): the engine runs fp32 (matmul_isa_test tests that)";
  }
  auto round = [](const std::vector<float>& v) {
    std::vector<double> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      r[i] = io::Bf16ToF32(io::F32ToBf16(v[i]));
    }
    return r;
  };
  ForEveryLayout(
      {Case{1, 5, 7, 3}, Case{1, 33, 17, 64}, Case{1, 64, 300, 96},
       Case{3, 16, 8, 12}, Case{6, 12, 12, 8}},
      9,
      [&](const GemmDims& d, const std::vector<float>& a,
          const std::vector<float>& b, const std::vector<float>& c0,
          float alpha, bool accumulate) {
        std::vector<float> fast = c0;
        std::vector<double> ref(c0.begin(), c0.end());
        engine.Run(d, a.data(), b.data(), fast.data(), alpha, accumulate);
        MatmulNaive<double>(d, round(a).data(), round(b).data(), ref.data(),
                            alpha, accumulate);
        for (size_t i = 0; i < ref.size(); ++i) {
          ASSERT_NEAR(fast[i], ref[i], 2e-6 * d.k * (1 + std::fabs(ref[i])))
              << i;
        }
      });
}

bool CpuHasFlag(const std::string& flag) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::string w;
    while (words >> w) {
      if (w == flag) return true;
    }
    return false;
  }
  return false;
}

// The bf16 products run on the best bf16 unit the CPU has: AMX tiles where
// it has AMX-BF16 (Sapphire/Emerald Rapids), else AVX512-BF16 dot products.
TEST(Matmul, Bf16RunsOnTheCpusBf16Units) {
  MatmulEngine engine(Precision::kBf16);
  const GemmDims d{1, 64, 96, 128, false, true};
  if (CpuHasFlag("amx_bf16") && CpuHasFlag("amx_tile")) {
    EXPECT_EQ(Bf16Hardware(), "amx");
    EXPECT_NE(engine.KernelName(d).find("amx"), std::string::npos)
        << engine.KernelName(d);
  } else if (CpuHasFlag("avx512_bf16")) {
    EXPECT_EQ(Bf16Hardware(), "avx512_bf16");
    EXPECT_NE(engine.KernelName(d).find("bf16"), std::string::npos)
        << engine.KernelName(d);
    std::printf("no AMX on this CPU: the AMX path is not exercised here\n");
  } else {
    GTEST_SKIP() << "neither AMX-BF16 nor AVX512-BF16 on this CPU";
  }
  std::printf("bf16 kernel: %s\n", engine.KernelName(d).c_str());
  // The product itself through that kernel, large enough to use it fully.
  std::mt19937 rng(5);
  std::vector<float> a = Random(64 * 128, &rng), b = Random(96 * 128, &rng);
  std::vector<float> c(64 * 96);
  std::vector<double> ref(64 * 96);
  engine.Run(d, a.data(), b.data(), c.data());
  std::vector<double> ra(a.size()), rb(b.size());
  for (size_t i = 0; i < a.size(); ++i) ra[i] = io::Bf16ToF32(io::F32ToBf16(a[i]));
  for (size_t i = 0; i < b.size(); ++i) rb[i] = io::Bf16ToF32(io::F32ToBf16(b[i]));
  MatmulNaive<double>(d, ra.data(), rb.data(), ref.data());
  for (size_t i = 0; i < c.size(); ++i) {
    ASSERT_NEAR(c[i], ref[i], 2e-6 * 128 * (1 + std::fabs(ref[i]))) << i;
  }
}

int64_t MappedBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmSize:", 0) == 0) return std::atoll(line.c_str() + 7) << 10;
  }
  return -1;
}

// Under an address-space limit that leaves no room (ulimit -v), oneDNN
// cannot allocate a product's packing buffers or a new primitive: the
// engine reports it (it used to CHECK-fail and abort the daemon), leaves C
// alone, skips later products, and works again once cleared with room.
TEST(Matmul, AProductWithNoMemoryLeftFailsWithoutAborting) {
  MatmulEngine engine;
  std::mt19937 rng(3);
  const GemmDims big{1, 1024, 1024, 1024};
  const GemmDims batched{3, 96, 80, 72};
  const std::vector<float> a = Random(1024 * 1024, &rng);
  const std::vector<float> b = Random(1024 * 1024, &rng);
  std::vector<float> c(1024 * 1024, 7.0f);
  // Warm: oneDNN's threads and state exist before the limit.
  engine.Run(GemmDims{1, 64, 64, 64}, a.data(), b.data(), c.data());
  ASSERT_TRUE(engine.status().ok());
  std::fill(c.begin(), c.end(), 7.0f);

  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &saved), 0);
  const int64_t mapped = MappedBytes();
  ASSERT_GT(mapped, 0);
  const rlimit tight{static_cast<rlim_t>(mapped + (int64_t{1} << 20)),
                     saved.rlim_max};
  ASSERT_EQ(setrlimit(RLIMIT_AS, &tight), 0);
  engine.Run(big, a.data(), b.data(), c.data());
  engine.Run(batched, a.data(), b.data(), c.data());
  const absl::Status st = engine.status();
  ASSERT_EQ(setrlimit(RLIMIT_AS, &saved), 0);
  EXPECT_TRUE(engine.failed());
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("1x1024x1024x1024"), std::string::npos) << st;
  EXPECT_EQ(c[0], 7.0f);  // untouched
  EXPECT_EQ(c[1024 * 1024 - 1], 7.0f);

  // Failed: later products do nothing until cleared.
  engine.Run(GemmDims{1, 64, 64, 64}, a.data(), b.data(), c.data());
  EXPECT_EQ(c[0], 7.0f);
  engine.ClearStatus();
  EXPECT_TRUE(engine.status().ok());
  std::vector<float> ref(batched.batch * batched.m * batched.n);
  engine.Run(batched, a.data(), b.data(), c.data());
  MatmulNaive<float>(batched, a.data(), b.data(), ref.data());
  ASSERT_TRUE(engine.status().ok()) << engine.status();
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_NEAR(c[i], ref[i], 1e-3f * (1 + std::fabs(ref[i]))) << i;
  }
}

TEST(Matmul, ParsesPrecisionNames) {
  Precision p;
  EXPECT_TRUE(ParsePrecision("BF16", &p));
  EXPECT_EQ(p, Precision::kBf16);
  EXPECT_TRUE(ParsePrecision("fp32", &p));
  EXPECT_EQ(p, Precision::kFp32);
  EXPECT_FALSE(ParsePrecision("fp16", &p));
  EXPECT_STREQ(PrecisionName(Precision::kBf16), "bf16");
}

TEST(Matmul, NaiveKnownProduct) {
  // [[1,2],[3,4]] x [[5,6],[7,8]] = [[19,22],[43,50]]
  double a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8}, c[4];
  MatmulNaive<double>(GemmDims{1, 2, 2, 2}, a, b, c);
  EXPECT_EQ(c[0], 19);
  EXPECT_EQ(c[1], 22);
  EXPECT_EQ(c[2], 43);
  EXPECT_EQ(c[3], 50);
  // A^T B with A stored transposed.
  MatmulNaive<double>(GemmDims{1, 2, 2, 2, true, false}, a, b, c);
  EXPECT_EQ(c[0], 1 * 5 + 3 * 7);
  EXPECT_EQ(c[1], 1 * 6 + 3 * 8);
}

}  // namespace
}  // namespace kernels
}  // namespace bertps

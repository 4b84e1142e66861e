#include "common/kernels/matmul.h"

#include <cmath>
#include <random>
#include <vector>

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

TEST(Matmul, OneDnnMatchesNaiveForEveryLayout) {
  MatmulEngine engine;
  std::mt19937 rng(7);
  for (Case c : {Case{1, 5, 7, 3}, Case{1, 33, 17, 64}, Case{3, 16, 8, 12},
                 Case{6, 12, 12, 8}}) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        for (int acc = 0; acc < 2; ++acc) {
          for (float alpha : {1.0f, 0.125f}) {
            GemmDims d{c.batch, c.m, c.n, c.k, ta == 1, tb == 1};
            std::vector<float> a = Random(c.batch * c.m * c.k, &rng);
            std::vector<float> b = Random(c.batch * c.k * c.n, &rng);
            std::vector<float> c0 = Random(c.batch * c.m * c.n, &rng);
            std::vector<float> fast = c0, ref = c0;
            engine.Run(d, a.data(), b.data(), fast.data(), alpha, acc == 1);
            MatmulNaive<float>(d, a.data(), b.data(), ref.data(), alpha,
                               acc == 1);
            for (size_t i = 0; i < ref.size(); ++i) {
              ASSERT_NEAR(fast[i], ref[i], 1e-4 * (1 + std::fabs(ref[i])))
                  << "batch=" << c.batch << " m=" << c.m << " ta=" << ta
                  << " tb=" << tb << " acc=" << acc << " i=" << i;
            }
          }
        }
      }
    }
  }
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

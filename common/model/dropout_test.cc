// Counter-based dropout: every output is 0 or x / (1 - p), the keep rate is
// 1 - p, the mask is a pure function of (seed, step, site, example, row,
// element) and the backward pass applies the forward's mask.
//   R rows of L elements; E examples of R_E rows each.
#include "common/model/dropout.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/model/layer_test_util.h"
#include "gtest/gtest.h"

namespace bertps {
namespace {

using testing::Cast;
using testing::CheckGradient;
using testing::Dot;
using testing::RandomNormal;

struct Layout {
  int64_t rows = 0, row_len = 0, rows_per_example = 1, example_offset = 0;
  int64_t size() const { return rows * row_len; }
};

// The keep mask (R, L) of a forward pass, read back from a pass over ones.
std::vector<char> Mask(const DropoutKey& key, double p, const Layout& l) {
  std::vector<double> ones(l.size(), 1.0), y(l.size());
  DropoutForward(key, p, l.rows, l.row_len, l.rows_per_example,
                 l.example_offset, ones.data(), y.data());
  std::vector<char> m(l.size());
  for (int64_t i = 0; i < l.size(); ++i) m[i] = y[i] != 0;
  return m;
}

double FractionDifferent(const std::vector<char>& a,
                         const std::vector<char>& b) {
  int64_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += a[i] != b[i];
  return static_cast<double>(diff) / a.size();
}

double KeepRate(const std::vector<char>& m) {
  int64_t kept = 0;
  for (char k : m) kept += k;
  return static_cast<double>(kept) / m.size();
}

TEST(Dropout, ZeroProbabilityIsIdentity) {
  const Layout l{6, 11, 2, 3};
  const DropoutKey key{1, 2, 3};
  const std::vector<float> x = Cast<float>(RandomNormal(l.size(), 1));
  std::vector<float> y(l.size(), 7.f);
  DropoutForward(key, 0.0, l.rows, l.row_len, l.rows_per_example,
                 l.example_offset, x.data(), y.data());
  EXPECT_EQ(y, x);
  std::vector<float> dx(l.size(), 7.f);
  DropoutBackward(key, 0.0, l.rows, l.row_len, l.rows_per_example,
                  l.example_offset, x.data(), dx.data());
  EXPECT_EQ(dx, x);
  std::vector<float> inplace = x;
  DropoutForward(key, 0.0, l.rows, l.row_len, l.rows_per_example,
                 l.example_offset, inplace.data(), inplace.data());
  EXPECT_EQ(inplace, x);
}

// Forward against the definition: y[i] = x[i] * keep[i] / (1 - p), where
// keep is the set of nonzero outputs (x has no zeros).
template <typename T>
void CheckForward(double p, double rtol) {
  const Layout l{12, 37, 3, 5};
  std::vector<double> xd = RandomNormal(l.size(), 2);
  for (double& v : xd) v += v >= 0 ? 0.5 : -0.5;
  const std::vector<T> x = Cast<T>(xd);
  std::vector<T> y(l.size());
  DropoutForward(DropoutKey{9, 4, 2}, p, l.rows, l.row_len, l.rows_per_example,
                 l.example_offset, x.data(), y.data());
  int64_t kept = 0;
  for (int64_t i = 0; i < l.size(); ++i) {
    if (y[i] == T(0)) continue;
    ++kept;
    const double want = double(x[i]) / (1.0 - p);
    EXPECT_NEAR(y[i], want, rtol * std::fabs(want)) << "i=" << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, l.size());
}

TEST(Dropout, ForwardKeepsOrZeroesAndScalesFloat) {
  CheckForward<float>(0.1, 1e-6);
  CheckForward<float>(0.5, 1e-6);
}
TEST(Dropout, ForwardKeepsOrZeroesAndScalesDouble) {
  CheckForward<double>(0.1, 1e-15);
  CheckForward<double>(0.7, 1e-15);
}

// Over 1e6 elements (1000 rows, 100 examples) the keep rate is 1 - p to
// within 0.5 points (the standard deviation is below 0.05 points), the
// output mean of a field of ones is 1, and no row or element position is
// biased.
TEST(Dropout, KeepRateScaleAndUniformity) {
  const Layout l{1000, 1000, 10, 0};
  for (double p : {0.1, 0.5, 0.9}) {
    std::vector<float> y(l.size(), 1.f);
    DropoutForward(DropoutKey{123, 7, 16}, p, l.rows, l.row_len,
                   l.rows_per_example, l.example_offset, y.data(), y.data());
    const float scale = static_cast<float>(1.0 / (1.0 - p));
    int64_t kept = 0;
    double sum = 0;
    std::vector<int64_t> per_row(l.rows, 0), per_col(l.row_len, 0);
    for (int64_t r = 0; r < l.rows; ++r) {
      for (int64_t i = 0; i < l.row_len; ++i) {
        const float v = y[r * l.row_len + i];
        ASSERT_TRUE(v == 0.f || v == scale) << v;
        const bool k = v != 0.f;
        kept += k;
        per_row[r] += k;
        per_col[i] += k;
        sum += v;
      }
    }
    const double rate = static_cast<double>(kept) / l.size();
    EXPECT_NEAR(rate, 1 - p, 0.005) << "p=" << p;
    EXPECT_NEAR(sum / l.size(), 1.0, 0.005 / (1 - p)) << "p=" << p;
    // Each row and each position: 1000 samples, sd <= 1.6 points; 8 sd.
    for (int64_t r = 0; r < l.rows; ++r) {
      ASSERT_NEAR(per_row[r] / 1000.0, 1 - p, 0.13) << "row " << r;
    }
    for (int64_t i = 0; i < l.row_len; ++i) {
      ASSERT_NEAR(per_col[i] / 1000.0, 1 - p, 0.13) << "position " << i;
    }
  }
}

// Neighbouring decisions (next element, next row) are uncorrelated: both
// kept with probability (1 - p)^2.
TEST(Dropout, NeighboursUncorrelated) {
  const Layout l{500, 1000, 8, 0};
  const double p = 0.5;
  const std::vector<char> m = Mask(DropoutKey{1, 2, 3}, p, l);
  for (int64_t lag : {int64_t{1}, int64_t{2}, l.row_len}) {
    int64_t both = 0, pairs = 0;
    for (int64_t i = 0; i + lag < l.size(); ++i) {
      if (lag < l.row_len && (i % l.row_len) + lag >= l.row_len) continue;
      both += m[i] && m[i + lag];
      ++pairs;
    }
    EXPECT_NEAR(static_cast<double>(both) / pairs, (1 - p) * (1 - p), 0.005)
        << "lag " << lag;
  }
}

TEST(Dropout, SameKeySameMask) {
  const Layout l{8, 64, 4, 11};
  const DropoutKey key{5, 6, 7};
  EXPECT_EQ(Mask(key, 0.3, l), Mask(key, 0.3, l));
  // The mask does not depend on T.
  std::vector<float> ones(l.size(), 1.f), y(l.size());
  DropoutForward(key, 0.3, l.rows, l.row_len, l.rows_per_example,
                 l.example_offset, ones.data(), y.data());
  const std::vector<char> m = Mask(key, 0.3, l);
  for (int64_t i = 0; i < l.size(); ++i) ASSERT_EQ(y[i] != 0.f, m[i] != 0);
}

// Changing any part of the key changes about 2 p (1 - p) of the decisions,
// as for independent masks (expected 0.5 at p = 0.5).
TEST(Dropout, DifferentKeysGiveIndependentMasks) {
  const Layout l{40, 500, 4, 0};
  const double p = 0.5;
  const DropoutKey base{77, 10, 20};
  const std::vector<char> m0 = Mask(base, p, l);
  EXPECT_NEAR(KeepRate(m0), 0.5, 0.02);
  for (const DropoutKey& k : {DropoutKey{78, 10, 20}, DropoutKey{77, 11, 20},
                              DropoutKey{77, 10, 21}, DropoutKey{0, 0, 0}}) {
    EXPECT_NEAR(FractionDifferent(m0, Mask(k, p, l)), 0.5, 0.02)
        << "seed " << k.seed << " step " << k.step << " site " << k.site;
  }
  // Another example index: shift the batch by one example.
  Layout shifted = l;
  shifted.example_offset = 1;
  EXPECT_NEAR(FractionDifferent(m0, Mask(base, p, shifted)), 0.5, 0.02);
  // Different rows of one example and of different examples differ.
  const std::vector<char> m = Mask(base, p, Layout{2, 4000, 1, 0});
  const std::vector<char> a(m.begin(), m.begin() + 4000);
  const std::vector<char> b(m.begin() + 4000, m.end());
  EXPECT_NEAR(FractionDifferent(a, b), 0.5, 0.05);
  const std::vector<char> m2 = Mask(base, p, Layout{2, 4000, 2, 0});
  const std::vector<char> c(m2.begin(), m2.begin() + 4000);
  const std::vector<char> d(m2.begin() + 4000, m2.end());
  EXPECT_NEAR(FractionDifferent(c, d), 0.5, 0.05);
}

// The rows of example e get the same mask wherever e sits in a batch, given
// its global index through example_offset (a worker's slice of a step).
TEST(Dropout, MaskIndependentOfBatchPosition) {
  const int64_t rpe = 3, len = 50, examples = 6;
  const DropoutKey key{2024, 3, 17};
  const double p = 0.4;
  const std::vector<char> whole =
      Mask(key, p, Layout{examples * rpe, len, rpe, 0});
  for (int64_t first = 0; first < examples; ++first) {
    for (int64_t count = 1; first + count <= examples; ++count) {
      const std::vector<char> part =
          Mask(key, p, Layout{count * rpe, len, rpe, first});
      const std::vector<char> want(whole.begin() + first * rpe * len,
                                   whole.begin() + (first + count) * rpe * len);
      ASSERT_EQ(part, want)
          << "examples [" << first << ", " << first + count << ")";
    }
  }
}

// Backward scales dy by the forward's mask; in place too.
template <typename T>
void CheckBackwardUsesForwardMask() {
  const Layout l{10, 33, 5, 2};
  const DropoutKey key{31, 41, 59};
  const double p = 0.35;
  std::vector<double> xd = RandomNormal(l.size(), 3);
  for (double& v : xd) v += v >= 0 ? 0.5 : -0.5;
  const std::vector<T> x = Cast<T>(xd);
  const std::vector<T> dy = Cast<T>(RandomNormal(l.size(), 4));
  std::vector<T> y(l.size()), dx(l.size());
  DropoutForward(key, p, l.rows, l.row_len, l.rows_per_example,
                 l.example_offset, x.data(), y.data());
  DropoutBackward(key, p, l.rows, l.row_len, l.rows_per_example,
                  l.example_offset, dy.data(), dx.data());
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  for (int64_t i = 0; i < l.size(); ++i) {
    ASSERT_EQ(dx[i], y[i] != T(0) ? dy[i] * scale : T(0)) << "i=" << i;
  }
  std::vector<T> inplace = dy;
  DropoutBackward(key, p, l.rows, l.row_len, l.rows_per_example,
                  l.example_offset, inplace.data(), inplace.data());
  EXPECT_EQ(inplace, dx);
}

TEST(Dropout, BackwardUsesForwardMaskFloat) {
  CheckBackwardUsesForwardMask<float>();
}
TEST(Dropout, BackwardUsesForwardMaskDouble) {
  CheckBackwardUsesForwardMask<double>();
}

// loss = sum(dy * dropout(x)); dx = backward(dy).
TEST(Dropout, BackwardMatchesFiniteDifferences) {
  const Layout l{6, 20, 2, 7};
  const DropoutKey key{1, 1, 1};
  const double p = 0.25;
  std::vector<double> x = RandomNormal(l.size(), 5);
  const std::vector<double> dy = RandomNormal(l.size(), 6);
  std::vector<double> y(l.size()), dx(l.size());
  DropoutBackward(key, p, l.rows, l.row_len, l.rows_per_example,
                  l.example_offset, dy.data(), dx.data());
  auto loss = [&]() {
    DropoutForward(key, p, l.rows, l.row_len, l.rows_per_example,
                   l.example_offset, x.data(), y.data());
    return Dot(dy, y.data());
  };
  CheckGradient("dx", x.data(), dx.data(), l.size(), loss, 1e-5);
}

TEST(Dropout, Threshold) {
  EXPECT_EQ(DropoutThreshold(0.0), 0u);
  EXPECT_EQ(DropoutThreshold(0.5), 0x80000000u);
  EXPECT_EQ(DropoutThreshold(0.25), 0x40000000u);
  EXPECT_EQ(DropoutThreshold(1.0), 0xFFFFFFFFu);
}

}  // namespace
}  // namespace bertps

// Softmax kernels: the masked attention softmax and the fused softmax
// cross-entropy against naive double references, their gradients against
// central differences, fully masked rows, large logits, zero weights,
// grad_scale 0 and the argmax/correct counts.
//   B batch, NH heads, S sequence; N rows of C classes.
#include "common/model/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/model/layer_test_util.h"
#include "gtest/gtest.h"

namespace bertps {
namespace {

using testing::Cast;
using testing::CheckGradient;
using testing::Dot;
using testing::ExpectAllClose;
using testing::ExpectAllFinite;
using testing::RandomNormal;
using testing::ToDouble;

// Softmax of one row in double: exp(x - max) / sum.
std::vector<double> NaiveSoftmaxRow(std::vector<double> x) {
  double mx = -std::numeric_limits<double>::infinity();
  for (double v : x) mx = std::max(mx, v);
  double sum = 0;
  for (double& v : x) {
    v = std::exp(v - mx);
    sum += v;
  }
  for (double& v : x) v /= sum;
  return x;
}

// scores (B, NH, S, S) -> probabilities, with (1 - mask) * -10000 added.
// `round` models a kernel that adds the bias in float: near 10000 a float
// keeps only ~3 decimals, which changes a fully masked row's probabilities by
// ~1e-4 relative (the same happens in any float32 BERT).
std::vector<double> NaiveMaskedSoftmax(const std::vector<double>& scores,
                                       const std::vector<int32_t>& mask,
                                       int64_t b, int64_t nh, int64_t s,
                                       bool round_to_float = false) {
  std::vector<double> out(scores.size());
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t r = 0; r < nh * s; ++r) {
      const int64_t off = (bi * nh * s + r) * s;
      std::vector<double> row(s);
      for (int64_t j = 0; j < s; ++j) {
        row[j] = scores[off + j] + (1 - mask[bi * s + j]) * -10000.0;
        if (round_to_float) row[j] = static_cast<float>(row[j]);
      }
      row = NaiveSoftmaxRow(row);
      for (int64_t j = 0; j < s; ++j) out[off + j] = row[j];
    }
  }
  return out;
}

// Batch 0 has no padding, 1 has two padded keys, 2 is fully masked.
const int64_t kB = 3, kNH = 2, kS = 6;
std::vector<int32_t> TestMask() {
  return {1, 1, 1, 1, 1, 1,  //
          1, 1, 1, 1, 0, 0,  //
          0, 0, 0, 0, 0, 0};
}

template <typename T>
void CheckMaskedForward(double stddev, double rtol) {
  const std::vector<int32_t> mask = TestMask();
  std::vector<T> scores = Cast<T>(RandomNormal(kB * kNH * kS * kS, 1, stddev));
  const std::vector<double> want =
      NaiveMaskedSoftmax(ToDouble(scores), mask, kB, kNH, kS, sizeof(T) == 4);
  MaskedSoftmaxForward(mask.data(), kB, kNH, kS, scores.data());
  ExpectAllClose(scores.data(), want, rtol, 1e-6, "probs");
  for (int64_t r = 0; r < kB * kNH * kS; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < kS; ++j) sum += scores[r * kS + j];
    EXPECT_NEAR(sum, 1.0, 10 * rtol) << "row " << r;
  }
}

TEST(MaskedSoftmaxForward, MatchesNaiveFloat) {
  CheckMaskedForward<float>(2.0, 1e-5);
}
TEST(MaskedSoftmaxForward, MatchesNaiveDouble) {
  CheckMaskedForward<double>(2.0, 1e-12);
}

// Padded keys get exactly zero probability (exp(-10000) underflows); a fully
// masked row is the softmax of its scores (the bias is a constant shift; in
// float, up to the rounding of score - 10000, ~1e-4 relative).
template <typename T>
void CheckPaddingAndFullyMasked(double rtol) {
  const std::vector<int32_t> mask = TestMask();
  const std::vector<double> raw = RandomNormal(kB * kNH * kS * kS, 2);
  std::vector<T> p = Cast<T>(raw);
  MaskedSoftmaxForward(mask.data(), kB, kNH, kS, p.data());
  ExpectAllFinite(p.data(), p.size(), "probs");
  for (int64_t r = 0; r < kNH * kS; ++r) {
    const int64_t row = (1 * kNH * kS + r) * kS;
    // 0 up to the underflow of exp (Eigen's exp clamps its argument, so a
    // subnormal can remain).
    EXPECT_LT(p[row + 4], std::numeric_limits<T>::min());
    EXPECT_LT(p[row + 5], std::numeric_limits<T>::min());
    const int64_t full = (2 * kNH * kS + r) * kS;
    std::vector<double> scores(kS);
    for (int64_t j = 0; j < kS; ++j) scores[j] = T(raw[full + j]);
    ExpectAllClose(p.data() + full, NaiveSoftmaxRow(scores), rtol, 1e-6,
                   "fully masked row");
  }
}

TEST(MaskedSoftmaxForward, PaddingAndFullyMaskedRowsFloat) {
  CheckPaddingAndFullyMasked<float>(2e-3);
}
TEST(MaskedSoftmaxForward, PaddingAndFullyMaskedRowsDouble) {
  CheckPaddingAndFullyMasked<double>(1e-11);
}

// Large logits (and large differences) neither overflow nor give NaN; rows
// still sum to 1 and keys far below the maximum get 0. Beyond ~1e11 in float
// (~1e20 in double) the additive -10000 is absorbed by rounding, so padding
// is no longer masked there: the exact comparison is only made below that.
template <typename T>
void CheckLargeLogits(double magnitude, bool mask_representable) {
  const int64_t b = 2, nh = 1, s = 4;
  const std::vector<int32_t> mask = {1, 1, 1, 0,  //
                                     0, 0, 0, 0};
  const T m = static_cast<T>(magnitude);
  std::vector<T> scores = {m,    -m,   T(0.5) * m, m,   //
                           -m,   m,    T(0),       -m,  //
                           m,    m,    -m,         m,   //
                           -m,   -m,   -m,         -m,  //
                           m,    -m,   T(3),       m,   //
                           -m,   -m,   -m,         -m,  //
                           m,    m,    m,          m,   //
                           T(1), T(2), T(3),       T(4)};
  const std::vector<double> want =
      NaiveMaskedSoftmax(ToDouble(scores), mask, b, nh, s, sizeof(T) == 4);
  const std::vector<T> in = scores;
  MaskedSoftmaxForward(mask.data(), b, nh, s, scores.data());
  ExpectAllFinite(scores.data(), scores.size(), "probs");
  for (int64_t r = 0; r < b * nh * s; ++r) {
    double sum = 0;
    T row_max = in[r * s];
    for (int64_t j = 0; j < s; ++j) row_max = std::max(row_max, in[r * s + j]);
    for (int64_t j = 0; j < s; ++j) {
      sum += scores[r * s + j];
      if (in[r * s + j] == -m && row_max > -m) {
        EXPECT_LT(scores[r * s + j], std::numeric_limits<T>::min())
            << "row " << r << " key " << j;
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-6) << "row " << r;
  }
  if (mask_representable) {
    ExpectAllClose(scores.data(), want, sizeof(T) == 4 ? 1e-5 : 1e-12, 1e-6,
                   "probs");
  }
}

TEST(MaskedSoftmaxForward, LargeLogits) {
  CheckLargeLogits<float>(1e4, true);
  CheckLargeLogits<float>(1e6, true);
  CheckLargeLogits<float>(1e30, false);
  CheckLargeLogits<float>(3e38, false);
  CheckLargeLogits<double>(1e4, true);
  CheckLargeLogits<double>(1e12, true);
  CheckLargeLogits<double>(1e300, false);
}

// loss = sum(dp * softmax(x)); SoftmaxBackward(p, dp) is its gradient.
TEST(SoftmaxBackward, MatchesFiniteDifferences) {
  const std::vector<int32_t> mask = TestMask();
  const int64_t n = kB * kNH * kS * kS;
  std::vector<double> x = RandomNormal(n, 3);
  const std::vector<double> dp = RandomNormal(n, 4);
  std::vector<double> p(n);
  auto loss = [&]() {
    p = x;
    MaskedSoftmaxForward(mask.data(), kB, kNH, kS, p.data());
    return Dot(dp, p.data());
  };
  loss();
  std::vector<double> ds(n);
  SoftmaxBackward(p.data(), kB * kNH * kS, kS, dp.data(), ds.data());
  CheckGradient("dscores", x.data(), ds.data(), n, loss, 1e-6);
}

// Float against double (and in place: ds aliases dp), against the formula
// ds = p * (dp - sum_j dp_j p_j).
TEST(SoftmaxBackward, FloatMatchesFormulaInPlace) {
  const int64_t rows = 7, c = 13;
  std::vector<double> pd(rows * c);
  const std::vector<double> x = RandomNormal(rows * c, 5, 2.0);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<double> row = NaiveSoftmaxRow(
        std::vector<double>(x.begin() + r * c, x.begin() + (r + 1) * c));
    std::copy(row.begin(), row.end(), pd.begin() + r * c);
  }
  const std::vector<float> p = Cast<float>(pd);
  std::vector<float> d = Cast<float>(RandomNormal(rows * c, 6));
  std::vector<double> want(rows * c);
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0;
    for (int64_t j = 0; j < c; ++j) dot += double(p[r * c + j]) * d[r * c + j];
    for (int64_t j = 0; j < c; ++j) {
      want[r * c + j] = double(p[r * c + j]) * (d[r * c + j] - dot);
    }
  }
  SoftmaxBackward(p.data(), rows, c, d.data(), d.data());
  ExpectAllClose(d.data(), want, 1e-5, 1e-3, "ds");
}

// Naive cross-entropy over rows of logits (N, C).
struct XentRef {
  double weighted_nll = 0, weight = 0;
  int64_t correct = 0;
  std::vector<int32_t> argmax;
  std::vector<double> grad;  // (N, C) for the given grad_scale
};
XentRef NaiveXent(const std::vector<double>& logits,
                  const std::vector<int32_t>& labels,
                  const std::vector<double>* weights, int64_t n, int64_t c,
                  double grad_scale) {
  XentRef r;
  r.grad.resize(n * c);
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<double> row(logits.begin() + i * c,
                                  logits.begin() + (i + 1) * c);
    int32_t best = 0;
    for (int64_t j = 1; j < c; ++j) {
      if (row[j] > row[best]) best = static_cast<int32_t>(j);
    }
    const double w = weights ? (*weights)[i] : 1.0;
    const std::vector<double> p = NaiveSoftmaxRow(row);
    // -log p(label) computed stably as log-sum-exp minus the label's logit.
    double mx = row[best], sum = 0;
    for (double v : row) sum += std::exp(v - mx);
    r.weighted_nll += w * (mx + std::log(sum) - row[labels[i]]);
    r.weight += w;
    r.correct += best == labels[i] && w > 0;
    r.argmax.push_back(best);
    for (int64_t j = 0; j < c; ++j) {
      r.grad[i * c + j] =
          (p[j] - (j == labels[i] ? 1.0 : 0.0)) * w * grad_scale;
    }
  }
  return r;
}

struct XentCase {
  int64_t n = 8, c = 5;
  std::vector<double> logits;
  std::vector<int32_t> labels;
  std::vector<double> weights;
};

// Rows with weight 0 (one of them right), weights above 1, a sure row.
XentCase TestCase() {
  XentCase t;
  t.logits = RandomNormal(t.n * t.c, 7, 2.0);
  t.labels = {0, 4, 2, 2, 1, 3, 0, 4};
  t.weights = {1, 0, 2.5, 1, 0, 0.5, 1, 1};
  auto set_best = [&](int64_t row, int32_t label) {
    t.logits[row * t.c + label] = 8.0;
  };
  set_best(0, 0);  // right, weight 1
  set_best(1, 4);  // right, weight 0: not counted
  set_best(2, 1);  // wrong
  set_best(7, 4);  // right
  return t;
}

template <typename T>
void CheckXentForward(bool with_weights, double grad_scale, double rtol) {
  const XentCase t = TestCase();
  std::vector<T> logits = Cast<T>(t.logits);
  const std::vector<T> weights = Cast<T>(t.weights);
  const XentRef want =
      NaiveXent(ToDouble(logits), t.labels, with_weights ? &t.weights : nullptr,
                t.n, t.c, grad_scale);
  std::vector<int32_t> argmax(t.n, -1);
  const XentResult got =
      SoftmaxCrossEntropy<T>(logits.data(), nullptr, t.labels.data(),
                             with_weights ? weights.data() : nullptr, t.n, t.c,
                             grad_scale, argmax.data());
  EXPECT_NEAR(got.weighted_nll, want.weighted_nll, rtol * want.weighted_nll);
  EXPECT_EQ(got.weight, want.weight);
  EXPECT_EQ(got.correct, want.correct);
  EXPECT_EQ(argmax, want.argmax);
  if (grad_scale != 0) {
    ExpectAllClose(logits.data(), want.grad, rtol, std::fabs(grad_scale),
                   "dlogits");
  }
}

TEST(SoftmaxCrossEntropy, MatchesNaiveFloat) {
  CheckXentForward<float>(true, 0.37, 1e-5);
  CheckXentForward<float>(false, 0.37, 1e-5);
  CheckXentForward<float>(true, 0.0, 1e-5);
}
TEST(SoftmaxCrossEntropy, MatchesNaiveDouble) {
  CheckXentForward<double>(true, 0.37, 1e-12);
  CheckXentForward<double>(false, 1.0, 1e-12);
  CheckXentForward<double>(true, 0.0, 1e-12);
}

TEST(SoftmaxCrossEntropy, CountsAndWeights) {
  const XentCase t = TestCase();
  const XentRef want = NaiveXent(t.logits, t.labels, &t.weights, t.n, t.c, 0.0);
  std::vector<double> logits = t.logits;
  std::vector<int32_t> argmax(t.n, -1);
  const XentResult r = SoftmaxCrossEntropy<double>(
      logits.data(), nullptr, t.labels.data(), t.weights.data(), t.n, t.c, 0.0,
      argmax.data());
  EXPECT_EQ(r.weight, 7.0);
  // Rows 0 and 7 are right with weight > 0; row 1 is right with weight 0.
  EXPECT_EQ(argmax[0], 0);
  EXPECT_EQ(argmax[1], 4);
  EXPECT_EQ(argmax[2], 1);
  EXPECT_EQ(argmax[7], 4);
  EXPECT_GE(r.correct, 2);
  EXPECT_EQ(r.correct, want.correct);
  // Without argmax nothing is counted; the loss is the same.
  logits = t.logits;
  const XentResult no_argmax =
      SoftmaxCrossEntropy<double>(logits.data(), nullptr, t.labels.data(),
                                  t.weights.data(), t.n, t.c, 0.0, nullptr);
  EXPECT_EQ(no_argmax.correct, 0);
  EXPECT_EQ(no_argmax.weighted_nll, r.weighted_nll);
  EXPECT_EQ(no_argmax.weight, r.weight);
  // Weight-0 rows add nothing to the loss and get a zero gradient.
  std::vector<double> one = {1.0, 2.0, -3.0, 0.5};
  const int32_t label = 1;
  const double w0 = 0;
  int32_t best = -1;
  const XentResult z = SoftmaxCrossEntropy<double>(one.data(), nullptr, &label,
                                                   &w0, 1, 4, 1.0, &best);
  EXPECT_EQ(z.weighted_nll, 0.0);
  EXPECT_EQ(z.weight, 0.0);
  EXPECT_EQ(z.correct, 0);
  EXPECT_EQ(best, 1);
  for (double g : one) EXPECT_EQ(g, 0.0);
}

// The first of equal maxima is the argmax.
TEST(SoftmaxCrossEntropy, ArgmaxTakesFirstMaximum) {
  std::vector<float> logits = {1, 3, 3, 0,  //
                               2, 2, 2, 2};
  const std::vector<int32_t> labels = {2, 0};
  std::vector<int32_t> argmax(2, -1);
  const XentResult r = SoftmaxCrossEntropy<float>(
      logits.data(), nullptr, labels.data(), nullptr, 2, 4, 0.0, argmax.data());
  EXPECT_EQ(argmax[0], 1);
  EXPECT_EQ(argmax[1], 0);
  EXPECT_EQ(r.correct, 1);
  EXPECT_NEAR(
      r.weighted_nll,
      -std::log(std::exp(3.0) / (2 * std::exp(3.0) + std::exp(1.0) + 1)) +
          std::log(4.0),
      1e-5);
}

// Non-finite logits (NaN weights, a diverged step) never send the argmax
// outside its row: a NaN counts as the maximum (numpy's argmax), +Inf is an
// ordinary maximum, and the loss comes out non-finite for the caller to
// refuse. The NaN rows come last, so a scan past the row would leave the
// buffer.
TEST(SoftmaxCrossEntropy, ArgmaxStaysInTheRowOnNonFiniteLogits) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (double grad_scale : {0.0, 0.5}) {
    std::vector<float> logits = {1,   inf, 2,   -inf,  //
                                 3,   1,   nan, 5,     //
                                 nan, nan, nan, nan};
    const std::vector<int32_t> labels = {1, 3, 0};
    std::vector<int32_t> argmax(3, -1);
    const XentResult r = SoftmaxCrossEntropy<float>(
        logits.data(), nullptr, labels.data(), nullptr, 3, 4, grad_scale,
        argmax.data());
    EXPECT_EQ(argmax[0], 1);
    EXPECT_EQ(argmax[1], 2);
    EXPECT_EQ(argmax[2], 0);
    EXPECT_FALSE(std::isfinite(r.weighted_nll));
    EXPECT_EQ(r.weight, 3.0);
  }
}

// A fused bias (C) gives the results of adding it to every row first.
template <typename T>
void CheckXentBias(double rtol) {
  const XentCase t = TestCase();
  const std::vector<T> bias = Cast<T>(RandomNormal(t.c, 8));
  std::vector<T> with_bias = Cast<T>(t.logits);
  std::vector<double> biased = ToDouble(with_bias);
  for (int64_t i = 0; i < t.n; ++i) {
    for (int64_t j = 0; j < t.c; ++j) biased[i * t.c + j] += bias[j];
  }
  const std::vector<T> weights = Cast<T>(t.weights);
  std::vector<int32_t> argmax(t.n);
  const XentResult r =
      SoftmaxCrossEntropy<T>(with_bias.data(), bias.data(), t.labels.data(),
                             weights.data(), t.n, t.c, 0.5, argmax.data());
  const XentRef want = NaiveXent(biased, t.labels, &t.weights, t.n, t.c, 0.5);
  EXPECT_NEAR(r.weighted_nll, want.weighted_nll, rtol * want.weighted_nll);
  EXPECT_EQ(r.correct, want.correct);
  EXPECT_EQ(argmax, want.argmax);
  ExpectAllClose(with_bias.data(), want.grad, rtol, 0.5, "dlogits");
}

TEST(SoftmaxCrossEntropy, FusedBiasFloat) { CheckXentBias<float>(1e-5); }
TEST(SoftmaxCrossEntropy, FusedBiasDouble) { CheckXentBias<double>(1e-12); }

// grad_scale * weighted_nll as a function of the logits; the kernel's
// in-place gradient with that grad_scale is its derivative.
TEST(SoftmaxCrossEntropy, GradientMatchesFiniteDifferences) {
  XentCase t = TestCase();
  for (bool with_weights : {true, false}) {
    const double gs = 0.37;
    const double* w = with_weights ? t.weights.data() : nullptr;
    std::vector<double> grad = t.logits;
    SoftmaxCrossEntropy<double>(grad.data(), nullptr, t.labels.data(), w, t.n,
                                t.c, gs, nullptr);
    std::vector<double> scratch;
    auto loss = [&]() {
      scratch = t.logits;
      return gs * SoftmaxCrossEntropy<double>(scratch.data(), nullptr,
                                              t.labels.data(), w, t.n, t.c, 0.0,
                                              nullptr)
                      .weighted_nll;
    };
    CheckGradient(with_weights ? "dlogits weighted" : "dlogits",
                  t.logits.data(), grad.data(), t.n * t.c, loss, 1e-5);
  }
}

// Logits far apart: finite loss and gradient, no NaN.
template <typename T>
void CheckXentLarge(double magnitude) {
  const T m = static_cast<T>(magnitude);
  std::vector<T> logits = {m,  -m, T(0),  //
                           -m, -m, -m,    //
                           m,  m,  -m};
  const std::vector<int32_t> labels = {1, 2, 0};
  const XentRef want = NaiveXent(ToDouble(logits), labels, nullptr, 3, 3, 1.0);
  std::vector<int32_t> argmax(3);
  const XentResult r = SoftmaxCrossEntropy<T>(
      logits.data(), nullptr, labels.data(), nullptr, 3, 3, 1.0, argmax.data());
  EXPECT_TRUE(std::isfinite(r.weighted_nll));
  EXPECT_NEAR(r.weighted_nll, want.weighted_nll, 1e-6 * want.weighted_nll);
  EXPECT_EQ(r.correct, 1);  // row 2: first of two maxima
  EXPECT_EQ(argmax[0], 0);
  ExpectAllFinite(logits.data(), logits.size(), "dlogits");
  ExpectAllClose(logits.data(), want.grad, 1e-5, 1e-6, "dlogits");
}

TEST(SoftmaxCrossEntropy, LargeLogits) {
  CheckXentLarge<float>(1e4);
  CheckXentLarge<float>(1e30);
  CheckXentLarge<double>(1e4);
  CheckXentLarge<double>(1e200);
}

// The online softmax over tiles gives the whole row's maximum, sum of
// exponentials and first maximum, for any split: ties across tiles (the
// first wins), a maximum in the last, partial tile, a NaN (the first NaN
// wins and the sum is NaN), a row of -inf but one value.
TEST(OnlineSoftmax, AnySplitGivesTheWholeRow) {
  std::vector<std::vector<double>> rows = {
      RandomNormal(37, 3, 3.0), RandomNormal(64, 4, 1.0),
      RandomNormal(100, 5, 10.0)};
  rows[1][5] = rows[1][40] = 9.0;  // a tie across tiles
  rows[2][99] = 50.0;              // the last column
  std::vector<double> with_nan = RandomNormal(30, 6, 1.0);
  with_nan[11] = with_nan[20] = std::nan("");
  std::vector<double> neg_inf(20, -std::numeric_limits<double>::infinity());
  neg_inf[13] = 2.0;
  rows.push_back(with_nan);
  rows.push_back(neg_inf);
  for (const auto& row : rows) {
    const int64_t c = static_cast<int64_t>(row.size());
    int64_t want_arg = 0;
    for (int64_t j = 0; j < c; ++j) {
      if (std::isnan(row[j])) {
        want_arg = j;
        break;
      }
      if (row[j] > row[want_arg]) want_arg = j;
    }
    const double mx = row[want_arg];
    double want_sum = 0;
    for (double v : row) want_sum += std::exp(v - mx);
    for (int64_t tile : {int64_t{1}, int64_t{7}, int64_t{16}, c}) {
      OnlineSoftmaxRow<float> f;
      OnlineSoftmaxRow<double> d;
      const std::vector<float> rf = Cast<float>(row);
      for (int64_t j0 = 0; j0 < c; j0 += tile) {
        const int64_t n = std::min(tile, c - j0);
        OnlineSoftmaxAdd(rf.data() + j0, n, j0, &f);
        OnlineSoftmaxAdd(row.data() + j0, n, j0, &d);
      }
      EXPECT_EQ(d.argmax, want_arg) << "tile " << tile;
      EXPECT_EQ(f.argmax, want_arg) << "tile " << tile;
      if (std::isnan(mx)) {
        EXPECT_TRUE(std::isnan(d.max) && std::isnan(d.sum));
        EXPECT_TRUE(std::isnan(f.max) && std::isnan(f.sum));
        continue;
      }
      EXPECT_EQ(d.max, mx);
      EXPECT_NEAR(d.sum, want_sum, 1e-12 * want_sum) << "tile " << tile;
      EXPECT_NEAR(f.sum, want_sum, 1e-5 * want_sum) << "tile " << tile;
    }
  }
}

}  // namespace
}  // namespace bertps

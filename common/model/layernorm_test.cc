// LayerNorm: forward against a naive double reference (float and double
// kernels), backward against central differences, accumulation into
// dgamma/dbeta, dx aliasing dy, and rows of zero variance.
//   N rows, C channels.
#include "common/model/layernorm.h"

#include <cmath>
#include <vector>

#include "common/model/layer_test_util.h"
#include "gtest/gtest.h"

namespace bertps {
namespace {

using testing::Cast;
using testing::CheckGradient;
using testing::Dot;
using testing::ExpectAllClose;
using testing::RandomNormal;
using testing::ToDouble;

struct Ref {
  std::vector<double> y;     // (N, C)
  std::vector<double> mean;  // (N)
  std::vector<double> rstd;  // (N)
};

// y = (x - mean) / sqrt(var + eps) * gamma + beta, biased variance.
Ref NaiveLayerNorm(const std::vector<double>& x,      // (N, C)
                   const std::vector<double>& gamma,  // (C)
                   const std::vector<double>& beta,   // (C)
                   int64_t n, int64_t c, double eps) {
  Ref r;
  r.y.resize(n * c);
  r.mean.resize(n);
  r.rstd.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    double m = 0;
    for (int64_t j = 0; j < c; ++j) m += x[i * c + j];
    m /= c;
    double var = 0;
    for (int64_t j = 0; j < c; ++j) {
      var += (x[i * c + j] - m) * (x[i * c + j] - m);
    }
    var /= c;
    const double rs = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < c; ++j) {
      r.y[i * c + j] = (x[i * c + j] - m) * rs * gamma[j] + beta[j];
    }
    r.mean[i] = m;
    r.rstd[i] = rs;
  }
  return r;
}

// Rows of different character: plain, offset mean, tiny and large scale.
std::vector<double> TestInput(int64_t n, int64_t c, uint64_t seed) {
  std::vector<double> x = RandomNormal(n * c, seed);
  for (int64_t j = 0; j < c; ++j) {
    if (n > 1) x[1 * c + j] = 4.0 + x[1 * c + j];  // mean/std ~ 4
    if (n > 2) x[2 * c + j] *= 1e-2;
    if (n > 3) x[3 * c + j] *= 30.0;
  }
  return x;
}

template <typename T>
void CheckForward(double rtol) {
  const int64_t n = 5, c = 37;
  const double eps = 1e-12;
  const std::vector<T> x = Cast<T>(TestInput(n, c, 1));
  const std::vector<T> gamma = Cast<T>(RandomNormal(c, 2, 0.5, 1.0));
  const std::vector<T> beta = Cast<T>(RandomNormal(c, 3, 0.5));
  std::vector<T> y(n * c), mean(n), rstd(n);
  LayerNormForward(x.data(), gamma.data(), beta.data(), n, c, eps, y.data(),
                   mean.data(), rstd.data());
  const Ref ref =
      NaiveLayerNorm(ToDouble(x), ToDouble(gamma), ToDouble(beta), n, c, eps);
  // Outputs are O(1): the check is relative to max(|y|, 1).
  ExpectAllClose(y.data(), ref.y, rtol, 1.0, "y");
  ExpectAllClose(mean.data(), ref.mean, rtol, 1.0, "mean");
  ExpectAllClose(rstd.data(), ref.rstd, rtol, 0.0, "rstd");
}

TEST(LayerNormForward, MatchesNaiveFloat) { CheckForward<float>(1e-5); }
TEST(LayerNormForward, MatchesNaiveDouble) { CheckForward<double>(1e-12); }

// Rows whose mean is large against their spread. Any float algorithm loses
// ~eps_float * |mean| / std here (the mean itself is only known to an ulp);
// the bound below allows 8 such ulps and would catch, e.g., a one-pass
// E[x^2] - E[x]^2 variance (error ~eps_float * (mean/std)^2).
TEST(LayerNormForward, LargeMeanRowsFloat) {
  const int64_t c = 768;
  for (double offset : {50.0, 1000.0}) {
    const std::vector<float> x = Cast<float>(RandomNormal(c, 5, 1.0, offset));
    const std::vector<float> gamma(c, 1.f), beta(c, 0.f);
    std::vector<float> y(c);
    float mean, rstd;
    LayerNormForward(x.data(), gamma.data(), beta.data(), 1, c, 1e-12, y.data(),
                     &mean, &rstd);
    const Ref ref = NaiveLayerNorm(ToDouble(x), ToDouble(gamma), ToDouble(beta),
                                   1, c, 1e-12);
    const double cond = std::fabs(ref.mean[0]) * ref.rstd[0];  // mean / std
    const double tol = 1e-5 + 8 * 6e-8 * cond;
    for (int64_t j = 0; j < c; ++j) {
      ASSERT_NEAR(y[j], ref.y[j], tol) << "offset " << offset << " j=" << j;
    }
    EXPECT_NEAR(rstd, ref.rstd[0], 1e-4 * ref.rstd[0]) << "offset " << offset;
  }
}

// loss = sum(dy * y(x, gamma, beta)); the backward of dy is its gradient.
void CheckBackward(const std::vector<double>& x0, int64_t n, int64_t c,
                   double eps) {
  std::vector<double> x = x0;
  std::vector<double> gamma = RandomNormal(c, 12, 0.5, 1.0);
  std::vector<double> beta = RandomNormal(c, 13, 0.5);
  const std::vector<double> dy = RandomNormal(n * c, 14);
  std::vector<double> y(n * c), mean(n), rstd(n);
  auto loss = [&]() {
    LayerNormForward(x.data(), gamma.data(), beta.data(), n, c, eps, y.data(),
                     mean.data(), rstd.data());
    return Dot(dy, y.data());
  };
  loss();
  std::vector<double> dx(n * c), dgamma(c, 0.0), dbeta(c, 0.0);
  LayerNormBackward(dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(),
                    n, c, dx.data(), dgamma.data(), dbeta.data());
  CheckGradient("dx", x.data(), dx.data(), n * c, loss, 1e-6);
  CheckGradient("dgamma", gamma.data(), dgamma.data(), c, loss, 1e-6);
  CheckGradient("dbeta", beta.data(), dbeta.data(), c, loss, 1e-6);
}

TEST(LayerNormBackward, MatchesFiniteDifferences) {
  const int64_t n = 4, c = 9;
  CheckBackward(TestInput(n, c, 11), n, c, 1e-12);
}

// A constant row has variance 0: y = beta, rstd = 1/sqrt(eps) and dx is
// rstd * (dy*gamma - mean(dy*gamma)). With a non-negligible eps the function
// is smooth there and the gradient still matches finite differences.
TEST(LayerNormBackward, ConstantRowMatchesFiniteDifferences) {
  const int64_t n = 3, c = 8;
  std::vector<double> x = TestInput(n, c, 21);
  for (int64_t j = 0; j < c; ++j) x[1 * c + j] = 0.37;
  CheckBackward(x, n, c, 1e-2);
}

// strict: the mean of a constant row is exactly its value (as when the
// statistics are accumulated in double).
template <typename T>
void CheckConstantRow(double eps, bool strict) {
  const int64_t n = 2, c = 7;
  std::vector<T> x(n * c);
  for (int64_t j = 0; j < c; ++j) {
    x[j] = T(0.3);           // row 0: constant, not exactly representable
    x[c + j] = T(-1250.75);  // row 1: constant, large
  }
  const std::vector<T> gamma = Cast<T>(RandomNormal(c, 2, 0.5, 1.0));
  const std::vector<T> beta = Cast<T>(RandomNormal(c, 3, 0.5));
  std::vector<T> y(n * c), mean(n), rstd(n);
  LayerNormForward(x.data(), gamma.data(), beta.data(), n, c, eps, y.data(),
                   mean.data(), rstd.data());
  const double rtol = sizeof(T) == 4 ? 1e-5 : 1e-12;
  const double want_rstd = 1.0 / std::sqrt(eps);
  // A float mean may be an ulp off (statistics in float), which moves
  // x - mean off 0 by ~6e-8 |x| and y off beta by that times rstd * gamma.
  const double ulp_effect =
      sizeof(T) == 4 ? 2 * 6e-8 * std::fabs(double(x[0])) * want_rstd * 2 : 0;
  std::vector<double> want_y(n * c), want_mean(n), want_rstds(n, want_rstd);
  for (int64_t i = 0; i < n; ++i) {
    want_mean[i] = x[i * c];
    for (int64_t j = 0; j < c; ++j) want_y[i * c + j] = beta[j];
  }
  ExpectAllClose(mean.data(), want_mean, strict ? 0.0 : 2.5e-7, 0.0, "mean");
  ExpectAllClose(rstd.data(), want_rstds, rtol, 0.0, "rstd");
  ExpectAllClose(y.data(), want_y, rtol,
                 strict ? 1.0 : std::max(1.0, ulp_effect / rtol), "y (= beta)");

  const std::vector<T> dy = Cast<T>(RandomNormal(n * c, 4));
  std::vector<T> dx(n * c), dgamma(c, T(0)), dbeta(c, T(0));
  LayerNormBackward(dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(),
                    n, c, dx.data(), dgamma.data(), dbeta.data());
  std::vector<double> want_dx(n * c), want_dbeta(c, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    double m = 0;
    for (int64_t j = 0; j < c; ++j) m += double(dy[i * c + j]) * gamma[j];
    m /= c;
    for (int64_t j = 0; j < c; ++j) {
      want_dx[i * c + j] = want_rstd * (double(dy[i * c + j]) * gamma[j] - m);
      want_dbeta[j] += dy[i * c + j];
    }
  }
  // dx is a difference of O(rstd) terms.
  ExpectAllClose(dx.data(), want_dx, rtol, want_rstd, "dx");
  // dgamma gets (x - mean) * rstd = 0 from constant rows.
  ExpectAllClose(dgamma.data(), std::vector<double>(c, 0.0), rtol,
                 strict ? 1.0 : std::max(1.0, 4 * ulp_effect / rtol), "dgamma");
  ExpectAllClose(dbeta.data(), want_dbeta, rtol, 1.0, "dbeta");
}

TEST(LayerNormEdge, ConstantRowFloatBertEps) {
  CheckConstantRow<float>(1e-5, false);
}
TEST(LayerNormEdge, ConstantRowDoubleTinyEps) {
  CheckConstantRow<double>(1e-12, true);
}
TEST(LayerNormEdge, ConstantRowDoubleLargeEps) {
  CheckConstantRow<double>(0.5, true);
}

// Known defect, reported: since the float path computes its statistics in
// float (layernorm.cc, "Two-pass statistics (vectorised pairwise sums)"), the
// mean of a constant float row can be an ulp off, the variance comes out
// ~1e-15 instead of 0, and with Hugging Face's eps = 1e-12 the error is
// amplified by rstd ~ 1e6: y differs from beta by ~0.03, rstd from
// 1/sqrt(eps) by 4e-4 and dx by up to 3% (with eps = 1e-5, y is off by
// ~1e-5). Enable once a constant row normalises to exactly beta again.
TEST(LayerNormEdge, ConstantRowFloatExact) {
  CheckConstantRow<float>(1e-12, true);
  CheckConstantRow<float>(1e-5, true);
}

// eps enters the result: the same row normalised with two eps values.
TEST(LayerNormEdge, EpsIsAddedToTheVariance) {
  const int64_t c = 4;
  const double x[c] = {1, 2, 3, 4};  // mean 2.5, variance 1.25
  const double gamma[c] = {1, 1, 1, 1}, beta[c] = {0, 0, 0, 0};
  for (double eps : {1e-12, 0.75}) {
    double y[c], mean, rstd;
    LayerNormForward(x, gamma, beta, 1, c, eps, y, &mean, &rstd);
    EXPECT_DOUBLE_EQ(mean, 2.5);
    EXPECT_NEAR(rstd, 1.0 / std::sqrt(1.25 + eps), 1e-15);
    EXPECT_NEAR(y[0], -1.5 / std::sqrt(1.25 + eps), 1e-15);
  }
}

// dgamma and dbeta add to what is there; dx is overwritten.
template <typename T>
void CheckAccumulates() {
  const int64_t n = 3, c = 6;
  const std::vector<T> x = Cast<T>(TestInput(n, c, 31));
  const std::vector<T> gamma = Cast<T>(RandomNormal(c, 32, 0.5, 1.0));
  const std::vector<T> beta = Cast<T>(RandomNormal(c, 33, 0.5));
  const std::vector<T> dy = Cast<T>(RandomNormal(n * c, 34));
  std::vector<T> y(n * c), mean(n), rstd(n);
  LayerNormForward(x.data(), gamma.data(), beta.data(), n, c, 1e-12, y.data(),
                   mean.data(), rstd.data());
  std::vector<T> dx0(n * c), dg0(c, T(0)), db0(c, T(0));
  LayerNormBackward(dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(),
                    n, c, dx0.data(), dg0.data(), db0.data());
  const std::vector<T> init_g = Cast<T>(RandomNormal(c, 35));
  const std::vector<T> init_b = Cast<T>(RandomNormal(c, 36));
  std::vector<T> dx(n * c, T(123)), dg = init_g, db = init_b;
  LayerNormBackward(dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(),
                    n, c, dx.data(), dg.data(), db.data());
  const double rtol = sizeof(T) == 4 ? 1e-6 : 1e-14;
  std::vector<double> want_g(c), want_b(c);
  for (int64_t j = 0; j < c; ++j) {
    want_g[j] = double(init_g[j]) + dg0[j];
    want_b[j] = double(init_b[j]) + db0[j];
  }
  ExpectAllClose(dg.data(), want_g, rtol, 1.0, "dgamma");
  ExpectAllClose(db.data(), want_b, rtol, 1.0, "dbeta");
  ExpectAllClose(dx.data(), ToDouble(dx0), 0, 0, "dx");
}

TEST(LayerNormBackward, AccumulatesFloat) { CheckAccumulates<float>(); }
TEST(LayerNormBackward, AccumulatesDouble) { CheckAccumulates<double>(); }

// dx may alias dy; the result is the same as out of place.
TEST(LayerNormBackward, DxMayAliasDy) {
  const int64_t n = 4, c = 10;
  const std::vector<float> x = Cast<float>(TestInput(n, c, 41));
  const std::vector<float> gamma = Cast<float>(RandomNormal(c, 42, 0.5, 1.0));
  const std::vector<float> beta = Cast<float>(RandomNormal(c, 43, 0.5));
  const std::vector<float> dy = Cast<float>(RandomNormal(n * c, 44));
  std::vector<float> y(n * c), mean(n), rstd(n);
  LayerNormForward(x.data(), gamma.data(), beta.data(), n, c, 1e-12, y.data(),
                   mean.data(), rstd.data());
  std::vector<float> dx(n * c), dg(c, 0.f), db(c, 0.f);
  LayerNormBackward(dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(),
                    n, c, dx.data(), dg.data(), db.data());
  std::vector<float> inplace = dy, dg2(c, 0.f), db2(c, 0.f);
  LayerNormBackward(inplace.data(), x.data(), gamma.data(), mean.data(),
                    rstd.data(), n, c, inplace.data(), dg2.data(), db2.data());
  EXPECT_EQ(inplace, dx);
  EXPECT_EQ(dg2, dg);
  EXPECT_EQ(db2, db);
}

// The float kernel's backward against the double one.
TEST(LayerNormBackward, FloatMatchesDouble) {
  const int64_t n = 5, c = 37;
  const std::vector<double> xd = ToDouble(Cast<float>(TestInput(n, c, 51)));
  const std::vector<double> gd = ToDouble(Cast<float>(RandomNormal(c, 52)));
  const std::vector<double> bd = ToDouble(Cast<float>(RandomNormal(c, 53)));
  const std::vector<double> dyd =
      ToDouble(Cast<float>(RandomNormal(n * c, 54)));
  std::vector<double> y(n * c), mean(n), rstd(n), dx(n * c), dg(c, 0.0),
      db(c, 0.0);
  LayerNormForward(xd.data(), gd.data(), bd.data(), n, c, 1e-12, y.data(),
                   mean.data(), rstd.data());
  LayerNormBackward(dyd.data(), xd.data(), gd.data(), mean.data(), rstd.data(),
                    n, c, dx.data(), dg.data(), db.data());
  const std::vector<float> xf = Cast<float>(xd), gf = Cast<float>(gd),
                           bf = Cast<float>(bd), dyf = Cast<float>(dyd);
  std::vector<float> yf(n * c), meanf(n), rstdf(n), dxf(n * c), dgf(c, 0.f),
      dbf(c, 0.f);
  LayerNormForward(xf.data(), gf.data(), bf.data(), n, c, 1e-12, yf.data(),
                   meanf.data(), rstdf.data());
  LayerNormBackward(dyf.data(), xf.data(), gf.data(), meanf.data(),
                    rstdf.data(), n, c, dxf.data(), dgf.data(), dbf.data());
  // dx of a row scales with its rstd: compare relative to each row's scale.
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> want(dx.begin() + i * c, dx.begin() + (i + 1) * c);
    ExpectAllClose(dxf.data() + i * c, want, 1e-4, testing::MaxAbs(want),
                   "dx row " + std::to_string(i));
  }
  ExpectAllClose(dgf.data(), dg, 1e-4, testing::MaxAbs(dg), "dgamma");
  ExpectAllClose(dbf.data(), db, 1e-5, testing::MaxAbs(db), "dbeta");
}

}  // namespace
}  // namespace bertps

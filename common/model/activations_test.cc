// GELU (erf and tanh forms) and tanh: forward against the formulas evaluated
// in double, backward against central differences, large |x| and 0.
//   N elements.
#include "common/model/activations.h"

#include <cmath>
#include <string>
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

const double kPi = 3.14159265358979323846;

// Hugging Face "gelu": 0.5 x (1 + erf(x / sqrt 2)).
double GeluErfRef(double x) {
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}

// "gelu_new": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
double GeluTanhRef(double x) {
  return 0.5 * x *
         (1 + std::tanh(std::sqrt(2 / kPi) * (x + 0.044715 * x * x * x)));
}

double GeluRef(Activation kind, double x) {
  return kind == Activation::kGeluErf ? GeluErfRef(x) : GeluTanhRef(x);
}

const char* Name(Activation kind) {
  return kind == Activation::kGeluErf ? "erf" : "tanh";
}

// Inputs over the interesting range, plus a few exact points.
std::vector<double> Inputs() {
  std::vector<double> x = RandomNormal(500, 1, 3.0);
  for (double v : {0.0, 1e-6, -1e-6, 0.5, -0.5, 1.0, -1.0, 2.5, -2.5, 5.0, -5.0,
                   8.0, -8.0}) {
    x.push_back(v);
  }
  return x;
}

// In float, 1 + erf(z) and 1 + tanh(u) cancel for negative x, so the result
// is accurate to ~1e-7 * |x| absolutely rather than relative to |y| there
// (Eigen's float tanh returns exactly -1 for u < ~-7.9, i.e. the tanh form
// gives 0 for x < ~-4.87 where the formula gives ~-5e-7).
template <typename T>
void CheckGeluForward(Activation kind, double rtol, double atol_per_x) {
  const std::vector<T> x = Cast<T>(Inputs());
  std::vector<T> y(x.size());
  GeluForward(kind, x.data(), x.size(), y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = GeluRef(kind, x[i]);
    const double tol =
        rtol * std::fabs(want) + atol_per_x * std::fabs(double(x[i]));
    EXPECT_NEAR(y[i], want, tol) << Name(kind) << " x=" << x[i];
  }
}

TEST(GeluForward, ErfMatchesFormulaFloat) {
  CheckGeluForward<float>(Activation::kGeluErf, 1e-5, 2e-7);
}
TEST(GeluForward, TanhMatchesFormulaFloat) {
  CheckGeluForward<float>(Activation::kGeluTanh, 1e-5, 2e-7);
}
TEST(GeluForward, ErfMatchesFormulaDouble) {
  CheckGeluForward<double>(Activation::kGeluErf, 1e-12, 1e-15);
}
TEST(GeluForward, TanhMatchesFormulaDouble) {
  CheckGeluForward<double>(Activation::kGeluTanh, 1e-12, 1e-15);
}

// The two forms are different functions, close to each other (|diff| is at
// most ~5e-4 near |x| ~ 2), and the kernel does not mix them up.
TEST(GeluForward, FormsDifferAsTheirFormulas) {
  const double x = 2.0;
  double ye, yt;
  GeluForward(Activation::kGeluErf, &x, 1, &ye);
  GeluForward(Activation::kGeluTanh, &x, 1, &yt);
  EXPECT_NEAR(ye, 1.9544997361036416, 1e-15);  // 0.5*2*(1+erf(sqrt 2))
  EXPECT_NEAR(yt, GeluTanhRef(2.0), 1e-15);
  EXPECT_GT(std::fabs(ye - yt), 1e-5);
}

void CheckGeluBackward(Activation kind) {
  std::vector<double> x = Inputs();
  const int64_t n = x.size();
  const std::vector<double> dy = RandomNormal(n, 2);
  std::vector<double> y(n), dx(n);
  GeluBackward(kind, dy.data(), x.data(), n, dx.data());
  auto loss = [&]() {
    GeluForward(kind, x.data(), n, y.data());
    return Dot(dy, y.data());
  };
  CheckGradient(std::string("gelu ") + Name(kind) + " dx", x.data(), dx.data(),
                n, loss, 1e-5);
}

TEST(GeluBackward, ErfMatchesFiniteDifferences) {
  CheckGeluBackward(Activation::kGeluErf);
}
TEST(GeluBackward, TanhMatchesFiniteDifferences) {
  CheckGeluBackward(Activation::kGeluTanh);
}

// The float backward against the double backward, and in place.
template <Activation kind>
void CheckGeluBackwardFloat() {
  const std::vector<double> xd = ToDouble(Cast<float>(Inputs()));
  const int64_t n = xd.size();
  const std::vector<double> dyd = ToDouble(Cast<float>(RandomNormal(n, 3)));
  std::vector<double> dxd(n);
  GeluBackward(kind, dyd.data(), xd.data(), n, dxd.data());
  const std::vector<float> xf = Cast<float>(xd);
  std::vector<float> dxf = Cast<float>(dyd);  // in place: dx aliases dy
  GeluBackward(kind, dxf.data(), xf.data(), n, dxf.data());
  // gelu' is O(1) in [-0.13, 1.13]; absolute floor |dy|.
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(dxf[i], dxd[i], 1e-5 * std::max(std::fabs(dyd[i]), 1e-3))
        << Name(kind) << " x=" << xd[i];
  }
}

TEST(GeluBackward, ErfFloatMatchesDoubleInPlace) {
  CheckGeluBackwardFloat<Activation::kGeluErf>();
}
TEST(GeluBackward, TanhFloatMatchesDoubleInPlace) {
  CheckGeluBackwardFloat<Activation::kGeluTanh>();
}

// gelu(0) = 0, gelu'(0) = 1/2; for x -> +inf gelu = x, gelu' = 1; for
// x -> -inf gelu = 0, gelu' = 0; never NaN or Inf.
template <typename T>
void CheckLimits(Activation kind, const std::vector<double>& big) {
  std::vector<T> x = {T(0)};
  for (double v : big) {
    x.push_back(T(v));
    x.push_back(T(-v));
  }
  const int64_t n = x.size();
  std::vector<T> y(n), dx(n), dy(n, T(1));
  GeluForward(kind, x.data(), n, y.data());
  GeluBackward(kind, dy.data(), x.data(), n, dx.data());
  EXPECT_EQ(y[0], T(0)) << Name(kind);
  EXPECT_EQ(dx[0], T(0.5)) << Name(kind);
  for (int64_t i = 1; i < n; ++i) {
    const std::string what =
        std::string(Name(kind)) + " x=" + std::to_string(double(x[i]));
    ASSERT_TRUE(std::isfinite(y[i])) << what << " y=" << y[i];
    ASSERT_TRUE(std::isfinite(dx[i])) << what << " dx=" << dx[i];
    if (x[i] > 0) {
      EXPECT_EQ(y[i], x[i]) << what;
      EXPECT_EQ(dx[i], T(1)) << what;
    } else {
      // Exactly 0 up to terms like x * exp(-x^2 / 2).
      EXPECT_NEAR(y[i], T(0), 1e-30) << what;
      EXPECT_NEAR(dx[i], T(0), 1e-30) << what;
    }
  }
}

const std::vector<double> kBig = {30, 100, 1e3, 1e5, 1e8};

TEST(GeluEdge, LimitsFloat) {
  CheckLimits<float>(Activation::kGeluErf, kBig);
  CheckLimits<float>(Activation::kGeluTanh, kBig);
}
TEST(GeluEdge, LimitsDouble) {
  CheckLimits<double>(Activation::kGeluErf, kBig);
  CheckLimits<double>(Activation::kGeluTanh, kBig);
}

// Known defect, reported: the tanh form's backward evaluates
// 0.5 x (1 - tanh^2 u) a (1 + 3 * 0.044715 x^2), and for |x| beyond
// ~1e19 (float) / ~1e154 (double) x^2 overflows, giving 0 * inf = NaN where
// the derivative is 1 (x > 0) or 0 (x < 0). Enable once fixed.
TEST(GeluEdge, TanhBackwardBeyondSquareOverflow) {
  CheckLimits<float>(Activation::kGeluTanh, {1e20, 1e30, 3e38});
  CheckLimits<double>(Activation::kGeluTanh, {1e160, 1e300});
}

template <typename T>
void CheckTanhForward(double rtol) {
  std::vector<double> in = Inputs();
  for (double v : {20.0, -20.0, 400.0, -400.0}) in.push_back(v);
  const std::vector<T> x = Cast<T>(in);
  std::vector<T> y(x.size());
  TanhForward(x.data(), x.size(), y.data());
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = std::tanh(double(x[i]));
  ExpectAllClose(y.data(), want, rtol, 0.0, "tanh");
}

TEST(TanhForward, MatchesStdTanhFloat) { CheckTanhForward<float>(1e-5); }
TEST(TanhForward, MatchesStdTanhDouble) { CheckTanhForward<double>(1e-12); }

TEST(TanhBackward, MatchesFiniteDifferences) {
  std::vector<double> x = Inputs();
  for (double& v : x) v /= 3;  // keep tanh' well away from 0
  const int64_t n = x.size();
  const std::vector<double> dy = RandomNormal(n, 4);
  std::vector<double> y(n), dx(n);
  TanhForward(x.data(), n, y.data());
  TanhBackward(dy.data(), y.data(), n, dx.data());
  auto loss = [&]() {
    TanhForward(x.data(), n, y.data());
    return Dot(dy, y.data());
  };
  CheckGradient("tanh dx", x.data(), dx.data(), n, loss, 1e-6);
}

TEST(TanhBackward, SaturatesAndWorksInPlace) {
  const std::vector<float> x = {0.f, 50.f, -50.f, 0.25f};
  std::vector<float> y(4);
  TanhForward(x.data(), 4, y.data());
  std::vector<float> d = {2.f, 2.f, 2.f, 2.f};
  TanhBackward(d.data(), y.data(), 4, d.data());
  EXPECT_EQ(y[1], 1.f);
  EXPECT_EQ(y[2], -1.f);
  EXPECT_EQ(d[0], 2.f);
  EXPECT_EQ(d[1], 0.f);
  EXPECT_EQ(d[2], 0.f);
  EXPECT_NEAR(d[3], 2 * (1 - std::tanh(0.25) * std::tanh(0.25)), 1e-6);
}

}  // namespace
}  // namespace bertps

// Helpers shared by the layer tests (layernorm_test.cc, softmax_test.cc, ...):
// random buffers, tolerance checks of a kernel against a double reference,
// and a central-difference gradient check.
// Test-only; nothing here is thread-safe or meant for production code.
#ifndef BERTPS_COMMON_MODEL_LAYER_TEST_UTIL_H_
#define BERTPS_COMMON_MODEL_LAYER_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace bertps {
namespace testing {

// n values drawn from N(mean, stddev), seeded.
inline std::vector<double> RandomNormal(int64_t n, uint64_t seed,
                                        double stddev = 1.0,
                                        double mean = 0.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(mean, stddev);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

// Rounds a double buffer to T (so a reference computed from the result sees
// exactly the values the kernel sees).
template <typename T>
std::vector<T> Cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}
template <typename T>
std::vector<double> ToDouble(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

inline double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Element-wise |got - want| <= rtol * max(|want|, floor); also no NaN/Inf.
// `floor` is the magnitude below which the check becomes absolute (values
// that come out of a cancellation are only accurate relative to the scale of
// their terms).
template <typename T>
void ExpectAllClose(const T* got, const std::vector<double>& want, double rtol,
                    double floor, const std::string& what) {
  int failures = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    const double tol = rtol * std::max(std::fabs(want[i]), floor);
    if (!std::isfinite(g) || !(std::fabs(g - want[i]) <= tol)) {
      ADD_FAILURE() << what << "[" << i << "]: got " << g << ", want "
                    << want[i] << " (tol " << tol << ")";
      if (++failures >= 10) return;
    }
  }
}

template <typename T>
void ExpectAllFinite(const T* v, int64_t n, const std::string& what) {
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(static_cast<double>(v[i])))
        << what << "[" << i << "] = " << v[i];
  }
}

// Central differences of `loss` with respect to every element of `param`
// (n values, perturbed in place and restored) against the analytic gradient
// `grad`. With h ~ 1e-6 the truncation error is O(h^2) and the rounding error
// O(1e-16 * |loss| / h), both far below the tolerance
// rtol * max|grad| + atol.
inline void CheckGradient(const std::string& what, double* param,
                          const double* grad, int64_t n,
                          const std::function<double()>& loss, double h = 1e-6,
                          double rtol = 1e-6, double atol = 1e-9) {
  double scale = 0;
  for (int64_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(grad[i]));
  int failures = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double saved = param[i];
    param[i] = saved + h;
    const double up = loss();
    param[i] = saved - h;
    const double down = loss();
    param[i] = saved;
    const double numeric = (up - down) / (2 * h);
    if (!(std::fabs(grad[i] - numeric) <= rtol * scale + atol)) {
      ADD_FAILURE() << what << "[" << i << "]: analytic " << grad[i]
                    << ", numeric " << numeric << " (scale " << scale << ")";
      if (++failures >= 10) return;
    }
  }
}

// sum_i a[i] * b[i] in double.
template <typename T>
double Dot(const std::vector<double>& a, const T* b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * static_cast<double>(b[i]);
  return s;
}

}  // namespace testing
}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_LAYER_TEST_UTIL_H_

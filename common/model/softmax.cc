#include "common/model/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "Eigen/Core"
#include "common/kernels/vecmath.h"

namespace bertps {
namespace {

template <typename T>
using Arr = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using CArr = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// sum exp(x - m), and x = exp(x - m) returning the new sum: floats on the
// dispatched kernels, doubles on Eigen's.
template <typename T>
T ExpShiftedSum(const T* x, int64_t n, T m) {
  if constexpr (std::is_same_v<T, float>) {
    return kernels::ExpShiftedSum(x, n, m);
  } else {
    return (CArr<T>(x, n) - m).exp().sum();
  }
}

template <typename T>
T ExpShiftedInPlace(T* x, int64_t n, T m) {
  if constexpr (std::is_same_v<T, float>) {
    return kernels::ExpShiftedInPlace(x, n, m);
  } else {
    Arr<T> a(x, n);
    a = (a - m).exp();
    return a.sum();
  }
}

// The index of the first maximum of row[0, c), as numpy's argmax: a NaN
// counts as larger than every number, so a row with a NaN gives its first
// NaN. Never reads outside the row, whatever the values.
template <typename T>
int64_t FirstArgMax(const T* row, int64_t c) {
  int64_t best = 0;
  if (std::isnan(row[0])) return 0;
  for (int64_t j = 1; j < c; ++j) {
    if (std::isnan(row[j])) return j;
    if (row[j] > row[best]) best = j;
  }
  return best;
}

}  // namespace

template <typename T>
void MaskedSoftmaxForward(const int32_t* mask, int64_t b, int64_t nh,
                          int64_t s, T* scores) {
  const int64_t rows = b * nh * s;
#pragma omp parallel
  {
    Eigen::Array<T, Eigen::Dynamic, 1> bias(s);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t bi = r / (nh * s);
      const int32_t* m = mask + bi * s;
      for (int64_t j = 0; j < s; ++j) bias[j] = m[j] ? T(0) : T(-10000);
      Arr<T> row(scores + r * s, s);
      row += bias;
      const T sum = ExpShiftedInPlace(row.data(), s, row.maxCoeff());
      row /= sum;
    }
  }
}

template <typename T>
void SoftmaxBackward(const T* p, int64_t rows, int64_t c, const T* dp, T* ds) {
#pragma omp parallel for schedule(static) if (rows * c > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    CArr<T> pr(p + r * c, c), dpr(dp + r * c, c);
    const T dot = (pr * dpr).sum();
    Arr<T>(ds + r * c, c) = pr * (dpr - dot);
  }
}

template <typename T>
XentResult SoftmaxCrossEntropy(T* logits, const T* bias,
                               const int32_t* labels, const T* weights,
                               int64_t n, int64_t c, double grad_scale,
                               int32_t* argmax) {
  std::vector<double> nll(n), wts(n);
  std::vector<char> hit(n);
#pragma omp parallel for schedule(static) if (n * c > 65536)
  for (int64_t r = 0; r < n; ++r) {
    Arr<T> row(logits + r * c, c);
    if (bias != nullptr) row += CArr<T>(bias, c);
    const int32_t label = labels[r];
    const double w = weights ? static_cast<double>(weights[r]) : 1.0;
    const T mx = row.maxCoeff();
    if (argmax != nullptr) {
      const int64_t best = FirstArgMax(row.data(), c);
      argmax[r] = static_cast<int32_t>(best);
      hit[r] = best == label && w > 0;
    } else {
      hit[r] = 0;
    }
    const T at_label = row[label];
    const double sum =
        static_cast<double>(ExpShiftedInPlace(row.data(), c, mx));
    const double logp = static_cast<double>(at_label - mx) - std::log(sum);
    nll[r] = -logp * w;
    wts[r] = w;
    if (grad_scale != 0.0) {
      const T scale = static_cast<T>(w * grad_scale / sum);
      row *= scale;
      row[label] -= static_cast<T>(w * grad_scale);
    }
  }
  XentResult res;
  for (int64_t r = 0; r < n; ++r) {
    res.weighted_nll += nll[r];
    res.weight += wts[r];
    res.correct += hit[r];
  }
  return res;
}

template <typename T>
void OnlineSoftmaxAdd(const T* x, int64_t n, int64_t j0,
                      OnlineSoftmaxRow<T>* row) {
  if (n <= 0) return;
  const int64_t best = FirstArgMax(x, n);
  const T mx = x[best];
  const T m0 = row->max;
  if (!std::isnan(m0) && (j0 == 0 || std::isnan(mx) || mx > m0)) {
    row->argmax = j0 + best;
  }
  const T m1 = std::isnan(mx) || std::isnan(m0) ? mx + m0 : std::max(m0, mx);
  // Only -inf so far: nothing to add (exp(-inf - -inf) would be NaN).
  if (m1 == -std::numeric_limits<T>::infinity()) return;
  const T s = ExpShiftedSum(x, n, m1);
  row->sum = row->sum * std::exp(m0 - m1) + s;
  row->max = m1;
}

template <typename T>
void ExpShiftedScaled(T* x, int64_t n, T m, T k) {
  if constexpr (std::is_same_v<T, float>) {
    kernels::ExpShiftedScaled(x, n, m, k);
  } else {
    Arr<T>(x, n) = (Arr<T>(x, n) - m).exp() * k;
  }
}

#define BERTPS_INSTANTIATE(T)                                                 \
  template void ExpShiftedScaled<T>(T*, int64_t, T, T);                      \
  template void MaskedSoftmaxForward<T>(const int32_t*, int64_t, int64_t,    \
                                        int64_t, T*);                        \
  template void SoftmaxBackward<T>(const T*, int64_t, int64_t, const T*, T*); \
  template XentResult SoftmaxCrossEntropy<T>(T*, const T*, const int32_t*,   \
                                             const T*, int64_t, int64_t,     \
                                             double, int32_t*);        \
  template void OnlineSoftmaxAdd<T>(const T*, int64_t, int64_t,              \
                                    OnlineSoftmaxRow<T>*);
BERTPS_INSTANTIATE(float)
BERTPS_INSTANTIATE(double)
#undef BERTPS_INSTANTIATE

}  // namespace bertps

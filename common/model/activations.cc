#include "common/model/activations.h"

#include <cmath>
#include <type_traits>

#include "Eigen/Core"
#include "unsupported/Eigen/SpecialFunctions"

namespace bertps {
namespace {

template <typename T>
using Arr = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using CArr = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kInvSqrt2 = 0.7071067811865476;     // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.3989422804014327;   // 1/sqrt(2 pi)
constexpr int64_t kChunk = 4096;

}  // namespace

template <typename T>
void GeluForward(Activation kind, const T* x, int64_t n, T* y) {
#pragma omp parallel for schedule(static) if (n > 262144)
  for (int64_t s = 0; s < n; s += kChunk) {
    const int64_t len = std::min(kChunk, n - s);
    CArr<T> xv(x + s, len);
    Arr<T> yv(y + s, len);
    if (kind == Activation::kGeluTanh) {
      const T a = static_cast<T>(kSqrt2OverPi);
      yv = T(0.5) * xv * (T(1) + (a * (xv + T(0.044715) * xv.cube())).tanh());
    } else if constexpr (std::is_same_v<T, float>) {
      // Eigen's vectorised erf (a few ulp in float).
      yv = T(0.5) * xv * (T(1) + (xv * static_cast<T>(kInvSqrt2)).erf());
    } else {
      for (int64_t i = 0; i < len; ++i) {
        yv[i] = T(0.5) * xv[i] *
                (T(1) + std::erf(xv[i] * static_cast<T>(kInvSqrt2)));
      }
    }
  }
}

template <typename T>
void GeluBackward(Activation kind, const T* dy, const T* x, int64_t n, T* dx) {
#pragma omp parallel for schedule(static) if (n > 262144)
  for (int64_t s = 0; s < n; s += kChunk) {
    const int64_t len = std::min(kChunk, n - s);
    CArr<T> xv(x + s, len), dyv(dy + s, len);
    Arr<T> dxv(dx + s, len);
    if (kind == Activation::kGeluTanh) {
      const T a = static_cast<T>(kSqrt2OverPi);
      // u = a (x + 0.044715 x^3); d/dx gelu = 0.5 (1 + tanh u)
      //   + 0.5 x (1 - tanh^2 u) a (1 + 3 * 0.044715 x^2)
      // dx holds tanh(u) first (dx may alias dy, so dy is read per element
      // before dx[i] is written).
      for (int64_t i = 0; i < len; ++i) {
        const T xi = xv[i];
        if (std::abs(xi) > T(30)) {  // the derivative is exactly 0 or 1 here
          dxv[i] = xi > 0 ? dyv[i] : T(0);
          continue;
        }
        const T t = std::tanh(a * (xi + T(0.044715) * xi * xi * xi));
        dxv[i] = dyv[i] * (T(0.5) * (T(1) + t) +
                           T(0.5) * xi * (T(1) - t * t) * a *
                               (T(1) + T(3 * 0.044715) * xi * xi));
      }
    } else if constexpr (std::is_same_v<T, float>) {
      dxv = dyv * (T(0.5) * (T(1) + (xv * static_cast<T>(kInvSqrt2)).erf()) +
                   xv * static_cast<T>(kInvSqrt2Pi) *
                       (T(-0.5) * xv.square()).exp());
    } else {
      for (int64_t i = 0; i < len; ++i) {
        const T xi = xv[i];
        const T cdf = T(0.5) * (T(1) + std::erf(xi * static_cast<T>(kInvSqrt2)));
        const T pdf = static_cast<T>(kInvSqrt2Pi) * std::exp(T(-0.5) * xi * xi);
        dxv[i] = dyv[i] * (cdf + xi * pdf);
      }
    }
  }
}

template <typename T>
void TanhForward(const T* x, int64_t n, T* y) {
  Arr<T>(y, n) = CArr<T>(x, n).tanh();
}

template <typename T>
void TanhBackward(const T* dy, const T* y, int64_t n, T* dx) {
  CArr<T> yv(y, n);
  Arr<T>(dx, n) = CArr<T>(dy, n) * (T(1) - yv.square());
}

#define BERTPS_INSTANTIATE(T)                                                 \
  template void GeluForward<T>(Activation, const T*, int64_t, T*);           \
  template void GeluBackward<T>(Activation, const T*, const T*, int64_t, T*); \
  template void TanhForward<T>(const T*, int64_t, T*);                       \
  template void TanhBackward<T>(const T*, const T*, int64_t, T*);
BERTPS_INSTANTIATE(float)
BERTPS_INSTANTIATE(double)
#undef BERTPS_INSTANTIATE

}  // namespace bertps

#include "common/model/layernorm.h"

#include <cmath>
#include <vector>

#include "Eigen/Core"

namespace bertps {

template <typename T>
using Row = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstRow = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

template <typename T>
void LayerNormForward(const T* x, const T* gamma, const T* beta, int64_t n,
                      int64_t c, double eps, T* y, T* mean, T* rstd) {
  ConstRow<T> g(gamma, c), b(beta, c);
#pragma omp parallel for schedule(static) if (n * c > 65536)
  for (int64_t i = 0; i < n; ++i) {
    ConstRow<T> xi(x + i * c, c);
    Row<T> yi(y + i * c, c);
    // Two-pass statistics (vectorised pairwise sums) with the mean corrected
    // by the residual mean, so that a constant row has exactly zero variance
    // (eps is as small as 1e-12).
    const T m0 = xi.sum() / static_cast<T>(c);
    const T m = m0 + (xi - m0).sum() / static_cast<T>(c);
    const T var = (xi - m).square().sum() / static_cast<T>(c);
    const T r = static_cast<T>(1.0 / std::sqrt(static_cast<double>(var) + eps));
    mean[i] = m;
    rstd[i] = r;
    yi = (xi - m) * r * g + b;
  }
}

template <typename T>
void LayerNormBackward(const T* dy, const T* x, const T* gamma, const T* mean,
                       const T* rstd, int64_t n, int64_t c, T* dx, T* dgamma,
                       T* dbeta) {
  ConstRow<T> g(gamma, c);
  Row<T> dg(dgamma, c), db(dbeta, c);
  // Parameter gradients: serial over rows (deterministic), vectorised over C.
  for (int64_t i = 0; i < n; ++i) {
    ConstRow<T> xi(x + i * c, c), dyi(dy + i * c, c);
    dg += dyi * (xi - mean[i]) * rstd[i];
    db += dyi;
  }
#pragma omp parallel for schedule(static) if (n * c > 65536)
  for (int64_t i = 0; i < n; ++i) {
    ConstRow<T> xi(x + i * c, c), dyi(dy + i * c, c);
    Row<T> dxi(dx + i * c, c);
    const T r = rstd[i];
    // xhat = (x - mean) * rstd; dxhat = dy * gamma
    // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
    T mean_dxhat = (dyi * g).sum() / c;
    T mean_dxhat_xhat = (dyi * g * (xi - mean[i]) * r).sum() / c;
    dxi = r * (dyi * g - mean_dxhat - (xi - mean[i]) * r * mean_dxhat_xhat);
  }
}

#define BERTPS_INSTANTIATE(T)                                               \
  template void LayerNormForward<T>(const T*, const T*, const T*, int64_t, \
                                    int64_t, double, T*, T*, T*);          \
  template void LayerNormBackward<T>(const T*, const T*, const T*,         \
                                     const T*, const T*, int64_t, int64_t, \
                                     T*, T*, T*);
BERTPS_INSTANTIATE(float)
BERTPS_INSTANTIATE(double)
#undef BERTPS_INSTANTIATE

}  // namespace bertps

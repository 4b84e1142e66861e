#include "common/model/linear.h"

#include "Eigen/Core"

namespace bertps {

template <typename T>
using Mat = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic,
                                    Eigen::RowMajor>>;
template <typename T>
using CMat = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic,
                                           Eigen::RowMajor>>;
template <typename T>
using CRow = Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>;
template <typename T>
using Row = Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>>;

template <typename T>
void LinearForward(kernels::MatmulEngine* mm, const T* x, const T* w,
                   const T* b, int64_t n, int64_t in, int64_t out, T* y) {
  kernels::Gemm(mm, kernels::GemmDims{1, n, out, in, false, true}, x, w, y);
  if (b != nullptr) Mat<T>(y, n, out).rowwise() += CRow<T>(b, out);
}

template <typename T>
void LinearBackward(kernels::MatmulEngine* mm, const T* dy, const T* x,
                    const T* w, int64_t n, int64_t in, int64_t out, T* dx,
                    bool accumulate_dx, T* dw, T* db) {
  if (dx != nullptr) {
    kernels::Gemm(mm, kernels::GemmDims{1, n, in, out, false, false}, dy, w,
                  dx, T(1), accumulate_dx);
  }
  kernels::Gemm(mm, kernels::GemmDims{1, out, in, n, true, false}, dy, x, dw,
                T(1), /*accumulate=*/true);
  if (db != nullptr) Row<T>(db, out) += CMat<T>(dy, n, out).colwise().sum();
}

#define BERTPS_INSTANTIATE(T)                                                 \
  template void LinearForward<T>(kernels::MatmulEngine*, const T*, const T*, \
                                 const T*, int64_t, int64_t, int64_t, T*);   \
  template void LinearBackward<T>(kernels::MatmulEngine*, const T*,          \
                                  const T*, const T*, int64_t, int64_t,      \
                                  int64_t, T*, bool, T*, T*);
BERTPS_INSTANTIATE(float)
BERTPS_INSTANTIATE(double)
#undef BERTPS_INSTANTIATE

}  // namespace bertps

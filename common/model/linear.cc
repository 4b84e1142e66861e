#include "common/model/linear.h"

#include <algorithm>

#include "Eigen/Core"

namespace bertps {

template <typename T>
using CRow = Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>;
template <typename T>
using Row = Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>>;

// Rows at a time on the compute threads: the element-wise work around the
// products is a seventh of a BERT-base step, serial unless split.
constexpr int64_t kParallelElements = 65536;

template <typename T>
void AddBiasToRows(const T* b, int64_t n, int64_t out, T* y) {
#pragma omp parallel for schedule(static) if (n * out > kParallelElements)
  for (int64_t r = 0; r < n; ++r) Row<T>(y + r * out, out) += CRow<T>(b, out);
}

// db += column sums of dy (n, out), each column summed over the rows in
// order in blocks of 64 columns: the same bits on any number of threads.
template <typename T>
void AddColumnSums(const T* dy, int64_t n, int64_t out, T* db) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (out + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n * out > kParallelElements)
  for (int64_t k = 0; k < blocks; ++k) {
    const int64_t j0 = k * kBlock, w = std::min(kBlock, out - j0);
    T acc[kBlock] = {};
    for (int64_t r = 0; r < n; ++r) {
      const T* row = dy + r * out + j0;
      for (int64_t j = 0; j < w; ++j) acc[j] += row[j];
    }
    for (int64_t j = 0; j < w; ++j) db[j0 + j] += acc[j];
  }
}

template <typename T>
void LinearForward(kernels::MatmulEngine* mm, const T* x, const T* w,
                   const T* b, int64_t n, int64_t in, int64_t out, T* y) {
  kernels::Gemm(mm, kernels::GemmDims{1, n, out, in, false, true}, x, w, y);
  if (b != nullptr) AddBiasToRows(b, n, out, y);
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
  if (db != nullptr) AddColumnSums(dy, n, out, db);
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

#include "common/model/linear.h"

#include <algorithm>
#include <vector>

#include "Eigen/Core"
#include "common/kernels/threads.h"

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

// db += column sums of dy (n, out): one run of columns per compute thread
// (at least 64), its rows added in order into an accumulator, each row's run
// read as one sequential stream (for the MLM head's 640 x 30,522 logits this
// is faster than Eigen's colwise sum even on one thread). Each column is
// summed over the rows in order whatever the split: the same bits on any
// number of threads.
template <typename T>
void AddColumnSums(const T* dy, int64_t n, int64_t out, T* db) {
  constexpr int64_t kMinBlock = 64, kStackBlock = 1024;
  const int64_t threads = n * out > kParallelElements ? kernels::NumThreads() : 1;
  const int64_t block = std::max(
      kMinBlock, ((out + threads - 1) / threads + 15) / 16 * 16);
  const int64_t blocks = (out + block - 1) / block;
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t k = 0; k < blocks; ++k) {
    const int64_t j0 = k * block, w = std::min(block, out - j0);
    alignas(64) T local[kStackBlock];
    std::vector<T> heap;
    if (w > kStackBlock) heap.resize(static_cast<size_t>(w));
    Row<T> a(w > kStackBlock ? heap.data() : local, w);
    a.setZero();
    for (int64_t r = 0; r < n; ++r) a += CRow<T>(dy + r * out + j0, w);
    Row<T>(db + j0, w) += a;
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
                                  int64_t, T*, bool, T*, T*);                \
  template void AddColumnSums<T>(const T*, int64_t, int64_t, T*);
BERTPS_INSTANTIATE(float)
BERTPS_INSTANTIATE(double)
#undef BERTPS_INSTANTIATE

}  // namespace bertps

#include "common/model/embedding.h"

#include <algorithm>

#include "Eigen/Core"
#include "common/kernels/threads.h"

namespace bertps {

template <typename T>
using Vec = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using CVec = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

template <typename T>
void EmbeddingForward(const int32_t* ids, const int32_t* types, int64_t b,
                      int64_t s, int64_t h, const T* word, const T* position,
                      const T* token_type, T* out) {
#pragma omp parallel for schedule(static) if (b * s * h > 65536)
  for (int64_t r = 0; r < b * s; ++r) {
    const int64_t pos = r % s;
    Vec<T>(out + r * h, h) = CVec<T>(word + int64_t{ids[r]} * h, h) +
                             CVec<T>(position + pos * h, h) +
                             CVec<T>(token_type + int64_t{types[r]} * h, h);
  }
}

template <typename T>
void EmbeddingBackward(const T* dout, const int32_t* ids, const int32_t* types,
                       int64_t b, int64_t s, int64_t h, T* dword,
                       T* dposition, T* dtoken_type) {
  // One run of hidden columns per compute thread, the rows in order in each:
  // every element sums its rows in the same order on any number of threads
  // (the same bits), no two threads write the same columns, and each table
  // row a token touches is fetched once in all (runs of whole cache lines).
  const int64_t lines = (h + 15) / 16;
  const int64_t blocks =
      b * s * h > 65536
          ? std::max<int64_t>(1, std::min<int64_t>(kernels::NumThreads(), lines))
          : 1;
  const int64_t per = (lines + blocks - 1) / blocks * 16;
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t k = 0; k < blocks; ++k) {
    const int64_t c0 = k * per, w = std::min(per, h - c0);
    if (w <= 0) continue;
    for (int64_t r = 0; r < b * s; ++r) {
      CVec<T> d(dout + r * h + c0, w);
      Vec<T>(dword + int64_t{ids[r]} * h + c0, w) += d;
      Vec<T>(dposition + (r % s) * h + c0, w) += d;
      Vec<T>(dtoken_type + int64_t{types[r]} * h + c0, w) += d;
    }
  }
}

#define BERTPS_INSTANTIATE(T)                                                \
  template void EmbeddingForward<T>(const int32_t*, const int32_t*, int64_t, \
                                    int64_t, int64_t, const T*, const T*,    \
                                    const T*, T*);                          \
  template void EmbeddingBackward<T>(const T*, const int32_t*,              \
                                     const int32_t*, int64_t, int64_t,      \
                                     int64_t, T*, T*, T*);
BERTPS_INSTANTIATE(float)
BERTPS_INSTANTIATE(double)
#undef BERTPS_INSTANTIATE

}  // namespace bertps

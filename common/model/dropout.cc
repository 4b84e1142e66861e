#include "common/model/dropout.h"

#include <cmath>
#include <cstring>

#include "common/splitmix.h"

namespace bertps {
namespace {

template <typename T>
void Apply(const DropoutKey& key, double p, int64_t rows, int64_t row_len,
           int64_t rows_per_example, int64_t example_offset, const T* x,
           T* y) {
  if (p <= 0.0) {
    if (x != y) std::memmove(y, x, sizeof(T) * rows * row_len);
    return;
  }
  const uint32_t threshold = DropoutThreshold(p);
  const T scale = static_cast<T>(1.0 / (1.0 - p));
#pragma omp parallel for schedule(static) if (rows * row_len > 262144)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t example = example_offset + r / rows_per_example;
    // Each row of an example gets its own sub-stream.
    const uint64_t row_key = SplitMix64(DropoutRowKey(key, example) +
                                        static_cast<uint64_t>(r % rows_per_example));
    const T* xr = x + r * row_len;
    T* yr = y + r * row_len;
    const uint32_t n = static_cast<uint32_t>(row_len);
    // Branch-free so that the compiler vectorises the hash.
    for (uint32_t i = 0; i < n; ++i) {
      const T m = DropoutKeep(row_key, i, threshold) ? scale : T(0);
      yr[i] = xr[i] * m;
    }
  }
}

}  // namespace

uint64_t DropoutRowKey(const DropoutKey& key, int64_t example) {
  uint64_t h = SplitMix64(key.seed);
  h = SplitMix64(h ^ static_cast<uint64_t>(key.step));
  h = SplitMix64(h ^ key.site);
  return SplitMix64(h ^ static_cast<uint64_t>(example));
}

uint32_t DropoutThreshold(double p) {
  double t = std::ldexp(p, 32);
  if (t >= 4294967295.0) return 0xFFFFFFFFu;
  return static_cast<uint32_t>(std::llround(t));
}

template <typename T>
void DropoutForward(const DropoutKey& key, double p, int64_t rows,
                    int64_t row_len, int64_t rows_per_example,
                    int64_t example_offset, const T* x, T* y) {
  Apply(key, p, rows, row_len, rows_per_example, example_offset, x, y);
}

template <typename T>
void DropoutBackward(const DropoutKey& key, double p, int64_t rows,
                     int64_t row_len, int64_t rows_per_example,
                     int64_t example_offset, const T* dy, T* dx) {
  // The mask is the same function; the gradient is scaled the same way.
  Apply(key, p, rows, row_len, rows_per_example, example_offset, dy, dx);
}

#define BERTPS_INSTANTIATE(T)                                                 \
  template void DropoutForward<T>(const DropoutKey&, double, int64_t,        \
                                  int64_t, int64_t, int64_t, const T*, T*);  \
  template void DropoutBackward<T>(const DropoutKey&, double, int64_t,       \
                                   int64_t, int64_t, int64_t, const T*, T*);
BERTPS_INSTANTIATE(float)
BERTPS_INSTANTIATE(double)
#undef BERTPS_INSTANTIATE

}  // namespace bertps

// Dropout with a counter-based random stream: the keep/drop decision of
// element i is a pure function of (seed, step, site, example, i), so a result
// never depends on which process computed an example or in which order. The
// backward pass recomputes the mask instead of storing it.
//
// `site` names the dropout location in the model (layer and kind, see
// DropoutSite); `example` is the example's global index in the step's batch.
// Thread-safety: pure functions.
#ifndef BERTPS_COMMON_MODEL_DROPOUT_H_
#define BERTPS_COMMON_MODEL_DROPOUT_H_

#include <cstdint>

namespace bertps {

struct DropoutKey {
  uint64_t seed = 0;
  int64_t step = 0;
  uint32_t site = 0;
};

// Per-row stream key for one example.
uint64_t DropoutRowKey(const DropoutKey& key, int64_t example);

// True when element i of the row with key `row_key` is kept.
inline bool DropoutKeep(uint64_t row_key, uint32_t i, uint32_t threshold) {
  uint32_t h = static_cast<uint32_t>(row_key) ^ (i * 0x9E3779B9u);
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  h ^= static_cast<uint32_t>(row_key >> 32);
  h *= 0x27D4EB2Fu;
  h ^= h >> 15;
  return h >= threshold;
}

// Threshold for drop probability p: element dropped when hash < threshold.
uint32_t DropoutThreshold(double p);

// y = x * keep / (1 - p) for rows of `row_len` elements; row r belongs to
// example example_offset + r / rows_per_example. dx likewise from dy. In place
// is allowed. p == 0 copies.
template <typename T>
void DropoutForward(const DropoutKey& key, double p, int64_t rows,
                    int64_t row_len, int64_t rows_per_example,
                    int64_t example_offset, const T* x, T* y);
template <typename T>
void DropoutBackward(const DropoutKey& key, double p, int64_t rows,
                     int64_t row_len, int64_t rows_per_example,
                     int64_t example_offset, const T* dy, T* dx);

}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_DROPOUT_H_

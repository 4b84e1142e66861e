// SplitMix64 (Steele, Lea and Flood, 2014): a 64-bit mixing function, the
// one the project's deterministic per-seed streams are built from (dropout
// masks, augmentation and data splits, shuffled epochs).
#ifndef BERTPS_COMMON_SPLITMIX_H_
#define BERTPS_COMMON_SPLITMIX_H_

#include <cstdint>

namespace bertps {

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace bertps

#endif  // BERTPS_COMMON_SPLITMIX_H_

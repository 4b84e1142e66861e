// The body of vecmath.h's functions, included once per build by
// vecmath_avx2.cc and vecmath_avx512.cc, each defining BERTPS_VECMATH_NS
// (the namespace of its functions) first. The AVX-512 build also renames
// Eigen's namespace before this is included, so that Eigen's inline
// functions compiled for AVX-512 are symbols of their own.
//
// Every element goes through Eigen's packet exp, from element 0 on in whole
// packets (the last one padded), and sums add packets in that order: the
// results depend on the values and their positions only, never on where
// the data lies. (Eigen's own assignment loops start at the first aligned
// element and take the elements before it one at a time through another
// exp, so their bits would move with the buffers from run to run.)
#ifndef BERTPS_VECMATH_NS
#error "define BERTPS_VECMATH_NS before including vecmath_impl.h"
#endif

#include <cstdint>

#include "Eigen/Core"

namespace bertps {
namespace kernels {
namespace BERTPS_VECMATH_NS {
namespace {

namespace ei = Eigen::internal;
using Packet = ei::packet_traits<float>::type;
constexpr int64_t kWidth = ei::unpacket_traits<Packet>::size;

// exp(x - m) * k of each lane.
inline Packet ExpPacket(const Packet& x, const Packet& m, const Packet& k) {
  return ei::pmul(ei::pexp(ei::psub(x, m)), k);
}

// Applies exp(x - m) * k to x[0, n): writes the results to y (when not
// null) and returns their sum (when sum is set).
inline float Run(const float* x, int64_t n, float m, float k, float* y,
                 bool sum) {
  const Packet pm = ei::pset1<Packet>(m), pk = ei::pset1<Packet>(k);
  Packet acc = ei::pset1<Packet>(0.0f);
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) {
    const Packet e = ExpPacket(ei::ploadu<Packet>(x + i), pm, pk);
    if (y != nullptr) ei::pstoreu(y + i, e);
    if (sum) acc = ei::padd(acc, e);
  }
  float total = sum ? ei::predux(acc) : 0.0f;
  if (i < n) {
    // The last, partial packet: padded with m (exp 1), the padding dropped.
    alignas(64) float t[kWidth];
    const int64_t left = n - i;
    for (int64_t j = 0; j < kWidth; ++j) t[j] = j < left ? x[i + j] : m;
    ei::pstore(t, ExpPacket(ei::pload<Packet>(t), pm, pk));
    for (int64_t j = 0; j < left; ++j) {
      if (y != nullptr) y[i + j] = t[j];
      if (sum) total += t[j];
    }
  }
  return total;
}

}  // namespace

float ExpShiftedSum(const float* x, int64_t n, float m) {
  return Run(x, n, m, 1.0f, nullptr, true);
}

float ExpShiftedInPlace(float* x, int64_t n, float m) {
  return Run(x, n, m, 1.0f, x, true);
}

void ExpShiftedScaled(float* x, int64_t n, float m, float k) {
  Run(x, n, m, k, x, false);
}

}  // namespace BERTPS_VECMATH_NS
}  // namespace kernels
}  // namespace bertps

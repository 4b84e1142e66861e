// LayerNorm over the last dimension, forward and backward side by side.
//   N rows, C channels; y = (x - mean) * rstd * gamma + beta
// Forward keeps mean and rstd (N) for the backward pass. Backward writes dx
// (overwrite) and adds into dgamma, dbeta.
// Thread-safety: pure functions over caller buffers; rows run in parallel
// (OpenMP) when the process allows more than one thread.
#ifndef BERTPS_COMMON_MODEL_LAYERNORM_H_
#define BERTPS_COMMON_MODEL_LAYERNORM_H_

#include <cstdint>

namespace bertps {

template <typename T>
void LayerNormForward(const T* x,      // (N, C)
                      const T* gamma,  // (C)
                      const T* beta,   // (C)
                      int64_t n, int64_t c, double eps,
                      T* y,      // (N, C)
                      T* mean,   // (N)
                      T* rstd);  // (N)

template <typename T>
void LayerNormBackward(const T* dy,     // (N, C)
                       const T* x,      // (N, C) forward input
                       const T* gamma,  // (C)
                       const T* mean, const T* rstd,  // (N)
                       int64_t n, int64_t c,
                       T* dx,       // (N, C) overwritten; may alias dy
                       T* dgamma,   // (C) accumulated
                       T* dbeta);   // (C) accumulated

}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_LAYERNORM_H_

// The core of multi-head self-attention (the projections are Linear layers):
//   q, k, v = split(qkv) into heads             (B, NH, S, D) each
//   p = softmax(q k^T / sqrt(D) + mask bias)      (B, NH, S, S)
//   ctx = dropout(p) v, heads merged back         (B, S, H)
// Forward keeps qkvt and p for the backward pass; dropout masks are
// recomputed from the counter-based stream (dropout.h).
// Thread-safety: pure functions over caller buffers.
#ifndef BERTPS_COMMON_MODEL_ATTENTION_H_
#define BERTPS_COMMON_MODEL_ATTENTION_H_

#include <cstdint>

#include "common/kernels/matmul.h"
#include "common/model/dropout.h"

namespace bertps {

struct AttentionDims {
  int64_t b = 0, s = 0, nh = 0, d = 0;
  int64_t h() const { return nh * d; }
};

struct AttentionDropout {
  DropoutKey key;
  double p = 0;  // 0: off
  int64_t example_offset = 0;
};

template <typename T>
void AttentionForward(kernels::MatmulEngine* mm, const AttentionDims& dims,
                      const AttentionDropout& drop,
                      const T* qkv,          // (B, S, 3H): [q | k | v] per row
                      const int32_t* mask,   // (B, S)
                      T* qkvt,               // (3, B, NH, S, D) kept
                      T* probs,              // (B, NH, S, S) kept
                      T* scratch_probs,      // (B, NH, S, S) dropped probs
                      T* ctxt,               // (B, NH, S, D) scratch
                      T* ctx);               // (B, S, H)

template <typename T>
void AttentionBackward(kernels::MatmulEngine* mm, const AttentionDims& dims,
                       const AttentionDropout& drop,
                       const T* dctx,          // (B, S, H)
                       const T* qkvt,          // (3, B, NH, S, D)
                       const T* probs,         // (B, NH, S, S)
                       T* scratch_probs,       // (B, NH, S, S)
                       T* scratch_dprobs,      // (B, NH, S, S)
                       T* dctxt,               // (B, NH, S, D) scratch
                       T* dqkvt,               // (3, B, NH, S, D) scratch
                       T* dqkv);               // (B, S, 3H) overwritten

}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_ATTENTION_H_

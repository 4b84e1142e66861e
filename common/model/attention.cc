#include "common/model/attention.h"

#include <cmath>
#include <cstring>

#include "common/model/softmax.h"

namespace bertps {
namespace {

// (B, S, 3, NH, D) <-> (3, B, NH, S, D). `parts` is 3 for qkv, 1 for ctx.
template <typename T>
void SplitHeads(const AttentionDims& dm, int parts, const T* src, T* dst) {
  const int64_t b = dm.b, s = dm.s, nh = dm.nh, d = dm.d;
#pragma omp parallel for collapse(2) schedule(static) if (b * s * nh * d > 65536)
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t si = 0; si < s; ++si) {
      const T* row = src + (bi * s + si) * parts * nh * d;
      for (int p = 0; p < parts; ++p) {
        for (int64_t hi = 0; hi < nh; ++hi) {
          std::memcpy(dst + (((p * b + bi) * nh + hi) * s + si) * d,
                      row + (p * nh + hi) * d, sizeof(T) * d);
        }
      }
    }
  }
}

template <typename T>
void MergeHeads(const AttentionDims& dm, int parts, const T* src, T* dst) {
  const int64_t b = dm.b, s = dm.s, nh = dm.nh, d = dm.d;
#pragma omp parallel for collapse(2) schedule(static) if (b * s * nh * d > 65536)
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t si = 0; si < s; ++si) {
      T* row = dst + (bi * s + si) * parts * nh * d;
      for (int p = 0; p < parts; ++p) {
        for (int64_t hi = 0; hi < nh; ++hi) {
          std::memcpy(row + (p * nh + hi) * d,
                      src + (((p * b + bi) * nh + hi) * s + si) * d,
                      sizeof(T) * d);
        }
      }
    }
  }
}

}  // namespace

template <typename T>
void AttentionForward(kernels::MatmulEngine* mm, const AttentionDims& dm,
                      const AttentionDropout& drop, const T* qkv,
                      const int32_t* mask, T* qkvt, T* probs,
                      T* scratch_probs, T* ctxt, T* ctx) {
  const int64_t bh = dm.b * dm.nh, s = dm.s, d = dm.d;
  const int64_t head_elems = dm.b * dm.nh * s * d;
  SplitHeads(dm, 3, qkv, qkvt);
  const T* q = qkvt;
  const T* k = qkvt + head_elems;
  const T* v = qkvt + 2 * head_elems;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  kernels::Gemm(mm, kernels::GemmDims{bh, s, s, d, false, true}, q, k, probs,
                scale);
  MaskedSoftmaxForward(mask, dm.b, dm.nh, s, probs);
  const T* p = probs;
  if (drop.p > 0) {
    DropoutForward(drop.key, drop.p, bh * s, s, dm.nh * s, drop.example_offset,
                   probs, scratch_probs);
    p = scratch_probs;
  }
  kernels::Gemm(mm, kernels::GemmDims{bh, s, d, s, false, false}, p, v, ctxt);
  MergeHeads(dm, 1, ctxt, ctx);
}

template <typename T>
void AttentionBackward(kernels::MatmulEngine* mm, const AttentionDims& dm,
                       const AttentionDropout& drop, const T* dctx,
                       const T* qkvt, const T* probs, T* scratch_probs,
                       T* scratch_dprobs, T* dctxt, T* dqkvt, T* dqkv) {
  const int64_t bh = dm.b * dm.nh, s = dm.s, d = dm.d;
  const int64_t head_elems = dm.b * dm.nh * s * d;
  const T* q = qkvt;
  const T* k = qkvt + head_elems;
  const T* v = qkvt + 2 * head_elems;
  T* dq = dqkvt;
  T* dk = dqkvt + head_elems;
  T* dv = dqkvt + 2 * head_elems;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));

  SplitHeads(dm, 1, dctx, dctxt);
  const T* p = probs;
  if (drop.p > 0) {
    DropoutForward(drop.key, drop.p, bh * s, s, dm.nh * s, drop.example_offset,
                   probs, scratch_probs);
    p = scratch_probs;
  }
  // dv = p_drop^T dctx; dp_drop = dctx v^T
  kernels::Gemm(mm, kernels::GemmDims{bh, s, d, s, true, false}, p, dctxt, dv);
  kernels::Gemm(mm, kernels::GemmDims{bh, s, s, d, false, true}, dctxt, v,
                scratch_dprobs);
  if (drop.p > 0) {
    DropoutBackward(drop.key, drop.p, bh * s, s, dm.nh * s,
                    drop.example_offset, scratch_dprobs, scratch_dprobs);
  }
  SoftmaxBackward(probs, bh * s, s, scratch_dprobs, scratch_dprobs);
  // scores = scale * q k^T: dq = scale * ds k; dk = scale * ds^T q
  kernels::Gemm(mm, kernels::GemmDims{bh, s, d, s, false, false},
                scratch_dprobs, k, dq, scale);
  kernels::Gemm(mm, kernels::GemmDims{bh, s, d, s, true, false},
                scratch_dprobs, q, dk, scale);
  MergeHeads(dm, 3, dqkvt, dqkv);
}

#define BERTPS_INSTANTIATE(T)                                                 \
  template void AttentionForward<T>(kernels::MatmulEngine*,                  \
                                    const AttentionDims&,                    \
                                    const AttentionDropout&, const T*,       \
                                    const int32_t*, T*, T*, T*, T*, T*);     \
  template void AttentionBackward<T>(kernels::MatmulEngine*,                 \
                                     const AttentionDims&,                   \
                                     const AttentionDropout&, const T*,      \
                                     const T*, const T*, T*, T*, T*, T*, T*);
BERTPS_INSTANTIATE(float)
BERTPS_INSTANTIATE(double)
#undef BERTPS_INSTANTIATE

}  // namespace bertps

#include "common/optim/slice_update.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace bertps {
namespace optim {
namespace {

// Correctly rounded element-wise sqrt. Eigen's own packet sqrt (with its
// default EIGEN_FAST_MATH) is rsqrt plus one Newton step: not IEEE, and not
// equal to its scalar path, so results would depend on how a buffer's
// alignment splits it into packets and scalar tails (and so on how a tensor
// is sliced across shards).
struct ExactSqrt {
  float operator()(float x) const { return std::sqrt(x); }
#if defined(__SSE2__)
  __m128 packetOp(__m128 x) const { return _mm_sqrt_ps(x); }
#endif
#if defined(__AVX__)
  __m256 packetOp(__m256 x) const { return _mm256_sqrt_ps(x); }
#endif
#if defined(__AVX512F__)
  __m512 packetOp(__m512 x) const { return _mm512_sqrt_ps(x); }
#endif
};

}  // namespace
}  // namespace optim
}  // namespace bertps

namespace Eigen {
namespace internal {
template <>
struct functor_traits<bertps::optim::ExactSqrt> {
  enum {
    Cost = 5 * NumTraits<float>::MulCost,
#if defined(__SSE2__)
    PacketAccess = true
#else
    PacketAccess = false
#endif
  };
};
}  // namespace internal
}  // namespace Eigen

namespace bertps {
namespace optim {
namespace {

using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;

// Elements per chunk: the five streams of a chunk (param, grad, two state
// slots, update) stay within L1/L2 while the norms are taken.
constexpr int64_t kChunk = 2048;

// Per-step scalars, each rounded to float once.
struct Coeffs {
  float b1, one_minus_b1;  // Adam family
  float b2, one_minus_b2;
  float eps;
  float bc1;       // 1 - b1^t (AdamW, LAMB)
  float bc2_sqrt;  // sqrt(1 - b2^t) (AdamW, LAMB)
  float wd;        // weight decay rate
  float momentum;  // SGD
};

Coeffs MakeCoeffs(const OptimizerConfig& c, int64_t step) {
  const double t = static_cast<double>(step) + 1.0;
  Coeffs k;
  k.b1 = static_cast<float>(c.beta1);
  k.one_minus_b1 = static_cast<float>(1.0 - c.beta1);
  k.b2 = static_cast<float>(c.beta2);
  k.one_minus_b2 = static_cast<float>(1.0 - c.beta2);
  k.eps = static_cast<float>(c.epsilon);
  k.bc1 = static_cast<float>(1.0 - std::pow(c.beta1, t));
  k.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(c.beta2, t)));
  k.wd = static_cast<float>(c.weight_decay);
  k.momentum = static_cast<float>(c.momentum);
  return k;
}

bool WantsNorms(const OptimizerConfig& c, bool decay) {
  return c.kind == OptimizerKind::kLamb &&
         (decay || !c.lamb_skip_adaptation_without_decay);
}

// Phase 1 over one chunk. p, g, u: (n); s0, s1: the chunk's part of state
// slots 0 and 1 (n each; s1 unused by SGD, both unused without state).
PartialNorms ComputeChunk(const OptimizerConfig& c, const Coeffs& k, bool decay,
                          bool want_norms, const float* p_ptr,
                          const float* g_ptr, float* s0, float* s1, float scale,
                          float* u_ptr, int64_t n) {
  ConstArrayMap p(p_ptr, n);
  ConstArrayMap graw(g_ptr, n);
  ArrayMap u(u_ptr, n);
  const auto g = graw * scale;  // the clipped gradient (lazy expression)
  switch (c.kind) {
    case OptimizerKind::kAdamWeightDecay: {
      // TensorFlow order: b1*m + (1-b1)*g; b2*v + (1-b2)*square(g).
      ArrayMap m(s0, n), v(s1, n);
      m = k.b1 * m + k.one_minus_b1 * g;
      v = k.b2 * v + k.one_minus_b2 * g.square();
      if (decay) {
        u = m / (v.unaryExpr(ExactSqrt()) + k.eps) + k.wd * p;
      } else {
        u = m / (v.unaryExpr(ExactSqrt()) + k.eps);
      }
      break;
    }
    case OptimizerKind::kAdamW:
    case OptimizerKind::kLamb: {
      // PyTorch order: m*b1 + (1-b1)*g; v*b2 + ((1-b2)*g)*g;
      // denominator sqrt(v)/sqrt(1-b2^t) + eps.
      ArrayMap m(s0, n), v(s1, n);
      m = m * k.b1 + k.one_minus_b1 * g;
      v = v * k.b2 + (k.one_minus_b2 * g) * g;
      if (c.kind == OptimizerKind::kLamb && decay) {
        u = (m / k.bc1) / (v.unaryExpr(ExactSqrt()) / k.bc2_sqrt + k.eps) +
            k.wd * p;
      } else {
        u = (m / k.bc1) / (v.unaryExpr(ExactSqrt()) / k.bc2_sqrt + k.eps);
      }
      break;
    }
    case OptimizerKind::kSgd: {
      // PyTorch order: d = g + wd*p; buf = buf*momentum + d;
      // nesterov: d + momentum*buf.
      if (k.momentum > 0) {
        ArrayMap buf(s0, n);
        if (decay) {
          buf = buf * k.momentum + (g + k.wd * p);
          if (c.nesterov) {
            u = (g + k.wd * p) + k.momentum * buf;
          } else {
            u = buf;
          }
        } else {
          buf = buf * k.momentum + g;
          if (c.nesterov) {
            u = g + k.momentum * buf;
          } else {
            u = buf;
          }
        }
      } else if (decay) {
        u = g + k.wd * p;
      } else {
        u = g;
      }
      break;
    }
  }
  PartialNorms norms;
  if (want_norms) {
    norms.param_sq = p.cast<double>().square().sum();
    norms.update_sq = u.cast<double>().square().sum();
  }
  return norms;
}

// Phase 2 over one chunk. p, u: (n). lr_ratio = lr * ratio.
void ApplyChunk(const OptimizerConfig& c, bool decay, float lr_ratio,
                float decay_factor, float* p_ptr, const float* u_ptr,
                int64_t n) {
  ArrayMap p(p_ptr, n);
  ConstArrayMap u(u_ptr, n);
  if (c.kind == OptimizerKind::kAdamW && decay) {
    p = p * decay_factor - lr_ratio * u;
  } else {
    p = p - lr_ratio * u;
  }
}

// lr * ratio and AdamW's decoupled decay factor 1 - lr * wd, as floats.
void Phase2Scalars(const OptimizerConfig& c, float lr, float ratio,
                   float* lr_ratio, float* decay_factor) {
  *lr_ratio = ratio == 1.0f ? lr
                            : static_cast<float>(static_cast<double>(lr) *
                                                 static_cast<double>(ratio));
  *decay_factor =
      static_cast<float>(1.0 - static_cast<double>(lr) * c.weight_decay);
}

}  // namespace

// Both passes run at memory speed with a fixed order of operations: 16
// lanes (element i goes to lane i % 16, from the buffer's start whatever its
// alignment), the lanes added in a fixed tree, then the tail in order. The
// vector and the scalar code do the same IEEE operations, so the bits never
// depend on the machine's vector width or on where the buffer lies.
static int64_t SlotStride(const Slice& s) { return s.slot_stride > 0 ? s.slot_stride : s.n; }

double GradSquaredSum(const float* grad, int64_t n) {
  if (n <= 0) return 0.0;
  constexpr int kLanes = 16;
  const int64_t body = n - n % kLanes;
  alignas(32) double lane[kLanes] = {};
#if defined(__AVX2__)
  __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < body; i += kLanes) {
    const __m256 lo = _mm256_loadu_ps(grad + i);
    const __m256 hi = _mm256_loadu_ps(grad + i + 8);
    const __m256d d0 = _mm256_cvtps_pd(_mm256_castps256_ps128(lo));
    const __m256d d1 = _mm256_cvtps_pd(_mm256_extractf128_ps(lo, 1));
    const __m256d d2 = _mm256_cvtps_pd(_mm256_castps256_ps128(hi));
    const __m256d d3 = _mm256_cvtps_pd(_mm256_extractf128_ps(hi, 1));
    // Multiply then add (no fused multiply-add, as in the scalar code).
    a0 = _mm256_add_pd(a0, _mm256_mul_pd(d0, d0));
    a1 = _mm256_add_pd(a1, _mm256_mul_pd(d1, d1));
    a2 = _mm256_add_pd(a2, _mm256_mul_pd(d2, d2));
    a3 = _mm256_add_pd(a3, _mm256_mul_pd(d3, d3));
  }
  _mm256_store_pd(lane, a0);
  _mm256_store_pd(lane + 4, a1);
  _mm256_store_pd(lane + 8, a2);
  _mm256_store_pd(lane + 12, a3);
#else
  for (int64_t i = 0; i < body; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double d = grad[i + j];
      const double sq = d * d;
      lane[j] = lane[j] + sq;
    }
  }
#endif
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int j = 0; j < width; ++j) lane[j] = lane[j] + lane[j + width];
  }
  double sum = lane[0];
  for (int64_t i = body; i < n; ++i) {
    const double d = grad[i];
    sum += d * d;
  }
  return sum;
}

bool AllFinite(const float* x, int64_t n) {
  if (n <= 0) return true;
  // x * 0 is 0 for a finite x and NaN for Inf or NaN; NaN survives adding.
  int64_t i = 0;
#if defined(__AVX2__)
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const __m256 zero = _mm256_setzero_ps();
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_mul_ps(_mm256_loadu_ps(x + i), zero));
    a1 = _mm256_add_ps(a1, _mm256_mul_ps(_mm256_loadu_ps(x + i + 8), zero));
    a2 = _mm256_add_ps(a2, _mm256_mul_ps(_mm256_loadu_ps(x + i + 16), zero));
    a3 = _mm256_add_ps(a3, _mm256_mul_ps(_mm256_loadu_ps(x + i + 24), zero));
  }
  const __m256 a = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  // Any NaN lane compares unordered with itself.
  if (_mm256_movemask_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q)) != 0) return false;
#endif
  float acc = 0.0f;
  for (; i < n; ++i) acc += x[i] * 0.0f;
  return acc == 0.0f;
}

bool CopyAllFinite(float* dst, const void* src, int64_t n, bool stream) {
  if (n <= 0) return true;
  const char* in = static_cast<const char*>(src);
  int64_t i = 0;
  bool ok = true;
#if defined(__AVX2__)
  if (stream) {
    // Up to dst's first 32-byte boundary as usual; streaming stores need it.
    while (i < n && (reinterpret_cast<uintptr_t>(dst + i) & 31) != 0) ++i;
    if (i > 0) ok = CopyAllFinite(dst, in, i, /*stream=*/false);
  }
  // As AllFinite: x * 0 is NaN exactly for a NaN or Inf x.
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const __m256 zero = _mm256_setzero_ps();
  for (; i + 32 <= n; i += 32) {
    const char* p = in + 4 * i;
    const __m256 x0 = _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    const __m256 x1 = _mm256_loadu_ps(reinterpret_cast<const float*>(p + 32));
    const __m256 x2 = _mm256_loadu_ps(reinterpret_cast<const float*>(p + 64));
    const __m256 x3 = _mm256_loadu_ps(reinterpret_cast<const float*>(p + 96));
    if (stream) {
      _mm256_stream_ps(dst + i, x0);
      _mm256_stream_ps(dst + i + 8, x1);
      _mm256_stream_ps(dst + i + 16, x2);
      _mm256_stream_ps(dst + i + 24, x3);
    } else {
      _mm256_storeu_ps(dst + i, x0);
      _mm256_storeu_ps(dst + i + 8, x1);
      _mm256_storeu_ps(dst + i + 16, x2);
      _mm256_storeu_ps(dst + i + 24, x3);
    }
    a0 = _mm256_add_ps(a0, _mm256_mul_ps(x0, zero));
    a1 = _mm256_add_ps(a1, _mm256_mul_ps(x1, zero));
    a2 = _mm256_add_ps(a2, _mm256_mul_ps(x2, zero));
    a3 = _mm256_add_ps(a3, _mm256_mul_ps(x3, zero));
  }
  // Streaming stores are weakly ordered: fenced before dst is handed on.
  if (stream) _mm_sfence();
  const __m256 a = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  ok = _mm256_movemask_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q)) == 0 && ok;
#else
  (void)stream;
#endif
  if (i < n) {
    std::memcpy(dst + i, in + 4 * i, sizeof(float) * (n - i));
    ok = AllFinite(dst + i, n - i) && ok;
  }
  return ok;
}

float ClipScale(const OptimizerConfig& config, double global_norm) {
  if (config.clip_norm <= 0 || global_norm <= config.clip_norm) return 1.0f;
  return static_cast<float>(config.clip_norm / global_norm);
}

bool NeedsTrustRatio(OptimizerKind kind) {
  return kind == OptimizerKind::kLamb;
}

PartialNorms ComputeUpdate(const OptimizerConfig& config, int64_t step,
                           const Slice& slice, float grad_scale,
                           float* update) {
  const Coeffs k = MakeCoeffs(config, step);
  const bool want_norms = WantsNorms(config, slice.decay);
  const int slots = StateSlots(config);
  PartialNorms total;
  for (int64_t off = 0; off < slice.n; off += kChunk) {
    const int64_t len = std::min(kChunk, slice.n - off);
    float* s0 = slots >= 1 ? slice.state + off : nullptr;
    float* s1 = slots >= 2 ? slice.state + SlotStride(slice) + off : nullptr;
    total +=
        ComputeChunk(config, k, slice.decay, want_norms, slice.param + off,
                     slice.grad + off, s0, s1, grad_scale, update + off, len);
  }
  return total;
}

float TrustRatio(const OptimizerConfig& config, bool decay,
                 const PartialNorms& whole_tensor) {
  if (!WantsNorms(config, decay)) return 1.0f;
  if (!(whole_tensor.param_sq > 0) || !(whole_tensor.update_sq > 0)) {
    return 1.0f;
  }
  return static_cast<float>(std::sqrt(whole_tensor.param_sq) /
                            std::sqrt(whole_tensor.update_sq));
}

void ApplyUpdate(const OptimizerConfig& config, float lr, const Slice& slice,
                 const float* update, float ratio) {
  if (slice.n <= 0) return;
  float lr_ratio, decay_factor;
  Phase2Scalars(config, lr, ratio, &lr_ratio, &decay_factor);
  ApplyChunk(config, slice.decay, lr_ratio, decay_factor, slice.param, update,
             slice.n);
}

absl::Status StepSlice(const OptimizerConfig& config, int64_t step, float lr,
                       const Slice& slice, float grad_scale) {
  if (NeedsTrustRatio(config.kind)) {
    return absl::FailedPreconditionError(
        absl::StrCat("StepSlice: ", OptimizerKindName(config.kind),
                     " needs whole-tensor norms; use ComputeUpdate, "
                     "TrustRatio and ApplyUpdate"));
  }
  const Coeffs k = MakeCoeffs(config, step);
  float lr_ratio, decay_factor;
  Phase2Scalars(config, lr, 1.0f, &lr_ratio, &decay_factor);
  const int slots = StateSlots(config);
  alignas(64) float update[kChunk];  // (kChunk) scratch on the stack
  for (int64_t off = 0; off < slice.n; off += kChunk) {
    const int64_t len = std::min(kChunk, slice.n - off);
    float* s0 = slots >= 1 ? slice.state + off : nullptr;
    float* s1 = slots >= 2 ? slice.state + SlotStride(slice) + off : nullptr;
    ComputeChunk(config, k, slice.decay, /*want_norms=*/false,
                 slice.param + off, slice.grad + off, s0, s1, grad_scale,
                 update, len);
    float* p = slice.param + off;
    if (slice.param_out != nullptr) {
      // The chunk is in cache: copied, then updated there.
      p = slice.param_out + off;
      std::memcpy(p, slice.param + off, sizeof(float) * len);
    }
    ApplyChunk(config, slice.decay, lr_ratio, decay_factor, p, update, len);
  }
  return absl::OkStatus();
}

}  // namespace optim
}  // namespace bertps

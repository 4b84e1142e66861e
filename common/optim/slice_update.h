// Optimizer update kernels over one contiguous slice of one tensor.
//
// The same kernels run in-process (a slice is a whole tensor) and inside
// parameter-server shards (a shard holds an element range of a tensor).
// Anything that needs a whole-tensor or global quantity is split in phases:
// each slice returns partial sums, the caller adds the partials of all slices
// (and shards) and passes the totals back in.
//
//   phase 0  GradSquaredSum per slice -> sum over every slice of every tensor
//            -> global_norm = sqrt(sum) -> ClipScale -> grad_scale
//   phase 1  ComputeUpdate(slice, grad_scale, update) -> PartialNorms
//            (LAMB: sum the PartialNorms of the tensor's slices -> TrustRatio)
//   phase 2  ApplyUpdate(slice, update, ratio)       (ratio 1 except LAMB)
//
// Kinds without a whole-tensor quantity (all but LAMB) may use StepSlice,
// which runs phases 1 and 2 in cache-sized chunks with no caller scratch.
//
// Element-wise math is Eigen over the caller's buffers (no copies); nothing
// allocates. Float operation order follows the reference of each kind
// (BERT's TensorFlow code for AdamWeightDecay, PyTorch 1.13 for AdamW and
// SGD); scalar hyper-parameter combinations are formed in double and rounded
// to float once.
//
// Semantics, with g = grad * grad_scale, t = step + 1, lr the step's learning
// rate (the caller's: LearningRate(step) of lr_schedule.h):
//   AdamWeightDecay  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//                    u = m / (sqrt(v) + eps) [+ wd p];  p -= lr u.
//                    No bias correction (google-research/bert).
//   AdamW            m, v as above; u = mhat / (sqrt(vhat) + eps) with
//                    mhat = m / (1-b1^t), vhat = v / (1-b2^t);
//                    p = p (1 - lr wd) [if decay] - lr u  (torch.optim.AdamW).
//   LAMB             m, v, mhat, vhat as AdamW; u = mhat/(sqrt(vhat)+eps)
//                    [+ wd p]; r = ||p|| / ||u|| over the WHOLE tensor (1 if
//                    either norm is 0, or when the tensor has no decay and
//                    lamb_skip_adaptation_without_decay); p -= lr r u.
//                    This is Algorithm 2 of You et al. 2019 with phi = identity
//                    and the paper's bias correction; clipping is global-norm.
//   SGD              d = g [+ wd p];  momentum > 0: buf = momentum buf + d,
//                    u = nesterov ? d + momentum buf : buf;  momentum == 0:
//                    u = d;  p -= lr u  (torch.optim.SGD, dampening 0).
// [...] terms apply only when Slice::decay. Zero-initialised state is the
// correct initial state for every kind (PyTorch's first SGD step sets
// buf = d, which equals momentum * 0 + d).
//
// Preconditions (programmer errors, not checked): the config passed
// ValidateConfig; buffers hold the sizes given in the shape comments; `step`
// >= 0 is the 0-based global step being applied (the same for every slice of
// a step); update buffers do not alias the slice's buffers.
// Thread-safety: pure functions; concurrent calls on disjoint slices are safe.
#ifndef BERTPS_COMMON_OPTIM_SLICE_UPDATE_H_
#define BERTPS_COMMON_OPTIM_SLICE_UPDATE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/optim/optimizer_config.h"

namespace bertps {
namespace optim {

// n: number of elements of this slice.
struct Slice {
  float* param = nullptr;       // (n) updated in place (only read with
                                //   StepSlice's param_out)
  const float* grad = nullptr;  // (n) raw gradient, before clipping
  float* state = nullptr;       // (StateSlots(config) * n), slot-major:
                                //   Adam-family / LAMB [m (n) | v (n)],
                                //   SGD with momentum  [buf (n)]
  int64_t n = 0;
  bool decay = false;  // UsesWeightDecay(tensor name)
  // Elements between a state slot and the next (0: n). Lets a part of a
  // slice be updated alone: its param, grad and state at the part's start,
  // n the part's size, slot_stride the whole slice's.
  int64_t slot_stride = 0;
  // StepSlice only: when set, the updated params (n) are written here and
  // `param` is only read (an update out of place: e.g. version v read from
  // one snapshot while pulls still send it, version v + 1 written into the
  // next). Must not overlap `param`.
  float* param_out = nullptr;
};

// Phase 0. Sum of squares of `grad` (n), accumulated in double. The result is
// finite exactly when every element is finite, so it doubles as the NaN/Inf
// check.
double GradSquaredSum(const float* grad, int64_t n);

// True when every element of `x` (n) is finite.
bool AllFinite(const float* x, int64_t n);

// Copies n floats from `src` (any byte alignment: it may point into a
// received buffer) to `dst` and returns whether every one is finite, in one
// pass over the source. `stream`: non-temporal stores (dst is written to
// memory around the caches), for a destination much larger than the cache
// that is not read again soon; the stores are fenced before the return.
// `dst` and `src` must not overlap. All n are copied either way.
bool CopyAllFinite(float* dst, const void* src, int64_t n, bool stream);

// Multiplier for the gradients given the global norm (sqrt of the sum of
// GradSquaredSum over every gradient): clip_norm / max(global_norm,
// clip_norm), as tf.clip_by_global_norm; exactly 1 when clipping is off
// (clip_norm <= 0) or global_norm <= clip_norm. global_norm must be finite.
float ClipScale(const OptimizerConfig& config, double global_norm);

// Squared L2 norms of a tensor's parameters (before the update) and update
// direction. Partials of the slices of one tensor add up to the tensor's.
struct PartialNorms {
  double param_sq = 0;
  double update_sq = 0;

  PartialNorms& operator+=(const PartialNorms& other) {
    param_sq += other.param_sq;
    update_sq += other.update_sq;
    return *this;
  }
};

// True for the kinds whose update needs whole-tensor norms (LAMB).
bool NeedsTrustRatio(OptimizerKind kind);

// Phase 1. Updates the slice's state with g = grad * grad_scale and writes
// the update direction into `update` (n). Returns the partial squared norms
// of param and update when TrustRatio needs them (LAMB with adaptation for
// this slice), zeros otherwise. Does not modify param.
PartialNorms ComputeUpdate(const OptimizerConfig& config, int64_t step,
                           const Slice& slice, float grad_scale, float* update);

// The trust ratio of a tensor from its whole-tensor totals: for LAMB
// ||w|| / ||u|| when both are > 0, else 1; 1 for every other kind and, when
// lamb_skip_adaptation_without_decay, for tensors with decay == false.
float TrustRatio(const OptimizerConfig& config, bool decay,
                 const PartialNorms& whole_tensor);

// Phase 2. Applies `update` (n) from ComputeUpdate of this slice and step to
// the slice's parameters: p -= lr * ratio * u (AdamW: p = p (1 - lr wd) - lr
// u). `lr`: the step's learning rate, as the caller's schedule gives it
// (LearningRate(config, step) in one process; a job's plan on the shards).
void ApplyUpdate(const OptimizerConfig& config, float lr, const Slice& slice,
                 const float* update, float ratio);

// Phases 1 and 2 fused over cache-sized chunks (no caller scratch), for kinds
// with NeedsTrustRatio(kind) == false. Identical results to ComputeUpdate +
// ApplyUpdate with ratio 1 (`lr` as there). FailedPrecondition for LAMB
// (nothing changed).
absl::Status StepSlice(const OptimizerConfig& config, int64_t step, float lr,
                       const Slice& slice, float grad_scale);

}  // namespace optim
}  // namespace bertps

#endif  // BERTPS_COMMON_OPTIM_SLICE_UPDATE_H_

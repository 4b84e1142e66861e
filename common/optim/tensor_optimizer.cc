#include "common/optim/tensor_optimizer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/optim/lr_schedule.h"
#include "common/optim/slice_update.h"
#include "common/status.h"

namespace bertps {
namespace optim {

absl::StatusOr<TensorOptimizer> TensorOptimizer::Create(
    const OptimizerConfig& config, std::vector<NamedTensor> tensors) {
  RETURN_IF_ERROR(ValidateConfig(config));
  const bool needs_state = StateSlots(config) > 0;
  absl::flat_hash_set<std::string> names;
  std::vector<Entry> entries;
  entries.reserve(tensors.size());
  int64_t max_n = 0;
  for (NamedTensor& t : tensors) {
    if (t.name.empty()) {
      return absl::InvalidArgumentError("TensorOptimizer: empty tensor name");
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("TensorOptimizer: duplicate tensor ", t.name));
    }
    if (t.n < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TensorOptimizer: tensor ", t.name, " has n = ", t.n, " < 0"));
    }
    if (t.n > 0 && (t.param == nullptr || t.grad == nullptr ||
                    (needs_state && t.state == nullptr))) {
      return absl::InvalidArgumentError(
          absl::StrCat("TensorOptimizer: tensor ", t.name,
                       " has a null param, grad or (needed) state buffer"));
    }
    max_n = std::max(max_n, t.n);
    Entry e;
    e.decay = UsesWeightDecay(t.name);
    e.tensor = std::move(t);
    entries.push_back(std::move(e));
  }
  return TensorOptimizer(config, std::move(entries),
                         NeedsTrustRatio(config.kind) ? max_n : 0);
}

TensorOptimizer::TensorOptimizer(const OptimizerConfig& config,
                                 std::vector<Entry> entries, int64_t scratch_n)
    : config_(config),
      entries_(std::move(entries)),
      scratch_(static_cast<size_t>(scratch_n)) {
  for (size_t i = 0; i < entries_.size(); ++i) {
    const int64_t n = entries_[i].tensor.n;
    total_n_ += n;
    for (int64_t off = 0; off < n; off += kPart) {
      parts_.push_back(Part{static_cast<int64_t>(i), off,
                            std::min(kPart, n - off)});
    }
  }
  part_status_.resize(parts_.size());
}

absl::Status TensorOptimizer::Step(int64_t step) {
  if (step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("TensorOptimizer: step ", step, " < 0"));
  }
  // Phase 0, before anything is written: the sum of squares is finite
  // exactly when every gradient element is.
  double grad_sq = 0;
  for (const Entry& e : entries_) {
    const double sq = GradSquaredSum(e.tensor.grad, e.tensor.n);
    if (!std::isfinite(sq)) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient of tensor ", e.tensor.name,
                       " contains NaN or Inf; step ", step, " not applied"));
    }
    grad_sq += sq;
  }
  const double global_norm = std::sqrt(grad_sq);
  const float scale = ClipScale(config_, global_norm);
  const float lr = LearningRate(config_, step);

  if (NeedsTrustRatio(config_.kind)) {
    // LAMB: each tensor's norms first, then its update (serial).
    for (const Entry& e : entries_) {
      Slice slice;
      slice.param = e.tensor.param;
      slice.grad = e.tensor.grad;
      slice.state = e.tensor.state;
      slice.n = e.tensor.n;
      slice.decay = e.decay;
      const PartialNorms norms =
          ComputeUpdate(config_, step, slice, scale, scratch_.data());
      const float ratio = TrustRatio(config_, slice.decay, norms);
      ApplyUpdate(config_, lr, slice, scratch_.data(), ratio);
    }
  } else {
    // Element-wise: the parts run on the compute threads, each element's
    // arithmetic the same as in one pass over the tensor (the same bits).
    const int64_t parts = static_cast<int64_t>(parts_.size());
#pragma omp parallel for schedule(dynamic, 1) if (total_n_ > kPart)
    for (int64_t i = 0; i < parts; ++i) {
      const Part& part = parts_[static_cast<size_t>(i)];
      const Entry& e = entries_[static_cast<size_t>(part.entry)];
      Slice slice;
      slice.param = e.tensor.param + part.offset;
      slice.grad = e.tensor.grad + part.offset;
      slice.state =
          e.tensor.state != nullptr ? e.tensor.state + part.offset : nullptr;
      slice.n = part.n;
      slice.slot_stride = e.tensor.n;
      slice.decay = e.decay;
      part_status_[static_cast<size_t>(i)] =
          StepSlice(config_, step, lr, slice, scale);
    }
    for (const absl::Status& st : part_status_) RETURN_IF_ERROR(st);
  }
  last_global_norm_ = global_norm;
  last_learning_rate_ = lr;
  return absl::OkStatus();
}

}  // namespace optim
}  // namespace bertps

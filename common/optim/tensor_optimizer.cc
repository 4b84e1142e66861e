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
      scratch_(static_cast<size_t>(scratch_n)) {}

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

  for (const Entry& e : entries_) {
    Slice slice;
    slice.param = e.tensor.param;
    slice.grad = e.tensor.grad;
    slice.state = e.tensor.state;
    slice.n = e.tensor.n;
    slice.decay = e.decay;
    if (NeedsTrustRatio(config_.kind)) {
      const PartialNorms norms =
          ComputeUpdate(config_, step, slice, scale, scratch_.data());
      const float ratio = TrustRatio(config_, slice.decay, norms);
      ApplyUpdate(config_, step, slice, scratch_.data(), ratio);
    } else {
      RETURN_IF_ERROR(StepSlice(config_, step, slice, scale));
    }
  }
  last_global_norm_ = global_norm;
  last_learning_rate_ = LearningRate(config_, step);
  return absl::OkStatus();
}

}  // namespace optim
}  // namespace bertps

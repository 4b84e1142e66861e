// Optimizer choice and hyper-parameters, shared by the in-process trainer and
// the parameter-server shards.
//
// Hyper-parameters are kept in double so that derived constants such as
// 1 - beta1 are formed the way the references form them (Python doubles,
// rounded to float once): float(1 - 0.9) == 0.1f, whereas 1.0f - 0.9f is not.
//
// Thread-safety: plain value types and pure functions.
#ifndef BERTPS_COMMON_OPTIM_OPTIMIZER_CONFIG_H_
#define BERTPS_COMMON_OPTIM_OPTIMIZER_CONFIG_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bertps {
namespace optim {

enum class OptimizerKind {
  // google-research/bert AdamWeightDecayOptimizer: Adam moments without bias
  // correction, weight decay added to the update direction.
  kAdamWeightDecay,
  // torch.optim.AdamW (PyTorch 1.13): bias-corrected Adam, decoupled decay.
  kAdamW,
  // LAMB, You et al. 2019 (arXiv:1904.00962, Algorithm 2): bias-corrected
  // Adam direction plus weight decay, scaled per tensor by the trust ratio
  // ||w|| / ||update||.
  kLamb,
  // torch.optim.SGD (PyTorch 1.13) with momentum, optional Nesterov, L2 decay.
  kSgd,
};

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdamWeightDecay;
  double learning_rate = 1e-4;  // peak (post-warmup) learning rate
  double beta1 = 0.9;           // Adam-family first-moment decay
  double beta2 = 0.999;         // Adam-family second-moment decay
  double epsilon = 1e-6;        // Adam-family denominator epsilon
  // Applied only to tensors for which UsesWeightDecay(name) is true.
  double weight_decay = 0.01;
  double momentum = 0.9;  // SGD only; 0 disables the momentum buffer
  bool nesterov = false;  // SGD only; needs momentum > 0
  // LAMB only. True (default): tensors excluded from weight decay (biases,
  // LayerNorm) also skip layer adaptation, i.e. their trust ratio is 1, as in
  // NVIDIA's BERT LAMB, apex FusedLAMB and TF-Addons (where
  // exclude_from_layer_adaptation defaults to exclude_from_weight_decay).
  // False: every tensor gets the trust ratio, as in the paper's Algorithm 2.
  bool lamb_skip_adaptation_without_decay = true;
  // Global-norm gradient clipping threshold (tf.clip_by_global_norm);
  // <= 0 turns clipping off.
  double clip_norm = 1.0;
  // Learning-rate schedule, see lr_schedule.h. total_steps == 0: the
  // learning rate stays constant after warmup.
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;
};

// OK, or InvalidArgument naming the offending field and its value.
absl::Status ValidateConfig(const OptimizerConfig& config);

// "adam_weight_decay" | "adamw" | "lamb" | "sgd" (exact, lower case).
absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name);
// The inverse of ParseOptimizerKind.
absl::string_view OptimizerKindName(OptimizerKind kind);

// True when weight decay applies to the tensor called `tensor_name`. Follows
// BERT's exclude_from_weight_decay = ["LayerNorm", "layer_norm", "bias"],
// matched like its re.search: a name containing any of these substrings is
// excluded. Hugging Face names: "...attention.output.LayerNorm.weight" and
// "...query.bias" -> false, "...query.weight" -> true; old-style
// "...LayerNorm.gamma" / "...LayerNorm.beta" -> false.
bool UsesWeightDecay(absl::string_view tensor_name);

// Floats of optimizer state per parameter element: AdamWeightDecay, AdamW and
// LAMB 2 (m, v); SGD 1 with momentum > 0 (the momentum buffer), else 0.
int StateSlots(const OptimizerConfig& config);

}  // namespace optim
}  // namespace bertps

#endif  // BERTPS_COMMON_OPTIM_OPTIMIZER_CONFIG_H_

#include "common/optim/optimizer_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace bertps {
namespace optim {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view requirement,
                     double value) {
  return absl::InvalidArgumentError(absl::StrCat(
      "optimizer config: ", field, " must be ", requirement, ", got ", value));
}

// Checks lo <= value < hi (and finite).
absl::Status CheckHalfOpen(absl::string_view field, double value, double lo,
                           double hi) {
  if (std::isfinite(value) && value >= lo && value < hi) {
    return absl::OkStatus();
  }
  return Invalid(field, absl::StrCat("in [", lo, ", ", hi, ")"), value);
}

}  // namespace

absl::Status ValidateConfig(const OptimizerConfig& c) {
  switch (c.kind) {
    case OptimizerKind::kAdamWeightDecay:
    case OptimizerKind::kAdamW:
    case OptimizerKind::kLamb:
    case OptimizerKind::kSgd:
      break;
    default:
      return Invalid("kind", "a known OptimizerKind",
                     static_cast<double>(static_cast<int>(c.kind)));
  }
  if (!std::isfinite(c.learning_rate) || c.learning_rate < 0) {
    return Invalid("learning_rate", "finite and >= 0", c.learning_rate);
  }
  if (absl::Status s = CheckHalfOpen("beta1", c.beta1, 0, 1); !s.ok()) return s;
  if (absl::Status s = CheckHalfOpen("beta2", c.beta2, 0, 1); !s.ok()) return s;
  if (!std::isfinite(c.epsilon) || c.epsilon <= 0) {
    return Invalid("epsilon", "finite and > 0", c.epsilon);
  }
  if (!std::isfinite(c.weight_decay) || c.weight_decay < 0) {
    return Invalid("weight_decay", "finite and >= 0", c.weight_decay);
  }
  if (absl::Status s = CheckHalfOpen("momentum", c.momentum, 0, 1); !s.ok()) {
    return s;
  }
  if (c.nesterov && c.momentum <= 0) {
    return Invalid("momentum", "> 0 when nesterov is set", c.momentum);
  }
  if (!std::isfinite(c.clip_norm)) {
    return Invalid("clip_norm", "finite (<= 0 turns clipping off)",
                   c.clip_norm);
  }
  if (c.warmup_steps < 0) {
    return Invalid("warmup_steps", ">= 0", static_cast<double>(c.warmup_steps));
  }
  if (c.total_steps < 0) {
    return Invalid("total_steps", ">= 0 (0: no decay)",
                   static_cast<double>(c.total_steps));
  }
  if (c.total_steps > 0 && c.warmup_steps > c.total_steps) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer config: warmup_steps (", c.warmup_steps,
                     ") must not exceed total_steps (", c.total_steps, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name) {
  if (name == "adam_weight_decay") return OptimizerKind::kAdamWeightDecay;
  if (name == "adamw") return OptimizerKind::kAdamW;
  if (name == "lamb") return OptimizerKind::kLamb;
  if (name == "sgd") return OptimizerKind::kSgd;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer \"", name,
                   "\"; expected one of adam_weight_decay, adamw, lamb, sgd"));
}

absl::string_view OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdamWeightDecay:
      return "adam_weight_decay";
    case OptimizerKind::kAdamW:
      return "adamw";
    case OptimizerKind::kLamb:
      return "lamb";
    case OptimizerKind::kSgd:
      return "sgd";
  }
  return "unknown";
}

bool UsesWeightDecay(absl::string_view tensor_name) {
  for (absl::string_view excluded : {"LayerNorm", "layer_norm", "bias"}) {
    if (tensor_name.find(excluded) != absl::string_view::npos) return false;
  }
  return true;
}

int StateSlots(const OptimizerConfig& config) {
  switch (config.kind) {
    case OptimizerKind::kAdamWeightDecay:
    case OptimizerKind::kAdamW:
    case OptimizerKind::kLamb:
      return 2;
    case OptimizerKind::kSgd:
      return config.momentum > 0 ? 1 : 0;
  }
  return 0;
}

}  // namespace optim
}  // namespace bertps

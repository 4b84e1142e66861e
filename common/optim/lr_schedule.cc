#include "common/optim/lr_schedule.h"

#include <algorithm>

namespace bertps {
namespace optim {

float LearningRate(const OptimizerConfig& config, int64_t step) {
  step = std::max<int64_t>(step, 0);
  // TensorFlow holds init_lr, the step counts and every intermediate in
  // float32; the operation order below is the reference's.
  const float init_lr = static_cast<float>(config.learning_rate);
  if (step < config.warmup_steps) {
    const float done =
        static_cast<float>(step) / static_cast<float>(config.warmup_steps);
    return init_lr * done;
  }
  if (config.total_steps <= 0) return init_lr;
  const float decay_steps = static_cast<float>(config.total_steps);
  const float p = std::min(static_cast<float>(step), decay_steps) / decay_steps;
  return init_lr * (1.0f - p);  // (init - end) * (1 - p)^1 + end, end = 0
}

}  // namespace optim
}  // namespace bertps

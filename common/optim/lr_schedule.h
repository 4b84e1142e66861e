// Learning-rate schedule of google-research/bert optimization.py
// (create_optimizer), reproduced in float32 the way TensorFlow computes it.
//
// `step` is the 0-based index of the step being applied (BERT's global_step
// before its increment; the first update uses step 0). With init = lr,
// W = warmup_steps, T = total_steps:
//
//   step <  W:          init * (step / W)            (linear warmup from 0)
//   step >= W, T > 0:   init * (1 - min(step, T) / T) (polynomial_decay, power
//                                                      1, end 0, no cycle)
//   step >= W, T == 0:  init                          (bertps extension)
//
// Note the BERT shape: the first step (step 0) runs with lr 0 when W > 0, the
// decay line starts at step 0, not at W (so lr(W) = init * (1 - W/T), not
// init), and every step >= T has lr 0.
//
// Thread-safety: pure function.
#ifndef BERTPS_COMMON_OPTIM_LR_SCHEDULE_H_
#define BERTPS_COMMON_OPTIM_LR_SCHEDULE_H_

#include <cstdint>

#include "common/optim/optimizer_config.h"

namespace bertps {
namespace optim {

// `config` must pass ValidateConfig; a negative step is treated as 0.
float LearningRate(const OptimizerConfig& config, int64_t step);

}  // namespace optim
}  // namespace bertps

#endif  // BERTPS_COMMON_OPTIM_LR_SCHEDULE_H_

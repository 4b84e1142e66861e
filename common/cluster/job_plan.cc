#include "common/cluster/job_plan.h"

#include <algorithm>

#include "common/optim/lr_schedule.h"
#include "common/optim/optimizer_config.h"

namespace bertps {

float JobPlan::LearningRateAt(int64_t update) const {
  // The schedule reads these three fields only (lr_schedule.h); the decay
  // runs over the job's updates, as JobOptimizerConfig's total_steps.
  optim::OptimizerConfig schedule;
  schedule.learning_rate = learning_rate;
  schedule.warmup_steps = warmup_updates;
  schedule.total_steps = updates;
  return optim::LearningRate(schedule, update);
}

int64_t JobPlan::UpdatesForEpochs(int64_t epochs,
                                  int64_t examples_per_epoch) const {
  const int64_t e = std::max<int64_t>(1, examples_per_update);
  return std::max<int64_t>(1, (epochs * examples_per_epoch + e - 1) / e);
}

JobPlan PlanOf(const JobSpec& spec) {
  JobPlan p;
  p.mode = spec.consistency().mode();
  p.num_shards = std::max(1, spec.num_ps_shards());
  p.replicas = std::max(1, spec.num_workers());
  p.stages = std::max(1, spec.pipeline().stages());
  p.pushers = p.replicas * p.stages;
  p.backup_workers = spec.consistency().backup_workers();
  p.batch = std::max<int64_t>(1, spec.batch_size());
  p.accumulation = std::max(1, spec.accumulation_steps());
  p.examples_per_push = p.batch * p.accumulation;
  p.examples_per_update =
      p.mode == BSP ? p.examples_per_push * p.replicas : p.examples_per_push;
  p.updates = spec.steps();
  if (!spec.checkpoint().dir().empty()) {
    p.checkpoints = true;
    p.checkpoint_every = spec.checkpoint().every_steps();
  }
  p.consistent_cuts = p.mode != BSP && p.checkpoint_every > 0;
  p.origin_update = spec.checkpoint().origin().update();
  p.origin_position = spec.checkpoint().origin().position();
  p.learning_rate = spec.optimizer().learning_rate();
  p.warmup_updates = spec.optimizer().warmup_steps();
  return p;
}

}  // namespace bertps

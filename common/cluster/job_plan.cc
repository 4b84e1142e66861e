#include "common/cluster/job_plan.h"

#include <algorithm>

namespace bertps {

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
  p.batch = std::max<int64_t>(1, spec.batch_size());
  p.accumulation = std::max(1, spec.accumulation_steps());
  p.examples_per_push = p.batch * p.accumulation;
  p.examples_per_update =
      p.mode == BSP ? p.examples_per_push * p.replicas : p.examples_per_push;
  p.updates = spec.steps();
  if (!spec.checkpoint().dir().empty()) {
    p.checkpoint_every = spec.checkpoint().every_steps();
  }
  p.consistent_cuts = p.mode != BSP && p.checkpoint_every > 0;
  return p;
}

}  // namespace bertps

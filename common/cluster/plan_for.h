// Job plans for code that runs members without a job spec file (tests,
// benchmarks, fuzzers): each builds the JobSpec its settings stand for and
// takes PlanOf of it, as the coordinator and the flags-only daemons do, so
// a plan is never made any other way.
// Thread-safety: pure functions.
#ifndef BERTPS_COMMON_CLUSTER_PLAN_FOR_H_
#define BERTPS_COMMON_CLUSTER_PLAN_FOR_H_

#include <cstdint>

#include "common/cluster/job_plan.h"
#include "common/optim/optimizer_config.h"
#include "proto/job.pb.h"

namespace bertps {

// A job of `workers` workers (replicas) under `mode`, whose learning-rate
// schedule is `optimizer`'s (learning_rate, warmup_steps; its total_steps
// are the job's steps), with checkpoints every `checkpoint_every` updates
// (0: none; a checkpoint dir is named so that the plan has them).
inline JobSpec SpecFor(ConsistencyMode mode, int workers,
                       const optim::OptimizerConfig& optimizer = {},
                       int64_t checkpoint_every = 0) {
  JobSpec s;
  s.set_task(PRETRAIN);
  s.set_num_workers(workers);
  s.mutable_consistency()->set_mode(mode);
  s.mutable_optimizer()->set_learning_rate(optimizer.learning_rate);
  s.mutable_optimizer()->set_warmup_steps(optimizer.warmup_steps);
  s.set_steps(optimizer.total_steps);
  if (checkpoint_every > 0) {
    s.mutable_checkpoint()->set_dir("checkpoints");
    s.mutable_checkpoint()->set_every_steps(checkpoint_every);
  }
  return s;
}

inline JobPlan PlanFor(ConsistencyMode mode, int workers,
                       const optim::OptimizerConfig& optimizer = {},
                       int64_t checkpoint_every = 0) {
  return PlanOf(SpecFor(mode, workers, optimizer, checkpoint_every));
}

}  // namespace bertps

#endif  // BERTPS_COMMON_CLUSTER_PLAN_FOR_H_

// What a job's spec means for the members that run it, derived in one place:
// the coordinator (schedule, progress, epochs, the stop condition), the
// shards (ShardOptions) and the train workers (TrainWorkerOptions) all read
// it instead of recomputing it.
//
// One step counter: the number of updates the shards apply (`updates`,
// what `steps` says once the coordinator has turned epochs into steps).
// Under BSP an update is one global batch (every worker's batch); under ASP
// and SSP every push is an update of its own, as TensorFlow's global_step,
// so `steps: 1000` with 4 ASP workers is 1,000 updates in all. The learning
// rate schedule, checkpoints and eval rounds count updates.
//
// Data: update ticket k trains on the examples [k * E, (k + 1) * E) of the
// job's example stream (E = examples_per_update; epochs wrap around), a
// fixed function of k whichever worker computes it. Worker w's step j is
// ticket j (BSP, w's share at w * B of it) or j * N + w (ASP, SSP), so its
// batch starts at stream position (j * N + w) * B in both.
//
// Thread-safety: a value type.
#ifndef BERTPS_COMMON_CLUSTER_JOB_PLAN_H_
#define BERTPS_COMMON_CLUSTER_JOB_PLAN_H_

#include <cstdint>

#include "proto/job.pb.h"

namespace bertps {

struct JobPlan {
  ConsistencyMode mode = BSP;
  int num_shards = 1;
  int replicas = 1;  // data-parallel workers (num_workers)
  int stages = 1;    // pipeline stages per replica
  // The shards' workers: every replica's every stage pushes as one.
  int pushers = 1;
  int64_t batch = 1;         // examples per micro-batch (batch_size)
  int64_t accumulation = 1;  // micro-batches summed per push
  // Examples per worker per step (one push): batch * accumulation.
  int64_t examples_per_push = 1;
  // BSP: examples_per_push * replicas; else examples_per_push.
  int64_t examples_per_update = 1;
  int64_t updates = 0;              // what the shards apply in all
  // Updates between checkpoints (0: none). Under ASP and SSP the shards
  // pause at each multiple until its checkpoint is written (consistent
  // cuts: every shard's version k holds the same k pushes).
  int64_t checkpoint_every = 0;
  bool consistent_cuts = false;

  // The update ticket of worker w's step j.
  int64_t Ticket(int worker, int64_t step) const {
    return mode == BSP ? step : step * replicas + worker;
  }
  // The stream position of the first example of worker w's batch at step j.
  int64_t FirstExample(int worker, int64_t step) const {
    return (step * replicas + worker) * examples_per_push;
  }
  // The steps worker w runs in all: every j whose ticket is an update.
  int64_t WorkerSteps(int worker) const {
    if (mode == BSP) return updates;
    return updates > worker ? (updates - worker + replicas - 1) / replicas : 0;
  }
  // Updates that cover `epochs` passes over `examples_per_epoch` (the last
  // one partly; at least one).
  int64_t UpdatesForEpochs(int64_t epochs, int64_t examples_per_epoch) const;
};

// The plan of a valid spec (ValidateJobSpec), whose steps are set.
JobPlan PlanOf(const JobSpec& spec);

}  // namespace bertps

#endif  // BERTPS_COMMON_CLUSTER_JOB_PLAN_H_

// What a job's spec means for the members that run it, derived in one place
// and held by every member: the coordinator (schedule, progress, epochs, the
// stop condition, slots), the shards (ShardOptions::plan), the train workers
// (TrainWorkerOptions::plan) and the pipeline stages
// (PipelineStageOptions::plan). Each asks the plan for step, update, cut,
// checkpoint, slot and data questions and for the learning rate at an
// update, instead of computing them again. The flags-only daemons build a
// JobSpec from their flags and take the same PlanOf.
//
// One step counter: the number of updates the shards apply (`updates`,
// what `steps` says once the coordinator has turned epochs into steps).
// Under BSP an update is one global batch (every worker's batch); under ASP
// and SSP every push is an update of its own, as TensorFlow's global_step,
// so `steps: 1000` with 4 ASP workers is 1,000 updates in all. The learning
// rate schedule, checkpoints and eval rounds count updates.
//
// Slots: a job has `pushers` = replicas x stages slots; slot k is stage
// k % stages of replica k / stages (SlotOf, ReplicaOf, StageOf), and pushes
// to the shards as worker k. Without a pipeline a slot is a train worker.
//
// Data: update ticket k trains on the examples [k * E, (k + 1) * E) of the
// job's example stream (E = examples_per_update; epochs wrap around), a
// fixed function of k whichever worker computes it. Worker (replica) w's
// step j is ticket j (BSP, w's share at w * P of it, P = examples_per_push)
// or j * N + w (ASP, SSP), so its batch starts at stream position
// (j * N + w) * P in both.
//
// Checkpoints: versions k * checkpoint_every below `updates`, and the last
// one (`updates`) (CheckpointDue). Under ASP and SSP with checkpoints the
// shards hold the tickets at or past the next cut until its checkpoint is
// written (NextCut, HeldByCut), so every shard's version k holds the same k
// pushes.
//
// Thread-safety: a value type.
#ifndef BERTPS_COMMON_CLUSTER_JOB_PLAN_H_
#define BERTPS_COMMON_CLUSTER_JOB_PLAN_H_

#include <algorithm>
#include <cstdint>
#include <limits>

#include "proto/job.pb.h"

namespace bertps {

struct JobPlan {
  ConsistencyMode mode = BSP;
  int num_shards = 1;
  int replicas = 1;  // data-parallel workers (num_workers)
  int stages = 1;    // pipeline stages per replica
  // The job's slots, and the shards' workers: every replica's every stage
  // pushes as one.
  int pushers = 1;
  int backup_workers = 0;    // BSP: a step may end without this many
  int64_t batch = 1;         // examples per micro-batch (batch_size)
  int64_t accumulation = 1;  // micro-batches summed per push
  // Examples per worker per step (one push): batch * accumulation.
  int64_t examples_per_push = 1;
  // BSP: examples_per_push * replicas; else examples_per_push.
  int64_t examples_per_update = 1;
  int64_t updates = 0;              // what the shards apply in all
  // The job writes checkpoints (it has a checkpoint dir): the final one,
  // and every checkpoint_every updates (0: only the final one).
  bool checkpoints = false;
  int64_t checkpoint_every = 0;
  // ASP/SSP with checkpoints: the shards pause at each multiple of
  // checkpoint_every until its checkpoint is written.
  bool consistent_cuts = false;
  // The learning-rate schedule over update indices (LearningRateAt):
  // optimizer.learning_rate, optimizer.warmup_steps, decay over `updates`.
  double learning_rate = 1e-4;
  int64_t warmup_updates = 0;

  // ---- Slots.
  int SlotOf(int replica, int stage) const { return replica * stages + stage; }
  int ReplicaOf(int slot) const { return slot / stages; }
  int StageOf(int slot) const { return slot % stages; }
  // Whether a train member holding several slots computes them serially on
  // one model (TrainWorkerOptions::also_workers): under BSP without backup
  // workers and pipeline stages, where its slots' pushes add up to one
  // update whatever their order; it needs the memory of one slot. Else it
  // runs one part per slot.
  bool SerialSlots() const {
    return mode == BSP && backup_workers == 0 && stages == 1;
  }

  // ---- Steps and updates. `worker`: a train worker, or a pipeline's
  // replica (every stage of a replica runs its replica's steps).
  // The update ticket of worker w's step j.
  // A step so large that the ticket would overflow (a malformed push's)
  // gets INT64_MAX: past every plan's updates, refused as such.
  int64_t Ticket(int worker, int64_t step) const {
    if (mode == BSP) return step;
    int64_t t = 0;
    if (__builtin_mul_overflow(step, static_cast<int64_t>(replicas), &t) ||
        __builtin_add_overflow(t, static_cast<int64_t>(worker), &t)) {
      return std::numeric_limits<int64_t>::max();
    }
    return t;
  }
  // The steps of worker w whose tickets are below `version` (the steps it
  // has pushed once the shards applied `version` updates).
  int64_t StepsBefore(int worker, int64_t version) const {
    if (mode == BSP) return version;
    return version > worker ? (version - worker + replicas - 1) / replicas : 0;
  }
  // The steps worker w runs in all: every j whose ticket is an update.
  int64_t WorkerSteps(int worker) const { return StepsBefore(worker, updates); }

  // ---- The worker's share of the data.
  // Where this job's data geometry begins (checkpoint.origin): a job
  // continued from another job's checkpoint, perhaps with another batch
  // size or worker count, trains update k >= origin_update on the examples
  // from origin_position + (k - origin_update) * examples_per_update on.
  // Both 0 for a job from its start.
  int64_t origin_update = 0;
  int64_t origin_position = 0;
  // The stream position of update `ticket`'s first example.
  int64_t PositionOfUpdate(int64_t ticket) const {
    return origin_position + (ticket - origin_update) * examples_per_update;
  }
  // The stream position of the first example of worker w's batch at step j.
  int64_t FirstExample(int worker, int64_t step) const {
    return PositionOfUpdate(Ticket(worker, step)) +
           (mode == BSP ? ExampleOffset(worker) : 0);
  }
  // The end of the examples the job's updates consume: the ledger of a job
  // that ran to its end is exactly [0, EndPosition()).
  int64_t EndPosition() const { return PositionOfUpdate(updates); }
  // Worker w's examples within its update's global batch start here (the
  // index dropout keys use).
  int64_t ExampleOffset(int worker) const {
    return worker * examples_per_push;
  }

  // ---- Checkpoints and cuts.
  // Whether the checkpoint of `version` (after that many updates) is
  // written: with a checkpoint dir, every multiple of checkpoint_every below
  // `updates`, and `updates` itself.
  bool CheckpointDue(int64_t version) const {
    if (!checkpoints || version <= 0 || version > updates) return false;
    return version == updates ||
           (checkpoint_every > 0 && version % checkpoint_every == 0);
  }
  // The first version after `version` whose checkpoint is due (0: none).
  int64_t NextCheckpoint(int64_t version) const {
    if (!checkpoints || version >= updates) return 0;
    if (checkpoint_every <= 0) return updates;
    const int64_t next = (std::max<int64_t>(version, 0) / checkpoint_every + 1) *
                         checkpoint_every;
    return next < updates ? next : updates;
  }
  // ASP/SSP: the shards' next cut after `version` updates: the next
  // multiple of checkpoint_every above it (0: no cuts).
  int64_t NextCut(int64_t version) const {
    if (!consistent_cuts) return 0;
    return (version / checkpoint_every + 1) * checkpoint_every;
  }
  // Whether update `ticket` waits for the checkpoint of cut `cut` (from
  // NextCut; 0: none) before it may be applied.
  static bool HeldByCut(int64_t ticket, int64_t cut) {
    return cut > 0 && ticket >= cut;
  }

  // ---- The learning rate the shards apply in update `update` (0-based:
  // the version before it), common/optim/lr_schedule.h's schedule.
  float LearningRateAt(int64_t update) const;

  // Updates that cover `epochs` passes over `examples_per_epoch` (the last
  // one partly; at least one).
  int64_t UpdatesForEpochs(int64_t epochs, int64_t examples_per_epoch) const;
};

// The plan of a valid spec (ValidateJobSpec), whose steps are set.
JobPlan PlanOf(const JobSpec& spec);

}  // namespace bertps

#endif  // BERTPS_COMMON_CLUSTER_JOB_PLAN_H_

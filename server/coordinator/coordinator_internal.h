// Helpers shared by the files of the Coordinator class (coordinator.cc and
// coordinator_{members,schedule,progress,items,store,submit}.cc): facts
// derived from a job spec, and the roles. Private to the coordinator target.
#ifndef BERTPS_SERVER_COORDINATOR_COORDINATOR_INTERNAL_H_
#define BERTPS_SERVER_COORDINATOR_COORDINATOR_INTERNAL_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/cluster/job_plan.h"
#include "common/cluster/path_policy.h"
#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"

namespace bertps {
namespace coordinator_internal {

// Pipeline stages per replica (1 without a pipeline): the job plan's.
inline int StagesOf(const JobSpec& s) { return PlanOf(s).stages; }

// The train daemons a job starts with: min_workers (elastic), else every
// slot's own.
inline int MinWorkersOf(const JobSpec& s) {
  const JobPlan p = PlanOf(s);
  return p.stages == 1 && s.min_workers() > 0 ? s.min_workers() : p.pushers;
}
// Whether the job runs on fewer daemons than slots when it must (its slots
// without a daemon are computed by the others at once).
inline bool IsElastic(const JobSpec& s) {
  return MinWorkersOf(s) < PlanOf(s).pushers;
}

// What a trained job waits for before it can succeed.
inline constexpr char kLedgerWait[] =
    "shard 0's count of the examples of the last update";

// Examples one update of the shards consumes (the job plan's): BSP a global
// batch (every worker's batch); ASP/SSP one worker's push.
inline int64_t ExamplesPerUpdate(const JobSpec& s) {
  return PlanOf(s).examples_per_update;
}

// The job's data files with their sizes and records, through their record
// indices (built here once, loaded by the workers): the default
// CoordinatorOptions::describe_data (with the coordinator's roots: every
// match is checked against them before it is opened). Runs in the SubmitJob
// handler.
absl::StatusOr<std::vector<DataFile>> DescribeData(const JobSpec& spec,
                                                   const PathRoots& roots);

// A train job restoring checkpoint.restore: a directory becomes its newest
// manifest, which must read; a continued run (restore_as CONTINUE) gets
// checkpoint.origin, the checkpoint's version and the end of its example
// ledger (JobPlan::origin_update, origin_position); a new phase none.
// INVALID_ARGUMENT naming the field.
absl::Status SetDataOrigin(JobSpec* spec);

// Makes the job's job_dir and checks that the coordinator can write its
// tensorboard_dir (creating it): at submit, after every other check passed.
// INVALID_ARGUMENT naming the field.
// The file in a job's directory naming the job it belongs to.
inline constexpr char kJobDirMarker[] = ".bertps-job";
// Creates the job's directories (job_dir, with its marker naming `id`;
// tensorboard_dir checked writable): a job_dir that belongs to another job
// or holds files already is refused (FAILED_PRECONDITION).
absl::Status MakeJobDirs(const JobSpec& spec, const std::string& id);

// What the job's members need in memory (common/cluster/memory_plan.h):
// the largest shard's, and a train worker's at the data's shape (0 where
// the data's shape is unknown or the job is a pipeline, whose stages hold
// parts of the model). Train jobs only.
absl::StatusOr<MemoryEstimate> EstimateMemory(
    const JobSpec& spec, const std::vector<DataFile>& data_files);

inline bool IsTrainer(Role r) { return r == TRAIN || r == STAGE_ROLE; }

inline bool IsPool(Role r) { return r == PREPROCESS_ROLE || r == EVAL_ROLE; }

inline bool HasEval(const JobSpec& s) {
  return (s.task() == PRETRAIN || s.task() == CLASSIFY) &&
         s.eval().data_size() > 0;
}

inline std::vector<std::string> EvalGlobs(const JobSpec& s) {
  if (s.task() == EVAL && s.eval().data_size() == 0) {
    return {s.data().begin(), s.data().end()};
  }
  return {s.eval().data().begin(), s.eval().data().end()};
}

}  // namespace coordinator_internal
}  // namespace bertps

#endif  // BERTPS_SERVER_COORDINATOR_COORDINATOR_INTERNAL_H_

// The `stage` role of bertps_worker: one pipeline stage of a model-parallel
// job (worker/pipeline_stage.h), configured by flags (stage_role_main.cc).
// Thread-safety: call once from main.
#ifndef BERTPS_WORKER_STAGE_ROLE_H_
#define BERTPS_WORKER_STAGE_ROLE_H_

#include "common/security.h"
#include "proto/job.pb.h"

namespace bertps {

// Runs the stage to the end of the job; the process exit code (0 when the
// job's steps completed, 1 with the reason on stderr otherwise). `job`: the
// job's spec from worker_main.cc's job flags; unless `from_file` (--spec),
// the stage role's flags add its pipeline (--num_replicas, --num_stages,
// --micro_batches, --schedule, --layers_per_stage). The stage runs that
// spec's plan.
int RunStageRole(const SecurityConfig& security, JobSpec job, bool from_file);

}  // namespace bertps

#endif  // BERTPS_WORKER_STAGE_ROLE_H_

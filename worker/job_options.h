// What a job's spec means for one train worker. Thread-safety: pure.
#ifndef BERTPS_WORKER_JOB_OPTIONS_H_
#define BERTPS_WORKER_JOB_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/train_worker.h"

namespace bertps {

absl::StatusOr<TrainWorkerOptions> TrainWorkerOptionsFromSpec(
    const JobSpec& spec, int worker, const std::vector<std::string>& ps);

}  // namespace bertps

#endif  // BERTPS_WORKER_JOB_OPTIONS_H_

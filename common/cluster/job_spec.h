// JobSpec files: parsing (protobuf text format or JSON, with protobuf's own
// parsers), defaults, and validation whose errors name the offending field.
// Thread-safety: pure functions.
#ifndef BERTPS_COMMON_CLUSTER_JOB_SPEC_H_
#define BERTPS_COMMON_CLUSTER_JOB_SPEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model/bert_config.h"
#include "common/optim/optimizer_config.h"
#include "proto/job.pb.h"

namespace bertps {

// JSON when the text starts with '{' (after white space), else text format.
// Unknown fields are errors. Defaults (and job_dir's) are applied, then
// ValidateJobSpec runs with outputs_may_default (the coordinator's
// --jobs_root may fill them).
absl::StatusOr<JobSpec> ParseJobSpec(absl::string_view text);
// Bounds of a spec's strings and lists (ValidateJobSpec): a job's name, any
// other string (a glob, a path, a label), the entries of a repeated field.
inline constexpr size_t kMaxJobNameBytes = 256;
inline constexpr size_t kMaxSpecStringBytes = 4096;
inline constexpr int kMaxSpecListEntries = 10000;

// The largest job spec file read (a spec is a few KiB; names, globs and
// paths are bounded far below this).
inline constexpr int64_t kMaxJobSpecFileBytes = 1 << 20;

absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path);

// Fills unset fields with their defaults (batch 32, 1 shard, 1 worker, ...).
void ApplyJobDefaults(JobSpec* spec);
// With job_dir set, the outputs left empty go under it: train jobs'
// checkpoint.dir (job_dir/checkpoints), export_path (job_dir/
// model.safetensors) and tensorboard_dir (job_dir/tensorboard); preprocess
// and eval jobs' output_dir (job_dir/output). Paths given stay.
void ApplyJobDirDefaults(JobSpec* spec);
// INVALID_ARGUMENT naming the field, e.g. "job spec: batch_size must be > 0".
// outputs_may_default: a missing checkpoint.dir or output_dir is not an
// error (a client's check: the coordinator may fill them from its
// --jobs_root, and checks the spec again after).
absl::Status ValidateJobSpec(const JobSpec& spec,
                             bool outputs_may_default = false);

// The pieces of a spec the processes need.
absl::StatusOr<BertConfig> JobModelConfig(const JobSpec& spec);
absl::StatusOr<optim::OptimizerConfig> JobOptimizerConfig(const JobSpec& spec);

}  // namespace bertps

#endif  // BERTPS_COMMON_CLUSTER_JOB_SPEC_H_

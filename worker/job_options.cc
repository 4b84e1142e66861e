#include "worker/job_options.h"

#include "common/digest.h"
#include "common/status.h"
#include "common/cluster/job_plan.h"
#include "common/cluster/job_spec.h"
#include "google/protobuf/text_format.h"

namespace bertps {
namespace {

BertTask TaskOf(const JobSpec& spec) {
  return spec.task() == CLASSIFY ? BertTask::kClassify : BertTask::kPretrain;
}

}  // namespace

absl::StatusOr<TrainWorkerOptions> TrainWorkerOptionsFromSpec(
    const JobSpec& spec, int worker, const std::vector<std::string>& ps) {
  TrainWorkerOptions o;
  o.ps.addresses = ps;
  ASSIGN_OR_RETURN(o.config, JobModelConfig(spec));
  o.task = TaskOf(spec);
  o.plan = PlanOf(spec);
  o.worker = worker;
  o.data.assign(spec.data().begin(), spec.data().end());
  o.seed = spec.seed();
  o.precision = spec.precision() == BF16 ? kernels::Precision::kBf16
                                         : kernels::Precision::kFp32;
  o.pull_fp32 = spec.pull_fp32();
  o.dropout = !spec.no_dropout();
  o.shuffle = !spec.no_shuffle();
  o.checkpoint_dir = spec.checkpoint().dir();
  o.synchronous_checkpoints = spec.checkpoint().synchronous();
  // Provenance of its checkpoints: the spec as this job runs it.
  std::string text;
  google::protobuf::TextFormat::PrintToString(spec, &text);
  o.ps.spec_sha256 = Sha256Hex(text);
  o.export_path = spec.export_path();
  o.export_hf.label_names.assign(spec.label_names().begin(),
                                 spec.label_names().end());
  o.export_hf.vocab_path = spec.vocab();
  o.export_hf.do_lower_case = !spec.vocab_cased();
  return o;
}

}  // namespace bertps

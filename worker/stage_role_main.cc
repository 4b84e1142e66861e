// Flags of `bertps_worker --role=stage` (the job flags --ps, --data,
// --config, --task, --batch, --steps, --seed, --dropout, --spec,
// --rpc_timeout_s and --log_every are worker_main.cc's; the job's spec is
// built there, its pipeline here):
//
//   bertps_worker --role=stage --ps 127.0.0.1:7000 --stage_index 0
//       --num_stages 2 --replica 0 --num_replicas 1
//       --listen 127.0.0.1:7600 --peers 127.0.0.1:7600,127.0.0.1:7601
//       --micro_batches 4 --schedule 1f1b --data 'data/*.tfrecord'
//       --config mini --batch 32 --steps 1000
//
// The shards run BSP with --workers num_replicas --stages num_stages.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <iostream>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cluster/job_plan.h"
#include "common/flag_checks.h"
#include "common/cluster/job_spec.h"
#include "common/model/bert_config.h"
#include "common/signals.h"
#include "common/timeouts.h"
#include "worker/pipeline_stage.h"
#include "worker/stage_role.h"

#include <atomic>

#include "common/signals.h"

ABSL_DECLARE_FLAG(std::string, ps);
ABSL_DECLARE_FLAG(int, batch);
ABSL_DECLARE_FLAG(int, rpc_timeout_s);
ABSL_DECLARE_FLAG(int64_t, log_every);

ABSL_FLAG(int, stage_index, 0, "Stage role: this stage's index.");
ABSL_FLAG(int, num_stages, 2, "Stage role: pipeline stages per replica.");
ABSL_FLAG(int, replica, 0, "Stage role: this data-parallel replica.");
ABSL_FLAG(int, num_replicas, 1, "Stage role: data-parallel replicas.");
ABSL_FLAG(std::string, peers, "",
          "Stage role: comma-separated StageService addresses of this "
          "replica's stages, by stage index.");
ABSL_FLAG(std::string, listen, "",
          "Stage role: this stage's StageService address (default: its "
          "entry in --peers).");
ABSL_FLAG(int, micro_batches, 4, "Stage role: micro-batches per step.");
ABSL_FLAG(std::string, schedule, "1f1b", "Stage role: gpipe or 1f1b.");
ABSL_FLAG(std::string, layers_per_stage, "",
          "Stage role: comma-separated encoder layers per stage (default: "
          "balanced by compute).");
ABSL_FLAG(int, stage_recv_timeout_s,
          bertps::FlagSeconds(bertps::kStageRecvTimeout),
          "Stage role: longest wait for a neighbouring stage's message (at "
          "least --rpc_timeout_s: the neighbour may be in a pull that long).");

namespace bertps {

int RunStageRole(const SecurityConfig& security, JobSpec job, bool from_file) {
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "bertps_worker: %s\n", s.ToString().c_str());
    return 1;
  };
  FlagChecks checks("bertps_worker");
  const int num_stages = absl::GetFlag(FLAGS_num_stages);
  const int num_replicas = absl::GetFlag(FLAGS_num_replicas);
  checks.Range("num_stages", num_stages, 1, 64)
      .Range("stage_index", absl::GetFlag(FLAGS_stage_index), 0,
             std::max(num_stages - 1, 0))
      .Range("num_replicas", num_replicas, 1, 4096)
      .Range("replica", absl::GetFlag(FLAGS_replica), 0,
             std::max(num_replicas - 1, 0))
      .Range("micro_batches", absl::GetFlag(FLAGS_micro_batches), 1,
             absl::GetFlag(FLAGS_batch))
      .Range("stage_recv_timeout_s", absl::GetFlag(FLAGS_stage_recv_timeout_s),
             1, 86400);
  if (!checks.ok()) return checks.Fail();
  PipelineStageOptions o;
  o.ps.addresses =
      absl::StrSplit(absl::GetFlag(FLAGS_ps), ',', absl::SkipEmpty());
  o.ps.rpc_timeout = absl::Seconds(absl::GetFlag(FLAGS_rpc_timeout_s));
  o.ps.security = security;
  if (!from_file) {
    // The pipeline of the job flags' spec.
    job.set_num_workers(num_replicas);
    PipelineSpec* p = job.mutable_pipeline();
    p->set_stages(num_stages);
    p->set_micro_batches(absl::GetFlag(FLAGS_micro_batches));
    p->set_schedule(absl::GetFlag(FLAGS_schedule));
    for (absl::string_view n :
         absl::StrSplit(absl::GetFlag(FLAGS_layers_per_stage), ',',
                        absl::SkipEmpty())) {
      int v = 0;
      if (!absl::SimpleAtoi(n, &v)) {
        return fail(absl::InvalidArgumentError(
            absl::StrCat("--layers_per_stage: '", n, "' is not a number")));
      }
      p->add_layers_per_stage(v);
    }
  }
  auto config = JobModelConfig(job);
  if (!config.ok()) return fail(config.status());
  o.config = *config;
  o.task = job.task() == CLASSIFY ? BertTask::kClassify : BertTask::kPretrain;
  o.plan = PlanOf(job);
  o.stage = absl::GetFlag(FLAGS_stage_index);
  o.replica = absl::GetFlag(FLAGS_replica);
  o.peers = absl::StrSplit(absl::GetFlag(FLAGS_peers), ',', absl::SkipEmpty());
  if (static_cast<int>(o.peers.size()) != o.plan.stages) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("--peers names ", o.peers.size(), " addresses for ",
                     o.plan.stages, " stages")));
  }
  o.listen = absl::GetFlag(FLAGS_listen);
  if (o.listen.empty() && o.stage >= 0 && o.stage < o.plan.stages) {
    o.listen = o.peers[o.stage];
  }
  o.micro_batches = job.pipeline().micro_batches();
  auto schedule = ParsePipelineSchedule(job.pipeline().schedule());
  if (!schedule.ok()) return fail(schedule.status());
  o.schedule = *schedule;
  o.layers_per_stage.assign(job.pipeline().layers_per_stage().begin(),
                            job.pipeline().layers_per_stage().end());
  o.data.assign(job.data().begin(), job.data().end());
  o.seed = job.seed();
  o.dropout = !job.no_dropout();
  o.shuffle = !job.no_shuffle();
  o.precision = job.precision() == BF16 ? kernels::Precision::kBf16
                                        : kernels::Precision::kFp32;
  o.pull_fp32 = job.pull_fp32();
  o.recv_timeout = absl::Seconds(absl::GetFlag(FLAGS_stage_recv_timeout_s));
  o.log_every = absl::GetFlag(FLAGS_log_every);
  o.log = &std::cout;
  // SIGTERM / SIGINT: stop after the current step, exit 0.
  std::atomic<bool> cancel{false};
  CancelOnShutdownSignal(&cancel);
  o.cancel = &cancel;
  o.ps.cancel = &cancel;
  auto stage = PipelineStage::Create(o);
  if (!stage.ok()) return cancel ? 0 : fail(stage.status());
  std::printf("stage %d of replica %d on %s\n", o.stage, o.replica,
              (*stage)->address().c_str());
  std::fflush(stdout);
  absl::Status st = (*stage)->Run();
  if (cancel) {
    std::printf("stopped by a signal\n");
    return 0;
  }
  if (!st.ok()) return fail(st);
  return 0;
}

}  // namespace bertps

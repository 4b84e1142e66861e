#include "worker/stage_member.h"

#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/crash_point.h"
#include "common/model/params.h"
#include "common/status.h"
#include "glog/logging.h"
#include "common/cluster/job_plan.h"
#include "common/cluster/job_spec.h"
#include "common/cluster/path_policy.h"
#include "worker/pipeline_stage.h"

namespace bertps {

absl::StatusOr<std::unique_ptr<StageMember>> StageMember::Create(
    const std::string& coordinator, const std::string& listen,
    const SecurityConfig& security) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen: '", listen, "' is not HOST:PORT"));
  }
  // One server for every part this daemon runs, for its whole life (port
  // 0: a free one, chosen now so the coordinator can hand it to the peers).
  ASSIGN_OR_RETURN(std::unique_ptr<StageRouter> router,
                   StageRouter::Start(listen, security));
  std::string host = listen.substr(0, colon);
  if (host == "0.0.0.0" || host == "[::]") host = "127.0.0.1";
  std::string address = absl::StrCat(host, ":", router->port());
  return std::unique_ptr<StageMember>(new StageMember(
      coordinator, std::move(address), security, std::move(router)));
}

StageMember::StageMember(const std::string& coordinator, std::string address,
                         const SecurityConfig& security,
                         std::unique_ptr<StageRouter> router)
    : address_(std::move(address)),
      security_(security),
      router_(std::move(router)),
      member_(coordinator, STAGE_ROLE, address_, security,
              [this](const Assignment& a, std::atomic<bool>* cancel,
                     const std::function<void(const StepReport&)>& report,
                     const std::shared_ptr<SlotFeed>&) {
                return RunPart(a, cancel, report);
              }) {
  // The coordinator checks that the address this member registers with is
  // served by this process.
  router_->ServeHealthService(member_.instance_service());
  // The stage router checks its peers' capabilities with the coordinator's
  // key, and refuses revoked members.
  member_.set_on_assignment([this](const Assignment& a) {
    if (a.capability_key().empty()) return;
    if (absl::Status st = router_->verifier().AddKey(a.capability_key());
        !st.ok()) {
      LOG(ERROR) << "the coordinator's capability key: " << st;
    }
    router_->verifier().SetRevoked(std::set<std::string>(
        a.revoked_members().begin(), a.revoked_members().end()));
  });
}

absl::Status StageMember::RunPart(
    const Assignment& a, std::atomic<bool>* cancel,
    const std::function<void(const StepReport&)>& report) {
  RETURN_IF_ERROR(CheckAssignmentPaths(a));  // before anything is opened
  const JobSpec& spec = a.spec();
  PipelineStageOptions o;
  o.plan = PlanOf(spec);
  const JobPlan& plan = o.plan;
  o.ps.addresses.assign(a.ps_addresses().begin(), a.ps_addresses().end());
  o.ps.security = security_;
  o.ps.incarnation = a.incarnation();
  o.ps.job_id = a.job_id();
  o.ps.job_key = a.job_key();
  o.ps.capability = member_.capability();
  o.ps.layout = a.ps_layout();
  o.ps.cancel = cancel;
  ASSIGN_OR_RETURN(o.config, JobModelConfig(spec));
  o.task = spec.task() == CLASSIFY ? BertTask::kClassify : BertTask::kPretrain;
  o.stage = plan.StageOf(a.index());
  o.replica = plan.ReplicaOf(a.index());
  o.peers.assign(a.peers().begin(), a.peers().end());
  o.listen = address_;
  o.router = router_.get();
  o.micro_batches = spec.pipeline().micro_batches();
  ASSIGN_OR_RETURN(o.schedule, ParsePipelineSchedule(spec.pipeline().schedule()));
  o.layers_per_stage.assign(spec.pipeline().layers_per_stage().begin(),
                            spec.pipeline().layers_per_stage().end());
  o.data.assign(spec.data().begin(), spec.data().end());
  o.seed = spec.seed();
  o.dropout = !spec.no_dropout();
  o.shuffle = !spec.no_shuffle();
  o.precision = spec.precision() == BF16 ? kernels::Precision::kBf16
                                         : kernels::Precision::kFp32;
  o.pull_fp32 = spec.pull_fp32();
  for (const DataFile& f : a.data_files()) {
    o.expected_files.push_back({f.path(), f.bytes(), f.records()});
  }
  o.cancel = cancel;
  const bool leader = o.stage == 0 && o.replica == 0;
  PipelineStage* stage = nullptr;
  absl::Status side;  // a failed checkpoint (reported at the end)
  o.on_step = [&](const StageStepReport& r) {
    StepReport s;
    s.set_step(r.step);
    s.set_version(r.version);
    s.set_loss(r.loss);
    s.set_learning_rate(r.learning_rate);
    if (o.stage == plan.stages - 1) s.set_examples(plan.examples_per_push);
    s.set_pull_ms(r.pull_ms);
    s.set_pull_bytes(r.pull_bytes);
    s.set_compute_ms(r.compute_ms);
    s.set_precision(r.precision == kernels::Precision::kBf16 ? BF16 : F32);
    s.set_push_ms(r.push_ms);
    s.set_wait_ms(r.wait_ms);
    if (leader && plan.CheckpointDue(r.step + 1) && side.ok()) {
      CrashPoint("leader_checkpoint", r.step + 1, 0);
      // (Unless the shards are past it: a slot being taken back runs on two
      // members for a moment, and the other one wrote it.)
      absl::StatusOr<std::optional<std::string>> m =
          stage->client()->CheckpointUnlessPast(spec.checkpoint().dir(),
                                                r.step + 1);
      if (m.ok()) {
        if (m->has_value()) s.set_checkpoint(**m);
      } else {
        side = m.status();
        *cancel = true;
      }
    }
    report(s);
  };
  // A leader started again at a checkpoint's step (or at the last one) may
  // have ended between that step and its checkpoint: the checkpoint is
  // written now (the same bits again if it was), so none is skipped. The
  // shards hold that version until this slot pushes the next step (BSP); if
  // they are past it, or one holds this stage's push of it, the member that
  // pushed it wrote it (a slot taken back may run briefly on both; after a
  // failover a shard holding that push may be inside the step, waiting for
  // the promoted peer, which waits for this push again).
  o.on_start = [&](int64_t start) -> absl::Status {
    if (!leader || !plan.CheckpointDue(start)) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::optional<std::string> m,
                     stage->client()->CheckpointUnlessPast(
                         spec.checkpoint().dir(), start, stage->ps_worker()));
    if (!m.has_value()) return absl::OkStatus();
    StepReport s;
    s.set_step(start - 1);
    s.set_version(start);
    s.set_checkpoint(*m);
    s.set_checkpoint_version(start);
    report(s);
    return absl::OkStatus();
  };
  ASSIGN_OR_RETURN(std::unique_ptr<PipelineStage> p, PipelineStage::Create(o));
  stage = p.get();
  absl::Status run = p->Run();
  if (!side.ok()) return Annotate(side, "checkpoint");
  RETURN_IF_ERROR(run);
  if (leader && !spec.export_path().empty()) {
    // Wait for the last step everywhere, then export the whole model.
    std::vector<float> scratch(ParamLayout::ForBert(o.config, o.task).total_size());
    RETURN_IF_ERROR(p->client()->Pull(p->ps_worker(), plan.updates,
                                      plan.updates, scratch.data()).status());
    RETURN_IF_ERROR(p->client()->Export(spec.export_path()));
  }
  return absl::OkStatus();
}

}  // namespace bertps

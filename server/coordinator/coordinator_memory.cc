// The Coordinator's Memory: what a train job's members need (estimated at
// submit from the plan and the data's shape), and the members that can hold
// it. A job no registered member could ever hold is refused with the
// figures; otherwise it is placed only on members it fits, and waits,
// saying so, while none of those is idle. Members report their limit (the
// cgroup's, else the host's RAM) when they register.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cluster/job_spec.h"
#include "common/cluster/memory_plan.h"
#include "common/memory_limit.h"
#include "common/status.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_internal.h"

namespace bertps {

using coordinator_internal::StagesOf;

namespace coordinator_internal {

absl::StatusOr<MemoryEstimate> EstimateMemory(
    const JobSpec& spec, const std::vector<DataFile>& data_files) {
  MemoryEstimate e;
  if (spec.task() != PRETRAIN && spec.task() != CLASSIFY) return e;
  ASSIGN_OR_RETURN(BertConfig config, JobModelConfig(spec));
  ASSIGN_OR_RETURN(optim::OptimizerConfig opt, JobOptimizerConfig(spec));
  const BertTask task =
      spec.task() == CLASSIFY ? BertTask::kClassify : BertTask::kPretrain;
  const JobPlan plan = PlanOf(spec);
  ASSIGN_OR_RETURN(MemoryNeed shard,
                   ShardMemoryNeed(config, task, opt, plan.num_shards,
                                   plan.pushers));
  e.set_shard_bytes(shard.bytes);
  e.set_shard_detail(shard.detail);
  int64_t seq = 0, preds = 0;
  for (const DataFile& f : data_files) {
    seq = std::max<int64_t>(seq, f.seq_length());
    preds = std::max<int64_t>(preds, f.masked_positions());
  }
  if (plan.stages == 1 && seq > 0) {
    const MemoryNeed w =
        TrainWorkerMemoryNeed(config, task, plan.batch, seq, preds);
    e.set_worker_bytes(w.bytes);
    e.set_worker_detail(w.detail);
  }
  return e;
}

}  // namespace coordinator_internal

bool Coordinator::FitsLocked(const Member& m, const Job& job,
                             int parts) const {
  const MemoryEstimate& e = job.status.memory();
  if (m.role == PS) return FitsMemory(e.shard_bytes(), m.memory_limit);
  if (m.role == TRAIN) {
    // Several slots of a job whose slots run serially need one model.
    if (PlanOf(job.status.spec()).SerialSlots()) parts = 1;
    return FitsMemory(e.worker_bytes() * parts, m.memory_limit);
  }
  return true;
}

absl::Status Coordinator::CheckMemberMemoryLocked(
    const JobSpec& spec, const MemoryEstimate& need) const {
  struct Part {
    Role role;
    int64_t bytes;
    const std::string& detail;
    const char* what;
    const char* daemon;
  };
  const Part parts[] = {
      {PS, need.shard_bytes(), need.shard_detail(), "parameter-server shard",
       "parameter-server"},
      {TRAIN, StagesOf(spec) > 1 ? 0 : need.worker_bytes(),
       need.worker_detail(), "train worker", "train"}};
  for (const Part& p : parts) {
    if (p.bytes <= 0) continue;
    const Member* largest = nullptr;
    bool may_fit = false;
    for (const auto& [id, m] : members_) {
      if (!m.alive || m.role != p.role) continue;
      if (FitsMemory(p.bytes, m.memory_limit)) {
        may_fit = true;  // one can (or, limit unknown, may) hold it
        break;
      }
      if (largest == nullptr || m.memory_limit > largest->memory_limit) {
        largest = &m;
      }
    }
    if (may_fit || largest == nullptr) continue;  // none registered yet: wait
    return absl::ResourceExhaustedError(absl::StrCat(
        "job spec: each ", p.what, " needs ~", FormatBytes(p.bytes), " (",
        p.detail, "), over ", static_cast<int>(kMemoryHeadroom * 100),
        "% of what any registered ", p.daemon,
        " daemon may use (the largest: ", FormatBytes(largest->memory_limit),
        ", ", largest->memory_source, ", member ", largest->id, ")"));
  }
  return absl::OkStatus();
}

bool Coordinator::IsSurvivor(const Member& m, const Job& job) {
  return m.alive && m.job == job.status.id() && m.role == TRAIN && m.index >= 0;
}

bool Coordinator::CanTakeOverLocked(const Member& m, const Job& job) const {
  // Its own slot, those it holds already, and one more must fit; not a
  // member that drains.
  return IsSurvivor(m, job) && !DrainWanted(m) &&
         FitsLocked(m, job, static_cast<int>(m.also.size()) + 2);
}

bool Coordinator::SurvivorCanTakeOverLocked(const Job& job) const {
  bool survivor = false;
  for (const auto& [id, m] : members_) {
    if (!IsSurvivor(m, job)) continue;
    survivor = true;
    if (CanTakeOverLocked(m, job)) return true;
  }
  return !survivor;
}

std::string Coordinator::TooSmallLocked(const Job& job, Role role) const {
  int small = 0;
  int64_t largest = 0;
  for (const auto& [id, m] : members_) {
    if (!m.alive || !m.job.empty() || m.role != role) continue;
    if (FitsLocked(m, job)) continue;
    ++small;
    largest = std::max(largest, m.memory_limit);
  }
  if (small == 0) return "";
  const MemoryEstimate& e = job.status.memory();
  return absl::StrCat(
      "; ", small, " idle ", role == PS ? "parameter-server" : "train",
      " daemon(s) have too little memory (", role == PS ? "a shard" : "a worker",
      " needs ~",
      FormatBytes(role == PS ? e.shard_bytes() : e.worker_bytes()),
      ", over ", static_cast<int>(kMemoryHeadroom * 100), "% of at most ",
      FormatBytes(largest), ")");
}

}  // namespace bertps

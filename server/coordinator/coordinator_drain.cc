// Draining members on request (JobService.DrainMember) or on their own
// (HeartbeatRequest.draining, e.g. SIGTERM): the member is told on its next
// heartbeat (Assignment.drain), leaves, and its work goes to the others at
// once (coordinator_members.cc's leave path); a train member of a BSP job
// without backup workers first hands its slots over at the others' next
// step boundary (StartHandOffLocked).
#include <string>

#include "absl/strings/str_cat.h"
#include "common/cluster/job_plan.h"
#include "common/audit.h"
#include "common/status.h"
#include "glog/logging.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_internal.h"

namespace bertps {

absl::StatusOr<DrainMemberResponse> Coordinator::Drain(
    const std::string& member_id, const Caller& caller, bool force) {
  if (!caller.admin || !caller.team.empty()) {
    AuditRefusal(kRefusedTeam,
                 absl::StrCat("team ", caller.team, ", token ", caller.token),
                 absl::StrCat("drain of member ", member_id));
    return absl::PermissionDeniedError(
        "draining a member needs a cluster admin token (one without a team): "
        "a member may be running any team's job");
  }
  if (!force) RETURN_IF_ERROR(CheckDrainLeavesEnough(member_id));
  return Drain(member_id);
}

absl::StatusOr<DrainMemberResponse> Coordinator::Drain(
    const std::string& member_id) {
  absl::MutexLock l(&mu_);
  auto it = members_.find(member_id);
  if (it == members_.end()) {
    auto gone = drained_.find(member_id);
    if (gone != drained_.end()) return gone->second;  // drained, left
    return absl::NotFoundError(absl::StrCat(
        "no member ", member_id,
        " (bertpsctl status JOB names the members of a job)"));
  }
  Member& m = it->second;
  DrainMemberResponse resp;
  resp.set_role(m.role);
  resp.set_job_id(m.job);
  resp.set_already(m.drain_requested);
  if (!m.drain_requested) {
    m.drain_requested = true;
    LOG(INFO) << "member " << m.id << " is drained by request";
    if (!m.job.empty()) {
      EventLocked(jobs_[m.job],
                  absl::StrCat("member ", m.id, " is drained by request: it "
                               "hands its work back and leaves"));
    }
  }
  return resp;
}

absl::StatusOr<RevokeMemberResponse> Coordinator::Revoke(
    const std::string& member_id, const Caller& caller) {
  if (!caller.admin || !caller.team.empty()) {
    AuditRefusal(kRefusedTeam,
                 absl::StrCat("team ", caller.team, ", token ", caller.token),
                 absl::StrCat("revocation of member ", member_id));
    return absl::PermissionDeniedError(
        "revoking a member needs a cluster admin token (one without a team)");
  }
  absl::MutexLock l(&mu_);
  auto it = members_.find(member_id);
  if (it == members_.end()) {
    auto gone = revoked_.find(member_id);
    if (gone != revoked_.end()) return gone->second;
    return absl::NotFoundError(absl::StrCat(
        "no member ", member_id,
        " (bertpsctl status JOB names the members of a job)"));
  }
  Member& m = it->second;
  RevokeMemberResponse resp;
  resp.set_role(m.role);
  resp.set_job_id(m.job);
  LOG(WARNING) << "member " << m.id << " is revoked by an admin ("
               << caller.token << ")";
  if (!m.job.empty()) {
    Job& job = jobs_[m.job];
    job.revoked.insert(m.id);  // the shards refuse its capability
    EventLocked(job, absl::StrCat("member ", m.id, " is revoked by an admin: "
                                  "its work goes to the others"));
    LoseMemberLocked(m, "was revoked by an admin");
  }
  members_.erase(it);  // its credential with it
  resp.set_already(true);
  if (revoked_.emplace(member_id, resp).second) {
    revoked_order_.push_back(member_id);
  }
  while (revoked_order_.size() > kDrainedKept) {
    revoked_.erase(revoked_order_.front());
    revoked_order_.pop_front();
  }
  resp.set_already(false);
  return resp;
}

absl::Status Coordinator::CheckDrainLeavesEnough(
    const std::string& member_id) const {
  absl::MutexLock l(&mu_);
  auto it = members_.find(member_id);
  if (it == members_.end() || it->second.job.empty() ||
      it->second.drain_requested) {
    return absl::OkStatus();  // answered by Drain (unknown, idle, again)
  }
  const Member& m = it->second;
  const Job& job = jobs_.at(m.job);
  if (job.status.state() != RUNNING) return absl::OkStatus();
  const std::string force =
      "; drain it anyway with --force (DrainMemberRequest.force)";
  if (m.role == TRAIN) {
    int others = 0;
    for (const auto& [id, o] : members_) {
      if (id != m.id && o.role == TRAIN && o.job == m.job && o.alive &&
          !o.drain_requested) {
        ++others;
      }
    }
    const int min = coordinator_internal::MinWorkersOf(job.status.spec());
    if (others < min) {
      return absl::FailedPreconditionError(absl::StrCat(
          "draining member ", m.id, " leaves job ", m.job, " with ", others,
          " train daemon(s), below its min_workers ", min,
          ": its slots have no member until another train daemon joins (or "
          "the job restarts from its checkpoint when none does in time)",
          force));
    }
  }
  if (m.role == PS && !m.backup && m.index >= 0 &&
      m.index < static_cast<int>(job.backups.size()) &&
      job.backups[m.index].empty()) {
    // An idle shard daemon joins as its backup and takes the index over.
    for (const auto& [id, o] : members_) {
      if (MayTakeWorkLocked(o) && o.job.empty() && o.role == PS &&
          FitsLocked(o, job) && !DaemonHoldsIndexLocked(job, m.index, o)) {
        return absl::OkStatus();
      }
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "member ", m.id, " is the primary of shard ", m.index, " of job ",
        m.job, " and has no backup, and no idle shard daemon can join as "
        "one: draining it restarts the job from its checkpoint (start a "
        "shard daemon to have its index handed over instead)",
        force));
  }
  return absl::OkStatus();
}

void Coordinator::StartHandOffLocked(Member& d) {
  if (d.hand_off_started || d.role != TRAIN || d.job.empty()) return;
  d.hand_off_started = true;
  auto jit = jobs_.find(d.job);
  if (jit == jobs_.end()) return;
  Job& job = jit->second;
  if (job.status.state() != RUNNING || job.training_done ||
      !PlanOf(job.status.spec()).SerialSlots() ||
      !ShardsReadyLocked(job)) {
    return;
  }
  bool changed = false;
  for (int k : HeldSlots(d)) {
    // Slot 0 is not handed: its holder writes the checkpoints and the
    // export, which two members must not write at once; it is freed when
    // the member leaves, as on any leave.
    if (k <= 0 || k >= static_cast<int>(job.slots.size()) ||
        job.slots[k] != d.id || job.slot_done[k]) {
      continue;
    }
    Member* host = nullptr;
    for (auto& [id, h] : members_) {
      if (id == d.id || DrainWanted(h) || !CanTakeOverLocked(h, job)) continue;
      if (host == nullptr || h.also.size() < host->also.size() ||
          (h.also.size() == host->also.size() && h.index < host->index)) {
        host = &h;
      }
    }
    if (host == nullptr) break;  // freed when it leaves
    host->also[k] = NowMs();
    host->handed.insert(k);
    host->told = false;
    job.slots[k] = host->id;
    job.handing[k] = d.id;
    changed = true;
    EventLocked(job, absl::StrCat(
                         "worker ", k, " is handed from member ", d.id,
                         " (draining) to member ", host->id, " (worker ",
                         host->index, "): it takes it at its next step "
                         "boundary, member ", d.id, " computes it until then "
                         "and leaves once every slot it held is taken"));
  }
  if (changed) UpdateSlotHoldersLocked(job);
}

bool Coordinator::HandingLocked(const Member& d) const {
  if (d.job.empty()) return false;
  auto jit = jobs_.find(d.job);
  if (jit == jobs_.end()) return false;
  const Job& job = jit->second;
  if (d.role == PS) {
    // A primary with no backup yet while one joins: it leaves once that
    // one caught up (then the index fails over to it, no restart).
    const int i = d.index;
    return !d.backup && job.status.state() == RUNNING && i >= 0 &&
           i < static_cast<int>(job.backups.size()) &&
           i < static_cast<int>(job.joining.size()) &&
           job.backups[i].empty() && !job.joining[i].empty();
  }
  for (const auto& [k, id] : jit->second.handing) {
    if (id == d.id) return true;
  }
  return false;
}

void Coordinator::HandedLocked(Job& job, const std::string& holder, int k) {
  auto it = job.handing.find(k);
  if (it == job.handing.end() || k >= static_cast<int>(job.slots.size()) ||
      job.slots[k] != holder) {
    return;
  }
  const std::string from = it->second;
  job.handing.erase(it);
  auto h = members_.find(holder);
  if (h != members_.end()) h->second.handed.erase(k);
  auto d = members_.find(from);
  if (d == members_.end()) return;
  d->second.told = false;
  if (!HandingLocked(d->second)) {
    EventLocked(job, absl::StrCat("member ", from, " handed every slot it "
                                  "held over (the last, worker ", k,
                                  ", to member ", holder, "): it leaves"));
  }
}

void Coordinator::EndHandOffsLocked(Job& job, const Member& d) {
  for (auto it = job.handing.begin(); it != job.handing.end();) {
    if (it->second != d.id) {
      ++it;
      continue;
    }
    const int k = it->first;
    it = job.handing.erase(it);
    if (k >= static_cast<int>(job.slots.size())) continue;
    auto h = members_.find(job.slots[k]);
    if (h == members_.end() || h->second.handed.erase(k) == 0) continue;
    h->second.told = false;
    EventLocked(job, absl::StrCat(
                         "member ", d.id, " left before member ", h->first,
                         " computed worker ", k, " it handed over: member ",
                         h->first, " computes it from the shards' step"));
  }
}

void Coordinator::RememberDrainedLocked(const Member& m,
                                        const std::string& job) {
  DrainMemberResponse r;
  r.set_role(m.role);
  r.set_job_id(job);
  r.set_already(true);
  if (drained_.emplace(m.id, r).second) drained_order_.push_back(m.id);
  while (drained_order_.size() > kDrainedKept) {
    drained_.erase(drained_order_.front());
    drained_order_.pop_front();
  }
}

}  // namespace bertps

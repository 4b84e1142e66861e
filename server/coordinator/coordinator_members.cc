// The Coordinator's Members: a member lost (its shard, slots or lease taken
// back), the worker slots a train member holds (its own and those it took
// over), and probes of the shards a train member could not reach.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_internal.h"

namespace bertps {

using coordinator_internal::IsPool;
using coordinator_internal::StagesOf;

void Coordinator::LoseMemberLocked(Member& m, const std::string& how) {
  if (m.job.empty()) return;
  if (IsPool(m.role)) {
    ReleaseLocked(m);
    return;
  }
  Job& job = jobs_[m.job];
  if (m.role == PS && m.backup) {  // the index runs with fewer backups
    DropBackupLocked(job, m, how);
    return;
  }
  const int index = m.index;
  if (m.role == TRAIN && job.status.state() == RUNNING) {
    FreeSlotsLocked(job, m, how);
  }
  m.job.clear();
  m.index = -1;
  m.also.clear();
  if (job.status.state() != RUNNING || index < 0) return;
  if (job.training_done) {  // only eval rounds remain: no shard is needed
    EventLocked(job, absl::StrCat(Role_Name(m.role), " ", index, " (member ",
                                  m.id, ") ", how, " after training"));
    return;
  }
  if (m.role == PS) {
    if (index < static_cast<int>(job.shards.size()) &&
        job.shards[index] == m.id) {
      if (FailOverLocked(job, index, m, how)) return;  // no restart
      job.shards[index].clear();
      job.status.set_ps_addresses(index, "");
    }
    RestartLocked(job, absl::StrCat("parameter-server shard ", index,
                                    " (member ", m.id, " at ", m.address,
                                    ") ", how));
  } else if (m.role == STAGE_ROLE) {
    const int S = StagesOf(job.status.spec());
    if (index < static_cast<int>(job.slots.size())) job.slots[index].clear();
    RestartLocked(job, absl::StrCat("pipeline stage ", index % S,
                                    " of replica ", index / S, " (member ",
                                    m.id, " at ", m.address, ") ", how));
  }
}

int Coordinator::SlotOfLocked(const Member& m, int slot) {
  if (slot < 0) return -1;
  if (slot == m.index) return slot;
  return m.also.count(slot) > 0 ? slot : -1;
}

void Coordinator::FreeSlotsLocked(Job& job, Member& m, const std::string& how) {
  std::vector<int> held = {m.index};
  for (const auto& [k, since] : m.also) held.push_back(k);
  job.slot_free_since.resize(job.slots.size(), absl::InfiniteFuture());
  for (int k : held) {
    if (k < 0 || k >= static_cast<int>(job.slots.size()) ||
        job.slots[k] != m.id) {
      continue;
    }
    job.slots[k].clear();
    job.slot_free_since[k] = options_.now();
    if (job.training_done) continue;
    EventLocked(job, k == m.index
                         ? absl::StrCat("worker ", k, " (member ", m.id, ") ",
                                        how, "; its slot is free")
                         : absl::StrCat("worker ", k, " (taken over by member ",
                                        m.id, ") ", how, "; its slot is free"));
  }
  UpdateSlotHoldersLocked(job);
}

void Coordinator::RecordReportsLocked(Job& job, const Member& m,
                                      const HeartbeatRequest& r) {
  for (const StepReport& s : r.steps()) {
    const int slot = SlotOfLocked(m, s.has_slot() ? s.slot() : m.index);
    if (slot >= 0) RecordLocked(job, slot, s);
    if (slot >= 0 && job.status.spec().precision() == BF16 &&
        s.precision() != BF16 && job.fp32_members.insert(m.id).second) {
      EventLocked(job, absl::StrCat(
                           "worker ", slot, " (member ", m.id,
                           ") computes in F32, not BF16: its CPU has no "
                           "native bf16 (AMX or AVX512-BF16)"));
      UpdateSlotHoldersLocked(job);
    }
  }
}

void Coordinator::QueueProbesLocked(Job& job, const Member& reporter,
                                    const std::string& why) {
  if (!options_.probe || job.training_done) return;
  const absl::Time now = options_.now();
  if (now - job.last_probe < absl::Seconds(1)) return;
  job.last_probe = now;
  for (const std::string& id : job.shards) {
    auto it = members_.find(id);
    if (it == members_.end() || !it->second.alive) continue;
    probes_.push_back({job.status.id(), id, it->second.address,
                       absl::StrCat("member ", reporter.id, " could not reach "
                                    "the shards (", why, ")"),
                       job.status.incarnation()});
  }
}

void Coordinator::ProbeMembers() {
  std::vector<Probe> probes;
  {
    absl::MutexLock l(&mu_);
    probes.swap(probes_);
  }
  for (const Probe& p : probes) {
    // Outside the lock: heartbeats and requests go on meanwhile.
    absl::Status st = options_.probe(p.address);
    if (st.ok()) continue;
    absl::MutexLock l(&mu_);
    auto m = members_.find(p.member);
    auto job = jobs_.find(p.job);
    if (m == members_.end() || !m->second.alive || m->second.job != p.job ||
        job == jobs_.end() || job->second.status.incarnation() != p.incarnation) {
      continue;  // already handled, or another start of the job
    }
    // A probe that ran out of time proves nothing of a member that keeps
    // heartbeating (a loaded host or a full link answers late): it is a
    // verdict only once the member was silent for 3 heartbeat intervals too.
    // Refused or not serving is a verdict at once.
    if (st.code() == absl::StatusCode::kDeadlineExceeded &&
        options_.now() - m->second.last_seen <
            3 * absl::Milliseconds(heartbeat_interval_ms_)) {
      LOG(INFO) << "member " << p.member << " at " << p.address
                << " answered no probe in time but heartbeats: not lost ("
                << st << ")";
      continue;
    }
    LOG(WARNING) << "member " << p.member << " at " << p.address
                 << " failed a probe: " << st;
    m->second.alive = false;
    LoseMemberLocked(m->second,
                     absl::StrCat("did not answer a probe (", st.message(),
                                  ") after ", p.why));
    TickLocked();
  }
}

}  // namespace bertps

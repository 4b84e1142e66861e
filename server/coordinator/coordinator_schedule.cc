// The Coordinator's Scheduling: starting queued jobs on idle members, refilling a running
// job's shard indices and worker slots, and what a job waits for.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/memory_limit.h"
#include "glog/logging.h"
#include "common/security.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_internal.h"

namespace bertps {

using coordinator_internal::StagesOf;
using coordinator_internal::kLedgerWait;
using coordinator_internal::HasEval;
using coordinator_internal::IsElastic;
using coordinator_internal::MinWorkersOf;

std::string Coordinator::RunningWaitLocked(const Job& job) const {
  if (job.training_done) {
    return job.ledger_version < job.status.progress().total_steps()
               ? kLedgerWait
               : "";
  }
  std::vector<std::string> shards, slots;
  for (size_t i = 0; i < job.shards.size(); ++i) {
    if (job.shards[i].empty()) shards.push_back(absl::StrCat(i));
  }
  for (size_t i = 0; i < job.slots.size(); ++i) {
    if (job.slots[i].empty() && !job.slot_done[i]) {
      slots.push_back(absl::StrCat(i));
    }
  }
  const bool stages = StagesOf(job.status.spec()) > 1;
  std::string what;
  if (!shards.empty()) {
    what = absl::StrCat("an idle parameter-server daemon for shard",
                        shards.size() > 1 ? "s " : " ",
                        absl::StrJoin(shards, ", "), TooSmallLocked(job, PS));
  }
  if (!slots.empty()) {
    const absl::Duration takeover_after =
        options_.slot_takeover_after < absl::ZeroDuration()
            ? options_.member_timeout
            : options_.slot_takeover_after;
    absl::StrAppend(
        &what, what.empty() ? "" : "; ", "an idle ",
        stages ? "stage daemon for slot" : "train worker for slot",
        slots.size() > 1 ? "s " : " ", absl::StrJoin(slots, ", "),
        " (the other workers wait at the next step",
        stages || takeover_after == absl::InfiniteDuration()
            ? ")"
        : !SurvivorCanTakeOverLocked(job)
            ? absl::StrCat("; no surviving worker has the memory to take a "
                           "slot over beside its own: each part needs ~",
                           FormatBytes(job.status.memory().worker_bytes()), ")")
            : absl::StrCat("; a surviving worker takes the slot over if none "
                           "registers within ",
                           absl::FormatDuration(takeover_after), ")"),
        TooSmallLocked(job, stages ? STAGE_ROLE : TRAIN));
  }
  if (what.empty() && !stages &&
      job.status.spec().consistency().mode() == BSP) {
    what = SlowSlotsLocked(job);
  }
  return what;
}

std::string Coordinator::SlowSlotsLocked(const Job& job) const {
  // Every member is there, yet a step can wait: for a worker whose pull or
  // push stalled, or that is far slower than the others. Named once the
  // newest step was first reported kSlowSlotAfter ago and the worker has
  // not reported it (the text stays the same while it waits: one event).
  const int64_t newest = job.newest_step;
  const absl::Time now = options_.now();
  if (newest < 0 || now - job.newest_step_at < kSlowSlotAfter) return "";
  std::vector<std::string> behind;
  for (const auto& [slot, r] : job.last_report) {
    if (r.step() >= newest) continue;
    const std::string& member =
        slot < static_cast<int>(job.slots.size()) ? job.slots[slot] : "";
    behind.push_back(absl::StrCat(slot, " (member ", member, ", last step ",
                                  r.step(), ")"));
  }
  if (behind.empty()) return "";
  return absl::StrCat(
      "slot", behind.size() > 1 ? "s " : " ", absl::StrJoin(behind, ", "),
      " to report step ", newest, ", which the other workers finished (",
      "a pull or push that stalled, or a worker far slower than the others; "
      "its RPCs time out after --rpc_timeout_s and start again)");
}

void Coordinator::SetWaitingLocked(Job& job, const std::string& what) {
  if (job.status.waiting() == what) return;
  if (what.empty()) {
    EventLocked(job, absl::StrCat("no longer waiting for ",
                                  job.status.waiting()));
    job.status.clear_waiting();
    job.status.clear_waiting_since_ms();
    return;
  }
  if (job.status.waiting().empty()) job.status.set_waiting_since_ms(NowMs());
  job.status.set_waiting(what);
  EventLocked(job, absl::StrCat("waiting for ", what));
}

void Coordinator::FillShardsLocked(Job& job) {
  for (size_t i = 0; i < job.shards.size(); ++i) {
    if (!job.shards[i].empty()) continue;
    for (auto& [id, m] : members_) {
      if (MayTakeWorkLocked(m) && m.job.empty() && m.role == PS &&
          FitsLocked(m, job) &&
          !DaemonHoldsIndexLocked(job, static_cast<int>(i), m)) {
        m.job = job.status.id();
        m.index = static_cast<int>(i);
        m.told = false;
        m.backup = false;
        m.applied = 0;
        job.shards[i] = m.id;
        job.status.set_ps_addresses(static_cast<int>(i), m.address);
        EventLocked(job, absl::StrCat("shard ", i, " is member ", m.id, " at ",
                                      m.address));
        break;
      }
    }
  }
}

void Coordinator::StartJobsLocked() {
  // Train jobs start in FIFO order (a later one waits for an earlier one's
  // members); PREPROCESS and EVAL jobs, which use the pools, start as soon
  // as their pool has a live member.
  bool train_blocked = false;
  for (auto qit = queue_.begin(); qit != queue_.end();) {
    Job& job = jobs_[*qit];
    if (job.status.state() != PENDING) {
      qit = queue_.erase(qit);
      continue;
    }
    const JobSpec& spec = job.status.spec();
    int pool[2] = {0, 0};  // live preprocess, eval members
    for (const auto& [id, m] : members_) {
      if (!m.alive) continue;
      if (m.role == PREPROCESS_ROLE) ++pool[0];
      if (m.role == EVAL_ROLE) ++pool[1];
    }
    if (spec.task() == PREPROCESS || spec.task() == EVAL) {
      if (pool[spec.task() == PREPROCESS ? 0 : 1] == 0) {
        SetWaitingLocked(job, spec.task() == PREPROCESS
                                  ? "a preprocess worker to register"
                                  : "an eval worker to register");
        ++qit;
        continue;
      }
      SetWaitingLocked(job, "");
      qit = queue_.erase(qit);
      job.status.set_state(RUNNING);
      job.status.set_start_time_ms(NowMs());
      if (spec.task() == EVAL) {
        AddRoundLocked(job, "final", 0, spec.eval_checkpoint());
      }
      EventLocked(job, absl::StrCat("running: ", job.work.size(), " item(s)"));
      continue;
    }
    if (train_blocked) {
      SetWaitingLocked(job, "the train jobs submitted before it to start");
      ++qit;
      continue;
    }
    // Pipeline jobs take num_workers replicas x stages stage members.
    const JobPlan plan = PlanOf(spec);
    const int S = plan.stages;
    const Role trainer = S > 1 ? STAGE_ROLE : TRAIN;
    std::vector<Member*> ps, train;
    for (auto& [id, m] : members_) {
      if (!MayTakeWorkLocked(m) || !m.job.empty() || !FitsLocked(m, job)) continue;
      if (m.role == PS) ps.push_back(&m);
      if (m.role == trainer) train.push_back(&m);
    }
    const int R = std::max(1, spec.replicas());
    const int trainers = MinWorkersOf(spec);  // elastic: min_workers
    if (static_cast<int>(ps.size()) < spec.num_ps_shards() * R ||
        static_cast<int>(train.size()) < trainers ||
        (HasEval(spec) && pool[1] == 0)) {
      train_blocked = true;  // FIFO: later train jobs wait for this one
      std::string members = absl::StrCat(
          ps.size(), "/", spec.num_ps_shards() * R, " idle parameter-server "
          "daemons", R > 1 ? absl::StrCat(" (", R, " replicas)") : "", ", ", train.size(), "/", trainers, " idle ",
          S > 1 ? "stage daemons" : "train workers");
      if (HasEval(spec) && pool[1] == 0) {
        absl::StrAppend(&members, ", an eval worker");
      }
      absl::StrAppend(&members, TooSmallLocked(job, PS),
                      TooSmallLocked(job, trainer), UnheardLocked(PS),
                      UnheardLocked(trainer));
      SetWaitingLocked(job, absl::StrCat("members: ", members));
      const std::string why = absl::StrCat("job ", *qit, " waits for ",
                                           members);
      if (why != last_wait_) {
        LOG(INFO) << why;
        last_wait_ = why;
      }
      ++qit;
      continue;
    }
    const std::vector<std::vector<Member*>> placed =
        PlaceShards(ps, spec.num_ps_shards(), R);
    if (placed.empty()) {
      train_blocked = true;
      std::set<std::string> daemons;
      for (const Member* m : ps) daemons.insert(DaemonOf(*m));
      SetWaitingLocked(
          job, absl::StrCat("members: ", ps.size(), " idle parameter-server "
                            "daemon slices in ", daemons.size(), " daemon(s); ",
                            R, " replicas of each of ", spec.num_ps_shards(),
                            " shard(s) need as many daemons per index (no two "
                            "replicas of one index in one daemon)"));
      ++qit;
      continue;
    }
    SetWaitingLocked(job, "");
    qit = queue_.erase(qit);
    job.shards.clear();
    job.status.clear_ps_addresses();
    job.ready_shards.clear();
    job.backups.assign(spec.num_ps_shards(), {});
    job.terms.assign(spec.num_ps_shards(), 0);
    job.joining.assign(spec.num_ps_shards(), {});
    // By index: its primary, then (replicas > 1) its R - 1 backups.
    for (int i = 0; i < spec.num_ps_shards(); ++i) {
      for (int k = 0; k < R; ++k) {
        Member* m = placed[i][k];
        m->job = job.status.id();
        m->index = i;
        m->told = false;
        m->backup = k > 0;
        m->joining = false;
        m->applied = 0;
        if (k > 0) {
          job.backups[i].push_back(m->id);
        } else {
          job.shards.push_back(m->id);
          job.status.add_ps_addresses(m->address);
        }
      }
    }
    UpdateShardReplicasLocked(job);
    job.slots.assign(plan.pushers, "");
    job.slot_done.assign(plan.pushers, false);
    job.slot_free_since.assign(plan.pushers, absl::InfiniteFuture());
    job.status.set_incarnation(job.status.incarnation() + 1);
    job.job_key = RandomSecret();
    job.shard_key = RandomSecret();
    job.revoked.clear();
    job.status.set_state(RUNNING);
    if (job.status.start_time_ms() == 0) job.status.set_start_time_ms(NowMs());
    FillSlotsLocked(job);
    EventLocked(job, absl::StrCat("running on ", spec.num_ps_shards(),
                                  " shard(s) and ", spec.num_workers(),
                                  " worker(s)",
                                  IsElastic(spec)
                                      ? absl::StrCat(" (elastic: ",
                                                     std::min<int>(
                                                         train.size(),
                                                         plan.pushers),
                                                     " train daemon(s) now)")
                                      : ""));
  }
}

void Coordinator::FillSlotsLocked(Job& job) {
  const Role trainer = StagesOf(job.status.spec()) > 1 ? STAGE_ROLE : TRAIN;
  const absl::Time now = options_.now();
  // An elastic job's slots without a daemon are computed by the others at
  // once: running on fewer daemons than slots is what it is for.
  const bool elastic = IsElastic(job.status.spec());
  const absl::Duration takeover_after =
      elastic ? absl::ZeroDuration()
      : options_.slot_takeover_after < absl::ZeroDuration()
          ? options_.member_timeout
          : options_.slot_takeover_after;
  job.slot_free_since.resize(job.slots.size(), absl::InfiniteFuture());
  auto idle = [&]() -> Member* {
    for (auto& [id, m] : members_) {
      if (MayTakeWorkLocked(m) && m.job.empty() && m.role == trainer &&
          FitsLocked(m, job)) {
        return &m;
      }
    }
    return nullptr;
  };
  const JobPlan plan = PlanOf(job.status.spec());
  auto slot_name = [&plan](int slot) {
    return plan.stages > 1
               ? absl::StrCat("pipeline stage ", plan.StageOf(slot),
                              " of replica ", plan.ReplicaOf(slot))
               : absl::StrCat("worker ", slot);
  };
  // JobStatus.slots is rebuilt only when a holder changed (this runs on
  // every heartbeat).
  bool changed = job.status.slots_size() != static_cast<int>(job.slots.size());
  auto assign = [&](Member& m, int i) {
    changed = true;
    m.job = job.status.id();
    m.told = false;
    m.index = i;
    job.slots[i] = m.id;
    job.slot_free_since[i] = absl::InfiniteFuture();
  };
  for (size_t k = 0; k < job.slots.size(); ++k) {
    const int i = static_cast<int>(k);
    if (job.slot_done[i]) {
      job.slot_free_since[i] = absl::InfiniteFuture();
      continue;
    }
    // (A slot taken over goes back to an idle daemon below, once the
    // slots with no holder have one.)
    if (!job.slots[i].empty()) continue;
    if (Member* m = idle()) {
      assign(*m, i);
      if (job.lost_stages.erase(i) > 0) {
        EventLocked(job, absl::StrCat(
                             slot_name(i), " is member ", m->id, " at ",
                             m->address, ": the replica's stages start the "
                             "step again with it, no restart"));
      } else {
        EventLocked(job, absl::StrCat("worker ", i, " is member ", m->id));
      }
      continue;
    }
    if (job.training_done) continue;
    if (job.slot_free_since[i] == absl::InfiniteFuture()) {
      job.slot_free_since[i] = now;
    }
    // A lost stage's slot no idle stage daemon took in time: the member
    // running the same stage of another replica computes it as well (the
    // fewest slots first); with none (one replica), the job restarts from
    // its checkpoint (and waits there for a stage daemon).
    auto lost = job.lost_stages.find(i);
    if (lost != job.lost_stages.end()) {
      if (takeover_after == absl::InfiniteDuration() ||
          now - job.slot_free_since[i] < takeover_after) {
        continue;
      }
      Member* host = nullptr;
      for (auto& [id, m] : members_) {
        if (!m.alive || m.job != job.status.id() || m.role != STAGE_ROLE ||
            m.index < 0 || plan.StageOf(m.index) != plan.StageOf(i) ||
            !FitsLocked(m, job, static_cast<int>(m.also.size()) + 2)) {
          continue;
        }
        if (host == nullptr || m.also.size() < host->also.size() ||
            (m.also.size() == host->also.size() && m.index < host->index)) {
          host = &m;
        }
      }
      if (host != nullptr) {
        host->also[i] = NowMs();
        changed = true;
        job.slots[i] = host->id;
        job.slot_free_since[i] = absl::InfiniteFuture();
        job.lost_stages.erase(lost);
        EventLocked(job, absl::StrCat(
                             slot_name(i), " is taken over by member ",
                             host->id, " (", slot_name(host->index),
                             "): no idle stage daemon registered within ",
                             absl::FormatDuration(takeover_after),
                             "; it computes both, slower, until one does; "
                             "the replica's stages start the step again, no "
                             "restart"));
        continue;
      }
      const std::string why = absl::StrCat(
          lost->second, "; no idle stage daemon took its slot, and no stage "
          "of another replica can, within ",
          absl::FormatDuration(takeover_after));
      if (changed) UpdateSlotHoldersLocked(job);
      RestartLocked(job, why);
      return;
    }
    // No idle member: after takeover_after, a surviving worker of the job
    // computes the slot as well (pipeline stages wait for a daemon).
    if (trainer != TRAIN) continue;
    if (takeover_after == absl::InfiniteDuration() ||
        now - job.slot_free_since[i] < takeover_after) {
      continue;
    }
    Member* host = nullptr;
    for (auto& [id, m] : members_) {
      if (!CanTakeOverLocked(m, job)) continue;
      if (host == nullptr || m.also.size() < host->also.size() ||
          (m.also.size() == host->also.size() && m.index < host->index)) {
        host = &m;
      }
    }
    if (host == nullptr) continue;  // no survivor: wait for a daemon
    host->also[i] = NowMs();
    changed = true;
    job.slots[i] = host->id;
    job.slot_free_since[i] = absl::InfiniteFuture();
    EventLocked(job, elastic
                         ? absl::StrCat("worker ", i, " is computed by member ",
                                        host->id, " (worker ", host->index,
                                        ") as well: the job is elastic and "
                                        "has no idle train daemon for it; a "
                                        "daemon that registers takes it")
                         : absl::StrCat(
                               "worker ", i, " is taken over by member ",
                               host->id, " (worker ", host->index,
                               "): no idle train daemon registered within ",
                               absl::FormatDuration(takeover_after),
                               "; it computes both slots, slower, until one "
                               "does"));
  }
  // Daemons still idle take slots back from the members computing several,
  // the one holding the most first (ties: the lowest own slot), its
  // highest slot first (slot 0 last: its holder writes the checkpoints and
  // starts its part again to give them up; others it gives up at its next
  // step boundary).
  while (Member* m = idle()) {
    Member* host = nullptr;
    int give = -1;
    for (auto& [id, h] : members_) {
      if (h.job != job.status.id() || h.role != trainer || h.index < 0) {
        continue;
      }
      int candidate = -1;
      for (const auto& [k, since] : h.also) {
        if (k < 0 || k >= static_cast<int>(job.slots.size()) ||
            job.slot_done[k] || job.slots[k] != h.id ||
            h.handed.count(k) > 0) {
          continue;
        }
        candidate = std::max(candidate, k);  // 0 only when alone
      }
      if (candidate < 0) continue;
      if (host == nullptr || h.also.size() > host->also.size() ||
          (h.also.size() == host->also.size() && h.index < host->index)) {
        host = &h;
        give = candidate;
      }
    }
    if (host == nullptr) break;
    host->also.erase(give);
    assign(*m, give);
    EventLocked(job, absl::StrCat(slot_name(give), " is member ", m->id,
                                  " (taken back from member ", host->id,
                                  ", ", slot_name(host->index), ")"));
  }
  if (changed) UpdateSlotHoldersLocked(job);
}

void Coordinator::NoteMembershipLocked(Job& job) {
  std::set<std::string> held;
  for (const std::string& id : job.slots) {
    if (!id.empty()) held.insert(id);
  }
  const int n = static_cast<int>(held.size());
  const int before = job.status.members();
  if (n == before || job.status.state() != RUNNING) {
    job.status.set_members(n);
    return;
  }
  job.status.set_members(n);
  MembershipChange* c = job.status.add_membership();
  c->set_time_ms(NowMs());
  c->set_step(job.status.progress().step());
  c->set_members(n);
  c->set_cause(job.status.membership_size() == 1 ? "start"
               : n > before                       ? "joined"
                                                  : "left");
  constexpr int kKept = 256;
  if (job.status.membership_size() > kKept) {
    job.status.mutable_membership()->DeleteSubrange(
        0, job.status.membership_size() - kKept);
  }
  job.membership_pending = job.status.membership_size() - 1;
  ScalarLocked(job, job.status.progress().step(), "cluster/members", n);
}

void Coordinator::UpdateSlotHoldersLocked(Job& job) {
  NoteMembershipLocked(job);
  auto* holders = job.status.mutable_slots();
  holders->Clear();
  for (size_t k = 0; k < job.slots.size(); ++k) {
    SlotHolder* h = holders->Add();
    h->set_slot(static_cast<int>(k));
    h->set_member(job.slots[k]);
    if (job.fp32_members.count(job.slots[k]) > 0) h->set_precision(F32);
    if (k < job.slot_done.size() && job.slot_done[k]) h->set_done(true);
    auto it = members_.find(job.slots[k]);
    if (it == members_.end() || it->second.index == static_cast<int>(k)) {
      continue;
    }
    h->set_shared(true);
    h->set_own_slot(it->second.index);
    auto since = it->second.also.find(static_cast<int>(k));
    if (since != it->second.also.end()) h->set_since_ms(since->second);
  }
}

}  // namespace bertps

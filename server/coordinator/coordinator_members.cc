// The Coordinator's Members: registration and heartbeats (ClusterService)
// and the interval members are told, a member lost (its shard, slots or lease
// taken back), the worker slots a train member holds (its own and those it
// took over), and probes of the shards a train member could not reach.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/audit.h"
#include "common/cluster/job_plan.h"
#include "common/cluster/member_instance.h"
#include "common/security.h"
#include "common/status.h"
#include "glog/logging.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_internal.h"

namespace bertps {

using coordinator_internal::HasEval;
using coordinator_internal::IsPool;
using coordinator_internal::IsTrainer;
using coordinator_internal::StagesOf;

absl::StatusOr<RegisterResponse> Coordinator::Register(
    const RegisterRequest& r, const Caller& caller) {
  if (r.protocol_version() != kMemberProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "register: this member speaks member protocol version ",
        r.protocol_version(), ", this coordinator version ",
        kMemberProtocolVersion,
        ": run the coordinator and its daemons of one release"));
  }
  if (r.role() != PS && !IsTrainer(r.role()) && !IsPool(r.role())) {
    return absl::InvalidArgumentError(
        absl::StrCat("register: role ", Role_Name(r.role()),
                     " is not served by this coordinator yet"));
  }
  if (r.role() == STAGE_ROLE && r.address().empty()) {
    return absl::InvalidArgumentError(
        "register: a pipeline-stage member needs its StageService address");
  }
  if (r.role() == PS && r.address().empty()) {
    return absl::InvalidArgumentError(
        "register: a parameter-server member needs its address");
  }
  if (r.daemon().size() > 256 || r.address().size() > 256 ||
      r.instance().size() > 128) {
    return absl::InvalidArgumentError(
        "register: address and daemon must be at most 256 bytes, instance "
        "at most 128");
  }
  if (r.memory_limit_bytes() < 0 || r.memory_limit_source().size() > 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "register: memory_limit_bytes must be >= 0 (got ",
        r.memory_limit_bytes(), ") and memory_limit_source at most 256 bytes"));
  }
  {
    absl::MutexLock l(&mu_);
    RETURN_IF_ERROR(AdmitRegistrationLocked(caller));
  }
  // A member with an address proves that the server there is its own (it
  // answers SERVING for its instance's health service), outside the lock:
  // nobody takes an address, or evicts the live member serving it, by
  // naming it.
  if (!r.address().empty() && options_.verify_address) {
    if (r.instance().empty()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "register: a member at address ", r.address(),
          " must name its instance (RegisterRequest.instance) for the "
          "coordinator to check the address is its own"));
    }
    absl::Status own =
        options_.verify_address(r.address(), MemberInstanceService(r.instance()));
    if (!own.ok()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "register: the server at ", r.address(),
          " is not this member's (it does not serve instance ", r.instance(),
          ": ", own.message(), ")"));
    }
  }
  absl::ReleasableMutexLock l(&mu_);
  // A shard or stage registering at the address of a live member of its role
  // is that member's process started again: the old one is gone (two
  // processes cannot listen on one address, and the server there proved to
  // be the new one), so its job recovers now rather than after the member
  // timeout.
  if (!r.address().empty()) {
    std::set<std::string> restarted;  // its slices: one restart
    batch_restarted_ = &restarted;
    for (auto& [id, old] : members_) {
      if (old.alive && old.role == r.role() && old.address == r.address()) {
        old.alive = false;
        LoseMemberLocked(old, "was restarted (a new process registered at "
                              "its address)");
      }
    }
    batch_restarted_ = nullptr;
  }
  Member m;
  // Ids carry this coordinator's instance, so a member still holding an id
  // from before a restart is told "unknown member" rather than taken for
  // another member.
  m.id = absl::StrFormat("m%d-%s", next_member_++, instance_);
  m.role = r.role();
  m.address = r.address();
  m.memory_limit = r.memory_limit_bytes();
  m.memory_source = r.memory_limit_source();
  m.daemon = r.daemon();
  m.last_seen = options_.now();
  m.secret = RandomSecret();
  m.token = caller.token;
  Member& added = members_[m.id] = m;
  if (!r.gave_up().empty()) {
    LOG(WARNING) << "member " << m.id << " at " << m.address
                 << " registers after it " << r.gave_up();
  }
  RegisterResponse resp;
  resp.set_member_id(m.id);
  resp.set_member_secret(m.secret);
  resp.set_protocol_version(kMemberProtocolVersion);
  resp.set_member_timeout_ms(absl::ToInt64Milliseconds(options_.member_timeout));
  // What it says it runs (registering again after this coordinator
  // restarted): taken back into its job when that checks out.
  if (r.has_running() && AdoptLocked(added, r.running())) resp.set_adopted(true);
  TickLocked();
  resp.set_heartbeat_ms(heartbeat_interval_ms_);
  l.Release();
  // What the registration started or restarted is durable before it
  // answers (see Heartbeat).
  RETURN_IF_ERROR(FlushIfUrgent());
  return resp;
}

absl::Status Coordinator::AdmitRegistrationLocked(const Caller& caller) {
  const CoordinatorOptions& o = options_;
  if (o.max_members_per_token > 0) {
    int held = 0;
    for (const auto& [id, m] : members_) held += m.token == caller.token;
    if (held >= o.max_members_per_token) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "register: token ", caller.token.empty() ? "(none)" : caller.token,
          " has ", held, " members registered, the most one token may "
          "have (a dead one is forgotten ",
          absl::FormatDuration(std::max(o.reclaim_after, o.member_timeout)),
          " after it was last heard)"));
    }
  }
  if (o.registrations_per_s <= 0) return absl::OkStatus();
  const absl::Time now = options_.now();
  RegistrationBucket& b = registrations_[caller.token];
  if (b.at == absl::InfinitePast()) {
    b.tokens = o.registrations_burst;
  } else {
    b.tokens = std::min<double>(
        o.registrations_burst,
        b.tokens + absl::ToDoubleSeconds(now - b.at) * o.registrations_per_s);
  }
  b.at = now;
  if (b.tokens < 1) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "register: too many registrations with token ",
        caller.token.empty() ? "(none)" : caller.token, " (at most ",
        o.registrations_per_s, " a second, in bursts of ",
        o.registrations_burst, "): try again later"));
  }
  b.tokens -= 1;
  return absl::OkStatus();
}

void Coordinator::ReclaimMembersLocked() {
  const absl::Time now = options_.now();
  const absl::Duration after =
      std::max(options_.reclaim_after, options_.member_timeout);
  for (auto it = members_.begin(); it != members_.end();) {
    const Member& m = it->second;
    if (!m.alive && m.job.empty() && now - m.last_seen > after) {
      it = members_.erase(it);
    } else {
      ++it;
    }
  }
}

absl::StatusOr<HeartbeatResponse> Coordinator::Heartbeat(
    const HeartbeatRequest& r) {
  absl::StatusOr<HeartbeatResponse> resp;
  {
    absl::MutexLock l(&mu_);
    resp = HeartbeatLocked(r);
    if (resp.ok()) resp->set_heartbeat_ms(heartbeat_interval_ms_);
  }
  // A state change this heartbeat made (a job started, restarted, failed
  // over, finished) is in the store before the member hears of it; a store
  // that cannot take it answers UNAVAILABLE (the member tries again).
  if (resp.ok()) RETURN_IF_ERROR(FlushIfUrgent());
  return resp;
}

bool Coordinator::AdoptLocked(Member& m, const MemberRun& run) {
  auto it = jobs_.find(run.job_id());
  if (it == jobs_.end()) return false;
  Job& job = it->second;
  const std::string& id = job.status.id();
  const JobSpec& spec = job.status.spec();
  if (IsPool(m.role)) {
    // A leased item still wanted and held by no one: the member goes on.
    const int item = run.item();
    if (job.status.state() != RUNNING || item < 0 ||
        item >= static_cast<int>(job.work.size()) || job.work[item].done ||
        !job.work[item].holder.empty()) {
      return false;
    }
    job.work[item].holder = m.id;
    m.job = id;
    m.index = item;
    return true;
  }
  // A train job's member: the same incarnation, and the key of it (only its
  // members were given it).
  if (job.status.state() != RUNNING ||
      run.incarnation() != job.status.incarnation() || job.job_key.empty() ||
      !ConstantTimeEquals(run.job_key(), job.job_key)) {
    LOG(INFO) << "member " << m.id << " announced job " << run.job_id()
              << " incarnation " << run.incarnation()
              << ", which it cannot go on with: not adopted";
    return false;
  }
  if (m.role == PS) {
    const int i = run.shard();
    if (i < 0 || i >= static_cast<int>(job.shards.size())) return false;
    if (spec.replicas() > 1 && i < static_cast<int>(job.terms.size()) &&
        run.term() != job.terms[i]) {
      return false;
    }
    if (!run.backup()) {
      if (!job.shards[i].empty()) return false;  // taken (by a primary)
      job.shards[i] = m.id;
      job.status.set_ps_addresses(i, m.address);
    } else {
      if (i >= static_cast<int>(job.backups.size()) ||
          static_cast<int>(job.backups[i].size()) >= spec.replicas() - 1) {
        return false;
      }
      job.backups[i].push_back(m.id);
    }
    m.job = id;
    m.index = i;
    m.backup = run.backup();
    m.applied = run.applied();
    m.told = true;
    job.ready_shards.insert(m.id);
    UpdateShardReplicasLocked(job);
    EventLocked(job, absl::StrCat(run.backup() ? "backup of shard " : "shard ",
                                  i, " (member ", m.id, " at ", m.address,
                                  ", version ", run.applied(),
                                  ") re-announced and adopted"));
    return true;
  }
  if (!IsTrainer(m.role)) return false;
  std::vector<int> taken;
  for (int k : run.slots()) {
    if (k >= 0 && k < static_cast<int>(job.slots.size()) &&
        job.slots[k].empty()) {
      taken.push_back(k);
    }
  }
  if (taken.empty()) return false;
  m.job = id;
  m.index = taken[0];
  m.told = true;
  for (int k : taken) {
    job.slots[k] = m.id;
    if (k != m.index) m.also[k] = NowMs();
    job.slot_free_since.resize(job.slots.size(), absl::InfiniteFuture());
    job.slot_free_since[k] = absl::InfiniteFuture();
  }
  for (int k : run.done_slots()) {
    if (std::find(taken.begin(), taken.end(), k) != taken.end()) {
      job.slot_done[k] = true;
    }
  }
  UpdateSlotHoldersLocked(job);
  EventLocked(job, absl::StrCat("member ", m.id, " re-announced slot(s) ",
                                absl::StrJoin(taken, ", "), ": adopted"));
  return true;
}

int64_t Coordinator::heartbeat_interval_ms() const {
  absl::MutexLock l(&mu_);
  return heartbeat_interval_ms_;
}

absl::StatusOr<HeartbeatResponse> Coordinator::HeartbeatLocked(
    const HeartbeatRequest& r) {
  auto mit = members_.find(r.member_id());
  if (mit == members_.end()) {
    if (revoked_.count(r.member_id()) > 0) {
      AuditRefusal(kRefusedRevoked, absl::StrCat("member ", r.member_id()),
                   "heartbeat of a revoked member");
      return absl::PermissionDeniedError(absl::StrCat(
          "member ", r.member_id(), " was revoked by an admin: its "
          "credential is refused"));
    }
    return absl::NotFoundError(
        absl::StrCat("unknown member ", r.member_id(), ": register again"));
  }
  Member& m = mit->second;
  if (m.secret.empty() || !ConstantTimeEquals(r.member_secret(), m.secret)) {
    // Not the member that registered under this id: nothing it says counts.
    AuditRefusal(kRefusedMemberCredential,
                 absl::StrCat("heartbeat naming member ", r.member_id()),
                 "without that member's credential");
    return absl::PermissionDeniedError(absl::StrCat(
        "heartbeat for member ", r.member_id(),
        " without that member's credential (RegisterResponse.member_secret)"));
  }
  // Pool results: every one for the lease this member holds (or the one
  // taken back when it was lost, ignored); else nothing of the heartbeat
  // counts.
  if (IsPool(m.role)) {
    for (const WorkResult& res : r.results()) {
      RETURN_IF_ERROR(CheckResultLocked(m, r.job_id(), res).status());
    }
  }
  // A checkpoint reported by a train member: only a manifest under its
  // job's checkpoint directory (what eval rounds and every restore read).
  if (IsTrainer(m.role) && !m.job.empty() && r.job_id() == m.job) {
    const std::string& dir = jobs_[m.job].status.spec().checkpoint().dir();
    for (const StepReport& s : r.steps()) {
      if (s.checkpoint().empty()) continue;
      if (dir.empty() || !LexicallyUnder(s.checkpoint(), dir) ||
          LexicalNormal(s.checkpoint()) == LexicalNormal(dir) ||
          s.checkpoint().find('\0') != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            "heartbeat of member ", m.id, ": reported checkpoint \"",
            s.checkpoint(), "\" is not under job ", m.job,
            "'s checkpoint.dir \"", dir, "\": refused"));
      }
    }
  }
  // An idle member not heard lately was given no work: now it may be.
  const bool unheard = !HeardLocked(m) && m.job.empty();
  m.last_seen = options_.now();
  // Whether this heartbeat changes what a tick acts on (members, slots,
  // shards, results, a job's end); else it ticks only when one is due.
  bool changed = !m.alive || unheard || !r.error().empty() || r.done() ||
                 r.done_slots_size() > 0 || r.results_size() > 0 ||
                 !r.unreachable().empty() || (!m.job.empty() && !m.told);
  m.alive = true;
  if (r.draining() && !m.draining) {
    LOG(INFO) << "member " << m.id << " drains: no new work for it";
  }
  changed |= m.draining != r.draining();
  m.draining = r.draining();
  // It stopped its work while this coordinator did not answer: the work is
  // free now (a shard's job starts again from its checkpoint).
  if (!r.gave_up().empty() && !m.job.empty()) {
    Job& job = jobs_[m.job];
    EventLocked(job, absl::StrCat("member ", m.id, " ", r.gave_up()));
    LoseMemberLocked(m, absl::StrCat("gave up (", r.gave_up(), ")"));
    m.needs_stop = false;  // it stopped already
    changed = true;
  }
  auto tick = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (changed || options_.now() - last_tick_ >= kHeartbeatTickEvery) {
      TickLocked();
    }
  };
  if (r.leaving()) {
    // Shutting down: results and reports still count; then the member's
    // lease, slot or shard is taken back at once.
    if (IsPool(m.role)) {
      for (const WorkResult& res : r.results()) TakeResultLocked(m, r.job_id(), res);
    } else if (IsTrainer(m.role) && !m.job.empty() && r.job_id() == m.job &&
               m.told) {
      Job& job = jobs_[m.job];
      if (job.status.state() == RUNNING &&
          r.incarnation() == job.status.incarnation()) {
        RecordReportsLocked(job, m, r);
      }
    }
    m.alive = false;
    LoseMemberLocked(m, "left (shut down)");
    if (m.drain_requested) RememberDrainedLocked(m, r.job_id());
    members_.erase(mit);
    TickLocked();
    HeartbeatResponse resp;
    resp.mutable_assignment()->set_stop(true);
    return resp;
  }
  if (IsPool(m.role)) {
    for (const WorkResult& res : r.results()) TakeResultLocked(m, r.job_id(), res);
    tick();
    if (m.job.empty()) LeaseLocked(m);
    HeartbeatResponse resp;
    *resp.mutable_assignment() = AssignmentLocked(m);
    return resp;
  }
  // Reports, errors and "done" count only from a member that was sent this
  // job under its current id (not from work begun before a restart).
  if (!r.job_id().empty() && r.job_id() == m.job && m.told) {
    Job& job = jobs_[m.job];
    // Only from the current start of the job (not a part begun before the
    // job was started again).
    if (job.status.state() == RUNNING &&
        r.incarnation() == job.status.incarnation()) {
      if (IsTrainer(m.role)) {
        RecordReportsLocked(job, m, r);
        if (!r.unreachable().empty()) QueueProbesLocked(job, m, r.unreachable());
      }
      if (m.role == PS && TakeShardReportLocked(job, m, r)) changed = true;
      if (!r.error().empty()) {
        FinishLocked(job, FAILED,
                     absl::StrCat(m.role == PS ? "parameter-server shard "
                                  : m.role == STAGE_ROLE ? "pipeline slot "
                                                         : "worker ",
                                  m.index, " (member ", m.id, "): ", r.error()));
      } else if ((r.done() || r.done_slots_size() > 0) &&
                 IsTrainer(m.role)) {
        // `done` is for the member's own slot; done_slots also names the
        // slots it took over whose part finished.
        if (r.done()) job.slot_done[m.index] = true;
        for (int d : r.done_slots()) {
          const int slot = SlotOfLocked(m, d);
          if (slot >= 0) job.slot_done[slot] = true;
        }
        UpdateSlotHoldersLocked(job);
        if (!job.training_done &&
            std::all_of(job.slot_done.begin(), job.slot_done.end(),
                        [](bool d) { return d; })) {
          job.training_done = true;
          AdvanceLocked(job, job.status.progress().total_steps());
          const JobSpec& spec = job.status.spec();
          if (HasEval(spec) && !spec.eval().no_final()) {
            if (job.last_checkpoint.empty()) {
              FinishLocked(job, FAILED,
                           "final eval: no checkpoint was reported (set "
                           "checkpoint.dir)");
            } else {
              bool have = false;
              for (const Round& rd : job.rounds) {
                have |= rd.version == job.last_checkpoint_version;
              }
              if (!have) {
                AddRoundLocked(job, "final", job.last_checkpoint_version,
                               job.last_checkpoint);
              }
              EventLocked(job, "training done; final eval");
            }
          }
          MaybeSucceedLocked(job);
        }
      }
    }
  }
  tick();
  Member& me = members_[r.member_id()];
  if (DrainWanted(me) && !me.hand_off_started) StartHandOffLocked(me);
  if (me.role == PS && !me.job.empty()) {
    Job& job = jobs_[me.job];
    if (me.told && r.job_id() == me.job &&
        r.incarnation() == job.status.incarnation() && r.error().empty() &&
        job.ready_shards.insert(me.id).second) {
      TickLocked();  // a shard newly ready: what the job waits for changed
    }
  }
  HeartbeatResponse resp;
  *resp.mutable_assignment() = AssignmentLocked(me);
  if (!me.job.empty() && resp.assignment().job_id() == me.job &&
      !resp.assignment().wait()) {
    me.told = true;
  }
  if (me.job.empty() && me.needs_stop) {
    // Told to stop now: work may go to it from here (on its next
    // heartbeat's answer).
    me.needs_stop = false;
    TickLocked();
  }
  return resp;
}

void Coordinator::SetHeartbeatIntervalLocked(int64_t alive) {
  const CoordinatorOptions& o = options_;
  int64_t ms = o.heartbeat_ms;
  if (o.max_heartbeats_per_s > 0) {
    ms = std::max(ms, (alive * 1000 + o.max_heartbeats_per_s - 1) /
                          o.max_heartbeats_per_s);
  }
  heartbeat_interval_ms_ = std::min(
      ms, std::max(o.heartbeat_ms,
                   absl::ToInt64Milliseconds(o.member_timeout) / 5));
}

namespace {
constexpr int kHeardIntervals = 3;
constexpr absl::Duration kHeardAtLeast = absl::Seconds(2);

const char* MemberNoun(Role role) {
  switch (role) {
    case PS:
      return "parameter-server daemon";
    case TRAIN:
      return "train worker";
    case STAGE_ROLE:
      return "stage daemon";
    default:
      return "member";
  }
}
}  // namespace

bool Coordinator::HeardLocked(const Member& m) const {
  if (!m.alive) return false;
  // After the coordinator's own stall, members are as fresh as its return.
  const absl::Duration silent =
      options_.now() - std::max(m.last_seen, resumed_at_);
  return silent <= std::min(options_.member_timeout,
                            std::max(kHeardAtLeast,
                                     kHeardIntervals * absl::Milliseconds(
                                                           heartbeat_interval_ms_)));
}

std::string Coordinator::UnheardLocked(Role role) const {
  int n = 0;
  absl::Duration longest;
  for (const auto& [id, m] : members_) {
    if (!m.alive || !m.job.empty() || m.role != role || HeardLocked(m)) continue;
    ++n;
    longest = std::max(longest, options_.now() - m.last_seen);
  }
  if (n == 0) return "";
  return absl::StrCat("; ", n, " idle ", MemberNoun(role), n > 1 ? "s" : "",
                      " not heard for ",
                      absl::StrFormat("%.1f", absl::ToDoubleSeconds(longest)),
                      " s (given work once heard)");
}

void Coordinator::LoseMemberLocked(Member& m, const std::string& how) {
  if (m.job.empty()) return;
  if (IsPool(m.role)) {
    ReleaseLocked(m);
    return;
  }
  m.needs_stop = true;
  Job& job = jobs_[m.job];
  // Its capability no longer holds at the job's shards.
  if (job.status.state() == RUNNING) job.revoked.insert(m.id);
  if (m.role == PS && m.backup) {  // the index runs with fewer backups
    DropBackupLocked(job, m, how);
    return;
  }
  const int index = m.index;
  const std::vector<int> held = HeldSlots(m);
  EndHandOffsLocked(job, m);
  if (m.role == TRAIN && job.status.state() == RUNNING) {
    FreeSlotsLocked(job, m, how);
  }
  m.handed.clear();
  m.job.clear();
  m.index = -1;
  m.also.clear();
  if (job.status.state() != RUNNING || index < 0) return;
  if (job.training_done) {
    // Only eval rounds and shard 0's count of the last update remain: no
    // slot is needed, and a shard only while that count is awaited.
    const bool counted =
        job.ledger_version >= job.status.progress().total_steps();
    const bool primary = m.role == PS &&
                         index < static_cast<int>(job.shards.size()) &&
                         job.shards[index] == m.id;
    if (!primary || counted) {
      EventLocked(job, absl::StrCat(Role_Name(m.role), " ", index, " (member ",
                                    m.id, ") ", how, " after training"));
      return;
    }
    if (FailOverLocked(job, index, m, how)) return;  // the backup counts it
    job.shards[index].clear();
    job.status.set_ps_addresses(index, "");
    if (index != 0) {
      EventLocked(job, absl::StrCat("parameter-server shard ", index,
                                    " (member ", m.id, ") ", how,
                                    " after training"));
      return;
    }
    // Shard 0 went before it counted the last update: the job starts again
    // from its last checkpoint to count it (else it would wait forever).
    RestartLocked(job, absl::StrCat("parameter-server shard 0 (member ", m.id,
                                    " at ", m.address, ") ", how,
                                    " after training, before it counted the "
                                    "last update"));
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
    // Each slot it held (its own, those it took over) goes to an idle stage
    // daemon, else to the same stage of another replica; the replica's
    // other stages start the step again with it (JobMember), no restart.
    // The job restarts from its checkpoint only if none takes it in time
    // (FillSlotsLocked). A slot whose part was done stays as it is.
    const JobPlan plan = PlanOf(job.status.spec());
    job.slot_free_since.resize(job.slots.size(), absl::InfiniteFuture());
    std::set<int> replicas;  // those with a slot freed
    for (int k : held) {
      if (k < 0 || k >= static_cast<int>(job.slots.size()) ||
          job.slots[k] != m.id || job.slot_done[k]) {
        continue;  // a done slot keeps its holder: its part is over
      }
      replicas.insert(plan.ReplicaOf(k));
      const std::string what =
          absl::StrCat("pipeline stage ", plan.StageOf(k), " of replica ",
                       plan.ReplicaOf(k),
                       " (member ", m.id, " at ", m.address, ") ", how);
      job.slots[k].clear();
      job.slot_free_since[k] = options_.now();
      job.lost_stages[k] = what;
      EventLocked(job, absl::StrCat(what, "; its slot is free: an idle stage "
                                    "daemon takes it and the replica's "
                                    "stages start the step again, no "
                                    "restart"));
    }
    for (int r : replicas) {
      ReopenDoneSlotsLocked(job, r, absl::StrCat("a stage of replica ", r,
                                                 " was lost"));
    }
    UpdateSlotHoldersLocked(job);
  }
}

bool Coordinator::HolderAliveLocked(const Job& job, int k) const {
  if (job.slots[k].empty()) return false;
  auto it = members_.find(job.slots[k]);
  return it != members_.end() && it->second.alive &&
         it->second.job == job.status.id() && SlotOfLocked(it->second, k) == k;
}

void Coordinator::ReopenDoneSlotsLocked(Job& job, int replica,
                                        const std::string& why) {
  if (job.training_done) return;
  const JobPlan plan = PlanOf(job.status.spec());
  job.slot_free_since.resize(job.slots.size(), absl::InfiniteFuture());
  bool changed = false;
  for (int k = 0; k < static_cast<int>(job.slots.size()); ++k) {
    if (!job.slot_done[k] || (replica >= 0 && plan.ReplicaOf(k) != replica)) {
      continue;
    }
    // Not done any more: a member still holding it starts the part again
    // itself (and says "done" again when it ends); a loss of that member
    // meanwhile frees it as any other slot.
    job.slot_done[k] = false;
    changed = true;
    if (HolderAliveLocked(job, k)) continue;
    const std::string slot =
        plan.stages > 1 ? absl::StrCat("pipeline stage ", plan.StageOf(k),
                                       " of replica ", plan.ReplicaOf(k))
                        : absl::StrCat("worker ", k);
    const std::string what = absl::StrCat(
        slot, " (its part was over; member ",
        job.slots[k].empty() ? "none" : job.slots[k], " gone) is needed again: ",
        why);
    job.slots[k].clear();
    job.slot_free_since[k] = options_.now();
    if (plan.stages > 1) job.lost_stages[k] = what;
    EventLocked(job, absl::StrCat(what, "; its slot is free"));
  }
  if (changed) UpdateSlotHoldersLocked(job);
}

int Coordinator::SlotOfLocked(const Member& m, int slot) {
  if (slot < 0) return -1;
  if (slot == m.index) return slot;
  return m.also.count(slot) > 0 ? slot : -1;
}

void Coordinator::FreeSlotsLocked(Job& job, Member& m, const std::string& how) {
  const std::vector<int> held = HeldSlots(m);
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
    // A step of a slot handed over: its previous holder may leave.
    if (slot >= 0 && job.handing.count(slot) > 0) {
      HandedLocked(job, m.id, slot);
    }
    // (A report of a checkpoint alone computed nothing: no precision.)
    if (slot >= 0 && job.status.spec().precision() == BF16 &&
        s.precision() != BF16 && s.compute_ms() > 0 &&
        job.fp32_members.insert(m.id).second) {
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
  // Said in the job's events also when every shard answers (a pull that
  // stalled, a link that dropped): the user sees why a step started again.
  const bool stage = reporter.role == STAGE_ROLE;
  EventLocked(job, absl::StrCat("member ", reporter.id, " could not reach ",
                                stage ? "a shard or a stage" : "the shards",
                                " (", why, "): probing them"));
  for (const std::string& id : job.shards) {
    auto it = members_.find(id);
    if (it == members_.end() || !it->second.alive) continue;
    probes_.push_back({job.status.id(), id, it->second.address,
                       absl::StrCat("member ", reporter.id, " could not reach "
                                    "the shards (", why, ")"),
                       job.status.incarnation()});
  }
  // A pipeline stage's failure may be another stage gone: the stage
  // daemons of the replicas it computes are asked too (each serves its
  // StageService, with health, for its whole life).
  if (!stage) return;
  const JobPlan plan = PlanOf(job.status.spec());
  std::set<int> replicas = {plan.ReplicaOf(reporter.index)};
  for (const auto& [k, since] : reporter.also) replicas.insert(plan.ReplicaOf(k));
  std::set<std::string> asked;
  for (size_t k = 0; k < job.slots.size(); ++k) {
    if (replicas.count(plan.ReplicaOf(static_cast<int>(k))) == 0) continue;
    const std::string& id = job.slots[k];
    auto it = members_.find(id);
    if (id.empty() || id == reporter.id || it == members_.end() ||
        !it->second.alive || !asked.insert(id).second) {
      continue;
    }
    probes_.push_back({job.status.id(), id, it->second.address,
                       absl::StrCat("member ", reporter.id, " could not reach "
                                    "a stage (", why, ")"),
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
    if (st.code() != absl::StatusCode::kUnavailable &&
        options_.now() - m->second.last_seen <
            3 * absl::Milliseconds(heartbeat_interval_ms_)) {
      LOG(INFO) << "member " << p.member << " at " << p.address
                << " answered no probe in time but heartbeats: not lost ("
                << st << ")";
      continue;
    }
    LOG(WARNING) << "member " << p.member << " at " << p.address
                 << " failed a probe: " << st;
    // The other slices of its daemon are the same process: gone with it
    // (a primary among them fails over now, not after the member timeout);
    // a job that loses several of them at once restarts once.
    const std::string daemon = m->second.daemon;
    std::vector<Member*> siblings;
    for (auto& [id, sibling] : members_) {
      if (!daemon.empty() && sibling.alive && sibling.daemon == daemon &&
          id != p.member) {
        sibling.alive = false;
        siblings.push_back(&sibling);
      }
    }
    std::set<std::string> restarted;
    batch_restarted_ = &restarted;
    m->second.alive = false;
    LoseMemberLocked(m->second,
                     absl::StrCat("did not answer a probe (", st.message(),
                                  ") after ", p.why));
    for (Member* sibling : siblings) {
      LoseMemberLocked(*sibling, absl::StrCat("is part of daemon ", daemon,
                                              " with member ", p.member,
                                              ", which did not answer a "
                                              "probe"));
    }
    batch_restarted_ = nullptr;
    TickLocked();
  }
}

}  // namespace bertps

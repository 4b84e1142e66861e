#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/audit.h"
#include "common/security.h"
#include "common/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "nlohmann/json.hpp"
#include "server/coordinator/coordinator_internal.h"
#include "server/coordinator/job_store.h"
#include "glog/logging.h"

namespace bertps {

using coordinator_internal::kLedgerWait;
using coordinator_internal::IsTrainer;
using coordinator_internal::IsPool;
using coordinator_internal::HasEval;

namespace {

// *into += from, recursively: numbers add, objects merge, anything else
// keeps the first value seen.
void MergeCounts(const nlohmann::ordered_json& from,
                 nlohmann::ordered_json* into) {
  for (auto it = from.begin(); it != from.end(); ++it) {
    nlohmann::ordered_json& dst = (*into)[it.key()];
    if (dst.is_null()) {
      dst = it.value();
    } else if (it.value().is_object() && dst.is_object()) {
      MergeCounts(it.value(), &dst);
    } else if (it.value().is_number_integer() && dst.is_number_integer()) {
      dst = dst.get<int64_t>() + it.value().get<int64_t>();
    } else if (it.value().is_number() && dst.is_number()) {
      dst = dst.get<double>() + it.value().get<double>();
    }
  }
}

}  // namespace

bool IsFinal(JobState s) {
  return s == SUCCEEDED || s == FAILED || s == CANCELLED;
}

Coordinator::Coordinator(CoordinatorOptions options)
    : options_([&] {
        if (!options.count_examples && !options.describe_data) {
          options.describe_data = [roots = options.roots](const JobSpec& s) {
            return coordinator_internal::DescribeData(s, roots);
          };
        }
        return options;
      }()),
      instance_(absl::StrFormat(
          "%08x", static_cast<uint32_t>(std::random_device()() ^
                                        absl::ToUnixNanos(absl::Now())))),
      signer_(options_.capability_signer != nullptr
                  ? options_.capability_signer
                  : std::shared_ptr<const CapabilitySigner>(
                        *CapabilitySigner::Generate())),
      heartbeat_interval_ms_(options_.heartbeat_ms) {}

std::string Coordinator::NewJobIdLocked() {
  const int64_t n = next_job_++;
  if (options_.store != nullptr) return absl::StrFormat("job-%06d", n);
  return absl::StrFormat("job-%06d-%s", n, instance_);
}

int64_t Coordinator::NowMs() const {
  return absl::ToUnixMillis(options_.now());
}

absl::StatusOr<JobStatus> Coordinator::Get(const std::string& id) const {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job ", id));
  JobStatus s = ShownLocked(it->second);
  if (!store_error_.empty()) s.set_store_error(store_error_);
  return s;
}

absl::Status Coordinator::CheckCanRead(const std::string& id,
                                       const Caller& caller) const {
  if (caller.admin && caller.team.empty()) return absl::OkStatus();
  absl::MutexLock l(&mu_);
  if (caller.admin) {
    // A team's admin: its team's jobs only; another team's job is answered
    // as one that does not exist (a team learns nothing of others' jobs).
    if (id.empty()) return absl::OkStatus();  // a list: filtered
    auto j = jobs_.find(id);
    if (j != jobs_.end() && j->second.status.owner() == caller.team) {
      return absl::OkStatus();
    }
    if (j != jobs_.end()) {
      AuditRefusal(kRefusedTeam,
                   absl::StrCat("team ", caller.team, ", token ", caller.token),
                   absl::StrCat("job ", id, " of another team"));
    }
    return absl::NotFoundError(absl::StrCat("no job ", id));
  }
  auto m = members_.find(caller.member_id);
  // One message whatever failed: a worker token learns nothing of which
  // members or jobs exist.
  const absl::Status denied = absl::PermissionDeniedError(absl::StrCat(
      "a worker token sees only the job of the member whose credential it "
      "presents (metadata ", kMemberMetadata, " and ", kMemberSecretMetadata,
      "); an admin token sees every job"));
  if (m == members_.end() || m->second.secret.empty() ||
      !ConstantTimeEquals(caller.member_secret, m->second.secret)) {
    AuditRefusal(kRefusedMemberCredential,
                 absl::StrCat("token ", caller.token, ", member ",
                              caller.member_id),
                 "JobService read without the member's credential");
    return denied;
  }
  if (!id.empty() && m->second.job != id) {
    AuditRefusal(kRefusedJobScope,
                 absl::StrCat("token ", caller.token, ", member ",
                              caller.member_id),
                 absl::StrCat("read of job ", id, ", not the member's"));
    return denied;
  }
  return absl::OkStatus();
}

absl::StatusOr<JobStatus> Coordinator::Get(const std::string& id,
                                           const Caller& caller) const {
  RETURN_IF_ERROR(CheckCanRead(id, caller));
  return Get(id);
}

absl::StatusOr<ListJobsResponse> Coordinator::ListPageFor(
    const Caller& caller, int page_size, const std::string& after) const {
  if (caller.admin) return ListPage(page_size, after, 2 << 20, caller.team);
  RETURN_IF_ERROR(CheckCanRead("", caller));
  std::string job;
  {
    absl::MutexLock l(&mu_);
    auto m = members_.find(caller.member_id);
    if (m != members_.end()) job = m->second.job;
  }
  ListJobsResponse resp;
  if (job.empty() || job <= after) return resp;
  absl::StatusOr<JobStatus> s = Get(job);
  if (s.ok()) {
    s->clear_history();
    *resp.add_jobs() = std::move(*s);
  }
  return resp;
}

std::vector<JobStatus> Coordinator::List() const {
  absl::MutexLock l(&mu_);
  std::vector<JobStatus> out;
  for (const auto& [id, job] : jobs_) {
    out.push_back(ShownLocked(job));
    out.back().clear_history();
  }
  return out;
}

ListJobsResponse Coordinator::ListPage(int page_size, const std::string& after,
                                       size_t max_bytes,
                                       const std::string& team) const {
  const int limit = page_size <= 0 ? 100 : std::min(page_size, 1000);
  ListJobsResponse resp;
  size_t bytes = 0;
  absl::MutexLock l(&mu_);
  for (auto it = jobs_.upper_bound(after); it != jobs_.end(); ++it) {
    if (!team.empty() && it->second.status.owner() != team) continue;
    if (resp.jobs_size() == limit) {
      resp.set_next_page_token(resp.jobs(resp.jobs_size() - 1).id());
      break;
    }
    JobStatus s = ShownLocked(it->second);
    s.clear_history();
    const size_t size = s.ByteSizeLong();
    if (resp.jobs_size() > 0 && bytes + size > max_bytes) {
      resp.set_next_page_token(resp.jobs(resp.jobs_size() - 1).id());
      break;
    }
    bytes += size;
    *resp.add_jobs() = std::move(s);
  }
  return resp;
}

absl::Status Coordinator::Cancel(const std::string& id, const Caller& caller) {
  if (!caller.admin) {
    return absl::PermissionDeniedError("cancelling a job needs an admin token");
  }
  RETURN_IF_ERROR(CheckCanRead(id, caller));
  return Cancel(id);
}

absl::Status Coordinator::Cancel(const std::string& id) {
  if (options_.store == nullptr) {
    absl::MutexLock l(&mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job ", id));
    Job& job = it->second;
    if (IsFinal(job.status.state())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", id, " already ended: ", JobState_Name(job.status.state())));
    }
    FinishLocked(job, CANCELLED, "cancelled by request");
    TickLocked();  // its members are free: a queued job may start
    return absl::OkStatus();
  }
  // Acknowledged means durable: the cancelled record is written first
  // (outside the lock, one write to the store at a time); a store that
  // cannot take it refuses the call and the job runs on.
  {
    absl::MutexLock sl(&store_mu_);
    JobRecord record;
    {
      absl::MutexLock l(&mu_);
      auto it = jobs_.find(id);
      if (it == jobs_.end()) {
        return absl::NotFoundError(absl::StrCat("no job ", id));
      }
      const Job& job = it->second;
      if (IsFinal(job.status.state())) {
        return absl::FailedPreconditionError(absl::StrCat(
            "job ", id, " already ended: ", JobState_Name(job.status.state())));
      }
      record = RecordLocked(job);
      record.mutable_status()->set_state(CANCELLED);
      record.mutable_status()->set_reason("cancelled by request");
      record.mutable_status()->set_end_time_ms(NowMs());
      record.mutable_status()->clear_waiting();
      record.mutable_status()->clear_waiting_since_ms();
    }
    if (absl::Status st = options_.store->Put(id, record); !st.ok()) {
      absl::MutexLock l(&mu_);
      store_error_ = st.ToString();
      return absl::UnavailableError(absl::StrCat(
          "the coordinator's job store cannot write (", st.message(),
          "): job ", id, " was not cancelled"));
    }
    absl::MutexLock l(&mu_);
    Job& job = jobs_[id];
    FinishLocked(job, CANCELLED, "cancelled by request");
    if (job.status.state() == CANCELLED &&
        job.status.incarnation() == record.status().incarnation()) {
      // What was written is what is shown.
      job.stored_state = CANCELLED;
      job.stored_incarnation = job.status.incarnation();
      job.durable = job.status;
      job.held_from = -1;
      watch_->Poke();
    }
    TickLocked();  // its members are free: a queued job may start
  }
  if (absl::Status st = FlushIfUrgent(); !st.ok()) {
    LOG(WARNING) << "job " << id << " is cancelled; " << st;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<JobEvent>> Coordinator::WaitForEvents(
    const std::string& id, int64_t* seq, absl::Time deadline) {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job ", id));
  const Job* job = &it->second;
  // Sequence numbers count every event of the job; a watcher that fell
  // behind by more than max_events misses the dropped ones. Events held
  // for the store (a change not durable yet) are not shown.
  auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return EventsShown(*job) > *seq;
  };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  const int64_t shown = EventsShown(*job);
  const int64_t from =
      std::min(std::max(*seq, job->events_dropped), shown) - job->events_dropped;
  std::vector<JobEvent> out(job->events.begin() + from,
                            job->events.begin() + (shown - job->events_dropped));
  *seq = shown;
  return out;
}

void Coordinator::WhenEvents(const std::string& id, int64_t seq,
                             absl::Time deadline, std::function<bool()> also,
                             std::function<void(bool)> fire) {
  watch_->Add(
      [this, id, seq, also = std::move(also)] {
        if (also()) return true;
        absl::MutexLock l(&mu_);
        auto it = jobs_.find(id);
        return it == jobs_.end() || EventsShown(it->second) > seq;
      },
      deadline, std::move(fire));
}

void Coordinator::Tick() {
  {
    absl::MutexLock l(&mu_);
    TickLocked();
  }
  ProbeMembers();
  FlushStore().IgnoreError();  // shown as store_error
  FlushTensorBoard();
  PruneCheckpoints();
}

int64_t Coordinator::ticks() const {
  absl::MutexLock l(&mu_);
  return ticks_;
}

void Coordinator::TickLocked() {
  const absl::Time now = options_.now();
  if (last_tick_ != absl::InfinitePast() &&
      now - last_tick_ > options_.stall_threshold) {
    resumed_at_ = now;
    LOG(WARNING) << "the coordinator stalled for " << (now - last_tick_)
                 << "; members have " << options_.member_timeout
                 << " from now to be heard before any is declared dead";
  }
  last_tick_ = now;
  ++ticks_;
  int64_t alive = 0;
  // Members silent together (e.g. the slices of one daemon): a job that
  // loses several restarts once.
  std::set<std::string> restarted;
  batch_restarted_ = &restarted;
  for (auto& [id, m] : members_) {
    if (!m.alive ||
        now - std::max(m.last_seen, resumed_at_) <= options_.member_timeout) {
      alive += m.alive;
      continue;
    }
    m.alive = false;
    LoseMemberLocked(m, "stopped answering");
  }
  batch_restarted_ = nullptr;
  ReclaimMembersLocked();
  SetHeartbeatIntervalLocked(alive);
  for (auto& [id, job] : jobs_) {
    if (job.status.state() != RUNNING) continue;
    // Adopting after a restart: nothing is given out until the members that
    // run the job re-announced it (or the window closed).
    if (CheckAdoptionLocked(job)) continue;
    FillShardsLocked(job);
    FillSlotsLocked(job);
    AddBackupsLocked(job);
    SetWaitingLocked(job, RunningWaitLocked(job));
  }
  StartJobsLocked();
}

int64_t Coordinator::RewindLocked(Job& job) {
  // Every shard restores the newest checkpoint (the job's own restore
  // point, or its initial values, if there is none yet), so all agree on
  // the step; the workers resume there and redo the steps after it.
  const int64_t from =
      job.last_checkpoint.empty() ? 0 : job.last_checkpoint_version;
  if (!job.last_checkpoint.empty()) {
    // The job's own checkpoint: its run goes on (a new phase began at its
    // start; its data origin stays).
    CheckpointSpec* c = job.status.mutable_spec()->mutable_checkpoint();
    c->set_restore(job.last_checkpoint);
    c->set_restore_as(CheckpointSpec::CONTINUE);
    c->set_reset_optimizer(false);
  }
  // Steps after the checkpoint are reported again.
  job.counted.erase(job.counted.lower_bound({from, -1}), job.counted.end());
  job.counted_floor = std::min(job.counted_floor, from);
  job.step_loss.clear();
  job.last_report.clear();
  job.newest_step = -1;
  auto* history = job.status.mutable_history();
  while (!history->empty() && history->rbegin()->step() > from) {
    history->RemoveLast();
  }
  job.status.mutable_progress()->set_step(0);
  job.ledger_version = -1;  // the restored shards report theirs
  AdvanceLocked(job, from);
  if (!job.status.spec().tensorboard_dir().empty()) {
    // TensorBoard drops the points past `from` written before.
    job.tb_pending.push_back(
        io::StartEvent(from, absl::ToDoubleSeconds(options_.now() -
                                                   absl::UnixEpoch())));
  }
  return from;
}

void Coordinator::RestartLocked(Job& job, const std::string& why) {
  // Members lost together (the slices of one daemon): one restart.
  if (batch_restarted_ != nullptr &&
      !batch_restarted_->insert(job.status.id()).second) {
    EventLocked(job, absl::StrCat(why, " (the same restart)"));
    return;
  }
  const JobSpec& spec = job.status.spec();
  const int max = spec.checkpoint().max_restarts() == 0
                      ? kDefaultMaxRestarts
                      : std::max(0, spec.checkpoint().max_restarts());
  if (job.status.restarts() >= max) {
    FinishLocked(job, FAILED,
                 absl::StrCat(why, "; no restart left (checkpoint.max_restarts ",
                              max, ")"));
    return;
  }
  job.status.set_restarts(job.status.restarts() + 1);
  job.status.set_incarnation(job.status.incarnation() + 1);
  // New keys: a member of an earlier start reaches none of the shards
  // (and its capability names the earlier incarnation).
  job.job_key = RandomSecret();
  job.shard_key = RandomSecret();
  job.revoked.clear();
  job.lost_stages.clear();  // the new start waits for stage daemons
  // Every part starts again: a member that drains leaves now (the slots it
  // handed over are held by the others).
  job.handing.clear();
  // Every slot computes again from the checkpoint: none is done (a member
  // says so again when its new part ends), and one whose member is gone is
  // free.
  job.slot_done.assign(job.slots.size(), false);
  job.training_done = false;  // the steps after the checkpoint are redone
  job.slot_free_since.resize(job.slots.size(), absl::InfiniteFuture());
  for (size_t k = 0; k < job.slots.size(); ++k) {
    if (!job.slots[k].empty() &&
        !HolderAliveLocked(job, static_cast<int>(k))) {
      job.slots[k].clear();
      job.slot_free_since[k] = options_.now();
    }
  }
  UpdateSlotHoldersLocked(job);
  const int64_t from = RewindLocked(job);
  job.ready_shards.clear();
  // Joining backups become backups like the others: they reinstall and
  // restore the checkpoint with them.
  for (size_t i = 0; i < job.joining.size() && i < job.backups.size(); ++i) {
    for (const std::string& id : job.joining[i]) {
      job.backups[i].push_back(id);
      auto it = members_.find(id);
      if (it != members_.end()) it->second.joining = false;
    }
    job.joining[i].clear();
  }
  // Members still in the job are sent the new incarnation on their next
  // heartbeat: shards reinstall and restore, trainers wait for them.
  for (auto& [id, m] : members_) {
    if (m.job == job.status.id()) m.told = false;
  }
  EventLocked(job, absl::StrCat("restart ", job.status.restarts(), " of ", max,
                                ": ", why, "; resuming from ",
                                job.last_checkpoint.empty()
                                    ? std::string("the start")
                                    : absl::StrCat("the checkpoint of step ",
                                                   from)));
}

void Coordinator::FinishLocked(Job& job, JobState state,
                               const std::string& reason) {
  if (IsFinal(job.status.state())) return;
  if (state == SUCCEEDED) AdvanceLocked(job, job.status.progress().total_steps());
  job.status.set_state(state);
  job.status.set_reason(reason);
  job.status.set_end_time_ms(NowMs());
  job.status.clear_waiting();
  job.status.clear_waiting_since_ms();
  EventLocked(job, reason.empty() ? JobState_Name(state)
                                  : absl::StrCat(JobState_Name(state), ": ",
                                                 reason));
  // Members keep the job until their next heartbeat tells them to stop.
  for (auto& [id, m] : members_) {
    if (m.job == job.status.id()) {
      m.job.clear();
      m.index = -1;
      m.also.clear();
      m.backup = false;
      m.joining = false;
    }
  }
}

void Coordinator::EventLocked(Job& job, const std::string& message) {
  // Events carry the status without the parts that grow with the job (the
  // loss history, the per-epoch counts: those are in GetJob's status). They
  // are moved aside while the status is copied: clearing them in the copy
  // would keep their storage (protobuf keeps cleared elements for reuse).
  JobEvent e;
  google::protobuf::RepeatedPtrField<LossPoint> history;
  google::protobuf::RepeatedField<int64_t> per_epoch;
  google::protobuf::RepeatedPtrField<DataFile> files;
  history.Swap(job.status.mutable_history());
  per_epoch.Swap(job.status.mutable_progress()->mutable_examples_per_epoch());
  files.Swap(job.status.mutable_data_files());
  *e.mutable_status() = job.status;
  history.Swap(job.status.mutable_history());
  per_epoch.Swap(job.status.mutable_progress()->mutable_examples_per_epoch());
  files.Swap(job.status.mutable_data_files());
  e.set_message(message);
  e.set_time_ms(NowMs());
  job.events.push_back(std::move(e));
  while (job.events.size() > std::max<size_t>(1, options_.max_events)) {
    job.events.pop_front();
    ++job.events_dropped;
  }
  watch_->Poke();
  MarkDirtyLocked(job);
}

Assignment Coordinator::AssignmentLocked(const Member& m) const {
  Assignment a;
  // A member that drains leaves once its hand-offs are over.
  if (DrainWanted(m) && !HandingLocked(m)) a.set_drain(true);
  if (m.job.empty()) {
    a.set_stop(true);  // idle: leave whatever job the member still runs
    return a;
  }
  const Job& job = jobs_.at(m.job);
  a.set_job_id(m.job);
  a.set_data_root(options_.roots.data_root);
  a.set_output_root(options_.roots.output_root);
  if (!IsPool(m.role)) {
    a.set_incarnation(job.status.incarnation());
    a.set_job_key(job.job_key);
    if (m.role == PS) a.set_shard_key(job.shard_key);
  }
  if (IsTrainer(m.role) && !ShardsReadyLocked(job)) {
    a.set_wait(true);  // not yet: the shards are installing this incarnation
    return a;
  }
  if (m.role == PS && std::find(job.shards.begin(), job.shards.end(),
                                std::string()) != job.shards.end()) {
    a.set_wait(true);  // not yet: a lost shard's index has no member (peers)
    return a;
  }
  *a.mutable_spec() = job.status.spec();
  a.set_index(m.index);
  if (IsTrainer(m.role)) *a.mutable_data_files() = job.status.data_files();
  for (const auto& [k, since] : m.also) a.add_also_indices(k);
  for (int k : m.handed) {
    if (m.also.count(k) > 0 && job.handing.count(k) > 0) {
      a.add_handed_indices(k);
    }
  }
  if (IsPool(m.role)) {
    *a.mutable_item() = job.work[m.index].item;
  }
  if (m.role == STAGE_ROLE) {
    const JobPlan plan = PlanOf(job.status.spec());
    for (size_t k = 0; k < job.slots.size(); ++k) {
      auto it = members_.find(job.slots[k]);
      const std::string& address =
          it == members_.end() ? std::string() : it->second.address;
      a.add_stage_addresses(address);
      const int slot = static_cast<int>(k);
      if (plan.ReplicaOf(slot) == plan.ReplicaOf(m.index)) a.add_peers(address);
    }
  }
  for (const std::string& s : job.status.ps_addresses()) a.add_ps_addresses(s);
  if (!IsPool(m.role)) AddCapabilityLocked(job, m, &a);
  {
    // Replicated jobs: 1 + the terms; others: the terms (a primary handed
    // its index to a joined backup as it drained), 0 until then.
    int64_t layout = job.status.spec().replicas() > 1 ? 1 : 0;
    for (int64_t t : job.terms) layout += t;
    if (layout > 0) a.set_ps_layout(layout);
  }
  if (m.role == PS && Replicated(job)) {
    a.set_backup(m.backup);
    a.set_joining(m.joining);
    for (int64_t t : job.terms) a.add_ps_terms(t);
    if (!m.backup && m.index >= 0 &&
        m.index < static_cast<int>(job.backups.size())) {
      for (const std::string& id : job.backups[m.index]) {
        auto it = members_.find(id);
        if (it != members_.end()) a.add_backups(it->second.address);
      }
    }
    // Joining backups, once installed (ready), to be brought up to date.
    if (!m.backup && m.index >= 0 &&
        m.index < static_cast<int>(job.joining.size())) {
      for (const std::string& id : job.joining[m.index]) {
        auto it = members_.find(id);
        if (it != members_.end() && job.ready_shards.count(id) > 0) {
          a.add_joining_backups(it->second.address);
        }
      }
    }
  }
  return a;
}

void Coordinator::MaybeSucceedLocked(Job& job) {
  if (job.status.state() != RUNNING) return;
  const Task task = job.status.spec().task();
  if ((task == PRETRAIN || task == CLASSIFY) && !job.training_done) return;
  for (const Item& item : job.work) {
    if (!item.done) return;
  }
  if (task == PRETRAIN || task == CLASSIFY) {
    const int64_t total = job.status.progress().total_steps();
    if (job.ledger_version < total) {
      SetWaitingLocked(job, kLedgerWait);
      return;
    }
    SetWaitingLocked(job, "");
    if (!CheckAccountingLocked(job)) return;  // FAILED, with the reason
  }
  if (task == PREPROCESS) {
    // The cleaning reports of the items, merged in item order.
    nlohmann::ordered_json merged = nlohmann::ordered_json::object();
    for (const Item& item : job.work) {
      if (item.result.report_json().empty()) continue;
      nlohmann::ordered_json j = nlohmann::ordered_json::parse(
          item.result.report_json(), nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) continue;
      MergeCounts(j, &merged);
    }
    job.status.set_preprocess_report(merged.dump());
  }
  FinishLocked(job, SUCCEEDED, "");
}

}  // namespace bertps

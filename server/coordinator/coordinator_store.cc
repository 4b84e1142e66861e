// The Coordinator's Persistence: the job records in the JobStore, and recovery after a
// restart of the coordinator.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/cluster/job_plan.h"
#include "common/status.h"
#include "glog/logging.h"
#include "server/coordinator/job_store.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_internal.h"
#include "common/ps/checkpoint.h"

namespace bertps {


JobRecord Coordinator::RecordLocked(const Job& job) const {
  JobRecord r;
  *r.mutable_status() = job.status;
  r.set_examples_per_epoch(job.examples_per_epoch);
  for (const Item& it : job.work) {
    JobRecord::ItemState* s = r.add_items();
    *s->mutable_item() = it.item;
    s->set_done(it.done);
    if (it.done) *s->mutable_result() = it.result;
  }
  for (const Round& rd : job.rounds) {
    JobRecord::RoundState* s = r.add_rounds();
    s->set_name(rd.name);
    s->set_version(rd.version);
    s->set_checkpoint(rd.checkpoint);
    s->set_first(rd.first);
    s->set_count(rd.count);
    s->set_done(rd.done);
    s->set_finished(rd.finished);
  }
  r.set_training_done(job.training_done);
  r.set_last_checkpoint(job.last_checkpoint);
  r.set_last_checkpoint_version(job.last_checkpoint_version);
  r.set_tokens_per_example(job.tokens_per_example);
  r.set_job_key(job.job_key);
  r.set_shard_key(job.shard_key);
  return r;
}

void Coordinator::MarkDirtyLocked(Job& job) {
  if (options_.store == nullptr) return;
  dirty_.insert(job.status.id());
  if (job.status.state() != job.stored_state ||
      job.status.incarnation() != job.stored_incarnation) {
    urgent_ = true;
    // Not shown before it is written: the event of the change (the newest)
    // and every one after it wait for the store.
    if (job.held_from < 0) {
      job.held_from = std::max(job.events_dropped, EventsTotal(job) - 1);
    }
  }
}

absl::Status Coordinator::FlushStore(bool force) {
  if (options_.store == nullptr) return absl::OkStatus();
  absl::MutexLock sl(&store_mu_);
  struct Write {
    std::string id;
    JobRecord record;
    int64_t events = 0;  // the job's events when the record was taken
  };
  std::vector<Write> batch;
  {
    absl::MutexLock l(&mu_);
    const absl::Time now = options_.now();
    if (dirty_.empty()) {
      return store_error_.empty() ? absl::OkStatus()
                                  : absl::UnavailableError(store_error_);
    }
    if (!force && !urgent_ && now - last_flush_ < absl::Seconds(1)) {
      return absl::OkStatus();
    }
    for (const std::string& id : dirty_) {
      Job& job = jobs_[id];
      batch.push_back({id, RecordLocked(job), EventsTotal(job)});
      job.stored_state = job.status.state();
      job.stored_incarnation = job.status.incarnation();
    }
    dirty_.clear();
    urgent_ = false;
    last_flush_ = now;
  }
  // The writes (fsync'ed by SQLite) run without the coordinator's lock:
  // heartbeats and requests go on meanwhile.
  absl::Status first;
  std::vector<bool> ok(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    absl::Status st = options_.store->Put(batch[i].id, batch[i].record);
    ok[i] = st.ok();
    if (!st.ok() && first.ok()) first = st;
  }
  absl::MutexLock l(&mu_);
  bool shown = false;
  for (size_t i = 0; i < batch.size(); ++i) {
    Job& job = jobs_[batch[i].id];
    if (!ok[i]) {
      dirty_.insert(batch[i].id);  // written again at the next flush
      urgent_ = true;
      continue;
    }
    const JobStatus& written = batch[i].record.status();
    if (job.held_from < 0) continue;
    // Durable now: what the record holds may be shown. A change made since
    // the record was taken stays held (from the events after it).
    job.durable = written;
    if (job.status.state() == written.state() &&
        job.status.incarnation() == written.incarnation()) {
      job.held_from = -1;
    } else {
      job.held_from = std::max(job.held_from, batch[i].events);
    }
    shown = true;
  }
  if (shown) watch_->Poke();
  const std::string error = first.ok() ? "" : first.ToString();
  if (error != store_error_) {
    if (error.empty()) {
      LOG(INFO) << "the job store writes again";
    } else {
      LOG(ERROR) << "the job store cannot write: " << error;
    }
    store_error_ = error;
  }
  if (!first.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "the coordinator's job store cannot write (", first.message(),
        "): the change is not durable, try again"));
  }
  return absl::OkStatus();
}

absl::Status Coordinator::FlushIfUrgent() {
  if (options_.store == nullptr) return absl::OkStatus();
  {
    absl::MutexLock l(&mu_);
    if (!urgent_) return absl::OkStatus();
  }
  return FlushStore(/*force=*/true);
}

std::string Coordinator::store_error() const {
  absl::MutexLock l(&mu_);
  return store_error_;
}

void Coordinator::AdoptNewerCheckpointLocked(Job& job) {
  const std::string& dir = job.status.spec().checkpoint().dir();
  if (dir.empty()) return;
  absl::StatusOr<std::string> latest = ps::LatestManifest(dir);
  if (!latest.ok()) return;  // none, or not readable from here
  if (*latest == job.last_checkpoint) return;
  absl::StatusOr<ps::Manifest> m = ps::ReadManifest(*latest);
  if (!m.ok()) {
    LOG(WARNING) << "job " << job.status.id() << ": " << m.status();
    return;
  }
  if (m->version <= job.last_checkpoint_version) return;
  LOG(INFO) << "job " << job.status.id() << ": the checkpoint of step "
            << m->version << " (" << *latest
            << ") is newer than the stored one (step "
            << job.last_checkpoint_version << ")";
  job.last_checkpoint = *latest;
  job.last_checkpoint_version = m->version;
  job.status.set_last_checkpoint(*latest);
  job.status.set_last_checkpoint_version(m->version);
}

void Coordinator::PrepareAdoptionLocked(Job& job) {
  const JobSpec& spec = job.status.spec();
  const int shards = spec.num_ps_shards();
  const int slots = static_cast<int>(job.status.slots_size()) > 0
                        ? job.status.slots_size()
                        : PlanOf(spec).pushers;
  job.shards.assign(shards, "");
  job.backups.assign(shards, {});
  job.joining.assign(shards, {});
  job.terms.assign(shards, 0);
  for (const ShardReplicas& r : job.status.shards()) {
    if (r.shard() >= 0 && r.shard() < shards) job.terms[r.shard()] = r.term();
  }
  while (job.status.ps_addresses_size() < shards) job.status.add_ps_addresses("");
  job.slots.assign(slots, "");
  job.slot_done.assign(slots, false);
  for (const SlotHolder& h : job.status.slots()) {
    if (h.slot() >= 0 && h.slot() < slots) job.slot_done[h.slot()] = h.done();
  }
  job.slot_free_since.assign(slots, absl::InfiniteFuture());
  job.ready_shards.clear();
  job.ledger_version = -1;
  const absl::Duration window = options_.adopt_window < absl::ZeroDuration()
                                    ? options_.member_timeout
                                    : options_.adopt_window;
  job.adopt_until = options_.now() + window;
  UpdateSlotHoldersLocked(job);
  SetWaitingLocked(job, absl::StrCat(
      "its members to re-announce incarnation ", job.status.incarnation(),
      " after the coordinator's restart (", absl::FormatDuration(window),
      " at most, then it starts again from its checkpoint)"));
  EventLocked(job, absl::StrCat(
      "coordinator restarted: adopting the members that run incarnation ",
      job.status.incarnation(), " (no restart unless a shard is not "
      "re-announced within ", absl::FormatDuration(window), ")"));
}

bool Coordinator::CheckAdoptionLocked(Job& job) {
  if (job.adopt_until == absl::InfinitePast()) return false;
  if (job.status.state() != RUNNING) {
    job.adopt_until = absl::InfinitePast();
    return false;
  }
  std::vector<int> missing;
  for (size_t i = 0; i < job.shards.size(); ++i) {
    if (job.shards[i].empty()) missing.push_back(static_cast<int>(i));
  }
  if (missing.empty()) {
    job.adopt_until = absl::InfinitePast();
    SetWaitingLocked(job, "");
    EventLocked(job, absl::StrCat(
        "every shard re-announced incarnation ", job.status.incarnation(),
        ": the job goes on with no restart"));
    return false;
  }
  if (options_.now() < job.adopt_until) return true;
  job.adopt_until = absl::InfinitePast();
  RestartLocked(job, absl::StrCat(
      "after the coordinator's restart, shard(s) ", absl::StrJoin(missing, ", "),
      " of incarnation ", job.status.incarnation(),
      " were not re-announced in time"));
  return false;
}

absl::Status Coordinator::Recover() {
  if (options_.store == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<JobRecord> records, options_.store->LoadAll());
  absl::MutexLock l(&mu_);
  for (JobRecord& r : records) {
    const std::string id = r.status().id();
    int64_t n = 0;
    if (absl::StartsWith(id, "job-") && absl::SimpleAtoi(id.substr(4), &n)) {
      next_job_ = std::max(next_job_, n + 1);
    }
    Job& job = jobs_[id];
    job.status = std::move(*r.mutable_status());
    job.stored_state = job.status.state();  // as the store has it
    job.stored_incarnation = job.status.incarnation();
    job.durable = job.status;
    job.examples_per_epoch = r.examples_per_epoch();
    for (JobRecord::ItemState& s : *r.mutable_items()) {
      Item it;
      it.item = std::move(*s.mutable_item());
      it.done = s.done();
      it.result = std::move(*s.mutable_result());
      job.work.push_back(std::move(it));
    }
    for (const JobRecord::RoundState& s : r.rounds()) {
      Round rd;
      rd.name = s.name();
      rd.version = s.version();
      rd.checkpoint = s.checkpoint();
      rd.first = s.first();
      rd.count = s.count();
      // Items of the round done, recounted (their results were kept).
      for (int i = rd.first; i < rd.first + rd.count &&
                             i < static_cast<int>(job.work.size());
           ++i) {
        rd.done += job.work[i].done;
      }
      rd.finished = s.finished();
      job.rounds.push_back(rd);
    }
    job.training_done = r.training_done();
    job.last_checkpoint = r.last_checkpoint();
    job.last_checkpoint_version = r.last_checkpoint_version();
    job.tokens_per_example = r.tokens_per_example();
    job.job_key = r.job_key();
    job.shard_key = r.shard_key();
    const JobState state = job.status.state();
    const Task task = job.status.spec().task();
    if (state == PENDING) {
      queue_.push_back(id);
      EventLocked(job, "coordinator restarted: queued");
    } else if (IsFinal(state)) {
      EventLocked(job, absl::StrCat("restored: ", JobState_Name(state)));
    } else if (state == RUNNING && (task == PRETRAIN || task == CLASSIFY) &&
               !job.training_done && !job.job_key.empty() &&
               options_.adopt_window != absl::ZeroDuration()) {
      // The members go on running it: each registers again announcing what
      // it runs, and is adopted in its place; no restart unless a shard
      // index stays without its member.
      AdoptNewerCheckpointLocked(job);
      PrepareAdoptionLocked(job);
    } else if (state == RUNNING && (task == PRETRAIN || task == CLASSIFY) &&
               !job.training_done) {
      // Members re-register without their assignments: start the job again
      // from its newest checkpoint. The store may lag the checkpoint
      // directory (it is written at most once a second, off the hot path):
      // a newer complete checkpoint there is the one to resume from.
      AdoptNewerCheckpointLocked(job);
      const int64_t from = RewindLocked(job);
      job.status.set_state(PENDING);
      job.status.clear_ps_addresses();
      queue_.push_back(id);
      EventLocked(job, job.last_checkpoint.empty()
                           ? "coordinator restarted: the job starts again"
                           : absl::StrCat("coordinator restarted: resuming from "
                                          "the checkpoint of step ", from));
    } else if (state == RUNNING) {
      EventLocked(job, "coordinator restarted: items not done are leased again");
    }
  }
  return absl::OkStatus();
}

}  // namespace bertps

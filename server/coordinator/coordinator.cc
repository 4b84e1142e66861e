#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/io/bert_example.h"
#include "common/status.h"
#include "server/coordinator/job_spec.h"

namespace bertps {
namespace {

absl::StatusOr<int64_t> CountRecords(const JobSpec& spec) {
  std::vector<std::string> globs(spec.data().begin(), spec.data().end());
  ASSIGN_OR_RETURN(auto stream, io::ExampleStream::Open(globs));
  std::string record;
  int64_t n = 0;
  for (;;) {
    ASSIGN_OR_RETURN(bool got, stream->Next(&record));
    if (!got) break;
    ++n;
  }
  return n;
}

}  // namespace

bool IsFinal(JobState s) {
  return s == SUCCEEDED || s == FAILED || s == CANCELLED;
}

Coordinator::Coordinator(CoordinatorOptions options)
    : options_([&] {
        if (!options.count_examples) options.count_examples = CountRecords;
        return options;
      }()) {}

int64_t Coordinator::NowMs() const {
  return absl::ToUnixMillis(options_.now());
}

absl::StatusOr<std::string> Coordinator::Submit(JobSpec spec) {
  ApplyJobDefaults(&spec);
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  int64_t examples = 0;
  if (spec.task() == PRETRAIN || spec.task() == CLASSIFY) {
    absl::StatusOr<int64_t> n = options_.count_examples(spec);
    if (!n.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec: data: ", n.status().message()));
    }
    if (*n == 0) return absl::InvalidArgumentError("job spec: data: no examples");
    examples = *n;
  }
  const int64_t global_batch =
      static_cast<int64_t>(spec.batch_size()) * spec.num_workers();
  int64_t total = spec.steps();
  if (total == 0 && spec.epochs() > 0) {
    total = (spec.epochs() * examples + global_batch - 1) / global_batch;
    spec.set_steps(total);  // what the workers and the LR schedule run to
  }
  absl::MutexLock l(&mu_);
  const std::string id = absl::StrFormat("job-%06d", next_job_++);
  Job& job = jobs_[id];
  job.examples_per_epoch = examples;
  job.status.set_id(id);
  *job.status.mutable_spec() = spec;
  job.status.set_state(PENDING);
  job.status.set_submit_time_ms(NowMs());
  job.status.mutable_progress()->set_total_steps(total);
  EventLocked(job, "submitted");
  queue_.push_back(id);
  StartJobsLocked();
  return id;
}

absl::StatusOr<JobStatus> Coordinator::Get(const std::string& id) const {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job ", id));
  return it->second.status;
}

std::vector<JobStatus> Coordinator::List() const {
  absl::MutexLock l(&mu_);
  std::vector<JobStatus> out;
  for (const auto& [id, job] : jobs_) {
    out.push_back(job.status);
    out.back().clear_history();
  }
  return out;
}

absl::Status Coordinator::Cancel(const std::string& id) {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job ", id));
  Job& job = it->second;
  if (IsFinal(job.status.state())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", id, " already ended: ", JobState_Name(job.status.state())));
  }
  FinishLocked(job, CANCELLED, "cancelled by request");
  return absl::OkStatus();
}

absl::StatusOr<std::vector<JobEvent>> Coordinator::WaitForEvents(
    const std::string& id, int64_t* seq, absl::Time deadline) {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job ", id));
  const Job* job = &it->second;
  auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return static_cast<int64_t>(job->events.size()) > *seq;
  };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  std::vector<JobEvent> out(job->events.begin() + std::min<int64_t>(*seq, job->events.size()),
                            job->events.end());
  *seq = static_cast<int64_t>(job->events.size());
  return out;
}

absl::StatusOr<RegisterResponse> Coordinator::Register(
    const RegisterRequest& r) {
  if (r.role() != PS && r.role() != TRAIN) {
    return absl::InvalidArgumentError(
        absl::StrCat("register: role ", Role_Name(r.role()),
                     " is not served by this coordinator yet"));
  }
  if (r.role() == PS && r.address().empty()) {
    return absl::InvalidArgumentError(
        "register: a parameter-server member needs its address");
  }
  absl::MutexLock l(&mu_);
  Member m;
  m.id = absl::StrFormat("m%d", next_member_++);
  m.role = r.role();
  m.address = r.address();
  m.last_seen = options_.now();
  members_[m.id] = m;
  RegisterResponse resp;
  resp.set_member_id(m.id);
  resp.set_heartbeat_ms(options_.heartbeat_ms);
  TickLocked();
  return resp;
}

absl::StatusOr<HeartbeatResponse> Coordinator::Heartbeat(
    const HeartbeatRequest& r) {
  absl::MutexLock l(&mu_);
  auto mit = members_.find(r.member_id());
  if (mit == members_.end()) {
    return absl::NotFoundError(
        absl::StrCat("unknown member ", r.member_id(), ": register again"));
  }
  Member& m = mit->second;
  m.last_seen = options_.now();
  m.alive = true;
  if (!r.job_id().empty() && r.job_id() == m.job) {
    Job& job = jobs_[m.job];
    if (job.status.state() == RUNNING) {
      if (m.role == TRAIN) {
        for (const StepReport& s : r.steps()) RecordLocked(job, m.index, s);
      }
      if (!r.error().empty()) {
        FinishLocked(job, FAILED,
                     absl::StrCat(m.role == PS ? "parameter-server shard "
                                               : "worker ",
                                  m.index, " (member ", m.id, "): ", r.error()));
      } else if (r.done() && m.role == TRAIN) {
        job.slot_done[m.index] = true;
        if (std::all_of(job.slot_done.begin(), job.slot_done.end(),
                        [](bool d) { return d; })) {
          FinishLocked(job, SUCCEEDED, "");
        }
      }
    }
  }
  TickLocked();
  HeartbeatResponse resp;
  *resp.mutable_assignment() = AssignmentLocked(members_[r.member_id()]);
  return resp;
}

void Coordinator::Tick() {
  absl::MutexLock l(&mu_);
  TickLocked();
}

void Coordinator::TickLocked() {
  const absl::Time now = options_.now();
  for (auto& [id, m] : members_) {
    if (!m.alive || now - m.last_seen <= options_.member_timeout) continue;
    m.alive = false;
    if (m.job.empty()) continue;
    Job& job = jobs_[m.job];
    if (job.status.state() == RUNNING) {
      if (m.role == PS) {
        FinishLocked(job, FAILED,
                     absl::StrCat("parameter-server shard ", m.index,
                                  " (member ", m.id, " at ", m.address,
                                  ") stopped answering"));
      } else {
        job.slots[m.index].clear();
        EventLocked(job, absl::StrCat("worker ", m.index, " (member ", m.id,
                                      ") stopped answering; its slot is free"));
      }
    }
    m.job.clear();
    m.index = -1;
  }
  for (auto& [id, job] : jobs_) {
    if (job.status.state() == RUNNING) FillSlotsLocked(job);
  }
  StartJobsLocked();
}

void Coordinator::StartJobsLocked() {
  while (!queue_.empty()) {
    Job& job = jobs_[queue_.front()];
    if (job.status.state() != PENDING) {
      queue_.pop_front();
      continue;
    }
    const JobSpec& spec = job.status.spec();
    std::vector<Member*> ps, train;
    for (auto& [id, m] : members_) {
      if (!m.alive || !m.job.empty()) continue;
      if (m.role == PS) ps.push_back(&m);
      if (m.role == TRAIN) train.push_back(&m);
    }
    if (static_cast<int>(ps.size()) < spec.num_ps_shards() ||
        static_cast<int>(train.size()) < spec.num_workers()) {
      return;  // FIFO: later jobs wait for this one
    }
    queue_.pop_front();
    job.shards.clear();
    job.status.clear_ps_addresses();
    for (int i = 0; i < spec.num_ps_shards(); ++i) {
      ps[i]->job = job.status.id();
      ps[i]->index = i;
      job.shards.push_back(ps[i]->id);
      job.status.add_ps_addresses(ps[i]->address);
    }
    job.slots.assign(spec.num_workers(), "");
    job.slot_done.assign(spec.num_workers(), false);
    job.status.set_state(RUNNING);
    job.status.set_start_time_ms(NowMs());
    FillSlotsLocked(job);
    EventLocked(job, absl::StrCat("running on ", spec.num_ps_shards(),
                                  " shard(s) and ", spec.num_workers(),
                                  " worker(s)"));
  }
}

void Coordinator::FillSlotsLocked(Job& job) {
  for (size_t i = 0; i < job.slots.size(); ++i) {
    if (!job.slots[i].empty() || job.slot_done[i]) continue;
    for (auto& [id, m] : members_) {
      if (m.alive && m.job.empty() && m.role == TRAIN) {
        m.job = job.status.id();
        m.index = static_cast<int>(i);
        job.slots[i] = m.id;
        EventLocked(job, absl::StrCat("worker ", i, " is member ", m.id));
        break;
      }
    }
  }
}

void Coordinator::FinishLocked(Job& job, JobState state,
                               const std::string& reason) {
  if (IsFinal(job.status.state())) return;
  if (state == SUCCEEDED) AdvanceLocked(job, job.status.progress().total_steps());
  job.status.set_state(state);
  job.status.set_reason(reason);
  job.status.set_end_time_ms(NowMs());
  EventLocked(job, reason.empty() ? JobState_Name(state)
                                  : absl::StrCat(JobState_Name(state), ": ",
                                                 reason));
  // Members keep the job until their next heartbeat tells them to stop.
  for (auto& [id, m] : members_) {
    if (m.job == job.status.id()) {
      m.job.clear();
      m.index = -1;
    }
  }
}

void Coordinator::RecordLocked(Job& job, int slot, const StepReport& r) {
  if (!job.counted.insert({slot, r.step()}).second) return;  // a repeat
  JobProgress* p = job.status.mutable_progress();
  job.last_report[slot] = r;
  // Examples: global batch t is a fixed range of the data, consumed once
  // step t is applied, whichever worker (or replacement) computed it. So the
  // count follows the shards' version, not the reports, which a dying
  // worker may never send.
  AdvanceLocked(job, std::max(r.version(), r.step() + 1));
  auto& acc = job.step_loss[r.step()];
  acc.first += r.loss();
  acc.second += 1;
  if (acc.second == static_cast<int>(job.slots.size())) {
    const double loss = acc.first / acc.second;
    job.step_loss.erase(r.step());
    p->set_loss(loss);
    p->set_learning_rate(r.learning_rate());
    double pull = 0, compute = 0, push = 0, wait = 0;
    for (const auto& [s, rep] : job.last_report) {
      pull += rep.pull_ms();
      compute += rep.compute_ms();
      push += rep.push_ms();
      wait += rep.wait_ms();
    }
    const double n = std::max<size_t>(1, job.last_report.size());
    p->set_pull_ms(pull / n);
    p->set_compute_ms(compute / n);
    p->set_push_ms(push / n);
    p->set_wait_ms(wait / n);
    if (r.examples() > 0) job.tokens_per_example = double(r.tokens()) / r.examples();
    if (static_cast<size_t>(job.status.history_size()) < options_.max_history) {
      LossPoint* lp = job.status.add_history();
      lp->set_step(r.step() + 1);
      lp->set_loss(loss);
      lp->set_learning_rate(r.learning_rate());
    }
    EventLocked(job, absl::StrCat("step ", r.step() + 1));
  }
}

void Coordinator::AdvanceLocked(Job& job, int64_t applied) {
  JobProgress* p = job.status.mutable_progress();
  applied = std::min(applied, p->total_steps());
  if (applied <= p->step()) return;
  p->set_step(applied);
  const JobSpec& spec = job.status.spec();
  const int64_t consumed =
      applied * static_cast<int64_t>(spec.batch_size()) * spec.num_workers();
  p->set_examples(consumed);
  p->clear_examples_per_epoch();
  const int64_t e = job.examples_per_epoch;
  if (e > 0) {
    for (int64_t start = 0; start < consumed; start += e) {
      p->add_examples_per_epoch(std::min(e, consumed - start));
    }
    p->set_epoch((consumed - 1) / e);
  }
  const double secs = absl::ToDoubleSeconds(
      options_.now() - absl::FromUnixMillis(job.status.start_time_ms()));
  if (secs > 0) {
    p->set_examples_per_sec(consumed / secs);
    p->set_tokens_per_sec(p->examples_per_sec() * job.tokens_per_example);
  }
}

void Coordinator::EventLocked(Job& job, const std::string& message) {
  JobEvent e;
  *e.mutable_status() = job.status;
  e.mutable_status()->clear_history();
  e.set_message(message);
  job.events.push_back(std::move(e));
}

Assignment Coordinator::AssignmentLocked(const Member& m) const {
  Assignment a;
  if (m.job.empty()) {
    a.set_stop(true);  // idle: leave whatever job the member still runs
    return a;
  }
  const Job& job = jobs_.at(m.job);
  a.set_job_id(m.job);
  *a.mutable_spec() = job.status.spec();
  a.set_index(m.index);
  for (const std::string& s : job.status.ps_addresses()) a.add_ps_addresses(s);
  return a;
}

}  // namespace bertps

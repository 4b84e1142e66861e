// The Coordinator's Progress: step reports, the loss history, and the examples counted by
// shard 0 (its example ledger).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/ps/checkpoint_retention.h"
#include "glog/logging.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_internal.h"

namespace bertps {

using coordinator_internal::ExamplesPerUpdate;
using coordinator_internal::HasEval;

void Coordinator::RecordLocked(Job& job, int slot, const StepReport& r) {
  // A checkpoint counts even on a repeated report (ASP/SSP: a restarted
  // worker 0 writes the final one after its last step).
  const int64_t ckpt_version =
      r.checkpoint_version() > 0 ? r.checkpoint_version() : r.step() + 1;
  if (!r.checkpoint().empty() && ckpt_version > job.last_checkpoint_version) {
    job.last_checkpoint = r.checkpoint();
    job.last_checkpoint_version = ckpt_version;
    job.status.set_last_checkpoint(r.checkpoint());
    job.status.set_last_checkpoint_version(ckpt_version);
    urgent_ = true;  // a restart of the coordinator resumes from it
    const JobSpec& spec = job.status.spec();
    const int64_t every = spec.eval().every_steps();
    if (HasEval(spec) && every > 0 && ckpt_version % every == 0) {
      AddRoundLocked(job, absl::StrCat("step-", ckpt_version), ckpt_version,
                     r.checkpoint());
    }
    QueuePruneLocked(job);
  }
  if (r.step() < job.counted_floor) return;  // a repeat of an old step
  if (!job.counted.insert({r.step(), slot}).second) return;  // a repeat
  // Bounded memory: steps far behind the newest report are forgotten.
  constexpr int64_t kWindow = 1000;
  if (r.step() - kWindow > job.counted_floor) {
    job.counted_floor = r.step() - kWindow;
    job.counted.erase(job.counted.begin(),
                      job.counted.lower_bound({job.counted_floor, -1}));
  }
  JobProgress* p = job.status.mutable_progress();
  job.last_report[slot] = r;
  if (r.step() > job.newest_step) {
    job.newest_step = r.step();
    job.newest_step_at = options_.now();
  }
  // Examples: global batch t is a fixed range of the data, consumed once
  // step t is applied, whichever worker (or replacement) computed it. So the
  // count follows the shards' version, not the reports, which a dying
  // worker may never send.
  AdvanceLocked(job, std::max(r.version(), r.step() + 1));
  // The loss comes from the train workers, or from each replica's last
  // pipeline stage.
  const JobPlan plan = PlanOf(job.status.spec());
  if (plan.StageOf(slot) != plan.stages - 1) return;
  // BSP: a step's loss is the mean of its workers' (each a share of the
  // global batch); ASP/SSP: every push is an update of its own, at the
  // shards' version.
  const bool bsp = plan.mode == BSP;
  const int64_t key = bsp ? r.step() : r.version() - 1;
  auto& acc = job.step_loss[key];
  acc.first += r.loss();
  acc.second += 1;
  if (!bsp || acc.second == plan.replicas) {
    const double loss = acc.first / acc.second;
    job.step_loss.erase(key);
    p->set_loss(loss);
    p->set_learning_rate(r.learning_rate());
    double pull = 0, compute = 0, push = 0, wait = 0, input = 0, cpu = 0;
    for (const auto& [s, rep] : job.last_report) {
      input += rep.input_ms();
      pull += rep.pull_ms();
      compute += rep.compute_ms();
      cpu += rep.compute_cpu_ms();
      push += rep.push_ms();
      wait += rep.wait_ms();
    }
    const double n = std::max<size_t>(1, job.last_report.size());
    p->set_pull_ms(pull / n);
    p->set_compute_ms(compute / n);
    p->set_compute_cpu_ms(cpu / n);
    p->set_push_ms(push / n);
    p->set_wait_ms(wait / n);
    p->set_input_ms(input / n);
    if (r.examples() > 0) job.tokens_per_example = double(r.tokens()) / r.examples();
    const int64_t at = key + 1;
    ScalarLocked(job, at, "train/loss", loss);
    ScalarLocked(job, at, "train/learning_rate", r.learning_rate());
    ScalarLocked(job, at, "train/examples_per_second",
                 p->examples_per_sec());
    ScalarLocked(job, at, "step_time/input_ms", p->input_ms());
    ScalarLocked(job, at, "step_time/pull_ms", p->pull_ms());
    ScalarLocked(job, at, "step_time/compute_ms", p->compute_ms());
    if (cpu > 0) {
      ScalarLocked(job, at, "step_time/compute_cpu_ms", p->compute_cpu_ms());
    }
    ScalarLocked(job, at, "step_time/push_ms", p->push_ms());
    ScalarLocked(job, at, "step_time/wait_ms", p->wait_ms());
    // One point every `stride` steps; at max_history points every other
    // one goes and the stride doubles, so the points span the whole run.
    const int64_t stride = std::max<int64_t>(1, job.status.history_stride());
    if (at % stride == 0) {
      LossPoint* lp = job.status.add_history();
      lp->set_step(at);
      lp->set_loss(loss);
      lp->set_learning_rate(r.learning_rate());
      if (static_cast<size_t>(job.status.history_size()) >=
          std::max<size_t>(2, options_.max_history)) {
        auto* h = job.status.mutable_history();
        int kept = 0;
        for (int i = 0; i < h->size(); ++i) {
          if (h->Get(i).step() % (2 * stride) == 0) h->SwapElements(kept++, i);
        }
        h->DeleteSubrange(kept, h->size() - kept);
        job.status.set_history_stride(2 * stride);
      }
    }
    EventLocked(job, absl::StrCat("step ", key + 1));
  }
}

void Coordinator::ScalarLocked(Job& job, int64_t step, const std::string& tag,
                               double value) {
  if (job.status.spec().tensorboard_dir().empty() || !std::isfinite(value)) {
    return;
  }
  job.tb_pending.push_back(io::ScalarEvent(
      step, tag, value,
      absl::ToDoubleSeconds(options_.now() - absl::UnixEpoch())));
}

void Coordinator::QueuePruneLocked(Job& job) {
  const CheckpointSpec& c = job.status.spec().checkpoint();
  if (c.keep() <= 0 || c.dir().empty() || job.last_checkpoint.empty()) return;
  Prune p;
  p.job = job.status.id();
  p.dir = c.dir();
  p.keep = c.keep();
  p.newest = job.last_checkpoint_version;
  p.pinned.insert(job.last_checkpoint_version);  // the restart point
  for (const Round& rd : job.rounds) {
    if (!rd.finished) p.pinned.insert(rd.version);
  }
  prunes_.push_back(std::move(p));
}

void Coordinator::PruneCheckpoints() {
  absl::MutexLock pl(&prune_mu_);
  std::vector<Prune> prunes;
  {
    absl::MutexLock l(&mu_);
    prunes.swap(prunes_);
  }
  // Listing and removing run without the coordinator's lock.
  for (const Prune& p : prunes) {
    absl::StatusOr<std::vector<int64_t>> have = ps::ListCheckpoints(p.dir);
    if (!have.ok()) {
      LOG(WARNING) << "job " << p.job << ": checkpoint.keep: " << have.status();
      continue;
    }
    std::vector<int64_t> removed;
    for (int64_t v : ps::CheckpointsToRemove(*have, p.keep, p.newest, p.pinned)) {
      absl::Status st = ps::RemoveCheckpoint(p.dir, v);
      if (st.ok()) {
        removed.push_back(v);
      } else if (st.code() != absl::StatusCode::kNotFound) {
        LOG(WARNING) << "job " << p.job << ": checkpoint.keep: " << st;
      }
    }
    if (removed.empty()) continue;
    absl::MutexLock l(&mu_);
    auto it = jobs_.find(p.job);
    if (it == jobs_.end()) continue;
    EventLocked(it->second,
                absl::StrCat("removed the checkpoint", removed.size() > 1 ? "s" : "",
                             " of step", removed.size() > 1 ? "s " : " ",
                             absl::StrJoin(removed, ", "), " (checkpoint.keep ",
                             p.keep, ")"));
  }
}

void Coordinator::FlushTensorBoard() {
  absl::MutexLock tl(&tb_mu_);
  struct Batch {
    std::string id, dir;
    std::vector<tf::Event> events;
  };
  std::vector<Batch> batches;
  std::vector<std::string> ended;  // their logs are closed once written
  {
    absl::MutexLock l(&mu_);
    for (auto& [id, job] : jobs_) {
      if (IsFinal(job.status.state()) && tb_logs_.count(id)) ended.push_back(id);
      if (job.tb_pending.empty()) continue;
      batches.push_back({id, job.status.spec().tensorboard_dir(),
                         std::move(job.tb_pending)});
      job.tb_pending.clear();
    }
  }
  // The writes (fsync'ed) run without the coordinator's lock.
  for (Batch& b : batches) {
    std::unique_ptr<io::EventLog>& log = tb_logs_[b.id];
    if (log == nullptr) log = std::make_unique<io::EventLog>(b.dir);
    for (tf::Event& e : b.events) log->Add(std::move(e));
    absl::Status st = log->Flush();  // kept, and written again, on failure
    if (!st.ok()) {
      LOG_EVERY_N(WARNING, 100) << "job " << b.id << ": TensorBoard: " << st;
    }
    // The job's events say so once when the writes start failing and once
    // when they succeed again (not only the coordinator's log).
    const bool was_failing = tb_failing_.count(b.id) > 0;
    if (st.ok() == was_failing) {
      if (st.ok()) {
        tb_failing_.erase(b.id);
      } else {
        tb_failing_.insert(b.id);
      }
      absl::MutexLock l(&mu_);
      auto it = jobs_.find(b.id);
      if (it != jobs_.end()) {
        EventLocked(it->second,
                    st.ok() ? std::string("TensorBoard events are written "
                                          "again (none was lost)")
                            : absl::StrCat("TensorBoard events cannot be "
                                           "written (kept, and written again "
                                           "when they can): ",
                                           st.message()));
      }
    }
  }
  for (const std::string& id : ended) {
    if (tb_logs_[id]->empty()) {
      tb_logs_.erase(id);
      tb_failing_.erase(id);
    }
  }
}

void Coordinator::AdvanceLocked(Job& job, int64_t applied) {
  JobProgress* p = job.status.mutable_progress();
  applied = std::min(applied, p->total_steps());
  if (applied <= p->step()) return;
  p->set_step(applied);
  // The first step applied with a new membership: what the change cost.
  if (job.membership_pending >= 0 &&
      job.membership_pending < job.status.membership_size()) {
    MembershipChange* c =
        job.status.mutable_membership(job.membership_pending);
    if (applied > c->step()) {
      c->set_first_step_after_ms(std::max<int64_t>(1, NowMs() - c->time_ms()));
      if (c->cause() != "start") {
        EventLocked(job, absl::StrCat(
                             "membership: ", c->members(), " member(s) (",
                             c->cause(), " at step ", c->step(),
                             "); the first step with them was applied ",
                             c->first_step_after_ms(), " ms later"));
      }
      job.membership_pending = -1;
    }
  }
  // The epoch the plan is in; the counts come from shard 0's ledger.
  const int64_t e = job.examples_per_epoch;
  const JobPlan plan = PlanOf(job.status.spec());
  const int64_t planned =
      applied >= plan.origin_update ? plan.PositionOfUpdate(applied) : 0;
  if (e > 0 && planned > 0) p->set_epoch((planned - 1) / e);
}

void Coordinator::TakeLedgerLocked(Job& job, const HeartbeatRequest& r) {
  if (r.applied_version() < job.ledger_version) return;  // an older report
  absl::StatusOr<ps::ExampleLedger> l =
      ps::ExampleLedger::Parse(r.example_ledger());
  if (!l.ok()) {
    LOG(WARNING) << job.status.id() << ": shard 0's example ledger: "
                 << l.status();
    return;
  }
  job.ledger = std::move(*l);
  job.ledger_version = r.applied_version();
  CountExamplesLocked(job);
  MaybeSucceedLocked(job);
}

void Coordinator::CountExamplesLocked(Job& job) {
  JobProgress* p = job.status.mutable_progress();
  const int64_t consumed = job.ledger.applied();
  p->set_examples(consumed);
  p->set_examples_applied_twice(job.ledger.twice());
  p->clear_examples_per_epoch();
  const int64_t e = job.examples_per_epoch;
  const auto ranges = job.ledger.ranges();
  if (e > 0 && !ranges.empty()) {
    for (int64_t epoch = 0; epoch * e < ranges.back().second; ++epoch) {
      p->add_examples_per_epoch(job.ledger.Covered(epoch * e, (epoch + 1) * e));
    }
  }
  const double secs = absl::ToDoubleSeconds(
      options_.now() - absl::FromUnixMillis(job.status.start_time_ms()));
  if (secs > 0) {
    p->set_examples_per_sec(consumed / secs);
    p->set_tokens_per_sec(p->examples_per_sec() * job.tokens_per_example);
  }
}

bool Coordinator::CheckAccountingLocked(Job& job) {
  // Each example of the plan's updates exactly once: one range from the
  // start of the stream, nothing twice (backup workers drop the pushes
  // that come late: gaps, but still nothing twice).
  const int64_t total = job.status.progress().total_steps();
  const JobSpec& spec = job.status.spec();
  // A continued run's data went on from the checkpoint's position in this
  // job's geometry (JobPlan::origin_position).
  const int64_t want = PlanOf(spec).EndPosition();
  const auto ranges = job.ledger.ranges();
  const bool exact = ranges.size() == 1 && ranges[0].first == 0 &&
                     ranges[0].second == want;
  if (job.ledger.twice() > 0 ||
      (!exact && spec.consistency().backup_workers() == 0)) {
    std::string got;
    for (size_t i = 0; i < ranges.size() && i < 4; ++i) {
      absl::StrAppend(&got, i ? ", " : "", "[", ranges[i].first, ", ",
                      ranges[i].second, ")");
    }
    if (ranges.size() > 4) absl::StrAppend(&got, ", ...");
    FinishLocked(job, FAILED,
                 absl::StrCat("data accounting: the ", total,
                              " updates should consume stream positions [0, ",
                              want, ") once each; shard 0 applied ",
                              got.empty() ? "none" : got, " with ",
                              job.ledger.twice(), " applied twice"));
    return false;
  }
  return true;
}

}  // namespace bertps

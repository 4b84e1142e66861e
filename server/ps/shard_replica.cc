// ShardCore: replication. A primary sends each update it applied (the
// aggregated gradient, its scale, the norms it exchanged, whose pushes it
// took) to its backups before it publishes the version; a backup applies
// the same update to the same state, so after version v both hold the same
// bits (docs/ps.md "Replicas").
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "glog/logging.h"
#include "server/ps/shard.h"

namespace bertps {
namespace ps {

bool ShardCore::backup() const {
  absl::MutexLock l(&mu_);
  return backup_;
}

int64_t ShardCore::term() const {
  absl::MutexLock l(&mu_);
  return term_;
}

void ShardCore::NewShardLayout(int64_t layout) {
  {
    absl::MutexLock l(&mu_);
    if (layout <= shard_layout_) return;
    shard_layout_ = layout;
    ++relayouts_;
  }
  LOG(INFO) << "shard " << options_.shard << ": the shards' layout is now "
            << layout << "; calls waiting are answered";
  waits_->Poke();
}

int64_t ShardCore::shard_layout() const {
  absl::MutexLock l(&mu_);
  return shard_layout_;
}

int64_t ShardCore::relayouts() const {
  absl::MutexLock l(&mu_);
  return relayouts_;
}

absl::Status ShardCore::Relayout(int64_t since) const {
  absl::MutexLock l(&mu_);
  if (relayouts_ == since) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(
      "shard ", options_.shard, ": a primary of the job's shards was replaced "
      "(layout ", shard_layout_, "); go on against the new layout"));
}

absl::Status ShardCore::ReplicateStep(
    ReplicaStep::Kind kind, int64_t version, const float* grad,
    float grad_scale, const StepNorms* norms, const std::vector<int>& workers,
    const std::vector<int64_t>& steps,
    const std::vector<std::pair<int64_t, int64_t>>& examples,
    absl::Time deadline) {
  if (replicas_ == nullptr || !replicas_->Active()) return absl::OkStatus();
  ReplicaStep step = MakeReplicaStep(kind, version, grad_scale,
                                     norms != nullptr ? *norms : StepNorms());
  for (size_t i = 0; i < workers.size(); ++i) {
    step.add_workers(workers[i]);
    step.add_steps(steps[i]);
    step.add_first_examples(examples[i].first);
    step.add_examples(examples[i].second);
  }
  if (kind != ReplicaStep::COMMIT) step.set_grad_elements(shard_size());
  absl::Status st = replicas_->Replicate(step, grad, deadline);
  if (!st.ok()) {
    return Annotate(st, absl::StrCat("shard ", options_.shard,
                                     ": replicating step ", version));
  }
  // Counted when a backup acknowledged the whole update.
  if (kind != ReplicaStep::STAGE && replicas_->LiveBackups() > 0) {
    absl::MutexLock l(&mu_);
    ++steps_replicated_;
  }
  return absl::OkStatus();
}

ReplicaStep ShardCore::MakeReplicaStep(ReplicaStep::Kind kind,
                                       int64_t version, float grad_scale,
                                       const StepNorms& norms) {
  ReplicaStep step;
  step.set_kind(kind);
  step.set_incarnation(options_.incarnation);
  {
    absl::MutexLock l(&mu_);
    step.set_term(term_);
  }
  step.set_version(version);
  step.set_grad_scale(grad_scale);
  step.set_grad_sq_sum(norms.grad_sq.value_or(0.0));
  if (norms.lamb.has_value()) {
    for (double x : *norms.lamb) step.add_lamb_totals(x);
  }
  return step;
}

namespace {

// The pushes of a FULL or STAGE step: as many of each, in range.
absl::Status CheckPushes(const ReplicaStep& s, int num_workers) {
  const int n = s.workers_size();
  if (n < 1 || s.steps_size() != n || s.first_examples_size() != n ||
      s.examples_size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replicated step ", s.version(), ": workers, steps and examples must "
        "be as many, and at least one"));
  }
  for (int i = 0; i < n; ++i) {
    if (s.workers(i) < 0 || s.workers(i) >= num_workers || s.steps(i) < 0 ||
        s.examples(i) < 0 || s.first_examples(i) < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "replicated step ", s.version(), ": push ", i, " (worker ",
          s.workers(i), ", step ", s.steps(i), ") out of range"));
    }
  }
  if (!std::isfinite(s.grad_scale())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replicated step ", s.version(), ": norm or scale not finite"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ReplicateResponse> ShardCore::ApplyReplicated(
    const ReplicaStep& s, const float* grad, absl::Time deadline) {
  if (s.incarnation() != options_.incarnation) {
    return absl::AbortedError(absl::StrCat(
        "replicated step of job incarnation ", s.incarnation(),
        "; this shard serves incarnation ", options_.incarnation));
  }
  const bool commit = s.kind() == ReplicaStep::COMMIT;
  if (s.grad_elements() != (commit ? 0 : shard_size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replicated step ", s.version(), " has ", s.grad_elements(),
        " gradient elements; shard ", options_.shard, " holds ", shard_size(),
        commit ? " (a commit carries none)" : ""));
  }
  if (!commit) RETURN_IF_ERROR(CheckPushes(s, workers()));
  if (s.kind() != ReplicaStep::STAGE &&
      (!std::isfinite(s.grad_sq_sum()) || s.grad_sq_sum() < 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replicated step ", s.version(), ": norm or scale not finite"));
  }
  absl::MutexLock ul(&update_mu_);
  ReplicateResponse resp;
  {
    absl::MutexLock l(&mu_);
    if (s.term() < term_) {
      return absl::AbortedError(absl::StrCat(
          "shard ", options_.shard, " is at term ", term_,
          ": the primary of term ", s.term(), " was replaced"));
    }
    if (!backup_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", options_.shard, " here is a primary (term ", term_,
          "): it takes no replicated steps"));
    }
    if (!broken_.ok()) return broken_;
    term_ = s.term();  // a newer primary is followed from now on
    resp.set_version(version_);
    if (s.version() < version_) {
      resp.set_duplicate(true);
      return resp;
    }
    if (s.version() > version_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "backup of shard ", options_.shard, " is at version ", version_,
          ", behind replicated step ", s.version(), ": it needs a catch-up"));
    }
  }
  if (s.kind() == ReplicaStep::STAGE) {
    replica_grad_.resize(shard_size());
    std::memcpy(replica_grad_.data(), grad, sizeof(float) * shard_size());
    replica_stage_ = s;
    return resp;
  }
  StepNorms norms;
  norms.grad_sq = s.grad_sq_sum();
  if (s.lamb_totals_size() > 0) {
    norms.lamb.emplace(s.lamb_totals().begin(), s.lamb_totals().end());
  }
  if (commit) {
    if (!replica_stage_.has_value() ||
        replica_stage_->version() != s.version()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "backup of shard ", options_.shard, ": the commit of step ",
          s.version(), " came without its stage"));
    }
    ReplicaStep whole = *replica_stage_;
    replica_stage_.reset();
    RETURN_IF_ERROR(ApplyReplicaLocked(whole, replica_grad_.data(),
                                       std::move(norms), deadline));
  } else {
    RETURN_IF_ERROR(ApplyReplicaLocked(s, grad, std::move(norms), deadline));
  }
  resp.set_version(s.version() + 1);
  return resp;
}

absl::Status ShardCore::ApplyReplicaLocked(const ReplicaStep& s,
                                           const float* grad, StepNorms norms,
                                           absl::Time deadline) {
  absl::Status st =
      ApplyStep(s.version(), grad, s.grad_scale(), &norms, deadline);
  absl::MutexLock l(&mu_);
  if (!st.ok()) {
    // Its optimizer state may be half-updated: it can no longer follow.
    broken_ = Annotate(st, absl::StrCat("shard ", options_.shard,
                                        ": applying replicated step ",
                                        s.version()));
    waits_->Poke();
    return broken_;
  }
  ++version_;
  for (int i = 0; i < s.workers_size(); ++i) {
    const int w = s.workers(i);
    ++clock_[w];
    last_step_[w] = std::max(last_step_[w], s.steps(i));
    ledger_.Add(s.first_examples(i), s.examples(i));
  }
  pushes_applied_ += s.workers_size();
  // A backup publishes no snapshot per step (nobody pulls from it);
  // Promote() publishes the version it reached.
  return absl::OkStatus();
}

void ShardCore::CompleteStaged() {
  absl::MutexLock ul(&update_mu_);
  if (!replica_stage_.has_value()) return;
  const ReplicaStep s = *replica_stage_;
  replica_stage_.reset();
  const absl::Time deadline = absl::Now() + options_.wait_timeout;
  // Its norms are exchanged with the peer shards as the lost primary did
  // (a peer that finished the step answers from its own partial sums).
  StepNorms norms;
  absl::Status st = ApplyStep(s.version(), replica_grad_.data(),
                              s.grad_scale(), &norms, deadline);
  if (st.ok() && replicas_ != nullptr) {
    std::vector<int> workers(s.workers().begin(), s.workers().end());
    std::vector<int64_t> steps(s.steps().begin(), s.steps().end());
    std::vector<std::pair<int64_t, int64_t>> examples;
    for (int i = 0; i < s.workers_size(); ++i) {
      examples.push_back({s.first_examples(i), s.examples(i)});
    }
    st = ReplicateStep(ReplicaStep::FULL, s.version(), replica_grad_.data(),
                       s.grad_scale(), &norms, workers, steps, examples,
                       deadline);
  }
  {
    absl::MutexLock l(&mu_);
    updating_ = false;
    if (st.ok()) {
      ++version_;
      for (int i = 0; i < s.workers_size(); ++i) {
        ++clock_[s.workers(i)];
        ledger_.Add(s.first_examples(i), s.examples(i));
      }
      pushes_applied_ += s.workers_size();
      PublishLocked();
      LOG(INFO) << "shard " << options_.shard << ": completed step "
                << s.version() << " of the lost primary";
    } else {
      broken_ = Annotate(st, absl::StrCat("shard ", options_.shard,
                                          ": completing the lost primary's "
                                          "step ", s.version()));
    }
  }
  waits_->Poke();
}

absl::Status ShardCore::Promote(int64_t term) {
  absl::MutexLock ul(&update_mu_);
  absl::MutexLock l(&mu_);
  if (!backup_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard ", options_.shard, " is a primary already (term ", term_, ")"));
  }
  if (term <= term_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "promotion to term ", term, " of a backup at term ", term_,
        ": a new primary needs a higher term"));
  }
  RETURN_IF_ERROR(broken_);
  term_ = term;
  backup_ = false;
  PublishLocked();  // pokes the waiters (calls that came early fail or go on)
  LOG(INFO) << "shard " << options_.shard << " promoted to primary of term "
            << term << " at version " << version_;
  if (replica_stage_.has_value() && replica_stage_->version() < version_) {
    replica_stage_.reset();  // committed already
  }
  if (replica_stage_.has_value()) {
    // The lost primary had every push of this step: the step is made here
    // (pushes of it retried by their workers are duplicates), then
    // published.
    for (int i = 0; i < replica_stage_->workers_size(); ++i) {
      const int w = replica_stage_->workers(i);
      last_step_[w] = std::max(last_step_[w], replica_stage_->steps(i));
    }
    updating_ = true;
    update_thread_->Post([this] { CompleteStaged(); });
  }
  return absl::OkStatus();
}

}  // namespace ps
}  // namespace bertps

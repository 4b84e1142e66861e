// ShardCore: replication. A primary sends each update it applied (the
// aggregated gradient, its scale, the norms it exchanged, whose pushes it
// took) to its backups before it publishes the version; a backup applies
// the same update to the same state, so after version v both hold the same
// bits (docs/ps.md "Replicas").
#include <algorithm>
#include <cmath>

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

absl::Status ShardCore::ReplicateApplied(
    int64_t version, const float* grad, float grad_scale,
    const StepNorms& norms, const std::vector<int>& workers,
    const std::vector<int64_t>& steps,
    const std::vector<std::pair<int64_t, int64_t>>& examples,
    absl::Time deadline) {
  if (replicas_ == nullptr || !replicas_->Active()) return absl::OkStatus();
  ReplicaStep step;
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
  for (size_t i = 0; i < workers.size(); ++i) {
    step.add_workers(workers[i]);
    step.add_steps(steps[i]);
    step.add_first_examples(examples[i].first);
    step.add_examples(examples[i].second);
  }
  step.set_grad_elements(shard_size());
  absl::Status st = replicas_->Replicate(step, grad, deadline);
  if (!st.ok()) {
    return Annotate(st, absl::StrCat("shard ", options_.shard,
                                     ": replicating step ", version));
  }
  if (replicas_->LiveBackups() > 0) {  // not when every backup was dropped
    absl::MutexLock l(&mu_);
    ++steps_replicated_;
  }
  return absl::OkStatus();
}

absl::StatusOr<ReplicateResponse> ShardCore::ApplyReplicated(
    const ReplicaStep& s, const float* grad, absl::Time deadline) {
  if (s.incarnation() != options_.incarnation) {
    return absl::AbortedError(absl::StrCat(
        "replicated step of job incarnation ", s.incarnation(),
        "; this shard serves incarnation ", options_.incarnation));
  }
  if (s.grad_elements() != shard_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replicated step ", s.version(), " has ", s.grad_elements(),
        " gradient elements; shard ", options_.shard, " holds ", shard_size()));
  }
  const int n = s.workers_size();
  if (n < 1 || s.steps_size() != n || s.first_examples_size() != n ||
      s.examples_size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replicated step ", s.version(), ": workers, steps and examples must "
        "be as many, and at least one"));
  }
  for (int i = 0; i < n; ++i) {
    if (s.workers(i) < 0 || s.workers(i) >= options_.num_workers ||
        s.steps(i) < 0 || s.examples(i) < 0 || s.first_examples(i) < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "replicated step ", s.version(), ": push ", i, " (worker ",
          s.workers(i), ", step ", s.steps(i), ") out of range"));
    }
  }
  if (!std::isfinite(s.grad_sq_sum()) || s.grad_sq_sum() < 0 ||
      !std::isfinite(s.grad_scale())) {
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
  StepNorms norms;
  norms.grad_sq = s.grad_sq_sum();
  if (s.lamb_totals_size() > 0) {
    norms.lamb.emplace(s.lamb_totals().begin(), s.lamb_totals().end());
  }
  absl::Status st =
      ApplyStep(s.version(), grad, s.grad_scale(), &norms, deadline);
  absl::MutexLock l(&mu_);
  if (!st.ok()) {
    // Its optimizer state may be half-updated: it can no longer follow.
    broken_ = Annotate(st, absl::StrCat("backup of shard ", options_.shard,
                                        ": applying replicated step ",
                                        s.version()));
    waits_->Poke();
    return broken_;
  }
  ++version_;
  for (int i = 0; i < n; ++i) {
    const int w = s.workers(i);
    ++clock_[w];
    last_step_[w] = std::max(last_step_[w], s.steps(i));
    ledger_.Add(s.first_examples(i), s.examples(i));
  }
  pushes_applied_ += n;
  resp.set_version(version_);
  // A backup publishes no snapshot per step (nobody pulls from it);
  // Promote() publishes the version it reached.
  return resp;
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
  return absl::OkStatus();
}

}  // namespace ps
}  // namespace bertps

// ShardCore: what the shards exchange -- partial sums for all-reduces (global
// norms, LAMB's per-tensor norms) and the loss denominators a BSP step's
// workers announce.
#include "server/ps/shard.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "glog/logging.h"

namespace bertps {
namespace ps {

absl::StatusOr<std::vector<double>> ShardCore::AllReduce(
    int64_t version, int phase, std::vector<double> local,
    absl::Time deadline) {
  const int S = options_.num_shards;
  if (S == 1) return local;
  ExchangeRequest req;
  req.set_from_shard(options_.shard);
  req.set_version(version);
  req.set_phase(phase);
  req.set_incarnation(options_.incarnation);
  for (double x : local) req.add_values(x);
  RETURN_IF_ERROR(ReceiveExchange(req));
  const auto key = std::make_pair(version, phase);
  {
    absl::MutexLock l(&ex_mu_);
    own_sent_[key] = local;
    while (own_sent_.size() > 8) own_sent_.erase(own_sent_.begin());
  }
  std::vector<int> others;
  for (int peer = 0; peer < S; ++peer) {
    if (peer != options_.shard) others.push_back(peer);
  }
  std::vector<ExchangeResponse> replies;
  absl::Status sent =
      peers_->SendAll(others, req, deadline, &stop_sending_, &replies);
  if (!sent.ok()) {  // its message names the shard: "shard P: ..."
    return absl::Status(sent.code(),
                        absl::StrCat("sending partial sums of step ", version,
                                     " to ", sent.message()));
  }
  // A peer's answer may carry its own partial sums (it had them already).
  for (size_t i = 0; i < replies.size() && i < others.size(); ++i) {
    if (!replies[i].has_values()) continue;
    ExchangeRequest theirs;
    theirs.set_from_shard(others[i]);
    theirs.set_version(version);
    theirs.set_phase(phase);
    theirs.set_incarnation(options_.incarnation);
    *theirs.mutable_values() = replies[i].values();
    RETURN_IF_ERROR(ReceiveExchange(theirs));
  }
  absl::MutexLock l(&ex_mu_);
  auto complete = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ex_mu_) {
    if (!aborted_.ok()) return true;
    auto it = exchange_.find(key);
    if (it == exchange_.end()) return false;
    for (const auto& v : it->second) {
      if (!v.has_value()) return false;
    }
    return true;
  };
  if (!ex_mu_.AwaitWithDeadline(absl::Condition(&complete), deadline)) {
    std::string missing;
    for (int s = 0; s < S; ++s) {
      if (!exchange_[key][s].has_value()) absl::StrAppend(&missing, " ", s);
    }
    return absl::DeadlineExceededError(
        absl::StrCat("shard ", options_.shard, ": no partial sums of step ",
                     version, " from shard(s)", missing));
  }
  RETURN_IF_ERROR(aborted_);
  std::vector<double> total(local.size(), 0.0);
  for (const auto& v : exchange_[key]) {  // shard order: identical everywhere
    for (size_t i = 0; i < total.size(); ++i) total[i] += (*v)[i];
  }
  exchange_.erase(key);
  // Partial sums that came after their exchange (retries, a replaced
  // primary's) are forgotten a few steps later.
  while (!exchange_.empty() && exchange_.begin()->first.first < version - 8) {
    exchange_.erase(exchange_.begin());
  }
  return total;
}

absl::Status ShardCore::ReceiveExchange(const ExchangeRequest& r,
                                        ExchangeResponse* reply) {
  if (r.from_shard() < 0 || r.from_shard() >= options_.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("exchange from unknown shard ", r.from_shard()));
  }
  if (r.incarnation() != options_.incarnation) {
    return absl::AbortedError(absl::StrCat(
        "exchange from shard ", r.from_shard(), " of job incarnation ",
        r.incarnation(), "; this shard serves incarnation ",
        options_.incarnation));
  }
  absl::MutexLock l(&ex_mu_);
  auto& slot = exchange_[{r.version(), r.phase()}];
  if (slot.empty()) slot.resize(options_.num_shards);
  auto& entry = slot[r.from_shard()];
  std::vector<double> values(r.values().begin(), r.values().end());
  if (entry.has_value() && *entry != values) {
    return absl::InvalidArgumentError(absl::StrCat(
        "conflicting partial sums from shard ", r.from_shard(), " for step ",
        r.version()));
  }
  entry = std::move(values);
  if (reply != nullptr) {
    reply->set_from_shard(options_.shard);
    const auto& own = slot[options_.shard];
    const std::vector<double>* mine = own.has_value() ? &*own : nullptr;
    if (mine == nullptr) {
      auto it = own_sent_.find({r.version(), r.phase()});
      if (it != own_sent_.end()) mine = &it->second;
    }
    if (mine != nullptr) {
      reply->set_has_values(true);
      for (double x : *mine) reply->add_values(x);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<AnnounceResponse> ShardCore::Announce(const AnnounceRequest& r,
                                                     absl::Time deadline) {
  RETURN_IF_ERROR(RecordAnnounce(r));
  return AnnounceTotals(r.step(), deadline);
}

bool ShardCore::AnnouncesCompleteLocked(int64_t step) const {
  if (!CheckAlive().ok()) return true;
  auto it = announces_.find(step);
  return it != announces_.end() &&
         static_cast<int>(it->second.by_worker.size()) == workers();
}

absl::Status ShardCore::RecordAnnounce(const AnnounceRequest& r) {
  if (options_.shard != 0) {
    return absl::FailedPreconditionError("batch totals are served by shard 0");
  }
  if (r.worker() < 0 || r.worker() >= workers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("announce from worker ", r.worker(), " outside [0, ",
                     workers(), ")"));
  }
  // Bounded so that the totals over all workers cannot overflow.
  constexpr int64_t kMaxAnnouncedExamples = int64_t{1} << 40;
  if (!std::isfinite(r.mlm_weight()) || r.mlm_weight() < 0 ||
      r.mlm_weight() > 1e18) {
    return absl::InvalidArgumentError(absl::StrCat(
        "announce from worker ", r.worker(), " for step ", r.step(),
        ": mlm_weight ", r.mlm_weight(), " must be finite and in [0, 1e18]"));
  }
  if (r.examples() < 0 || r.examples() > kMaxAnnouncedExamples) {
    return absl::InvalidArgumentError(absl::StrCat(
        "announce from worker ", r.worker(), " for step ", r.step(),
        ": examples ", r.examples(), " must be in [0, ",
        kMaxAnnouncedExamples, "]"));
  }
  if (r.step() < 0) {
    return absl::InvalidArgumentError("announce with a negative step");
  }
  absl::MutexLock l(&mu_);
  RETURN_IF_ERROR(CheckAlive());
  // Forget steps long gone.
  while (!announces_.empty() && announces_.begin()->first < r.step() - 16) {
    announces_.erase(announces_.begin());
  }
  announces_[r.step()].by_worker[r.worker()] = {r.mlm_weight(), r.examples()};
  if (AnnouncesCompleteLocked(r.step())) waits_->Poke();
  return absl::OkStatus();
}

absl::StatusOr<AnnounceResponse> ShardCore::AnnounceTotals(
    int64_t step, absl::Time deadline) {
  deadline = std::min(deadline, absl::Now() + options_.wait_timeout);
  absl::MutexLock l(&mu_);
  auto all = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return AnnouncesCompleteLocked(step);
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&all), deadline)) {
    std::string missing;
    for (int w = 0; w < workers(); ++w) {
      if (!announces_[step].by_worker.count(w)) absl::StrAppend(&missing, " ", w);
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "step ", step, ": no batch from worker(s)", missing));
  }
  RETURN_IF_ERROR(CheckAlive());
  AnnounceResponse resp;
  double wsum = 0;
  int64_t ex = 0;
  for (const auto& [w, v] : announces_[step].by_worker) {  // worker order
    wsum += v.first;
    ex += v.second;
  }
  resp.set_mlm_weight_total(wsum);
  resp.set_examples_total(ex);
  return resp;
}

}  // namespace ps
}  // namespace bertps

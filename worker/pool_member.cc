#include "worker/pool_member.h"

#include <utility>

#include "common/cluster/path_policy.h"
#include "glog/logging.h"

namespace bertps {

PoolMember::PoolMember(const std::string& coordinator, Role role,
                       ItemHandler handler, const SecurityConfig& security)
    : member_(coordinator, role, "", security), handler_(std::move(handler)) {}

PoolMember::~PoolMember() { CancelItem(); }

void PoolMember::CancelItem() {
  cancel_ = true;
  if (thread_.joinable()) thread_.join();
  cancel_ = false;
  job_.clear();
  index_ = -1;
}

void PoolMember::StartItem(const Assignment& a) {
  CancelItem();
  job_ = a.job_id();
  index_ = a.item().index();
  {
    absl::MutexLock l(&mu_);
    finished_ = false;
  }
  LOG(INFO) << job_ << " item " << index_ << " started";
  thread_ = std::thread([this, spec = a.spec(), item = a.item(),
                         job = a.job_id(), paths = CheckAssignmentPaths(a)] {
    // A path that left its root since the submit: the item's error, unopened.
    absl::StatusOr<WorkResult> r =
        paths.ok() ? handler_(spec, item, cancel_) : paths;
    absl::MutexLock l(&mu_);
    finished_ = true;
    if (!r.ok() && r.status().code() == absl::StatusCode::kCancelled) return;
    WorkResult res;
    if (r.ok()) {
      res = std::move(*r);
      ++items_done_;
      LOG(INFO) << job << " item " << item.index() << " done";
    } else {
      res.set_error(r.status().ToString());
      LOG(ERROR) << job << " item " << item.index() << ": " << r.status();
    }
    res.set_index(item.index());
    res.set_round(item.round());
    results_.emplace_back(job, std::move(res));
  });
}

absl::Status PoolMember::Run(absl::Duration give_up) {
  loop_.set_give_up(give_up);
  return loop_.Run();
}

void PoolMember::Fill(HeartbeatRequest* req) {
  std::vector<std::pair<std::string, WorkResult>> results;
  bool finished;
  {
    absl::MutexLock l(&mu_);
    results.swap(results_);
    finished = finished_;
  }
  if (finished && thread_.joinable()) {
    thread_.join();
    job_.clear();
    index_ = -1;
  }
  // Results of one job per heartbeat (the request names one job); the
  // others wait for the next one, which goes at once.
  sent_.clear();
  std::vector<std::pair<std::string, WorkResult>> later;
  for (auto& [job, res] : results) {
    if (req->job_id().empty()) req->set_job_id(job);
    if (job == req->job_id()) {
      *req->add_results() = res;
      sent_.emplace_back(job, res);
    } else {
      later.emplace_back(job, std::move(res));
    }
  }
  if (req->job_id().empty()) req->set_job_id(job_);
  urgent_ = !sent_.empty() || !later.empty();
  if (!later.empty()) {
    absl::MutexLock l(&mu_);
    results_.insert(results_.begin(), later.begin(), later.end());
  }
}

void PoolMember::Unsent(const HeartbeatRequest&) {
  absl::MutexLock l(&mu_);
  results_.insert(results_.begin(), sent_.begin(), sent_.end());
  sent_.clear();
}

bool PoolMember::Apply(const Assignment& a) {
  const bool has = !a.stop() && a.has_item();
  const bool same = has && a.job_id() == job_ && a.item().index() == index_;
  if (!same && !job_.empty()) CancelItem();  // no longer ours
  if (has && job_.empty()) {
    // A lease we are not working on (new, or after a result): start it.
    bool reported = false;
    for (const auto& [job, res] : sent_) {
      reported |= job == a.job_id() && res.index() == a.item().index();
    }
    if (!reported) StartItem(a);
  }
  return true;
}

MemberRun PoolMember::Running() {
  MemberRun run;
  if (!job_.empty() && index_ >= 0) {
    run.set_job_id(job_);
    run.set_item(index_);
  }
  run.set_shard(-1);
  return run;
}

void PoolMember::End(HeartbeatRequest* last) {
  CancelItem();
  // Shutting down: hand the lease back now (and any result not yet sent).
  absl::MutexLock l(&mu_);
  for (auto& [job, res] : results_) {
    if (last->job_id().empty()) last->set_job_id(job);
    if (job == last->job_id()) *last->add_results() = res;
  }
}

}  // namespace bertps

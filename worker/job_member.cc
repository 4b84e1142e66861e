#include "worker/job_member.h"

#include <utility>

#include "glog/logging.h"

namespace bertps {

JobMember::JobMember(const std::string& coordinator, Role role,
                     std::string address, const SecurityConfig& security,
                     Runner runner)
    : member_(coordinator, role, std::move(address), security),
      runner_(std::move(runner)) {}

JobMember::~JobMember() { StopPart(); }

bool JobMember::IsTransient(const absl::Status& st) {
  return st.code() == absl::StatusCode::kUnavailable ||
         st.code() == absl::StatusCode::kAborted ||
         st.code() == absl::StatusCode::kDeadlineExceeded;
}

void JobMember::StopPart() {
  cancel_ = true;
  if (thread_.joinable()) thread_.join();
  cancel_ = false;
  retry_at_ = absl::InfiniteFuture();
}

void JobMember::Start(const Assignment& a) {
  StopPart();
  current_ = a;
  incarnation_ = a.incarnation();
  started_as_ = member_.member_id();
  {
    absl::MutexLock l(&mu_);
    finished_ = false;
    transient_ = false;
    error_.clear();
  }
  thread_ = std::thread([this, a] {
    auto report = [this, job = a.job_id()](const StepReport& s) {
      if (on_report_) on_report_(job, s);
      absl::MutexLock l(&mu_);
      pending_.push_back(s);
      last_ = s;
      failing_since_ = absl::InfiniteFuture();  // progress
    };
    absl::Status st = runner_(a, &cancel_, report);
    absl::MutexLock l(&mu_);
    finished_ = true;
    if (st.ok() || st.code() == absl::StatusCode::kCancelled || cancel_) return;
    const absl::Time now = absl::Now();
    if (IsTransient(st)) {
      if (failing_since_ == absl::InfiniteFuture()) failing_since_ = now;
      if (now - failing_since_ < transient_limit_) {
        transient_ = true;
        LOG(WARNING) << a.job_id() << " slot " << a.index() << ": " << st
                     << " (starting again)";
        return;
      }
    }
    error_ = std::string(st.message());
    LOG(ERROR) << a.job_id() << " slot " << a.index() << ": " << st;
  });
}

absl::Status JobMember::Run(absl::Duration give_up) {
  absl::Time last_ok = absl::Now();
  bool running = false;  // a part of the current assignment was started
  while (!stop_) {
    std::vector<StepReport> reports;
    bool finished, transient;
    std::string error;
    {
      absl::MutexLock l(&mu_);
      reports.swap(pending_);
      finished = finished_;
      transient = transient_;
      error = error_;
    }
    HeartbeatRequest req;
    req.set_job_id(job_);
    req.set_incarnation(incarnation_);
    for (const StepReport& r : reports) *req.add_steps() = r;
    req.set_done(running && finished && !transient && error.empty());
    req.set_error(error);
    absl::StatusOr<Assignment> a = member_.Heartbeat(req);
    if (!a.ok()) {
      // Keep the reports for the next attempt (they are idempotent).
      absl::MutexLock l(&mu_);
      pending_.insert(pending_.begin(), reports.begin(), reports.end());
      if (absl::Now() - last_ok > give_up) return a.status();
      LOG(WARNING) << a.status();
      absl::SleepFor(member_.interval());
      continue;
    }
    last_ok = absl::Now();
    const bool assigned = !a->stop() && !a->job_id().empty();
    if (!job_.empty() && !(assigned && a->job_id() == job_)) {
      // Finished, failed, cancelled, or the slot went to another member.
      StopPart();
      running = false;
      job_.clear();
      incarnation_ = 0;
      if (exit_when_job_ends_) break;
    }
    if (assigned && job_.empty()) {
      job_ = a->job_id();
      incarnation_ = a->incarnation();
    }
    // The job started again (a new incarnation, or this member registered
    // again): the running part is of the old start.
    if (running && (a->incarnation() != incarnation_ ||
                    member_.member_id() != started_as_)) {
      LOG(INFO) << job_ << ": incarnation " << a->incarnation()
                << " replaces " << incarnation_;
      StopPart();
      running = false;
      absl::MutexLock l(&mu_);
      pending_.clear();  // steps of the old start are done again
      finished_ = transient_ = false;
      error_.clear();
    }
    if (assigned) incarnation_ = a->incarnation();
    if (assigned && !a->wait()) {
      if (!running) {
        Start(*a);
        running = true;
      } else if (finished && transient) {
        if (retry_at_ == absl::InfiniteFuture()) {
          retry_at_ = absl::Now() + absl::Seconds(1);
        } else if (absl::Now() >= retry_at_) {
          Start(*a);  // rejoins at the shards' step
        }
      }
    }
    absl::SleepFor(member_.interval());
  }
  StopPart();
  if (stop_) {
    HeartbeatRequest last;
    last.set_job_id(job_);
    last.set_incarnation(incarnation_);
    {
      absl::MutexLock l(&mu_);
      for (const StepReport& r : pending_) *last.add_steps() = r;
    }
    absl::Status st = member_.Leave(last);
    if (!st.ok()) LOG(WARNING) << st;
  }
  return absl::OkStatus();
}

}  // namespace bertps

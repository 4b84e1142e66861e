#include "worker/train_member.h"

#include "glog/logging.h"
#include "worker/job_options.h"
#include "worker/train_worker.h"

namespace bertps {

TrainMember::TrainMember(const std::string& coordinator,
                         const SecurityConfig& security)
    : security_(security), member_(coordinator, TRAIN, "", security) {}

TrainMember::~TrainMember() { StopJob(); }

void TrainMember::StopJob() {
  cancel_ = true;
  if (thread_.joinable()) thread_.join();
  cancel_ = false;
}

void TrainMember::StartJob(const Assignment& a) {
  StopJob();
  job_ = a.job_id();
  started_as_ = member_.member_id();
  {
    absl::MutexLock l(&mu_);
    pending_.clear();
    finished_ = false;
    error_.clear();
  }
  std::vector<std::string> ps(a.ps_addresses().begin(), a.ps_addresses().end());
  JobSpec spec = a.spec();
  const int index = a.index();
  thread_ = std::thread([this, spec, index, ps] {
    absl::Status st = [&]() -> absl::Status {
      absl::StatusOr<TrainWorkerOptions> o =
          TrainWorkerOptionsFromSpec(spec, index, ps);
      if (!o.ok()) return o.status();
      o->ps.security = security_;
      o->cancel = &cancel_;
      o->on_step = [this](const TrainStepReport& r) {
        StepReport s;
        s.set_step(r.step);
        s.set_version(r.version);
        s.set_first_example(r.first_example);
        s.set_examples(r.examples);
        s.set_tokens(r.tokens);
        s.set_loss(r.loss);
        s.set_learning_rate(r.learning_rate);
        s.set_pull_ms(r.pull_ms);
        s.set_compute_ms(r.compute_ms);
        s.set_push_ms(r.push_ms);
        s.set_wait_ms(r.wait_ms);
        s.set_checkpoint(r.checkpoint);
        absl::MutexLock l(&mu_);
        pending_.push_back(s);
        last_ = s;
      };
      absl::StatusOr<std::unique_ptr<TrainWorker>> w = TrainWorker::Create(*o);
      if (!w.ok()) return w.status();
      return (*w)->Run();
    }();
    absl::MutexLock l(&mu_);
    finished_ = true;
    if (!st.ok() && st.code() != absl::StatusCode::kCancelled) {
      error_ = std::string(st.message());
      LOG(ERROR) << "worker " << index << ": " << st;
    }
  });
}

absl::Status TrainMember::Run(absl::Duration give_up) {
  absl::Time last_ok = absl::Now();
  bool reported_end = false;
  while (!stop_) {
    std::vector<StepReport> reports;
    bool finished;
    std::string error;
    {
      absl::MutexLock l(&mu_);
      reports.swap(pending_);
      finished = finished_;
      error = error_;
    }
    absl::StatusOr<Assignment> a =
        member_.Heartbeat(job_, reports, finished && error.empty(), error);
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
    if (finished) reported_end = true;
    // Registered again (the coordinator restarted and forgot us): whatever
    // it assigns now is a new start, even of the same job.
    const bool same = !a->stop() && a->job_id() == job_ &&
                      member_.member_id() == started_as_;
    if (!same && !job_.empty()) {
      StopJob();  // cancelled, failed, finished or reassigned
      job_.clear();
      reported_end = false;
      if (exit_when_job_ends_) break;
    }
    if (!a->stop() && !a->job_id().empty() && job_.empty()) StartJob(*a);
    (void)reported_end;
    absl::SleepFor(member_.interval());
  }
  StopJob();
  return absl::OkStatus();
}

}  // namespace bertps

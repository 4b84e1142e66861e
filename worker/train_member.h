// TrainMember: a train worker daemon driven by the coordinator. A JobMember
// (worker/job_member.h) of role TRAIN whose part of a job is a TrainWorker
// for the slots it is assigned: started when assigned, stopped when told
// (job cancelled, failed, started again, or a slot given to someone else),
// started again after a transient failure. Several slots of a BSP job
// without backup workers are one TrainWorker computing them serially on one
// model (TrainWorkerOptions::also_workers); of other jobs, one TrainWorker
// per slot (their pushes are updates of their own, or a step may end
// without one).
// Thread-safety: Run() from one thread; Stop() from any.
#ifndef BERTPS_WORKER_TRAIN_MEMBER_H_
#define BERTPS_WORKER_TRAIN_MEMBER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/io/record_index.h"
#include "common/security.h"
#include "common/timeouts.h"
#include "worker/job_member.h"

namespace bertps {

class TrainMember {
 public:
  // Dials the coordinator and the shards with `security`.
  explicit TrainMember(const std::string& coordinator,
                       const SecurityConfig& security = SecurityConfig());
  // Until Stop(); fails only if the coordinator cannot be reached for
  // `give_up` in a row.
  absl::Status Run(absl::Duration give_up = kCoordinatorGiveUp) {
    return member_.Run(give_up);
  }
  void Stop() { member_.Stop(); }
  // SIGTERM: leave once the slots are handed off (JobMember::Drain).
  void Drain() { member_.Drain(); }
  // Run() returns (OK) once the first job this worker took part in has
  // ended (finished, failed or cancelled): one process per job, as in a
  // Kubernetes Job.
  void ExitWhenJobEnds() { member_.ExitWhenJobEnds(); }
  // TrainWorkerOptions::simulate_compute_ms of the parts it runs (set
  // before Run()).
  void set_simulate_compute_ms(double ms) { simulate_compute_ms_ = ms; }
  // TrainWorkerOptions::prefetch_batches of the parts it runs.
  void set_prefetch_batches(int n) { prefetch_batches_ = n; }
  // TrainWorkerOptions::max_open_files of the parts it runs.
  void set_max_open_files(int n) { max_open_files_ = n; }
  // The last step this member pushed; empty before any.
  StepReport last_report() { return member_.last_report(); }
  // Each step report, with its job's id (for metrics); set before Run().
  void set_on_report(JobMember::ReportObserver f) {
    member_.set_on_report(std::move(f));
  }

 private:
  absl::Status RunPart(const Assignment& a, std::atomic<bool>* cancel,
                       const std::function<void(const StepReport&)>& report,
                       const std::shared_ptr<SlotFeed>& slots);

  const SecurityConfig security_;
  double simulate_compute_ms_ = 0;
  int prefetch_batches_ = 4;
  int max_open_files_ = io::IndexedExampleSource::kDefaultMaxOpenFiles;
  JobMember member_;
};

}  // namespace bertps

#endif  // BERTPS_WORKER_TRAIN_MEMBER_H_

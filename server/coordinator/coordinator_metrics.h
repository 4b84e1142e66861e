// The coordinator's Prometheus metrics, by the Prometheus naming conventions
// (one metric per quantity, the job in a `job_id` label: Prometheus's own
// `job` label would rename ours on scrape). All gauges: they mirror the
// jobs' state as the coordinator holds it.
//   bertps_jobs{state}                               jobs by state
//   bertps_job_step{job_id}                          updates applied
//   bertps_job_total_steps{job_id}                   updates in the plan
//   bertps_job_loss{job_id}                          training loss, last step
//   bertps_job_learning_rate{job_id}                 the rate the shards applied
//   bertps_job_examples_per_second{job_id}
//   bertps_job_restarts{job_id}
//   bertps_job_worker_slots{job_id,holder}          own, taken_over, free
//   bertps_job_members{job_id}                      members holding slots
//   bertps_job_waiting_seconds{job_id}              0: waits for nothing
//   bertps_job_work_items{job_id}, bertps_job_work_items_done{job_id}
//   bertps_job_eval_step{job_id}, bertps_job_eval_examples{job_id}
//   bertps_job_eval_accuracy_ratio, _macro_f1_ratio, _loss (classification)
//   bertps_job_eval_mlm_accuracy_ratio, _mlm_loss, _mlm_perplexity,
//   _nsp_accuracy_ratio (pretraining)                the latest eval round
//
// Thread-safety: Update() from one thread at a time.
#ifndef BERTPS_SERVER_COORDINATOR_COORDINATOR_METRICS_H_
#define BERTPS_SERVER_COORDINATOR_COORDINATOR_METRICS_H_

#include <map>
#include <string>
#include <vector>

#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "proto/coordinator.pb.h"

namespace bertps {

class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(prometheus::Registry& registry);
  // Sets every metric from the jobs' statuses (as Coordinator::List gives).
  void Update(const std::vector<JobStatus>& jobs);

 private:
  prometheus::Family<prometheus::Gauge>& Gauge(const std::string& name,
                                               const std::string& help);

  prometheus::Registry& registry_;
  std::map<std::string, prometheus::Family<prometheus::Gauge>*> families_;
};

}  // namespace bertps

#endif  // BERTPS_SERVER_COORDINATOR_COORDINATOR_METRICS_H_

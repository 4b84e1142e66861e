// A train worker's Prometheus metrics (Prometheus naming conventions; the job
// in a `job_id` label), one observation per step:
//   bertps_worker_steps_total{job_id}             counter
//   bertps_worker_examples_total{job_id}          counter
//   bertps_worker_pull_bytes_total{job_id}        counter: tensor bytes pulled
//   bertps_worker_step{job_id}                    gauge: the last step + 1
//   bertps_worker_loss{job_id}                    gauge: its batch's loss
//   bertps_worker_step_seconds{job_id}            histogram: the whole step
//   bertps_worker_pull_seconds{job_id}            histogram: waiting for
//   bertps_worker_compute_seconds{job_id}           parameters, forward and
//   bertps_worker_push_seconds{job_id}              backward, pushing, and
//   bertps_worker_wait_seconds{job_id}              waiting for the others,
//   bertps_worker_input_seconds{job_id}             and for the batch's read
//
// Thread-safety: thread-safe.
#ifndef BERTPS_WORKER_WORKER_METRICS_H_
#define BERTPS_WORKER_WORKER_METRICS_H_

#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "proto/coordinator.pb.h"

namespace bertps {

class WorkerMetrics {
 public:
  explicit WorkerMetrics(prometheus::Registry& registry);
  void Observe(const std::string& job_id, const StepReport& r);

 private:
  prometheus::Family<prometheus::Counter>& steps_;
  prometheus::Family<prometheus::Counter>& examples_;
  prometheus::Family<prometheus::Counter>& pull_bytes_;
  prometheus::Family<prometheus::Gauge>& step_;
  prometheus::Family<prometheus::Gauge>& loss_;
  prometheus::Family<prometheus::Histogram>& step_seconds_;
  prometheus::Family<prometheus::Histogram>& pull_seconds_;
  prometheus::Family<prometheus::Histogram>& compute_seconds_;
  prometheus::Family<prometheus::Histogram>& push_seconds_;
  prometheus::Family<prometheus::Histogram>& wait_seconds_;
  prometheus::Family<prometheus::Histogram>& input_seconds_;
};

}  // namespace bertps

#endif  // BERTPS_WORKER_WORKER_METRICS_H_

#include "worker/worker_metrics.h"

#include <algorithm>
#include <cmath>

namespace bertps {
namespace {

// 1 ms to about 65 s, doubling: BERT-Tiny steps on a laptop to BERT-base
// steps on a CPU worker. Made once.
const prometheus::Histogram::BucketBoundaries& Buckets() {
  static const auto* b = [] {
    auto* v = new prometheus::Histogram::BucketBoundaries;
    for (double s = 0.001; s < 70; s *= 2) v->push_back(s);
    return v;
  }();
  return *b;
}

prometheus::Family<prometheus::Histogram>& Seconds(
    prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r);
}

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry& r)
    : steps_(prometheus::BuildCounter()
                 .Name("bertps_worker_steps_total")
                 .Help("Steps this worker computed and pushed")
                 .Register(r)),
      examples_(prometheus::BuildCounter()
                    .Name("bertps_worker_examples_total")
                    .Help("Examples this worker trained on")
                    .Register(r)),
      pull_bytes_(prometheus::BuildCounter()
                      .Name("bertps_worker_pull_bytes_total")
                      .Help("Tensor bytes this worker's pulls received")
                      .Register(r)),
      step_(prometheus::BuildGauge()
                .Name("bertps_worker_step")
                .Help("The last step this worker finished, plus one")
                .Register(r)),
      loss_(prometheus::BuildGauge()
                .Name("bertps_worker_loss")
                .Help("The loss of this worker's last batch")
                .Register(r)),
      step_seconds_(Seconds(r, "bertps_worker_step_seconds",
                            "Time of a whole step")),
      pull_seconds_(Seconds(r, "bertps_worker_pull_seconds",
                            "Time of a step spent waiting for parameters")),
      compute_seconds_(Seconds(r, "bertps_worker_compute_seconds",
                               "Time of a step's forward and backward")),
      push_seconds_(Seconds(r, "bertps_worker_push_seconds",
                            "Time of a step spent pushing its gradient")),
      wait_seconds_(Seconds(r, "bertps_worker_wait_seconds",
                            "Time of a step spent waiting for other workers")),
      input_seconds_(Seconds(r, "bertps_worker_input_seconds",
                             "Time of a step spent waiting for its batch to "
                             "be read")) {}

void WorkerMetrics::Observe(const std::string& job_id, const StepReport& r) {
  const prometheus::Labels l = {{"job_id", job_id}};
  steps_.Add(l).Increment();
  examples_.Add(l).Increment(static_cast<double>(std::max<int64_t>(0, r.examples())));
  pull_bytes_.Add(l).Increment(
      static_cast<double>(std::max<int64_t>(0, r.pull_bytes())));
  step_.Add(l).Set(static_cast<double>(r.step() + 1));
  if (std::isfinite(r.loss())) loss_.Add(l).Set(r.loss());
  auto seconds = [](double ms) { return std::max(0.0, ms) / 1000.0; };
  const double total = r.pull_ms() + r.compute_ms() + r.push_ms() +
                       r.wait_ms() + r.input_ms();
  step_seconds_.Add(l, Buckets()).Observe(seconds(total));
  pull_seconds_.Add(l, Buckets()).Observe(seconds(r.pull_ms()));
  compute_seconds_.Add(l, Buckets()).Observe(seconds(r.compute_ms()));
  push_seconds_.Add(l, Buckets()).Observe(seconds(r.push_ms()));
  wait_seconds_.Add(l, Buckets()).Observe(seconds(r.wait_ms()));
  input_seconds_.Add(l, Buckets()).Observe(seconds(r.input_ms()));
}

}  // namespace bertps

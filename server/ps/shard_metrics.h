// The shard daemon's Prometheus metrics, by the Prometheus naming
// conventions (one metric per quantity, base units in the name, counters
// ending in _total, the job in a `job_id` label: Prometheus's own `job` label
// would rename ours on scrape):
//   bertps_shard_version{job_id}                    gauge: updates applied
//   bertps_shard_pushes_total{job_id,result}        counter: applied |
//                                                   duplicate | rejected
//   bertps_shard_push_bytes_total{job_id}           counter: gradient bytes
//   bertps_shard_gradient_norm{job_id}              gauge: of the last update
//   bertps_shard_learning_rate{job_id}              gauge: the last applied
// Counters count for the life of the process: a new install of a job (a
// restart, a new incarnation) adds to them instead of starting them again.
//
// Thread-safety: Update() from one thread at a time.
#ifndef BERTPS_SERVER_PS_SHARD_METRICS_H_
#define BERTPS_SERVER_PS_SHARD_METRICS_H_

#include <cstdint>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "proto/ps.pb.h"

namespace bertps {
namespace ps {

class ShardMetrics {
 public:
  explicit ShardMetrics(prometheus::Registry& registry);

  // The stats of the installed core; `install` names the install (the
  // core's identity), so counters add what it counted since the last call.
  void Update(const std::string& job_id, const void* install,
              const StatsResponse& stats);

 private:
  prometheus::Family<prometheus::Gauge>& version_;
  prometheus::Family<prometheus::Counter>& pushes_;
  prometheus::Family<prometheus::Counter>& push_bytes_;
  prometheus::Family<prometheus::Gauge>& grad_norm_;
  prometheus::Family<prometheus::Gauge>& learning_rate_;
  const void* install_ = nullptr;
  int64_t applied_ = 0, duplicate_ = 0, rejected_ = 0, bytes_ = 0;
};

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_SERVER_PS_SHARD_METRICS_H_

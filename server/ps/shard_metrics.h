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
// A daemon of several slices (bertps_server --slices) labels each metric
// with the slice's number too (`slice`, 0-based); a daemon of one does not.
//
// Thread-safety: thread-safe (the metrics loop and a retiring install's last
// call may overlap).
#ifndef BERTPS_SERVER_PS_SHARD_METRICS_H_
#define BERTPS_SERVER_PS_SHARD_METRICS_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
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
  // `slice`: the slice's label ("" for none).
  void Update(const std::string& job_id, const void* install,
              const StatsResponse& stats, const std::string& slice = "")
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  prometheus::Family<prometheus::Gauge>& version_;
  prometheus::Family<prometheus::Counter>& pushes_;
  prometheus::Family<prometheus::Counter>& push_bytes_;
  prometheus::Family<prometheus::Gauge>& grad_norm_;
  prometheus::Family<prometheus::Gauge>& learning_rate_;
  // What a slice's install counted when last exported.
  struct Seen {
    const void* install = nullptr;
    int64_t applied = 0, duplicate = 0, rejected = 0, bytes = 0;
  };
  absl::Mutex mu_;
  std::map<std::string, Seen> seen_ ABSL_GUARDED_BY(mu_);  // by slice
};

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_SERVER_PS_SHARD_METRICS_H_

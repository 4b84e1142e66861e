#include "server/ps/shard_metrics.h"

#include <algorithm>

namespace bertps {
namespace ps {

ShardMetrics::ShardMetrics(prometheus::Registry& registry)
    : version_(prometheus::BuildGauge()
                   .Name("bertps_shard_version")
                   .Help("Updates the shard has applied (its version)")
                   .Register(registry)),
      pushes_(prometheus::BuildCounter()
                  .Name("bertps_shard_pushes_total")
                  .Help("Pushes by result: applied, duplicate (a retry, "
                        "applied once), rejected")
                  .Register(registry)),
      push_bytes_(prometheus::BuildCounter()
                      .Name("bertps_shard_push_bytes_total")
                      .Help("Gradient bytes received in pushes")
                      .Register(registry)),
      grad_norm_(prometheus::BuildGauge()
                     .Name("bertps_shard_gradient_norm")
                     .Help("Global norm of the last update's gradient")
                     .Register(registry)),
      learning_rate_(prometheus::BuildGauge()
                         .Name("bertps_shard_learning_rate")
                         .Help("Learning rate of the last update applied")
                         .Register(registry)) {}

void ShardMetrics::Update(const std::string& job_id, const void* install,
                          const StatsResponse& s, const std::string& slice) {
  absl::MutexLock l(&mu_);
  Seen& seen = seen_[slice];
  if (install != seen.install) seen = Seen{install};  // a new install: from 0
  auto labels = [&](prometheus::Labels l) {
    l["job_id"] = job_id;
    if (!slice.empty()) l["slice"] = slice;
    return l;
  };
  auto add = [&](prometheus::Family<prometheus::Counter>& f,
                 const prometheus::Labels& labels, int64_t now,
                 int64_t* last) {
    prometheus::Counter& c = f.Add(labels);  // exported from the first call
    if (now > *last) c.Increment(static_cast<double>(now - *last));
    *last = std::max(*last, now);
  };
  add(pushes_, labels({{"result", "applied"}}), s.pushes_applied(),
      &seen.applied);
  add(pushes_, labels({{"result", "duplicate"}}), s.pushes_duplicate(),
      &seen.duplicate);
  add(pushes_, labels({{"result", "rejected"}}), s.pushes_rejected(),
      &seen.rejected);
  add(push_bytes_, labels({}), s.bytes_in(), &seen.bytes);
  version_.Add(labels({})).Set(static_cast<double>(s.version()));
  grad_norm_.Add(labels({})).Set(s.last_grad_norm());
  learning_rate_.Add(labels({})).Set(s.last_learning_rate());
}

}  // namespace ps
}  // namespace bertps

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
                          const StatsResponse& s) {
  absl::MutexLock l(&mu_);
  if (install != install_) {  // a new install counts from 0
    install_ = install;
    applied_ = duplicate_ = rejected_ = bytes_ = 0;
  }
  auto add = [&](prometheus::Family<prometheus::Counter>& f,
                 const prometheus::Labels& labels, int64_t now,
                 int64_t* seen) {
    prometheus::Counter& c = f.Add(labels);  // exported from the first call
    if (now > *seen) c.Increment(static_cast<double>(now - *seen));
    *seen = std::max(*seen, now);
  };
  add(pushes_, {{"job_id", job_id}, {"result", "applied"}},
      s.pushes_applied(), &applied_);
  add(pushes_, {{"job_id", job_id}, {"result", "duplicate"}},
      s.pushes_duplicate(), &duplicate_);
  add(pushes_, {{"job_id", job_id}, {"result", "rejected"}},
      s.pushes_rejected(), &rejected_);
  add(push_bytes_, {{"job_id", job_id}}, s.bytes_in(), &bytes_);
  version_.Add({{"job_id", job_id}}).Set(static_cast<double>(s.version()));
  grad_norm_.Add({{"job_id", job_id}}).Set(s.last_grad_norm());
  learning_rate_.Add({{"job_id", job_id}}).Set(s.last_learning_rate());
}

}  // namespace ps
}  // namespace bertps

// Prometheus text metrics over HTTP (prometheus-cpp), one endpoint per
// daemon at http://HOST:PORT/metrics. Port 0 picks a free port. Clients that
// hold connections with half-sent requests do not stop the scrapes of
// others (up to ~60 such clients; each is cut after 2 s).
// Thread-safety: the registry and its metrics are thread-safe.
#ifndef BERTPS_COMMON_METRICS_H_
#define BERTPS_COMMON_METRICS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"

namespace bertps {

class MetricsEndpoint {
 public:
  // `bind` is host:port, e.g. "127.0.0.1:0".
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& bind);
  prometheus::Registry& registry() { return *registry_; }
  int port() const { return port_; }

 private:
  MetricsEndpoint() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  int port_ = 0;
};

}  // namespace bertps

#endif  // BERTPS_COMMON_METRICS_H_

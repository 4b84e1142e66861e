#include "common/metrics.h"

#include <exception>

#include "absl/strings/str_cat.h"

namespace bertps {

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& bind) {
  std::unique_ptr<MetricsEndpoint> m(new MetricsEndpoint());
  try {
    m->exposer_ = std::make_unique<prometheus::Exposer>(bind, 2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics endpoint on ", bind, ": ", e.what()));
  }
  m->registry_ = std::make_shared<prometheus::Registry>();
  m->exposer_->RegisterCollectable(m->registry_);
  std::vector<int> ports = m->exposer_->GetListeningPorts();
  m->port_ = ports.empty() ? 0 : ports[0];
  return m;
}

}  // namespace bertps

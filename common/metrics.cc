#include "common/metrics.h"

#include <exception>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/audit.h"

namespace bertps {
namespace {

constexpr int kHttpThreads = 64;

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& bind) {
  std::unique_ptr<MetricsEndpoint> m(new MetricsEndpoint());
  try {
    // CivetWeb gives each connection a thread until its request is complete
    // or request_timeout_ms passes: with 2 threads, two idle half-sent
    // requests stopped every scrape for 30 s. 64 mostly idle threads and a
    // 2 s request timeout keep scrapes answered while 50 clients dawdle.
    m->exposer_ = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", bind, "num_threads", std::to_string(kHttpThreads),
        "request_timeout_ms", "2000", "enable_keep_alive", "no"});
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics endpoint on ", bind, ": ", e.what()));
  }
  m->registry_ = std::make_shared<prometheus::Registry>();
  m->exposer_->RegisterCollectable(m->registry_);
  // The process's refused calls (common/audit.h), on every endpoint.
  m->exposer_->RegisterCollectable(AuditCollectable());
  std::vector<int> ports = m->exposer_->GetListeningPorts();
  m->port_ = ports.empty() ? 0 : ports[0];
  return m;
}

}  // namespace bertps

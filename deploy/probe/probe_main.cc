// bertps_probe: a Kubernetes exec probe. Asks a bertps daemon's
// grpc.health.v1 service whether it is SERVING, over TLS / mutual TLS when
// given the daemon's security flags; exits 0 if so, 1 otherwise (the reason
// on stderr, where the kubelet records it).
//
//   bertps_probe --addr=127.0.0.1:7400 --tls_ca=/etc/bertps/secrets/ca.crt
//       --tls_cert=... --tls_key=... --tls_server_name=bertps
#include <cstdio>

#include "absl/flags/flag.h"
#include "common/flag_checks.h"
#include "common/init.h"
#include "common/security.h"
#include "deploy/probe/probe.h"

ABSL_FLAG(std::string, addr, "", "host:port of the daemon's health service.");
ABSL_FLAG(std::string, service, "",
          "Service name to ask about (empty: the whole server).");
ABSL_FLAG(double, timeout_s, 2.0, "Deadline of the check, seconds.");

int main(int argc, char** argv) {
  bertps::InitProcess(argc, argv, "bertps_probe --addr=HOST:PORT [TLS flags]");
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "bertps_probe: %s\n", s.ToString().c_str());
    return 1;
  };
  const std::string addr = absl::GetFlag(FLAGS_addr);
  if (addr.empty()) return fail(absl::InvalidArgumentError("--addr is required"));
  const double timeout_s = absl::GetFlag(FLAGS_timeout_s);
  bertps::FlagChecks checks("bertps_probe");
  checks.RealRange("timeout_s", timeout_s, 0.001, 3600);
  if (!checks.ok()) return checks.Fail();
  absl::StatusOr<bertps::SecurityConfig> security =
      bertps::SecurityConfigFromFlags();
  if (!security.ok()) return fail(security.status());
  absl::Status st = bertps::CheckHealth(bertps::MakeChannel(addr, *security),
                                        addr, absl::GetFlag(FLAGS_service),
                                        absl::Seconds(timeout_s));
  if (!st.ok()) return fail(st);
  return 0;
}

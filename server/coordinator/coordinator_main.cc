// bertps_coordinator: takes jobs (JobService), tracks members and leases
// (ClusterService), serves grpc.health.v1 and Prometheus metrics.
//
//   bertps_coordinator --port 7400 --metrics_port 9400
#include <cstdio>
#include <memory>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/flag_checks.h"
#include "common/init.h"
#include "common/listener.h"
#include "common/metrics.h"
#include "common/io/file_util.h"
#include "common/security.h"
#include "common/signals.h"
#include "common/tcp_tuning.h"
#include "common/timeouts.h"
#include "deploy/probe/probe.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/job_store.h"
#include "server/coordinator/service.h"

ABSL_FLAG(std::string, host, "127.0.0.1", "Address to listen on.");
ABSL_FLAG(int, port, 7400, "gRPC port (0: any free port).");
ABSL_FLAG(std::string, capability_key, "",
          "Ed25519 private key (PEM file) that signs the members' "
          "capabilities (openssl genpkey -algorithm ed25519); empty: a key "
          "made at start.");
ABSL_FLAG(int, metrics_port, 0, "Prometheus port (0: any free port, -1: off).");
ABSL_FLAG(std::string, address_file, "",
          "Once listening, write HOST:PORT here (atomically; with --port 0, "
          "how a script learns the port).");
ABSL_FLAG(int, member_timeout_s, bertps::FlagSeconds(bertps::kMemberTimeout),
          "A member silent this long is dead.");
ABSL_FLAG(int, slot_takeover_s, -1,
          "A lost train worker's slot that no idle train daemon took for "
          "this long is computed by a surviving worker as well (-1: "
          "--member_timeout_s; 0: at once).");
ABSL_FLAG(int, max_heartbeats_per_s, 64,
          "Members heartbeat every 500 ms, or less often (at most every "
          "--member_timeout_s / 5) once that would exceed this many "
          "heartbeats per second in all (0: no bound).");
ABSL_FLAG(std::string, data_root, "",
          "When set, jobs may read only under this directory or --output_root "
          "(docs/security.md); every path of a spec must then be absolute.");
ABSL_FLAG(std::string, output_root, "",
          "When set, jobs may write (checkpoints, exports, records) only "
          "under this directory.");
ABSL_FLAG(std::string, jobs_root, "",
          "When set, a job without job_dir gets <jobs_root>/<job id>, and its "
          "checkpoints, export, TensorBoard files and outputs left unset go "
          "there (docs/jobs.md).");
ABSL_FLAG(int, max_watches_per_token, 256,
          "Open WatchJob calls one token may have at once (0: no bound).");
ABSL_FLAG(int, max_members_per_token, 20000,
          "Members one token may have registered at once (0: no bound).");
ABSL_FLAG(double, registrations_per_s, 50,
          "Registrations one token may make a second on average, in bursts "
          "of up to 2000 (0: no bound).");
ABSL_FLAG(std::string, state_db, "",
          "SQLite database of the jobs (created if absent): a restarted "
          "coordinator resumes them. Empty: memory only.");

int main(int argc, char** argv) {
  bertps::BlockShutdownSignals();
  bertps::InitProcess(argc, argv, "bertps_coordinator [flags]");
  bertps::FlagChecks checks("bertps_coordinator");
  checks.Port("port", absl::GetFlag(FLAGS_port))
      .Port("metrics_port", absl::GetFlag(FLAGS_metrics_port),
            /*allow_off=*/true)
      .Range("member_timeout_s", absl::GetFlag(FLAGS_member_timeout_s), 1,
             86400)
      .Range("slot_takeover_s", absl::GetFlag(FLAGS_slot_takeover_s), -1,
             86400)
      .Range("max_heartbeats_per_s", absl::GetFlag(FLAGS_max_heartbeats_per_s),
             0, 1000000)
      .Range("max_watches_per_token", absl::GetFlag(FLAGS_max_watches_per_token),
             0, 1000000)
      .Range("max_members_per_token", absl::GetFlag(FLAGS_max_members_per_token),
             0, 10000000)
      .RealRange("registrations_per_s", absl::GetFlag(FLAGS_registrations_per_s),
                 0, 1e6);
  const std::string data_root = absl::GetFlag(FLAGS_data_root);
  const std::string output_root = absl::GetFlag(FLAGS_output_root);
  checks
      .Require(data_root.empty() || data_root[0] == '/', "data_root",
               "must be an absolute directory")
      .Require(output_root.empty() || output_root[0] == '/', "output_root",
               "must be an absolute directory")
      .Require(absl::GetFlag(FLAGS_jobs_root).empty() || output_root.empty() ||
                   absl::StartsWith(absl::GetFlag(FLAGS_jobs_root),
                                    output_root + "/"),
               "jobs_root", "must be under --output_root when that is set");
  if (!checks.ok()) return checks.Fail();
  // The coordinator's timeouts against the rest (common/timeouts.h).
  bertps::Timeouts timeouts;
  timeouts.pipeline = false;
  timeouts.member_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_member_timeout_s));
  if (!checks.Check(bertps::ValidateTimeouts(timeouts)).ok()) {
    return checks.Fail();
  }
  if (absl::Status tcp = bertps::SetTcpCongestionFromFlag(); !tcp.ok()) {
    std::fprintf(stderr, "bertps_coordinator: %s\n", tcp.ToString().c_str());
    return 2;
  }
  absl::StatusOr<bertps::SecurityConfig> security =
      bertps::SecurityConfigFromFlags();
  absl::Status security_ok =
      security.ok() ? bertps::ValidateServing(*security) : security.status();
  if (!security_ok.ok()) {
    std::fprintf(stderr, "bertps_coordinator: %s\n",
                 security_ok.ToString().c_str());
    return 1;
  }
  // Token files re-read on change and on SIGHUP (docs/security.md).
  const std::unique_ptr<bertps::CredentialWatcher> credential_watcher =
      bertps::CredentialWatcher::Start(security->live);
  bertps::CoordinatorOptions options;
  options.member_timeout = timeouts.member_timeout;
  if (const std::string key = absl::GetFlag(FLAGS_capability_key);
      !key.empty()) {
    absl::StatusOr<std::string> pem = bertps::io::ReadFileToString(key, 1 << 16);
    absl::StatusOr<std::unique_ptr<bertps::CapabilitySigner>> signer =
        pem.ok() ? bertps::CapabilitySigner::FromPem(*pem)
                 : absl::StatusOr<std::unique_ptr<bertps::CapabilitySigner>>(
                       pem.status());
    if (!signer.ok()) {
      std::fprintf(stderr, "bertps_coordinator: --capability_key %s: %s\n",
                   key.c_str(), signer.status().ToString().c_str());
      return 1;
    }
    options.capability_signer = std::move(*signer);
  }
  options.max_heartbeats_per_s = absl::GetFlag(FLAGS_max_heartbeats_per_s);
  options.slot_takeover_after =
      absl::Seconds(absl::GetFlag(FLAGS_slot_takeover_s));
  // A shard a train member could not reach is asked at once.
  options.probe = [security = *security,
                   deadline = timeouts.shard_probe](const std::string& address) {
    return bertps::CheckHealth(bertps::MakeChannel(address, security), address,
                               "", deadline);
  };
  // A member registering with an address proves the server there is its
  // own (common/cluster/member_instance.h).
  options.verify_address = [security = *security,
                            deadline = timeouts.address_proof](
                               const std::string& address,
                               const std::string& service) {
    return bertps::CheckHealth(bertps::MakeChannel(address, security), address,
                               service, deadline);
  };
  options.max_members_per_token = absl::GetFlag(FLAGS_max_members_per_token);
  options.registrations_per_s = absl::GetFlag(FLAGS_registrations_per_s);
  options.jobs_root = absl::GetFlag(FLAGS_jobs_root);
  options.roots.data_root = data_root;
  options.roots.output_root = output_root;
  std::unique_ptr<bertps::JobStore> store;
  if (!absl::GetFlag(FLAGS_state_db).empty()) {
    auto st = bertps::JobStore::Open(absl::GetFlag(FLAGS_state_db));
    if (!st.ok()) {
      std::fprintf(stderr, "bertps_coordinator: %s\n", st.status().ToString().c_str());
      return 1;
    }
    store = std::move(*st);
    options.store = store.get();
  }
  bertps::Coordinator coordinator(options);
  if (absl::Status st = coordinator.Recover(); !st.ok()) {
    std::fprintf(stderr, "bertps_coordinator: %s\n", st.ToString().c_str());
    return 1;
  }
  bertps::JobServiceImpl jobs(&coordinator,
                              absl::GetFlag(FLAGS_max_watches_per_token));
  bertps::ClusterServiceImpl cluster(&coordinator);

  const std::string host = absl::GetFlag(FLAGS_host);
  std::unique_ptr<bertps::MetricsEndpoint> metrics;
  std::unique_ptr<bertps::CoordinatorMetrics> coordinator_metrics;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    auto m = bertps::MetricsEndpoint::Start(
        absl::StrCat(host, ":", absl::GetFlag(FLAGS_metrics_port)));
    if (!m.ok()) {
      std::fprintf(stderr, "bertps_coordinator: %s\n",
                   m.status().ToString().c_str());
      return 1;
    }
    metrics = std::move(*m);
    coordinator_metrics =
        std::make_unique<bertps::CoordinatorMetrics>(metrics->registry());
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // Our own accept loop (common/listener.h): gRPC 1.51's stops for good at
  // the first EMFILE; this one sheds connections and goes on.
  absl::StatusOr<bertps::ServerListener> listener = bertps::AddServerListener(
      &builder, host, absl::GetFlag(FLAGS_port),
      bertps::ServerCredentials(*security));
  if (!listener.ok()) {
    std::fprintf(stderr, "bertps_coordinator: %s\n",
                 listener.status().ToString().c_str());
    return 1;
  }
  bertps::AddTcpTuning(&builder);
  builder.RegisterService(&jobs);
  builder.RegisterService(&cluster);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    std::fprintf(stderr, "bertps_coordinator: cannot start the server\n");
    return 1;
  }
  listener->Start();
  const int port = listener->listener->port();
  if (metrics) {
    std::printf("bertps_coordinator listening on %s:%d, metrics on http://%s:%d/metrics\n",
                host.c_str(), port, host.c_str(), metrics->port());
  } else {
    std::printf("bertps_coordinator listening on %s:%d\n", host.c_str(), port);
  }
  std::fflush(stdout);
  if (absl::Status a = bertps::WriteAddressFile(
          absl::GetFlag(FLAGS_address_file), absl::StrCat(host, ":", port));
      !a.ok()) {
    std::fprintf(stderr, "bertps_coordinator: %s\n", a.ToString().c_str());
    return 1;
  }

  std::atomic<bool> done{false};
  std::thread ticker([&] {
    while (!done.load()) {
      coordinator.Tick();
      // Not serving while the job store cannot be written: a restart now
      // would lose what happened since the last good write.
      server->GetHealthCheckService()->SetServingStatus(
          coordinator.store_error().empty());
      if (coordinator_metrics) coordinator_metrics->Update(coordinator.List());
      absl::SleepFor(absl::Milliseconds(500));
    }
  });
  std::thread waiter([&] {
    int sig = bertps::WaitForShutdownSignal();
    LOG(INFO) << "signal " << sig << ": shutting down";
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  });
  server->Wait();
  listener->listener->Stop();
  done = true;
  ticker.join();
  waiter.join();
  return 0;
}

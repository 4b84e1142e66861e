// bertps_worker: the stateless worker daemon.
//
//   bertps_worker --role=train --ps 127.0.0.1:7000,127.0.0.1:7001
//       --worker_index 0 --num_workers 2 --data 'data/*.tfrecord'
//       --config tiny --batch 32 --steps 1000
// Without a coordinator a worker builds its job's spec from its flags (or
// reads it from --spec FILE) and runs that spec's plan
// (common/cluster/job_plan.h), as a coordinator's member does.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <atomic>
#include <thread>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cluster/job_spec.h"
#include "common/ps/wire.h"
#include "common/flag_checks.h"
#include "common/init.h"
#include "common/security.h"
#include "common/tcp_tuning.h"
#include "common/timeouts.h"
#include "common/kernels/matmul.h"
#include "common/kernels/threads.h"
#include "common/signals.h"
#include "glog/logging.h"
#include "common/metrics.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "worker/eval_item.h"
#include "worker/job_options.h"
#include "worker/pool_member.h"
#include "worker/preprocess_item.h"
#include "worker/stage_member.h"
#include "worker/stage_role.h"
#include "worker/train_member.h"
#include "worker/worker_metrics.h"
#include "worker/train_worker.h"

ABSL_DECLARE_FLAG(int, stage_recv_timeout_s);  // stage_role_main.cc

ABSL_FLAG(std::string, role, "train",
          "Worker role: train, preprocess, eval (these two need "
          "--coordinator) or stage (a pipeline stage, stage_role_main.cc).");
ABSL_FLAG(std::string, coordinator, "",
          "Coordinator address: take work from it (the job flags below are "
          "then ignored).");
ABSL_FLAG(int, coordinator_give_up_s,
          bertps::FlagSeconds(bertps::kCoordinatorGiveUp),
          "With --coordinator: after the coordinator has not answered for "
          "this long, stop this member's work (it keeps trying, and tells "
          "the job once the coordinator is back). 0: never; the work goes on "
          "while the coordinator is away.");
ABSL_FLAG(bool, exit_when_job_ends, false,
          "Train role with --coordinator: exit (status 0) once the first job "
          "this worker took part in has ended.");
ABSL_FLAG(std::string, stage_listen, "127.0.0.1:0",
          "Stage role with --coordinator: this daemon's StageService "
          "HOST:PORT (port 0: a free port), told to the other stages.");
ABSL_FLAG(std::string, address_file, "",
          "Stage role with --coordinator: once listening, write the "
          "StageService's HOST:PORT here (atomically).");
ABSL_FLAG(std::string, ps, "", "Comma-separated shard addresses, in order.");
ABSL_FLAG(std::string, host, "127.0.0.1", "Address of the health and metrics ports.");
ABSL_FLAG(int, health_port, -1, "grpc.health.v1 port (0: any, -1: off).");
ABSL_FLAG(int, metrics_port, -1, "Prometheus port (0: any, -1: off).");
ABSL_FLAG(std::string, spec, "",
          "Without --coordinator: a JobSpec file (text format or JSON), the "
          "job this worker runs a part of; the job flags (--num_workers ... "
          "--export_path, and the stage role's) are then ignored.");
ABSL_FLAG(int, worker_index, 0, "This worker's index.");
ABSL_FLAG(int, num_workers, 1, "Number of train workers.");
ABSL_FLAG(std::string, mode, "bsp",
          "bsp, asp or ssp: the shards' consistency (they must agree).");
ABSL_FLAG(int, num_labels, 0,
          "classify: labels (0: the model config's num_labels).");
ABSL_FLAG(std::string, data, "", "Comma-separated TFRecord globs.");
ABSL_FLAG(std::string, config, "tiny", "Model preset or config.json.");
ABSL_FLAG(std::string, task, "pretrain", "pretrain or classify.");
ABSL_FLAG(int, batch, 32, "Examples per micro-batch (per step without --accumulation).");
ABSL_FLAG(double, simulate_compute_ms, 0,
          "Train: replace forward and backward by a wait of this many ms, with "
          "fixed gradients (measuring the service at scale; 0: real compute).");
ABSL_FLAG(int, prefetch_batches, 4,
          "Train: batches read and decoded ahead on a thread of their own.");
ABSL_FLAG(int, max_open_data_files, 64,
          "Train role: data files kept open at once; the least recently "
          "read is closed to open another, so a data set of any number of "
          "files fits the descriptor limit.");
ABSL_FLAG(int, accumulation, 1,
          "Micro-batches of --batch summed per push (gradient accumulation).");
ABSL_FLAG(int64_t, steps, 100, "Total steps of the job.");
ABSL_FLAG(uint64_t, seed, 12345, "Dropout seed (and, with --shuffle, the data order).");
ABSL_FLAG(bool, dropout, true, "Dropout on.");
ABSL_FLAG(bool, shuffle, false,
          "Flags-only path: a new order of the data every epoch (--seed); "
          "jobs from the coordinator follow their spec (no_shuffle).");
ABSL_FLAG(int, threads, 1, "Compute threads.");
ABSL_FLAG(bool, bf16_push, false, "Push bf16 gradients with error feedback.");
ABSL_FLAG(std::string, precision, "fp32",
          "Standalone train worker: the products' precision, fp32 or bf16 "
          "(bf16, where the CPU has it, also pulls the dense layers' weights "
          "as bf16; a job's spec says it for a coordinated worker).");
ABSL_FLAG(std::string, checkpoint_dir, "", "Worker 0 checkpoints here.");
ABSL_FLAG(int64_t, checkpoint_every, 0, "Steps between checkpoints.");
ABSL_FLAG(bool, checkpoint_sync, false,
          "Each step that checkpoints waits for the whole write "
          "(CheckpointSpec.synchronous); default: only for the shards' copy "
          "of their state.");
ABSL_FLAG(std::string, export_path, "", "Worker 0 exports the final model.");
ABSL_FLAG(int64_t, log_every, 10, "Progress line every N steps.");
ABSL_FLAG(int, rpc_timeout_s, bertps::FlagSeconds(bertps::kPsRpcTimeout),
          "Deadline of every RPC to the shards, seconds (longer than the "
          "pull and push stall timeouts, 30 s; common/timeouts.h).");
ABSL_FLAG(int, keepalive_ms, bertps::ps::kKeepaliveTimeMs,
          "HTTP/2 keepalive pings to the shards while a call is open, ms (0: "
          "none): a shard gone or frozen fails the call about this plus "
          "min(this, 20 s) later instead of at --rpc_timeout_s.");
ABSL_FLAG(int64_t, pull_window_bytes, -1,
          "HTTP/2 receive window of each shard's pull stream, bytes (0: "
          "gRPC's, grown by its bandwidth probes; -1: the client's default, "
          "docs/ps.md).");

namespace {

// The job a worker run without a coordinator takes part in: --spec, or a
// spec of the job flags (the stage role adds its pipeline).
absl::StatusOr<bertps::JobSpec> JobSpecFromFlags(
    bertps::kernels::Precision precision) {
  if (!absl::GetFlag(FLAGS_spec).empty()) {
    return bertps::LoadJobSpec(absl::GetFlag(FLAGS_spec));
  }
  bertps::JobSpec s;
  s.set_model(absl::GetFlag(FLAGS_config));
  const std::string task = absl::GetFlag(FLAGS_task);
  if (task == "pretrain") {
    s.set_task(bertps::PRETRAIN);
  } else if (task == "classify") {
    s.set_task(bertps::CLASSIFY);
    int labels = absl::GetFlag(FLAGS_num_labels);
    if (labels <= 0) {
      absl::StatusOr<bertps::BertConfig> c =
          bertps::ResolveBertConfig(absl::GetFlag(FLAGS_config));
      if (!c.ok()) return c.status();
      labels = static_cast<int>(c->num_labels);
    }
    s.set_num_labels(labels);
  } else {
    return bertps::ParseBertTask(task).status();
  }
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "bsp") {
    s.mutable_consistency()->set_mode(bertps::BSP);
  } else if (mode == "asp") {
    s.mutable_consistency()->set_mode(bertps::ASP);
  } else if (mode == "ssp") {
    s.mutable_consistency()->set_mode(bertps::SSP);
  } else {
    return absl::InvalidArgumentError("--mode must be bsp, asp or ssp");
  }
  for (absl::string_view d :
       absl::StrSplit(absl::GetFlag(FLAGS_data), ',', absl::SkipEmpty())) {
    s.add_data(std::string(d));
  }
  const std::vector<std::string> ps =
      absl::StrSplit(absl::GetFlag(FLAGS_ps), ',', absl::SkipEmpty());
  s.set_num_ps_shards(std::max<int>(1, static_cast<int>(ps.size())));
  s.set_num_workers(absl::GetFlag(FLAGS_num_workers));
  s.set_batch_size(absl::GetFlag(FLAGS_batch));
  s.set_accumulation_steps(absl::GetFlag(FLAGS_accumulation));
  s.set_steps(absl::GetFlag(FLAGS_steps));
  s.set_seed(absl::GetFlag(FLAGS_seed));
  s.set_no_dropout(!absl::GetFlag(FLAGS_dropout));
  s.set_no_shuffle(!absl::GetFlag(FLAGS_shuffle));
  if (precision == bertps::kernels::Precision::kBf16) {
    s.set_precision(bertps::BF16);
  }
  s.mutable_checkpoint()->set_dir(absl::GetFlag(FLAGS_checkpoint_dir));
  s.mutable_checkpoint()->set_every_steps(
      absl::GetFlag(FLAGS_checkpoint_every));
  s.mutable_checkpoint()->set_synchronous(absl::GetFlag(FLAGS_checkpoint_sync));
  s.set_export_path(absl::GetFlag(FLAGS_export_path));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  bertps::BlockShutdownSignals();
  bertps::InitProcess(argc, argv, "bertps_worker --role=train [flags]");
  bertps::FlagChecks checks("bertps_worker");
  const int num_workers = absl::GetFlag(FLAGS_num_workers);
  checks.Port("health_port", absl::GetFlag(FLAGS_health_port),
              /*allow_off=*/true)
      .Port("metrics_port", absl::GetFlag(FLAGS_metrics_port),
            /*allow_off=*/true)
      .Range("num_workers", num_workers, 1, 4096)
      .Range("worker_index", absl::GetFlag(FLAGS_worker_index), 0,
             std::max(num_workers - 1, 0))
      .Range("batch", absl::GetFlag(FLAGS_batch), 1, 65536)
      .Range("coordinator_give_up_s", absl::GetFlag(FLAGS_coordinator_give_up_s),
             0, 30 * 86400)
      .Range("accumulation", absl::GetFlag(FLAGS_accumulation), 1, 1024)
      .Range("num_labels", absl::GetFlag(FLAGS_num_labels), 0, 1 << 20)
      .Range("prefetch_batches", absl::GetFlag(FLAGS_prefetch_batches), 1, 256)
      .Range("max_open_data_files", absl::GetFlag(FLAGS_max_open_data_files), 1,
             1 << 20)
      .RealRange("simulate_compute_ms", absl::GetFlag(FLAGS_simulate_compute_ms),
                 0, 3.6e6)
      .Range("steps", absl::GetFlag(FLAGS_steps), 1, int64_t{1} << 40)
      .Range("threads", absl::GetFlag(FLAGS_threads), 1, 256)
      .Range("checkpoint_every", absl::GetFlag(FLAGS_checkpoint_every), 0,
             int64_t{1} << 40)
      .Range("log_every", absl::GetFlag(FLAGS_log_every), 1, int64_t{1} << 40)
      .Range("rpc_timeout_s", absl::GetFlag(FLAGS_rpc_timeout_s), 1, 86400)
      .Range("keepalive_ms", absl::GetFlag(FLAGS_keepalive_ms), 0, 3600000)
      .Range("pull_window_bytes", absl::GetFlag(FLAGS_pull_window_bytes), -1,
             int64_t{1} << 30);
  bertps::kernels::Precision precision = bertps::kernels::Precision::kFp32;
  checks.Require(
      bertps::kernels::ParsePrecision(absl::GetFlag(FLAGS_precision), &precision),
      "precision", "must be fp32 or bf16");
  if (!checks.ok()) return checks.Fail();
  if (absl::Status tcp = bertps::SetTcpCongestionFromFlag(); !tcp.ok()) {
    std::fprintf(stderr, "bertps_worker: %s\n", tcp.ToString().c_str());
    return 2;
  }
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "bertps_worker: %s\n", s.ToString().c_str());
    return 1;
  };
  const std::string role = absl::GetFlag(FLAGS_role);
  if (role != "train" && role != "preprocess" && role != "eval" &&
      role != "stage") {
    fail(absl::InvalidArgumentError(absl::StrCat(
        "--role: '", role, "' is not one of train, preprocess, eval, stage")));
    return 2;  // a bad flag, as for every range check
  }
  // The worker's timeouts against the rest (common/timeouts.h); a stage's
  // receive timeout only where stages run.
  bertps::Timeouts timeouts;
  timeouts.pipeline = role == "stage";
  timeouts.ps_rpc = absl::Seconds(absl::GetFlag(FLAGS_rpc_timeout_s));
  timeouts.give_up = absl::Seconds(absl::GetFlag(FLAGS_coordinator_give_up_s));
  timeouts.stage_recv =
      absl::Seconds(absl::GetFlag(FLAGS_stage_recv_timeout_s));
  if (!checks.Check(bertps::ValidateTimeouts(timeouts)).ok()) {
    return checks.Fail();
  }
  if (role != "train" && role != "stage" &&
      absl::GetFlag(FLAGS_coordinator).empty()) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "--role=", role, " takes its work from a coordinator: set --coordinator")));
  }
  bertps::kernels::SetNumThreads(absl::GetFlag(FLAGS_threads));
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  const absl::Duration give_up = timeouts.give_up;
  absl::StatusOr<bertps::SecurityConfig> security =
      bertps::SecurityConfigFromFlags();
  if (!security.ok()) return fail(security.status());
  // Token files re-read on change and on SIGHUP (docs/security.md).
  const std::unique_ptr<bertps::CredentialWatcher> credential_watcher =
      bertps::CredentialWatcher::Start(security->live);
  // Health (a gRPC server with only grpc.health.v1) and metrics. gRPC
  // refuses to build a server whose only service is the default health one:
  // a generic service (it answers UNIMPLEMENTED) keeps it company.
  grpc::CallbackGenericService health_generic;
  std::unique_ptr<grpc::Server> health;
  if (absl::GetFlag(FLAGS_health_port) >= 0) {
    // The health port serves grpc.health.v1 alone, which is open to every
    // caller: no token to check there (a stage daemon's StageService checks
    // its own, StageRouter::Start).
    bertps::SecurityConfig health_security = *security;
    health_security.insecure_no_auth = true;
    absl::Status serving = bertps::ValidateServing(health_security);
    if (!serving.ok()) return fail(serving);
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder b;
    b.RegisterCallbackGenericService(&health_generic);
    int port = 0;
    b.AddListeningPort(absl::StrCat(absl::GetFlag(FLAGS_host), ":",
                                    absl::GetFlag(FLAGS_health_port)),
                       bertps::ServerCredentials(*security), &port);
    bertps::AddTcpTuning(&b);
    health = b.BuildAndStart();
    if (!health) return fail(absl::UnavailableError("cannot open the health port"));
    std::printf("health on %s:%d\n", absl::GetFlag(FLAGS_host).c_str(), port);
  }
  std::unique_ptr<bertps::MetricsEndpoint> metrics;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    auto m = bertps::MetricsEndpoint::Start(absl::StrCat(
        absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_metrics_port)));
    if (!m.ok()) return fail(m.status());
    metrics = std::move(*m);
    std::printf("metrics on http://%s:%d/metrics\n",
                absl::GetFlag(FLAGS_host).c_str(), metrics->port());
  }
  std::fflush(stdout);
  if (role == "stage" && !coordinator.empty()) {
    // Pipeline slots from the coordinator.
    auto member = bertps::StageMember::Create(
        coordinator, absl::GetFlag(FLAGS_stage_listen), *security);
    if (!member.ok()) return fail(member.status());
    std::printf("stage service address %s\n", (*member)->address().c_str());
    std::fflush(stdout);
    if (absl::Status a = bertps::WriteAddressFile(
            absl::GetFlag(FLAGS_address_file), (*member)->address());
        !a.ok()) {
      return fail(a);
    }
    std::thread waiter([&] {
      int sig = bertps::WaitForShutdownSignal();
      LOG(INFO) << "signal " << sig << ": handing work off and leaving "
                   "(a second signal exits at once)";
      bertps::ExitOnSecondSignalOr(bertps::DrainGraceFromFlags());
      (*member)->Stop();
    });
    absl::Status st = (*member)->Run(give_up);
    waiter.detach();
    if (health) health->Shutdown();
    if (!st.ok()) return fail(st);
    return 0;
  }
  if (role == "stage") {
    absl::StatusOr<bertps::JobSpec> spec = JobSpecFromFlags(precision);
    if (!spec.ok()) return fail(spec.status());
    const int rc = bertps::RunStageRole(
        *security, *spec, /*from_file=*/!absl::GetFlag(FLAGS_spec).empty());
    if (health) health->Shutdown();
    return rc;
  }
  if (role == "preprocess" || role == "eval") {
    // Pool roles: lease items from the coordinator until a signal.
    bertps::PreprocessItemRunner preprocess;
    bertps::EvalItemRunner eval;
    bertps::ItemHandler handler =
        [&](const bertps::JobSpec& spec, const bertps::WorkItem& item,
            const std::atomic<bool>& cancel) {
          return role == "eval" ? eval.Run(spec, item, cancel)
                                : preprocess.Run(spec, item, cancel);
        };
    bertps::PoolMember member(
        coordinator,
        role == "eval" ? bertps::EVAL_ROLE : bertps::PREPROCESS_ROLE, handler,
        *security);
    std::thread waiter([&] {
      int sig = bertps::WaitForShutdownSignal();
      LOG(INFO) << "signal " << sig << ": handing work off and leaving "
                   "(a second signal exits at once)";
      bertps::ExitOnSecondSignalOr(bertps::DrainGraceFromFlags());
      member.Stop();
    });
    absl::Status st = member.Run(give_up);
    waiter.detach();
    if (health) health->Shutdown();
    if (!st.ok()) return fail(st);
    return 0;
  }
  if (!coordinator.empty()) {
    bertps::TrainMember member(coordinator, *security);
    if (absl::GetFlag(FLAGS_exit_when_job_ends)) member.ExitWhenJobEnds();
    member.set_simulate_compute_ms(absl::GetFlag(FLAGS_simulate_compute_ms));
    member.set_prefetch_batches(absl::GetFlag(FLAGS_prefetch_batches));
    member.set_max_open_files(absl::GetFlag(FLAGS_max_open_data_files));
    std::unique_ptr<bertps::WorkerMetrics> worker_metrics;
    if (metrics) {
      worker_metrics = std::make_unique<bertps::WorkerMetrics>(metrics->registry());
      member.set_on_report([m = worker_metrics.get()](
                               const std::string& job, const bertps::StepReport& r) {
        m->Observe(job, r);
      });
    }
    std::thread waiter([&] {
      int sig = bertps::WaitForShutdownSignal();
      LOG(INFO) << "signal " << sig << ": handing work off and leaving "
                   "(a second signal exits at once)";
      bertps::ExitOnSecondSignalOr(bertps::DrainGraceFromFlags());
      // Its slots go to the job's other members at their next step
      // boundary while it computes them; then the coordinator says leave.
      member.Drain();
    });
    absl::Status st = member.Run(give_up);
    waiter.detach();
    if (health) health->Shutdown();
    if (!st.ok()) return fail(st);
    return 0;
  }
  // The part a coordinator would hand this worker for the spec: its plan,
  // model and data; then this daemon's own settings.
  absl::StatusOr<bertps::JobSpec> spec = JobSpecFromFlags(precision);
  if (!spec.ok()) return fail(spec.status());
  absl::StatusOr<bertps::TrainWorkerOptions> options =
      bertps::TrainWorkerOptionsFromSpec(
          *spec, absl::GetFlag(FLAGS_worker_index),
          absl::StrSplit(absl::GetFlag(FLAGS_ps), ',', absl::SkipEmpty()));
  if (!options.ok()) return fail(options.status());
  bertps::TrainWorkerOptions o = *std::move(options);
  o.ps.rpc_timeout = timeouts.ps_rpc;
  o.ps.compress_bf16 = absl::GetFlag(FLAGS_bf16_push);
  o.ps.keepalive = absl::Milliseconds(absl::GetFlag(FLAGS_keepalive_ms));
  if (absl::GetFlag(FLAGS_pull_window_bytes) >= 0) {
    o.ps.pull_window_bytes =
        static_cast<int>(absl::GetFlag(FLAGS_pull_window_bytes));
  }
  o.ps.security = *security;
  o.simulate_compute_ms = absl::GetFlag(FLAGS_simulate_compute_ms);
  o.prefetch_batches = absl::GetFlag(FLAGS_prefetch_batches);
  o.max_open_files = absl::GetFlag(FLAGS_max_open_data_files);
  o.log_every = absl::GetFlag(FLAGS_log_every);
  o.log = &std::cout;
  // SIGTERM / SIGINT: stop after the current step, exit 0.
  std::atomic<bool> cancel{false};
  bertps::CancelOnShutdownSignal(&cancel);
  o.cancel = &cancel;
  o.ps.cancel = &cancel;
  auto worker = bertps::TrainWorker::Create(o);
  if (!worker.ok()) return cancel ? 0 : fail(worker.status());
  absl::Status st = (*worker)->Run();
  if (cancel) {
    std::printf("stopped by a signal\n");
    return 0;
  }
  if (!st.ok()) return fail(st);
  return 0;
}

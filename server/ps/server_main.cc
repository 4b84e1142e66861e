// bertps_server: one parameter-server shard.
//
//   bertps_server --port 7000 --shard 0 --num_shards 2
//       --peers 127.0.0.1:7000,127.0.0.1:7001 --config tiny --workers 2
#include <algorithm>
#include <cstdio>
#include <atomic>
#include <memory>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "common/flag_checks.h"
#include "common/init.h"
#include "common/security.h"
#include "common/signals.h"
#include "common/tcp_tuning.h"
#include "glog/logging.h"
#include "common/ps/checkpoint.h"
#include "server/ps/server.h"
#include "server/ps/shard_metrics.h"
#include "server/ps/shard_member.h"
#include "common/metrics.h"
#include "prometheus/gauge.h"

ABSL_FLAG(std::string, coordinator, "",
          "Coordinator address: take jobs from it (all other job flags are "
          "then ignored).");
ABSL_FLAG(bool, exit_when_job_ends, false,
          "With --coordinator: exit (status 0) once the first job this shard "
          "served has ended, instead of waiting for the next one.");
ABSL_FLAG(std::string, host, "127.0.0.1", "Address to listen on.");
ABSL_FLAG(std::string, address_file, "",
          "Once listening, write HOST:PORT here (atomically; with --port 0, "
          "how a script learns the port).");
ABSL_FLAG(int, metrics_port, -1,
          "Prometheus metrics port (0: any free port, -1: off).");
ABSL_FLAG(int, port, 0, "Port (0: any free port; printed at start).");
ABSL_FLAG(int, shard, 0, "This shard's index.");
ABSL_FLAG(int, num_shards, 1, "Number of shards.");
ABSL_FLAG(std::string, peers, "",
          "Comma-separated addresses of all shards, in shard order.");
ABSL_FLAG(std::string, config, "tiny", "Model preset or config.json.");
ABSL_FLAG(std::string, task, "pretrain", "pretrain or classify.");
ABSL_FLAG(std::string, mode, "bsp", "bsp, asp or ssp.");
ABSL_FLAG(int, workers, 1, "Number of train workers.");
ABSL_FLAG(int, update_threads, 2,
          "Threads of an optimizer step (the result is the same for any).");
ABSL_FLAG(int, update_nice, 10,
          "BSP: nice levels the step's update drops by once the rows the next "
          "pulls ask first are done (0: unchanged).");
ABSL_FLAG(int, backup_workers, 0, "BSP: steps complete with workers - this.");
ABSL_FLAG(int64_t, staleness, 2, "SSP staleness bound.");
ABSL_FLAG(std::string, optimizer, "adam_weight_decay",
          "adam_weight_decay, adamw, lamb or sgd.");
ABSL_FLAG(double, lr, 1e-4, "Peak learning rate.");
ABSL_FLAG(double, weight_decay, 0.01, "Weight decay.");
ABSL_FLAG(int64_t, warmup_steps, 0, "Warmup steps.");
ABSL_FLAG(int64_t, total_steps, 0, "Steps of the linear decay (0: none).");
ABSL_FLAG(double, clip_norm, 1.0, "Global-norm clipping (<= 0: off).");
ABSL_FLAG(uint64_t, seed, 12345, "Initialisation seed.");
ABSL_FLAG(std::string, restore, "",
          "Checkpoint manifest, or a checkpoint directory (its latest).");

namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "bertps_server: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

namespace {

// Exports the installed shard's counters every second until `done`.
std::thread StartMetrics(bertps::ps::ShardServer* server,
                         std::atomic<bool>* done,
                         std::unique_ptr<bertps::MetricsEndpoint>* out) {
  const int port = absl::GetFlag(FLAGS_metrics_port);
  if (port < 0) return std::thread();
  auto m = bertps::MetricsEndpoint::Start(
      absl::StrCat(absl::GetFlag(FLAGS_host), ":", port));
  if (!m.ok()) {
    LOG(ERROR) << m.status();
    return std::thread();
  }
  *out = std::move(*m);
  std::printf("metrics on http://%s:%d/metrics\n",
              absl::GetFlag(FLAGS_host).c_str(), (*out)->port());
  std::fflush(stdout);
  auto metrics = std::make_shared<bertps::ps::ShardMetrics>((*out)->registry());
  // A job shorter than the period still gets its counters: the install's
  // last figures are exported as it retires.
  server->set_on_retire([metrics](bertps::ps::ShardCore& core) {
    metrics->Update(core.options().job_id, &core, core.Stats());
  });
  return std::thread([server, done, metrics] {
    while (!done->load()) {
      if (std::shared_ptr<bertps::ps::ShardCore> core = server->shared_core()) {
        metrics->Update(core->options().job_id, core.get(), core->Stats());
      }
      absl::SleepFor(absl::Seconds(1));
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  bertps::BlockShutdownSignals();
  bertps::InitProcess(argc, argv, "bertps_server [flags]");
  bertps::FlagChecks checks("bertps_server");
  const int num_shards = absl::GetFlag(FLAGS_num_shards);
  const int workers = absl::GetFlag(FLAGS_workers);
  checks.Port("port", absl::GetFlag(FLAGS_port))
      .Port("metrics_port", absl::GetFlag(FLAGS_metrics_port),
            /*allow_off=*/true)
      .Range("num_shards", num_shards, 1, 1024)
      .Range("shard", absl::GetFlag(FLAGS_shard), 0,
             std::max(num_shards - 1, 0))
      .Range("workers", workers, 1, 4096)
      .Range("backup_workers", absl::GetFlag(FLAGS_backup_workers), 0,
             std::max(workers - 1, 0))
      .Range("update_threads", absl::GetFlag(FLAGS_update_threads), 1, 256)
      .Range("update_nice", absl::GetFlag(FLAGS_update_nice), 0, 19)
      .Range("staleness", absl::GetFlag(FLAGS_staleness), 0, 1000000)
      .RealRange("lr", absl::GetFlag(FLAGS_lr), 0, 1e6)
      .RealRange("weight_decay", absl::GetFlag(FLAGS_weight_decay), 0, 1e6)
      .RealRange("clip_norm", absl::GetFlag(FLAGS_clip_norm), -1e30, 1e30)
      .Range("warmup_steps", absl::GetFlag(FLAGS_warmup_steps), 0,
             int64_t{1} << 40)
      .Range("total_steps", absl::GetFlag(FLAGS_total_steps), 0,
             int64_t{1} << 40);
  if (!checks.ok()) return checks.Fail();
  if (absl::Status tcp = bertps::SetTcpCongestionFromFlag(); !tcp.ok()) {
    std::fprintf(stderr, "bertps_server: %s\n", tcp.ToString().c_str());
    return 2;
  }
  absl::StatusOr<bertps::SecurityConfig> security =
      bertps::SecurityConfigFromFlags();
  absl::Status security_ok =
      security.ok() ? bertps::ValidateServing(*security) : security.status();
  if (!security_ok.ok()) return Fail(security_ok);
  std::atomic<bool> metrics_done{false};
  std::unique_ptr<bertps::MetricsEndpoint> metrics;
  std::thread metrics_thread;
  struct Join {
    std::atomic<bool>* done;
    std::thread* t;
    ~Join() {
      done->store(true);
      if (t->joinable()) t->join();
    }
  } join{&metrics_done, &metrics_thread};
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (!coordinator.empty()) {
    auto server = bertps::ps::ShardServer::StartIdle(
        absl::StrCat(absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_port)),
        *security);
    if (!server.ok()) return Fail(server.status());
    std::printf("bertps_server listening on %s, taking jobs from %s\n",
                (*server)->address().c_str(), coordinator.c_str());
    std::fflush(stdout);
    if (absl::Status a = bertps::WriteAddressFile(
            absl::GetFlag(FLAGS_address_file), (*server)->address());
        !a.ok()) {
      return Fail(a);
    }
    metrics_thread = StartMetrics(server->get(), &metrics_done, &metrics);
    bertps::ps::ShardMember member(coordinator, server->get());
    member.set_update_threads(absl::GetFlag(FLAGS_update_threads));
    member.set_update_nice(absl::GetFlag(FLAGS_update_nice));
    if (absl::GetFlag(FLAGS_exit_when_job_ends)) member.ExitWhenJobEnds();
    absl::Status member_status;
    std::thread loop([&] { member_status = member.Run(); (*server)->Shutdown(); });
    std::thread waiter([&] {
      int sig = bertps::WaitForShutdownSignal();
      LOG(INFO) << "signal " << sig << ": shutting down";
      member.Stop();
    });
    (*server)->Wait();
    loop.join();
    waiter.detach();
    if (!member_status.ok()) return Fail(member_status);
    return 0;
  }
  bertps::ps::ShardOptions o;
  o.shard = absl::GetFlag(FLAGS_shard);
  o.num_shards = absl::GetFlag(FLAGS_num_shards);
  auto config = bertps::ResolveBertConfig(absl::GetFlag(FLAGS_config));
  if (!config.ok()) return Fail(config.status());
  o.config = *config;
  auto task = bertps::ParseBertTask(absl::GetFlag(FLAGS_task));
  if (!task.ok()) return Fail(task.status());
  o.task = *task;
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "bsp") {
    o.mode = bertps::BSP;
  } else if (mode == "asp") {
    o.mode = bertps::ASP;
  } else if (mode == "ssp") {
    o.mode = bertps::SSP;
  } else {
    return Fail(absl::InvalidArgumentError("--mode must be bsp, asp or ssp"));
  }
  o.num_workers = absl::GetFlag(FLAGS_workers);
  o.update_threads = absl::GetFlag(FLAGS_update_threads);
  o.update_nice = absl::GetFlag(FLAGS_update_nice);
  o.backup_workers = absl::GetFlag(FLAGS_backup_workers);
  o.staleness = absl::GetFlag(FLAGS_staleness);
  auto kind = bertps::optim::ParseOptimizerKind(absl::GetFlag(FLAGS_optimizer));
  if (!kind.ok()) return Fail(kind.status());
  o.optimizer.kind = *kind;
  o.optimizer.learning_rate = absl::GetFlag(FLAGS_lr);
  o.optimizer.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.optimizer.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  o.optimizer.total_steps = absl::GetFlag(FLAGS_total_steps);
  o.optimizer.clip_norm = absl::GetFlag(FLAGS_clip_norm);
  o.init_seed = absl::GetFlag(FLAGS_seed);
  std::vector<std::string> peers =
      absl::StrSplit(absl::GetFlag(FLAGS_peers), ',', absl::SkipEmpty());
  if (o.num_shards > 1 && static_cast<int>(peers.size()) != o.num_shards) {
    return Fail(absl::InvalidArgumentError(
        "--peers must list every shard's address, in shard order"));
  }
  const std::string address = absl::StrCat(absl::GetFlag(FLAGS_host), ":",
                                           absl::GetFlag(FLAGS_port));
  auto server = bertps::ps::ShardServer::Start(o, address, peers, *security);
  if (!server.ok()) return Fail(server.status());
  std::string restore = absl::GetFlag(FLAGS_restore);
  if (!restore.empty()) {
    if (restore.size() < 5 || restore.substr(restore.size() - 5) != ".json") {
      auto latest = bertps::ps::LatestManifest(restore);
      if (!latest.ok()) return Fail(latest.status());
      restore = *latest;
    }
    auto v = (*server)->core()->Restore(restore);
    if (!v.ok()) return Fail(v.status());
    LOG(INFO) << "restored version " << *v << " from " << restore;
  }
  std::printf("bertps_server shard %d of %d listening on %s\n", o.shard,
              o.num_shards, (*server)->address().c_str());
  std::fflush(stdout);
  if (absl::Status a = bertps::WriteAddressFile(
          absl::GetFlag(FLAGS_address_file), (*server)->address());
      !a.ok()) {
    return Fail(a);
  }
  metrics_thread = StartMetrics(server->get(), &metrics_done, &metrics);
  std::thread waiter([&] {
    int sig = bertps::WaitForShutdownSignal();
    LOG(INFO) << "signal " << sig << ": shutting down";
    (*server)->Shutdown();
  });
  (*server)->Wait();
  waiter.join();
  return 0;
}

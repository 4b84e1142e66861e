// bertps_server: a parameter-server daemon (one shard, or slices of jobs
// from the coordinator).
//
//   bertps_server --port 7000 --shard 0 --num_shards 2
//       --peers 127.0.0.1:7000,127.0.0.1:7001 --config tiny --workers 2
// or a daemon taking shards from the coordinator (--slices: several):
//   bertps_server --coordinator 127.0.0.1:6000 --port 7000 --slices 2
// A shard run on its own builds its job's spec from its flags (or reads it
// from --spec FILE) and serves the spec's plan (common/cluster/job_plan.h),
// as a coordinator's shard does: every spec field a shard reads has a flag.
#include <algorithm>
#include <cstdio>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/cluster/job_spec.h"
#include "common/flag_checks.h"
#include "common/init.h"
#include "common/security.h"
#include "common/signals.h"
#include "common/tcp_tuning.h"
#include "common/timeouts.h"
#include "glog/logging.h"
#include "common/io/rate_limited_file_system.h"
#include "common/ps/checkpoint.h"
#include "server/ps/server.h"
#include "server/ps/shard_metrics.h"
#include "server/ps/shard_member.h"
#include "common/metrics.h"
#include "prometheus/gauge.h"

ABSL_FLAG(std::string, coordinator, "",
          "Coordinator address: take jobs from it (all other job flags are "
          "then ignored).");
ABSL_FLAG(int, coordinator_give_up_s,
          bertps::FlagSeconds(bertps::kCoordinatorGiveUp),
          "With --coordinator: after the coordinator has not answered for "
          "this long, uninstall the shard (it keeps trying, and tells the job "
          "once the coordinator is back). 0: never; the shard serves on while "
          "the coordinator is away.");
ABSL_FLAG(bool, exit_when_job_ends, false,
          "With --coordinator: exit (status 0) once the first job this shard "
          "served has ended, instead of waiting for the next one.");
ABSL_FLAG(int, slices, 1,
          "With --coordinator: shard slices this daemon serves, each a member "
          "of its own on its own port (--port, --port + 1, ...; any free "
          "ports with --port 0), so a primary of one shard index and a backup "
          "of another share a daemon (never two replicas of one index). Each "
          "slice registers 1/slices of the daemon's memory limit.");
ABSL_FLAG(std::string, host, "127.0.0.1", "Address to listen on.");
ABSL_FLAG(std::string, address_file, "",
          "Once listening, write HOST:PORT here (atomically; with --port 0, "
          "how a script learns the port); with --slices, each slice's, "
          "comma-separated.");
ABSL_FLAG(int, metrics_port, -1,
          "Prometheus metrics port (0: any free port, -1: off).");
ABSL_FLAG(int, metrics_refresh_ms, 1000,
          "How often the shard's gauges (version, gradient norm, learning "
          "rate, counters) are refreshed for the metrics port, in ms "
          "[10, 60000] (benchmarks that time steps from the version use 10).");
ABSL_FLAG(int, port, 0, "Port (0: any free port; printed at start).");
ABSL_FLAG(int, shard, 0, "This shard's index.");
ABSL_FLAG(int, num_shards, 1, "Number of shards.");
ABSL_FLAG(std::string, peers, "",
          "Comma-separated addresses of all shards, in shard order.");
ABSL_FLAG(std::string, spec, "",
          "A JobSpec file (text format or JSON): the job this shard serves. "
          "The job flags below (--num_shards ... --checkpoint_every) are then "
          "ignored.");
ABSL_FLAG(std::string, config, "tiny", "Model preset or config.json.");
ABSL_FLAG(std::string, task, "pretrain", "pretrain or classify.");
ABSL_FLAG(int, num_labels, 0,
          "classify: labels (0: the model config's num_labels).");
ABSL_FLAG(std::string, mode, "bsp", "bsp, asp or ssp.");
ABSL_FLAG(int, workers, 1,
          "Number of train workers (pipeline replicas with --stages).");
ABSL_FLAG(int, stages, 1,
          "Pipeline stages per replica: workers x stages push as workers.");
ABSL_FLAG(int, update_threads, 2,
          "Threads of an optimizer step (the result is the same for any).");
ABSL_FLAG(double, checkpoint_write_mbps, 0,
          "Checkpoint files are written no faster than this many MB/s (a "
          "network volume's stand-in for benchmarks; 0: as fast as the "
          "disk).");
ABSL_FLAG(int, update_nice, 10,
          "BSP: nice levels the step's update drops by once the rows the next "
          "pulls ask first are done (0: unchanged).");
ABSL_FLAG(int, backup_workers, 0, "BSP: steps complete with workers - this.");
ABSL_FLAG(int64_t, staleness, 2, "SSP staleness bound.");
ABSL_FLAG(std::string, optimizer, "adam_weight_decay",
          "adam_weight_decay, adamw, lamb or sgd.");
ABSL_FLAG(double, lr, 1e-4, "Peak learning rate.");
ABSL_FLAG(double, weight_decay, 0.01, "Weight decay.");
ABSL_FLAG(double, momentum, 0,
          "sgd: momentum (0: the optimizer's default, 0.9, as the spec's "
          "optimizer.momentum).");
ABSL_FLAG(int64_t, warmup_steps, 0, "Warmup steps (updates).");
ABSL_FLAG(int64_t, total_steps, 0,
          "The job's steps (updates the shards apply): the learning rate "
          "decays linearly to 0 over them (0: no decay).");
ABSL_FLAG(double, clip_norm, 1.0, "Global-norm clipping (<= 0: off).");
ABSL_FLAG(uint64_t, seed, 12345, "Initialisation seed.");
ABSL_FLAG(std::string, init_weights, "",
          "Safetensors or a checkpoint manifest to start from instead of the "
          "seeded initial values.");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "The job's checkpoint directory: with --checkpoint_every, ASP and "
          "SSP shards hold the pushes past each multiple until its checkpoint "
          "is written (consistent cuts; the workers must be told the same).");
ABSL_FLAG(int64_t, checkpoint_every, 0,
          "Steps between checkpoints (with --checkpoint_dir).");
ABSL_FLAG(std::string, restore, "",
          "Checkpoint manifest, or a checkpoint directory (its latest).");

namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "bertps_server: %s\n", s.ToString().c_str());
  return 1;
}

// The job a shard run on its own serves: --spec, or a spec of the job flags.
absl::StatusOr<bertps::JobSpec> SpecFromFlags() {
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
  s.mutable_consistency()->set_staleness(absl::GetFlag(FLAGS_staleness));
  s.mutable_consistency()->set_backup_workers(
      absl::GetFlag(FLAGS_backup_workers));
  s.set_num_ps_shards(absl::GetFlag(FLAGS_num_shards));
  s.set_num_workers(absl::GetFlag(FLAGS_workers));
  if (absl::GetFlag(FLAGS_stages) > 1) {
    s.mutable_pipeline()->set_stages(absl::GetFlag(FLAGS_stages));
  }
  bertps::OptimizerSpec* o = s.mutable_optimizer();
  o->set_kind(absl::GetFlag(FLAGS_optimizer));
  o->set_learning_rate(absl::GetFlag(FLAGS_lr));
  o->set_weight_decay(absl::GetFlag(FLAGS_weight_decay));
  o->set_momentum(absl::GetFlag(FLAGS_momentum));
  o->set_warmup_steps(absl::GetFlag(FLAGS_warmup_steps));
  // <= 0: off (the spec's off is negative).
  o->set_clip_norm(absl::GetFlag(FLAGS_clip_norm) > 0
                       ? absl::GetFlag(FLAGS_clip_norm)
                       : -1);
  s.set_steps(absl::GetFlag(FLAGS_total_steps));
  s.set_seed(absl::GetFlag(FLAGS_seed));
  s.set_init_weights(absl::GetFlag(FLAGS_init_weights));
  s.mutable_checkpoint()->set_dir(absl::GetFlag(FLAGS_checkpoint_dir));
  s.mutable_checkpoint()->set_every_steps(
      absl::GetFlag(FLAGS_checkpoint_every));
  return s;
}

}  // namespace

namespace {

// The file system checkpoints are written through: the real one, or one
// paced to --checkpoint_write_mbps (common/io/rate_limited_file_system.h).
bertps::io::FileSystem* CheckpointFileSystem() {
  const double mbps = absl::GetFlag(FLAGS_checkpoint_write_mbps);
  if (mbps <= 0) return nullptr;
  static auto* fs = new bertps::io::RateLimitedFileSystem(mbps * 1e6);
  return fs;
}

// Exports the installed shards' counters every second until `done` (a
// `slice` label on each when the daemon has several).
std::thread StartMetrics(const std::vector<bertps::ps::ShardServer*>& servers,
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
  auto slice = [&servers](size_t k) {
    return servers.size() > 1 ? absl::StrCat(k) : std::string();
  };
  // A job shorter than the period still gets its counters: the install's
  // last figures are exported as it retires.
  for (size_t k = 0; k < servers.size(); ++k) {
    servers[k]->set_on_retire([metrics, label = slice(k)](
                                  bertps::ps::ShardCore& core) {
      metrics->Update(core.options().job_id, &core, core.Stats(), label);
    });
  }
  std::vector<std::string> labels;
  for (size_t k = 0; k < servers.size(); ++k) labels.push_back(slice(k));
  const absl::Duration refresh = absl::Milliseconds(
      std::clamp(absl::GetFlag(FLAGS_metrics_refresh_ms), 10, 60000));
  return std::thread([servers, labels, done, metrics, refresh] {
    while (!done->load()) {
      for (size_t k = 0; k < servers.size(); ++k) {
        if (std::shared_ptr<bertps::ps::ShardCore> core =
                servers[k]->shared_core()) {
          metrics->Update(core->options().job_id, core.get(), core->Stats(),
                          labels[k]);
        }
      }
      absl::SleepFor(refresh);
    }
  });
}

// With --coordinator: `slices` idle shard servers, each a member taking jobs
// from `coordinator`, until a signal (or, with --exit_when_job_ends, the
// first job's end); each stops its work after the coordinator was away for
// `give_up` (0: never).
int ServeSlices(const std::string& coordinator, int slices,
                const bertps::SecurityConfig& security,
                absl::Duration give_up) {
  std::vector<std::unique_ptr<bertps::ps::ShardServer>> servers;
  std::vector<bertps::ps::ShardServer*> raw;
  std::vector<std::string> addresses;
  const int port = absl::GetFlag(FLAGS_port);
  for (int k = 0; k < slices; ++k) {
    auto server = bertps::ps::ShardServer::StartIdle(
        absl::StrCat(absl::GetFlag(FLAGS_host), ":", port == 0 ? 0 : port + k),
        security);
    if (!server.ok()) {
      for (auto& s : servers) s->Shutdown();
      return Fail(server.status());
    }
    raw.push_back(server->get());
    addresses.push_back((*server)->address());
    servers.push_back(std::move(*server));
  }
  const std::string all = absl::StrJoin(addresses, ",");
  std::printf("bertps_server listening on %s%s, taking jobs from %s\n",
              all.c_str(),
              slices > 1 ? absl::StrCat(" (", slices, " slices)").c_str() : "",
              coordinator.c_str());
  std::fflush(stdout);
  if (absl::Status a =
          bertps::WriteAddressFile(absl::GetFlag(FLAGS_address_file), all);
      !a.ok()) {
    for (auto& s : servers) s->Shutdown();
    return Fail(a);
  }
  std::atomic<bool> metrics_done{false};
  std::unique_ptr<bertps::MetricsEndpoint> metrics;
  std::thread metrics_thread = StartMetrics(raw, &metrics_done, &metrics);
  std::vector<std::unique_ptr<bertps::ps::ShardMember>> members;
  for (int k = 0; k < slices; ++k) {
    members.push_back(
        std::make_unique<bertps::ps::ShardMember>(coordinator, raw[k]));
    bertps::ps::ShardMember& member = *members.back();
    member.set_update_threads(absl::GetFlag(FLAGS_update_threads));
    member.set_update_nice(absl::GetFlag(FLAGS_update_nice));
    member.set_file_system(CheckpointFileSystem());
    // The daemon is named by its first slice's address (unique while it
    // runs: no other process listens there).
    if (slices > 1) member.set_daemon(addresses[0], slices);
    if (absl::GetFlag(FLAGS_exit_when_job_ends)) member.ExitWhenJobEnds();
  }
  // A slice whose member ends (an error, or its job ended) ends them all.
  std::vector<absl::Status> statuses(slices);
  std::vector<std::thread> loops;
  for (int k = 0; k < slices; ++k) {
    loops.emplace_back([&, k] {
      statuses[k] = members[k]->Run(give_up);
      for (auto& m : members) m->Stop();
      servers[k]->Shutdown();
    });
  }
  std::thread waiter([&] {
    int sig = bertps::WaitForShutdownSignal();
    LOG(INFO) << "signal " << sig << ": shutting down "
                 "(a second signal exits at once)";
    bertps::ExitOnSecondSignalOr(bertps::DrainGraceFromFlags());
    // Each slice leaves once the coordinator says so: at once, or for a
    // primary without a backup once an idle shard daemon joined as one.
    for (auto& m : members) m->Drain();
  });
  for (auto& s : servers) s->Wait();
  for (auto& t : loops) t.join();
  waiter.detach();
  metrics_done.store(true);
  if (metrics_thread.joinable()) metrics_thread.join();
  for (const absl::Status& st : statuses) {
    if (!st.ok()) return Fail(st);
  }
  return 0;
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
      .Range("coordinator_give_up_s", absl::GetFlag(FLAGS_coordinator_give_up_s),
             0, 30 * 86400)
      .Range("slices", absl::GetFlag(FLAGS_slices), 1, 64)
      .RealRange("checkpoint_write_mbps",
                 absl::GetFlag(FLAGS_checkpoint_write_mbps), 0, 1e6)
      .Range("num_shards", num_shards, 1, 1024)
      .Range("shard", absl::GetFlag(FLAGS_shard), 0,
             std::max(num_shards - 1, 0))
      .Range("workers", workers, 1, 4096)
      .Range("backup_workers", absl::GetFlag(FLAGS_backup_workers), 0,
             std::max(workers - 1, 0))
      .Range("update_threads", absl::GetFlag(FLAGS_update_threads), 1, 256)
      .Range("metrics_refresh_ms", absl::GetFlag(FLAGS_metrics_refresh_ms), 10,
             60000)
      .Range("update_nice", absl::GetFlag(FLAGS_update_nice), 0, 19)
      .Range("staleness", absl::GetFlag(FLAGS_staleness), 0, 1000000)
      .RealRange("lr", absl::GetFlag(FLAGS_lr), 0, 1e6)
      .RealRange("weight_decay", absl::GetFlag(FLAGS_weight_decay), 0, 1e6)
      .RealRange("clip_norm", absl::GetFlag(FLAGS_clip_norm), -1e30, 1e30)
      .Range("warmup_steps", absl::GetFlag(FLAGS_warmup_steps), 0,
             int64_t{1} << 40)
      .Range("total_steps", absl::GetFlag(FLAGS_total_steps), 0,
             int64_t{1} << 40)
      .Range("stages", absl::GetFlag(FLAGS_stages), 1, 64)
      .Range("num_labels", absl::GetFlag(FLAGS_num_labels), 0, 1 << 20)
      .RealRange("momentum", absl::GetFlag(FLAGS_momentum), 0, 1)
      .Range("checkpoint_every", absl::GetFlag(FLAGS_checkpoint_every), 0,
             int64_t{1} << 40);
  if (!checks.ok()) return checks.Fail();
  // The shard daemon's timeouts against the rest (common/timeouts.h).
  bertps::Timeouts timeouts;
  timeouts.pipeline = false;
  timeouts.give_up = absl::Seconds(absl::GetFlag(FLAGS_coordinator_give_up_s));
  if (!checks.Check(bertps::ValidateTimeouts(timeouts)).ok()) {
    return checks.Fail();
  }
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (absl::GetFlag(FLAGS_slices) > 1 &&
      (coordinator.empty() || absl::GetFlag(FLAGS_exit_when_job_ends))) {
    std::fprintf(stderr,
                 "bertps_server: --slices: more than 1 needs --coordinator "
                 "(a standalone shard is one slice) and not "
                 "--exit_when_job_ends (its slices' jobs end apart)\n");
    return 2;
  }
  if (absl::Status tcp = bertps::SetTcpCongestionFromFlag(); !tcp.ok()) {
    std::fprintf(stderr, "bertps_server: %s\n", tcp.ToString().c_str());
    return 2;
  }
  absl::StatusOr<bertps::SecurityConfig> security =
      bertps::SecurityConfigFromFlags();
  absl::Status security_ok =
      security.ok() ? bertps::ValidateServing(*security) : security.status();
  if (!security_ok.ok()) return Fail(security_ok);
  // Token files re-read on change and on SIGHUP (docs/security.md).
  const std::unique_ptr<bertps::CredentialWatcher> credential_watcher =
      bertps::CredentialWatcher::Start(security->live);
  if (!coordinator.empty()) {
    return ServeSlices(coordinator, absl::GetFlag(FLAGS_slices), *security,
                       timeouts.give_up);
  }
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
  absl::StatusOr<bertps::JobSpec> spec = SpecFromFlags();
  if (!spec.ok()) return Fail(spec.status());
  // The shard a coordinator would install for this spec: its plan, model
  // and optimizer.
  absl::StatusOr<bertps::ps::ShardOptions> options =
      bertps::ps::ShardOptionsFromSpec(*spec, absl::GetFlag(FLAGS_shard));
  if (!options.ok()) return Fail(options.status());
  bertps::ps::ShardOptions o = *std::move(options);
  o.update_threads = absl::GetFlag(FLAGS_update_threads);
  o.update_nice = absl::GetFlag(FLAGS_update_nice);
  o.fs = CheckpointFileSystem();
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
  metrics_thread = StartMetrics({server->get()}, &metrics_done, &metrics);
  std::thread waiter([&] {
    int sig = bertps::WaitForShutdownSignal();
    LOG(INFO) << "signal " << sig << ": shutting down "
                 "(a second signal exits at once)";
    bertps::ExitOnSecondSignalOr(bertps::DrainGraceFromFlags());
    (*server)->Shutdown();
  });
  (*server)->Wait();
  waiter.join();
  return 0;
}

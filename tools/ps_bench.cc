// Push/pull throughput of the parameter-server transport: a PsClient moves a
// whole model's fp32 gradient to the shards and the whole parameter set back,
// repeatedly, and this prints one JSON line with GB/s (1e9 bytes of fp32
// payload per second; medians, min and max of the repetitions).
//
// The shards are BSP with one worker. Per repetition r (after warm-up):
//   push applied    Push(step r): transport + the shard's validation + one
//                   optimizer step (BSP: the push returns once the step is
//                   applied and published);
//   push            Push(step r) again: a retry the shard recognises, fully
//                   received and validated but not applied -- the transport
//                   figure;
//   pull            Pull(min_version r + 1) of every parameter.
// With --tcp_peer a raw-TCP transfer of the same payload (one stream per
// shard) runs between the push and the pull of every repetition, and each
// repetition's push and pull are divided by it (*_ratio_paired). With
// --copy_out_bytes (the default) a second raw transfer follows it, whose
// receivers read into a buffer of that size and copy each read into the
// destination (tools/tcp_peer.h, copy_out_bytes): a transport that, like
// gRPC, receives into buffers of its own and hands the bytes on by a copy,
// with none of gRPC's other work. Its ratio to the plain raw transfer
// (copy_out_ratio_paired) bounds in practice what bertps's ratio can reach
// on this host; *_ratio_vs_copy_out_paired say how near bertps comes to it.
// optimizer_ms = median(push applied) - median(push): what the shard's
// update (with its norm pass, aggregation copy and snapshot publication)
// adds to a push. For reference the bare update kernels (SGD and BERT's
// AdamWeightDecay over the whole model, one thread, no network) and the
// other whole-gradient passes of a shard (finiteness check, squared norm, a
// memcpy standing in for each copy) are timed in this process as well.
//
// CPU seconds per payload GB of the timed transfers are reported for this
// process and for the shards (their Stats' process_cpu_seconds, sampled
// around each transfer outside its timing), and for the raw peer
// (*_cpu_vs_tcp: the peer's CPU per GB over bertps's). With every core busy
// -- 2 shards and a worker on 2 cores -- throughput follows CPU per byte.
//
// --only push|pull repeats one operation (for profiling), with the same CPU
// figures.
//
// Shards: --ps lists running bertps_server addresses (the realistic set-up,
// used by tools/bench.sh ps); without --ps, --shards in-process ShardServers
// listen on 127.0.0.1 (same gRPC path over loopback, one process).
//
//   ps_bench --config base --ps 127.0.0.1:7000,127.0.0.1:7001 --reps 7
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/capability.h"
#include "common/init.h"
#include "common/model/bert_config.h"
#include "common/model/params.h"
#include "common/optim/optimizer_config.h"
#include "common/optim/slice_update.h"
#include "common/process_cpu.h"
#include "common/tcp_tuning.h"
#include "nlohmann/json.hpp"
#include "common/cluster/plan_for.h"
#include "server/ps/server.h"
#include "tools/tcp_peer.h"
#include "common/ps/ps_client.h"

ABSL_FLAG(std::string, config, "base", "Model preset or config.json.");
ABSL_FLAG(std::string, ps, "",
          "Comma-separated running shard addresses (BSP, 1 worker); empty: "
          "start --shards in-process servers.");
ABSL_FLAG(int, shards, 1, "In-process shards when --ps is empty.");
ABSL_FLAG(bool, capabilities, false,
          "In-process shards of a coordinator's job that check a signed "
          "capability on every call (docs/security.md), as a job's shards "
          "do; false: shards on their own, which check none.");
ABSL_FLAG(int, reps, 7, "Timed repetitions.");
ABSL_FLAG(int, warmup, 1, "Untimed repetitions first.");
ABSL_FLAG(std::string, only, "",
          "For profiling: 'push' or 'pull' repeats just that operation --reps "
          "times after one applied push (and prints its times and the "
          "client's CPU seconds and page faults per GB only).");
ABSL_FLAG(bool, tcp_peer, false,
          "Also time a raw-TCP transfer of the same payload (tools/tcp_peer.h: "
          "one stream per shard, the shards' congestion control) in every "
          "repetition, between the push and the pull, and report each "
          "operation's ratio to it per repetition (paired: both see the host "
          "in the same state).");
ABSL_FLAG(int64_t, copy_out_bytes, 256 << 10,
          "With --tcp_peer: also time a raw transfer whose receivers copy "
          "each read out of a buffer of this many bytes (0: not). 256 KiB "
          "stays in a core's L2 and was the fastest of 256 KiB, 1 MiB and "
          "4 MiB here.");
ABSL_FLAG(std::string, pull_copy_thread, "auto",
          "'auto', 'true' or 'false': copy each shard's pulled chunks on a "
          "thread of their own (PsClientOptions::pull_copy_thread; auto: "
          "when shards <= cores).");
ABSL_FLAG(std::string, pull_window, "auto",
          "'auto' or bytes: each shard stream's HTTP/2 receive window "
          "(PsClientOptions::pull_window_bytes; 0: gRPC's, grown by its "
          "probes; auto: fixed 32 MiB when there is no copy thread).");
ABSL_FLAG(bool, pull_bf16, false,
          "Also time, in every repetition, a pull asking for the dense "
          "layers' weights in bf16 (PullRequest.bf16_products, a bf16 "
          "job's pulls), paired with the fp32 pull.");
ABSL_FLAG(bool, kernels, true,
          "Also time the bare optimizer kernels over the whole model.");

namespace {

using Clock = std::chrono::steady_clock;

double Secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Minor page faults of this process so far (fresh pages touched).
int64_t MinorFaults() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

// CPU seconds of this process and of the shards (StatsResponse's
// process_cpu_seconds, summed; 0 when they run in this process, whose own
// figure then counts them).
struct Cpu {
  double client = 0, shards = 0;
  double total() const { return client + shards; }
  void Add(const Cpu& from, const Cpu& to) {
    client += to.client - from.client;
    shards += to.shards - from.shards;
  }
};

absl::StatusOr<Cpu> SampleCpu(bertps::PsClient& c, bool in_process) {
  Cpu s;
  if (!in_process) {
    absl::StatusOr<std::vector<bertps::StatsResponse>> stats = c.Stats();
    if (!stats.ok()) return stats.status();
    for (const auto& st : *stats) s.shards += st.process_cpu_seconds();
  }
  s.client = bertps::ProcessCpuSeconds();
  return s;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "ps_bench: %s\n", s.ToString().c_str());
  return 1;
}

// {"<name>_gbps_median":.., "_min", "_max", "<name>_ms": [...]} into j.
void Report(nlohmann::ordered_json& j, const std::string& name, double bytes,
            const std::vector<double>& secs) {
  std::vector<double> gbps, ms;
  for (double s : secs) {
    gbps.push_back(bytes / s / 1e9);
    ms.push_back(s * 1e3);
  }
  j[name + "_gbps_median"] = Median(gbps);
  j[name + "_gbps_min"] = *std::min_element(gbps.begin(), gbps.end());
  j[name + "_gbps_max"] = *std::max_element(gbps.begin(), gbps.end());
  j[name + "_ms"] = ms;
}

// Median milliseconds of one StepSlice of `kind` over n elements.
double KernelMs(bertps::optim::OptimizerKind kind, int64_t n, float* param,
                const float* grad, float* state) {
  bertps::optim::OptimizerConfig oc;
  oc.kind = kind;
  bertps::optim::Slice s;
  s.param = param;
  s.grad = grad;
  s.state = state;
  s.n = n;
  s.decay = true;
  std::vector<double> ms;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = Clock::now();
    (void)bertps::optim::StepSlice(oc, r, bertps::optim::LearningRate(oc, r), s,
                                   1.0f);
    ms.push_back(Secs(t0, Clock::now()) * 1e3);
  }
  return Median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  bertps::InitProcess(argc, argv, "ps_bench [flags]");
  if (absl::Status tcp = bertps::SetTcpCongestionFromFlag(); !tcp.ok()) {
    return Fail(tcp);
  }
  auto config = bertps::ResolveBertConfig(absl::GetFlag(FLAGS_config));
  if (!config.ok()) return Fail(config.status());
  const int reps = absl::GetFlag(FLAGS_reps),
            warmup = absl::GetFlag(FLAGS_warmup);
  if (reps < 1 || warmup < 0) {
    return Fail(absl::InvalidArgumentError("--reps >= 1, --warmup >= 0"));
  }

  // --capabilities: the coordinator's key and the client's capability.
  auto signer = *bertps::CapabilitySigner::Generate();
  std::vector<std::unique_ptr<bertps::ps::ShardServer>> servers;
  std::vector<std::string> addresses =
      absl::StrSplit(absl::GetFlag(FLAGS_ps), ',', absl::SkipEmpty());
  const bool in_process = addresses.empty();
  if (in_process) {
    const int shards = absl::GetFlag(FLAGS_shards);
    for (int i = 0; i < shards; ++i) {
      bertps::ps::ShardOptions o;
      o.shard = i;
      o.num_shards = shards;
      o.config = *config;
      o.optimizer.kind = bertps::optim::OptimizerKind::kSgd;
      o.optimizer.learning_rate = 0;
      o.optimizer.weight_decay = 0;
      o.job_plan = bertps::PlanFor(bertps::BSP, 1, o.optimizer);
      if (absl::GetFlag(FLAGS_capabilities)) {
        o.job_id = "bench";
        o.incarnation = 1;
        o.job_key = "bench-key";
      }
      auto s = bertps::ps::ShardServer::Start(o, "127.0.0.1:0", {});
      if (!s.ok()) return Fail(s.status());
      if (absl::GetFlag(FLAGS_capabilities)) {
        absl::Status st =
            (*s)->capability_verifier().AddKey(signer->public_key());
        if (!st.ok()) return Fail(st);
      }
      addresses.push_back((*s)->address());
      servers.push_back(std::move(*s));
    }
    for (auto& s : servers) s->SetPeers(addresses);
  }

  bertps::PsClientOptions po;
  po.addresses = addresses;
  if (absl::GetFlag(FLAGS_capabilities) && in_process) {
    po.job_id = "bench";
    po.incarnation = 1;
    po.job_key = "bench-key";
    bertps::Capability cap;
    cap.set_member_id("bench-worker");
    cap.set_job_id("bench");
    cap.set_incarnation(1);
    cap.set_kind(bertps::Capability::TRAINER);
    cap.add_slots(0);
    cap.set_issued_ms(absl::ToUnixMillis(absl::Now()));
    cap.set_expires_ms(
        absl::ToUnixMillis(absl::Now() + bertps::kCapabilityLifetime));
    auto holder = std::make_shared<bertps::CapabilityHolder>();
    holder->Set(signer->Sign(cap));
    po.capability = holder;
  }
  const std::string copy_thread = absl::GetFlag(FLAGS_pull_copy_thread);
  if (copy_thread == "true" || copy_thread == "false") {
    po.pull_copy_thread = copy_thread == "true";
  } else if (copy_thread != "auto") {
    return Fail(absl::InvalidArgumentError(
        "--pull_copy_thread must be auto, true or false"));
  }
  const std::string window = absl::GetFlag(FLAGS_pull_window);
  if (window != "auto") {
    int bytes = 0;
    if (!absl::SimpleAtoi(window, &bytes) || bytes < 0) {
      return Fail(absl::InvalidArgumentError(
          "--pull_window must be auto or a number of bytes >= 0"));
    }
    po.pull_window_bytes = bytes;
  }
  auto client =
      bertps::PsClient::Connect(po, *config, bertps::BertTask::kPretrain);
  if (!client.ok()) return Fail(client.status());
  bertps::PsClient& c = **client;
  std::unique_ptr<bertps::PsClient> half_client;  // --pull_bf16
  if (absl::GetFlag(FLAGS_pull_bf16)) {
    bertps::PsClientOptions ho = po;
    ho.pull_bf16_products = true;
    auto h = bertps::PsClient::Connect(ho, *config, bertps::BertTask::kPretrain);
    if (!h.ok()) return Fail(h.status());
    half_client = std::move(*h);
  }
  if (c.description(0).num_workers() != 1 ||
      c.description(0).mode() != bertps::BSP) {
    return Fail(absl::FailedPreconditionError(
        "the shards must run BSP with --workers 1"));
  }
  auto stats = c.Stats();
  if (!stats.ok()) return Fail(stats.status());
  int64_t step = (*stats)[0].version();  // the shards may have run before

  const int64_t n = c.layout().total_size();
  const double bytes = 4.0 * static_cast<double>(n);
  // Small finite gradients (every element touched: no page faults timed).
  std::vector<float> grads(n), params(n, 0.f);  // (n) layout order
  for (int64_t i = 0; i < n; ++i) grads[i] = 1e-6f * static_cast<float>(i % 97);

  const std::string only = absl::GetFlag(FLAGS_only);
  if (!only.empty()) {
    if (only != "push" && only != "pull") {
      return Fail(absl::InvalidArgumentError("--only must be push or pull"));
    }
    bertps::PushHeader h;
    h.set_worker(0);
    h.set_step(step);
    absl::StatusOr<int64_t> v = c.Push(h, grads.data());
    if (!v.ok()) return Fail(v.status());
    std::fprintf(stderr, "ps_bench: timing %s\n", only.c_str());
    std::vector<double> secs;
    absl::StatusOr<Cpu> cpu0 = SampleCpu(c, in_process);
    if (!cpu0.ok()) return Fail(cpu0.status());
    const int64_t faults0 = MinorFaults();
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      v = only == "push" ? c.Push(h, grads.data())
                         : c.Pull(0, step + 1, step + 1, params.data());
      if (!v.ok()) return Fail(v.status());
      secs.push_back(Secs(t0, Clock::now()));
    }
    nlohmann::ordered_json j;
    j["bench"] = "ps_transport_" + only;
    j["shards"] = c.num_shards();
    j["pull_copy_thread"] = c.pull_copy_thread();
    j["pull_window_bytes"] = c.pull_window_bytes();
    j["bytes"] = static_cast<int64_t>(bytes);
    Report(j, only, bytes, secs);
    // CPU per payload byte, this process's and the shards': where a
    // transfer's time goes.
    absl::StatusOr<Cpu> cpu1 = SampleCpu(c, in_process);
    if (!cpu1.ok()) return Fail(cpu1.status());
    Cpu used;
    used.Add(*cpu0, *cpu1);
    j["client_cpu_s_per_gb"] = used.client / (reps * bytes / 1e9);
    j["shards_cpu_s_per_gb"] = used.shards / (reps * bytes / 1e9);
    j["client_minor_faults_per_gb"] =
        (MinorFaults() - faults0) / (reps * bytes / 1e9);
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }

  std::unique_ptr<bertps::tools::RawTcpPeer> peer, copy_out_peer;
  if (absl::GetFlag(FLAGS_tcp_peer)) {
    bertps::tools::TcpPeerOptions o;
    o.bytes = static_cast<int64_t>(bytes);
    o.streams = c.num_shards();
    o.congestion = bertps::TcpCongestionForTarget(addresses[0]);
    auto p = bertps::tools::RawTcpPeer::Create(o);
    if (!p.ok()) return Fail(p.status());
    peer = std::move(*p);
    o.copy_out_bytes = absl::GetFlag(FLAGS_copy_out_bytes);
    if (o.copy_out_bytes > 0) {
      auto q = bertps::tools::RawTcpPeer::Create(o);
      if (!q.ok()) return Fail(q.status());
      copy_out_peer = std::move(*q);
    }
  }
  std::vector<double> push_applied, push, pull, tcp, copy_out, pull_half;
  std::vector<float> half_params(half_client ? n : 0, 0.f);
  int64_t half_bytes = 0;  // a bf16 pull's payload
  Cpu half_cpu;
  int64_t push_faults = 0, pull_faults = 0;  // in the timed repetitions
  // CPU seconds in the timed transfers: this process's and the shards'
  // (sampled around each one, outside its timing).
  Cpu push_cpu, pull_cpu;
  double tcp_cpu = 0;
  for (int r = 0; r < warmup + reps; ++r, ++step) {
    bertps::PushHeader h;
    h.set_worker(0);
    h.set_step(step);
    h.set_examples(32);
    const auto t0 = Clock::now();
    absl::StatusOr<int64_t> v = c.Push(h, grads.data());
    const auto t0_end = Clock::now();
    if (!v.ok()) return Fail(v.status());
    if (*v != step + 1) {
      return Fail(absl::InternalError("the push was not applied"));
    }
    absl::StatusOr<Cpu> a = SampleCpu(c, in_process);
    if (!a.ok()) return Fail(a.status());
    const int64_t f1 = MinorFaults();
    const auto t1 = Clock::now();
    v = c.Push(h, grads.data());  // the same push again: a recognised retry
    const auto t2 = Clock::now();
    const int64_t f2 = MinorFaults();
    if (!v.ok()) return Fail(v.status());
    absl::StatusOr<Cpu> b = SampleCpu(c, in_process);
    if (!b.ok()) return Fail(b.status());
    double tcp_secs = 0, peer_cpu = 0;
    if (peer != nullptr) {
      const double cpu0 = bertps::ProcessCpuSeconds();
      absl::StatusOr<double> t = peer->Transfer();
      if (!t.ok()) return Fail(t.status());
      tcp_secs = *t;
      peer_cpu = bertps::ProcessCpuSeconds() - cpu0;
    }
    double copy_out_secs = 0;
    if (copy_out_peer != nullptr) {
      absl::StatusOr<double> t = copy_out_peer->Transfer();
      if (!t.ok()) return Fail(t.status());
      copy_out_secs = *t;
    }
    // The bf16 pull (--pull_bf16), with the CPU around it: before the fp32
    // pull in odd repetitions, after it in even ones (neither gains from
    // going second).
    double half_secs = 0;
    auto half_pull = [&]() -> absl::Status {
      absl::StatusOr<Cpu> g0 = SampleCpu(c, in_process);
      if (!g0.ok()) return g0.status();
      const auto t5 = Clock::now();
      auto p = half_client->StartPull(0, step + 1, step + 1,
                                      half_params.data());
      absl::StatusOr<int64_t> hv = p->Finish();
      half_secs = Secs(t5, Clock::now());
      if (!hv.ok()) return hv.status();
      half_bytes = p->payload_bytes();
      absl::StatusOr<Cpu> g1 = SampleCpu(c, in_process);
      if (!g1.ok()) return g1.status();
      if (r >= warmup) half_cpu.Add(*g0, *g1);
      return absl::OkStatus();
    };
    if (half_client != nullptr && r % 2 == 1) {
      if (absl::Status h = half_pull(); !h.ok()) return Fail(h);
    }
    absl::StatusOr<Cpu> d = SampleCpu(c, in_process);
    if (!d.ok()) return Fail(d.status());
    const int64_t f3 = MinorFaults();
    const auto t3 = Clock::now();
    v = c.Pull(0, step + 1, step + 1, params.data());
    const auto t4 = Clock::now();
    const int64_t f4 = MinorFaults();
    if (!v.ok()) return Fail(v.status());
    absl::StatusOr<Cpu> e = SampleCpu(c, in_process);
    if (!e.ok()) return Fail(e.status());
    if (half_client != nullptr && r % 2 == 0) {
      if (absl::Status h = half_pull(); !h.ok()) return Fail(h);
    }
    if (r >= warmup) {
      if (half_client != nullptr) pull_half.push_back(half_secs);
      push_faults += f2 - f1;
      pull_faults += f4 - f3;
      push_applied.push_back(Secs(t0, t0_end));
      push.push_back(Secs(t1, t2));
      pull.push_back(Secs(t3, t4));
      push_cpu.Add(*a, *b);
      pull_cpu.Add(*d, *e);
      if (peer != nullptr) {
        tcp.push_back(tcp_secs);
        tcp_cpu += peer_cpu;
      }
      if (copy_out_peer != nullptr) copy_out.push_back(copy_out_secs);
    }
  }
  auto after = c.Stats();
  if (!after.ok()) return Fail(after.status());

  nlohmann::ordered_json j;
  j["bench"] = "ps_transport";
  j["config"] = absl::GetFlag(FLAGS_config);
  j["shards"] = c.num_shards();
  j["pull_copy_thread"] = c.pull_copy_thread();
  j["pull_window_bytes"] = c.pull_window_bytes();
  j["servers"] = in_process ? "in-process" : "processes";
  // This client's side; the shards apply their own --tcp_congestion.
  j["tcp_congestion"] = bertps::TcpCongestionForTarget(addresses[0]);
  j["optimizer"] = c.description(0).optimizer();
  j["params"] = n;
  j["bytes"] = static_cast<int64_t>(bytes);
  j["reps"] = reps;
  Report(j, "push", bytes, push);
  Report(j, "pull", bytes, pull);
  Report(j, "push_applied", bytes, push_applied);
  if (half_client != nullptr) {
    // The same parameters delivered (GB/s of their fp32 bytes), from fewer
    // bytes on the wire; paired with the fp32 pull of each repetition.
    Report(j, "pull_bf16", bytes, pull_half);
    j["pull_bf16_wire_bytes"] = half_bytes;
    std::vector<double> speedup;
    for (size_t k = 0; k < pull.size(); ++k) {
      speedup.push_back(pull[k] / pull_half[k]);
    }
    j["pull_bf16_speedup_paired"] = speedup;
    j["pull_bf16_speedup_paired_median"] = Median(speedup);
  }
  if (peer != nullptr) {
    // Each repetition's bertps time against the raw transfer next to it
    // (one stream per shard, with the "tcp_congestion" above).
    Report(j, "tcp", bytes, tcp);
    std::vector<double> push_ratio, pull_ratio;
    for (size_t k = 0; k < tcp.size(); ++k) {
      push_ratio.push_back(tcp[k] / push[k]);
      pull_ratio.push_back(tcp[k] / pull[k]);
    }
    j["push_ratio_paired"] = push_ratio;
    j["pull_ratio_paired"] = pull_ratio;
    j["push_ratio_paired_median"] = Median(push_ratio);
    j["pull_ratio_paired_median"] = Median(pull_ratio);
    if (!peer->Verify()) {
      return Fail(absl::DataLossError("raw TCP peer: bytes differ"));
    }
  }
  if (copy_out_peer != nullptr) {
    // The copy-out transfer against the plain one of the same repetition
    // (the ceiling), and bertps against the copy-out transfer.
    Report(j, "copy_out", bytes, copy_out);
    j["copy_out_bytes"] = copy_out_peer->options().copy_out_bytes;
    std::vector<double> ceiling, push_vs, pull_vs;
    for (size_t k = 0; k < copy_out.size(); ++k) {
      ceiling.push_back(tcp[k] / copy_out[k]);
      push_vs.push_back(copy_out[k] / push[k]);
      pull_vs.push_back(copy_out[k] / pull[k]);
    }
    j["copy_out_ratio_paired"] = ceiling;
    j["copy_out_ratio_paired_median"] = Median(ceiling);
    j["push_ratio_vs_copy_out_paired"] = push_vs;
    j["pull_ratio_vs_copy_out_paired"] = pull_vs;
    if (!copy_out_peer->Verify()) {
      return Fail(absl::DataLossError("copy-out TCP peer: bytes differ"));
    }
  }
  // CPU per payload GB of the timed transfers, the client's process and the
  // shards' together (with in-process shards, the one process). On a host
  // whose cores are all busy (2 shards and a worker on 2 cores) throughput
  // follows it: *_cpu_vs_tcp is the raw peer's CPU per GB over bertps's
  // (1: as frugal as raw TCP).
  const double gb = reps * bytes / 1e9;
  std::vector<std::pair<std::string, Cpu>> ops = {{"push", push_cpu},
                                                  {"pull", pull_cpu}};
  if (half_client != nullptr) ops.push_back({"pull_bf16", half_cpu});
  for (const auto& [op, cpu] : ops) {
    j[op + "_cpu_s_per_gb"] = cpu.total() / gb;
    j[op + "_client_cpu_s_per_gb"] = cpu.client / gb;
    j[op + "_shards_cpu_s_per_gb"] = cpu.shards / gb;
  }
  if (peer != nullptr) {
    j["tcp_cpu_s_per_gb"] = tcp_cpu / gb;
    for (const auto& [op, cpu] : ops) {
      j[op + "_cpu_vs_tcp"] = tcp_cpu / cpu.total();
    }
  }
  j["optimizer_ms"] = (Median(push_applied) - Median(push)) * 1e3;
  // This client's page faults per transfer (the payload buffers are touched
  // before timing: these are the transport's own).
  j["client_minor_faults_per_push"] = push_faults / reps;
  j["client_minor_faults_per_pull"] = pull_faults / reps;
  int64_t duplicates = 0;
  for (const auto& s : *after) {
    duplicates = std::max(duplicates, s.pushes_duplicate());
  }
  j["shard_duplicates_seen"] = duplicates;
  if (absl::GetFlag(FLAGS_kernels)) {
    std::vector<float> state(2 * n, 0.f);  // (2, n)
    j["kernel_sgd_ms"] = KernelMs(bertps::optim::OptimizerKind::kSgd, n,
                                  params.data(), grads.data(), state.data());
    j["kernel_adam_weight_decay_ms"] =
        KernelMs(bertps::optim::OptimizerKind::kAdamWeightDecay, n,
                 params.data(), grads.data(), state.data());
    // The passes a shard makes over a pushed gradient besides the update:
    // the finiteness check of every chunk, the global norm, and the copies
    // (staging, aggregation, snapshot) for which a memcpy stands in.
    auto time_ms = [](auto&& f) {
      std::vector<double> ms;
      for (int r = 0; r < 3; ++r) {
        const auto t0 = Clock::now();
        f();
        ms.push_back(Secs(t0, Clock::now()) * 1e3);
      }
      return Median(ms);
    };
    bool finite = true;
    j["kernel_all_finite_ms"] = time_ms(
        [&] { finite = finite && bertps::optim::AllFinite(grads.data(), n); });
    double sq = 0;
    j["kernel_grad_squared_sum_ms"] =
        time_ms([&] { sq += bertps::optim::GradSquaredSum(grads.data(), n); });
    j["kernel_memcpy_ms"] = time_ms(
        [&] { std::memcpy(state.data(), grads.data(), sizeof(float) * n); });
    if (!finite || !(sq >= 0)) return Fail(absl::InternalError("bad gradient"));
  }
  std::printf("%s\n", j.dump().c_str());
  client->reset();
  for (auto& s : servers) s->Shutdown();
  return 0;
}

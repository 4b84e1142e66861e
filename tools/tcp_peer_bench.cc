// The raw-TCP peer of the parameter-server transport benchmark: how fast
// plain sockets move a payload over 127.0.0.1 on this machine, with nothing
// but large write()/read() calls between two flat buffers (no framing, no
// serialisation, no copies besides the kernel's). The `ps` benchmark
// (tools/bench.sh ps) divides the bertps figures by these.
//
// One process (tools/tcp_peer.h): for each stream a receiver thread (reads
// its share straight into its part of the destination buffer) and a sender
// thread (writes its part of the source buffer in --write_bytes calls). The
// connections are opened once and reused by every repetition, as a
// parameter-server client reuses its channels. With S streams the payload is
// split into S equal parts sent in parallel (S shards).
//
// Prints one JSON line:
//   {"bench":"tcp_peer","streams":S,"bytes":N,"gbps_median":..,...}
// GB/s are 1e9 bytes of payload per second, from the start signal to the
// last byte received.
//
// Both ends of every connection get the congestion control bertps's own
// loopback connections get under --tcp_congestion (common/tcp_tuning.h:
// "auto", the default, is reno on loopback), so that the peer and bertps
// differ only in what runs above the socket; "tcp_congestion" in the output
// names it (empty: the system default).
//
//   tcp_peer_bench --bytes 438022656 --streams 2 --reps 7

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "common/init.h"
#include "common/process_cpu.h"
#include "common/tcp_tuning.h"
#include "nlohmann/json.hpp"
#include "tools/tcp_peer.h"

ABSL_FLAG(int64_t, bytes, 438022656,
          "Payload bytes per repetition (default: BERT-base fp32 parameters).");
ABSL_FLAG(int, streams, 1, "Parallel TCP connections (the payload is split).");
ABSL_FLAG(int, reps, 7, "Timed repetitions.");
ABSL_FLAG(int, warmup, 1, "Untimed repetitions first.");
ABSL_FLAG(int64_t, write_bytes, 4 << 20, "Bytes per write() call.");
ABSL_FLAG(int64_t, buffer_bytes, 0,
          "0: source and destination are whole-payload buffers (like a model's "
          "gradient and parameters); > 0: each stream cycles through a buffer "
          "of this size (cache-resident, as iperf3 does).");
ABSL_FLAG(int, sockbuf, 0, "SO_SNDBUF/SO_RCVBUF bytes (0: kernel autotuning).");
ABSL_FLAG(int64_t, copy_out_bytes, 0,
          "0: receive straight into the destination; > 0: receive into a "
          "buffer of this size and copy each read into the destination, as "
          "a transport with its own receive buffers must.");

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "tcp_peer_bench: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  bertps::InitProcess(argc, argv, "tcp_peer_bench [flags]");
  if (absl::Status tcp = bertps::SetTcpCongestionFromFlag(); !tcp.ok()) {
    std::fprintf(stderr, "tcp_peer_bench: %s\n", tcp.ToString().c_str());
    return 2;
  }
  bertps::tools::TcpPeerOptions o;
  o.bytes = absl::GetFlag(FLAGS_bytes);
  o.streams = absl::GetFlag(FLAGS_streams);
  o.write_bytes = absl::GetFlag(FLAGS_write_bytes);
  o.buffer_bytes = absl::GetFlag(FLAGS_buffer_bytes);
  o.sockbuf = absl::GetFlag(FLAGS_sockbuf);
  o.copy_out_bytes = absl::GetFlag(FLAGS_copy_out_bytes);
  o.congestion = bertps::TcpCongestionForTarget("127.0.0.1");
  const int reps = absl::GetFlag(FLAGS_reps);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  if (reps < 1 || warmup < 0) {
    return Fail(absl::InvalidArgumentError(
        "--reps must be positive and --warmup not negative"));
  }
  auto peer = bertps::tools::RawTcpPeer::Create(o);
  if (!peer.ok()) return Fail(peer.status());
  std::vector<double> gbps;
  double cpu0 = 0;
  for (int r = 0; r < warmup + reps; ++r) {
    if (r == warmup) cpu0 = bertps::ProcessCpuSeconds();
    absl::StatusOr<double> secs = (*peer)->Transfer();
    if (!secs.ok()) return Fail(secs.status());
    if (r >= warmup) gbps.push_back(o.bytes / *secs / 1e9);
  }
  const double cpu1 = bertps::ProcessCpuSeconds();
  if (!(*peer)->Verify()) {
    return Fail(absl::DataLossError("received bytes differ from those sent"));
  }
  nlohmann::ordered_json j;
  j["bench"] = "tcp_peer";
  j["streams"] = o.streams;
  j["bytes"] = o.bytes;
  j["write_bytes"] = o.write_bytes;
  j["buffers"] = o.buffer_bytes > 0 ? "ring" : "flat";
  if (o.buffer_bytes > 0) j["buffer_bytes"] = o.buffer_bytes;
  j["sockbuf"] = o.sockbuf;
  if (o.copy_out_bytes > 0) j["copy_out_bytes"] = o.copy_out_bytes;
  j["tcp_congestion"] = o.congestion;
  j["reps"] = reps;
  j["gbps_median"] = Median(gbps);
  j["gbps_min"] = *std::min_element(gbps.begin(), gbps.end());
  j["gbps_max"] = *std::max_element(gbps.begin(), gbps.end());
  j["gbps"] = gbps;
  // Sender and receiver CPU together, per GB of payload.
  j["cpu_s_per_gb"] = (cpu1 - cpu0) / (reps * o.bytes / 1e9);
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

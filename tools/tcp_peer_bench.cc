// The raw-TCP peer of the parameter-server transport benchmark: how fast
// plain sockets move a payload over 127.0.0.1 on this machine, with nothing
// but large write()/read() calls between two flat buffers (no framing, no
// serialisation, no copies besides the kernel's). The `ps` benchmark
// (tools/bench.sh ps) divides the bertps figures by these.
//
// One process: for each stream a receiver thread (accepts, reads its share
// straight into its part of the destination buffer) and a sender thread
// (writes its part of the source buffer in --write_bytes calls). The
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
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/init.h"
#include "common/tcp_tuning.h"
#include "nlohmann/json.hpp"

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

namespace {

using Clock = std::chrono::steady_clock;

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// A listening socket on 127.0.0.1 with a system-chosen port.
absl::StatusOr<int> Listen(int* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Errno("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return Errno("bind 127.0.0.1:0");
  }
  if (::listen(fd, 4) != 0) {
    ::close(fd);
    return Errno("listen");
  }
  socklen_t len = sizeof(a);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return Errno("getsockname");
  }
  *port = ntohs(a.sin_port);
  return fd;
}

absl::StatusOr<int> Connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Errno("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return Errno(absl::StrCat("connect 127.0.0.1:", port));
  }
  return fd;
}

// Moves n bytes through `fd` in calls of at most `chunk` bytes, from/to
// base[k % ring] for byte k of the stream.
absl::Status WriteAll(int fd, const char* base, int64_t ring, int64_t n,
                      int64_t chunk) {
  for (int64_t k = 0; k < n;) {
    const int64_t at = k % ring;
    const int64_t len = std::min({n - k, chunk, ring - at});
    const ssize_t w = ::write(fd, base + at, static_cast<size_t>(len));
    if (w < 0) {
      if (errno == EINTR) continue;
      return Errno("write");
    }
    k += w;
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, char* base, int64_t ring, int64_t n,
                     int64_t chunk) {
  for (int64_t k = 0; k < n;) {
    const int64_t at = k % ring;
    const int64_t len = std::min({n - k, chunk, ring - at});
    const ssize_t r = ::read(fd, base + at, static_cast<size_t>(len));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Errno("read");
    }
    if (r == 0) return absl::DataLossError("peer closed the connection early");
    k += r;
  }
  return absl::OkStatus();
}

absl::Status SetBuffers(int fd, int bytes) {
  if (bytes <= 0) return absl::OkStatus();
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes)) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)) != 0) {
    return Errno("setsockopt SO_SNDBUF/SO_RCVBUF");
  }
  return absl::OkStatus();
}

// Start/finish rendezvous of all sender and receiver threads per repetition.
class Round {
 public:
  explicit Round(int parties) : parties_(parties) {}
  // Workers: wait until round `r` starts.
  void AwaitStart(int r) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return started_ >= r; });
  }
  void Done(const absl::Status& st) {
    std::lock_guard<std::mutex> l(mu_);
    if (!st.ok() && status_.ok()) status_ = st;
    ++done_;
    cv_.notify_all();
  }
  // Main thread: start round `r`, wait for every party; returns seconds.
  absl::StatusOr<double> Run(int r) {
    std::unique_lock<std::mutex> l(mu_);
    done_ = 0;
    const auto t0 = Clock::now();
    started_ = r;
    cv_.notify_all();
    cv_.wait(l, [&] { return done_ == parties_; });
    const auto t1 = Clock::now();
    if (!status_.ok()) return status_;
    return std::chrono::duration<double>(t1 - t0).count();
  }

 private:
  const int parties_;
  std::mutex mu_;
  std::condition_variable cv_;
  int started_ = -1;
  int done_ = 0;
  absl::Status status_;
};

// CPU seconds (user + system) of this process so far.
double CpuSeconds() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  bertps::InitProcess(argc, argv, "tcp_peer_bench [flags]");
  if (absl::Status tcp = bertps::SetTcpCongestionFromFlag(); !tcp.ok()) {
    std::fprintf(stderr, "tcp_peer_bench: %s\n", tcp.ToString().c_str());
    return 2;
  }
  const std::string congestion = bertps::TcpCongestionForTarget("127.0.0.1");
  const int64_t bytes = absl::GetFlag(FLAGS_bytes);
  const int streams = absl::GetFlag(FLAGS_streams);
  const int reps = absl::GetFlag(FLAGS_reps);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int64_t chunk = absl::GetFlag(FLAGS_write_bytes);
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "tcp_peer_bench: %s\n", s.ToString().c_str());
    return 1;
  };
  if (bytes <= 0 || streams < 1 || reps < 1 || warmup < 0 || chunk <= 0) {
    return fail(absl::InvalidArgumentError(
        "--bytes, --streams, --reps, --write_bytes must be positive"));
  }
  const int64_t ring_flag = absl::GetFlag(FLAGS_buffer_bytes);
  const int sockbuf = absl::GetFlag(FLAGS_sockbuf);
  // Stream s moves payload bytes [begin[s], begin[s+1]).
  std::vector<int64_t> begin(streams + 1);
  for (int s = 0; s <= streams; ++s) begin[s] = bytes * s / streams;
  // Flat: stream s reads/writes buffer bytes [begin[s], begin[s+1]); ring:
  // [s * ring, (s + 1) * ring) cyclically.
  const int64_t buffer = ring_flag > 0 ? streams * ring_flag : bytes;
  // Source and destination: touched up front so no page faults are timed
  // (the parameter server's buffers are long-lived too).
  std::vector<char> src(buffer), dst(buffer);  // (buffer)
  for (int64_t i = 0; i < buffer; ++i) src[i] = static_cast<char>(i * 131);
  std::memset(dst.data(), 0, dst.size());
  auto base = [&](int s) { return ring_flag > 0 ? s * ring_flag : begin[s]; };
  auto ring = [&](int s) {
    return ring_flag > 0 ? ring_flag : begin[s + 1] - begin[s];
  };

  std::vector<int> send_fd(streams), recv_fd(streams);
  for (int s = 0; s < streams; ++s) {
    int port = 0;
    absl::StatusOr<int> lfd = Listen(&port);
    if (!lfd.ok()) return fail(lfd.status());
    absl::StatusOr<int> cfd = Connect(port);
    if (!cfd.ok()) return fail(cfd.status());
    const int afd = ::accept(*lfd, nullptr, nullptr);
    if (afd < 0) return fail(Errno("accept"));
    ::close(*lfd);
    send_fd[s] = *cfd;
    recv_fd[s] = afd;
    absl::Status st = SetBuffers(*cfd, sockbuf);
    if (st.ok()) st = SetBuffers(afd, sockbuf);
    if (st.ok() && !congestion.empty()) {
      st = bertps::SetTcpCongestionOf(*cfd, congestion);
      if (st.ok()) st = bertps::SetTcpCongestionOf(afd, congestion);
    }
    if (!st.ok()) return fail(st);
  }

  const int total = warmup + reps;
  Round round(2 * streams);
  std::vector<std::thread> threads;
  for (int s = 0; s < streams; ++s) {
    threads.emplace_back([&, s] {
      for (int r = 0; r < total; ++r) {
        round.AwaitStart(r);
        round.Done(WriteAll(send_fd[s], src.data() + base(s), ring(s),
                            begin[s + 1] - begin[s], chunk));
      }
    });
    threads.emplace_back([&, s] {
      for (int r = 0; r < total; ++r) {
        round.AwaitStart(r);
        round.Done(ReadAll(recv_fd[s], dst.data() + base(s), ring(s),
                           begin[s + 1] - begin[s], chunk));
      }
    });
  }
  std::vector<double> gbps;
  absl::Status status;
  double cpu0 = 0, cpu1 = 0;
  for (int r = 0; r < total; ++r) {
    if (r == warmup) cpu0 = CpuSeconds();
    absl::StatusOr<double> secs = round.Run(r);
    if (!secs.ok()) {
      status = secs.status();
      break;
    }
    if (r >= warmup) gbps.push_back(bytes / *secs / 1e9);
  }
  cpu1 = CpuSeconds();
  if (!status.ok()) {
    // Unblock the remaining threads before leaving.
    for (int s = 0; s < streams; ++s) {
      ::shutdown(send_fd[s], SHUT_RDWR);
      ::shutdown(recv_fd[s], SHUT_RDWR);
    }
    std::_Exit(fail(status));
  }
  for (auto& t : threads) t.join();
  for (int s = 0; s < streams; ++s) {
    ::close(send_fd[s]);
    ::close(recv_fd[s]);
  }
  if (ring_flag == 0 && std::memcmp(src.data(), dst.data(), bytes) != 0) {
    return fail(absl::DataLossError("received bytes differ from those sent"));
  }
  nlohmann::ordered_json j;
  j["bench"] = "tcp_peer";
  j["streams"] = streams;
  j["bytes"] = bytes;
  j["write_bytes"] = chunk;
  j["buffers"] = ring_flag > 0 ? "ring" : "flat";
  if (ring_flag > 0) j["buffer_bytes"] = ring_flag;
  j["sockbuf"] = sockbuf;
  j["tcp_congestion"] = congestion;
  j["reps"] = reps;
  j["gbps_median"] = Median(gbps);
  j["gbps_min"] = *std::min_element(gbps.begin(), gbps.end());
  j["gbps_max"] = *std::max_element(gbps.begin(), gbps.end());
  j["gbps"] = gbps;
  // Sender and receiver CPU together, per GB of payload.
  j["cpu_s_per_gb"] = (cpu1 - cpu0) / (reps * bytes / 1e9);
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

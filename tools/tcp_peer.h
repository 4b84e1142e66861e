// RawTcpPeer: the raw-TCP peer of the parameter-server transport benchmark.
// It moves a payload over 127.0.0.1 with nothing but large send()/read()
// calls between two flat buffers (no framing, no serialisation, and no
// copies besides the kernel's unless copy_out_bytes asks for one): one
// receiver and one sender thread per stream, the payload split into equal
// parts, one per stream (S shards: S streams).
// Connections are opened once and reused by every transfer, as a
// parameter-server client reuses its channels.
//
// Used by tcp_peer_bench (the peer alone) and by ps_bench, which runs one
// raw transfer next to each bertps transfer so that both see the host in the
// same state (the host's speed moves in phases of seconds).
//
// Thread-safety: Transfer() from one thread at a time.
#ifndef BERTPS_TOOLS_TCP_PEER_H_
#define BERTPS_TOOLS_TCP_PEER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace bertps {
namespace tools {

struct TcpPeerOptions {
  int64_t bytes = 438022656;      // payload per transfer
  int streams = 1;                // parallel connections
  int64_t write_bytes = 4 << 20;  // bytes per send()/read() call
  // 0: source and destination are whole-payload buffers (like a model's
  // gradient and parameters); > 0: each stream cycles through a buffer of
  // this size (cache-resident, as iperf3 does).
  int64_t buffer_bytes = 0;
  int sockbuf = 0;  // SO_SNDBUF/SO_RCVBUF bytes (0: kernel autotuning)
  // 0: the receiver reads straight into the destination. > 0 (flat buffers
  // only): each receiver reads into a buffer of its own of this size (reads
  // of at most this and write_bytes) and copies every read into the
  // destination, as any transport must that
  // receives into its own buffers and hands the bytes to a caller's memory
  // (gRPC does). It has no framing, parsing or thread handoff, so its ratio
  // to the plain peer bounds in practice what bertps's ratio can reach on
  // this host.
  int64_t copy_out_bytes = 0;
  // Congestion control of both ends of every connection (empty: the
  // system's default).
  std::string congestion;
};

class RawTcpPeer {
 public:
  // Opens the connections, touches the buffers (no page faults are timed)
  // and starts the threads.
  static absl::StatusOr<std::unique_ptr<RawTcpPeer>> Create(
      const TcpPeerOptions& options);
  ~RawTcpPeer();
  RawTcpPeer(const RawTcpPeer&) = delete;
  RawTcpPeer& operator=(const RawTcpPeer&) = delete;

  // One transfer of the whole payload; returns its seconds (from the start
  // signal to the last byte received). After an error the peer is unusable.
  absl::StatusOr<double> Transfer();
  // With flat buffers: whether the destination equals the source (true for
  // ring buffers, which are not compared).
  bool Verify() const;

  const TcpPeerOptions& options() const { return options_; }

 private:
  explicit RawTcpPeer(const TcpPeerOptions& options) : options_(options) {}
  void Work(int stream, bool send);

  const TcpPeerOptions options_;
  std::vector<int64_t> begin_;  // (streams + 1) payload offset of stream s
  std::vector<char> src_, dst_;
  // Per stream with copy_out_bytes; each used by its stream's receiver only.
  std::vector<std::vector<char>> bounce_;
  std::vector<int> send_fd_, recv_fd_;
  std::vector<std::thread> threads_;

  absl::Mutex mu_;
  int64_t started_ ABSL_GUARDED_BY(mu_) = 0;  // transfers started
  int done_ ABSL_GUARDED_BY(mu_) = 0;         // threads done with this one
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tools
}  // namespace bertps

#endif  // BERTPS_TOOLS_TCP_PEER_H_

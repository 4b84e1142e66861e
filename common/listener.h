// A TCP listener for a gRPC server that sheds connections when the process
// runs short of descriptors, instead of going deaf.
//
// gRPC 1.51's own listener (src/core/lib/iomgr/tcp_server_posix.cc) stops
// accepting for good the first time accept4() fails with anything but
// EAGAIN or EINTR: one EMFILE and the port is dead until the process
// restarts (grpc/grpc#16058, #20418; measured on the coordinator under a
// 64-descriptor limit: after 100 connections were opened and closed, no new
// client was ever served). This listener owns the socket and runs its own
// accept loop (one thread), handing each connection to the server through
// ServerBuilder's external connection acceptor (same credentials, TLS
// included), and
//   - keeps `reserve` descriptors free for the daemon's own work (its store,
//     its calls to other daemons, its logs): a connection accepted at a
//     descriptor number of soft limit - reserve or above is closed at once
//     (accept returns the lowest free number, so that many are in use);
//   - on EMFILE / ENFILE accepts the waiting connection on a spare
//     descriptor held for the purpose and closes it (the peer sees the
//     connection closed and may retry), then takes the spare again;
//   - on ENOBUFS / ENOMEM waits 50 ms and goes on;
// so the port keeps answering, and serves again as soon as descriptors are
// free. Shed connections are counted and logged (when shedding starts, at
// most every 10 s while it lasts, and when serving resumes).
//
// Thread-safety: the methods may be called from any thread. Ownership: the
// listener owns its socket and thread; Stop() (or the destructor) closes it
// and joins the thread.
#ifndef BERTPS_COMMON_LISTENER_H_
#define BERTPS_COMMON_LISTENER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace bertps {

class Listener {
 public:
  // Descriptors kept free below the soft limit when `reserve` is -1:
  // limit / 16, at least 16, at most 1024.
  static int DefaultReserve(int64_t soft_limit);

  // Binds and listens on HOST:PORT (port 0: any free one; host "0.0.0.0",
  // "::" or "": every address, IPv6 and IPv4). Errors name the address.
  static absl::StatusOr<std::unique_ptr<Listener>> Listen(
      const std::string& host, int port, int reserve = -1);
  ~Listener();

  int port() const { return port_; }
  int fd() const { return fd_; }

  // Starts the accept loop: each accepted connection (non-blocking,
  // close-on-exec) goes to `handoff`, which then owns the descriptor.
  void Start(std::function<void(int fd)> handoff);
  // Stops accepting and closes the socket (idempotent).
  void Stop();

  int64_t accepted() const { return accepted_.load(); }
  int64_t shed() const { return shed_.load(); }

 private:
  Listener(int fd, int port, int reserve);
  void Loop();
  void Shed(int fd, const char* why);

  int fd_ = -1;
  int port_ = 0;
  int reserve_ = 0;
  int wake_[2] = {-1, -1};  // a pipe: Stop() writes to end the loop
  int spare_ = -1;          // /dev/null, given up to accept on EMFILE
  std::function<void(int)> handoff_;
  std::thread thread_;
  std::atomic<int64_t> accepted_{0};
  std::atomic<int64_t> shed_{0};
  int64_t shed_logged_ = 0;
  int64_t last_log_ns_ = 0;
};

// Serves `builder`'s server through a Listener on HOST:PORT with
// `credentials` instead of AddListeningPort: call before BuildAndStart, and
// Start() the result once the server is started.
struct ServerListener {
  std::unique_ptr<Listener> listener;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor;
  // Hands connections to the server (call once the server is started).
  void Start();
};
absl::StatusOr<ServerListener> AddServerListener(
    grpc::ServerBuilder* builder, const std::string& host, int port,
    std::shared_ptr<grpc::ServerCredentials> credentials, int reserve = -1);

}  // namespace bertps

#endif  // BERTPS_COMMON_LISTENER_H_

#include "tools/tcp_peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/tcp_tuning.h"

namespace bertps {
namespace tools {
namespace {

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
    const ssize_t w =
        ::send(fd, base + at, static_cast<size_t>(len), MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Errno("send");
    }
    k += w;
  }
  return absl::OkStatus();
}

// Reads n bytes into base[k % ring] for byte k. With a bounce buffer each
// read() lands there (at most its size) and is then copied into place.
absl::Status ReadAll(int fd, char* base, int64_t ring, int64_t n,
                     int64_t chunk, std::vector<char>* bounce) {
  for (int64_t k = 0; k < n;) {
    const int64_t at = k % ring;
    int64_t len = std::min({n - k, chunk, ring - at});
    char* into = base + at;
    if (bounce != nullptr) {
      len = std::min(len, static_cast<int64_t>(bounce->size()));
      into = bounce->data();
    }
    const ssize_t r = ::read(fd, into, static_cast<size_t>(len));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Errno("read");
    }
    if (r == 0) return absl::DataLossError("peer closed the connection early");
    if (bounce != nullptr) std::memcpy(base + at, into, static_cast<size_t>(r));
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

}  // namespace

absl::StatusOr<std::unique_ptr<RawTcpPeer>> RawTcpPeer::Create(
    const TcpPeerOptions& options) {
  if (options.bytes <= 0 || options.streams < 1 || options.write_bytes <= 0 ||
      options.buffer_bytes < 0 || options.copy_out_bytes < 0) {
    return absl::InvalidArgumentError(
        "raw TCP peer: bytes, streams and write_bytes must be positive, "
        "buffer_bytes and copy_out_bytes not negative");
  }
  if (options.copy_out_bytes > 0 && options.buffer_bytes > 0) {
    return absl::InvalidArgumentError(
        "raw TCP peer: copy_out_bytes needs flat buffers (buffer_bytes 0)");
  }
  std::unique_ptr<RawTcpPeer> p(new RawTcpPeer(options));
  const int streams = options.streams;
  p->begin_.resize(streams + 1);
  for (int s = 0; s <= streams; ++s) {
    p->begin_[s] = options.bytes * s / streams;
  }
  // Flat: stream s reads/writes buffer bytes [begin[s], begin[s+1]); ring:
  // [s * ring, (s + 1) * ring) cyclically.
  const int64_t buffer = options.buffer_bytes > 0
                             ? streams * options.buffer_bytes
                             : options.bytes;
  // Touched up front: no page faults are timed (the parameter server's
  // buffers are long-lived too).
  p->src_.resize(buffer);
  p->dst_.assign(buffer, 0);
  for (int64_t i = 0; i < buffer; ++i) p->src_[i] = static_cast<char>(i * 131);
  if (options.copy_out_bytes > 0) {
    p->bounce_.assign(streams, std::vector<char>(options.copy_out_bytes, 0));
  }
  p->send_fd_.assign(streams, -1);
  p->recv_fd_.assign(streams, -1);
  for (int s = 0; s < streams; ++s) {
    int port = 0;
    absl::StatusOr<int> lfd = Listen(&port);
    if (!lfd.ok()) return lfd.status();
    absl::StatusOr<int> cfd = Connect(port);
    if (!cfd.ok()) {
      ::close(*lfd);
      return cfd.status();
    }
    p->send_fd_[s] = *cfd;
    const int afd = ::accept(*lfd, nullptr, nullptr);
    ::close(*lfd);
    if (afd < 0) return Errno("accept");
    p->recv_fd_[s] = afd;
    absl::Status st = SetBuffers(*cfd, options.sockbuf);
    if (st.ok()) st = SetBuffers(afd, options.sockbuf);
    if (st.ok() && !options.congestion.empty()) {
      st = SetTcpCongestionOf(*cfd, options.congestion);
      if (st.ok()) st = SetTcpCongestionOf(afd, options.congestion);
    }
    if (!st.ok()) return st;
  }
  for (int s = 0; s < streams; ++s) {
    RawTcpPeer* raw = p.get();
    p->threads_.emplace_back([raw, s] { raw->Work(s, /*send=*/true); });
    p->threads_.emplace_back([raw, s] { raw->Work(s, /*send=*/false); });
  }
  return p;
}

void RawTcpPeer::Work(int s, bool send) {
  const int64_t ring_bytes = options_.buffer_bytes;
  const int64_t base = ring_bytes > 0 ? s * ring_bytes : begin_[s];
  const int64_t n = begin_[s + 1] - begin_[s];
  const int64_t ring = ring_bytes > 0 ? ring_bytes : n;
  const int fd = send ? send_fd_[s] : recv_fd_[s];
  for (int64_t r = 1;; ++r) {
    {
      absl::MutexLock l(&mu_);
      auto go = [this, r]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return quit_ || started_ >= r;
      };
      mu_.Await(absl::Condition(&go));
      if (quit_) return;
    }
    absl::Status st =
        send ? WriteAll(fd, src_.data() + base, ring, n, options_.write_bytes)
             : ReadAll(fd, dst_.data() + base, ring, n, options_.write_bytes,
                       bounce_.empty() ? nullptr : &bounce_[s]);
    // A failed end shuts its socket: the other end (in this process) then
    // fails too instead of waiting forever.
    if (!st.ok()) ::shutdown(fd, SHUT_RDWR);
    absl::MutexLock l(&mu_);
    if (!st.ok() && status_.ok()) status_ = st;
    ++done_;
  }
}

absl::StatusOr<double> RawTcpPeer::Transfer() {
  absl::MutexLock l(&mu_);
  RETURN_IF_ERROR(status_);
  done_ = 0;
  const auto t0 = std::chrono::steady_clock::now();
  ++started_;
  auto all = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done_ == 2 * options_.streams;
  };
  mu_.Await(absl::Condition(&all));
  const auto t1 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(status_);
  return std::chrono::duration<double>(t1 - t0).count();
}

bool RawTcpPeer::Verify() const {
  return options_.buffer_bytes > 0 || src_ == dst_;
}

RawTcpPeer::~RawTcpPeer() {
  {
    absl::MutexLock l(&mu_);
    quit_ = true;
  }
  for (size_t s = 0; s < send_fd_.size(); ++s) {
    if (send_fd_[s] >= 0) ::shutdown(send_fd_[s], SHUT_RDWR);
    if (recv_fd_[s] >= 0) ::shutdown(recv_fd_[s], SHUT_RDWR);
  }
  for (std::thread& t : threads_) t.join();
  for (size_t s = 0; s < send_fd_.size(); ++s) {
    if (send_fd_[s] >= 0) ::close(send_fd_[s]);
    if (recv_fd_[s] >= 0) ::close(recv_fd_[s]);
  }
}

}  // namespace tools
}  // namespace bertps

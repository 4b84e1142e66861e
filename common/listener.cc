#include "common/listener.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/descriptors.h"
#include "common/tcp_tuning.h"
#include "glog/logging.h"

namespace bertps {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool IsWildcard(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]";
}

// A listening socket on one address (errno set on failure).
int ListenOn(const addrinfo* a, bool dual_stack) {
  const int fd =
      socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
             a->ai_protocol);
  if (fd < 0) return -1;
  const int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (a->ai_family == AF_INET6 && dual_stack) {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  }
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 ||
      listen(fd, SOMAXCONN) != 0) {
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

}  // namespace

int Listener::DefaultReserve(int64_t soft_limit) {
  if (soft_limit < 0) return 1024;
  return static_cast<int>(std::clamp<int64_t>(soft_limit / 16, 16, 1024));
}

absl::StatusOr<std::unique_ptr<Listener>> Listener::Listen(
    const std::string& host, int port, int reserve) {
  const std::string where = absl::StrCat(host, ":", port);
  std::string name = host;
  if (name.size() > 2 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);
  }
  const bool wildcard = IsWildcard(host);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  hints.ai_family = AF_UNSPEC;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  // The wildcard: "::" first (both families on a dual-stack socket), then
  // 0.0.0.0, as gRPC does.
  const int rc = getaddrinfo(wildcard ? nullptr : name.c_str(),
                             service.c_str(), &hints, &found);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot listen on ", where, ": ", gai_strerror(rc)));
  }
  int fd = -1;
  int err = 0;
  for (int pass = 0; pass < 2 && fd < 0; ++pass) {
    for (const addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
      // Wildcard: IPv6 on the first pass, the rest on the second.
      if (wildcard && (a->ai_family == AF_INET6) != (pass == 0)) continue;
      if (!wildcard && pass == 1) break;
      fd = ListenOn(a, wildcard);
      if (fd < 0) err = errno;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", where, ": ", std::strerror(err ? err : EINVAL)));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  const int bound =
      ss.ss_family == AF_INET6
          ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
          : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (reserve < 0) reserve = DefaultReserve(GetDescriptorLimit().soft);
  return std::unique_ptr<Listener>(new Listener(fd, bound, reserve));
}

Listener::Listener(int fd, int port, int reserve)
    : fd_(fd), port_(port), reserve_(reserve) {
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) wake_[0] = wake_[1] = -1;
  spare_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

Listener::~Listener() {
  Stop();
  if (wake_[0] >= 0) close(wake_[0]);
  if (wake_[1] >= 0) close(wake_[1]);
  if (spare_ >= 0) close(spare_);
}

void Listener::Start(std::function<void(int)> handoff) {
  handoff_ = std::move(handoff);
  thread_ = std::thread([this] { Loop(); });
}

void Listener::Stop() {
  if (thread_.joinable()) {
    const char c = 0;
    if (wake_[1] >= 0) (void)!write(wake_[1], &c, 1);
    thread_.join();
  }
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
}

void Listener::Shed(int fd, const char* why) {
  if (fd >= 0) close(fd);
  const int64_t shed = ++shed_;
  const int64_t now = NowNs();
  if (last_log_ns_ == 0 || now - last_log_ns_ >= int64_t{10'000'000'000}) {
    const DescriptorLimit limit = GetDescriptorLimit();
    LOG(WARNING) << "port " << port_ << ": closed " << (shed - shed_logged_)
                 << " new connection(s) (" << why << "; descriptor limit "
                 << limit.soft << ", " << reserve_
                 << " kept free for this daemon's own work); still "
                    "listening, serving again once descriptors are free";
    shed_logged_ = shed;
    last_log_ns_ = now;
  }
}

void Listener::Loop() {
  pollfd p[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
  int wait_ms = -1;
  for (;;) {
    p[0].revents = p[1].revents = 0;
    const int n = poll(p, wake_[0] >= 0 ? 2 : 1, wait_ms);
    wait_ms = -1;
    if (n < 0 && errno != EINTR) {
      // Cannot happen with valid descriptors; never spin.
      wait_ms = 50;
      continue;
    }
    if (p[1].revents != 0) return;
    if (n <= 0 || p[0].revents == 0) continue;
    // Accept what is waiting.
    for (int k = 0; k < 256; ++k) {
      const int c = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c >= 0) {
        const int64_t soft = GetDescriptorLimit().soft;
        if (soft >= 0 && c >= soft - reserve_) {
          Shed(c, "descriptors nearly all in use");
          continue;
        }
        const int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        TuneAcceptedConnection(c);
        ++accepted_;
        if (shed_.load() > shed_logged_) {
          const int64_t shed = shed_.load();
          LOG(WARNING) << "port " << port_ << ": serving new connections "
                       << "again (" << shed << " closed in all while "
                       << "descriptors ran short)";
          shed_logged_ = shed;
          last_log_ns_ = 0;
        }
        handoff_(c);
        continue;
      }
      const int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK) break;
      if (err == EINTR || err == ECONNABORTED || err == EPROTO ||
          err == EPERM) {
        continue;
      }
      if (err == EMFILE || err == ENFILE) {
        // Out of descriptors: the spare one takes the connection, which is
        // closed, so that it does not wait (and wake the loop) for ever.
        if (spare_ >= 0) {
          close(spare_);
          spare_ = -1;
          const int s = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
          Shed(s, err == EMFILE ? "out of descriptors (EMFILE)"
                                : "the system is out of descriptors (ENFILE)");
          spare_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
          if (s >= 0) continue;
        } else {
          spare_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
          Shed(-1, "out of descriptors, no spare one to shed with");
        }
        wait_ms = 50;  // nothing could be freed: look again shortly
        break;
      }
      // ENOBUFS, ENOMEM and the like: transient; look again shortly.
      LOG_EVERY_N(WARNING, 100) << "port " << port_ << ": accept: "
                                << std::strerror(err);
      wait_ms = 50;
      break;
    }
    if (wait_ms > 0) {
      // Wait without watching the listening socket (level-triggered: it
      // would wake at once), only the stop pipe.
      pollfd w{wake_[0], POLLIN, 0};
      if (wake_[0] >= 0 && poll(&w, 1, wait_ms) > 0) return;
      wait_ms = 0;
    }
  }
}

void ServerListener::Start() {
  grpc::experimental::ExternalConnectionAcceptor* a = acceptor.get();
  const int listen_fd = listener->fd();
  listener->Start([a, listen_fd](int fd) {
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
    p.listener_fd = listen_fd;
    p.fd = fd;
    a->HandleNewConnection(&p);
  });
}

absl::StatusOr<ServerListener> AddServerListener(
    grpc::ServerBuilder* builder, const std::string& host, int port,
    std::shared_ptr<grpc::ServerCredentials> credentials, int reserve) {
  ServerListener out;
  absl::StatusOr<std::unique_ptr<Listener>> l =
      Listener::Listen(host, port, reserve);
  if (!l.ok()) return l.status();
  out.listener = std::move(*l);
  out.acceptor = builder->experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
      std::move(credentials));
  return out;
}

}  // namespace bertps

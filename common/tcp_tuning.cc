#include "common/tcp_tuning.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "glog/logging.h"
#include "grpc/support/sync.h"
#include "grpcpp/impl/server_builder_option.h"

// gRPC's socket mutator (src/core/lib/iomgr/socket_mutator.h, gRPC 1.51):
// the public headers declare the type and grpc::ChannelArguments takes it;
// its layout is declared here as gRPC defines it.
typedef enum {
  GRPC_FD_CLIENT_CONNECTION_USAGE,
  GRPC_FD_SERVER_LISTENER_USAGE,
  GRPC_FD_SERVER_CONNECTION_USAGE,
} grpc_fd_usage;

typedef struct {
  int fd;
  grpc_fd_usage usage;
} grpc_mutate_socket_info;

struct grpc_socket_mutator_vtable {
  bool (*mutate_fd)(int fd, grpc_socket_mutator* mutator);
  int (*compare)(grpc_socket_mutator* a, grpc_socket_mutator* b);
  void (*destroy)(grpc_socket_mutator* mutator);
  bool (*mutate_fd_2)(const grpc_mutate_socket_info* info,
                      grpc_socket_mutator* mutator);
};

struct grpc_socket_mutator {
  const grpc_socket_mutator_vtable* vtable;
  gpr_refcount refcount;
};

ABSL_FLAG(std::string, tcp_congestion, bertps::kDefaultTcpCongestion,
          "TCP congestion control of this process's connections: auto "
          "(loopback connections use reno, which is not paced; others keep "
          "the system default), system, or an algorithm name.");

namespace bertps {
namespace {

absl::Mutex policy_mu;
std::string policy ABSL_GUARDED_BY(policy_mu) = kDefaultTcpCongestion;

bool ValidAlgorithmName(absl::string_view name) {
  if (name.empty() || name.size() > 15) return false;  // TCP_CA_NAME_MAX 16
  for (char c : name) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '_') {
      return false;
    }
  }
  return true;
}

// The algorithm for a connection whose peer is (or is not) on loopback.
std::string AlgorithmFor(bool loopback) {
  const std::string p = TcpCongestionPolicy();
  if (p == "system") return "";
  if (p == "auto") return loopback ? "reno" : "";
  return p;
}

bool PeerIsLoopback(int fd) {
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return false;
  }
  char text[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, text,
              sizeof(text));
  } else if (ss.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr,
              text, sizeof(text));
  } else {
    return false;  // not TCP/IP (a Unix socket has no congestion control)
  }
  return IsLoopbackHost(text);
}

void Apply(int fd, const std::string& algorithm) {
  if (algorithm.empty()) return;
  absl::Status s = SetTcpCongestionOf(fd, algorithm);
  if (!s.ok()) {
    LOG_FIRST_N(WARNING, 1) << "TCP congestion control left at the system "
                               "default: " << s;
  }
}

// A mutator: `client` ones carry the algorithm decided from the channel's
// target; server ones decide per accepted connection from its peer.
struct TcpMutator {
  grpc_socket_mutator base;  // first: gRPC passes &base
  bool client = false;
  std::string algorithm;  // client only
};

TcpMutator* Of(grpc_socket_mutator* m) {
  return reinterpret_cast<TcpMutator*>(m);
}

bool MutateFd2(const grpc_mutate_socket_info* info, grpc_socket_mutator* m) {
  TcpMutator* t = Of(m);
  switch (info->usage) {
    case GRPC_FD_CLIENT_CONNECTION_USAGE:
      if (t->client) Apply(info->fd, t->algorithm);
      break;
    case GRPC_FD_SERVER_CONNECTION_USAGE:
      if (!t->client) Apply(info->fd, AlgorithmFor(PeerIsLoopback(info->fd)));
      break;
    case GRPC_FD_SERVER_LISTENER_USAGE:
      break;
  }
  return true;  // a refused algorithm never fails the connection
}

// gRPC calls mutate_fd only where mutate_fd_2 is unset; kept so that no
// path through the vtable finds a null function.
bool MutateFd(int fd, grpc_socket_mutator* m) {
  grpc_mutate_socket_info info{fd, GRPC_FD_CLIENT_CONNECTION_USAGE};
  return MutateFd2(&info, m);
}

int Compare(grpc_socket_mutator* a, grpc_socket_mutator* b) {
  const TcpMutator* x = Of(a);
  const TcpMutator* y = Of(b);
  if (x->client != y->client) return x->client ? 1 : -1;
  return x->algorithm.compare(y->algorithm);
}

void Destroy(grpc_socket_mutator* m) { delete Of(m); }

const grpc_socket_mutator_vtable kVtable = {MutateFd, Compare, Destroy,
                                            MutateFd2};

// A new mutator holding one reference (which ChannelArguments takes).
grpc_socket_mutator* NewMutator(bool client, std::string algorithm) {
  auto* t = new TcpMutator;
  t->base.vtable = &kVtable;
  gpr_ref_init(&t->base.refcount, 1);
  t->client = client;
  t->algorithm = std::move(algorithm);
  return &t->base;
}

class ServerTuningOption : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments* args) override {
    args->SetSocketMutator(NewMutator(/*client=*/false, ""));
  }
  void UpdatePlugins(
      std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*) override {}
};

}  // namespace

absl::Status SetTcpCongestion(absl::string_view p) {
  if (p != "auto" && p != "system" && !ValidAlgorithmName(p)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TCP congestion control \"", p,
        "\": expected auto, system or an algorithm name such as reno"));
  }
  absl::MutexLock l(&policy_mu);
  policy = std::string(p);
  return absl::OkStatus();
}

absl::Status SetTcpCongestionFromFlag() {
  return SetTcpCongestion(absl::GetFlag(FLAGS_tcp_congestion));
}

std::string TcpCongestionPolicy() {
  absl::MutexLock l(&policy_mu);
  return policy;
}

bool IsLoopbackHost(absl::string_view host) {
  if (absl::ConsumePrefix(&host, "[")) absl::ConsumeSuffix(&host, "]");
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  in_addr v4;
  const std::string h(host);
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

std::string TcpCongestionForTarget(absl::string_view target) {
  // Schemes of gRPC's resolvers; a Unix socket has no TCP.
  if (absl::StartsWith(target, "unix:") ||
      absl::StartsWith(target, "unix-abstract:")) {
    return "";
  }
  for (absl::string_view scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (absl::ConsumePrefix(&target, scheme)) break;
  }
  absl::string_view host = target;
  if (absl::StartsWith(target, "[")) {
    const size_t close = target.find(']');
    if (close != absl::string_view::npos) host = target.substr(0, close + 1);
  } else if (target.find(':') == target.rfind(':')) {  // host[:port]
    host = target.substr(0, target.find(':'));
  }
  return AlgorithmFor(IsLoopbackHost(host));
}

void AddTcpTuning(absl::string_view target, grpc::ChannelArguments* args) {
  std::string algorithm = TcpCongestionForTarget(target);
  if (algorithm.empty()) return;
  args->SetSocketMutator(NewMutator(/*client=*/true, std::move(algorithm)));
}

void AddTcpTuning(grpc::ServerBuilder* builder) {
  builder->SetOption(std::make_unique<ServerTuningOption>());
  // No SO_REUSEPORT (gRPC's default on Linux): with it a second daemon
  // given the same port binds it too and the kernel splits the connections
  // between the two; without it the second one fails to listen and says so.
  builder->AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
}

void TuneAcceptedConnection(int fd) {
  Apply(fd, AlgorithmFor(PeerIsLoopback(fd)));
}

absl::Status SetTcpCongestionOf(int fd, const std::string& algorithm) {
  if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, algorithm.data(),
                 static_cast<socklen_t>(algorithm.size())) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("setsockopt(TCP_CONGESTION, ", algorithm,
                     "): ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TcpCongestionOf(int fd) {
  char name[32] = {};
  socklen_t len = sizeof(name);
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "getsockopt(TCP_CONGESTION): ", std::strerror(errno)));
  }
  return std::string(name, strnlen(name, std::min<size_t>(len, sizeof(name))));
}

}  // namespace bertps

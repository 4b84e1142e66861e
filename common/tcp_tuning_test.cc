#include "common/tcp_tuning.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/security.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace bertps {
namespace {

// Restores the default policy after each test.
class TcpTuningTest : public ::testing::Test {
 protected:
  void TearDown() override {
    ASSERT_TRUE(SetTcpCongestion(kDefaultTcpCongestion).ok());
  }
};

TEST_F(TcpTuningTest, PolicyIsValidated) {
  EXPECT_TRUE(SetTcpCongestion("auto").ok());
  EXPECT_TRUE(SetTcpCongestion("system").ok());
  EXPECT_TRUE(SetTcpCongestion("reno").ok());
  EXPECT_TRUE(SetTcpCongestion("bbr").ok());
  for (const char* bad : {"", "Reno", "reno;rm", "a_name_far_too_long", "r e"}) {
    absl::Status s = SetTcpCongestion(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("expected auto, system"), std::string::npos);
  }
  EXPECT_EQ(TcpCongestionPolicy(), "bbr");  // the refusals changed nothing
}

TEST_F(TcpTuningTest, LoopbackHosts) {
  for (const char* h : {"localhost", "LOCALHOST", "127.0.0.1", "127.3.2.1",
                        "::1", "[::1]", "::ffff:127.0.0.1"}) {
    EXPECT_TRUE(IsLoopbackHost(h)) << h;
  }
  for (const char* h : {"10.0.0.1", "128.0.0.1", "::2", "::ffff:10.0.0.1",
                        "example.org", "", "[", "bertps-ps-0.bertps-ps"}) {
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
  }
}

TEST_F(TcpTuningTest, TargetsUnderEachPolicy) {
  const char* loopback[] = {"127.0.0.1:7000", "localhost:7000", "[::1]:7000",
                            "ipv4:127.0.0.1:7000", "ipv6:[::1]:7000",
                            "dns:///localhost:7000", "dns:localhost:7000",
                            "127.0.0.1"};
  const char* remote[] = {"10.1.2.3:7000", "bertps-ps-0.bertps-ps:7000",
                          "dns:///ps.example.org:443", "[fe80::1]:7000",
                          "unix:/tmp/bertps.sock"};
  // auto: loopback peers get reno, the others the system default.
  for (const char* t : loopback) EXPECT_EQ(TcpCongestionForTarget(t), "reno") << t;
  for (const char* t : remote) EXPECT_EQ(TcpCongestionForTarget(t), "") << t;
  ASSERT_TRUE(SetTcpCongestion("system").ok());
  for (const char* t : loopback) EXPECT_EQ(TcpCongestionForTarget(t), "") << t;
  ASSERT_TRUE(SetTcpCongestion("bbr").ok());
  EXPECT_EQ(TcpCongestionForTarget("127.0.0.1:7000"), "bbr");
  EXPECT_EQ(TcpCongestionForTarget("10.1.2.3:7000"), "bbr");
  // A Unix socket has no congestion control, whatever the policy.
  EXPECT_EQ(TcpCongestionForTarget("unix:/tmp/bertps.sock"), "");
}

std::string SystemDefault() {
  std::ifstream f("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string s;
  std::getline(f, s);
  return std::string(absl::StripAsciiWhitespace(s));
}

int PortOf(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  }
  if (ss.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  }
  return -1;
}

// The congestion control of this process's connected TCP sockets to and
// from `port`: {client side, server side}; "" where none was found.
std::pair<std::string, std::string> EndsOf(int port) {
  std::pair<std::string, std::string> ends;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return ends;
  while (dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    absl::StatusOr<std::string> cc = TcpCongestionOf(fd);
    if (!cc.ok()) continue;  // not a TCP socket
    sockaddr_storage self, peer;
    socklen_t a = sizeof(self), b = sizeof(peer);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &a) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &b) != 0) {
      continue;  // a listener
    }
    if (PortOf(peer) == port) ends.first = *cc;
    if (PortOf(self) == port) ends.second = *cc;
  }
  closedir(d);
  return ends;
}

// A real gRPC server on 127.0.0.1 and a channel to it, both tuned; returns
// the ends' algorithms once connected.
std::pair<std::string, std::string> ConnectOverLoopback() {
  grpc::CallbackGenericService generic;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  AddTcpTuning(&builder);
  builder.RegisterCallbackGenericService(&generic);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  EXPECT_NE(server, nullptr);
  if (server == nullptr) return {};
  std::shared_ptr<grpc::Channel> channel =
      MakeChannel(absl::StrCat("127.0.0.1:", port), SecurityConfig{});
  EXPECT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() +
                                        std::chrono::seconds(10)));
  std::pair<std::string, std::string> ends = EndsOf(port);
  channel.reset();
  server->Shutdown(std::chrono::system_clock::now());
  return ends;
}

// A second server on a port that a tuned server holds fails to listen
// (without the tuning, gRPC's SO_REUSEPORT would let both bind it and split
// the connections between them).
TEST_F(TcpTuningTest, APortTakenIsNotShared) {
  auto start = [](const std::string& address, bool tuned, int* port) {
    auto generic = std::make_unique<grpc::CallbackGenericService>();
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(), port);
    if (tuned) AddTcpTuning(&builder);
    builder.RegisterCallbackGenericService(generic.get());
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    return std::make_pair(std::move(server), std::move(generic));
  };
  int first_port = 0;
  auto first = start("127.0.0.1:0", /*tuned=*/true, &first_port);
  ASSERT_NE(first.first, nullptr);
  ASSERT_NE(first_port, 0);
  const std::string taken = absl::StrCat("127.0.0.1:", first_port);
  int second_port = 0;
  auto second = start(taken, /*tuned=*/true, &second_port);
  EXPECT_TRUE(second.first == nullptr || second_port == 0);
  // Two untuned servers (SO_REUSEPORT on both) do share a port: the case
  // the tuning prevents.
  int a_port = 0, b_port = 0;
  auto a = start("127.0.0.1:0", /*tuned=*/false, &a_port);
  ASSERT_NE(a.first, nullptr);
  auto b = start(absl::StrCat("127.0.0.1:", a_port), /*tuned=*/false, &b_port);
  EXPECT_TRUE(b.first != nullptr && b_port == a_port);
  for (auto* s : {&first.first, &second.first, &a.first, &b.first}) {
    if (*s) (*s)->Shutdown(std::chrono::system_clock::now());
  }
}

TEST_F(TcpTuningTest, LoopbackConnectionsUseRenoBothWays) {
  const std::pair<std::string, std::string> ends = ConnectOverLoopback();
  EXPECT_EQ(ends.first, "reno");   // the channel's socket
  EXPECT_EQ(ends.second, "reno");  // the socket the server accepted
}

TEST_F(TcpTuningTest, SystemPolicyLeavesTheDefault) {
  ASSERT_TRUE(SetTcpCongestion("system").ok());
  const std::string def = SystemDefault();
  ASSERT_FALSE(def.empty());
  const std::pair<std::string, std::string> ends = ConnectOverLoopback();
  EXPECT_EQ(ends.first, def);
  EXPECT_EQ(ends.second, def);
}

TEST_F(TcpTuningTest, AnUnknownAlgorithmKeepsTheDefaultAndTheConnection) {
  ASSERT_TRUE(SetTcpCongestion("nosuchalgo").ok());  // a valid name
  const std::string def = SystemDefault();
  const std::pair<std::string, std::string> ends = ConnectOverLoopback();
  EXPECT_EQ(ends.first, def);  // connected, with the default
  EXPECT_EQ(ends.second, def);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  absl::Status s = SetTcpCongestionOf(fd, "nosuchalgo");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("nosuchalgo"), std::string::npos);
  close(fd);
}

}  // namespace
}  // namespace bertps

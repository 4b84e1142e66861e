#include "common/listener.h"

#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "deploy/probe/probe.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"

namespace bertps {
namespace {

int OpenDescriptors() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n - 3;  // ".", "..", the directory's own
}

// A child process (its own descriptor limit) that opens `n` connections to
// 127.0.0.1:port and holds them until it reads a byte from the returned
// pipe, then closes them and exits. Returns its pid; *release gets the pipe.
pid_t HoldConnections(int port, int n, int* release) {
  int go[2], ready[2];
  EXPECT_EQ(pipe(go), 0);
  EXPECT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(go[1]);
    close(ready[0]);
    const rlimit r{4096, 4096};
    setrlimit(RLIMIT_NOFILE, &r);
    std::vector<int> fds;
    for (int i = 0; i < n; ++i) {
      const int s = socket(AF_INET, SOCK_STREAM, 0);
      if (s < 0) break;
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) break;
      fds.push_back(s);
    }
    char c = 1;
    (void)!write(ready[1], &c, 1);
    (void)!read(go[0], &c, 1);
    for (int s : fds) close(s);
    _exit(0);
  }
  close(go[0]);
  close(ready[1]);
  char c;
  EXPECT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  *release = go[1];
  return pid;
}

void Release(pid_t pid, int release) {
  char c = 1;
  (void)!write(release, &c, 1);
  close(release);
  int status = 0;
  waitpid(pid, &status, 0);
}

absl::Status Health(int port) {
  const std::string target = absl::StrCat("127.0.0.1:", port);
  return CheckHealth(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()), target,
      "", absl::Seconds(3));
}

class ListenerTest : public ::testing::TestWithParam<int> {};

// A server under a descriptor limit that `connections` exhaust: while they
// are held it sheds new ones; once they close it serves again. reserve 0
// drives accept() into EMFILE (the spare descriptor sheds), reserve 8 keeps
// the connections below the limit (shed at once).
TEST_P(ListenerTest, ShedsWhenOutOfDescriptorsAndServesAgain) {
  const int reserve = GetParam();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  grpc::CallbackGenericService generic;  // a server needs some service
  builder.RegisterCallbackGenericService(&generic);
  absl::StatusOr<ServerListener> l = AddServerListener(
      &builder, "127.0.0.1", 0, grpc::InsecureServerCredentials(), reserve);
  ASSERT_TRUE(l.ok()) << l.status();
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  l->Start();
  const int port = l->listener->port();
  ASSERT_GT(port, 0);
  ASSERT_TRUE(Health(port).ok());

  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  const rlimit low{static_cast<rlim_t>(OpenDescriptors() + 40), saved.rlim_max};
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);

  int release = -1;
  const pid_t holder = HoldConnections(port, 150, &release);
  // The held connections reach the server (or are shed) in the background.
  for (int i = 0; i < 100 && l->listener->shed() == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_GT(l->listener->shed(), 0);
  EXPECT_GT(l->listener->accepted(), 0);
  Release(holder, release);

  // Served again once the held connections are gone (the server closes its
  // ends when their peers do).
  absl::Status st;
  for (int i = 0; i < 50; ++i) {
    st = Health(port);
    if (st.ok()) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(st.ok()) << st;
  // And again: the listener is not a one-shot.
  const pid_t again = HoldConnections(port, 150, &release);
  Release(again, release);
  for (int i = 0; i < 50; ++i) {
    st = Health(port);
    if (st.ok()) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(st.ok()) << st;

  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  server->Shutdown();
  l->listener->Stop();
}

INSTANTIATE_TEST_SUITE_P(Reserve, ListenerTest, ::testing::Values(0, 8));

TEST(ListenerTest, DefaultReserve) {
  EXPECT_EQ(Listener::DefaultReserve(64), 16);
  EXPECT_EQ(Listener::DefaultReserve(1024), 64);
  EXPECT_EQ(Listener::DefaultReserve(1 << 20), 1024);
  EXPECT_EQ(Listener::DefaultReserve(-1), 1024);
}

TEST(ListenerTest, RefusesATakenPortNamingIt) {
  absl::StatusOr<std::unique_ptr<Listener>> a = Listener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<std::unique_ptr<Listener>> b =
      Listener::Listen("127.0.0.1", (*a)->port());
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find(absl::StrCat(":", (*a)->port())),
            std::string::npos)
      << b.status();
}

TEST(ListenerTest, WildcardTakesBothFamilies) {
  absl::StatusOr<std::unique_ptr<Listener>> a = Listener::Listen("0.0.0.0", 0);
  ASSERT_TRUE(a.ok()) << a.status();
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>((*a)->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(s);
}

}  // namespace
}  // namespace bertps

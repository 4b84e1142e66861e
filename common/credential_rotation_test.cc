// Rotation without a restart (docs/security.md): a running server takes the
// accepted tokens the file holds now, a running client sends the token its
// file holds now, both on the next call; the watcher re-reads a changed file
// by itself and at once on SIGHUP; a broken file keeps the previous tokens.
// Teams reach the handlers as kTeamProperty. Real TLS servers over
// 127.0.0.1 with certificates made by tools/gen_certs.sh.
#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/audit.h"
#include "common/grpc_status.h"
#include "common/security.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"

namespace bertps {
namespace {

std::string TempDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

std::string Certs(const std::string& name) {
  const std::string dir = TempDir() + "/" + name;
  const std::string cmd =
      absl::StrCat("tools/gen_certs.sh '", dir, "' > /dev/null");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return dir;
}

// Replaces a file the way a Kubernetes Secret update does: a new file
// renamed over the old (a new inode), never a half-written one.
void Replace(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".new";
  std::ofstream(tmp) << text;
  ASSERT_EQ(std::rename(tmp.c_str(), path.c_str()), 0);
}

const std::string kWorker = std::string(40, 'w');
const std::string kAdminOld = std::string(40, 'a');
const std::string kAdminNew = std::string(40, 'b');
const std::string kVision = std::string(40, 'v');

// Records the team of each submit's caller.
class TeamJobs final : public JobService::Service {
 public:
  grpc::Status SubmitJob(grpc::ServerContext* ctx, const SubmitJobRequest*,
                         SubmitJobResponse* resp) override {
    std::vector<grpc::string_ref> team =
        ctx->auth_context()->FindPropertyValues(kTeamProperty);
    absl::MutexLock l(&mu);
    last_team = team.empty() ? "" : std::string(team[0].data(), team[0].size());
    resp->set_id("job-1");
    return grpc::Status::OK;
  }
  absl::Mutex mu;
  std::string last_team ABSL_GUARDED_BY(mu);
};

class RotationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    d_ = Certs("rotation");
    Replace(d_ + "/tokens", absl::StrCat("worker ", kWorker, "\nadmin ",
                                         kAdminOld, "\nadmin ", kVision,
                                         " vision\n"));
    Replace(d_ + "/client.token", kAdminOld + "\n");
    SecurityFiles f;
    f.tls_ca = d_ + "/ca.crt";
    f.tls_cert = d_ + "/server.crt";
    f.tls_key = d_ + "/server.key";
    f.auth_tokens_file = d_ + "/tokens";
    absl::StatusOr<SecurityConfig> c = SecurityConfigFromFiles(f);
    ASSERT_TRUE(c.ok()) << c.status();
    server_config_ = *c;
    ASSERT_TRUE(server_config_.live != nullptr);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", ServerCredentials(server_config_), &port);
    b.RegisterService(&jobs_);
    server_ = b.BuildAndStart();
    ASSERT_TRUE(server_ != nullptr);
    address_ = absl::StrCat("127.0.0.1:", port);
    client_config_ = Client("client.token");
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }
  SecurityConfig Client(const std::string& token_file) {
    SecurityFiles f;
    f.tls_ca = d_ + "/ca.crt";
    f.token_file = d_ + "/" + token_file;
    absl::StatusOr<SecurityConfig> c = SecurityConfigFromFiles(f);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : SecurityConfig();
  }
  absl::Status Submit(JobService::Stub& stub) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    SubmitJobRequest req;
    SubmitJobResponse resp;
    return FromGrpcStatus(stub.SubmitJob(&ctx, req, &resp));
  }
  // Polls until `stub`'s submit has code `want` (the watcher's pace).
  bool Eventually(JobService::Stub& stub, absl::StatusCode want) {
    const absl::Time end = absl::Now() + absl::Seconds(10);
    while (absl::Now() < end) {
      if (Submit(stub).code() == want) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }
  std::string LastTeam() {
    absl::MutexLock l(&jobs_.mu);
    return jobs_.last_team;
  }

  std::string d_;
  SecurityConfig server_config_, client_config_;
  TeamJobs jobs_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

TEST_F(RotationTest, ServerTakesTheNewTokensOnTheNextCall) {
  auto stub = JobService::NewStub(MakeChannel(address_, client_config_));
  ASSERT_TRUE(Submit(*stub).ok());
  // The old admin token is replaced by a new one while the server runs.
  Replace(d_ + "/tokens",
          absl::StrCat("worker ", kWorker, "\nadmin ", kAdminNew, "\n"));
  const int64_t refused = AuditRefusalCounts()[kRefusedUnknownToken];
  ASSERT_TRUE(server_config_.live->Reload().ok());
  EXPECT_EQ(Submit(*stub).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(AuditRefusalCounts()[kRefusedUnknownToken], refused + 1);
  // The same channel, its client's token file rotated too: accepted again.
  Replace(d_ + "/client.token", kAdminNew + "\n");
  ASSERT_TRUE(client_config_.live->Reload().ok());
  EXPECT_EQ(client_config_.live->token(), kAdminNew);
  EXPECT_TRUE(Submit(*stub).ok());
}

TEST_F(RotationTest, ABrokenFileKeepsThePreviousTokens) {
  auto stub = JobService::NewStub(MakeChannel(address_, client_config_));
  Replace(d_ + "/tokens", "admin short\n");
  absl::Status st = server_config_.live->Reload();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("line 1"), std::string::npos) << st;
  EXPECT_TRUE(Submit(*stub).ok());  // the tokens of before still hold
  std::remove((d_ + "/tokens").c_str());
  EXPECT_FALSE(server_config_.live->Reload().ok());
  EXPECT_TRUE(Submit(*stub).ok());
}

TEST_F(RotationTest, TheWatcherRereadsAChangedFile) {
  auto watcher =
      CredentialWatcher::Start(server_config_.live, absl::Milliseconds(100));
  auto stub = JobService::NewStub(MakeChannel(address_, client_config_));
  ASSERT_TRUE(Submit(*stub).ok());
  Replace(d_ + "/tokens", absl::StrCat("admin ", kAdminNew, "\n"));
  EXPECT_TRUE(Eventually(*stub, absl::StatusCode::kUnauthenticated));
}

TEST_F(RotationTest, SighupRereadsAtOnce) {
  // Polling once an hour: only the signal can make it re-read.
  auto watcher = CredentialWatcher::Start(server_config_.live, absl::Hours(1));
  auto stub = JobService::NewStub(MakeChannel(address_, client_config_));
  ASSERT_TRUE(Submit(*stub).ok());
  Replace(d_ + "/tokens", absl::StrCat("admin ", kAdminNew, "\n"));
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_TRUE(Submit(*stub).ok());  // not re-read yet
  ASSERT_EQ(kill(getpid(), SIGHUP), 0);
  EXPECT_TRUE(Eventually(*stub, absl::StatusCode::kUnauthenticated));
  EXPECT_GE(server_config_.live->reloads(), 1);
}

TEST_F(RotationTest, ATeamsAdminTokenNamesItsTeam) {
  Replace(d_ + "/vision.token", kVision + "\n");
  auto vision = JobService::NewStub(MakeChannel(address_, Client("vision.token")));
  ASSERT_TRUE(Submit(*vision).ok());
  EXPECT_EQ(LastTeam(), "vision");
  auto root = JobService::NewStub(MakeChannel(address_, client_config_));
  ASSERT_TRUE(Submit(*root).ok());
  EXPECT_EQ(LastTeam(), "");
}

// The server's certificate is replaced while it runs: a client that checks
// a name only the new certificate holds is refused until the files change,
// then accepted on a new connection, with no restart (--tls_reload_s).
TEST(CertificateRotationTest, ANewCertificateWithoutARestart) {
  const std::string d = Certs("certrot");
  auto copy = [](const std::string& from, const std::string& to) {
    std::ifstream in(from);
    std::string text((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    Replace(to, text);
  };
  copy(d + "/server.crt", d + "/live.crt");
  copy(d + "/server.key", d + "/live.key");
  Replace(d + "/tokens", absl::StrCat("admin ", kAdminOld, "\n"));
  Replace(d + "/client.token", kAdminOld + "\n");
  SecurityFiles sf;
  sf.tls_ca = d + "/ca.crt";
  sf.tls_cert = d + "/live.crt";
  sf.tls_key = d + "/live.key";
  sf.auth_tokens_file = d + "/tokens";
  sf.tls_reload_s = 1;
  absl::StatusOr<SecurityConfig> server_config = SecurityConfigFromFiles(sf);
  ASSERT_TRUE(server_config.ok()) << server_config.status();
  TeamJobs jobs;
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", ServerCredentials(*server_config), &port);
  b.RegisterService(&jobs);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  ASSERT_TRUE(server != nullptr);
  const std::string address = absl::StrCat("127.0.0.1:", port);

  SecurityFiles cf;
  cf.tls_ca = d + "/ca.crt";
  cf.token_file = d + "/client.token";
  cf.tls_server_name = "rotated.bertps.test";
  absl::StatusOr<SecurityConfig> client = SecurityConfigFromFiles(cf);
  ASSERT_TRUE(client.ok()) << client.status();
  auto submit = [&] {
    // A new channel each time: a new handshake.
    grpc::ChannelArguments args;
    args.SetInt("grpc.use_local_subchannel_pool", 1);
    auto stub = JobService::NewStub(MakeChannel(address, *client, args));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(3)));
    SubmitJobRequest req;
    SubmitJobResponse resp;
    return stub->SubmitJob(&ctx, req, &resp).error_code();
  };
  EXPECT_EQ(submit(), grpc::StatusCode::UNAVAILABLE);  // not its name yet
  // A certificate that also names rotated.bertps.test, from the same CA.
  const std::string cmd = absl::StrCat(
      "tools/gen_certs.sh '", d, "' rotated.bertps.test > /dev/null");
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  copy(d + "/server.key", d + "/live.key");
  copy(d + "/server.crt", d + "/live.crt");
  const absl::Time end = absl::Now() + absl::Seconds(20);
  grpc::StatusCode code = grpc::StatusCode::UNAVAILABLE;
  while (absl::Now() < end && code != grpc::StatusCode::OK) {
    absl::SleepFor(absl::Milliseconds(200));
    code = submit();
  }
  EXPECT_EQ(code, grpc::StatusCode::OK);
  server->Shutdown();
}

TEST(TeamTokensTest, ParsingAndValidation) {
  auto t = ParseAuthTokens(absl::StrCat("admin ", kVision, " vision\nadmin ",
                                        kAdminOld, "\nworker ", kWorker, "\n"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)[0].team, "vision");
  EXPECT_EQ((*t)[1].team, "");
  std::string name, team;
  ASSERT_TRUE(LookupToken(*t, kVision, &name, &team).ok());
  EXPECT_EQ(name, "admin#0");
  EXPECT_EQ(team, "vision");
  auto worker_team = ParseAuthTokens(absl::StrCat("worker ", kWorker, " x\n"));
  ASSERT_FALSE(worker_team.ok());
  EXPECT_NE(worker_team.status().message().find("only admin tokens"),
            std::string::npos);
  EXPECT_FALSE(ParseAuthTokens(absl::StrCat("admin ", kVision, " Vision\n")).ok());
  EXPECT_FALSE(ParseAuthTokens(absl::StrCat("admin ", kVision, " -x\n")).ok());
  EXPECT_FALSE(ParseAuthTokens(absl::StrCat("admin ", kVision, " a/b\n")).ok());
  // One token, one role and team.
  auto twice = ParseAuthTokens(absl::StrCat("admin ", kVision, " vision\nadmin ",
                                            kVision, " speech\n"));
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("line 2"), std::string::npos);
  EXPECT_TRUE(ValidTeamName("team-7"));
  EXPECT_FALSE(ValidTeamName(std::string(64, 'a')));
  EXPECT_EQ(TokenFingerprint(kVision).size(), 7u + 12u);
  EXPECT_NE(TokenFingerprint(kVision), TokenFingerprint(kAdminOld));
}

}  // namespace
}  // namespace bertps

int main(int argc, char** argv) {
  // As the daemons do before any thread starts: SIGHUP is for the watcher.
  sigset_t hup;
  sigemptyset(&hup);
  sigaddset(&hup, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &hup, nullptr);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

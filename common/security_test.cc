// SecurityConfig parsing and validation, the token decision, and real gRPC
// servers over 127.0.0.1 with certificates made by tools/gen_certs.sh:
// unauthenticated, wrong-role, plaintext, untrusted and certificate-less
// (mutual TLS) clients are refused before the handler runs.
#include "common/security.h"

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <future>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"

namespace bertps {
namespace {

std::string TempDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

// Runs tools/gen_certs.sh into TEST_TMPDIR/<name> (once per name).
std::string Certs(const std::string& name) {
  const std::string dir = TempDir() + "/" + name;
  const std::string cmd =
      absl::StrCat("tools/gen_certs.sh '", dir, "' bertps-coordinator > /dev/null");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return dir;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

SecurityConfig Load(const SecurityFiles& f) {
  absl::StatusOr<SecurityConfig> c = SecurityConfigFromFiles(f);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : SecurityConfig();
}

// --- Pure parts. ---

TEST(AuthTokensTest, ParsesRolesCommentsAndBlankLines) {
  auto t = ParseAuthTokens(
      "# comment\n\nworker 0123456789abcdef0123\n  admin\tAAAABBBBCCCCDDDD  \n");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].role, AuthRole::kWorker);
  EXPECT_EQ((*t)[0].token, "0123456789abcdef0123");
  EXPECT_EQ((*t)[1].role, AuthRole::kAdmin);
  EXPECT_EQ((*t)[1].token, "AAAABBBBCCCCDDDD");
}

TEST(AuthTokensTest, BadLinesNameTheLine) {
  auto a = ParseAuthTokens("worker 0123456789abcdef\nroot 0123456789abcdef\n");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("line 2"), std::string::npos);
  EXPECT_NE(a.status().message().find("root"), std::string::npos);
  EXPECT_FALSE(ParseAuthTokens("worker\n").ok());
  EXPECT_FALSE(ParseAuthTokens("worker short\n").ok());
  EXPECT_FALSE(ParseAuthTokens("worker a b\n").ok());
  EXPECT_FALSE(ParseAuthTokens("# only comments\n").ok());
  // Longer than gRPC's metadata could carry: refused, naming the limit.
  auto huge = ParseAuthTokens("worker " + std::string(5000, 'x') + "\n");
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("longer than 4096"),
            std::string::npos)
      << huge.status();
  EXPECT_TRUE(ParseAuthTokens("worker " + std::string(4096, 'x')).ok());
}

TEST(TokenTest, ConstantTimeEqualsAndLookup) {
  EXPECT_TRUE(ConstantTimeEquals("abcdef", "abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("abcdef", "abcdeg"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcabc"));  // a prefix repeated
  EXPECT_FALSE(ConstantTimeEquals("abcabc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("", "abc"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  std::vector<AcceptedToken> acc = {{AuthRole::kWorker, "worker-token-0123"},
                                    {AuthRole::kAdmin, "admin-token-45678"}};
  EXPECT_EQ(*LookupToken(acc, "admin-token-45678"), AuthRole::kAdmin);
  EXPECT_EQ(*LookupToken(acc, "worker-token-0123"), AuthRole::kWorker);
  EXPECT_EQ(LookupToken(acc, "worker-token-012").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(LookupToken(acc, "").ok());
}

TEST(MethodRolesTest, DefaultPolicy) {
  const MethodRoles r = DefaultMethodRoles();
  EXPECT_EQ(r.Lookup("/bertps.ParameterServer/Push"), Access::kWorker);
  EXPECT_EQ(r.Lookup("/bertps.ParameterServer/Pull"), Access::kWorker);
  EXPECT_EQ(r.Lookup("/bertps.ClusterService/Heartbeat"), Access::kWorker);
  EXPECT_EQ(r.Lookup("/bertps.JobService/SubmitJob"), Access::kAdmin);
  EXPECT_EQ(r.Lookup("/bertps.JobService/CancelJob"), Access::kAdmin);
  EXPECT_EQ(r.Lookup("/bertps.JobService/GetJob"), Access::kAnyToken);
  EXPECT_EQ(r.Lookup("/bertps.JobService/ListJobs"), Access::kAnyToken);
  EXPECT_EQ(r.Lookup("/bertps.JobService/WatchJob"), Access::kAnyToken);
  EXPECT_EQ(r.Lookup("/grpc.health.v1.Health/Check"), Access::kOpen);
  EXPECT_EQ(r.Lookup("/grpc.health.v1.Health/Watch"), Access::kOpen);
  EXPECT_EQ(r.Lookup("/grpc.reflection.v1alpha.ServerReflection/"
                     "ServerReflectionInfo"),
            Access::kOpen);
  EXPECT_EQ(r.Lookup("/bertps.Unknown/Method"), Access::kAdmin);
  EXPECT_EQ(r.Lookup(""), Access::kAdmin);
}

TEST(AuthorizeTest, Decisions) {
  std::vector<AcceptedToken> acc = {{AuthRole::kWorker, "worker-token-0123"},
                                    {AuthRole::kAdmin, "admin-token-45678"}};
  const MethodRoles r = DefaultMethodRoles();
  auto code = [&](const char* method, const char* auth) {
    return Authorize(acc, r, method, auth).code();
  };
  using C = absl::StatusCode;
  EXPECT_EQ(code("/grpc.health.v1.Health/Check", ""), C::kOk);
  EXPECT_EQ(code("/bertps.ParameterServer/Push", ""), C::kUnauthenticated);
  EXPECT_EQ(code("/bertps.ParameterServer/Push", "worker-token-0123"),
            C::kUnauthenticated);  // not "Bearer ..."
  EXPECT_EQ(code("/bertps.ParameterServer/Push", "Bearer nope-nope-nope-1"),
            C::kUnauthenticated);
  EXPECT_EQ(code("/bertps.ParameterServer/Push", "Bearer worker-token-0123"),
            C::kOk);
  EXPECT_EQ(code("/bertps.ParameterServer/Push", "Bearer admin-token-45678"),
            C::kOk);
  EXPECT_EQ(code("/bertps.JobService/SubmitJob", "Bearer worker-token-0123"),
            C::kPermissionDenied);
  EXPECT_EQ(code("/bertps.JobService/SubmitJob", "Bearer admin-token-45678"),
            C::kOk);
  EXPECT_EQ(code("/bertps.JobService/GetJob", "Bearer worker-token-0123"),
            C::kOk);
  EXPECT_EQ(code("/bertps.JobService/GetJob", ""), C::kUnauthenticated);
}

TEST(SecurityConfigTest, NoFilesIsInsecure) {
  SecurityConfig c = Load({});
  EXPECT_FALSE(c.client_tls());
  EXPECT_FALSE(c.server_tls());
  EXPECT_FALSE(c.auth());
  EXPECT_TRUE(ValidateServing(c).ok());
}

TEST(SecurityConfigTest, ValidationNamesTheFlag) {
  const std::string d = Certs("validate");
  auto err = [](const SecurityFiles& f) {
    absl::StatusOr<SecurityConfig> c = SecurityConfigFromFiles(f);
    EXPECT_FALSE(c.ok());
    return c.ok() ? std::string() : std::string(c.status().message());
  };
  SecurityFiles f;
  f.tls_cert = d + "/server.crt";
  EXPECT_NE(err(f).find("--tls_key"), std::string::npos);
  f = {};
  f.token_file = d + "/worker.token";
  EXPECT_NE(err(f).find("--token_file needs TLS"), std::string::npos);
  f = {};
  f.auth_tokens_file = d + "/auth_tokens";
  EXPECT_NE(err(f).find("--auth_tokens_file needs TLS"), std::string::npos);
  f = {};
  f.tls_cert = d + "/server.crt";
  f.tls_key = d + "/server.key";
  f.tls_require_client_cert = true;
  EXPECT_NE(err(f).find("--tls_require_client_cert"), std::string::npos);
  f = {};
  f.tls_ca = d + "/missing.crt";
  EXPECT_NE(err(f).find("missing.crt"), std::string::npos);
  f = {};
  f.tls_ca = d + "/worker.token";  // not a certificate
  EXPECT_NE(err(f).find("no PEM certificate"), std::string::npos);
  f = {};
  f.tls_cert = d + "/server.crt";
  f.tls_key = d + "/server.crt";
  EXPECT_NE(err(f).find("no PEM private key"), std::string::npos);
  WriteFile(d + "/two.token", "a b\n");
  f = {};
  f.tls_ca = d + "/ca.crt";
  f.token_file = d + "/two.token";
  EXPECT_NE(err(f).find("one token"), std::string::npos);
  WriteFile(d + "/huge.token", std::string(100000, 'x') + "\n");
  f.token_file = d + "/huge.token";
  EXPECT_NE(err(f).find("holds a token of 100000 bytes, longer than 4096"),
            std::string::npos)
      << err(f);
  WriteFile(d + "/bad_tokens", "worker 0123456789abcdef\nguest 0123456789abcdef\n");
  f = {};
  f.tls_cert = d + "/server.crt";
  f.tls_key = d + "/server.key";
  f.auth_tokens_file = d + "/bad_tokens";
  EXPECT_NE(err(f).find("line 2"), std::string::npos);

  // A client that only has the CA cannot serve (it would be plaintext).
  f = {};
  f.tls_ca = d + "/ca.crt";
  SecurityConfig client_only = Load(f);
  EXPECT_TRUE(client_only.client_tls());
  EXPECT_FALSE(ValidateServing(client_only).ok());
}

// --- Real servers. ---

// A JobService that records what got through.
class RecordingJobs final : public JobService::Service {
 public:
  grpc::Status SubmitJob(grpc::ServerContext*, const SubmitJobRequest* req,
                         SubmitJobResponse* resp) override {
    ++submitted;
    resp->set_id("job-" + req->spec().name());
    return grpc::Status::OK;
  }
  grpc::Status GetJob(grpc::ServerContext* ctx, const GetJobRequest* req,
                      JobStatus* resp) override {
    ++reads;
    resp->set_id(req->id());
    // The token never reaches handlers; the role does.
    EXPECT_EQ(ctx->client_metadata().count("authorization"), 0u);
    return grpc::Status::OK;
  }
  grpc::Status CancelJob(grpc::ServerContext*, const CancelJobRequest*,
                         CancelJobResponse*) override {
    ++cancelled;
    return grpc::Status::OK;
  }
  std::atomic<int> submitted{0}, reads{0}, cancelled{0};
};

class SecureServerTest : public ::testing::Test {
 protected:
  void Start(const SecurityConfig& server_config) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", ServerCredentials(server_config), &port);
    b.RegisterService(&jobs_);
    server_ = b.BuildAndStart();
    ASSERT_TRUE(server_ != nullptr);
    ASSERT_GT(port, 0);
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  static SecurityConfig ServerConfig(const std::string& d, bool mtls) {
    SecurityFiles f;
    f.tls_ca = d + "/ca.crt";
    f.tls_cert = d + "/server.crt";
    f.tls_key = d + "/server.key";
    f.tls_require_client_cert = mtls;
    f.auth_tokens_file = d + "/auth_tokens";
    return Load(f);
  }
  static SecurityConfig ClientConfig(const std::string& d,
                                     const std::string& token_file,
                                     bool client_cert = false) {
    SecurityFiles f;
    f.tls_ca = d + "/ca.crt";
    if (!token_file.empty()) f.token_file = d + "/" + token_file;
    if (client_cert) {
      f.tls_cert = d + "/client.crt";
      f.tls_key = d + "/client.key";
    }
    return Load(f);
  }

  absl::Status Submit(const SecurityConfig& c, const std::string& name = "x") {
    auto stub = JobService::NewStub(MakeChannel(address_, c));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    SubmitJobRequest req;
    req.mutable_spec()->set_name(name);
    SubmitJobResponse resp;
    return FromGrpcStatus(stub->SubmitJob(&ctx, req, &resp));
  }
  absl::Status Get(const SecurityConfig& c) {
    auto stub = JobService::NewStub(MakeChannel(address_, c));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    GetJobRequest req;
    req.set_id("job-1");
    JobStatus resp;
    return FromGrpcStatus(stub->GetJob(&ctx, req, &resp));
  }
  // grpc.health.v1.Health/Check with an empty request; the serialized
  // response ("08 01" = SERVING) in *out.
  absl::Status Health(const SecurityConfig& c, std::string* out) {
    grpc::GenericStub stub(MakeChannel(address_, c));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    grpc::Slice empty(std::string(""));
    grpc::ByteBuffer req(&empty, 1), resp;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                   &req, &resp,
                   [&done](grpc::Status s) { done.set_value(std::move(s)); });
    grpc::Status st = done.get_future().get();
    std::vector<grpc::Slice> slices;
    if (st.ok() && resp.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) {
        out->append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    return FromGrpcStatus(st);
  }

  RecordingJobs jobs_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

TEST_F(SecureServerTest, TokensAndRoles) {
  const std::string d = Certs("tls");
  Start(ServerConfig(d, /*mtls=*/false));
  using C = absl::StatusCode;

  // No token: refused before the handler.
  absl::Status st = Submit(ClientConfig(d, ""));
  EXPECT_EQ(st.code(), C::kUnauthenticated) << st;
  EXPECT_EQ(Get(ClientConfig(d, "")).code(), C::kUnauthenticated);
  // A token the server does not know.
  WriteFile(d + "/stranger.token", "0000000000000000000000000000000000000000\n");
  EXPECT_EQ(Submit(ClientConfig(d, "stranger.token")).code(),
            C::kUnauthenticated);
  // A worker token may read but not submit.
  st = Submit(ClientConfig(d, "worker.token"));
  EXPECT_EQ(st.code(), C::kPermissionDenied) << st;
  EXPECT_NE(st.message().find("admin"), std::string::npos) << st;
  EXPECT_TRUE(Get(ClientConfig(d, "worker.token")).ok());
  EXPECT_EQ(jobs_.submitted.load(), 0);  // nothing got through
  EXPECT_EQ(jobs_.reads.load(), 1);
  // Admin does everything.
  EXPECT_TRUE(Submit(ClientConfig(d, "admin.token")).ok());
  EXPECT_TRUE(Get(ClientConfig(d, "admin.token")).ok());
  EXPECT_EQ(jobs_.submitted.load(), 1);
  // Health checks are open.
  std::string health;
  st = Health(ClientConfig(d, ""), &health);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(health, std::string("\x08\x01", 2));
}

TEST_F(SecureServerTest, PlaintextAndUntrustedClientsRefused) {
  const std::string d = Certs("tls");
  Start(ServerConfig(d, /*mtls=*/false));
  // Plaintext (even with a token in hand: it is never sent without TLS).
  SecurityConfig plain;
  plain.token = ClientConfig(d, "admin.token").token;
  absl::Status st = Submit(plain);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  // A client that trusts another CA.
  const std::string other = Certs("other-ca");
  SecurityConfig untrusted = ClientConfig(other, "admin.token");
  untrusted.token = ClientConfig(d, "admin.token").token;
  st = Submit(untrusted);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  // The wrong name checked in the certificate.
  SecurityConfig wrong_name = ClientConfig(d, "admin.token");
  wrong_name.server_name = "not-in-the-certificate";
  EXPECT_EQ(Submit(wrong_name).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(jobs_.submitted.load(), 0);
  // A name from the SAN list.
  SecurityConfig right_name = ClientConfig(d, "admin.token");
  right_name.server_name = "bertps-coordinator";
  EXPECT_TRUE(Submit(right_name).ok());
  EXPECT_EQ(jobs_.submitted.load(), 1);
}

TEST_F(SecureServerTest, MutualTls) {
  const std::string d = Certs("tls");
  Start(ServerConfig(d, /*mtls=*/true));
  // No client certificate.
  absl::Status st = Submit(ClientConfig(d, "admin.token"));
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  // A client certificate from another CA.
  const std::string other = Certs("other-ca");
  SecurityConfig foreign = ClientConfig(d, "admin.token");
  SecurityConfig other_client = ClientConfig(other, "", /*client_cert=*/true);
  foreign.cert_pem = other_client.cert_pem;
  foreign.key_pem = other_client.key_pem;
  st = Submit(foreign);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_EQ(jobs_.submitted.load(), 0);
  // The right certificate, still a token check.
  EXPECT_EQ(Submit(ClientConfig(d, "", true)).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Submit(ClientConfig(d, "worker.token", true)).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(jobs_.submitted.load(), 0);
  st = Submit(ClientConfig(d, "admin.token", true));
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(jobs_.submitted.load(), 1);
  // The server certificate doubles as a client certificate (daemons).
  SecurityConfig daemon = ServerConfig(d, true);
  daemon.token = ClientConfig(d, "admin.token").token;
  EXPECT_TRUE(Submit(daemon).ok());
}

TEST_F(SecureServerTest, NoFlagsStaysPlaintext) {
  Start(SecurityConfig());
  EXPECT_TRUE(Submit(SecurityConfig()).ok());
  EXPECT_EQ(jobs_.submitted.load(), 1);
}

}  // namespace
}  // namespace bertps

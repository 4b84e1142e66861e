// The real services behind TLS and bearer tokens (common/security.h), over
// 127.0.0.1 with certificates made by tools/gen_certs.sh: a parameter-server
// shard (ShardServer), pipeline stages (StageService) and the coordinator
// (JobService + ClusterService).
// Refused calls (no token, unknown token, wrong role, plaintext, mutual TLS
// without a client certificate) change nothing: the very same push that is
// applied with a worker token leaves the shard at version 0 without one, and
// no job is created or cancelled by a worker token.
#include <cstdlib>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/io/bert_example.h"
#include "common/io/tfrecord.h"
#include "common/model/params.h"
#include "common/security.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "common/cluster/member.h"
#include "server/coordinator/service.h"
#include "server/ps/server.h"
#include "worker/pipeline_stage.h"
#include "common/ps/ps_client.h"

namespace bertps {
namespace {

std::string Certs() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/certs");
  const std::string cmd =
      absl::StrCat("tools/gen_certs.sh '", dir, "' > /dev/null");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return dir;
}

SecurityConfig Load(const SecurityFiles& f) {
  absl::StatusOr<SecurityConfig> c = SecurityConfigFromFiles(f);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : SecurityConfig();
}

class SecureServicesTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = Certs(); }

  SecurityConfig Server(bool mtls = false) const {
    SecurityFiles f;
    f.tls_ca = dir_ + "/ca.crt";
    f.tls_cert = dir_ + "/server.crt";
    f.tls_key = dir_ + "/server.key";
    f.tls_require_client_cert = mtls;
    f.auth_tokens_file = dir_ + "/auth_tokens";
    return Load(f);
  }
  // A client with TLS, the given token file (none if empty) and, with
  // `cert`, the client certificate.
  SecurityConfig Client(const std::string& token, bool cert = false) const {
    SecurityFiles f;
    f.tls_ca = dir_ + "/ca.crt";
    if (!token.empty()) f.token_file = dir_ + "/" + token;
    if (cert) {
      f.tls_cert = dir_ + "/client.crt";
      f.tls_key = dir_ + "/client.key";
    }
    return Load(f);
  }

  std::string dir_;
};

// --- Parameter-server shard. ---

BertConfig Small() {
  BertConfig c;
  c.vocab_size = 30;
  c.hidden_size = 8;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.intermediate_size = 16;
  c.max_position_embeddings = 8;
  return c;
}

// One complete push of step 0 by worker 0: the header, then every tensor of
// the model (a single shard owns all of it) as F32 zeros.
std::vector<PushRequest> WholePush(const ps::ShardOptions& o) {
  std::vector<PushRequest> msgs(1);
  msgs[0].mutable_header()->set_worker(0);
  msgs[0].mutable_header()->set_step(0);
  msgs[0].mutable_header()->set_examples(1);
  const ParamLayout layout = ParamLayout::ForBert(o.config, o.task);
  for (const ParamSpec& t : layout.tensors()) {
    PushRequest m;
    m.mutable_chunk()->set_name(t.name);
    m.mutable_chunk()->set_dtype(F32);
    m.mutable_chunk()->set_offset(0);
    m.mutable_chunk()->set_data(std::string(sizeof(float) * t.size, '\0'));
    msgs.push_back(std::move(m));
  }
  return msgs;
}

absl::Status Push(const std::string& address, const SecurityConfig& c,
                  const std::vector<PushRequest>& msgs) {
  auto stub = ParameterServer::NewStub(
      MakeChannel(address, c, ps::ClientChannelArguments()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  PushResponse resp;
  auto w = stub->Push(&ctx, &resp);
  for (const PushRequest& m : msgs) {
    if (!w->Write(m)) break;
  }
  w->WritesDone();
  return FromGrpcStatus(w->Finish());
}

absl::Status Describe(const std::string& address, const SecurityConfig& c) {
  auto stub = ParameterServer::NewStub(MakeChannel(address, c));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  DescribeResponse resp;
  return FromGrpcStatus(stub->Describe(&ctx, DescribeRequest(), &resp));
}

TEST_F(SecureServicesTest, ShardRefusesPushesWithoutAWorkerToken) {
  ps::ShardOptions o;
  o.config = Small();
  o.wait_timeout = absl::Seconds(5);
  auto server = ps::ShardServer::Start(o, "127.0.0.1:0", {}, Server());
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string addr = (*server)->address();
  const std::vector<PushRequest> push = WholePush(o);
  ps::ShardCore* shard = (*server)->core();
  using C = absl::StatusCode;

  absl::Status st = Push(addr, Client(""), push);
  EXPECT_EQ(st.code(), C::kUnauthenticated) << st;
  std::ofstream(dir_ + "/stranger.token") << std::string(64, '7') << "\n";
  st = Push(addr, Client("stranger.token"), push);
  EXPECT_EQ(st.code(), C::kUnauthenticated) << st;
  SecurityConfig plaintext;  // and never a token in plaintext
  st = Push(addr, plaintext, push);
  EXPECT_EQ(st.code(), C::kUnavailable) << st;
  EXPECT_EQ(Describe(addr, Client("")).code(), C::kUnauthenticated);
  // Nothing reached the shard.
  StatsResponse stats = shard->Stats();
  EXPECT_EQ(stats.version(), 0);
  EXPECT_EQ(stats.pushes_applied(), 0);
  EXPECT_EQ(stats.pushes_rejected(), 0);
  EXPECT_EQ(stats.bytes_in(), 0);

  // The same push with a worker token is applied.
  st = Push(addr, Client("worker.token"), push);
  ASSERT_TRUE(st.ok()) << st;
  stats = shard->Stats();
  EXPECT_EQ(stats.version(), 1);
  EXPECT_EQ(stats.pushes_applied(), 1);

  // The worker's own client: refused without a token, fine with one.
  PsClientOptions po;
  po.addresses = {addr};
  po.connect_timeout = absl::Seconds(5);
  po.security = Client("");
  auto refused = PsClient::Connect(po, o.config, o.task);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), C::kUnauthenticated) << refused.status();
  EXPECT_NE(refused.status().message().find(addr), std::string::npos);
  po.security = Client("worker.token");
  auto client = PsClient::Connect(po, o.config, o.task);
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<float> params((*client)->layout().total_size());
  auto v = (*client)->Pull(0, 1, 1, params.data());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 1);
}

TEST_F(SecureServicesTest, ShardWithMutualTls) {
  ps::ShardOptions o;
  o.config = Small();
  o.wait_timeout = absl::Seconds(5);
  auto server = ps::ShardServer::Start(o, "127.0.0.1:0", {}, Server(true));
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string addr = (*server)->address();
  const std::vector<PushRequest> push = WholePush(o);
  absl::Status st = Push(addr, Client("worker.token"), push);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_EQ((*server)->core()->Stats().pushes_applied(), 0);
  st = Push(addr, Client("worker.token", /*cert=*/true), push);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ((*server)->core()->Stats().pushes_applied(), 1);
}

// --- Pipeline stages. ---

// Security of a stage daemon: it serves StageService over TLS (the server
// certificate) and calls the shards and its neighbours with a worker token.
SecurityConfig StageSecurity(const std::string& dir) {
  SecurityFiles f;
  f.tls_ca = dir + "/ca.crt";
  f.tls_cert = dir + "/server.crt";
  f.tls_key = dir + "/server.key";
  f.auth_tokens_file = dir + "/auth_tokens";
  f.token_file = dir + "/worker.token";
  return Load(f);
}

absl::Status Ping(const std::string& address, const SecurityConfig& c,
                  StagePingResponse* resp) {
  auto stub = StageService::NewStub(MakeChannel(address, c));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  return FromGrpcStatus(stub->Ping(&ctx, StagePingRequest(), resp));
}

absl::Status AbortStage(const std::string& address, const SecurityConfig& c) {
  auto stub = StageService::NewStub(MakeChannel(address, c));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  StageAbortRequest req;
  req.set_from_stage(0);
  req.set_reason("an intruder");
  StageAbortResponse resp;
  return FromGrpcStatus(stub->Abort(&ctx, req, &resp));
}

// Two stages and a shard, all over TLS with tokens, run a 3-step pipeline
// job to the end; meanwhile Ping and Abort calls to a stage without a token,
// with an unknown token or in plaintext are refused and abort nothing.
TEST_F(SecureServicesTest, PipelineStagesOverTlsWithTokens) {
  const std::string data =
      absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR")
                                              : "/tmp",
                   "/stage-data.tfrecord");
  {
    auto w = io::TFRecordWriter::Open(data);
    ASSERT_TRUE(w.ok()) << w.status();
    for (int i = 0; i < 16; ++i) {
      io::PretrainExample e;
      for (int j = 0; j < 8; ++j) {
        e.input_ids.push_back(j == 0 ? 1 : 5 + (i + j) % 20);
        e.input_mask.push_back(1);
        e.segment_ids.push_back(j < 4 ? 0 : 1);
      }
      e.masked_lm_positions = {2, 5};
      e.masked_lm_ids = {7, 9};
      e.masked_lm_weights = {1.0f, 1.0f};
      e.next_sentence_label = i % 2;
      ASSERT_TRUE((*w)->Write(io::EncodePretrainExample(e)).ok());
    }
    ASSERT_TRUE((*w)->Close().ok());
  }
  const SecurityConfig sec = StageSecurity(dir_);
  BertConfig config = Small();
  config.num_hidden_layers = 2;  // one per stage
  // 1 replica x 2 stages, 3 steps of 4 examples: one plan for all.
  JobSpec job;
  job.set_task(PRETRAIN);
  job.set_num_workers(1);
  job.mutable_pipeline()->set_stages(2);
  job.set_batch_size(4);
  job.set_steps(3);
  job.mutable_optimizer()->set_learning_rate(1e-4);
  ps::ShardOptions so;
  so.config = config;
  so.job_plan = PlanOf(job);
  so.optimizer.total_steps = 3;
  so.wait_timeout = absl::Seconds(20);
  auto shard = ps::ShardServer::Start(so, "127.0.0.1:0", {}, Server());
  ASSERT_TRUE(shard.ok()) << shard.status();
  std::vector<std::unique_ptr<PipelineStage>> stages;
  std::vector<std::string> peers;
  for (int s = 0; s < 2; ++s) {
    PipelineStageOptions o;
    o.ps.addresses = {(*shard)->address()};
    o.ps.rpc_timeout = absl::Seconds(20);
    o.ps.security = sec;
    o.config = config;
    o.plan = PlanOf(job);
    o.stage = s;
    o.micro_batches = 2;
    o.data = {data};
    auto p = PipelineStage::Create(o);
    ASSERT_TRUE(p.ok()) << p.status();
    peers.push_back((*p)->address());
    stages.push_back(std::move(*p));
  }
  for (auto& s : stages) s->SetPeers(peers);

  using C = absl::StatusCode;
  StagePingResponse pong;
  std::ofstream(dir_ + "/stranger.token") << std::string(64, '7') << "\n";
  SecurityConfig plaintext;
  for (const std::string& addr : peers) {
    EXPECT_EQ(Ping(addr, Client(""), &pong).code(), C::kUnauthenticated);
    EXPECT_EQ(Ping(addr, Client("stranger.token"), &pong).code(),
              C::kUnauthenticated);
    EXPECT_EQ(Ping(addr, plaintext, &pong).code(), C::kUnavailable);
    EXPECT_EQ(AbortStage(addr, Client("")).code(), C::kUnauthenticated);
    EXPECT_EQ(AbortStage(addr, Client("stranger.token")).code(),
              C::kUnauthenticated);
    EXPECT_EQ(AbortStage(addr, plaintext).code(), C::kUnavailable);
  }
  ASSERT_TRUE(Ping(peers[1], Client("worker.token"), &pong).ok());
  EXPECT_EQ(pong.stage(), 1);

  std::vector<absl::Status> st(2);
  std::vector<std::thread> threads;
  for (int s = 0; s < 2; ++s) {
    threads.emplace_back([&, s] { st[s] = stages[s]->Run(); });
  }
  for (auto& t : threads) t.join();
  for (int s = 0; s < 2; ++s) EXPECT_TRUE(st[s].ok()) << "stage " << s << ": " << st[s];
  EXPECT_EQ((*shard)->core()->Stats().version(), 3);
}

// --- Coordinator. ---

class SecureCoordinatorTest : public SecureServicesTest {
 protected:
  void SetUp() override {
    SecureServicesTest::SetUp();
    CoordinatorOptions co;
    co.count_examples = [](const JobSpec&) -> absl::StatusOr<int64_t> {
      return 100;
    };
    coordinator_ = std::make_unique<Coordinator>(co);
    jobs_ = std::make_unique<JobServiceImpl>(coordinator_.get());
    cluster_ = std::make_unique<ClusterServiceImpl>(coordinator_.get());
    grpc::ServerBuilder b;
    int port = 0;
    server_config_ = Server();
    b.AddListeningPort("127.0.0.1:0", ServerCredentials(server_config_), &port);
    b.RegisterService(jobs_.get());
    b.RegisterService(cluster_.get());
    server_ = b.BuildAndStart();
    ASSERT_TRUE(server_ != nullptr);
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  void TearDown() override { server_->Shutdown(); }

  std::unique_ptr<JobService::Stub> Jobs(const SecurityConfig& c) {
    return JobService::NewStub(MakeChannel(address_, c));
  }
  static void Deadline(grpc::ClientContext* ctx) {
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  }
  absl::StatusOr<std::string> Submit(const SecurityConfig& c) {
    SubmitJobRequest req;
    req.mutable_spec()->set_task(PRETRAIN);
    req.mutable_spec()->add_data("data/*.tfrecord");
    req.mutable_spec()->set_batch_size(10);
    req.mutable_spec()->set_steps(5);
    req.mutable_spec()->set_num_ps_shards(1);
    req.mutable_spec()->set_num_workers(1);
    grpc::ClientContext ctx;
    Deadline(&ctx);
    SubmitJobResponse resp;
    absl::Status st = FromGrpcStatus(Jobs(c)->SubmitJob(&ctx, req, &resp));
    if (!st.ok()) return st;
    return resp.id();
  }
  absl::Status Cancel(const SecurityConfig& c, const std::string& id) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    CancelJobRequest req;
    req.set_id(id);
    CancelJobResponse resp;
    return FromGrpcStatus(Jobs(c)->CancelJob(&ctx, req, &resp));
  }
  absl::Status List(const SecurityConfig& c) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    ListJobsResponse resp;
    return FromGrpcStatus(Jobs(c)->ListJobs(&ctx, ListJobsRequest(), &resp));
  }

  // Adds two teams' admin tokens to the coordinator's running token list
  // (as an operator would: the file replaced, then SIGHUP or the watcher);
  // returns their client configs.
  std::pair<SecurityConfig, SecurityConfig> AddTeams() {
    const std::string tokens = dir_ + "/auth_tokens";
    std::ifstream in(tokens);
    std::string text((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    const std::string vision(48, 'v'), speech(48, 's');
    const std::string teams = dir_ + "/team_tokens";
    std::ofstream(teams + ".new") << text << "admin " << vision << " vision\n"
                                  << "admin " << speech << " speech\n";
    std::ofstream(dir_ + "/vision.token") << vision << "\n";
    std::ofstream(dir_ + "/speech.token") << speech << "\n";
    // The original list is kept for the other tests: the live list reads
    // the copy through a renamed-over file at the same path.
    std::rename(tokens.c_str(), (tokens + ".orig").c_str());
    std::rename((teams + ".new").c_str(), tokens.c_str());
    EXPECT_TRUE(server_config_.live->Reload().ok());
    std::rename((tokens + ".orig").c_str(), tokens.c_str());
    return {Client("vision.token"), Client("speech.token")};
  }

  SecurityConfig server_config_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<JobServiceImpl> jobs_;
  std::unique_ptr<ClusterServiceImpl> cluster_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

TEST_F(SecureCoordinatorTest, RolesOnTheJobApi) {
  using C = absl::StatusCode;
  EXPECT_EQ(Submit(Client("")).status().code(), C::kUnauthenticated);
  absl::StatusOr<std::string> denied = Submit(Client("worker.token"));
  EXPECT_EQ(denied.status().code(), C::kPermissionDenied) << denied.status();
  SecurityConfig plaintext;
  EXPECT_EQ(Submit(plaintext).status().code(), C::kUnavailable);
  EXPECT_TRUE(coordinator_->List().empty());  // no job was created

  absl::StatusOr<std::string> id = Submit(Client("admin.token"));
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_EQ(coordinator_->List().size(), 1u);
  EXPECT_TRUE(List(Client("admin.token")).ok());
  // A worker token reads only its member's job (it presents no member).
  EXPECT_EQ(List(Client("worker.token")).code(), C::kPermissionDenied);
  EXPECT_EQ(List(Client("")).code(), C::kUnauthenticated);

  EXPECT_EQ(Cancel(Client("worker.token"), *id).code(), C::kPermissionDenied);
  EXPECT_EQ(Cancel(Client(""), *id).code(), C::kUnauthenticated);
  EXPECT_NE(coordinator_->Get(*id)->state(), CANCELLED);
  EXPECT_TRUE(Cancel(Client("admin.token"), *id).ok());
  EXPECT_EQ(coordinator_->Get(*id)->state(), CANCELLED);
}

// Teams over the real JobService: each team's admin token submits jobs its
// team owns, lists and cancels only those (another team's job is NOT_FOUND,
// as one that does not exist); a cluster admin sees and cancels all; only a
// cluster admin drains members. The team tokens were added to the running
// server's list (rotation).
TEST_F(SecureCoordinatorTest, TeamsOverTheJobApi) {
  using C = absl::StatusCode;
  auto [vision, speech] = AddTeams();
  absl::StatusOr<std::string> v = Submit(vision);
  ASSERT_TRUE(v.ok()) << v.status();
  absl::StatusOr<std::string> s = Submit(speech);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(coordinator_->Get(*v)->owner(), "vision");
  EXPECT_EQ(coordinator_->Get(*s)->owner(), "speech");

  auto list = [&](const SecurityConfig& c) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    ListJobsResponse resp;
    EXPECT_TRUE(Jobs(c)->ListJobs(&ctx, ListJobsRequest(), &resp).ok());
    std::vector<std::string> ids;
    for (const JobStatus& j : resp.jobs()) ids.push_back(j.id());
    return ids;
  };
  EXPECT_EQ(list(vision), std::vector<std::string>{*v});
  EXPECT_EQ(list(speech), std::vector<std::string>{*s});
  EXPECT_EQ(list(Client("admin.token")).size(), 2u);

  grpc::ClientContext ctx;
  Deadline(&ctx);
  GetJobRequest get;
  get.set_id(*s);
  JobStatus status;
  EXPECT_EQ(Jobs(vision)->GetJob(&ctx, get, &status).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Cancel(vision, *s).code(), C::kNotFound);
  EXPECT_NE(coordinator_->Get(*s)->state(), CANCELLED);
  EXPECT_TRUE(Cancel(vision, *v).ok());
  EXPECT_TRUE(Cancel(Client("admin.token"), *s).ok());
  EXPECT_EQ(coordinator_->Get(*s)->state(), CANCELLED);

  grpc::ClientContext drain_ctx;
  Deadline(&drain_ctx);
  DrainMemberRequest drain;
  drain.set_member_id("m-1");
  DrainMemberResponse drained;
  EXPECT_EQ(Jobs(vision)->DrainMember(&drain_ctx, drain, &drained).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(SecureCoordinatorTest, MembersNeedAWorkerToken) {
  MemberClient stranger(address_, TRAIN, "", Client(""), absl::Seconds(5));
  absl::StatusOr<Assignment> a = stranger.Heartbeat("", {}, false, "");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kUnauthenticated)
      << a.status();
  EXPECT_NE(a.status().message().find(address_), std::string::npos);
  MemberClient worker(address_, TRAIN, "", Client("worker.token"),
                      absl::Seconds(5));
  a = worker.Heartbeat("", {}, false, "");
  EXPECT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(worker.member_id().empty());
}

}  // namespace
}  // namespace bertps

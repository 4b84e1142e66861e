// A shard of a coordinator's job serves only that job's members: every call
// names the job, its incarnation and its key (common/ps/wire.h); peer calls
// also the shards' key; checkpoints go only into the job's checkpoint.dir
// and restores read only its manifests. Each refused call changes nothing
// (no file written, the version and the weights as they were). Real gRPC
// shards on 127.0.0.1.
#include <sys/stat.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/ps/ps_client.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/ps/server.h"
#include "server/ps/service.h"
#include "server/ps/shard_test_util.h"

namespace bertps {
namespace ps {
namespace {

using grpc::StatusCode;

std::string TmpDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

struct Call {
  std::string job = "job-7";
  std::string incarnation = "3";
  std::string job_key = "k-job";
  std::string shard_key;  // peer calls only
  void AddTo(grpc::ClientContext* ctx) const {
    if (!job.empty()) ctx->AddMetadata(kJobMetadata, job);
    if (!incarnation.empty()) ctx->AddMetadata(kIncarnationMetadata, incarnation);
    if (!job_key.empty()) ctx->AddMetadata(kJobKeyMetadata, job_key);
    if (!shard_key.empty()) ctx->AddMetadata(kShardKeyMetadata, shard_key);
  }
};

class ShardScopeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TmpDir() + "/scope-" + std::to_string(::testing::UnitTest::GetInstance()
                                                    ->random_seed()) +
           "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ShardOptions o;
    o.config = Small();
    o.wait_timeout = absl::Seconds(5);
    o.job_id = "job-7";
    o.incarnation = 3;
    o.job_key = "k-job";
    o.shard_key = "k-shards";
    o.checkpoint_dir = dir_ + "/ckpt";
    o.restore_manifest = dir_ + "/phase1/ckpt-10/manifest.json";
    options_ = o;
    server_ = *ShardServer::Start(o, "127.0.0.1:0", {});
    stub_ = ParameterServer::NewStub(grpc::CreateCustomChannel(
        server_->address(), grpc::InsecureChannelCredentials(),
        ClientChannelArguments()));
  }

  grpc::Status Stats(const Call& c, StatsResponse* resp = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    c.AddTo(&ctx);
    StatsResponse r;
    grpc::Status st = stub_->Stats(&ctx, StatsRequest(), &r);
    if (resp) *resp = r;
    return st;
  }
  grpc::Status Checkpoint(const Call& c, const std::string& dir) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    c.AddTo(&ctx);
    CheckpointRequest req;
    req.set_dir(dir);
    CheckpointResponse resp;
    return stub_->Checkpoint(&ctx, req, &resp);
  }
  grpc::Status Restore(const Call& c, const std::string& manifest) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    c.AddTo(&ctx);
    RestoreRequest req;
    req.set_manifest(manifest);
    RestoreResponse resp;
    return stub_->Restore(&ctx, req, &resp);
  }
  grpc::Status Replicate(const Call& c) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    c.AddTo(&ctx);
    ReplicateResponse resp;
    auto w = stub_->Replicate(&ctx, &resp);
    ReplicateRequest m;
    m.mutable_step()->set_incarnation(3);
    m.mutable_step()->set_term(99);
    m.mutable_step()->set_kind(ReplicaStep::COMMIT);
    w->Write(m);
    w->WritesDone();
    return w->Finish();
  }
  grpc::Status Snapshot(const Call& c) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    c.AddTo(&ctx);
    InstallSnapshotResponse resp;
    auto w = stub_->InstallSnapshot(&ctx, &resp);
    SnapshotChunk m;
    m.mutable_header()->set_incarnation(3);
    m.mutable_header()->set_term(99);
    w->Write(m);
    w->WritesDone();
    return w->Finish();
  }
  grpc::Status Exchange(const Call& c) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    c.AddTo(&ctx);
    ExchangeRequest req;
    req.set_incarnation(3);
    req.set_from_shard(1);
    ExchangeResponse resp;
    return stub_->Exchange(&ctx, req, &resp);
  }

  std::string dir_;
  ShardOptions options_;
  std::unique_ptr<ShardServer> server_;
  std::unique_ptr<ParameterServer::Stub> stub_;
};

// A call must name the job, its incarnation and its key.
TEST_F(ShardScopeTest, CallsNeedTheJobItsIncarnationAndItsKey) {
  EXPECT_TRUE(Stats(Call()).ok());
  Call other_job;
  other_job.job = "job-8";
  grpc::Status st = Stats(other_job);
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_FALSE(absl::StrContains(st.error_message(), "job-7"));
  Call no_job;
  no_job.job.clear();
  EXPECT_EQ(Stats(no_job).error_code(), StatusCode::PERMISSION_DENIED);
  Call no_incarnation;
  no_incarnation.incarnation.clear();
  EXPECT_EQ(Stats(no_incarnation).error_code(), StatusCode::PERMISSION_DENIED);
  // An earlier start of the job is told to start again (ABORTED), whatever
  // its key, as before.
  Call earlier;
  earlier.incarnation = "2";
  earlier.job_key = "k-old";
  EXPECT_EQ(Stats(earlier).error_code(), StatusCode::ABORTED);
  Call no_key;
  no_key.job_key.clear();
  EXPECT_EQ(Stats(no_key).error_code(), StatusCode::PERMISSION_DENIED);
  Call wrong_key;
  wrong_key.job_key = "k-jot";
  EXPECT_EQ(Stats(wrong_key).error_code(), StatusCode::PERMISSION_DENIED);
  // The client of the job's members names all three.
  PsClientOptions o;
  o.addresses = {server_->address()};
  o.incarnation = 3;
  o.job_id = "job-7";
  o.job_key = "k-job";
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      PsClient::Connect(o, Small(), BertTask::kPretrain);
  ASSERT_TRUE(client.ok()) << client.status();
  o.job_key = "k-other";
  client = PsClient::Connect(o, Small(), BertTask::kPretrain);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kPermissionDenied)
      << client.status();
}

// Exchange, Replicate and InstallSnapshot need the shards' key too: a
// member of the job (with the job key) cannot drive a backup.
TEST_F(ShardScopeTest, PeerCallsNeedTheShardsKey) {
  StatsResponse before;
  ASSERT_TRUE(Stats(Call(), &before).ok());
  for (const std::string& key : {std::string(), std::string("k-guess")}) {
    Call member;
    member.shard_key = key;
    grpc::Status st = Replicate(member);
    EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
    st = Snapshot(member);
    EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
    st = Exchange(member);
    EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
  }
  StatsResponse after;
  ASSERT_TRUE(Stats(Call(), &after).ok());
  EXPECT_EQ(after.version(), before.version());
  EXPECT_EQ(after.term(), before.term());
  // With the shards' key the call reaches the shard, which judges it on
  // its own terms (this primary takes no replicated steps).
  Call peer;
  peer.shard_key = "k-shards";
  grpc::Status st = Replicate(peer);
  EXPECT_NE(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
}

// Checkpoints go only into the job's checkpoint.dir; restores read only
// its checkpoint.restore or a manifest under its checkpoint.dir, and the
// refusal does not say whether the file exists.
TEST_F(ShardScopeTest, CheckpointAndRestoreOnlyInTheJobsDirectory) {
  const std::string outside = dir_ + "/elsewhere";
  grpc::Status st = Checkpoint(Call(), outside);
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
  st = Checkpoint(Call(), dir_ + "/ckpt/../elsewhere");
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED);
  st = Checkpoint(Call(), dir_ + "/ckpt/sub");
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED);
  std::string nul = dir_ + "/ckpt";
  nul.push_back('\0');
  nul += "/x";
  st = Checkpoint(Call(), nul);
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_FALSE(Exists(outside));
  EXPECT_FALSE(Exists(dir_ + "/ckpt"));
  // Its own directory: written.
  EXPECT_TRUE(Checkpoint(Call(), dir_ + "/ckpt").ok());
  EXPECT_TRUE(Exists(dir_ + "/ckpt"));

  grpc::Status exists = Restore(Call(), "/etc/hostname");
  grpc::Status missing = Restore(Call(), "/etc/no-such-file-here");
  EXPECT_EQ(exists.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(missing.error_code(), StatusCode::PERMISSION_DENIED);
  // The same words for a file that exists and one that does not, bar the
  // path itself.
  std::string a = exists.error_message(), b = missing.error_message();
  a.replace(a.find("/etc/hostname"), 13, "X");
  b.replace(b.find("/etc/no-such-file-here"), 22, "X");
  EXPECT_EQ(a, b);
  st = Restore(Call(), dir_ + "/ckpt/../../etc/manifest.json");
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED);
  // The job's own: reaches the reader (which finds no such manifest).
  st = Restore(Call(), dir_ + "/phase1/ckpt-10/manifest.json");
  EXPECT_NE(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
  st = Restore(Call(), dir_ + "/ckpt/ckpt-1/manifest.json");
  EXPECT_NE(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
}

// A job whose checkpoint.dir is relative (a coordinator started with a
// relative --jobs_root): the shard compares the paths lexically, as its
// members name them, and still refuses a way out.
TEST(ShardScopeRelative, RelativeDirectoriesAreComparedLexically) {
  ShardOptions o;
  o.config = Small();
  o.job_id = "job-7";
  o.checkpoint_dir = "jobs/job-7/ckpt";
  o.restore_manifest = "jobs/job-6/ckpt/ckpt-10/manifest.json";
  EXPECT_TRUE(CheckCheckpointDir(o, "jobs/job-7/ckpt").ok());
  EXPECT_TRUE(CheckCheckpointDir(o, "./jobs//job-7/ckpt/").ok());
  EXPECT_TRUE(CheckCheckpointDir(o, "jobs/x/../job-7/ckpt").ok());
  EXPECT_FALSE(CheckCheckpointDir(o, "jobs/job-7/ckpt/../../job-8/ckpt").ok());
  EXPECT_FALSE(CheckCheckpointDir(o, "../jobs/job-7/ckpt").ok());
  EXPECT_FALSE(CheckCheckpointDir(o, "/jobs/job-7/ckpt").ok());
  EXPECT_FALSE(CheckCheckpointDir(o, "jobs/job-7").ok());
  EXPECT_TRUE(
      CheckRestoreManifest(o, "jobs/job-7/ckpt/ckpt-3/manifest.json").ok());
  EXPECT_TRUE(
      CheckRestoreManifest(o, "./jobs/job-6/ckpt/ckpt-10/manifest.json").ok());
  EXPECT_FALSE(
      CheckRestoreManifest(o, "jobs/job-7/ckpt/../../../etc/manifest.json")
          .ok());
  EXPECT_FALSE(CheckRestoreManifest(o, "jobs/job-7/ckpt").ok());
  EXPECT_FALSE(CheckRestoreManifest(o, "/etc/hostname").ok());
}

// A shard run on its own (no coordinator's job) takes calls as before.
TEST(ShardScopeAlone, AShardRunOnItsOwnTakesAnyCall) {
  ShardOptions o;
  o.config = Small();
  EXPECT_TRUE(CheckCheckpointDir(o, "/anywhere").ok());
  EXPECT_TRUE(CheckRestoreManifest(o, "/anywhere/manifest.json").ok());
  auto server = *ShardServer::Start(o, "127.0.0.1:0", {});
  auto stub = ParameterServer::NewStub(grpc::CreateCustomChannel(
      server->address(), grpc::InsecureChannelCredentials(),
      ClientChannelArguments()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  StatsResponse resp;
  EXPECT_TRUE(stub->Stats(&ctx, StatsRequest(), &resp).ok());
}

}  // namespace
}  // namespace ps
}  // namespace bertps

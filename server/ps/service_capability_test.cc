// A shard of a coordinator's job that was given the coordinator's key serves
// a call only with a capability signed by that key for this job and
// incarnation (common/capability.h): pushes and announces only for the
// slots it names, Exchange only with a shard's, Replicate and
// InstallSnapshot only with the primary's of this index at its term or
// later, Checkpoint only into its checkpoint directory; an expired, revoked,
// forged or another job's capability is refused and changes nothing. Real
// gRPC shards on 127.0.0.1; capabilities made with a test key.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/audit.h"
#include "common/capability.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/ps/server.h"
#include "server/ps/shard_test_util.h"

namespace bertps {
namespace ps {
namespace {

using grpc::StatusCode;

std::string TmpDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

class ShardCapabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    signer_ = *CapabilitySigner::Generate();
    dir_ = TmpDir() + "/cap-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ShardOptions o = TestShardOptions(ASP, 2, 1, 0);
    o.job_id = "job-7";
    o.incarnation = 3;
    o.job_key = "k-job";
    o.shard_key = "k-shards";
    o.checkpoint_dir = dir_ + "/ckpt";
    server_ = *ShardServer::Start(o, "127.0.0.1:0", {});
    ASSERT_TRUE(server_->capability_verifier().AddKey(signer_->public_key()).ok());
    stub_ = ParameterServer::NewStub(grpc::CreateCustomChannel(
        server_->address(), grpc::InsecureChannelCredentials(),
        ClientChannelArguments()));
  }

  Capability Trainer(std::vector<int> slots) const {
    Capability c;
    c.set_member_id("m-trainer");
    c.set_job_id("job-7");
    c.set_incarnation(3);
    c.set_kind(Capability::TRAINER);
    for (int s : slots) c.add_slots(s);
    c.set_checkpoint_dir(dir_ + "/ckpt");
    const absl::Time now = absl::Now();
    c.set_issued_ms(absl::ToUnixMillis(now));
    c.set_expires_ms(absl::ToUnixMillis(now + kCapabilityLifetime));
    return c;
  }
  Capability Shard(bool primary, int index, int64_t term) const {
    Capability c = Trainer({});
    c.set_member_id("m-shard");
    c.set_kind(Capability::SHARD);
    c.set_primary(primary);
    c.set_shard_index(index);
    c.set_shard_term(term);
    return c;
  }
  void Scope(grpc::ClientContext* ctx, const std::string& cap,
             bool peer = false) const {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    ctx->AddMetadata(kJobMetadata, "job-7");
    ctx->AddMetadata(kIncarnationMetadata, "3");
    ctx->AddMetadata(kJobKeyMetadata, "k-job");
    if (peer) ctx->AddMetadata(kShardKeyMetadata, "k-shards");
    if (!cap.empty()) ctx->AddMetadata(kCapabilityMetadata, cap);
  }
  grpc::Status Stats(const std::string& cap) {
    grpc::ClientContext ctx;
    Scope(&ctx, cap);
    StatsResponse r;
    return stub_->Stats(&ctx, StatsRequest(), &r);
  }
  int64_t Version() {
    grpc::ClientContext ctx;
    Scope(&ctx, signer_->Sign(Trainer({0})));
    StatsResponse r;
    EXPECT_TRUE(stub_->Stats(&ctx, StatsRequest(), &r).ok());
    return r.version();
  }
  // A push's header for `slot`, then its end: refused at the header, or
  // refused later for want of a gradient (which applies nothing either).
  grpc::Status PushHeader(const std::string& cap, int slot) {
    grpc::ClientContext ctx;
    Scope(&ctx, cap);
    PushResponse resp;
    auto w = stub_->Push(&ctx, &resp);
    PushRequest m;
    m.mutable_header()->set_worker(slot);
    m.mutable_header()->set_step(0);
    w->Write(m);
    w->WritesDone();
    return w->Finish();
  }
  grpc::Status Announce(const std::string& cap, int slot) {
    grpc::ClientContext ctx;
    Scope(&ctx, cap);
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(500));
    AnnounceRequest req;
    req.set_worker(slot);
    req.set_step(0);
    AnnounceResponse resp;
    return stub_->Announce(&ctx, req, &resp);
  }
  grpc::Status Exchange(const std::string& cap) {
    grpc::ClientContext ctx;
    Scope(&ctx, cap, /*peer=*/true);
    ExchangeRequest req;
    req.set_incarnation(3);
    req.set_from_shard(1);
    ExchangeResponse resp;
    return stub_->Exchange(&ctx, req, &resp);
  }
  grpc::Status Replicate(const std::string& cap) {
    grpc::ClientContext ctx;
    Scope(&ctx, cap, /*peer=*/true);
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
  grpc::Status Checkpoint(const std::string& cap, const std::string& dir) {
    grpc::ClientContext ctx;
    Scope(&ctx, cap);
    CheckpointRequest req;
    req.set_dir(dir);
    CheckpointResponse resp;
    return stub_->Checkpoint(&ctx, req, &resp);
  }

  std::unique_ptr<CapabilitySigner> signer_;
  std::string dir_;
  std::unique_ptr<ShardServer> server_;
  std::unique_ptr<ParameterServer::Stub> stub_;
};

TEST_F(ShardCapabilityTest, OnlyAValidCapabilityOfThisJobAndIncarnation) {
  EXPECT_TRUE(Stats(signer_->Sign(Trainer({0}))).ok());
  const int64_t refused = AuditRefusalCounts()[kRefusedCapability];
  // The job key alone no longer does.
  grpc::Status st = Stats("");
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_GT(AuditRefusalCounts()[kRefusedCapability], refused);
  // Another job's or an earlier incarnation's capability.
  Capability other = Trainer({0});
  other.set_job_id("job-8");
  EXPECT_EQ(Stats(signer_->Sign(other)).error_code(),
            StatusCode::PERMISSION_DENIED);
  Capability earlier = Trainer({0});
  earlier.set_incarnation(2);
  EXPECT_EQ(Stats(signer_->Sign(earlier)).error_code(),
            StatusCode::PERMISSION_DENIED);
  // Expired beyond the skew allowance.
  Capability old = Trainer({0});
  old.set_expires_ms(absl::ToUnixMillis(absl::Now() - kCapabilitySkew -
                                        absl::Seconds(5)));
  st = Stats(signer_->Sign(old));
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(absl::StrContains(st.error_message(), "expired"))
      << st.error_message();
  // Made by someone else: claiming the coordinator's key, or under a key
  // the shard was not given (told to try again: it may be a new key).
  auto mallory = *CapabilitySigner::Generate();
  SignedCapability forged;
  ASSERT_TRUE(forged.ParseFromString(mallory->Sign(Trainer({0, 1}))));
  Capability body;
  ASSERT_TRUE(body.ParseFromString(forged.capability()));
  body.set_key_id(signer_->key_id());
  body.SerializeToString(forged.mutable_capability());
  EXPECT_EQ(Stats(forged.SerializeAsString()).error_code(),
            StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Stats(mallory->Sign(Trainer({0}))).error_code(),
            StatusCode::UNAVAILABLE);
  // Revoked (its member left the job): refused until the list changes.
  server_->capability_verifier().SetRevoked({"m-trainer"});
  st = Stats(signer_->Sign(Trainer({0})));
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(absl::StrContains(st.error_message(), "revoked"));
  server_->capability_verifier().SetRevoked({});
  EXPECT_TRUE(Stats(signer_->Sign(Trainer({0}))).ok());
}

TEST_F(ShardCapabilityTest, PushesAndAnnouncesOnlyForHeldSlots) {
  const std::string slot0 = signer_->Sign(Trainer({0}));
  grpc::Status st = PushHeader(slot0, 1);
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_TRUE(absl::StrContains(st.error_message(), "slot 1"));
  // Its own slot gets past the capability (and fails for want of a
  // gradient: a header alone applies nothing).
  st = PushHeader(slot0, 0);
  EXPECT_NE(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_EQ(PushHeader(signer_->Sign(Trainer({0, 1})), 1).error_code() ==
                StatusCode::PERMISSION_DENIED,
            false);
  EXPECT_EQ(Announce(slot0, 1).error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(Announce(slot0, 0).error_code(), StatusCode::PERMISSION_DENIED);
  // A shard's capability names no slot.
  EXPECT_EQ(PushHeader(signer_->Sign(Shard(true, 0, 0)), 0).error_code(),
            StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Version(), 0);
}

TEST_F(ShardCapabilityTest, PeerCallsOnlyFromTheJobsShards) {
  const std::string trainer = signer_->Sign(Trainer({0, 1}));
  grpc::Status st = Exchange(trainer);
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_NE(Exchange(signer_->Sign(Shard(false, 1, 0))).error_code(),
            StatusCode::PERMISSION_DENIED);
  // Replication only from this index's primary, at its term or later.
  EXPECT_EQ(Replicate(trainer).error_code(), StatusCode::PERMISSION_DENIED);
  st = Replicate(signer_->Sign(Shard(/*primary=*/false, 0, 0)));
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(absl::StrContains(st.error_message(), "only from its primary"));
  EXPECT_EQ(Replicate(signer_->Sign(Shard(true, 1, 0))).error_code(),
            StatusCode::PERMISSION_DENIED);
  // From the primary of this index: past the capability, judged by the
  // shard on its own terms (this one is a primary itself).
  st = Replicate(signer_->Sign(Shard(true, 0, 0)));
  EXPECT_NE(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
}

TEST_F(ShardCapabilityTest, CheckpointsOnlyIntoTheCapabilitysDirectory) {
  Capability elsewhere = Trainer({0});
  elsewhere.set_checkpoint_dir(dir_ + "/other");
  grpc::Status st = Checkpoint(signer_->Sign(elsewhere), dir_ + "/ckpt");
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
  Capability none = Trainer({0});
  none.clear_checkpoint_dir();
  EXPECT_EQ(Checkpoint(signer_->Sign(none), dir_ + "/ckpt").error_code(),
            StatusCode::PERMISSION_DENIED);
  st = Checkpoint(signer_->Sign(Trainer({0})), dir_ + "/ckpt");
  EXPECT_TRUE(st.ok()) << st.error_message();
}

}  // namespace
}  // namespace ps
}  // namespace bertps

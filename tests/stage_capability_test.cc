// A stage daemon's router (worker/stage_router.h), once given the
// coordinator's key, serves its stages' peers only with a capability of a
// member of the stage's job and start (common/capability.h): Ping with any
// of the job's, Send and Abort only with the one holding the sending stage's
// slot; none, another job's, a revoked member's are refused
// (PERMISSION_DENIED) before anything reaches the stage. A real shard and a
// real pipeline stage over 127.0.0.1.
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/capability.h"
#include "common/cluster/job_plan.h"
#include "common/io/bert_example.h"
#include "common/io/tfrecord.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/pipeline.grpc.pb.h"
#include "server/ps/server.h"
#include "server/ps/shard_test_util.h"
#include "worker/pipeline_stage.h"
#include "worker/stage_router.h"

namespace bertps {
namespace {

using grpc::StatusCode;

class StageCapabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    const std::string data = absl::StrCat(tmp ? tmp : "/tmp", "/stage-cap.tfrecord");
    auto w = io::TFRecordWriter::Open(data);
    ASSERT_TRUE(w.ok()) << w.status();
    for (int i = 0; i < 8; ++i) {
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
    BertConfig config = ps::Small();
    config.num_hidden_layers = 2;
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
    so.incarnation = 3;
    so.wait_timeout = absl::Seconds(20);
    shard_ = *ps::ShardServer::Start(so, "127.0.0.1:0", {});
    auto router = StageRouter::Start("127.0.0.1:0", SecurityConfig());
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = std::move(*router);
    PipelineStageOptions o;
    o.ps.addresses = {shard_->address()};
    o.ps.job_id = "job-7";
    o.ps.incarnation = 3;
    o.config = config;
    o.plan = PlanOf(job);
    o.stage = 1;  // slot 1; stage 0 of replica 0 is slot 0
    o.micro_batches = 2;
    o.data = {data};
    o.router = router_.get();
    auto p = PipelineStage::Create(o);
    ASSERT_TRUE(p.ok()) << p.status();
    stage_ = std::move(*p);
    stub_ = StageService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", router_->port()),
        grpc::InsecureChannelCredentials()));
    signer_ = *CapabilitySigner::Generate();
  }
  void TearDown() override { stage_.reset(); }

  std::string Cap(std::vector<int> slots, const std::string& job = "job-7") {
    Capability c;
    c.set_member_id("m-stage");
    c.set_job_id(job);
    c.set_incarnation(3);
    c.set_kind(Capability::TRAINER);
    for (int s : slots) c.add_slots(s);
    c.set_issued_ms(absl::ToUnixMillis(absl::Now()));
    c.set_expires_ms(absl::ToUnixMillis(absl::Now() + kCapabilityLifetime));
    return signer_->Sign(c);
  }
  void Prepare(grpc::ClientContext* ctx, const std::string& cap) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (!cap.empty()) ctx->AddMetadata(kCapabilityMetadata, cap);
  }
  grpc::Status Ping(const std::string& cap) {
    grpc::ClientContext ctx;
    Prepare(&ctx, cap);
    StagePingRequest req;
    req.set_replica(0);
    req.set_stage(1);
    StagePingResponse resp;
    return stub_->Ping(&ctx, req, &resp);
  }
  // An activation of stage 0 for stage 1: its header and no data.
  grpc::Status Send(const std::string& cap) {
    grpc::ClientContext ctx;
    Prepare(&ctx, cap);
    StageSendResponse resp;
    auto w = stub_->Send(&ctx, &resp);
    StageChunk msg;
    StageTensorHeader* h = msg.mutable_header();
    h->set_replica(0);
    h->set_from_stage(0);
    h->set_kind(ACTIVATION);
    h->set_elements(4);
    w->Write(msg);
    w->WritesDone();
    return w->Finish();
  }
  grpc::Status Abort(const std::string& cap) {
    grpc::ClientContext ctx;
    Prepare(&ctx, cap);
    StageAbortRequest req;
    req.set_replica(0);
    req.set_from_stage(0);
    req.set_reason("test");
    StageAbortResponse resp;
    return stub_->Abort(&ctx, req, &resp);
  }

  std::unique_ptr<ps::ShardServer> shard_;
  std::unique_ptr<StageRouter> router_;
  std::unique_ptr<PipelineStage> stage_;
  std::unique_ptr<StageService::Stub> stub_;
  std::unique_ptr<CapabilitySigner> signer_;
};

TEST_F(StageCapabilityTest, PeersOnlyWithTheSendingStagesCapability) {
  // No key yet (a daemon run without a coordinator): nothing checked.
  EXPECT_TRUE(Ping("").ok());
  ASSERT_TRUE(router_->verifier().AddKey(signer_->public_key()).ok());
  grpc::Status st = Ping("");
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_TRUE(Ping(Cap({1})).ok());
  EXPECT_EQ(Ping(Cap({0}, "job-8")).error_code(), StatusCode::PERMISSION_DENIED);
  // A tensor of stage 0 only from the holder of slot 0.
  st = Send(Cap({1}));
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_EQ(Send("").error_code(), StatusCode::PERMISSION_DENIED);
  st = Send(Cap({0}));
  EXPECT_NE(st.error_code(), StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_EQ(Abort(Cap({1})).error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(Abort(Cap({0})).ok());
  // A revoked member: refused whatever it holds.
  router_->verifier().SetRevoked({"m-stage"});
  EXPECT_EQ(Ping(Cap({0, 1})).error_code(), StatusCode::PERMISSION_DENIED);
}

}  // namespace
}  // namespace bertps

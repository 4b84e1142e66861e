// A whole local cluster in one process over 127.0.0.1: the coordinator's
// gRPC services, two idle parameter-server shards that take the job from it,
// and train members (one spare). A worker that goes away mid-job is replaced
// and every example is still counted once per epoch.
#include <cstdlib>
#include <random>
#include <thread>

#include "common/io/bert_example.h"
#include "common/io/tfrecord.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/coordinator/service.h"
#include "server/ps/shard_member.h"
#include "worker/train_member.h"

namespace bertps {
namespace {

std::string TempDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

void WriteData(const std::string& path, int n, uint64_t seed) {
  std::mt19937 rng(seed);
  auto w = *io::TFRecordWriter::Open(path);
  for (int i = 0; i < n; ++i) {
    io::PretrainExample e;
    const int tok = 5 + rng() % 30;
    for (int j = 0; j < 16; ++j) {
      e.input_ids.push_back(j == 0 ? 1 : (j % 2 ? tok : 5 + rng() % 30));
      e.input_mask.push_back(1);
      e.segment_ids.push_back(j < 8 ? 0 : 1);
    }
    for (int k = 0; k < 3; ++k) {
      e.masked_lm_positions.push_back(1 + 4 * k);
      e.masked_lm_ids.push_back(tok);
      e.masked_lm_weights.push_back(1.0f);
    }
    e.next_sentence_label = tok % 2;
    ASSERT_TRUE(w->Write(io::EncodePretrainExample(e)).ok());
  }
  ASSERT_TRUE(w->Close().ok());
}

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteData(TempDir() + "/c-0.tfrecord", 30, 1);
    WriteData(TempDir() + "/c-1.tfrecord", 30, 2);
    CoordinatorOptions co;
    co.member_timeout = absl::Seconds(2);
    co.heartbeat_ms = 100;
    coordinator_ = std::make_unique<Coordinator>(co);
    jobs_ = std::make_unique<JobServiceImpl>(coordinator_.get());
    cluster_ = std::make_unique<ClusterServiceImpl>(coordinator_.get());
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(jobs_.get());
    b.RegisterService(cluster_.get());
    server_ = b.BuildAndStart();
    address_ = "127.0.0.1:" + std::to_string(port);
    for (int s = 0; s < 2; ++s) {
      shards_.push_back(*ps::ShardServer::StartIdle("127.0.0.1:0"));
      shard_members_.push_back(
          std::make_unique<ps::ShardMember>(address_, shards_.back().get()));
      ps::ShardMember* m = shard_members_.back().get();
      threads_.emplace_back([m] { (void)m->Run(); });
    }
  }
  void TearDown() override {
    for (auto& m : train_members_) m->Stop();
    for (auto& m : shard_members_) m->Stop();
    for (auto& t : threads_) t.join();
    for (auto& s : shards_) s->Shutdown();
    server_->Shutdown();
  }
  TrainMember* AddWorker() {
    train_members_.push_back(std::make_unique<TrainMember>(address_));
    TrainMember* m = train_members_.back().get();
    threads_.emplace_back([m] { (void)m->Run(); });
    return m;
  }
  JobSpec Spec() {
    JobSpec s;
    s.set_task(PRETRAIN);
    s.set_model(TempDir() + "/model.json");
    s.add_data(TempDir() + "/c-*.tfrecord");
    s.set_batch_size(5);
    s.set_epochs(4);  // 60 examples per epoch, 10 per step: 24 steps
    s.set_num_ps_shards(2);
    s.set_num_workers(2);
    s.mutable_optimizer()->set_learning_rate(2e-3);
    return s;
  }
  JobStatus WaitForEnd(const std::string& id, absl::Duration limit) {
    absl::Time end = absl::Now() + limit;
    while (absl::Now() < end) {
      JobStatus s = *coordinator_->Get(id);
      if (IsFinal(s.state())) return s;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return *coordinator_->Get(id);
  }
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<JobServiceImpl> jobs_;
  std::unique_ptr<ClusterServiceImpl> cluster_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::vector<std::unique_ptr<ps::ShardServer>> shards_;
  std::vector<std::unique_ptr<ps::ShardMember>> shard_members_;
  std::vector<std::unique_ptr<TrainMember>> train_members_;
  std::vector<std::thread> threads_;
};

void WriteModel() {
  FILE* f = std::fopen((TempDir() + "/model.json").c_str(), "w");
  std::fputs(R"({"vocab_size": 40, "hidden_size": 32, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "intermediate_size": 64,
                 "max_position_embeddings": 32})", f);
  std::fclose(f);
}

TEST_F(ClusterTest, JobRunsToSuccessAndTheLossGoesDown) {
  WriteModel();
  AddWorker();
  AddWorker();
  auto id = coordinator_->Submit(Spec());
  ASSERT_TRUE(id.ok()) << id.status();
  JobStatus st = WaitForEnd(*id, absl::Seconds(60));
  ASSERT_EQ(st.state(), SUCCEEDED) << st.reason();
  EXPECT_EQ(st.progress().step(), 24);
  ASSERT_EQ(st.history_size(), 24);
  EXPECT_LT(st.history(23).loss(), st.history(0).loss());
  ASSERT_EQ(st.progress().examples_per_epoch_size(), 4);
  for (int64_t e : st.progress().examples_per_epoch()) EXPECT_EQ(e, 60);
}

TEST_F(ClusterTest, AWorkerLeavesMidJobAndTheSpareTakesItsSlot) {
  WriteModel();
  TrainMember* a = AddWorker();
  AddWorker();
  auto id = coordinator_->Submit(Spec());
  ASSERT_TRUE(id.ok()) << id.status();
  // Let it run a few steps, then the first worker stops heartbeating.
  while (coordinator_->Get(*id)->progress().step() < 5) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  a->Stop();
  AddWorker();  // the spare
  JobStatus st = WaitForEnd(*id, absl::Seconds(90));
  ASSERT_EQ(st.state(), SUCCEEDED) << st.reason();
  EXPECT_EQ(st.progress().step(), 24);
  ASSERT_EQ(st.progress().examples_per_epoch_size(), 4);
  for (int64_t e : st.progress().examples_per_epoch()) EXPECT_EQ(e, 60);
}

}  // namespace
}  // namespace bertps

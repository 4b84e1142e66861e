// Members check the paths of their assignments again before they open or
// create anything (common/cluster/path_policy.h, CheckAssignmentPaths): a
// coordinator confined to T/data and T/out over 127.0.0.1 accepts a job,
// then a link planted inside a root points out of it before the members
// start. The member that meets it reports the error the usual way (a shard's
// or a train part's error, a pool item's result error), which fails the job
// naming the path; nothing outside is opened or written.
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/io/bert_example.h"
#include "common/io/tfrecord.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/coordinator/service.h"
#include "server/ps/shard_member.h"
#include "worker/pool_member.h"
#include "worker/train_member.h"

namespace bertps {
namespace {

namespace fs = std::filesystem;

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

// T/data (data root: data, model), T/out (output root), T/outside.
class MemberPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    top_ = fs::path(tmp ? tmp : "/tmp") /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(top_);
    for (const char* d : {"data/text", "out", "outside"}) {
      fs::create_directories(top_ / d);
    }
    WriteData(T("data/c-0.tfrecord"), 30, 1);
    WriteData(T("data/c-1.tfrecord"), 30, 2);
    std::ofstream(T("data/model.json"))
        << R"({"vocab_size": 40, "hidden_size": 32, "num_hidden_layers": 2,
               "num_attention_heads": 4, "intermediate_size": 64,
               "max_position_embeddings": 32})";
    CoordinatorOptions co;
    co.member_timeout = absl::Seconds(2);
    co.heartbeat_ms = 100;
    co.roots = {T("data"), T("out")};
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
  }
  void TearDown() override {
    for (auto& m : train_members_) m->Stop();
    for (auto& m : shard_members_) m->Stop();
    for (auto& m : pool_members_) m->Stop();
    for (auto& t : threads_) t.join();
    for (auto& s : shards_) s->Shutdown();
    server_->Shutdown();
  }
  std::string T(const std::string& rel) const { return (top_ / rel).string(); }
  // Two shards and two train workers, started after the submit.
  void AddTrainCluster() {
    for (int s = 0; s < 2; ++s) {
      shards_.push_back(*ps::ShardServer::StartIdle("127.0.0.1:0"));
      shard_members_.push_back(
          std::make_unique<ps::ShardMember>(address_, shards_.back().get()));
      ps::ShardMember* m = shard_members_.back().get();
      threads_.emplace_back([m] { (void)m->Run(); });
    }
    for (int w = 0; w < 2; ++w) {
      train_members_.push_back(std::make_unique<TrainMember>(address_));
      TrainMember* m = train_members_.back().get();
      threads_.emplace_back([m] { (void)m->Run(); });
    }
  }
  JobSpec Train() const {
    JobSpec s;
    s.set_task(PRETRAIN);
    s.set_model(T("data/model.json"));
    s.add_data(T("data/c-*.tfrecord"));
    s.set_batch_size(5);
    s.set_steps(4);
    s.set_num_ps_shards(2);
    s.set_num_workers(2);
    return s;
  }
  JobStatus WaitForEnd(const std::string& id, absl::Duration limit) {
    const absl::Time end = absl::Now() + limit;
    while (absl::Now() < end) {
      JobStatus s = *coordinator_->Get(id);
      if (IsFinal(s.state())) return s;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return *coordinator_->Get(id);
  }
  bool EmptyDir(const std::string& dir) const {
    return fs::is_empty(dir);
  }

  fs::path top_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<JobServiceImpl> jobs_;
  std::unique_ptr<ClusterServiceImpl> cluster_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::vector<std::unique_ptr<ps::ShardServer>> shards_;
  std::vector<std::unique_ptr<ps::ShardMember>> shard_members_;
  std::vector<std::unique_ptr<TrainMember>> train_members_;
  std::vector<std::unique_ptr<PoolMember>> pool_members_;
  std::vector<std::thread> threads_;
};

// The export's directory becomes a link out after the submit: the shards
// (the first members to install) refuse it before they install.
TEST_F(MemberPaths, AnOutputLinkedOutAfterTheSubmitFailsTheJob) {
  JobSpec s = Train();
  s.set_export_path(T("out/exp/model.safetensors"));
  absl::StatusOr<std::string> id = coordinator_->Submit(s);
  ASSERT_TRUE(id.ok()) << id.status();
  fs::create_symlink(T("outside"), T("out/exp"));
  AddTrainCluster();
  const JobStatus st = WaitForEnd(*id, absl::Seconds(60));
  ASSERT_EQ(st.state(), FAILED) << st.reason();
  EXPECT_NE(st.reason().find("job spec: export_path \"" +
                             T("out/exp/model.safetensors") + "\" resolves to " +
                             fs::canonical(T("outside")).string() +
                             "/model.safetensors, outside --output_root " +
                             T("out")),
            std::string::npos)
      << st.reason();
  EXPECT_TRUE(EmptyDir(T("outside")));
}

// A data file swapped for a link to a copy outside (the same bytes, so the
// workers' own check of the data would pass): the train members refuse it
// before they open it; the shards, which read no data, installed.
TEST_F(MemberPaths, ADataFileLinkedOutAfterTheSubmitFailsTheJob) {
  absl::StatusOr<std::string> id = coordinator_->Submit(Train());
  ASSERT_TRUE(id.ok()) << id.status();
  fs::rename(T("data/c-1.tfrecord"), T("outside/c-1.tfrecord"));
  fs::create_symlink(T("outside/c-1.tfrecord"), T("data/c-1.tfrecord"));
  AddTrainCluster();
  const JobStatus st = WaitForEnd(*id, absl::Seconds(60));
  ASSERT_EQ(st.state(), FAILED) << st.reason();
  EXPECT_NE(st.reason().find("data file 1 \"" + T("data/c-1.tfrecord") +
                             "\" resolves to " +
                             fs::canonical(T("outside")).string() +
                             "/c-1.tfrecord, outside --data_root"),
            std::string::npos)
      << st.reason();
  EXPECT_EQ(st.progress().step(), 0);
}

// A preprocess item's input swapped for a link to /etc/hostname: the item's
// result is the error, its handler never runs.
TEST_F(MemberPaths, APoolItemLinkedOutIsNotOpened) {
  std::ofstream(T("data/text/a.txt")) << "a\n";
  JobSpec s;
  s.set_task(PREPROCESS);
  s.add_data(T("data/text/*.txt"));
  s.set_output_dir(T("out/records"));
  s.mutable_preprocess()->set_vocab(T("data/vocab.txt"));
  absl::StatusOr<std::string> id = coordinator_->Submit(s);
  ASSERT_TRUE(id.ok()) << id.status();
  fs::remove(T("data/text/a.txt"));
  fs::create_symlink("/etc/hostname", T("data/text/a.txt"));
  std::atomic<int> handled{0};
  pool_members_.push_back(std::make_unique<PoolMember>(
      address_, PREPROCESS_ROLE,
      [&handled](const JobSpec&, const WorkItem&, const std::atomic<bool>&)
          -> absl::StatusOr<WorkResult> {
        ++handled;
        return WorkResult();
      }));
  PoolMember* m = pool_members_.back().get();
  threads_.emplace_back([m] { (void)m->Run(); });
  const JobStatus st = WaitForEnd(*id, absl::Seconds(30));
  ASSERT_EQ(st.state(), FAILED) << st.reason();
  EXPECT_NE(st.reason().find("item input \"" + T("data/text/a.txt") +
                             "\" resolves to /etc/hostname, outside --data_root"),
            std::string::npos)
      << st.reason();
  EXPECT_EQ(handled.load(), 0);
  EXPECT_FALSE(fs::exists(T("out/records")));
}

}  // namespace
}  // namespace bertps

// The coordinator places train jobs by the members' memory: a job no
// registered member could hold is refused with the figures, one that fits
// only some members waits for those (and says why the others are passed
// over), and a survivor takes a lost slot over only where both parts fit
// (ASP/SSP: one part per slot; a BSP job's slots run serially on one model,
// so one part's memory is enough).
#include <string>

#include "absl/strings/str_cat.h"
#include "common/cluster/memory_plan.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_test_util.h"

namespace bertps {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

class MemoryPlacementTest : public ::testing::Test {
 protected:
  MemoryPlacementTest() {
    CoordinatorOptions o;
    o.member_timeout = absl::Seconds(10);
    o.stall_threshold = absl::InfiniteDuration();
    o.now = [this] { return now_; };
    // One data file of 100 pretraining examples, 128 tokens, 20 masked.
    o.describe_data = [](const JobSpec&)
        -> absl::StatusOr<std::vector<DataFile>> {
      DataFile f;
      f.set_path("data/a.tfrecord");
      f.set_bytes(1000);
      f.set_records(100);
      f.set_seq_length(128);
      f.set_masked_positions(20);
      return std::vector<DataFile>{f};
    };
    coord_ = std::make_unique<Coordinator>(o);
  }
  std::string Join(Role role, int64_t limit, const std::string& addr = "") {
    RegisterRequest r;
    r.set_role(role);
    r.set_address(addr);
    r.set_memory_limit_bytes(limit);
    r.set_memory_limit_source("cgroup memory.max");
    return RegisterMember(*coord_, r)->member_id();
  }
  Assignment Beat(const std::string& m, const std::string& job = "") {
    HeartbeatRequest r;
    r.set_member_id(m);
    r.set_job_id(job);
    if (!job.empty()) r.set_incarnation(coord_->Get(job)->incarnation());
    return SignedHeartbeat(*coord_, r)->assignment();
  }
  static JobSpec Spec(int shards, int workers,
                      ConsistencyMode mode = BSP) {
    JobSpec s;
    s.mutable_consistency()->set_mode(mode);
    s.set_task(PRETRAIN);
    s.add_data("data/*.tfrecord");
    s.set_batch_size(10);
    s.set_steps(10);
    s.set_num_ps_shards(shards);
    s.set_num_workers(workers);
    return s;
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::unique_ptr<Coordinator> coord_;
};

// The estimate is the members' own (common/cluster/memory_plan.h), shown in
// the job's status.
TEST_F(MemoryPlacementTest, StatusCarriesTheEstimate) {
  const std::string id = *coord_->Submit(Spec(2, 2));
  const MemoryEstimate e = coord_->Get(id)->memory();
  const BertConfig tiny = *ResolveBertConfig("tiny");
  EXPECT_EQ(e.shard_bytes(),
            ShardMemoryNeed(tiny, BertTask::kPretrain, optim::OptimizerConfig(),
                            2, 2)->bytes);
  EXPECT_EQ(e.worker_bytes(),
            TrainWorkerMemoryNeed(tiny, BertTask::kPretrain, 10, 128, 20).bytes);
  EXPECT_GT(e.shard_bytes(), 10 * kMiB);
  EXPECT_GT(e.worker_bytes(), 10 * kMiB);
  EXPECT_NE(e.worker_detail().find("batch 10 x seq 128"), std::string::npos);
}

TEST_F(MemoryPlacementTest, RefusedWhenNoRegisteredMemberCouldHoldIt) {
  const std::string small = Join(PS, 16 * kMiB, "127.0.0.1:1");
  Join(TRAIN, 8 * kGiB);
  absl::StatusOr<std::string> id = coord_->Submit(Spec(1, 1));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(id.status().message());
  EXPECT_NE(msg.find("each parameter-server shard needs ~"), std::string::npos) << msg;
  EXPECT_NE(msg.find("use more shards or a smaller model"), std::string::npos);
  EXPECT_NE(msg.find("the largest: 16.0 MiB, cgroup memory.max, member " +
                     small),
            std::string::npos)
      << msg;
  // Train workers likewise, naming what lowers the need.
  Join(PS, 8 * kGiB, "127.0.0.1:2");
  Join(TRAIN, 0);  // unknown limit: may hold it
  EXPECT_TRUE(coord_->Submit(Spec(1, 1)).ok());
}

TEST_F(MemoryPlacementTest, WorkerTooSmallEverywhereIsRefused) {
  Join(PS, 8 * kGiB, "127.0.0.1:1");
  Join(TRAIN, 4 * kMiB);
  absl::StatusOr<std::string> id = coord_->Submit(Spec(1, 1));
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find(
                "each train worker needs ~"), std::string::npos)
      << id.status();
  EXPECT_NE(id.status().message().find("lower batch_size"), std::string::npos);
}

// Submitted before any member registered: accepted; it waits on the small
// daemons, saying why, and starts on a large one.
TEST_F(MemoryPlacementTest, WaitsForMembersItFitsAndSaysWhy) {
  const std::string id = *coord_->Submit(Spec(1, 1));
  const std::string small = Join(PS, 16 * kMiB, "127.0.0.1:1");
  const std::string w = Join(TRAIN, 8 * kGiB);
  Beat(small), Beat(w);
  JobStatus st = *coord_->Get(id);
  EXPECT_EQ(st.state(), PENDING);
  EXPECT_NE(st.waiting().find("0/1 idle parameter-server daemons"),
            std::string::npos)
      << st.waiting();
  EXPECT_NE(st.waiting().find("1 idle parameter-server daemon(s) have too "
                              "little memory (a shard needs ~"),
            std::string::npos)
      << st.waiting();
  EXPECT_NE(st.waiting().find("of at most 16.0 MiB"), std::string::npos);
  const std::string big = Join(PS, 8 * kGiB, "127.0.0.1:2");
  Beat(big);
  st = *coord_->Get(id);
  EXPECT_EQ(st.state(), RUNNING);
  ASSERT_EQ(st.ps_addresses_size(), 1);
  EXPECT_EQ(st.ps_addresses(0), "127.0.0.1:2");
  EXPECT_EQ(Beat(small).job_id(), "");
}

// A survivor of an ASP job takes a lost slot over only where its memory
// holds two parts; otherwise the job waits for a daemon and says why.
TEST_F(MemoryPlacementTest, TakeoverNeedsMemoryForBothParts) {
  const std::string p = Join(PS, 8 * kGiB, "127.0.0.1:1");
  const std::string probe = *coord_->Submit(Spec(1, 2, ASP));
  const int64_t worker = coord_->Get(probe)->memory().worker_bytes();
  ASSERT_TRUE(coord_->Cancel(probe).ok());
  // Room for one part (and a half), not two.
  const int64_t limit = static_cast<int64_t>(worker * 1.5 / kMemoryHeadroom);
  const std::string w0 = Join(TRAIN, limit), w1 = Join(TRAIN, limit);
  const std::string id = *coord_->Submit(Spec(1, 2, ASP));
  Beat(p), Beat(p, id), Beat(w0), Beat(w1);
  ASSERT_EQ(coord_->Get(id)->state(), RUNNING);
  for (int i = 0; i < 8; ++i) {  // w1 silent: dead, then takeover is due
    now_ += absl::Seconds(6);
    Beat(p, id);
    EXPECT_EQ(Beat(w0, id).also_indices_size(), 0);
  }
  const std::string waiting = coord_->Get(id)->waiting();
  EXPECT_NE(waiting.find("no surviving worker has the memory to take a slot "
                         "over beside its own"),
            std::string::npos)
      << waiting;
  // A daemon too small for one part is passed over, and said to be.
  const std::string tiny = Join(TRAIN, 4 * kMiB);
  Beat(tiny);
  EXPECT_EQ(Beat(tiny).job_id(), "");
  EXPECT_NE(coord_->Get(id)->waiting().find(
                "1 idle train daemon(s) have too little memory"),
            std::string::npos)
      << coord_->Get(id)->waiting();
  const std::string w2 = Join(TRAIN, limit);
  EXPECT_EQ(Beat(w2).index(), 1);
}

// A BSP job's survivor computes a lost slot beside its own on its one
// model: the memory of one part is enough.
TEST_F(MemoryPlacementTest, SerialSlotsNeedTheMemoryOfOnePart) {
  const std::string p = Join(PS, 8 * kGiB, "127.0.0.1:1");
  const std::string probe = *coord_->Submit(Spec(1, 2));
  const int64_t worker = coord_->Get(probe)->memory().worker_bytes();
  ASSERT_TRUE(coord_->Cancel(probe).ok());
  const int64_t limit = static_cast<int64_t>(worker * 1.5 / kMemoryHeadroom);
  const std::string w0 = Join(TRAIN, limit), w1 = Join(TRAIN, limit);
  const std::string id = *coord_->Submit(Spec(1, 2));
  Beat(p), Beat(p, id), Beat(w0), Beat(w1);
  ASSERT_EQ(coord_->Get(id)->state(), RUNNING);
  int also = 0;
  for (int i = 0; i < 8 && also == 0; ++i) {  // w1 silent: dead, taken over
    now_ += absl::Seconds(6);
    Beat(p, id);
    also = Beat(w0, id).also_indices_size();
  }
  EXPECT_EQ(also, 1) << coord_->Get(id)->waiting();
}

TEST_F(MemoryPlacementTest, NegativeLimitIsRefusedAtRegister) {
  RegisterRequest r;
  r.set_role(TRAIN);
  r.set_memory_limit_bytes(-1);
  EXPECT_FALSE(RegisterMember(*coord_, r).ok());
}

}  // namespace
}  // namespace bertps

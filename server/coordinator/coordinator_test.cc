#include "server/coordinator/coordinator.h"

#include "gtest/gtest.h"

namespace bertps {
namespace {

class CoordinatorTest : public ::testing::Test {
 protected:
  CoordinatorTest() : coord_(Options()) {}
  CoordinatorOptions Options() {
    CoordinatorOptions o;
    o.member_timeout = absl::Seconds(10);
    o.now = [this] { return now_; };
    o.count_examples = [](const JobSpec&) -> absl::StatusOr<int64_t> {
      return 100;  // examples per epoch
    };
    return o;
  }
  JobSpec Spec(int shards, int workers, int64_t steps) {
    JobSpec s;
    s.set_task(PRETRAIN);
    s.add_data("data/*.tfrecord");
    s.set_batch_size(10);
    s.set_steps(steps);
    s.set_num_ps_shards(shards);
    s.set_num_workers(workers);
    return s;
  }
  std::string Join(Role role, const std::string& addr = "") {
    RegisterRequest r;
    r.set_role(role);
    r.set_address(addr);
    return coord_.Register(r)->member_id();
  }
  Assignment Beat(const std::string& member, const std::string& job = "",
                  std::vector<StepReport> steps = {}, bool done = false,
                  const std::string& error = "") {
    HeartbeatRequest r;
    r.set_member_id(member);
    r.set_job_id(job);
    for (auto& s : steps) *r.add_steps() = s;
    r.set_done(done);
    r.set_error(error);
    return coord_.Heartbeat(r)->assignment();
  }
  StepReport Report(int64_t step, int worker, int workers, int batch,
                    double loss) {
    StepReport s;
    s.set_step(step);
    s.set_first_example((step * workers + worker) * batch);
    s.set_examples(batch);
    s.set_loss(loss);
    return s;
  }
  absl::Time now_ = absl::FromUnixSeconds(1000);
  Coordinator coord_;
};

TEST_F(CoordinatorTest, JobRunsToSuccessWithExactCounts) {
  std::string p0 = Join(PS, "127.0.0.1:1"), p1 = Join(PS, "127.0.0.1:2");
  std::string w0 = Join(TRAIN), w1 = Join(TRAIN);
  auto id = coord_.Submit(Spec(2, 2, 15));  // 15 steps x 20 = 3 epochs of 100
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(coord_.Get(*id)->state(), RUNNING);
  Assignment a0 = Beat(w0), a1 = Beat(w1), s1 = Beat(p1);
  EXPECT_EQ(a0.job_id(), *id);
  EXPECT_EQ(a0.ps_addresses_size(), 2);
  EXPECT_NE(a0.index(), a1.index());
  EXPECT_EQ(s1.index(), 1);
  for (int64_t step = 0; step < 15; ++step) {
    Beat(w0, *id, {Report(step, a0.index(), 2, 10, 2.0)});
    // Worker 1's report is delivered twice (a retried heartbeat).
    Beat(w1, *id, {Report(step, a1.index(), 2, 10, 4.0)});
    Beat(w1, *id, {Report(step, a1.index(), 2, 10, 4.0)});
  }
  JobStatus st = *coord_.Get(*id);
  EXPECT_EQ(st.progress().step(), 15);
  EXPECT_DOUBLE_EQ(st.progress().loss(), 3.0);
  EXPECT_EQ(st.progress().examples(), 300);
  ASSERT_EQ(st.progress().examples_per_epoch_size(), 3);
  for (int64_t e : st.progress().examples_per_epoch()) EXPECT_EQ(e, 100);
  EXPECT_EQ(st.history_size(), 15);
  Beat(w0, *id, {}, /*done=*/true);
  EXPECT_EQ(coord_.Get(*id)->state(), RUNNING);
  Beat(w1, *id, {}, /*done=*/true);
  EXPECT_EQ(coord_.Get(*id)->state(), SUCCEEDED);
  EXPECT_TRUE(Beat(p0, *id).stop());
  // Events: submitted, slots, running, 15 steps, succeeded.
  int64_t seq = 0;
  auto events = coord_.WaitForEvents(*id, &seq, now_);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->front().message(), "submitted");
  EXPECT_EQ(events->back().status().state(), SUCCEEDED);
}

TEST_F(CoordinatorTest, DeadWorkersSlotGoesToAnotherWorker) {
  std::string p = Join(PS, "127.0.0.1:1");
  std::string w0 = Join(TRAIN), w1 = Join(TRAIN);
  auto id = *coord_.Submit(Spec(1, 2, 10));
  Assignment a0 = Beat(w0), a1 = Beat(w1);
  Beat(w0, id, {Report(0, a0.index(), 2, 10, 1.0)});
  Beat(w1, id, {Report(0, a1.index(), 2, 10, 1.0)});
  // w1 goes silent; w0 and the shard keep beating.
  for (int i = 0; i < 2; ++i) {
    now_ += absl::Seconds(6);
    Beat(p, id);
    Beat(w0, id);
  }
  EXPECT_EQ(coord_.Get(id)->state(), RUNNING);
  std::string spare = Join(TRAIN);
  Assignment as = Beat(spare);
  EXPECT_EQ(as.job_id(), id);
  EXPECT_EQ(as.index(), a1.index());  // the dead worker's slot
  // The dead worker comes back: it is told to stop.
  EXPECT_TRUE(Beat(w1, id).stop());
  // The replacement redoes step 1 from the same data; counted once.
  Beat(spare, id, {Report(1, as.index(), 2, 10, 1.0)});
  Beat(w0, id, {Report(1, a0.index(), 2, 10, 1.0)});
  EXPECT_EQ(coord_.Get(id)->progress().examples(), 40);
}

TEST_F(CoordinatorTest, DeadShardFailsTheJobNamingIt) {
  std::string p = Join(PS, "127.0.0.1:9"), w = Join(TRAIN);
  auto id = *coord_.Submit(Spec(1, 1, 10));
  Beat(w);
  now_ += absl::Seconds(11);
  Beat(w, id);
  JobStatus st = *coord_.Get(id);
  EXPECT_EQ(st.state(), FAILED);
  EXPECT_NE(st.reason().find("127.0.0.1:9"), std::string::npos) << st.reason();
  (void)p;
}

TEST_F(CoordinatorTest, QueueCancelAndErrors) {
  Join(PS, "a:1");
  std::string w = Join(TRAIN);
  auto first = *coord_.Submit(Spec(1, 1, 5));
  auto second = *coord_.Submit(Spec(1, 1, 5));
  EXPECT_EQ(coord_.Get(second)->state(), PENDING);  // members are busy
  ASSERT_TRUE(coord_.Cancel(first).ok());
  EXPECT_EQ(coord_.Get(first)->state(), CANCELLED);
  EXPECT_EQ(coord_.Cancel(first).code(), absl::StatusCode::kFailedPrecondition);
  Beat(w);
  EXPECT_EQ(coord_.Get(second)->state(), RUNNING);
  EXPECT_EQ(coord_.Get("job-999").status().code(), absl::StatusCode::kNotFound);
  JobSpec bad = Spec(1, 1, 5);
  bad.set_batch_size(-1);
  auto r = coord_.Submit(bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("batch_size"), std::string::npos);
  // A worker reporting an error fails its job with the reason.
  Assignment a = Beat(w);
  Beat(w, second, {}, false, "out of memory");
  EXPECT_EQ(coord_.Get(second)->state(), FAILED);
  EXPECT_NE(coord_.Get(second)->reason().find("out of memory"), std::string::npos);
  (void)a;
}

}  // namespace
}  // namespace bertps

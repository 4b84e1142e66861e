#include "common/cluster/job_plan.h"

#include <algorithm>
#include <set>

#include "gtest/gtest.h"

namespace bertps {
namespace {

JobSpec Spec(ConsistencyMode mode, int workers, int64_t batch, int64_t steps) {
  JobSpec s;
  s.set_task(PRETRAIN);
  s.set_num_workers(workers);
  s.set_num_ps_shards(2);
  s.set_batch_size(batch);
  s.set_steps(steps);
  s.mutable_consistency()->set_mode(mode);
  return s;
}

// Under every mode, the tickets of all workers' steps are exactly the
// updates 0..U-1, each once, and each ticket's examples are the fixed range
// [k * E, (k + 1) * E) of the stream, whoever computes it.
// With gradient accumulation a ticket's examples are its A micro-batches.
TEST(JobPlan, EveryUpdateIsOneTicketWithItsFixedExamples) {
  for (ConsistencyMode mode : {BSP, ASP, SSP}) {
    for (int workers : {1, 2, 3}) {
      for (int64_t steps : {1, 7, 12}) {
       for (int acc : {0, 1, 3}) {
        JobSpec spec = Spec(mode, workers, 4, steps);
        spec.set_accumulation_steps(acc);
        const JobPlan p = PlanOf(spec);
        const int64_t e = 4 * std::max(acc, 1);
        EXPECT_EQ(p.batch, 4);
        EXPECT_EQ(p.examples_per_push, e);
        EXPECT_EQ(p.updates, steps);
        std::multiset<int64_t> tickets;
        std::multiset<int64_t> positions;
        for (int w = 0; w < workers; ++w) {
          for (int64_t j = 0; j < p.WorkerSteps(w); ++j) {
            const int64_t k = p.Ticket(w, j);
            ASSERT_LT(k, steps) << "mode " << mode << " worker " << w;
            tickets.insert(k);
            for (int64_t x = 0; x < p.examples_per_push; ++x) {
              positions.insert(p.FirstExample(w, j) + x);
            }
          }
        }
        if (mode == BSP) {
          // Every worker runs every step: a ticket is one global batch.
          EXPECT_EQ(tickets.size(), static_cast<size_t>(steps * workers));
          EXPECT_EQ(p.examples_per_update, e * workers);
        } else {
          EXPECT_EQ(tickets.size(), static_cast<size_t>(steps));
          for (int64_t k = 0; k < steps; ++k) EXPECT_EQ(tickets.count(k), 1u);
          EXPECT_EQ(p.examples_per_update, e);
        }
        // The examples consumed are exactly [0, U * E), each once.
        ASSERT_EQ(positions.size(),
                  static_cast<size_t>(steps * p.examples_per_update));
        int64_t want = 0;
        for (int64_t x : positions) EXPECT_EQ(x, want++);
       }
      }
    }
  }
}

TEST(JobPlan, EpochsCheckpointsAndPipelines) {
  JobSpec s = Spec(BSP, 2, 8, 10);
  s.mutable_pipeline()->set_stages(3);
  s.mutable_checkpoint()->set_every_steps(5);
  JobPlan p = PlanOf(s);
  EXPECT_EQ(p.pushers, 6);
  EXPECT_EQ(p.checkpoint_every, 0);  // no checkpoint dir: none
  s.mutable_checkpoint()->set_dir("/ckpt");
  p = PlanOf(s);
  EXPECT_EQ(p.checkpoint_every, 5);
  EXPECT_FALSE(p.consistent_cuts);  // BSP: every version is consistent
  s.mutable_consistency()->set_mode(ASP);
  EXPECT_TRUE(PlanOf(s).consistent_cuts);
  // 2 epochs of 100 examples at 16 per BSP update: 13 updates (the last
  // partly); ASP: 8 per update, 25.
  s.mutable_consistency()->set_mode(BSP);
  EXPECT_EQ(PlanOf(s).UpdatesForEpochs(2, 100), 13);
  s.mutable_consistency()->set_mode(ASP);
  EXPECT_EQ(PlanOf(s).UpdatesForEpochs(2, 100), 25);
  EXPECT_EQ(PlanOf(s).UpdatesForEpochs(1, 0), 1);
}

}  // namespace
}  // namespace bertps

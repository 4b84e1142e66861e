#include "common/cluster/job_plan.h"

#include <algorithm>
#include <set>
#include <vector>

#include "common/optim/optimizer.h"
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


// Slot k is stage k % S of replica k / S, and SlotOf inverts it.
TEST(JobPlan, SlotsAreReplicaMajor) {
  JobSpec s = Spec(BSP, 3, 8, 10);
  s.mutable_pipeline()->set_stages(2);
  const JobPlan p = PlanOf(s);
  ASSERT_EQ(p.pushers, 6);
  const int replica[] = {0, 0, 1, 1, 2, 2};
  const int stage[] = {0, 1, 0, 1, 0, 1};
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(p.ReplicaOf(k), replica[k]) << k;
    EXPECT_EQ(p.StageOf(k), stage[k]) << k;
    EXPECT_EQ(p.SlotOf(replica[k], stage[k]), k);
  }
  // Without a pipeline a slot is a worker.
  const JobPlan q = PlanOf(Spec(ASP, 3, 8, 10));
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(q.ReplicaOf(k), k);
    EXPECT_EQ(q.StageOf(k), 0);
    EXPECT_EQ(q.SlotOf(k, 0), k);
  }
}

// Hand-computed tickets, first examples and steps: 3 workers, batch 4,
// accumulation 3 (12 examples a push), 7 updates.
TEST(JobPlan, TicketsFirstExamplesAndStepsByHand) {
  JobSpec s = Spec(ASP, 3, 4, 7);
  s.set_accumulation_steps(3);
  JobPlan p = PlanOf(s);
  EXPECT_EQ(p.examples_per_push, 12);
  EXPECT_EQ(p.examples_per_update, 12);
  // Worker 1's step 2 is ticket 2 * 3 + 1 = 7 at position 7 * 12 = 84.
  EXPECT_EQ(p.Ticket(1, 2), 7);
  EXPECT_EQ(p.FirstExample(1, 2), 84);
  EXPECT_EQ(p.ExampleOffset(2), 24);
  // Tickets 0..6: worker 0 has 0, 3, 6; worker 1 has 1, 4; worker 2 2, 5.
  EXPECT_EQ(p.WorkerSteps(0), 3);
  EXPECT_EQ(p.WorkerSteps(1), 2);
  EXPECT_EQ(p.WorkerSteps(2), 2);
  // After 5 updates (tickets 0..4): worker 0 pushed 2, 1 pushed 2, 2 one.
  EXPECT_EQ(p.StepsBefore(0, 5), 2);
  EXPECT_EQ(p.StepsBefore(1, 5), 2);
  EXPECT_EQ(p.StepsBefore(2, 5), 1);
  EXPECT_EQ(p.StepsBefore(2, 2), 0);
  EXPECT_EQ(p.StepsBefore(2, 0), 0);
  // BSP: the step is the ticket; worker 1's share of update 2 starts at
  // 2 * 36 + 12.
  s.mutable_consistency()->set_mode(BSP);
  p = PlanOf(s);
  EXPECT_EQ(p.examples_per_update, 36);
  EXPECT_EQ(p.Ticket(1, 2), 2);
  EXPECT_EQ(p.FirstExample(1, 2), 84);
  EXPECT_EQ(p.WorkerSteps(2), 7);
  EXPECT_EQ(p.StepsBefore(2, 5), 5);
}

// A run continued from update 6 whose data had reached position 96 (2
// workers x batch 8) by 1 worker x batch 4: update k >= 6 trains on
// [96 + (k - 6) * 4, ...); the job ends at 96 + (16 - 6) * 4. Without an
// origin the positions are those of a job from its start.
TEST(JobPlan, AContinuedRunGoesOnFromItsDataOrigin) {
  JobSpec s = Spec(BSP, 1, 4, 16);
  s.mutable_checkpoint()->mutable_origin()->set_update(6);
  s.mutable_checkpoint()->mutable_origin()->set_position(96);
  JobPlan p = PlanOf(s);
  EXPECT_EQ(p.FirstExample(0, 6), 96);
  EXPECT_EQ(p.FirstExample(0, 7), 100);
  EXPECT_EQ(p.PositionOfUpdate(16), 136);
  EXPECT_EQ(p.EndPosition(), 136);
  // BSP, 2 workers x batch 3: worker 1's share of update 8.
  s = Spec(BSP, 2, 3, 20);
  s.mutable_checkpoint()->mutable_origin()->set_update(6);
  s.mutable_checkpoint()->mutable_origin()->set_position(50);
  p = PlanOf(s);
  EXPECT_EQ(p.FirstExample(1, 8), 50 + 2 * 6 + 3);
  // ASP, 3 workers: worker 2's step 3 is ticket 11.
  s = Spec(ASP, 3, 2, 20);
  s.mutable_checkpoint()->mutable_origin()->set_update(9);
  s.mutable_checkpoint()->mutable_origin()->set_position(40);
  p = PlanOf(s);
  EXPECT_EQ(p.FirstExample(2, 3), 40 + (11 - 9) * 2);
  EXPECT_EQ(p.EndPosition(), 40 + 11 * 2);
  // No origin: a job from its start.
  p = PlanOf(Spec(ASP, 3, 2, 20));
  EXPECT_EQ(p.FirstExample(2, 3), 22);
  EXPECT_EQ(p.EndPosition(), 40);
}

// Checkpoints at multiples of every_steps and at the end; cuts (ASP/SSP
// only) at the multiples, held tickets at or past the cut.
TEST(JobPlan, CheckpointsAndCutsByHand) {
  JobSpec s = Spec(ASP, 2, 4, 10);
  s.mutable_checkpoint()->set_every_steps(4);
  JobPlan p = PlanOf(s);  // no dir: no checkpoints
  for (int64_t v = 0; v <= 11; ++v) EXPECT_FALSE(p.CheckpointDue(v)) << v;
  EXPECT_EQ(p.NextCheckpoint(0), 0);
  EXPECT_EQ(p.NextCut(0), 0);
  s.mutable_checkpoint()->set_dir("/ckpt");
  p = PlanOf(s);
  std::vector<int64_t> due;
  for (int64_t v = -1; v <= 13; ++v) {
    if (p.CheckpointDue(v)) due.push_back(v);
  }
  EXPECT_EQ(due, (std::vector<int64_t>{4, 8, 10}));
  EXPECT_EQ(p.NextCheckpoint(0), 4);
  EXPECT_EQ(p.NextCheckpoint(3), 4);
  EXPECT_EQ(p.NextCheckpoint(4), 8);
  EXPECT_EQ(p.NextCheckpoint(8), 10);
  EXPECT_EQ(p.NextCheckpoint(9), 10);
  EXPECT_EQ(p.NextCheckpoint(10), 0);
  EXPECT_EQ(p.NextCut(0), 4);
  EXPECT_EQ(p.NextCut(3), 4);
  EXPECT_EQ(p.NextCut(4), 8);
  EXPECT_EQ(p.NextCut(9), 12);
  EXPECT_FALSE(JobPlan::HeldByCut(3, 4));
  EXPECT_TRUE(JobPlan::HeldByCut(4, 4));
  EXPECT_TRUE(JobPlan::HeldByCut(5, 4));
  EXPECT_FALSE(JobPlan::HeldByCut(100, 0));
  // BSP: the same checkpoints, no cuts.
  s.mutable_consistency()->set_mode(BSP);
  p = PlanOf(s);
  EXPECT_TRUE(p.CheckpointDue(8));
  EXPECT_EQ(p.NextCut(5), 0);
  // Only the final one without every_steps.
  s.mutable_checkpoint()->set_every_steps(0);
  p = PlanOf(s);
  EXPECT_FALSE(p.CheckpointDue(4));
  EXPECT_TRUE(p.CheckpointDue(10));
  EXPECT_EQ(p.NextCheckpoint(0), 10);
}

// The rate at an update: BERT's warmup, then linear decay to 0 at the
// job's last update, bit for bit the optimizer library's schedule.
TEST(JobPlan, LearningRateByHand) {
  JobSpec s = Spec(BSP, 2, 4, 10);
  s.mutable_optimizer()->set_learning_rate(2e-3);
  s.mutable_optimizer()->set_warmup_steps(2);
  const JobPlan p = PlanOf(s);
  EXPECT_EQ(p.LearningRateAt(0), 0.0f);
  EXPECT_EQ(p.LearningRateAt(1), 2e-3f * 0.5f);
  EXPECT_FLOAT_EQ(p.LearningRateAt(2), 2e-3f * 0.8f);  // 1 - 2/10
  EXPECT_FLOAT_EQ(p.LearningRateAt(9), 2e-3f * 0.1f);
  EXPECT_EQ(p.LearningRateAt(10), 0.0f);
  optim::OptimizerConfig c;
  c.learning_rate = 2e-3;
  c.warmup_steps = 2;
  c.total_steps = 10;
  for (int64_t u = -1; u <= 12; ++u) {
    EXPECT_EQ(p.LearningRateAt(u), optim::LearningRate(c, u)) << u;
  }
}

}  // namespace
}  // namespace bertps

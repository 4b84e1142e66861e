#include "common/optim/lr_schedule.h"

#include "gtest/gtest.h"

namespace bertps {
namespace optim {
namespace {

OptimizerConfig Schedule(double lr, int64_t warmup, int64_t total) {
  OptimizerConfig c;
  c.learning_rate = lr;
  c.warmup_steps = warmup;
  c.total_steps = total;
  return c;
}

// google-research/bert: lr = init * step / warmup while step < warmup, else
// init * (1 - min(step, total) / total); step is the global step before the
// increment, i.e. 0 for the first update.
TEST(LearningRateTest, WarmupThenLinearDecayLikeBert) {
  const OptimizerConfig c = Schedule(1e-4, 10, 100);
  EXPECT_FLOAT_EQ(LearningRate(c, 0), 0.0f);  // the first step has lr 0
  EXPECT_FLOAT_EQ(LearningRate(c, 1), 1e-5f);
  EXPECT_FLOAT_EQ(LearningRate(c, 5), 5e-5f);
  EXPECT_FLOAT_EQ(LearningRate(c, 9), 9e-5f);  // last warmup step
  // Warmup over: the decay line, which started at step 0, not init_lr.
  EXPECT_FLOAT_EQ(LearningRate(c, 10), 9e-5f);
  EXPECT_FLOAT_EQ(LearningRate(c, 11), 8.9e-5f);
  EXPECT_FLOAT_EQ(LearningRate(c, 50), 5e-5f);
  EXPECT_NEAR(LearningRate(c, 99), 1e-6, 5e-12);  // 1 - 0.99f
  EXPECT_EQ(LearningRate(c, 100), 0.0f);
  EXPECT_EQ(LearningRate(c, 1000), 0.0f);
}

TEST(LearningRateTest, MatchesFloat32Arithmetic) {
  // The reference does float32 math: init(float) * (float(step)/float(W)).
  const OptimizerConfig c = Schedule(5e-5, 3, 7);
  EXPECT_EQ(LearningRate(c, 1), 5e-5f * (1.0f / 3.0f));
  EXPECT_EQ(LearningRate(c, 2), 5e-5f * (2.0f / 3.0f));
  EXPECT_EQ(LearningRate(c, 3), 5e-5f * (1.0f - 3.0f / 7.0f));
  EXPECT_EQ(LearningRate(c, 6), 5e-5f * (1.0f - 6.0f / 7.0f));
}

TEST(LearningRateTest, NoWarmup) {
  const OptimizerConfig c = Schedule(2e-5, 0, 4);
  EXPECT_FLOAT_EQ(LearningRate(c, 0), 2e-5f);  // full lr at the first step
  EXPECT_FLOAT_EQ(LearningRate(c, 1), 1.5e-5f);
  EXPECT_FLOAT_EQ(LearningRate(c, 2), 1e-5f);
  EXPECT_FLOAT_EQ(LearningRate(c, 3), 0.5e-5f);
  EXPECT_EQ(LearningRate(c, 4), 0.0f);
}

TEST(LearningRateTest, ZeroTotalStepsIsConstantAfterWarmup) {
  const OptimizerConfig c = Schedule(1e-3, 4, 0);
  EXPECT_FLOAT_EQ(LearningRate(c, 0), 0.0f);
  EXPECT_FLOAT_EQ(LearningRate(c, 2), 5e-4f);
  EXPECT_FLOAT_EQ(LearningRate(c, 3), 7.5e-4f);
  EXPECT_EQ(LearningRate(c, 4), 1e-3f);
  EXPECT_EQ(LearningRate(c, 1000000), 1e-3f);
  const OptimizerConfig constant = Schedule(1e-3, 0, 0);
  EXPECT_EQ(LearningRate(constant, 0), 1e-3f);
  EXPECT_EQ(LearningRate(constant, 123456789), 1e-3f);
}

TEST(LearningRateTest, WarmupEqualToTotal) {
  const OptimizerConfig c = Schedule(1e-4, 10, 10);
  EXPECT_FLOAT_EQ(LearningRate(c, 9), 9e-5f);
  EXPECT_EQ(LearningRate(c, 10), 0.0f);
}

TEST(LearningRateTest, NegativeStepIsStepZero) {
  EXPECT_EQ(LearningRate(Schedule(1e-4, 0, 0), -3), 1e-4f);
  EXPECT_EQ(LearningRate(Schedule(1e-4, 10, 100), -3), 0.0f);
}

}  // namespace
}  // namespace optim
}  // namespace bertps

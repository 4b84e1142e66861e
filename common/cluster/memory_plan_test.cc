#include "common/cluster/memory_plan.h"

#include <cstdint>

#include "common/model/bert.h"
#include "common/model/params.h"
#include "gtest/gtest.h"

namespace bertps {
namespace {

BertConfig Tiny() { return *ResolveBertConfig("tiny"); }

TEST(MemoryPlanTest, ShardNeedCountsTheModelItsSliceStateAndStaging) {
  const BertConfig c = Tiny();
  optim::OptimizerConfig adam;  // two state slots
  const int64_t total = ParamLayout::ForBert(c, BertTask::kPretrain).total_size();
  auto one = ShardMemoryNeed(c, BertTask::kPretrain, adam, 1, 2, 0);
  ASSERT_TRUE(one.ok()) << one.status();
  // The whole model while initialising, (4 + 2 slots + 2 workers)
  // shard-sized buffers and the checkpoint buffer (parameters + 2 slots):
  // the shard holds all of it.
  EXPECT_EQ(one->bytes, total * 4 + total * 4 * (4 + 2 + 2) + total * 4 * 3);
  EXPECT_NE(one->detail.find("2 optimizer slot(s)"), std::string::npos);
  // Two shards: each holds about half; the largest is what placement uses.
  auto s0 = ShardMemoryNeed(c, BertTask::kPretrain, adam, 2, 2, 0);
  auto s1 = ShardMemoryNeed(c, BertTask::kPretrain, adam, 2, 2, 1);
  auto largest = ShardMemoryNeed(c, BertTask::kPretrain, adam, 2, 2);
  ASSERT_TRUE(s0.ok() && s1.ok() && largest.ok());
  EXPECT_LT(s0->bytes, one->bytes);
  EXPECT_EQ(largest->bytes, std::max(s0->bytes, s1->bytes));
  // More workers, more staging.
  auto many = ShardMemoryNeed(c, BertTask::kPretrain, adam, 2, 16);
  ASSERT_TRUE(many.ok());
  EXPECT_GT(many->bytes, largest->bytes);
  EXPECT_FALSE(ShardMemoryNeed(c, BertTask::kPretrain, adam, 2, 2, 2).ok());
}

TEST(MemoryPlanTest, WorkerNeedIsTheModelsAllocationAndAClientBuffer) {
  const BertConfig c = Tiny();
  const int64_t params =
      ParamLayout::ForBert(c, BertTask::kPretrain).total_size();
  MemoryNeed n = TrainWorkerMemoryNeed(c, BertTask::kPretrain, 8, 128, 20);
  EXPECT_EQ(n.bytes,
            BertModel<float>::MemoryBytes(c, BertTask::kPretrain, 8, 128, 20) +
                params * 4);
  // Activations grow with the batch.
  EXPECT_GT(TrainWorkerMemoryNeed(c, BertTask::kPretrain, 64, 128, 20).bytes,
            n.bytes);
  EXPECT_NE(n.detail.find("batch 8 x seq 128"), std::string::npos);
  // Classification has no masked positions: 0 is taken as 1.
  EXPECT_EQ(TrainWorkerMemoryNeed(c, BertTask::kClassify, 8, 128, 0).bytes,
            TrainWorkerMemoryNeed(c, BertTask::kClassify, 8, 128, 1).bytes);
}

TEST(MemoryPlanTest, FitsWithinTheHeadroomOfAKnownLimit) {
  EXPECT_TRUE(FitsMemory(900, 1000));
  EXPECT_FALSE(FitsMemory(901, 1000));
  EXPECT_TRUE(FitsMemory(int64_t{1} << 40, 0));  // unknown limit
}

}  // namespace
}  // namespace bertps

#include "common/ps/partition.h"

#include <map>

#include "common/model/bert_config.h"
#include "gtest/gtest.h"

namespace bertps {
namespace ps {
namespace {

TEST(PartitionPlan, CoversEveryElementExactlyOnceAndBalances) {
  for (const char* preset : {"tiny", "base"}) {
    BertConfig c = *PresetBertConfig(preset);
    ParamLayout layout = ParamLayout::ForBert(c, BertTask::kPretrain);
    for (int shards : {1, 2, 3, 7}) {
      auto plan = PartitionPlan::Make(layout, shards);
      ASSERT_TRUE(plan.ok());
      std::map<int, int64_t> covered;
      for (const SliceSpec& s : plan->slices()) {
        ASSERT_LT(s.begin, s.end);
        covered[s.tensor] += s.size();
      }
      for (size_t t = 0; t < layout.tensors().size(); ++t) {
        EXPECT_EQ(covered[t], layout.tensors()[t].size) << t;
      }
      int64_t total = 0, most = 0;
      for (int s = 0; s < shards; ++s) {
        total += plan->shard_size(s);
        most = std::max(most, plan->shard_size(s));
        int64_t off = 0;
        for (int i : plan->shard_slices(s)) {
          EXPECT_EQ(plan->slices()[i].shard_offset, off);
          off += plan->slices()[i].size();
        }
      }
      EXPECT_EQ(total, layout.total_size());
      // Within 15% of a perfect split for the real presets.
      EXPECT_LT(most, 1.15 * total / shards + 1) << preset << " " << shards;
    }
  }
}

TEST(PartitionPlan, IsAPureFunction) {
  BertConfig c = *PresetBertConfig("mini");
  ParamLayout layout = ParamLayout::ForBert(c, BertTask::kPretrain);
  EXPECT_EQ(PartitionPlan::Make(layout, 3)->ToText(),
            PartitionPlan::Make(layout, 3)->ToText());
  EXPECT_NE(PartitionPlan::Make(layout, 3)->ToText(),
            PartitionPlan::Make(layout, 2)->ToText());
  EXPECT_FALSE(PartitionPlan::Make(layout, 0).ok());
}

TEST(PartitionPlan, WordEmbeddingsAreSplitByRows) {
  BertConfig c = *PresetBertConfig("tiny");
  ParamLayout layout = ParamLayout::ForBert(c, BertTask::kPretrain);
  auto plan = PartitionPlan::Make(layout, 2);
  int pieces = 0;
  for (const SliceSpec& s : plan->slices()) {
    if (s.name == "bert.embeddings.word_embeddings.weight") {
      ++pieces;
      EXPECT_EQ(s.begin % c.hidden_size, 0);  // whole rows
      EXPECT_EQ(s.end % c.hidden_size, 0);
    }
  }
  EXPECT_GT(pieces, 1);
}

}  // namespace
}  // namespace ps
}  // namespace bertps

// The memory plan (common/cluster/memory_plan.h) against what a ShardCore
// really holds on the heap: a shard of a model big enough that its buffers
// dominate the heap, made and then stepped by every worker, holds no more
// than ShardMemoryNeed says (the figure the shard checks its limit with and
// the coordinator places it by), and not much less once the whole model it
// builds at the start is freed: a plan that only restated its own formula
// could drift from the code either way unseen.
#include <malloc.h>

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "common/cluster/memory_plan.h"
#include "common/cluster/plan_for.h"
#include "common/model/params.h"
#include "common/status.h"
#include "gtest/gtest.h"
#include "server/ps/shard.h"
#include "server/ps/shard_test_util.h"

namespace bertps {
namespace ps {
namespace {

int64_t HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);
}

BertConfig Medium() {
  BertConfig c;
  c.vocab_size = 8000;
  c.hidden_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 512;
  c.max_position_embeddings = 128;
  return c;
}

TEST(ShardMemory, TheHeapOfAShardIsWithinItsPlan) {
  const BertConfig config = Medium();
  const int64_t total =
      ParamLayout::ForBert(config, BertTask::kPretrain).total_size();
  ASSERT_GT(total * 4, 4 << 20);  // buffers of megabytes: noise is small
  struct Case {
    int shards, workers;
  };
  for (Case k : {Case{1, 1}, Case{1, 4}, Case{2, 3}}) {
    // Every shard of the job in this process (their heaps together against
    // the sum of their plans).
    int64_t planned = 0, steady = 0;
    std::vector<ShardOptions> options;
    for (int shard = 0; shard < k.shards; ++shard) {
      ShardOptions o;
      o.config = config;
      o.num_shards = k.shards;
      o.shard = shard;
      o.optimizer.learning_rate = 1e-3;
      o.job_plan = PlanFor(BSP, k.workers, o.optimizer);
      o.wait_timeout = absl::Seconds(30);
      absl::StatusOr<MemoryNeed> need =
          ShardMemoryNeed(config, BertTask::kPretrain, o.optimizer, k.shards,
                          k.workers, shard);
      ASSERT_TRUE(need.ok()) << need.status();
      planned += need->bytes;
      // What the plan counts beyond the whole model a shard builds at the
      // start (freed once it has its slice).
      steady += need->bytes - total * 4;
      options.push_back(o);
    }
    const int64_t before = HeapInUse();
    {
      LocalLink link;
      std::vector<std::unique_ptr<ShardCore>> cores;
      for (const ShardOptions& o : options) {
        auto core = ShardCore::Create(o, k.shards > 1 ? &link : nullptr);
        ASSERT_TRUE(core.ok()) << core.status();
        link.Add(core->get());
        cores.push_back(std::move(*core));
      }
      // Two steps of every worker on every shard: staging buffers, the
      // aggregate, the optimizer state and the published snapshot in use.
      for (int64_t step = 0; step < 2; ++step) {
        std::vector<std::thread> pushes;
        std::vector<absl::Status> st(k.workers * k.shards);
        for (int c = 0; c < k.shards; ++c) {
          for (int w = 0; w < k.workers; ++w) {
            pushes.emplace_back([&, c, w] {
              st[c * k.workers + w] =
                  PushConst(cores[c].get(), w, step, 0.01f).status();
            });
          }
        }
        for (std::thread& t : pushes) t.join();
        for (const absl::Status& s : st) ASSERT_TRUE(s.ok()) << s;
      }
      // A checkpoint: its buffer (one shard file) stays for the next one.
      for (auto& core : cores) {
        auto c = core->Checkpoint(
            absl::StrCat(::testing::TempDir(), "/memory-ckpt-", k.shards, "-",
                         k.workers),
            2, absl::Now() + absl::Seconds(30));
        ASSERT_TRUE(c.ok()) << c.status();
      }
      const int64_t held = HeapInUse() - before;
      std::printf("shards %d workers %d: heap held %.1f MiB, plan %.1f MiB "
                  "(steady part %.1f MiB)\n",
                  k.shards, k.workers, held / 1048576.0, planned / 1048576.0,
                  steady / 1048576.0);
      EXPECT_LE(held, planned) << "the plan underestimates the shard";
      EXPECT_GE(held, steady * 9 / 10) << "the plan overestimates the shard";
    }
  }
}

}  // namespace
}  // namespace ps
}  // namespace bertps

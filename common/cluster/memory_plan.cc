#include "common/cluster/memory_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/memory_limit.h"
#include "common/model/bert.h"
#include "common/model/params.h"
#include "common/ps/partition.h"
#include "common/status.h"

namespace bertps {

absl::StatusOr<MemoryNeed> ShardMemoryNeed(const BertConfig& config,
                                           BertTask task,
                                           const optim::OptimizerConfig& opt,
                                           int num_shards, int num_workers,
                                           int shard) {
  const ParamLayout layout = ParamLayout::ForBert(config, task);
  ASSIGN_OR_RETURN(ps::PartitionPlan plan,
                   ps::PartitionPlan::Make(layout, num_shards));
  int64_t n = 0;
  if (shard >= 0) {
    if (shard >= num_shards) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard index ", shard, " outside [0, ", num_shards, ")"));
    }
    n = plan.shard_size(shard);
  } else {
    for (int s = 0; s < num_shards; ++s) n = std::max(n, plan.shard_size(s));
  }
  const int64_t slots = optim::StateSlots(opt);
  const int64_t f = static_cast<int64_t>(sizeof(float));
  MemoryNeed need;
  // The checkpoint buffer (server/ps/checkpoint_writer.h): the slice's
  // parameters and optimizer state, one file, kept for the next write.
  need.bytes = layout.total_size() * f +
               n * f * (4 + slots + std::max(num_workers, 1)) +
               n * f * (1 + slots);
  need.detail = absl::StrCat(
      n, " of the model's ", layout.total_size(), " parameters on ",
      num_shards, " shard(s), ", slots, " optimizer slot(s), ", num_workers,
      " worker staging buffer(s), a checkpoint buffer; use more shards or a "
      "smaller model");
  return need;
}

MemoryNeed TrainWorkerMemoryNeed(const BertConfig& config, BertTask task,
                                 int64_t batch, int64_t seq, int64_t preds) {
  const int64_t p = std::max<int64_t>(preds, 1);
  const int64_t params = ParamLayout::ForBert(config, task).total_size();
  MemoryNeed need;
  need.bytes = BertModel<float>::MemoryBytes(config, task, batch, seq, p) +
               params * static_cast<int64_t>(sizeof(float));
  need.detail = absl::StrCat(
      params, " parameters; activations of batch ", batch, " x seq ", seq,
      ": ",
      FormatBytes(BertModel<float>::ActivationBytes(config, task, batch, seq,
                                                    p)),
      "; lower batch_size or use a smaller model");
  return need;
}

bool FitsMemory(int64_t need, int64_t limit_bytes) {
  return limit_bytes <= 0 || static_cast<double>(need) <=
                                 kMemoryHeadroom *
                                     static_cast<double>(limit_bytes);
}

}  // namespace bertps

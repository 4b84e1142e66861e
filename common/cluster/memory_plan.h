// What a train job's members need in memory, estimated from the job alone:
// the figures a parameter-server shard and a train worker check against
// their own limit before allocating (common/memory_limit.h), and the ones
// the coordinator places members by, so that a job that cannot fit is
// refused or waits with the figures instead of being killed later.
//   shard   the whole model while initialising, its slice's parameters, the
//           snapshot being made, the aggregate, optimizer state, one staging
//           buffer per worker (BSP), a spare and the checkpoint buffer (the
//           slice's parameters and state, serialized at a cut)
//   worker  the model's parameters and gradients, the activation arena for
//           its batch and example shape, and a parameter-sized client buffer
// Thread-safety: pure functions.
#ifndef BERTPS_COMMON_CLUSTER_MEMORY_PLAN_H_
#define BERTPS_COMMON_CLUSTER_MEMORY_PLAN_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/model/bert_config.h"
#include "common/model/params.h"
#include "common/optim/optimizer.h"

namespace bertps {

struct MemoryNeed {
  int64_t bytes = 0;
  std::string detail;  // what the bytes are made of, and what lowers them
};

// Shard `shard` of `num_shards` (shard < 0: the largest of them).
absl::StatusOr<MemoryNeed> ShardMemoryNeed(const BertConfig& config,
                                           BertTask task,
                                           const optim::OptimizerConfig& opt,
                                           int num_shards, int num_workers,
                                           int shard = -1);

// One train worker at `batch` examples of `seq` tokens with `preds` masked
// positions (pretraining; 0 otherwise).
MemoryNeed TrainWorkerMemoryNeed(const BertConfig& config, BertTask task,
                                 int64_t batch, int64_t seq, int64_t preds);

// The fraction of a member's limit a need may use (headroom for the
// allocator, gRPC buffers and the rest of the process).
inline constexpr double kMemoryHeadroom = 0.9;

// Whether `need` fits within kMemoryHeadroom of `limit_bytes` (<= 0:
// unknown, taken to fit).
bool FitsMemory(int64_t need, int64_t limit_bytes);

}  // namespace bertps

#endif  // BERTPS_COMMON_CLUSTER_MEMORY_PLAN_H_

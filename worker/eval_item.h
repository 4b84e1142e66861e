// Eval items: the sufficient statistics of one part of an eval data file
// under one checkpoint (a consistent snapshot: every tensor of one version,
// each shard file checked against the manifest).
//
// An item reads the TFRecord records k of item.input with
// k % item.parts == item.part, in batches of spec.batch_size, forward only,
// dropout off, and sums: MLM weighted NLL, weight and correct predictions,
// NSP correct and NLL, classification NLL and the confusion matrix
// (true x predicted, first maximum of the logits). Sums, never means, so the
// coordinator's merge equals one process over all the records. The model
// (config and task) is the checkpoint's own.
//
// Thread-safety: an EvalItemRunner is used by one thread at a time.
#ifndef BERTPS_WORKER_EVAL_ITEM_H_
#define BERTPS_WORKER_EVAL_ITEM_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/kernels/matmul.h"
#include "common/model/bert.h"
#include "proto/coordinator.pb.h"

namespace bertps {

class EvalItemRunner {
 public:
  EvalItemRunner();
  ~EvalItemRunner();
  // One item; keeps the last checkpoint's parameters for the next item.
  absl::StatusOr<WorkResult> Run(const JobSpec& spec, const WorkItem& item,
                                 const std::atomic<bool>& cancel);

 private:
  absl::Status Load(const std::string& manifest, int batch, int seq,
                    int preds);

  kernels::MatmulEngine mm_;
  std::string manifest_;  // loaded checkpoint
  int64_t version_ = 0;
  int batch_ = 0, seq_ = 0, preds_ = 0;
  std::vector<float> params_;
  std::unique_ptr<BertModel<float>> model_;
};

}  // namespace bertps

#endif  // BERTPS_WORKER_EVAL_ITEM_H_

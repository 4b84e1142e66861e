// The subcommands of bert_local (single-process BERT), behind plain option
// structs so that tests drive them without flags.
// Thread-safety: each call is independent.
#ifndef BERTPS_TOOLS_BERT_LOCAL_H_
#define BERTPS_TOOLS_BERT_LOCAL_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/kernels/matmul.h"
#include "common/model/bert_config.h"
#include "common/model/params.h"
#include "common/optim/optimizer_config.h"

namespace bertps {

struct LocalOptions {
  BertConfig config;
  BertTask task = BertTask::kPretrain;
  std::string weights;     // grad, eval
  std::string batch_file;  // grad
  std::string out;         // grad: gradients; train: final weights
  std::vector<std::string> data;  // train, eval: TFRecord globs
  std::string init;        // train: initial weights (empty: BERT init)
  int batch_size = 32;     // train, eval
  int64_t steps = 100;     // train
  uint64_t seed = 12345;
  bool dropout = true;     // train
  int64_t log_every = 10;  // train
  optim::OptimizerConfig optimizer;
  // grad, train, eval: the products' precision (matmul.h); the JSON lines
  // say which one ran.
  kernels::Precision precision = kernels::Precision::kFp32;
};

// Loss and the gradient of every parameter for one batch file, dropout off.
// Prints one JSON line: {"mlm_loss":..,"nsp_loss":..,"loss":..,
// "precision":..} or, for classify, {"loss":..,"logits":[[..],..],..}.
absl::Status RunGrad(const LocalOptions& o, std::ostream& out);

// Plain single-process training; prints one JSON line per log_every steps
// and a final summary line.
absl::Status RunTrain(const LocalOptions& o, std::ostream& out);

// One pass over the data: MLM accuracy, MLM loss, NSP accuracy (pretrain) or
// accuracy and loss (classify), printed as one JSON line.
absl::Status RunEval(const LocalOptions& o, std::ostream& out);

// Writes `files` TFRecord files of random pretraining examples for smoke
// tests and benchmarks where real text does not matter: tokens from a band of
// 100 ids, half of each sequence one repeated token, which every masked
// position predicts; the NSP label is that token's parity.
absl::Status RunSyntheticData(const std::string& dir, int files,
                              int examples_per_file, int seq, int preds,
                              int vocab, uint64_t seed);

}  // namespace bertps

#endif  // BERTPS_TOOLS_BERT_LOCAL_H_

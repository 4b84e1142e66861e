// The parameter layout of a BERT model: every tensor under its Hugging Face
// name, with shape and offset into one flat buffer (parameters, gradients and
// optimizer state all use the same layout).
//
// Order: embeddings, then per layer [query, key, value weights][query, key,
// value biases] (contiguous, so the three projections run as one fused
// (3H, H) product), attention output, FFN, then the pooler and the heads.
// The layout is a pure function of (config, task).
// Thread-safety: immutable after construction.
#ifndef BERTPS_COMMON_MODEL_PARAMS_H_
#define BERTPS_COMMON_MODEL_PARAMS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model/bert_config.h"

namespace bertps {

enum class BertTask {
  kPretrain,  // MLM (tied decoder) + NSP heads
  kClassify,  // sequence classification head on the pooled output
};

absl::string_view BertTaskName(BertTask task);
// "pretrain" or "classify"; InvalidArgument otherwise.
absl::StatusOr<BertTask> ParseBertTask(absl::string_view name);

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // elements into the flat buffer
  int64_t size = 0;    // elements
  bool decay = true;   // weight decay applies (not LayerNorm, not bias)
  // The model reads this tensor only as an operand of matrix products (the
  // weight of a dense layer: LinearForward/LinearBackward), never
  // element-wise or by lookup. A bf16 job rounds it to bf16 wherever it is
  // read, so it may travel to workers as bf16 and give the same bits
  // (PullRequest.bf16_products). The embedding tables (looked up in fp32),
  // biases and LayerNorm parameters are not.
  bool product_only = false;
};

class ParamLayout {
 public:
  static ParamLayout ForBert(const BertConfig& config, BertTask task);

  const std::vector<ParamSpec>& tensors() const { return tensors_; }
  int64_t total_size() const { return total_; }
  // nullptr when absent.
  const ParamSpec* Find(absl::string_view name) const;
  // Offset of a tensor that must exist (programmer error otherwise).
  int64_t Offset(absl::string_view name) const;
  // Index into tensors() of a tensor that must exist.
  int Index(absl::string_view name) const;

 private:
  void Add(std::string name, std::vector<int64_t> shape);
  std::vector<ParamSpec> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  int64_t total_ = 0;
};

// BERT's initialisation: weights ~ truncated normal (std initializer_range,
// redrawn beyond 2 std), biases 0, LayerNorm weight 1 / bias 0.
template <typename T>
void InitBertParams(const ParamLayout& layout, const BertConfig& config,
                    uint64_t seed, T* params);

}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_PARAMS_H_

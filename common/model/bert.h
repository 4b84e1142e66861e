// BertModel: BERT forward and hand-written backward over flat buffers.
//
// One allocation each for parameters, gradients and activations, sized at
// Create() for (max_batch, max_seq, max_preds); a step allocates nothing.
// Parameters and gradients share ParamLayout (Hugging Face names). The MLM
// decoder is tied to the word embeddings: its gradient is added into the word
// embedding gradient.
//
// T = float runs the oneDNN kernels; T = double runs the naive reference
// kernels (used by the finite-difference checks).
//
// Dimensions used in shape comments: B batch, S sequence, P masked positions
// per sequence, H hidden, NH heads, D = H / NH, I intermediate, V vocabulary,
// L layers, NL labels.
//
// Thread-safety: thread-compatible (one step at a time per instance). The
// caller owns the MatmulEngine, which must outlive the model.
#ifndef BERTPS_COMMON_MODEL_BERT_H_
#define BERTPS_COMMON_MODEL_BERT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/aligned_vector.h"
#include "common/kernels/matmul.h"
#include "common/model/bert_config.h"
#include "common/model/encoder_layer.h"
#include "common/model/params.h"
#include "common/model/softmax.h"

namespace bertps {

// A batch in BERT's feature layout (read-only views, row-major).
struct BertBatchView {
  int64_t batch = 0, seq = 0, preds = 0;
  const int32_t* input_ids = nullptr;            // (B, S)
  const int32_t* input_mask = nullptr;           // (B, S)
  const int32_t* segment_ids = nullptr;          // (B, S)
  const int32_t* masked_lm_positions = nullptr;  // (B, P)  pretrain
  const int32_t* masked_lm_ids = nullptr;        // (B, P)  pretrain
  const float* masked_lm_weights = nullptr;      // (B, P)  pretrain
  const int32_t* next_sentence_labels = nullptr; // (B)     pretrain
  const int32_t* label_ids = nullptr;            // (B)     classify
};

struct StepOptions {
  bool train = false;     // dropout on
  bool backward = true;   // compute gradients (else forward and loss only)
  uint64_t seed = 0;      // dropout stream
  int64_t step = 0;       // dropout stream
  int64_t example_offset = 0;  // global index of this batch's first example
  // Loss denominators. 0 = this batch's own (sum of MLM weights + 1e-5; B).
  // Data-parallel workers pass the global batch's so that gradients add up
  // exactly to the single-process gradient of the whole batch.
  double mlm_denominator = 0;
  double example_denominator = 0;
  // Called during backward each time a group of parameter gradients is
  // final (indices into ParamLayout::tensors()): the heads and pooler, then
  // each encoder layer from the last, then the embeddings. Lets a worker
  // push gradients while backward goes on.
  std::function<void(const std::vector<int>& tensors)> on_grads_ready;
  // Called during backward once the gradient of `tensor` is final except
  // for `rows` (sorted, unique rows of it; the rest of it will not change):
  // the word embedding, whose rows of the batch's input ids are added last.
  // on_grads_ready names the tensor again when those rows are final too.
  std::function<void(int tensor, const std::vector<int64_t>& rows)>
      on_grads_ready_except_rows;
  // Called in forward before the parameters of a group are first read
  // (ParamGroup*): lets a worker start forward while parameters still
  // arrive. A non-OK status ends the step with it.
  std::function<absl::Status(int group)> before_params;
  // Called once backward begins, before it writes (or zeroes) the
  // gradients: e.g. a worker computing several slots ends the writes of the
  // previous slot's push, whose gradients lie in the same buffer, while
  // this slot's forward ran.
  std::function<void()> before_backward;
  // Backward adds to the gradients of the previous Step instead of
  // overwriting them: gradient accumulation over micro-batches (with the
  // whole batch's denominators the sum is the whole batch's gradient).
  bool accumulate = false;
};

// Parameter groups of forward, in the order it reads them:
//   kParamGroupEmbeddings  the word-embedding rows of the batch's input ids,
//                          the position and token-type embeddings and the
//                          embedding LayerNorm;
//   ParamGroupOfLayer(i)   encoder layer i;
//   ParamGroupRest(config) everything else: the pooler, the heads and the
//                          whole word embedding (the tied decoder).
inline constexpr int kParamGroupEmbeddings = 0;
inline int ParamGroupOfLayer(int layer) { return 1 + layer; }
inline int ParamGroupRest(const BertConfig& c) {
  return 1 + c.num_hidden_layers;
}
// The sorted distinct input ids of a batch (the word-embedding rows that
// forward reads and backward's embedding step adds to).
std::vector<int64_t> DistinctInputIds(const BertBatchView& b);

struct StepResult {
  double loss = 0;      // mlm_loss + nsp_loss, or the classification loss
  double mlm_loss = 0;  // pretrain
  double nsp_loss = 0;  // pretrain
  XentResult mlm;       // sufficient statistics (pretrain)
  XentResult nsp;       // (pretrain)
  XentResult cls;       // (classify)
  std::vector<float> logits;  // (B, NL) classify, else empty
};

// Checks a batch against a model's capacity (shapes, ids and labels in
// range, mask 0/1, what the task needs).
absl::Status ValidateBertBatch(const BertConfig& config, BertTask task,
                               int64_t max_batch, int64_t max_seq,
                               int64_t max_preds, const BertBatchView& b);

template <typename T>
class BertModel {
 public:
  static absl::StatusOr<std::unique_ptr<BertModel>> Create(
      const BertConfig& config, BertTask task, int64_t max_batch,
      int64_t max_seq, int64_t max_preds, kernels::MatmulEngine* mm);
  ~BertModel();

  const BertConfig& config() const { return config_; }
  BertTask task() const { return task_; }
  const ParamLayout& layout() const { return layout_; }
  T* params() { return params_.data(); }
  const T* params() const { return params_.data(); }
  T* grads() { return grads_.data(); }
  int64_t num_params() const { return layout_.total_size(); }
  T* param(absl::string_view name) { return params_.data() + layout_.Offset(name); }
  T* grad(absl::string_view name) { return grads_.data() + layout_.Offset(name); }

  // Validates the batch (shapes within capacity, ids/labels in range, mask
  // 0/1), then runs forward and, if requested, backward: the gradients are
  // overwritten, or added to with StepOptions::accumulate.
  absl::StatusOr<StepResult> Step(const BertBatchView& batch,
                                  const StepOptions& options);

  // Bytes of the activation arena (for memory reports).
  int64_t activation_bytes() const;

  // What Create() would allocate, without allocating: the activation arena
  // for (max_batch, max_seq, max_preds), and that plus the parameters and
  // their gradients. For refusing a model that cannot fit before trying.
  static int64_t ActivationBytes(const BertConfig& config, BertTask task,
                                 int64_t max_batch, int64_t max_seq,
                                 int64_t max_preds);
  static int64_t MemoryBytes(const BertConfig& config, BertTask task,
                             int64_t max_batch, int64_t max_seq,
                             int64_t max_preds);

 private:
  struct Layer;
  struct Buffers;
  // Lays the activation buffers out in `f` as offsets from the arena's
  // start (the constructor turns them into pointers); returns the bytes.
  static int64_t CarveBuffers(const BertConfig& config, BertTask task,
                              int64_t max_batch, int64_t max_seq,
                              int64_t max_preds, Buffers* f);
  BertModel(const BertConfig& config, BertTask task, int64_t max_batch,
            int64_t max_seq, int64_t max_preds, kernels::MatmulEngine* mm);
  absl::Status ValidateBatch(const BertBatchView& b) const;
  absl::Status Forward(const BertBatchView& b, const StepOptions& o,
                       StepResult* r);
  void Backward(const BertBatchView& b, const StepOptions& o);
  EncoderLayerScratch<T> Scratch() const;
  EncoderLayerStep LayerStep(int64_t layer, const BertBatchView& b,
                             const StepOptions& o) const;

  const BertConfig config_;
  const BertTask task_;
  const int64_t max_batch_, max_seq_, max_preds_;
  kernels::MatmulEngine* const mm_;
  const ParamLayout layout_;
  AlignedVector<T> params_;
  AlignedVector<T> grads_;
  std::unique_ptr<Buffers> buf_;
};

extern template class BertModel<float>;
extern template class BertModel<double>;

}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_BERT_H_

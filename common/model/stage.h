// BertStage: one pipeline stage of BERT for model parallelism.
//
// A stage holds a contiguous range of encoder layers [layer_begin,
// layer_end); stage 0 also holds the embeddings, the last stage the pooler
// and the heads (with S = 1 the stage is the whole model). Its parameters are
// a subset of the model's ParamLayout (Hugging Face names), packed in layout
// order into one local flat buffer, so a stage pulls and pushes exactly its
// own tensors of the parameter-server shards.
//
// Tied weights: in pretraining the MLM decoder (last stage) is tied to the
// word embeddings (stage 0). The last stage keeps its own copy of
// bert.embeddings.word_embeddings.weight (pulled from the parameter server
// like every other tensor) and its gradient buffer receives only the
// decoder's contribution; stage 0's receives only the embedding lookup's.
// Both push into the same PS tensor, which sums pushes, so the applied
// gradient is exactly the single-process model's (where both contributions
// are added into one buffer).
//
// Micro-batches: `slots` sets of activations are allocated at Create(); the
// caller runs Forward(slot, ...) and later Backward(slot, ...) for each
// micro-batch in flight (GPipe needs M slots, 1F1B min(M, S - stage)).
// Parameter gradients accumulate over Backward calls until ZeroGrads().
// On the last stage Forward also computes the loss and, when
// options.backward, the heads' gradients right away (the head activations
// are then no longer needed, so they are not kept per slot).
//
// Loss denominators: pass the step's global ones in StepOptions
// (mlm_denominator, example_denominator over all micro-batches and
// replicas) and the micro-batch's global first example in example_offset
// (dropout keys): the gradient summed over micro-batches (and stages for the
// tied tensor) then equals BertModel's for the whole batch.
//
// Dimensions: B micro-batch, S sequence, H hidden.
// Thread-safety: thread-compatible (one call at a time). The caller owns the
// MatmulEngine, which must outlive the stage.
#ifndef BERTPS_COMMON_MODEL_STAGE_H_
#define BERTPS_COMMON_MODEL_STAGE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/aligned_vector.h"
#include "common/kernels/matmul.h"
#include "common/model/bert.h"
#include "common/model/bert_config.h"
#include "common/model/encoder_layer.h"
#include "common/model/params.h"

namespace bertps {

struct StageSpec {
  int index = 0;
  int num_stages = 1;
  int64_t layer_begin = 0;  // encoder layers [layer_begin, layer_end)
  int64_t layer_end = 0;
  bool first() const { return index == 0; }
  bool last() const { return index == num_stages - 1; }
};

// Cuts BERT into `num_stages` contiguous ranges of at least one layer.
// layers_per_stage empty: balanced by estimated compute per example at
// (seq, preds) (embeddings on stage 0, pooler and heads on the last stage),
// minimising the slowest stage. Otherwise the explicit counts (summing to
// num_hidden_layers).
absl::StatusOr<std::vector<StageSpec>> SplitBertStages(
    const BertConfig& config, BertTask task, int num_stages,
    const std::vector<int>& layers_per_stage, int64_t seq = 128,
    int64_t preds = 20);

// The stage's tensors as indices into layout.tensors(), in layout order.
// The last stage of a pretraining model includes the word embeddings (tied
// decoder).
std::vector<int> StageTensorIndices(const ParamLayout& layout,
                                    const BertConfig& config, BertTask task,
                                    const StageSpec& spec);

template <typename T>
class BertStage {
 public:
  static absl::StatusOr<std::unique_ptr<BertStage>> Create(
      const BertConfig& config, BertTask task, const StageSpec& spec,
      int64_t max_batch, int64_t max_seq, int64_t max_preds, int slots,
      kernels::MatmulEngine* mm);
  ~BertStage();

  const BertConfig& config() const { return config_; }
  const StageSpec& spec() const { return spec_; }
  int slots() const { return static_cast<int>(slots_.size()); }
  // The whole model's layout and this stage's tensors in it.
  const ParamLayout& model_layout() const { return layout_; }
  const std::vector<int>& tensors() const { return tensors_; }
  // Local buffers: the stage's tensors packed in layout order.
  int64_t num_params() const { return num_params_; }
  T* params() { return params_.data(); }
  const T* params() const { return params_.data(); }
  T* grads() { return grads_.data(); }
  const T* grads() const { return grads_.data(); }
  // Local offset of model tensor `tensor` (index into model_layout()), or -1
  // when the stage does not hold it.
  int64_t local_offset(int tensor) const { return local_offset_[tensor]; }
  // nullptr when the stage does not hold `name`.
  T* param(absl::string_view name);
  T* grad(absl::string_view name);

  void ZeroGrads();
  // Elements of the activation (and its gradient) between stages: (B*S, H).
  int64_t boundary_size(int64_t batch, int64_t seq) const {
    return batch * seq * config_.hidden_size;
  }

  // Forward of one micro-batch into `slot`. `input` (B*S, H) is the previous
  // stage's output (ignored on stage 0, which reads the token ids); it is
  // copied, so the caller may reuse it. Returns the losses on the last stage
  // (zeros elsewhere).
  absl::StatusOr<StepResult> Forward(int slot, const BertBatchView& batch,
                                     const StepOptions& options,
                                     const T* input);
  // This stage's output of the micro-batch in `slot`: (B*S, H), valid until
  // the slot's next Forward. Not on the last stage.
  const T* output(int slot) const;
  // Backward of the micro-batch in `slot` (the same batch and options as
  // its Forward). d_output (B*S, H) from the next stage (ignored on the last
  // stage); d_input (B*S, H) receives the gradient of the input (not written
  // on stage 0). Parameter gradients accumulate.
  absl::Status Backward(int slot, const BertBatchView& batch,
                        const StepOptions& options, const T* d_output,
                        T* d_input);

  int64_t activation_bytes() const;

 private:
  struct Slot;
  struct Shared;
  BertStage(const BertConfig& config, BertTask task, const StageSpec& spec,
            int64_t max_batch, int64_t max_seq, int64_t max_preds,
            kernels::MatmulEngine* mm);
  void Allocate(int slots);
  EncoderLayerStep LayerStep(int64_t layer, const BertBatchView& b,
                             const StepOptions& o) const;
  void HeadsForwardBackward(Slot& slot, const BertBatchView& b,
                            const StepOptions& o, const T* x, StepResult* r);
  const T* P(const std::string& name) const;
  T* G(const std::string& name);

  const BertConfig config_;
  const BertTask task_;
  const StageSpec spec_;
  const int64_t max_batch_, max_seq_, max_preds_;
  kernels::MatmulEngine* const mm_;
  const ParamLayout layout_;
  std::vector<int> tensors_;
  std::vector<int64_t> local_offset_;  // per model tensor, -1 if absent
  int64_t num_params_ = 0;
  AlignedVector<T> params_;
  AlignedVector<T> grads_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::unique_ptr<Shared> shared_;
};

extern template class BertStage<float>;
extern template class BertStage<double>;

}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_STAGE_H_

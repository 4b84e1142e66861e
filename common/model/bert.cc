#include "common/model/bert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "common/model/activations.h"
#include "common/model/attention.h"
#include "common/model/dropout.h"
#include "common/model/embedding.h"
#include "common/model/encoder_layer.h"
#include "common/model/heads.h"
#include "common/model/model_tensors.h"
#include "common/model/layernorm.h"
#include "common/model/linear.h"
#include "common/status.h"
#include "common/model/eigen_maps.h"

namespace bertps {
namespace {

// Dropout sites (encoder_layer.h).
constexpr uint32_t kSiteEmbedding = kDropoutSiteEmbedding;

// Carves views out of one allocation.
template <typename T>
class Arena {
 public:
  T* Take(int64_t n) {
    T* p = reinterpret_cast<T*>(offset_);
    // 64-byte alignment for every buffer.
    offset_ += ((n * sizeof(T) + 63) / 64) * 64;
    return p;
  }
  int64_t bytes() const { return offset_; }
  void Rebase(T* base) { base_ = base; }
  T* Fix(T* p) const {
    return reinterpret_cast<T*>(reinterpret_cast<char*>(base_) +
                                reinterpret_cast<intptr_t>(p));
  }

 private:
  intptr_t offset_ = 0;
  T* base_ = nullptr;
};

using model_maps::CVec;
using model_maps::RowMat;
using model_maps::Vec;

}  // namespace

// Activations kept for the backward pass, per encoder layer.
template <typename T>
struct BertModel<T>::Layer : EncoderLayerActs<T> {};

template <typename T>
struct BertModel<T>::Buffers {
  AlignedVector<T> arena;
  // The parameters and gradients by role, resolved once.
  ModelTensors<const T> w;
  ModelTensors<T> g;
  // Embeddings.
  T* emb_sum;   // (B*S, H) LayerNorm input
  T* emb_mean;  // (B*S)
  T* emb_rstd;  // (B*S)
  T* x0;        // (B*S, H) embedding output after dropout
  std::vector<Layer> layers;
  // Shared scratch.
  T* qkv;        // (B*S, 3H)
  T* probs_a;    // (B, NH, S, S)
  T* probs_b;    // (B, NH, S, S)
  T* headsa;     // (B, NH, S, D)
  T* headsb;     // (3, B, NH, S, D)
  T* dqkv;       // (B*S, 3H)
  T* d_a;        // (B*S, H)
  T* d_b;        // (B*S, H)
  T* d_c;        // (B*S, H)
  T* d_i;        // (B*S, I)
  // Pooler (both tasks).
  T* h0;         // (B, H) first token of the last layer
  T* pooled;     // (B, H) tanh(dense(h0))
  T* d_pooled;   // (B, H)
  T* d_h0;       // (B, H)
  // Classification head.
  T* pooled_drop;  // (B, H)
  T* cls_logits;   // (B, NL)
  // Pretraining heads.
  T* xm;          // (B*P, H) gathered masked positions
  T* t1;          // (B*P, H) transform dense output
  T* t2;          // (B*P, H) activation output
  T* t3;          // (B*P, H) LayerNorm output
  T* t_mean;      // (B*P)
  T* t_rstd;      // (B*P)
  T* logits;      // (B*P, MlmVocabTile) one tile of the MLM logits
  T* mlm_max;     // (B*P) the MLM logits' row maxima
  T* mlm_sum;     // (B*P) and sums of exp(logit - max)
  T* d_t;         // (B*P, H)
  T* d_t2;        // (B*P, H)
  T* mlm_w;       // (B*P) weights in T
  T* nsp_logits;  // (B, 2)
  std::vector<int32_t> mlm_labels;  // (B*P)
  std::vector<int32_t> argmax;      // (max(B*P, B))
};

template <typename T>
int64_t BertModel<T>::CarveBuffers(const BertConfig& config, BertTask task,
                                   int64_t max_batch, int64_t max_seq,
                                   int64_t max_preds, Buffers* buffers) {
  const int64_t b = max_batch, s = max_seq, h = config.hidden_size;
  const int64_t nh = config.num_attention_heads, inter = config.intermediate_size;
  const int64_t bs = b * s, bp = b * std::max<int64_t>(max_preds, 1);
  Arena<T> ar;
  Buffers& f = *buffers;
  f.emb_sum = ar.Take(bs * h);
  f.emb_mean = ar.Take(bs);
  f.emb_rstd = ar.Take(bs);
  f.x0 = ar.Take(bs * h);
  f.layers.resize(config.num_hidden_layers);
  for (Layer& l : f.layers) {
    l.qkvt = ar.Take(3 * bs * h);
    l.probs = ar.Take(b * nh * s * s);
    l.ctx = ar.Take(bs * h);
    l.attn_sum = ar.Take(bs * h);
    l.ln1_mean = ar.Take(bs);
    l.ln1_rstd = ar.Take(bs);
    l.a = ar.Take(bs * h);
    l.h1 = ar.Take(bs * inter);
    l.g = ar.Take(bs * inter);
    l.ffn_sum = ar.Take(bs * h);
    l.ln2_mean = ar.Take(bs);
    l.ln2_rstd = ar.Take(bs);
    l.out = ar.Take(bs * h);
  }
  f.qkv = ar.Take(bs * 3 * h);
  f.probs_a = ar.Take(b * nh * s * s);
  f.probs_b = ar.Take(b * nh * s * s);
  f.headsa = ar.Take(bs * h);
  f.headsb = ar.Take(3 * bs * h);
  f.dqkv = ar.Take(bs * 3 * h);
  f.d_a = ar.Take(bs * h);
  f.d_b = ar.Take(bs * h);
  f.d_c = ar.Take(bs * h);
  f.d_i = ar.Take(bs * inter);
  f.h0 = ar.Take(b * h);
  f.pooled = ar.Take(b * h);
  f.d_pooled = ar.Take(b * h);
  f.d_h0 = ar.Take(b * h);
  if (task == BertTask::kClassify) {
    f.pooled_drop = ar.Take(b * h);
    f.cls_logits = ar.Take(b * config.num_labels);
  } else {
    f.xm = ar.Take(bp * h);
    f.t1 = ar.Take(bp * h);
    f.t2 = ar.Take(bp * h);
    f.t3 = ar.Take(bp * h);
    f.t_mean = ar.Take(bp);
    f.t_rstd = ar.Take(bp);
    f.logits = ar.Take(bp * MlmVocabTile(bp, config.vocab_size));
    f.mlm_max = ar.Take(bp);
    f.mlm_sum = ar.Take(bp);
    f.d_t = ar.Take(bp * h);
    f.d_t2 = ar.Take(bp * h);
    f.mlm_w = ar.Take(bp);
    f.nsp_logits = ar.Take(b * 2);
  }
  return ar.bytes();
}

template <typename T>
int64_t BertModel<T>::ActivationBytes(const BertConfig& config, BertTask task,
                                      int64_t max_batch, int64_t max_seq,
                                      int64_t max_preds) {
  Buffers f;
  const int64_t bp = max_batch * std::max<int64_t>(max_preds, 1);
  return CarveBuffers(config, task, max_batch, max_seq, max_preds, &f) +
         static_cast<int64_t>(sizeof(int32_t)) *
             (bp + std::max(bp, max_batch));  // labels, argmax
}

template <typename T>
int64_t BertModel<T>::MemoryBytes(const BertConfig& config, BertTask task,
                                  int64_t max_batch, int64_t max_seq,
                                  int64_t max_preds) {
  const int64_t params = ParamLayout::ForBert(config, task).total_size();
  return 2 * params * static_cast<int64_t>(sizeof(T)) +
         ActivationBytes(config, task, max_batch, max_seq, max_preds);
}

template <typename T>
BertModel<T>::BertModel(const BertConfig& config, BertTask task,
                        int64_t max_batch, int64_t max_seq, int64_t max_preds,
                        kernels::MatmulEngine* mm)
    : config_(config),
      task_(task),
      max_batch_(max_batch),
      max_seq_(max_seq),
      max_preds_(max_preds),
      mm_(mm),
      layout_(ParamLayout::ForBert(config, task)),
      params_(layout_.total_size()),
      grads_(layout_.total_size()),
      buf_(std::make_unique<Buffers>()) {
  Buffers& f = *buf_;
  const int64_t bytes =
      CarveBuffers(config, task, max_batch, max_seq, max_preds, &f);
  const int64_t b = max_batch;
  const int64_t bp = b * std::max<int64_t>(max_preds, 1);
  Arena<T> ar;
  f.arena.resize(bytes / sizeof(T) + 1);
  ar.Rebase(f.arena.data());
  // Turn the offsets handed out above into pointers.
  T** fixed[] = {&f.emb_sum, &f.emb_mean, &f.emb_rstd, &f.x0, &f.qkv,
                 &f.probs_a, &f.probs_b, &f.headsa, &f.headsb, &f.dqkv,
                 &f.d_a, &f.d_b, &f.d_c, &f.d_i, &f.h0, &f.pooled,
                 &f.d_pooled, &f.d_h0};
  for (T** p : fixed) *p = ar.Fix(*p);
  for (Layer& l : f.layers) {
    T** lp[] = {&l.qkvt, &l.probs, &l.ctx, &l.attn_sum, &l.ln1_mean,
                &l.ln1_rstd, &l.a, &l.h1, &l.g, &l.ffn_sum, &l.ln2_mean,
                &l.ln2_rstd, &l.out};
    for (T** p : lp) *p = ar.Fix(*p);
  }
  if (task == BertTask::kClassify) {
    f.pooled_drop = ar.Fix(f.pooled_drop);
    f.cls_logits = ar.Fix(f.cls_logits);
  } else {
    T** hp[] = {&f.xm, &f.t1, &f.t2, &f.t3, &f.t_mean, &f.t_rstd,
                &f.logits, &f.mlm_max, &f.mlm_sum, &f.d_t, &f.d_t2,
                &f.mlm_w, &f.nsp_logits};
    for (T** p : hp) *p = ar.Fix(*p);
  }
  f.mlm_labels.resize(bp);
  f.argmax.resize(std::max(bp, b));
  // The tensors by role, resolved once (params_ and grads_ never move).
  const std::function<const T*(const std::string&)> wl =
      [this](const std::string& n) { return params_.data() + layout_.Offset(n); };
  const std::function<T*(const std::string&)> gl =
      [this](const std::string& n) { return grads_.data() + layout_.Offset(n); };
  f.w = ModelTensorsOf<const T>(task, 0, config.num_hidden_layers, true, true,
                                wl);
  f.g = ModelTensorsOf<T>(task, 0, config.num_hidden_layers, true, true, gl);
}

template <typename T>
BertModel<T>::~BertModel() = default;

template <typename T>
EncoderLayerScratch<T> BertModel<T>::Scratch() const {
  const Buffers& f = *buf_;
  EncoderLayerScratch<T> k;
  k.qkv = f.qkv;
  k.probs_a = f.probs_a;
  k.probs_b = f.probs_b;
  k.headsa = f.headsa;
  k.headsb = f.headsb;
  k.dqkv = f.dqkv;
  k.d_b = f.d_b;
  k.d_c = f.d_c;
  k.d_i = f.d_i;
  return k;
}

template <typename T>
EncoderLayerStep BertModel<T>::LayerStep(int64_t layer,
                                         const BertBatchView& bt,
                                         const StepOptions& o) const {
  EncoderLayerStep st;
  st.layer = layer;
  st.b = bt.batch;
  st.s = bt.seq;
  st.key = DropoutKey{o.seed, o.step, 0};
  st.hidden_dropout = o.train ? config_.hidden_dropout_prob : 0.0;
  st.attention_dropout = o.train ? config_.attention_probs_dropout_prob : 0.0;
  st.example_offset = o.example_offset;
  return st;
}

template <typename T>
absl::StatusOr<std::unique_ptr<BertModel<T>>> BertModel<T>::Create(
    const BertConfig& config, BertTask task, int64_t max_batch,
    int64_t max_seq, int64_t max_preds, kernels::MatmulEngine* mm) {
  RETURN_IF_ERROR(config.Validate());
  if (max_batch <= 0 || max_seq <= 0 || max_preds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model capacity must be positive: batch ", max_batch,
                     " seq ", max_seq, " preds ", max_preds));
  }
  if (max_seq > config.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence length ", max_seq, " exceeds max_position_embeddings ",
        config.max_position_embeddings));
  }
  if (task == BertTask::kPretrain && max_preds == 0) {
    return absl::InvalidArgumentError(
        "pretraining needs at least one masked position per sequence");
  }
  try {
    return std::unique_ptr<BertModel<T>>(
        new BertModel<T>(config, task, max_batch, max_seq, max_preds, mm));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate the model: ",
        MemoryBytes(config, task, max_batch, max_seq, max_preds),
        " bytes for batch ", max_batch, " x seq ", max_seq));
  }
}

template <typename T>
int64_t BertModel<T>::activation_bytes() const {
  return static_cast<int64_t>(buf_->arena.size() * sizeof(T));
}

template <typename T>
absl::Status BertModel<T>::ValidateBatch(const BertBatchView& b) const {
  return ValidateBertBatch(config_, task_, max_batch_, max_seq_, max_preds_, b);
}

absl::Status ValidateBertBatch(const BertConfig& config, BertTask task,
                               int64_t max_batch, int64_t max_seq,
                               int64_t max_preds, const BertBatchView& b) {
  if (b.batch <= 0 || b.batch > max_batch || b.seq <= 0 || b.seq > max_seq) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch shape (", b.batch, ", ", b.seq, ") outside model capacity (",
        max_batch, ", ", max_seq, ")"));
  }
  if (!b.input_ids || !b.input_mask || !b.segment_ids) {
    return absl::InvalidArgumentError(
        "batch lacks input_ids, input_mask or segment_ids");
  }
  const int64_t bs = b.batch * b.seq;
  for (int64_t i = 0; i < bs; ++i) {
    if (b.input_ids[i] < 0 || b.input_ids[i] >= config.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("input_ids[", i / b.seq, "][", i % b.seq, "] = ",
                       b.input_ids[i], " outside vocabulary of ",
                       config.vocab_size));
    }
    if (b.segment_ids[i] < 0 || b.segment_ids[i] >= config.type_vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("segment_ids[", i / b.seq, "][", i % b.seq, "] = ",
                       b.segment_ids[i], " outside [0, ",
                       config.type_vocab_size, ")"));
    }
    if (b.input_mask[i] != 0 && b.input_mask[i] != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input_mask[", i / b.seq, "][", i % b.seq, "] must be 0 or 1"));
    }
  }
  if (task == BertTask::kPretrain) {
    if (b.preds <= 0 || b.preds > max_preds) {
      return absl::InvalidArgumentError(
          absl::StrCat("masked positions per sequence ", b.preds,
                       " outside model capacity ", max_preds));
    }
    if (!b.masked_lm_positions || !b.masked_lm_ids || !b.masked_lm_weights ||
        !b.next_sentence_labels) {
      return absl::InvalidArgumentError(
          "pretraining batch lacks masked_lm_* or next_sentence_labels");
    }
    for (int64_t i = 0; i < b.batch * b.preds; ++i) {
      if (b.masked_lm_positions[i] < 0 || b.masked_lm_positions[i] >= b.seq) {
        return absl::InvalidArgumentError(
            absl::StrCat("masked_lm_positions[", i / b.preds, "][",
                         i % b.preds, "] = ", b.masked_lm_positions[i],
                         " outside the sequence"));
      }
      if (b.masked_lm_ids[i] < 0 || b.masked_lm_ids[i] >= config.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("masked_lm_ids[", i / b.preds, "][", i % b.preds,
                         "] = ", b.masked_lm_ids[i], " outside vocabulary"));
      }
      if (!std::isfinite(b.masked_lm_weights[i]) ||
          b.masked_lm_weights[i] < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("masked_lm_weights[", i / b.preds, "][", i % b.preds,
                         "] must be finite and >= 0"));
      }
    }
    for (int64_t i = 0; i < b.batch; ++i) {
      if (b.next_sentence_labels[i] != 0 && b.next_sentence_labels[i] != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "next_sentence_labels[", i, "] = ", b.next_sentence_labels[i],
            " must be 0 or 1"));
      }
    }
  } else {
    if (!b.label_ids) {
      return absl::InvalidArgumentError("classification batch lacks label_ids");
    }
    for (int64_t i = 0; i < b.batch; ++i) {
      if (b.label_ids[i] < 0 || b.label_ids[i] >= config.num_labels) {
        return absl::InvalidArgumentError(
            absl::StrCat("label_ids[", i, "] = ", b.label_ids[i],
                         " outside [0, ", config.num_labels, ")"));
      }
    }
  }
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<StepResult> BertModel<T>::Step(const BertBatchView& batch,
                                              const StepOptions& options) {
  RETURN_IF_ERROR(ValidateBatch(batch));
  StepResult result;
  RETURN_IF_ERROR(Forward(batch, options, &result));
  // A product oneDNN could not run (out of memory) left its output as it
  // was: the step is not used (kernels/matmul.h).
  if (mm_ != nullptr && mm_->failed()) return mm_->status();
  if (options.backward) Backward(batch, options);
  if (mm_ != nullptr && mm_->failed()) return mm_->status();
  return result;
}

std::vector<int64_t> DistinctInputIds(const BertBatchView& b) {
  std::vector<int64_t> ids(b.input_ids, b.input_ids + b.batch * b.seq);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

template <typename T>
absl::Status BertModel<T>::Forward(const BertBatchView& bt,
                                   const StepOptions& o, StepResult* r) {
  Buffers& f = *buf_;
  const BertConfig& c = config_;
  const int64_t b = bt.batch, s = bt.seq, h = c.hidden_size;
  const int64_t bs = b * s;
  const double eps = c.layer_norm_eps;
  const double hp = o.train ? c.hidden_dropout_prob : 0.0;
  const ModelTensors<const T>& w = f.w;
  auto key = [&](uint32_t site) { return DropoutKey{o.seed, o.step, site}; };
  auto need = [&](int group) {
    return o.before_params ? o.before_params(group) : absl::OkStatus();
  };

  // Embeddings: sum, LayerNorm, dropout.
  RETURN_IF_ERROR(need(kParamGroupEmbeddings));
  EmbeddingForward(bt.input_ids, bt.segment_ids, b, s, h, w.emb.word,
                   w.emb.position, w.emb.token_type, f.emb_sum);
  LayerNormForward(f.emb_sum, w.emb.ln_g, w.emb.ln_b, bs, h, eps, f.x0,
                   f.emb_mean, f.emb_rstd);
  DropoutForward(key(kSiteEmbedding), hp, bs, h, s, o.example_offset, f.x0,
                 f.x0);

  const EncoderLayerScratch<T> scratch = Scratch();
  const T* x = f.x0;
  for (int64_t li = 0; li < c.num_hidden_layers; ++li) {
    Layer& l = f.layers[li];
    RETURN_IF_ERROR(need(ParamGroupOfLayer(static_cast<int>(li))));
    EncoderLayerForward<T>(mm_, c, LayerStep(li, bt, o), w.layers[li], x,
                           bt.input_mask, l, scratch);
    x = l.out;
  }

  // Pooler and heads.
  RETURN_IF_ERROR(need(ParamGroupRest(c)));
  HeadsForward<T>(mm_, c, task_, bt, o, w.heads, HeadBuffersOf<T>(f), x, r);
  return absl::OkStatus();
}

template <typename T>
void BertModel<T>::Backward(const BertBatchView& bt, const StepOptions& o) {
  Buffers& f = *buf_;
  const BertConfig& c = config_;
  const int64_t b = bt.batch, s = bt.seq, h = c.hidden_size;
  const int64_t bs = b * s;
  const double hp = o.train ? c.hidden_dropout_prob : 0.0;
  const ModelTensors<const T>& w = f.w;
  const ModelTensors<T>& g = f.g;
  auto key = [&](uint32_t site) { return DropoutKey{o.seed, o.step, site}; };

  if (o.before_backward) o.before_backward();
  if (!o.accumulate) std::fill(grads_.begin(), grads_.end(), T(0));
  // d of the last layer output (B*S, H).
  T* dout = f.d_a;
  std::fill(dout, dout + bs * h, T(0));
  const int word_tensor = layout_.Index("bert.embeddings.word_embeddings.weight");
  auto word_ready_except_inputs = [&] {
    if (o.on_grads_ready_except_rows) {
      o.on_grads_ready_except_rows(word_tensor, DistinctInputIds(bt));
    }
  };

  // Heads and pooler.
  HeadsBackward<T>(mm_, c, task_, bt, o, w.heads, g.heads, HeadBuffersOf<T>(f),
                   dout, word_ready_except_inputs);
  // Tensor groups in layout order: 5 embedding tensors, 16 per layer, then
  // the pooler and the heads.
  constexpr int kEmbeddingTensors = 5, kLayerTensors = 16;
  auto ready = [&](int begin, int end) {
    if (!o.on_grads_ready) return;
    std::vector<int> group;
    for (int t = begin; t < end; ++t) group.push_back(t);
    o.on_grads_ready(group);
  };
  const int num_tensors = static_cast<int>(layout_.tensors().size());
  ready(kEmbeddingTensors + kLayerTensors * c.num_hidden_layers, num_tensors);

  const EncoderLayerScratch<T> scratch = Scratch();
  // Invariant at the top of each layer: f.d_a = d(layer output).
  for (int64_t li = c.num_hidden_layers - 1; li >= 0; --li) {
    Layer& l = f.layers[li];
    const T* x = li == 0 ? f.x0 : f.layers[li - 1].out;
    EncoderLayerBackward<T>(mm_, c, LayerStep(li, bt, o), w.layers[li],
                            g.layers[li], x, l, scratch, f.d_a);
    ready(kEmbeddingTensors + kLayerTensors * li,
          kEmbeddingTensors + kLayerTensors * (li + 1));
  }
  // Embeddings.
  DropoutBackward(key(kSiteEmbedding), hp, bs, h, s, o.example_offset, f.d_a,
                  f.d_b);
  LayerNormBackward(f.d_b, f.emb_sum, w.emb.ln_g, f.emb_mean, f.emb_rstd, bs,
                    h, f.d_c, g.emb.ln_g, g.emb.ln_b);
  EmbeddingBackward(f.d_c, bt.input_ids, bt.segment_ids, b, s, h, g.emb.word,
                    g.emb.position, g.emb.token_type);
  ready(0, kEmbeddingTensors);
}

template class BertModel<float>;
template class BertModel<double>;

}  // namespace bertps

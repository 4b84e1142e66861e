#include "common/model/stage.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "common/model/activations.h"
#include "common/model/dropout.h"
#include "common/model/embedding.h"
#include "common/model/heads.h"
#include "common/model/model_tensors.h"
#include "common/model/layernorm.h"
#include "common/model/linear.h"
#include "common/model/softmax.h"
#include "common/status.h"
#include "glog/logging.h"
#include "common/model/eigen_maps.h"

namespace bertps {
namespace {

using model_maps::CVec;
using model_maps::RowMat;
using model_maps::Vec;

constexpr int kEmbeddingTensors = 5, kLayerTensors = 16;

// Multiply-adds per example, forward (backward is about twice that
// everywhere, so the ratios hold for a training step).
double LayerCost(const BertConfig& c, int64_t s) {
  const double h = c.hidden_size, i = c.intermediate_size;
  return s * (4 * h * h + 2 * h * i) + 2.0 * s * s * h;
}
double HeadCost(const BertConfig& c, BertTask task, int64_t preds) {
  const double h = c.hidden_size;
  if (task == BertTask::kClassify) return h * h + h * c.num_labels;
  return h * h + preds * (h * h + h * c.vocab_size) + 2 * h;
}
double EmbeddingCost(const BertConfig& c, int64_t s) {
  return 8.0 * s * c.hidden_size;  // gathers and LayerNorm: small
}

}  // namespace

absl::StatusOr<std::vector<StageSpec>> SplitBertStages(
    const BertConfig& c, BertTask task, int num_stages,
    const std::vector<int>& layers_per_stage, int64_t seq, int64_t preds) {
  const int64_t L = c.num_hidden_layers;
  if (num_stages < 1 || num_stages > L) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline stages must be in [1, ", L,
                     "] (one encoder layer at least per stage), got ",
                     num_stages));
  }
  std::vector<int64_t> counts;
  if (!layers_per_stage.empty()) {
    if (static_cast<int>(layers_per_stage.size()) != num_stages) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layers_per_stage has ", layers_per_stage.size(),
          " entries for ", num_stages, " stages"));
    }
    int64_t sum = 0;
    for (int n : layers_per_stage) {
      if (n < 1) {
        return absl::InvalidArgumentError(
            "every pipeline stage needs at least one encoder layer");
      }
      sum += n;
      counts.push_back(n);
    }
    if (sum != L) {
      return absl::InvalidArgumentError(
          absl::StrCat("layers_per_stage sums to ", sum, ", the model has ",
                       L, " layers"));
    }
  } else {
    // Linear partition: best[k][j] = the smallest possible slowest stage
    // when stages 0..k-1 hold layers 0..j-1.
    const double lc = LayerCost(c, seq), hc = HeadCost(c, task, preds);
    const double ec = EmbeddingCost(c, seq);
    const double inf = std::numeric_limits<double>::infinity();
    const int S = num_stages;
    std::vector<std::vector<double>> best(S + 1,
                                          std::vector<double>(L + 1, inf));
    std::vector<std::vector<int64_t>> cut(S + 1,
                                          std::vector<int64_t>(L + 1, 0));
    best[0][0] = 0;
    for (int k = 1; k <= S; ++k) {
      for (int64_t j = k; j <= L; ++j) {
        for (int64_t i = k - 1; i < j; ++i) {  // stage k-1 holds [i, j)
          if (best[k - 1][i] == inf) continue;
          double cost = (j - i) * lc;
          if (k == 1) cost += ec;
          if (k == S) cost += hc;
          const double m = std::max(best[k - 1][i], cost);
          if (m < best[k][j]) {
            best[k][j] = m;
            cut[k][j] = i;
          }
        }
      }
    }
    counts.assign(S, 0);
    int64_t j = L;
    for (int k = S; k >= 1; --k) {
      counts[k - 1] = j - cut[k][j];
      j = cut[k][j];
    }
  }
  std::vector<StageSpec> out;
  int64_t begin = 0;
  for (int k = 0; k < num_stages; ++k) {
    StageSpec s;
    s.index = k;
    s.num_stages = num_stages;
    s.layer_begin = begin;
    s.layer_end = begin + counts[k];
    begin = s.layer_end;
    out.push_back(s);
  }
  return out;
}

std::vector<int> StageTensorIndices(const ParamLayout& layout,
                                    const BertConfig& c, BertTask task,
                                    const StageSpec& spec) {
  const int n = static_cast<int>(layout.tensors().size());
  const int heads_begin =
      kEmbeddingTensors + kLayerTensors * static_cast<int>(c.num_hidden_layers);
  std::vector<int> out;
  for (int t = 0; t < n; ++t) {
    bool mine = false;
    if (t < kEmbeddingTensors) {
      mine = spec.first() ||
             (t == 0 && spec.last() && task == BertTask::kPretrain);
    } else if (t < heads_begin) {
      const int64_t layer = (t - kEmbeddingTensors) / kLayerTensors;
      mine = layer >= spec.layer_begin && layer < spec.layer_end;
    } else {
      mine = spec.last();
    }
    if (mine) out.push_back(t);
  }
  return out;
}

// Activations of one micro-batch in flight.
template <typename T>
struct BertStage<T>::Slot {
  // Aligned storage: Eigen's reductions over these buffers then add in the
  // same order in every run (common/aligned_vector.h).
  AlignedVector<T> mem;
  int64_t b = 0, s = 0;
  bool forwarded = false;
  T* input = nullptr;     // (B*S, H) copy of the previous stage's output
  T* emb_sum = nullptr;   // (B*S, H) stage 0: LayerNorm input
  T* emb_mean = nullptr;  // (B*S)
  T* emb_rstd = nullptr;  // (B*S)
  T* x0 = nullptr;        // (B*S, H) stage 0: embedding output
  T* d_top = nullptr;     // (B*S, H) last stage: heads' d(last layer output)
  std::vector<EncoderLayerActs<T>> layers;
};

// Buffers shared by all micro-batches.
template <typename T>
struct BertStage<T>::Shared {
  AlignedVector<T> mem;
  // This stage's parameters and gradients by role, resolved once.
  ModelTensors<const T> w;
  ModelTensors<T> g;
  EncoderLayerScratch<T> scratch;
  T* d_a = nullptr;  // (B*S, H) running gradient
  T* d_b = nullptr;  // (B*S, H)
  // Pooler and heads (last stage).
  T* h0 = nullptr;           // (B, H)
  T* pooled = nullptr;       // (B, H)
  T* d_pooled = nullptr;     // (B, H)
  T* d_h0 = nullptr;         // (B, H)
  T* pooled_drop = nullptr;  // (B, H) classify
  T* cls_logits = nullptr;   // (B, NL)
  T* xm = nullptr;           // (B*P, H)
  T* t1 = nullptr;           // (B*P, H)
  T* t2 = nullptr;           // (B*P, H)
  T* t3 = nullptr;           // (B*P, H)
  T* t_mean = nullptr;       // (B*P)
  T* t_rstd = nullptr;       // (B*P)
  T* logits = nullptr;       // (B*P, MlmVocabTile) one tile
  T* mlm_max = nullptr;      // (B*P)
  T* mlm_sum = nullptr;      // (B*P)
  T* d_t = nullptr;          // (B*P, H)
  T* d_t2 = nullptr;         // (B*P, H)
  T* mlm_w = nullptr;        // (B*P)
  T* nsp_logits = nullptr;   // (B, 2)
  std::vector<int32_t> mlm_labels;  // (B*P)
  std::vector<int32_t> argmax;      // (max(B*P, B))
};

namespace {

// Hands out 64-byte aligned pieces; a first pass with base == nullptr
// counts.
template <typename T>
class Pieces {
 public:
  explicit Pieces(T* base) : base_(base) {}
  T* Take(int64_t n) {
    T* p = base_ == nullptr ? nullptr : base_ + size_;
    const int64_t line = 64 / static_cast<int64_t>(sizeof(T));
    size_ += (n + line - 1) / line * line;
    return p;
  }
  int64_t size() const { return size_; }

 private:
  T* base_;
  int64_t size_ = 0;
};

}  // namespace

template <typename T>
BertStage<T>::BertStage(const BertConfig& config, BertTask task,
                        const StageSpec& spec, int64_t max_batch,
                        int64_t max_seq, int64_t max_preds,
                        kernels::MatmulEngine* mm)
    : config_(config),
      task_(task),
      spec_(spec),
      max_batch_(max_batch),
      max_seq_(max_seq),
      max_preds_(max_preds),
      mm_(mm),
      layout_(ParamLayout::ForBert(config, task)) {
  tensors_ = StageTensorIndices(layout_, config, task, spec);
  local_offset_.assign(layout_.tensors().size(), -1);
  for (int t : tensors_) {
    local_offset_[t] = num_params_;
    num_params_ += layout_.tensors()[t].size;
  }
  params_.assign(num_params_, T(0));
  grads_.assign(num_params_, T(0));
}

template <typename T>
void BertStage<T>::Allocate(int slots) {
  const BertConfig& c = config_;
  const int64_t b = max_batch_, s = max_seq_, h = c.hidden_size;
  const int64_t bs = b * s, bp = b * std::max<int64_t>(max_preds_, 1);
  const int64_t acts = EncoderLayerActsSize<T>(c, b, s);
  const int64_t nlayers = spec_.layer_end - spec_.layer_begin;
  for (int k = 0; k < slots; ++k) {
    auto slot = std::make_unique<Slot>();
    for (int pass = 0; pass < 2; ++pass) {
      Pieces<T> p(pass == 0 ? nullptr : slot->mem.data());
      if (!spec_.first()) slot->input = p.Take(bs * h);
      if (spec_.first()) {
        slot->emb_sum = p.Take(bs * h);
        slot->emb_mean = p.Take(bs);
        slot->emb_rstd = p.Take(bs);
        slot->x0 = p.Take(bs * h);
      }
      if (spec_.last()) slot->d_top = p.Take(bs * h);
      slot->layers.clear();
      for (int64_t l = 0; l < nlayers; ++l) {
        slot->layers.push_back(CarveEncoderLayerActs<T>(c, b, s, p.Take(acts)));
      }
      if (pass == 0) slot->mem.assign(p.size() + 1, T(0));
    }
    slots_.push_back(std::move(slot));
  }
  Shared& f = *(shared_ = std::make_unique<Shared>());
  for (int pass = 0; pass < 2; ++pass) {
    Pieces<T> p(pass == 0 ? nullptr : f.mem.data());
    f.scratch = CarveEncoderLayerScratch<T>(
        c, b, s, p.Take(EncoderLayerScratchSize<T>(c, b, s)));
    f.d_a = p.Take(bs * h);
    f.d_b = p.Take(bs * h);
    if (spec_.last()) {
      f.h0 = p.Take(b * h);
      f.pooled = p.Take(b * h);
      f.d_pooled = p.Take(b * h);
      f.d_h0 = p.Take(b * h);
      if (task_ == BertTask::kClassify) {
        f.pooled_drop = p.Take(b * h);
        f.cls_logits = p.Take(b * c.num_labels);
      } else {
        f.xm = p.Take(bp * h);
        f.t1 = p.Take(bp * h);
        f.t2 = p.Take(bp * h);
        f.t3 = p.Take(bp * h);
        f.t_mean = p.Take(bp);
        f.t_rstd = p.Take(bp);
        f.logits = p.Take(bp * MlmVocabTile(bp, c.vocab_size));
        f.mlm_max = p.Take(bp);
        f.mlm_sum = p.Take(bp);
        f.d_t = p.Take(bp * h);
        f.d_t2 = p.Take(bp * h);
        f.mlm_w = p.Take(bp);
        f.nsp_logits = p.Take(b * 2);
      }
    }
    if (pass == 0) f.mem.assign(p.size() + 1, T(0));
  }
  f.mlm_labels.resize(bp);
  f.argmax.resize(std::max(bp, b));
  const std::function<const T*(const std::string&)> wl =
      [this](const std::string& n) { return P(n); };
  const std::function<T*(const std::string&)> gl =
      [this](const std::string& n) { return G(n); };
  f.w = ModelTensorsOf<const T>(task_, spec_.layer_begin, spec_.layer_end,
                                spec_.first(), spec_.last(), wl);
  f.g = ModelTensorsOf<T>(task_, spec_.layer_begin, spec_.layer_end,
                          spec_.first(), spec_.last(), gl);
}

template <typename T>
BertStage<T>::~BertStage() = default;

template <typename T>
absl::StatusOr<std::unique_ptr<BertStage<T>>> BertStage<T>::Create(
    const BertConfig& config, BertTask task, const StageSpec& spec,
    int64_t max_batch, int64_t max_seq, int64_t max_preds, int slots,
    kernels::MatmulEngine* mm) {
  RETURN_IF_ERROR(config.Validate());
  if (spec.num_stages < 1 || spec.index < 0 || spec.index >= spec.num_stages ||
      spec.layer_begin < 0 || spec.layer_end <= spec.layer_begin ||
      spec.layer_end > config.num_hidden_layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage ", spec.index, " of ", spec.num_stages, " with layers [",
        spec.layer_begin, ", ", spec.layer_end, ") does not fit a model of ",
        config.num_hidden_layers, " layers"));
  }
  if ((spec.first() && spec.layer_begin != 0) ||
      (spec.last() && spec.layer_end != config.num_hidden_layers)) {
    return absl::InvalidArgumentError(
        "the first stage must start at layer 0 and the last end at the last "
        "layer");
  }
  if (max_batch <= 0 || max_seq <= 0 || max_preds < 0 || slots < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage capacity must be positive: batch ", max_batch, " seq ",
        max_seq, " preds ", max_preds, " slots ", slots));
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
  std::unique_ptr<BertStage<T>> st(
      new BertStage<T>(config, task, spec, max_batch, max_seq, max_preds, mm));
  st->Allocate(slots);
  return st;
}

template <typename T>
T* BertStage<T>::param(absl::string_view name) {
  const ParamSpec* p = layout_.Find(name);
  if (p == nullptr) return nullptr;
  const int64_t off = local_offset_[p - layout_.tensors().data()];
  return off < 0 ? nullptr : params_.data() + off;
}

template <typename T>
T* BertStage<T>::grad(absl::string_view name) {
  const ParamSpec* p = layout_.Find(name);
  if (p == nullptr) return nullptr;
  const int64_t off = local_offset_[p - layout_.tensors().data()];
  return off < 0 ? nullptr : grads_.data() + off;
}

template <typename T>
const T* BertStage<T>::P(const std::string& name) const {
  const ParamSpec* p = layout_.Find(name);
  CHECK(p != nullptr) << name;
  const int64_t off = local_offset_[p - layout_.tensors().data()];
  CHECK_GE(off, 0) << "stage " << spec_.index << " does not hold " << name;
  return params_.data() + off;
}

template <typename T>
T* BertStage<T>::G(const std::string& name) {
  const ParamSpec* p = layout_.Find(name);
  CHECK(p != nullptr) << name;
  const int64_t off = local_offset_[p - layout_.tensors().data()];
  CHECK_GE(off, 0) << "stage " << spec_.index << " does not hold " << name;
  return grads_.data() + off;
}

template <typename T>
void BertStage<T>::ZeroGrads() {
  std::fill(grads_.begin(), grads_.end(), T(0));
}

template <typename T>
int64_t BertStage<T>::activation_bytes() const {
  int64_t n = static_cast<int64_t>(shared_->mem.size());
  for (const auto& s : slots_) n += static_cast<int64_t>(s->mem.size());
  return n * static_cast<int64_t>(sizeof(T));
}

template <typename T>
const T* BertStage<T>::output(int slot) const {
  const Slot& s = *slots_[slot];
  return s.layers.back().out;
}

template <typename T>
EncoderLayerStep BertStage<T>::LayerStep(int64_t layer,
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
absl::StatusOr<StepResult> BertStage<T>::Forward(int slot_index,
                                                 const BertBatchView& bt,
                                                 const StepOptions& o,
                                                 const T* input) {
  if (slot_index < 0 || slot_index >= slots()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "micro-batch slot ", slot_index, " outside [0, ", slots(), ")"));
  }
  if (spec_.last() || spec_.first()) {
    // The ends read token ids or labels: validate them.
    RETURN_IF_ERROR(ValidateBertBatch(config_, task_, max_batch_, max_seq_,
                                      max_preds_, bt));
  } else if (bt.batch <= 0 || bt.batch > max_batch_ || bt.seq <= 0 ||
             bt.seq > max_seq_ || bt.input_mask == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "micro-batch shape (", bt.batch, ", ", bt.seq,
        ") outside stage capacity (", max_batch_, ", ", max_seq_,
        ") or no input_mask"));
  }
  if (!spec_.first() && input == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage ", spec_.index, " needs the input activations"));
  }
  Slot& sl = *slots_[slot_index];
  const BertConfig& c = config_;
  const int64_t b = bt.batch, s = bt.seq, h = c.hidden_size, bs = b * s;
  sl.b = b;
  sl.s = s;
  sl.forwarded = true;
  const T* x;
  if (spec_.first()) {
    const double hp = o.train ? c.hidden_dropout_prob : 0.0;
    const EmbeddingTensors<const T>& e = shared_->w.emb;
    EmbeddingForward(bt.input_ids, bt.segment_ids, b, s, h, e.word,
                     e.position, e.token_type, sl.emb_sum);
    LayerNormForward(sl.emb_sum, e.ln_g, e.ln_b, bs, h, c.layer_norm_eps,
                     sl.x0, sl.emb_mean, sl.emb_rstd);
    DropoutForward(DropoutKey{o.seed, o.step, kDropoutSiteEmbedding}, hp, bs,
                   h, s, o.example_offset, sl.x0, sl.x0);
    x = sl.x0;
  } else {
    std::memcpy(sl.input, input, sizeof(T) * bs * h);
    x = sl.input;
  }
  const Shared& f = *shared_;
  for (int64_t li = spec_.layer_begin; li < spec_.layer_end; ++li) {
    const EncoderLayerActs<T>& l = sl.layers[li - spec_.layer_begin];
    EncoderLayerForward<T>(mm_, c, LayerStep(li, bt, o),
                           f.w.layers[li - spec_.layer_begin], x,
                           bt.input_mask, l, f.scratch);
    x = l.out;
  }
  StepResult r;
  if (spec_.last()) HeadsForwardBackward(sl, bt, o, x, &r);
  return r;
}

// The pooler and heads (common/model/heads.h): forward, loss, and (when
// o.backward) their backward into sl.d_top = d(last layer output).
template <typename T>
void BertStage<T>::HeadsForwardBackward(Slot& sl, const BertBatchView& bt,
                                        const StepOptions& o, const T* x,
                                        StepResult* r) {
  Shared& f = *shared_;
  const HeadTensors<const T>& w = f.w.heads;
  const HeadBuffers<T> buffers = HeadBuffersOf<T>(f);
  HeadsForward<T>(mm_, config_, task_, bt, o, w, buffers, x, r);
  if (!o.backward) return;
  T* dout = sl.d_top;  // (B*S, H)
  std::fill(dout, dout + bt.batch * bt.seq * config_.hidden_size, T(0));
  HeadsBackward<T>(mm_, config_, task_, bt, o, w, f.g.heads, buffers, dout,
                   nullptr);
}

template <typename T>
absl::Status BertStage<T>::Backward(int slot_index, const BertBatchView& bt,
                                    const StepOptions& o, const T* d_output,
                                    T* d_input) {
  if (slot_index < 0 || slot_index >= slots()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "micro-batch slot ", slot_index, " outside [0, ", slots(), ")"));
  }
  Slot& sl = *slots_[slot_index];
  if (!sl.forwarded || sl.b != bt.batch || sl.s != bt.seq) {
    return absl::FailedPreconditionError(absl::StrCat(
        "backward of slot ", slot_index,
        " without a forward of the same micro-batch shape"));
  }
  if (!spec_.last() && d_output == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage ", spec_.index, " needs the gradient of its output"));
  }
  if (!spec_.first() && d_input == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage ", spec_.index, " needs a buffer for the input gradient"));
  }
  sl.forwarded = false;
  Shared& f = *shared_;
  const BertConfig& c = config_;
  const int64_t b = bt.batch, s = bt.seq, h = c.hidden_size, bs = b * s;
  std::memcpy(f.d_a, spec_.last() ? sl.d_top : d_output, sizeof(T) * bs * h);
  // Invariant at the top of each layer: f.d_a = d(layer output).
  for (int64_t li = spec_.layer_end - 1; li >= spec_.layer_begin; --li) {
    const int64_t k = li - spec_.layer_begin;
    const T* x = k > 0 ? sl.layers[k - 1].out
                       : (spec_.first() ? sl.x0 : sl.input);
    EncoderLayerBackward<T>(mm_, c, LayerStep(li, bt, o), f.w.layers[k],
                            f.g.layers[k], x, sl.layers[k], f.scratch, f.d_a);
  }
  if (!spec_.first()) {
    std::memcpy(d_input, f.d_a, sizeof(T) * bs * h);
    return absl::OkStatus();
  }
  const double hp = o.train ? c.hidden_dropout_prob : 0.0;
  DropoutBackward(DropoutKey{o.seed, o.step, kDropoutSiteEmbedding}, hp, bs, h,
                  s, o.example_offset, f.d_a, f.d_b);
  LayerNormBackward(f.d_b, sl.emb_sum, f.w.emb.ln_g, sl.emb_mean, sl.emb_rstd,
                    bs, h, f.d_b, f.g.emb.ln_g, f.g.emb.ln_b);
  EmbeddingBackward(f.d_b, bt.input_ids, bt.segment_ids, b, s, h,
                    f.g.emb.word, f.g.emb.position, f.g.emb.token_type);
  return absl::OkStatus();
}

template class BertStage<float>;
template class BertStage<double>;

}  // namespace bertps

#include "common/model/heads.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "Eigen/Core"
#include "common/model/activations.h"
#include "common/model/dropout.h"
#include "common/model/encoder_layer.h"
#include "common/model/layernorm.h"
#include "common/model/linear.h"
#include "common/model/softmax.h"
#include "common/model/eigen_maps.h"

namespace bertps {
namespace {

using model_maps::CVec;
using model_maps::Vec;

int64_t ForcedTileColumns() {
  static const int64_t forced = [] {
    const char* e = std::getenv("BERTPS_MLM_TILE_COLUMNS");
    return e != nullptr ? std::max<int64_t>(0, std::atoll(e)) : int64_t{0};
  }();
  return forced;
}

double MlmDenominator(const BertBatchView& bt, const StepOptions& o) {
  if (o.mlm_denominator > 0) return o.mlm_denominator;
  double wsum = 0;
  for (int64_t i = 0; i < bt.batch * bt.preds; ++i) {
    wsum += bt.masked_lm_weights[i];
  }
  return wsum + 1e-5;
}

// The tile [j0, j0 + vt) of the MLM logits: t3 (np, H) through the decoder
// rows j0.. of the word embeddings and their bias; (np, vt) into `tile`.
template <typename T>
void MlmLogitsTile(kernels::MatmulEngine* mm, const HeadTensors<const T>& w,
                   const T* t3, int64_t np, int64_t h, int64_t j0, int64_t vt,
                   T* tile) {
  LinearForward(mm, t3, w.word_embeddings + j0 * h, w.mlm_bias + j0, np, h, vt,
                tile);
}

// The MLM loss without the whole logits: the online softmax over the tiles
// of the vocabulary (each row's running maximum m and sum s of exp(l - m),
// kept in f.mlm_max / f.mlm_sum), the labels' logits, and with `argmax` the
// first maximum of each row (a NaN counts as larger than every number, as
// numpy's argmax).
template <typename T>
XentResult MlmForward(kernels::MatmulEngine* mm, const BertConfig& c,
                      int64_t np, const HeadTensors<const T>& w,
                      const HeadBuffers<T>& f, int32_t* argmax) {
  const int64_t h = c.hidden_size, v = c.vocab_size;
  const int64_t vt = MlmVocabTile(np, v);
  std::vector<T> at_label(np, T(0));
  for (int64_t r = 0; r < np; ++r) {
    f.mlm_max[r] = -std::numeric_limits<T>::infinity();
    f.mlm_sum[r] = T(0);
  }
  for (int64_t j0 = 0; j0 < v; j0 += vt) {
    const int64_t n = std::min(vt, v - j0);
    MlmLogitsTile(mm, w, f.t3, np, h, j0, n, f.logits);
#pragma omp parallel for schedule(static) if (np * n > 65536)
    for (int64_t r = 0; r < np; ++r) {
      const T* row = f.logits + r * n;
      const int32_t label = f.mlm_labels[r];
      if (label >= j0 && label < j0 + n) at_label[r] = row[label - j0];
      OnlineSoftmaxRow<T> state{f.mlm_max[r], f.mlm_sum[r],
                                argmax != nullptr ? argmax[r] : 0};
      OnlineSoftmaxAdd(row, n, j0, &state);
      f.mlm_max[r] = state.max;
      f.mlm_sum[r] = state.sum;
      if (argmax != nullptr) argmax[r] = static_cast<int32_t>(state.argmax);
    }
  }
  XentResult res;
  for (int64_t r = 0; r < np; ++r) {
    const double wt = static_cast<double>(f.mlm_w[r]);
    const double logp = static_cast<double>(at_label[r] - f.mlm_max[r]) -
                        std::log(static_cast<double>(f.mlm_sum[r]));
    res.weighted_nll += -logp * wt;
    res.weight += wt;
    if (argmax != nullptr && wt > 0 && argmax[r] == f.mlm_labels[r]) {
      ++res.correct;
    }
  }
  return res;
}

// The MLM head's backward from f.mlm_max / f.mlm_sum: each tile of the
// logits again, into d(loss)/d(logits) = (softmax - onehot) * w * scale,
// then at once the bias's and tied decoder's gradient rows of the tile and
// its share of d(t3) (f.d_t, overwritten).
template <typename T>
void MlmBackward(kernels::MatmulEngine* mm, const BertConfig& c, int64_t np,
                 double scale, const HeadTensors<const T>& w,
                 const HeadTensors<T>& g, const HeadBuffers<T>& f) {
  const int64_t h = c.hidden_size, v = c.vocab_size;
  const int64_t vt = MlmVocabTile(np, v);
  for (int64_t j0 = 0; j0 < v; j0 += vt) {
    const int64_t n = std::min(vt, v - j0);
    MlmLogitsTile(mm, w, f.t3, np, h, j0, n, f.logits);
#pragma omp parallel for schedule(static) if (np * n > 65536)
    for (int64_t r = 0; r < np; ++r) {
      T* row = f.logits + r * n;
      const double ws = static_cast<double>(f.mlm_w[r]) * scale;
      const T m = f.mlm_max[r];
      const T k = static_cast<T>(ws / static_cast<double>(f.mlm_sum[r]));
      ExpShiftedScaled(row, n, m, k);
      const int32_t label = f.mlm_labels[r];
      if (label >= j0 && label < j0 + n) row[label - j0] -= static_cast<T>(ws);
    }
    AddColumnSums(f.logits, np, n, g.mlm_bias + j0);
    kernels::Gemm(mm, kernels::GemmDims{1, n, h, np, true, false}, f.logits,
                  f.t3, g.word_embeddings + j0 * h, T(1), /*accumulate=*/true);
    kernels::Gemm(mm, kernels::GemmDims{1, np, h, n, false, false}, f.logits,
                  w.word_embeddings + j0 * h, f.d_t, T(1),
                  /*accumulate=*/j0 > 0);
  }
}

}  // namespace

int64_t MlmVocabTile(int64_t rows, int64_t vocab) {
  if (ForcedTileColumns() > 0) return std::min(ForcedTileColumns(), vocab);
  if (rows * vocab * int64_t{sizeof(float)} <= kMlmWholeLogitsBytes) {
    return vocab;
  }
  const int64_t t = std::max<int64_t>(
      128, (int64_t{131072} / std::max<int64_t>(rows, 1)) / 64 * 64);
  return std::min(t, vocab);
}

template <typename T>
void HeadsForward(kernels::MatmulEngine* mm, const BertConfig& c, BertTask task,
                  const BertBatchView& bt, const StepOptions& o,
                  const HeadTensors<const T>& w, const HeadBuffers<T>& f,
                  const T* x, StepResult* r) {
  const int64_t b = bt.batch, s = bt.seq, h = c.hidden_size;
  const double eps = c.layer_norm_eps;
  const double hp = o.train ? c.hidden_dropout_prob : 0.0;
  const double grad = o.backward ? 1.0 : 0.0;

  // Pooler: tanh(dense(first token)).
  for (int64_t i = 0; i < b; ++i) {
    std::memcpy(f.h0 + i * h, x + i * s * h, sizeof(T) * h);
  }
  LinearForward(mm, f.h0, w.pooler_weight, w.pooler_bias, b, h, h, f.pooled);
  TanhForward(f.pooled, b * h, f.pooled);

  if (task == BertTask::kClassify) {
    const int64_t nl = c.num_labels;
    DropoutForward(DropoutKey{o.seed, o.step, kDropoutSiteClassifier}, hp, b,
                   h, 1, o.example_offset, f.pooled, f.pooled_drop);
    LinearForward(mm, f.pooled_drop, w.classifier_weight, w.classifier_bias, b,
                  h, nl, f.cls_logits);
    r->logits.assign(f.cls_logits, f.cls_logits + b * nl);
    const double denom =
        o.example_denominator > 0 ? o.example_denominator : double(b);
    r->cls = SoftmaxCrossEntropy<T>(f.cls_logits, nullptr, bt.label_ids,
                                    nullptr, b, nl, grad / denom, f.argmax);
    r->loss = r->cls.weighted_nll / denom;
    return;
  }

  // MLM head: gather masked positions, transform, tied decoder.
  const int64_t np = b * bt.preds;
  for (int64_t i = 0; i < np; ++i) {
    const int64_t row = (i / bt.preds) * s + bt.masked_lm_positions[i];
    std::memcpy(f.xm + i * h, x + row * h, sizeof(T) * h);
    f.mlm_w[i] = static_cast<T>(bt.masked_lm_weights[i]);
    f.mlm_labels[i] = bt.masked_lm_ids[i];
  }
  LinearForward(mm, f.xm, w.transform_weight, w.transform_bias, np, h, h,
                f.t1);
  GeluForward(c.hidden_act, f.t1, np * h, f.t2);
  LayerNormForward(f.t2, w.transform_ln_weight, w.transform_ln_bias, np, h,
                   eps, f.t3, f.t_mean, f.t_rstd);
  // Tied decoder and loss, a tile of the vocabulary at a time. Accuracy
  // statistics only when evaluating.
  const double mlm_denom = MlmDenominator(bt, o);
  if (MlmVocabTile(np, c.vocab_size) == c.vocab_size) {
    // The whole logits; with o.backward they become d(loss)/d(logits). The
    // argmax scan is a serial pass: only when evaluating.
    LinearForward(mm, f.t3, w.word_embeddings, static_cast<const T*>(nullptr),
                  np, h, c.vocab_size, f.logits);
    r->mlm = SoftmaxCrossEntropy<T>(f.logits, w.mlm_bias, f.mlm_labels,
                                    f.mlm_w, np, c.vocab_size,
                                    grad / mlm_denom,
                                    o.backward ? nullptr : f.argmax);
  } else {
    r->mlm = MlmForward<T>(mm, c, np, w, f, o.backward ? nullptr : f.argmax);
  }
  r->mlm_loss = r->mlm.weighted_nll / mlm_denom;

  // NSP head.
  LinearForward(mm, f.pooled, w.nsp_weight, w.nsp_bias, b, h, 2, f.nsp_logits);
  const double nsp_denom =
      o.example_denominator > 0 ? o.example_denominator : double(b);
  r->nsp = SoftmaxCrossEntropy<T>(f.nsp_logits, nullptr,
                                  bt.next_sentence_labels, nullptr, b, 2,
                                  grad / nsp_denom, f.argmax);
  r->nsp_loss = r->nsp.weighted_nll / nsp_denom;
  r->loss = r->mlm_loss + r->nsp_loss;
}

template <typename T>
void HeadsBackward(kernels::MatmulEngine* mm, const BertConfig& c,
                   BertTask task, const BertBatchView& bt,
                   const StepOptions& o, const HeadTensors<const T>& w,
                   const HeadTensors<T>& g, const HeadBuffers<T>& f, T* dout,
                   const std::function<void()>& word_grad_done) {
  const int64_t b = bt.batch, s = bt.seq, h = c.hidden_size;
  const double hp = o.train ? c.hidden_dropout_prob : 0.0;
  if (task == BertTask::kClassify) {
    const int64_t nl = c.num_labels;
    // f.cls_logits holds dlogits.
    LinearBackward(mm, f.cls_logits, f.pooled_drop, w.classifier_weight, b, h,
                   nl, f.d_pooled, false, g.classifier_weight,
                   g.classifier_bias);
    DropoutBackward(DropoutKey{o.seed, o.step, kDropoutSiteClassifier}, hp, b,
                    h, 1, o.example_offset, f.d_pooled, f.d_pooled);
    if (word_grad_done) word_grad_done();  // only the lookup adds to it
  } else {
    const int64_t np = b * bt.preds, v = c.vocab_size;
    if (MlmVocabTile(np, v) == v) {
      // f.logits holds dlogits (B*P, V).
      AddColumnSums(f.logits, np, v, g.mlm_bias);
      kernels::Gemm(mm, kernels::GemmDims{1, v, h, np, true, false}, f.logits,
                    f.t3, g.word_embeddings, T(1), /*accumulate=*/true);
      if (word_grad_done) word_grad_done();  // the decoder's share is done
      kernels::Gemm(mm, kernels::GemmDims{1, np, h, v, false, false},
                    f.logits, w.word_embeddings, f.d_t);
    } else {
      MlmBackward<T>(mm, c, np, 1.0 / MlmDenominator(bt, o), w, g, f);
      if (word_grad_done) word_grad_done();  // the decoder's share is done
    }
    LayerNormBackward(f.d_t, f.t2, w.transform_ln_weight, f.t_mean, f.t_rstd,
                      np, h, f.d_t, g.transform_ln_weight,
                      g.transform_ln_bias);
    GeluBackward(c.hidden_act, f.d_t, f.t1, np * h, f.d_t);
    LinearBackward(mm, f.d_t, f.xm, w.transform_weight, np, h, h, f.d_t2,
                   false, g.transform_weight, g.transform_bias);
    for (int64_t i = 0; i < np; ++i) {
      const int64_t row = (i / bt.preds) * s + bt.masked_lm_positions[i];
      Vec<T>(dout + row * h, h) += CVec<T>(f.d_t2 + i * h, h);
    }
    // NSP: f.nsp_logits holds dlogits (B, 2).
    LinearBackward(mm, f.nsp_logits, f.pooled, w.nsp_weight, b, h, 2,
                   f.d_pooled, false, g.nsp_weight, g.nsp_bias);
  }
  // Pooler.
  TanhBackward(f.d_pooled, f.pooled, b * h, f.d_pooled);
  LinearBackward(mm, f.d_pooled, f.h0, w.pooler_weight, b, h, h, f.d_h0, false,
                 g.pooler_weight, g.pooler_bias);
  for (int64_t i = 0; i < b; ++i) {
    Vec<T>(dout + i * s * h, h) += CVec<T>(f.d_h0 + i * h, h);
  }
}

#define BERTPS_HEADS(T)                                                       \
  template void HeadsForward<T>(kernels::MatmulEngine*, const BertConfig&,    \
                                BertTask, const BertBatchView&,               \
                                const StepOptions&,                           \
                                const HeadTensors<const T>&,                  \
                                const HeadBuffers<T>&, const T*, StepResult*); \
  template void HeadsBackward<T>(                                             \
      kernels::MatmulEngine*, const BertConfig&, BertTask,                    \
      const BertBatchView&, const StepOptions&, const HeadTensors<const T>&,  \
      const HeadTensors<T>&, const HeadBuffers<T>&, T*,                       \
      const std::function<void()>&);
BERTPS_HEADS(float)
BERTPS_HEADS(double)
#undef BERTPS_HEADS

}  // namespace bertps

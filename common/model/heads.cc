#include "common/model/heads.h"

#include <algorithm>
#include <cstring>

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
using model_maps::RowMat;
using model_maps::Vec;

}  // namespace

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
  const int64_t np = b * bt.preds, v = c.vocab_size;
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
  // Tied decoder; its bias is added inside the softmax pass below.
  LinearForward(mm, f.t3, w.word_embeddings, static_cast<const T*>(nullptr),
                np, h, v, f.logits);
  double wsum = 0;
  for (int64_t i = 0; i < np; ++i) wsum += bt.masked_lm_weights[i];
  const double mlm_denom =
      o.mlm_denominator > 0 ? o.mlm_denominator : wsum + 1e-5;
  // Accuracy statistics only when evaluating: the argmax scan is a serial
  // pass over the (B*P, V) logits.
  r->mlm = SoftmaxCrossEntropy<T>(f.logits, w.mlm_bias, f.mlm_labels, f.mlm_w,
                                  np, v, grad / mlm_denom,
                                  o.backward ? nullptr : f.argmax);
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
    // f.logits holds dlogits (B*P, V).
    Vec<T>(g.mlm_bias, v) +=
        RowMat<T>(f.logits, np, v).colwise().sum().transpose();
    kernels::Gemm(mm, kernels::GemmDims{1, v, h, np, true, false}, f.logits,
                  f.t3, g.word_embeddings, T(1), /*accumulate=*/true);
    if (word_grad_done) word_grad_done();  // the decoder's share is complete
    kernels::Gemm(mm, kernels::GemmDims{1, np, h, v, false, false}, f.logits,
                  w.word_embeddings, f.d_t);
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

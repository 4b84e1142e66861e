// BERT's pooler and task heads, forward (with the loss) and backward, for
// the whole model (BertModel) and the last pipeline stage (BertStage) alike:
//   pooler      h0 = first token of x; pooled = tanh(dense(h0))
//   classify    logits = classifier(dropout(pooled)); softmax cross-entropy
//   pretrain    MLM: gather the masked positions, dense, GELU, LayerNorm,
//               the tied decoder (word embeddings) + cls.predictions.bias;
//               NSP: seq_relationship(pooled); both softmax cross-entropy
// Losses are normalised by StepOptions' denominators where given (the
// global batch's), else by this batch's.
//
// Thread-safety: the functions are thread-safe on disjoint buffers.
#ifndef BERTPS_COMMON_MODEL_HEADS_H_
#define BERTPS_COMMON_MODEL_HEADS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "common/kernels/matmul.h"
#include "common/model/bert.h"
#include "common/model/bert_config.h"
#include "common/model/params.h"

namespace bertps {

// The head tensors, by role (P is const T for parameters, T for gradients).
// Only those of the task are set; the others are null.
template <typename P>
struct HeadTensors {
  P* pooler_weight = nullptr;
  P* pooler_bias = nullptr;
  P* classifier_weight = nullptr;       // classify
  P* classifier_bias = nullptr;
  P* transform_weight = nullptr;        // pretrain
  P* transform_bias = nullptr;
  P* transform_ln_weight = nullptr;
  P* transform_ln_bias = nullptr;
  P* word_embeddings = nullptr;         // the tied decoder
  P* mlm_bias = nullptr;
  P* nsp_weight = nullptr;
  P* nsp_bias = nullptr;
};

// Resolves the task's head tensors by their Hugging Face names once.
template <typename P>
HeadTensors<P> HeadTensorsOf(
    BertTask task, const std::function<P*(const std::string&)>& lookup) {
  HeadTensors<P> t;
  t.pooler_weight = lookup("bert.pooler.dense.weight");
  t.pooler_bias = lookup("bert.pooler.dense.bias");
  if (task == BertTask::kClassify) {
    t.classifier_weight = lookup("classifier.weight");
    t.classifier_bias = lookup("classifier.bias");
    return t;
  }
  t.transform_weight = lookup("cls.predictions.transform.dense.weight");
  t.transform_bias = lookup("cls.predictions.transform.dense.bias");
  t.transform_ln_weight = lookup("cls.predictions.transform.LayerNorm.weight");
  t.transform_ln_bias = lookup("cls.predictions.transform.LayerNorm.bias");
  t.word_embeddings = lookup("bert.embeddings.word_embeddings.weight");
  t.mlm_bias = lookup("cls.predictions.bias");
  t.nsp_weight = lookup("cls.seq_relationship.weight");
  t.nsp_bias = lookup("cls.seq_relationship.bias");
  return t;
}

// The heads' activations (kept from forward for backward) and scratch, owned
// by the caller: B examples, P masked positions each, H hidden, V vocab, NL
// labels.
template <typename T>
struct HeadBuffers {
  T* h0;           // (B, H) first token of the last layer
  T* pooled;       // (B, H)
  T* d_pooled;     // (B, H)
  T* d_h0;         // (B, H)
  T* pooled_drop;  // (B, H) classify
  T* cls_logits;   // (B, NL)
  T* xm;           // (B*P, H) gathered masked positions
  T* t1;           // (B*P, H) transform dense output
  T* t2;           // (B*P, H) activation output
  T* t3;           // (B*P, H) LayerNorm output
  T* t_mean;       // (B*P)
  T* t_rstd;       // (B*P)
  T* logits;       // (B*P, V)
  T* d_t;          // (B*P, H)
  T* d_t2;         // (B*P, H)
  T* mlm_w;        // (B*P)
  T* nsp_logits;   // (B, 2)
  int32_t* mlm_labels;  // (B*P)
  int32_t* argmax;      // (max(B*P, B))
};

// The views of an owner whose buffers carry the same names (BertModel's,
// BertStage's).
template <typename T, typename Owner>
HeadBuffers<T> HeadBuffersOf(Owner& f) {
  return HeadBuffers<T>{f.h0,     f.pooled, f.d_pooled,   f.d_h0,
                        f.pooled_drop, f.cls_logits, f.xm, f.t1,
                        f.t2,     f.t3,     f.t_mean,     f.t_rstd,
                        f.logits, f.d_t,    f.d_t2,       f.mlm_w,
                        f.nsp_logits, f.mlm_labels.data(), f.argmax.data()};
}

// Pooler, head(s) and loss over x (B*S, H), the last encoder layer's output.
// With o.backward the logits buffers are left holding d(loss)/d(logits).
template <typename T>
void HeadsForward(kernels::MatmulEngine* mm, const BertConfig& c, BertTask task,
                  const BertBatchView& bt, const StepOptions& o,
                  const HeadTensors<const T>& w, const HeadBuffers<T>& f,
                  const T* x, StepResult* r);

// The heads' and pooler's backward after HeadsForward with o.backward: adds
// their gradients into g and d(loss)/d(x) into dout (B*S, H; the caller
// zeroes it). word_grad_done (may be empty) is called once the heads' share
// of the word embeddings' gradient is complete (the tied decoder's).
template <typename T>
void HeadsBackward(kernels::MatmulEngine* mm, const BertConfig& c,
                   BertTask task, const BertBatchView& bt,
                   const StepOptions& o, const HeadTensors<const T>& w,
                   const HeadTensors<T>& g, const HeadBuffers<T>& f, T* dout,
                   const std::function<void()>& word_grad_done);

}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_HEADS_H_

// BERT's pooler and task heads, forward (with the loss) and backward, for
// the whole model (BertModel) and the last pipeline stage (BertStage) alike:
//   pooler      h0 = first token of x; pooled = tanh(dense(h0))
//   classify    logits = classifier(dropout(pooled)); softmax cross-entropy
//   pretrain    MLM: gather the masked positions, dense, GELU, LayerNorm,
//               the tied decoder (word embeddings) + cls.predictions.bias;
//               NSP: seq_relationship(pooled); both softmax cross-entropy
// The MLM logits (B*P, V: 78 MB for BERT's 30,522 words at B*P = 640) are
// held whole up to kMlmWholeLogitsBytes; above, never: forward computes them
// a tile of MlmVocabTile columns at a time and keeps each row's running
// maximum and sum of exponentials (the online softmax); backward computes
// each tile again and turns it at once into its gradient, the tied
// decoder's and bias's gradient rows and its share of d(transform output).
// Tiles cost one more decoder product and a second exponential pass (on a
// Zen 5 host, tiny at B*P = 640: +40 ms on a 180 ms fp32 step) and save the
// matrix's memory (there 74 of 195 MB of activations); docs/model.md.
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
// Whole MLM logits (in float) up to this size; tiles above.
constexpr int64_t kMlmWholeLogitsBytes = int64_t{256} << 20;

// Columns of the MLM logits computed at a time for `rows` rows: all of them
// (vocab) while the whole matrix fits kMlmWholeLogitsBytes, else a tile of
// about 512 KB (in a core's L2 cache), a multiple of 64 columns.
// BERTPS_MLM_TILE_COLUMNS=N (read once per process) forces tiles of N
// columns (tests).
int64_t MlmVocabTile(int64_t rows, int64_t vocab);

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
  T* logits;       // (B*P, MlmVocabTile) one tile of the MLM logits
  T* mlm_max;      // (B*P) running maximum of each row's MLM logits
  T* mlm_sum;      // (B*P) sum of exp(logit - max) of each row
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
  return HeadBuffers<T>{f.h0,     f.pooled,  f.d_pooled,   f.d_h0,
                        f.pooled_drop, f.cls_logits, f.xm, f.t1,
                        f.t2,     f.t3,      f.t_mean,     f.t_rstd,
                        f.logits, f.mlm_max, f.mlm_sum,    f.d_t,
                        f.d_t2,   f.mlm_w,   f.nsp_logits, f.mlm_labels.data(),
                        f.argmax.data()};
}

// Pooler, head(s) and loss over x (B*S, H), the last encoder layer's output.
// With o.backward the classifier's and NSP's logits buffers are left holding
// d(loss)/d(logits), and the MLM rows' maxima and sums for backward.
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

// One post-LN BERT encoder layer, forward and backward side by side, over
// caller-owned buffers. Shared by BertModel (all layers in one process) and
// BertStage (a contiguous range of layers of a pipeline stage), so both run
// exactly the same arithmetic.
//
//   a   = LN1(dropout(dense_o(attention(dense_qkv(x)))) + x)
//   out = LN2(dropout(dense_2(gelu(dense_1(a)))) + a)
//
// Dimensions: B batch, S sequence, H hidden, NH heads, D = H / NH,
// I intermediate. Dropout sites and keys are BertModel's (see DropoutSites),
// so masks depend on (seed, step, layer, global example) only.
// Thread-safety: pure functions over caller buffers.
#ifndef BERTPS_COMMON_MODEL_ENCODER_LAYER_H_
#define BERTPS_COMMON_MODEL_ENCODER_LAYER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "common/kernels/matmul.h"
#include "common/model/bert_config.h"
#include "common/model/dropout.h"

namespace bertps {

// Dropout sites: each location in the model has its own stream.
constexpr uint32_t kDropoutSiteEmbedding = 1;
constexpr uint32_t kDropoutSiteClassifier = 2;
inline uint32_t DropoutSiteAttentionProbs(int64_t l) { return 16 + 4 * l; }
inline uint32_t DropoutSiteAttentionOutput(int64_t l) { return 17 + 4 * l; }
inline uint32_t DropoutSiteFfnOutput(int64_t l) { return 18 + 4 * l; }

// Pointers to one layer's 16 tensors (parameters or their gradients), by
// their Hugging Face names under "bert.encoder.layer.N.".
template <typename P>
struct EncoderLayerTensors {
  P* qkv_w;   // (3H, H) query, key, value weights (contiguous)
  P* qkv_b;   // (3H)
  P* ao_w;    // (H, H) attention.output.dense
  P* ao_b;    // (H)
  P* ln1_g;   // (H) attention.output.LayerNorm
  P* ln1_b;   // (H)
  P* i_w;     // (I, H) intermediate.dense
  P* i_b;     // (I)
  P* o_w;     // (H, I) output.dense
  P* o_b;     // (H)
  P* ln2_g;   // (H) output.LayerNorm
  P* ln2_b;   // (H)
};

// Fills the pointers from a lookup of full tensor names.
template <typename P>
EncoderLayerTensors<P> EncoderLayerTensorsOf(
    int64_t layer, const std::function<P*(const std::string&)>& lookup);

// Activations kept for the backward pass (one set per layer and per
// micro-batch in flight).
template <typename T>
struct EncoderLayerActs {
  T* qkvt;      // (3, B, NH, S, D)
  T* probs;     // (B, NH, S, S)
  T* ctx;       // (B*S, H) attention context, input of the output dense
  T* attn_sum;  // (B*S, H) input of the first LayerNorm
  T* ln1_mean;  // (B*S)
  T* ln1_rstd;  // (B*S)
  T* a;         // (B*S, H) first LayerNorm output
  T* h1;        // (B*S, I) pre-activation
  T* g;         // (B*S, I) activation output
  T* ffn_sum;   // (B*S, H) input of the second LayerNorm
  T* ln2_mean;  // (B*S)
  T* ln2_rstd;  // (B*S)
  T* out;       // (B*S, H) layer output
};

// Scratch shared by all layers (one set per model or stage).
template <typename T>
struct EncoderLayerScratch {
  T* qkv;      // (B*S, 3H)
  T* probs_a;  // (B, NH, S, S)
  T* probs_b;  // (B, NH, S, S)
  T* headsa;   // (B, NH, S, D)
  T* headsb;   // (3, B, NH, S, D)
  T* dqkv;     // (B*S, 3H)
  T* d_b;      // (B*S, H)
  T* d_c;      // (B*S, H)
  T* d_i;      // (B*S, I)
};

// Element counts (of T) of the buffers above for capacity (B, S).
template <typename T>
int64_t EncoderLayerActsSize(const BertConfig& c, int64_t b, int64_t s);
template <typename T>
int64_t EncoderLayerScratchSize(const BertConfig& c, int64_t b, int64_t s);
// Carve the structs out of `base` (EncoderLayer*Size elements, 64-byte
// aligned pieces).
template <typename T>
EncoderLayerActs<T> CarveEncoderLayerActs(const BertConfig& c, int64_t b,
                                          int64_t s, T* base);
template <typename T>
EncoderLayerScratch<T> CarveEncoderLayerScratch(const BertConfig& c, int64_t b,
                                                int64_t s, T* base);

struct EncoderLayerStep {
  int64_t layer = 0;           // global layer index (dropout sites)
  int64_t b = 0, s = 0;        // this call's batch shape
  DropoutKey key;              // seed and step; site set per use
  double hidden_dropout = 0;   // 0 when not training
  double attention_dropout = 0;
  int64_t example_offset = 0;  // global index of the batch's first example
};

// x (B*S, H) -> acts.out (B*S, H).
template <typename T>
void EncoderLayerForward(kernels::MatmulEngine* mm, const BertConfig& c,
                         const EncoderLayerStep& st,
                         const EncoderLayerTensors<const T>& w, const T* x,
                         const int32_t* mask,  // (B, S)
                         const EncoderLayerActs<T>& acts,
                         const EncoderLayerScratch<T>& scratch);

// d (B*S, H): in d(acts.out), out d(x). Parameter gradients accumulate
// into gw.
template <typename T>
void EncoderLayerBackward(kernels::MatmulEngine* mm, const BertConfig& c,
                          const EncoderLayerStep& st,
                          const EncoderLayerTensors<const T>& w,
                          const EncoderLayerTensors<T>& gw, const T* x,
                          const EncoderLayerActs<T>& acts,
                          const EncoderLayerScratch<T>& scratch, T* d);

}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_ENCODER_LAYER_H_

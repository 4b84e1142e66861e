// A model's parameter (or gradient) tensors by role, resolved from their
// Hugging Face names once, when a model or stage is built, so that forward
// and backward reach them through named fields instead of looking names up
// on every call: the embeddings, each encoder layer (EncoderLayerTensors),
// the pooler and heads (HeadTensors). P is const T for parameters, T for
// gradients.
// Thread-safety: plain data.
#ifndef BERTPS_COMMON_MODEL_MODEL_TENSORS_H_
#define BERTPS_COMMON_MODEL_MODEL_TENSORS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/model/encoder_layer.h"
#include "common/model/heads.h"
#include "common/model/params.h"

namespace bertps {

template <typename P>
struct EmbeddingTensors {
  P* word = nullptr;        // (V, H) also the tied MLM decoder
  P* position = nullptr;    // (max_position, H)
  P* token_type = nullptr;  // (type_vocab, H)
  P* ln_g = nullptr;        // (H) embeddings.LayerNorm
  P* ln_b = nullptr;
};

template <typename P>
struct ModelTensors {
  EmbeddingTensors<P> emb;                     // set when asked for
  std::vector<EncoderLayerTensors<P>> layers;  // layer first_layer + k
  HeadTensors<P> heads;                        // set when asked for
};

// The tensors of layers [first_layer, end_layer), with the embeddings and
// the heads of `task` where asked, through `lookup` (name -> its data).
template <typename P>
ModelTensors<P> ModelTensorsOf(
    BertTask task, int64_t first_layer, int64_t end_layer, bool embeddings,
    bool heads, const std::function<P*(const std::string&)>& lookup) {
  ModelTensors<P> t;
  if (embeddings) {
    t.emb.word = lookup("bert.embeddings.word_embeddings.weight");
    t.emb.position = lookup("bert.embeddings.position_embeddings.weight");
    t.emb.token_type = lookup("bert.embeddings.token_type_embeddings.weight");
    t.emb.ln_g = lookup("bert.embeddings.LayerNorm.weight");
    t.emb.ln_b = lookup("bert.embeddings.LayerNorm.bias");
  }
  for (int64_t li = first_layer; li < end_layer; ++li) {
    t.layers.push_back(EncoderLayerTensorsOf<P>(li, lookup));
  }
  if (heads) t.heads = HeadTensorsOf<P>(task, lookup);
  return t;
}

}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_MODEL_TENSORS_H_

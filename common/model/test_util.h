// Test helpers: a tiny BERT config, random batches, perturbed parameters.
#ifndef BERTPS_COMMON_MODEL_TEST_UTIL_H_
#define BERTPS_COMMON_MODEL_TEST_UTIL_H_

#include <random>
#include <vector>

#include "common/model/bert.h"

namespace bertps {
namespace testing {

inline BertConfig TinyTestConfig() {
  BertConfig c;
  c.vocab_size = 23;
  c.hidden_size = 8;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 12;
  c.max_position_embeddings = 10;
  c.type_vocab_size = 2;
  c.num_labels = 3;
  c.hidden_act = Activation::kGeluErf;
  return c;
}

// Owns the arrays of a random but valid batch.
struct OwnedBatch {
  int64_t b = 0, s = 0, p = 0;
  std::vector<int32_t> ids, mask, seg, pos, mlm_ids, nsp, labels;
  std::vector<float> mlm_w;
  BertBatchView View() const {
    BertBatchView v;
    v.batch = b;
    v.seq = s;
    v.preds = p;
    v.input_ids = ids.data();
    v.input_mask = mask.data();
    v.segment_ids = seg.data();
    v.masked_lm_positions = pos.data();
    v.masked_lm_ids = mlm_ids.data();
    v.masked_lm_weights = mlm_w.data();
    v.next_sentence_labels = nsp.data();
    v.label_ids = labels.data();
    return v;
  }
};

inline OwnedBatch RandomBatch(const BertConfig& c, int64_t b, int64_t s,
                              int64_t p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  OwnedBatch o;
  o.b = b;
  o.s = s;
  o.p = p;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t len = s - static_cast<int64_t>(i % 3);  // some padding
    for (int64_t j = 0; j < s; ++j) {
      o.ids.push_back(j < len ? static_cast<int32_t>(rng() % c.vocab_size) : 0);
      o.mask.push_back(j < len ? 1 : 0);
      o.seg.push_back(j < len / 2 ? 0 : 1);
    }
    for (int64_t k = 0; k < p; ++k) {
      o.pos.push_back(static_cast<int32_t>(1 + rng() % (len - 1)));
      o.mlm_ids.push_back(static_cast<int32_t>(rng() % c.vocab_size));
      o.mlm_w.push_back(k + 1 == p && i % 2 == 1 ? 0.0f : 1.0f);
    }
    o.nsp.push_back(static_cast<int32_t>(rng() % 2));
    o.labels.push_back(static_cast<int32_t>(rng() % c.num_labels));
  }
  return o;
}

// BERT init, then every bias and LayerNorm parameter made non-trivial and the
// weights enlarged so that every gradient is well away from zero.
template <typename T>
void PerturbedParams(const ParamLayout& layout, const BertConfig& c,
                     uint64_t seed, T* params) {
  InitBertParams(layout, c, seed, params);
  std::mt19937_64 rng(seed + 1);
  std::normal_distribution<double> n(0.0, 1.0);
  for (const ParamSpec& s : layout.tensors()) {
    for (int64_t i = 0; i < s.size; ++i) {
      T& v = params[s.offset + i];
      v = static_cast<T>(v * 10 + 0.1 * n(rng));
    }
  }
}

}  // namespace testing
}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_TEST_UTIL_H_

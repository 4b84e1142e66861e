// Test-only helpers shared by the train-worker tests: a temporary directory,
// a small BERT config, and pretraining data whose batches vary in padding and
// in real masked positions (so that per-worker and global loss denominators
// differ, and a worker that used the wrong one would train differently).
#ifndef BERTPS_WORKER_TEST_UTIL_H_
#define BERTPS_WORKER_TEST_UTIL_H_

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

#include "common/io/bert_example.h"
#include "common/io/tfrecord.h"
#include "common/model/bert_config.h"
#include "gtest/gtest.h"

namespace bertps {
namespace testing_util {

inline std::string TempDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

// vocab 40, hidden 32, 2 layers of 4 heads, intermediate 64, positions 32.
inline BertConfig SmallConfig() {
  BertConfig c;
  c.vocab_size = 40;
  c.hidden_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 64;
  c.max_position_embeddings = 32;
  return c;
}

// n examples of sequence 16 with 3 masked slots: padding from 0 to 6
// positions and 1 to 3 real predictions, drawn from `seed`.
inline void WriteVaryingPretrainData(const std::string& path, int n,
                                     uint64_t seed) {
  std::mt19937 rng(seed);
  auto w = io::TFRecordWriter::Open(path);
  ASSERT_TRUE(w.ok()) << w.status();
  for (int i = 0; i < n; ++i) {
    io::PretrainExample e;
    const int tok = 5 + rng() % 30;
    const int len = 10 + rng() % 7;  // padding varies
    for (int j = 0; j < 16; ++j) {
      e.input_ids.push_back(j >= len ? 0 : j == 0 ? 1 : tok);
      e.input_mask.push_back(j < len);
      e.segment_ids.push_back(j < len / 2 ? 0 : 1);
    }
    const int preds = 1 + rng() % 3;  // varying real predictions
    for (int k = 0; k < 3; ++k) {
      e.masked_lm_positions.push_back(k < preds ? 1 + k * 3 : 0);
      e.masked_lm_ids.push_back(k < preds ? tok : 0);
      e.masked_lm_weights.push_back(k < preds ? 1.0f : 0.0f);
    }
    e.next_sentence_label = tok % 2;
    ASSERT_TRUE((*w)->Write(io::EncodePretrainExample(e)).ok());
  }
  ASSERT_TRUE((*w)->Close().ok());
}

}  // namespace testing_util
}  // namespace bertps

#endif  // BERTPS_WORKER_TEST_UTIL_H_

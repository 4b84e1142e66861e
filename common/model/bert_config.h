// BertConfig: the shape and hyper-parameters of a BERT model, read from a
// Hugging Face config.json (or a named preset) and validated.
//
// Thread-safety: a plain value type.
#ifndef BERTPS_COMMON_MODEL_BERT_CONFIG_H_
#define BERTPS_COMMON_MODEL_BERT_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bertps {

enum class Activation {
  kGeluErf,   // "gelu": exact erf GELU (Hugging Face)
  kGeluTanh,  // "gelu_new" / "gelu_pytorch_tanh": tanh form (original BERT)
};

struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  Activation hidden_act = Activation::kGeluErf;
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double initializer_range = 0.02;
  double layer_norm_eps = 1e-12;
  int64_t num_labels = 2;

  int64_t head_size() const { return hidden_size / num_attention_heads; }

  // Checks every field; the error names the offending one.
  absl::Status Validate() const;
  // The config as Hugging Face config.json text.
  std::string ToJson() const;
};

// Parses config.json text; unknown keys are ignored, missing keys keep the
// defaults above (bert-base), wrong types are errors naming the key.
absl::StatusOr<BertConfig> ParseBertConfig(absl::string_view json_text);
// The largest config.json read (Hugging Face's are ~1 KiB; id2label maps of
// many classes stay far below this).
inline constexpr int64_t kMaxConfigFileBytes = 1 << 20;

absl::StatusOr<BertConfig> LoadBertConfig(const std::string& path);

// Presets of the BERT release: tiny (L2/H128), mini (L4/H256), small (L4/H512),
// medium (L8/H512), base (L12/H768), large (L24/H1024); heads = H/64, FFN = 4H.
absl::StatusOr<BertConfig> PresetBertConfig(absl::string_view name);

// `spec` is a preset name or the path of a config.json.
absl::StatusOr<BertConfig> ResolveBertConfig(const std::string& spec);

absl::string_view ActivationName(Activation a);

}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_BERT_CONFIG_H_

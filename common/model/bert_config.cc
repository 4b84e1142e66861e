#include "common/model/bert_config.h"


#include "absl/strings/str_cat.h"
#include "common/io/file_util.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace bertps {

absl::string_view ActivationName(Activation a) {
  return a == Activation::kGeluErf ? "gelu" : "gelu_new";
}

absl::Status BertConfig::Validate() const {
  // Far above any BERT-family model (BERT-large: hidden 1024, 24 layers;
  // multilingual vocabularies ~250k), far below what overflows a size.
  auto in = [](const char* name, int64_t v, int64_t hi) -> absl::Status {
    if (v <= 0 || v > hi) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config: ", name, " must be in [1, ", hi, "], got ", v));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(in("vocab_size", vocab_size, int64_t{1} << 22));
  RETURN_IF_ERROR(in("hidden_size", hidden_size, 16384));
  RETURN_IF_ERROR(in("num_hidden_layers", num_hidden_layers, 512));
  RETURN_IF_ERROR(in("num_attention_heads", num_attention_heads, 512));
  RETURN_IF_ERROR(in("intermediate_size", intermediate_size, 1 << 17));
  RETURN_IF_ERROR(
      in("max_position_embeddings", max_position_embeddings, 1 << 17));
  RETURN_IF_ERROR(in("type_vocab_size", type_vocab_size, 1024));
  RETURN_IF_ERROR(in("num_labels", num_labels, 1 << 16));
  if (hidden_size % num_attention_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config: hidden_size (", hidden_size,
        ") is not a multiple of num_attention_heads (", num_attention_heads,
        ")"));
  }
  auto prob = [](const char* name, double p) -> absl::Status {
    if (!(p >= 0.0 && p < 1.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: ", name, " must be in [0, 1), got ", p));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(prob("hidden_dropout_prob", hidden_dropout_prob));
  RETURN_IF_ERROR(
      prob("attention_probs_dropout_prob", attention_probs_dropout_prob));
  if (!(initializer_range > 0.0)) {
    return absl::InvalidArgumentError("config: initializer_range must be > 0");
  }
  if (!(layer_norm_eps > 0.0)) {
    return absl::InvalidArgumentError("config: layer_norm_eps must be > 0");
  }
  return absl::OkStatus();
}

std::string BertConfig::ToJson() const {
  nlohmann::ordered_json j;
  j["model_type"] = "bert";
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["intermediate_size"] = intermediate_size;
  j["hidden_act"] = std::string(ActivationName(hidden_act));
  j["hidden_dropout_prob"] = hidden_dropout_prob;
  j["attention_probs_dropout_prob"] = attention_probs_dropout_prob;
  j["max_position_embeddings"] = max_position_embeddings;
  j["type_vocab_size"] = type_vocab_size;
  j["initializer_range"] = initializer_range;
  j["layer_norm_eps"] = layer_norm_eps;
  j["num_labels"] = num_labels;
  return j.dump(2);
}

namespace {

template <typename V>
absl::Status Read(const nlohmann::json& j, const char* key, V* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if constexpr (std::is_integral_v<V>) {
    if (!it->is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: ", key, " must be an integer"));
    }
    *out = it->get<V>();
  } else {
    if (!it->is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: ", key, " must be a number"));
    }
    *out = it->get<V>();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BertConfig> ParseBertConfig(absl::string_view json_text) {
  nlohmann::json j = nlohmann::json::parse(json_text.begin(), json_text.end(),
                                           nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("config: not a JSON object");
  }
  BertConfig c;
  // Only BERT is BERT: another architecture's config, or BERT with relative
  // position embeddings, is refused rather than read as absolute BERT.
  for (const auto& [key, want] :
       {std::pair<const char*, const char*>{"model_type", "bert"},
        {"position_embedding_type", "absolute"}}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_string() || it->get<std::string>() != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config: ", key, " is ", it->dump(), "; only \"", want,
          "\" is supported"));
    }
  }
  // Hugging Face classifiers give their labels as id2label (num_labels is
  // its size); an explicit num_labels wins.
  if (auto it = j.find("id2label"); it != j.end() && it->is_object() &&
                                    !it->empty()) {
    c.num_labels = static_cast<int64_t>(it->size());
  }
  RETURN_IF_ERROR(Read(j, "vocab_size", &c.vocab_size));
  RETURN_IF_ERROR(Read(j, "hidden_size", &c.hidden_size));
  RETURN_IF_ERROR(Read(j, "num_hidden_layers", &c.num_hidden_layers));
  RETURN_IF_ERROR(Read(j, "num_attention_heads", &c.num_attention_heads));
  RETURN_IF_ERROR(Read(j, "intermediate_size", &c.intermediate_size));
  RETURN_IF_ERROR(Read(j, "hidden_dropout_prob", &c.hidden_dropout_prob));
  RETURN_IF_ERROR(Read(j, "attention_probs_dropout_prob",
                       &c.attention_probs_dropout_prob));
  RETURN_IF_ERROR(
      Read(j, "max_position_embeddings", &c.max_position_embeddings));
  RETURN_IF_ERROR(Read(j, "type_vocab_size", &c.type_vocab_size));
  RETURN_IF_ERROR(Read(j, "initializer_range", &c.initializer_range));
  RETURN_IF_ERROR(Read(j, "layer_norm_eps", &c.layer_norm_eps));
  RETURN_IF_ERROR(Read(j, "num_labels", &c.num_labels));
  auto act = j.find("hidden_act");
  if (act != j.end()) {
    if (!act->is_string()) {
      return absl::InvalidArgumentError("config: hidden_act must be a string");
    }
    std::string a = act->get<std::string>();
    if (a == "gelu") {
      c.hidden_act = Activation::kGeluErf;
    } else if (a == "gelu_new" || a == "gelu_pytorch_tanh") {
      c.hidden_act = Activation::kGeluTanh;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "config: hidden_act '", a,
          "' is not supported (gelu, gelu_new, gelu_pytorch_tanh)"));
    }
  }
  // Hugging Face classification configs list labels instead of a count.
  auto id2label = j.find("id2label");
  if (j.find("num_labels") == j.end() && id2label != j.end() &&
      id2label->is_object() && !id2label->empty()) {
    c.num_labels = static_cast<int64_t>(id2label->size());
  }
  RETURN_IF_ERROR(c.Validate());
  return c;
}

absl::StatusOr<BertConfig> LoadBertConfig(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text,
                   io::ReadFileToString(path, kMaxConfigFileBytes));
  absl::StatusOr<BertConfig> c = ParseBertConfig(text);
  if (!c.ok()) return Annotate(c.status(), path);
  return c;
}

absl::StatusOr<BertConfig> PresetBertConfig(absl::string_view name) {
  struct Preset {
    const char* name;
    int64_t layers, hidden;
  };
  static constexpr Preset kPresets[] = {
      {"tiny", 2, 128},   {"mini", 4, 256},  {"small", 4, 512},
      {"medium", 8, 512}, {"base", 12, 768}, {"large", 24, 1024},
  };
  for (const Preset& p : kPresets) {
    if (name == p.name) {
      BertConfig c;
      c.num_hidden_layers = p.layers;
      c.hidden_size = p.hidden;
      c.num_attention_heads = p.hidden / 64;
      c.intermediate_size = 4 * p.hidden;
      c.hidden_act = Activation::kGeluErf;
      return c;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown model preset '", name,
      "' (tiny, mini, small, medium, base, large, or a config.json path)"));
}

absl::StatusOr<BertConfig> ResolveBertConfig(const std::string& spec) {
  if (spec.find('/') == std::string::npos &&
      spec.find(".json") == std::string::npos) {
    return PresetBertConfig(spec);
  }
  return LoadBertConfig(spec);
}

}  // namespace bertps

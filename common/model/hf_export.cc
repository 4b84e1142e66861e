#include "common/model/hf_export.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/io/file_util.h"
#include "common/model/weights.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace bertps {

bool IsHfModelDir(absl::string_view export_path) {
  return !export_path.empty() && !absl::EndsWith(export_path, ".safetensors");
}

namespace {

int64_t CountLines(const std::string& text) {
  int64_t n = 0;
  for (char c : text) n += c == '\n';
  if (!text.empty() && text.back() != '\n') ++n;
  return n;
}

// OK when the vocabulary's text has vocab_size entries.
absl::Status CheckEntries(const std::string& path, const std::string& text,
                          int64_t vocab_size) {
  const int64_t n = CountLines(text);
  if (n == vocab_size) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "vocab ", path, " has ", n, " entries but the model's vocab_size is ",
      vocab_size));
}

}  // namespace

absl::Status CheckHfVocabulary(const std::string& path, int64_t vocab_size) {
  ASSIGN_OR_RETURN(std::string text, io::ReadFileToString(path));
  return CheckEntries(path, text, vocab_size);
}

std::string HfConfigJson(const BertConfig& config, BertTask task,
                         const HfExportOptions& options) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(config.ToJson());
  j["architectures"] = nlohmann::ordered_json::array(
      {task == BertTask::kClassify ? "BertForSequenceClassification"
                                   : "BertForPreTraining"});
  j["position_embedding_type"] = "absolute";
  j["pad_token_id"] = 0;
  j["torch_dtype"] = "float32";
  if (task == BertTask::kClassify) {
    nlohmann::ordered_json id2label = nlohmann::ordered_json::object();
    nlohmann::ordered_json label2id = nlohmann::ordered_json::object();
    for (int64_t i = 0; i < config.num_labels; ++i) {
      const std::string name =
          i < static_cast<int64_t>(options.label_names.size())
              ? options.label_names[i]
              : absl::StrCat("LABEL_", i);
      id2label[absl::StrCat(i)] = name;
      label2id[name] = i;
    }
    j["id2label"] = id2label;
    j["label2id"] = label2id;
  }
  return j.dump(2) + "\n";
}

absl::Status WriteHfModelDir(const std::string& dir, const ParamLayout& layout,
                             const float* params, const BertConfig& config,
                             BertTask task, const HfExportOptions& options) {
  RETURN_IF_ERROR(io::MakeDirs(dir));
  RETURN_IF_ERROR(SaveBertWeights(dir + "/model.safetensors", layout, params,
                                  &config));
  RETURN_IF_ERROR(io::WriteFileAtomically(dir + "/config.json",
                                          HfConfigJson(config, task, options)));
  if (options.vocab_path.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string vocab, io::ReadFileToString(options.vocab_path));
  RETURN_IF_ERROR(CheckEntries(options.vocab_path, vocab, config.vocab_size));
  RETURN_IF_ERROR(io::WriteFileAtomically(dir + "/vocab.txt", vocab));
  nlohmann::ordered_json t;
  t["tokenizer_class"] = "BertTokenizer";
  t["do_lower_case"] = options.do_lower_case;
  t["model_max_length"] = config.max_position_embeddings;
  t["unk_token"] = "[UNK]";
  t["sep_token"] = "[SEP]";
  t["pad_token"] = "[PAD]";
  t["cls_token"] = "[CLS]";
  t["mask_token"] = "[MASK]";
  return io::WriteFileAtomically(dir + "/tokenizer_config.json",
                                 t.dump(2) + "\n");
}

}  // namespace bertps

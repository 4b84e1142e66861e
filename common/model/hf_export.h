// A trained model as a Hugging Face model directory, the layout
// `BertForPreTraining.from_pretrained(dir)` and
// `BertForSequenceClassification.from_pretrained(dir)` read:
//   config.json            the BertConfig with architectures, model_type
//                          "bert", position_embedding_type "absolute",
//                          torch_dtype, and id2label / label2id for a
//                          classifier
//   model.safetensors      the weights under their Hugging Face names
//   vocab.txt              when the vocabulary is known (copied), with
//   tokenizer_config.json  BertTokenizer, do_lower_case, model_max_length
// An export_path that does not end in ".safetensors" names such a
// directory; one that does is the weights file alone.
// Thread-safety: functions over the file system.
#ifndef BERTPS_COMMON_MODEL_HF_EXPORT_H_
#define BERTPS_COMMON_MODEL_HF_EXPORT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/model/bert_config.h"
#include "common/model/params.h"

namespace bertps {

struct HfExportOptions {
  // Classifiers: the label names by id (empty: LABEL_0, LABEL_1, ...).
  std::vector<std::string> label_names;
  // The WordPiece vocabulary the model was trained with ("": not written).
  std::string vocab_path;
  bool do_lower_case = true;
};

// Whether an export path names a model directory (not a .safetensors file).
bool IsHfModelDir(absl::string_view export_path);

// A vocabulary file fit for a model of `vocab_size`: a readable regular
// file of exactly vocab_size lines (InvalidArgument naming both counts).
absl::Status CheckHfVocabulary(const std::string& path, int64_t vocab_size);

// config.json's text for `config` and `task`.
std::string HfConfigJson(const BertConfig& config, BertTask task,
                         const HfExportOptions& options);

// Writes the directory (created if missing; each file written atomically).
absl::Status WriteHfModelDir(const std::string& dir, const ParamLayout& layout,
                             const float* params, const BertConfig& config,
                             BertTask task, const HfExportOptions& options);

}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_HF_EXPORT_H_

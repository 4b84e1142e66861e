// BERT weights in and out as safetensors with Hugging Face names.
//
// Loading accepts what users bring: the `bert.` prefix may be missing, old
// LayerNorm names (`gamma` / `beta`) are mapped to `weight` / `bias`, F32,
// F16, BF16 and F64 tensors are converted, `cls.predictions.decoder.weight`
// is accepted as the tied copy of the word embeddings (ignored), and
// `cls.predictions.decoder.bias` is an alias of `cls.predictions.bias`.
// Tensors of another head (e.g. the pretraining heads when fine-tuning) are
// skipped and reported. A shape mismatch, or a missing tensor that the task
// needs and `allow_missing` does not cover, is an error and leaves `params`
// untouched.
//
// Saving writes every tensor of the layout under its Hugging Face name, plus
// the config as metadata ("config" key, config.json text).
// Thread-safety: pure functions.
#ifndef BERTPS_COMMON_MODEL_WEIGHTS_H_
#define BERTPS_COMMON_MODEL_WEIGHTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model/bert_config.h"
#include "common/io/safetensors.h"
#include "common/model/params.h"

namespace bertps {

struct WeightsReport {
  std::vector<std::string> loaded;   // layout names filled from the file
  std::vector<std::string> missing;  // layout names left as they were
  std::vector<std::string> skipped;  // file names not used
};

// Canonical Hugging Face name for a name found in a checkpoint.
std::string CanonicalBertName(const std::string& name);

// Tensors that may be missing when loading: "heads" allows a missing task
// head (classifier.*, cls.*), "none" allows nothing.
enum class AllowMissing { kNone, kHeads };

absl::StatusOr<WeightsReport> LoadBertWeights(const std::string& path,
                                              const ParamLayout& layout,
                                              AllowMissing allow,
                                              float* params);
// The same from a reader already open (errors name `path`).
absl::StatusOr<WeightsReport> LoadBertWeights(
    const io::SafetensorsReader& reader, const std::string& path,
    const ParamLayout& layout, AllowMissing allow, float* params);

absl::Status SaveBertWeights(const std::string& path,
                             const ParamLayout& layout, const float* values,
                             const BertConfig* config);

}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_WEIGHTS_H_

#include "common/model/weights.h"

#include <cmath>
#include <map>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/io/safetensors.h"
#include "common/status.h"

namespace bertps {

std::string CanonicalBertName(const std::string& name) {
  std::string n = name;
  if (absl::EndsWith(n, ".gamma")) n = n.substr(0, n.size() - 6) + ".weight";
  if (absl::EndsWith(n, ".beta")) n = n.substr(0, n.size() - 5) + ".bias";
  if (n == "cls.predictions.decoder.bias") n = "cls.predictions.bias";
  if (absl::StartsWith(n, "embeddings.") || absl::StartsWith(n, "encoder.") ||
      absl::StartsWith(n, "pooler.")) {
    n = "bert." + n;
  }
  return n;
}

namespace {

bool IsHead(const std::string& name) {
  return absl::StartsWith(name, "cls.") || absl::StartsWith(name, "classifier.");
}

}  // namespace

absl::StatusOr<WeightsReport> LoadBertWeights(const std::string& path,
                                              const ParamLayout& layout,
                                              AllowMissing allow,
                                              float* params) {
  ASSIGN_OR_RETURN(io::SafetensorsReader reader,
                   io::SafetensorsReader::Open(path));
  return LoadBertWeights(reader, path, layout, allow, params);
}

absl::StatusOr<WeightsReport> LoadBertWeights(
    const io::SafetensorsReader& reader, const std::string& path,
    const ParamLayout& layout, AllowMissing allow, float* params) {
  WeightsReport report;
  // Plan every copy first: nothing is written unless all of it is valid.
  std::map<std::string, std::string> source;  // layout name -> file name
  for (const io::TensorInfo& t : reader.tensors()) {
    const std::string canon = CanonicalBertName(t.name);
    const ParamSpec* spec = layout.Find(canon);
    if (spec == nullptr || canon == "cls.predictions.decoder.weight") {
      report.skipped.push_back(t.name);
      continue;
    }
    if (t.shape != spec->shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor ", t.name, " has shape [",
          absl::StrJoin(t.shape, ","), "], the model needs [",
          absl::StrJoin(spec->shape, ","), "]"));
    }
    if (source.count(canon)) {
      // e.g. both cls.predictions.bias and its decoder alias: keep the first.
      report.skipped.push_back(t.name);
      continue;
    }
    source[canon] = t.name;
  }
  for (const ParamSpec& spec : layout.tensors()) {
    if (source.count(spec.name)) continue;
    if (allow == AllowMissing::kHeads && IsHead(spec.name)) {
      report.missing.push_back(spec.name);
      continue;
    }
    return absl::NotFoundError(absl::StrCat(
        path, ": missing tensor ", spec.name, " (", source.size(), " of ",
        layout.tensors().size(), " found)"));
  }
  // Non-finite values are refused with the tensor's name, before anything
  // is written (one tensor at a time through a scratch buffer).
  std::vector<float> scratch;
  for (const auto& [canon, file_name] : source) {
    const ParamSpec* spec = layout.Find(canon);
    scratch.resize(static_cast<size_t>(spec->size));
    RETURN_IF_ERROR(reader.ReadF32(file_name, scratch.data(), spec->size));
    for (int64_t i = 0; i < spec->size; ++i) {
      if (!std::isfinite(scratch[i])) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": tensor ", file_name, " holds a non-finite value (",
            scratch[i], ") at element ", i, " of ", spec->size));
      }
    }
  }
  for (const auto& [canon, file_name] : source) {
    const ParamSpec* spec = layout.Find(canon);
    RETURN_IF_ERROR(
        reader.ReadF32(file_name, params + spec->offset, spec->size));
    report.loaded.push_back(canon);
  }
  return report;
}

absl::Status SaveBertWeights(const std::string& path,
                             const ParamLayout& layout, const float* values,
                             const BertConfig* config) {
  io::SafetensorsWriter writer;
  for (const ParamSpec& spec : layout.tensors()) {
    writer.AddF32(spec.name, spec.shape, values + spec.offset);
  }
  writer.SetMetadata("format", "pt");
  if (config != nullptr) writer.SetMetadata("config", config->ToJson());
  return writer.Write(path);
}

}  // namespace bertps

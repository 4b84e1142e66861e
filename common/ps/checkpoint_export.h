// A model written from a checkpoint, without a job: the Hugging Face
// directory (or the .safetensors file alone) that a train job's export_path
// gets, from any complete checkpoint (bertpsctl export).
// Thread-safety: functions over the file system.
#ifndef BERTPS_COMMON_PS_CHECKPOINT_EXPORT_H_
#define BERTPS_COMMON_PS_CHECKPOINT_EXPORT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/model/hf_export.h"

namespace bertps {
namespace ps {

// The manifest `source` names: a manifest file itself, or a checkpoint
// directory (a job's checkpoint.dir), where `step` picks ckpt-<step> and
// none picks the newest complete one (LatestManifest). NotFound names what
// is there when the step is absent; a manifest of another step than `step`
// is refused.
absl::StatusOr<std::string> FindManifest(const std::string& source,
                                         std::optional<int64_t> step);

// Writes the model of the checkpoint at manifest_path to export_path: a
// Hugging Face model directory (config.json, model.safetensors, and the
// vocabulary files when options.vocab_path is set), or, for a path ending
// in ".safetensors", the weights file alone. Every shard file is verified
// against the manifest first. export_path must not exist: the directory is
// written beside it and renamed into place, so a failed export leaves
// nothing there. Returns the checkpoint's version (its step).
absl::StatusOr<int64_t> ExportCheckpointModel(const std::string& manifest_path,
                                              const std::string& export_path,
                                              const HfExportOptions& options);

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_COMMON_PS_CHECKPOINT_EXPORT_H_

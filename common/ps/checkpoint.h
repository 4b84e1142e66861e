// Checkpoints of the parameter-server shards: each shard writes its slices
// (parameters and optimizer state) to one safetensors file, a manifest ties
// the shard files of one version together, and a checkpoint can be restored
// onto a plan with any number of shards or exported as a Hugging Face model.
//
// Directory layout under a checkpoint root `dir`:
//   dir/LATEST                              "ckpt-<version>\n": the newest
//                                           manifest written
//   dir/ckpt-<version>/shard-<i>-of-<S>.safetensors
//       tensors "param/<name>/<begin>"  (end - begin) F32, one per slice
//               "state<k>/<name>/<begin>" for each state slot k
//       metadata format=bertps-shard, version, shard, num_shards, state_slots
//   dir/ckpt-<version>/manifest.json        version, num_shards, config,
//       task, optimizer, state_slots, the plan (PartitionPlan::ToText lines)
//       and every shard file with its CRC-32C and size.
// A checkpoint is complete once its manifest exists: shard files are written
// first, then the manifest, then LATEST; every file is replaced atomically
// (tmp + fsync + rename + fsync of the directory).
//
// Errors: caller mistakes are InvalidArgument; a checkpoint of another model
// or optimizer is FailedPrecondition; a missing file is NotFound; a file that
// does not match the manifest (size, CRC-32C, content) or a malformed
// manifest is DataLoss. Every message names the file.
//
// Thread-safety: the functions are stateless and thread-safe; a snapshot's
// buffers must not change during WriteShardCheckpoint, and two writers of the
// same file at once race on its temporary file.
// Memory: WriteShardCheckpoint holds one copy of the shard's file (its bytes);
// RestoreShard holds one staging copy of the restored shard plus one old
// shard file at a time; ExportCheckpoint holds the parameters plus one file.
#ifndef BERTPS_COMMON_PS_CHECKPOINT_H_
#define BERTPS_COMMON_PS_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/io/file_util.h"
#include "common/model/params.h"
#include "common/ps/partition.h"

namespace bertps {
namespace ps {

// What one shard saves. N = plan->shard_size(shard).
struct ShardSnapshot {
  int shard = 0;
  int num_shards = 1;                   // must equal plan->num_shards()
  int64_t version = 0;                  // optimizer steps applied, >= 0
  const PartitionPlan* plan = nullptr;  // the plan the buffers follow
  const float* params = nullptr;        // (N)
  const float* state = nullptr;         // (state_slots, N), slot-major
  int state_slots = 0;                  // 0, 1 or 2 (optim::StateSlots)
  // The state laid out as the shard keeps it instead: per slice, the
  // slice's slot 0, then its slot 1 (slice s of the plan at
  // state + state_slots * s.shard_offset). The file is the same.
  bool state_per_slice = false;
};

struct ShardFile {
  int shard = 0;
  std::string file;     // see WriteShardCheckpoint / Manifest
  uint32_t crc32c = 0;  // of the whole file
  int64_t bytes = 0;    // file size
};

// Writes dir/ckpt-<version>/shard-<shard>-of-<num_shards>.safetensors
// atomically, creating the directories. Returns the file's full path
// (dir joined with the relative name), its CRC-32C and its size.
// Writes go through `fs` (null: io::DefaultFileSystem()).
absl::StatusOr<ShardFile> WriteShardCheckpoint(const std::string& dir,
                                               const ShardSnapshot& snapshot,
                                               io::FileSystem* fs = nullptr);

// WriteShardCheckpoint in two halves, for a write in the background: the
// snapshot's buffers are read only by SerializeShardCheckpoint (one copy
// into *bytes, whose capacity is reused), and WriteShardFile writes those
// bytes as the shard's file of `version` (`stages` as in
// io::FileSystem::WriteFileAtomically). The file is byte for byte
// WriteShardCheckpoint's.
absl::Status SerializeShardCheckpoint(const ShardSnapshot& snapshot,
                                      std::string* bytes);
absl::StatusOr<ShardFile> WriteShardFile(
    const std::string& dir, int shard, int num_shards, int64_t version,
    absl::string_view bytes, io::FileSystem* fs = nullptr,
    const io::WriteStages& stages = nullptr);
// dir/ckpt-<version>/shard-<shard>-of-<num_shards>.safetensors.
std::string ShardFilePath(const std::string& dir, int shard, int num_shards,
                          int64_t version);

struct Manifest {
  int64_t version = 0;
  int num_shards = 0;
  std::string config_json;  // BertConfig::ToJson()
  std::string task;         // "pretrain" | "classify"
  std::string optimizer;    // e.g. "adam_weight_decay"
  int state_slots = 0;      // 0, 1 or 2
  std::string plan_text;    // PartitionPlan::ToText()
  // One per shard. Paths are relative to the manifest's directory; ReadManifest
  // returns them so. WriteManifest also accepts the full paths that
  // WriteShardCheckpoint returns (dir/ckpt-<version>/...) and stores them
  // relative.
  std::vector<ShardFile> files;
  // The examples the updates up to `version` consumed (ExampleLedger text;
  // empty in checkpoints written before it was recorded).
  std::string example_ledger;
  // Provenance (format_version 2; empty when read from a version 1
  // manifest): the release that wrote it (common/version.h) and the
  // SHA-256 of the text form of the job spec it ran (JobSpecSha256).
  std::string release;
  std::string spec_sha256;
};

// Validates `manifest` (every field, the plan against num_shards, and that
// every file exists with the recorded size), writes
// dir/ckpt-<version>/manifest.json atomically, then points dir/LATEST at it
// (atomically). Returns the manifest's path.
// A failed write (a full disk, a failed fsync) leaves LATEST, and so
// LatestManifest, at the previous checkpoint. Writes go through `fs` (null:
// io::DefaultFileSystem()).
absl::StatusOr<std::string> WriteManifest(const std::string& dir,
                                          const Manifest& manifest,
                                          io::FileSystem* fs = nullptr);

// Reads and validates a manifest (DataLoss naming the file and the field).
absl::StatusOr<Manifest> ReadManifest(const std::string& path);

// Path of the newest complete checkpoint's manifest under dir: the one LATEST
// names; if LATEST is absent or names a missing or invalid manifest (a torn
// write), the highest ckpt-<version>/manifest.json that reads and validates.
// NotFound if there is none.
absl::StatusOr<std::string> LatestManifest(const std::string& dir);

// Restores shard `shard` of `new_plan` (any number of shards) from the
// checkpoint at manifest_path. Checks that the checkpoint's tensors (names
// and sizes, from the manifest's plan) are exactly `layout`'s and that it
// has `state_slots` state slots; reads only the shard files that overlap the
// shard, verifying each one's size and CRC-32C against the manifest. Copies
// every overlapping element range into params (new_plan.shard_size(shard))
// and state ((state_slots, shard_size), slot-major; may be null when
// state_slots == 0). The outputs are written only after everything was read
// and validated: on error they are untouched. Returns the checkpoint version.
absl::StatusOr<int64_t> RestoreShard(const std::string& manifest_path,
                                     const ParamLayout& layout,
                                     const PartitionPlan& new_plan, int shard,
                                     int state_slots, float* params,
                                     float* state);

// Assembles the whole model from the checkpoint (every shard file verified
// as in RestoreShard) and writes it to out_path as Hugging Face safetensors
// (SaveBertWeights) with the manifest's config as metadata.
absl::Status ExportCheckpoint(const std::string& manifest_path,
                              const std::string& out_path);

// The whole model's parameters from the checkpoint (every shard file
// verified) into params (layout.total_size(), layout order), which must be
// the checkpoint's model; untouched on error. Returns the version.
absl::StatusOr<int64_t> LoadCheckpointParams(const std::string& manifest_path,
                                             const ParamLayout& layout,
                                             float* params);

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_COMMON_PS_CHECKPOINT_H_

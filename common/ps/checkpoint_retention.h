// Checkpoint retention (CheckpointSpec.keep): which checkpoints of a
// checkpoint root (layout in common/ps/checkpoint.h) to remove, and their
// removal. The coordinator prunes after each new checkpoint, off its lock,
// keeping the newest `keep` and every one still needed (an eval round not
// finished, the restart point).
// Thread-safety: stateless; one pruner per directory at a time.
#ifndef BERTPS_COMMON_PS_CHECKPOINT_RETENTION_H_
#define BERTPS_COMMON_PS_CHECKPOINT_RETENTION_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace bertps {
namespace ps {

// Versions of the complete checkpoints under `dir` (dir/ckpt-<v>/ with a
// manifest.json), ascending. A missing dir has none.
absl::StatusOr<std::vector<int64_t>> ListCheckpoints(const std::string& dir);

// Of `have`, those to remove: every version at or below `newest` that is
// neither among the `keep` newest of them nor `pinned`. Versions above
// `newest` (being written, or not reported yet) stay. keep <= 0: none.
std::vector<int64_t> CheckpointsToRemove(const std::vector<int64_t>& have,
                                         int keep, int64_t newest,
                                         const std::set<int64_t>& pinned);

// Removes dir/ckpt-<version>: its manifest first (from then on it is not a
// complete checkpoint, so nothing restores a half-removed one), then its
// other files and the directory. NotFound when it does not exist.
absl::Status RemoveCheckpoint(const std::string& dir, int64_t version);

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_COMMON_PS_CHECKPOINT_RETENTION_H_

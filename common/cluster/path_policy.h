// Where a job may read and write, when the coordinator confines it
// (--data_root, --output_root; docs/security.md). Without roots every path is
// taken as given: whoever may submit a job may make the daemons read and
// write any file their user can. With them, every path of a spec must be
// absolute and, after "." and ".." are resolved lexically, lie under its
// root: inputs (data globs, eval data, a config.json model, init_weights,
// eval_checkpoint, checkpoint.restore, the preprocess vocab and WordNet)
// under --data_root or --output_root (a job reads earlier jobs' outputs),
// outputs (checkpoint.dir, export_path, output_dir, tensorboard_dir) under
// --output_root.
// Symbolic links inside a root are followed by the daemons as usual: the
// roots bound what a spec names, the file system's permissions the rest.
// Thread-safety: pure functions.
#ifndef BERTPS_COMMON_CLUSTER_PATH_POLICY_H_
#define BERTPS_COMMON_CLUSTER_PATH_POLICY_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/job.pb.h"

namespace bertps {

struct PathRoots {
  std::string data_root;    // empty: inputs anywhere
  std::string output_root;  // empty: outputs anywhere
};

// `path` with "." and ".." resolved and repeated slashes dropped, lexically;
// ".." above the top of an absolute path stays at "/".
std::string LexicalNormal(absl::string_view path);

// Whether `path` is `root` or lies under it, both taken lexically
// (LexicalNormal); every path is under "/".
bool LexicallyUnder(absl::string_view path, absl::string_view root);

// The paths a job writes, as (field, path) pairs, the empty ones left out.
std::vector<std::pair<const char*, std::string>> JobOutputPaths(
    const JobSpec& spec);

// OK, or INVALID_ARGUMENT naming the field, the path and the root.
absl::Status CheckJobPaths(const JobSpec& spec, const PathRoots& roots);

}  // namespace bertps

#endif  // BERTPS_COMMON_CLUSTER_PATH_POLICY_H_

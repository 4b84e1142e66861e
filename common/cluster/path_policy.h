// Where a job may read and write (docs/security.md, "Confining paths").
//
// Always: no path field of a spec may hold NUL or another control character
// (a byte < 0x20, or 0x7f), and a data pattern (data[], eval.data[]) may hold
// glob(3) characters (* ? [ and the escaping \) only in its last component,
// so that a pattern never walks directories it does not name (glibc's glob
// matches ".?" to "..").
//
// When the coordinator confines jobs (--data_root, --output_root), every
// path of a spec must also be absolute and lie under its root twice over:
// after "." and ".." are resolved lexically, and after its symbolic links
// are resolved (ResolvePath; the roots are resolved too), so that a link
// planted inside a root that points out of it is refused. Inputs (data
// globs, eval data, a config.json model, init_weights, eval_checkpoint,
// checkpoint.restore, the vocabularies and WordNet) lie under --data_root or
// --output_root (a job reads earlier jobs' outputs); outputs
// (checkpoint.dir, export_path, output_dir, tensorboard_dir,
// eval.predictions_dir, job_dir) under --output_root. Every file a data
// pattern matches is resolved and checked the same way (CheckInputFile)
// before it is opened or leased. Without roots every path is taken as given.
//
// The check runs twice: at submit, by the coordinator (CheckJobPaths), and
// by every member before it opens or creates anything of an assignment
// (CheckAssignmentPaths, with the roots the coordinator sends), since links
// may change in between. What is left is the moment between a member's
// check and its open: the file system's permissions bound that.
// Thread-safety: functions of their arguments and of the file system.
#ifndef BERTPS_COMMON_CLUSTER_PATH_POLICY_H_
#define BERTPS_COMMON_CLUSTER_PATH_POLICY_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"

namespace bertps {

struct PathRoots {
  std::string data_root;    // empty: inputs anywhere
  std::string output_root;  // empty: outputs anywhere
  bool confined() const { return !data_root.empty() || !output_root.empty(); }
};

// `path` with "." and ".." resolved and repeated slashes dropped, lexically;
// ".." above the top of an absolute path stays at "/".
std::string LexicalNormal(absl::string_view path);

// Whether `path` is `root` or lies under it, both taken lexically
// (LexicalNormal); every path is under "/".
bool LexicallyUnder(absl::string_view path, absl::string_view root);

// `path` as the kernel would resolve it now, symbolic links followed: the
// realpath(3) of its longest existing prefix, then the rest, which does not
// exist yet (so holds no link) and may not hold ".." (a link made there
// later would change what it means). INVALID_ARGUMENT for a prefix that
// cannot be resolved, a link to nothing (writing through it would create
// its target) or such a "..".
absl::StatusOr<std::string> ResolvePath(absl::string_view path);

// INVALID_ARGUMENT "job spec: <field> ..." if `path` holds NUL or another
// control character (the path is shown escaped).
absl::Status CheckPathCharacters(absl::string_view field,
                                 absl::string_view path);

// INVALID_ARGUMENT "job spec: <field> ..." if a glob character (* ? [ \)
// of the data pattern `pattern` lies before its last '/'.
absl::Status CheckDataPattern(absl::string_view field,
                              absl::string_view pattern);

// The paths a job writes, as (field, path) pairs, the empty ones left out.
std::vector<std::pair<const char*, std::string>> JobOutputPaths(
    const JobSpec& spec);

// OK, or INVALID_ARGUMENT naming the field, the path and what is wrong: a
// control character; a glob character in a directory of a data pattern;
// with roots, a relative path, a path outside its root (lexically, or once
// resolved: then with the path it resolves to and the root).
absl::Status CheckJobPaths(const JobSpec& spec, const PathRoots& roots);

// An existing input (a file a data pattern matched, a member's data file or
// item): OK when not confined or when it resolves under --data_root or
// --output_root; INVALID_ARGUMENT naming `what`, the file, where it
// resolves and the roots otherwise.
absl::Status CheckInputFile(absl::string_view what, const std::string& file,
                            const PathRoots& roots);

// A member's check of its assignment before it opens or creates anything:
// with the assignment's data_root/output_root (nothing when both are
// empty), CheckJobPaths of its spec, and CheckInputFile of its data files
// and of its item's input and checkpoint, links resolved now.
absl::Status CheckAssignmentPaths(const Assignment& assignment);

}  // namespace bertps

#endif  // BERTPS_COMMON_CLUSTER_PATH_POLICY_H_

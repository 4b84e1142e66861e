// A FileSystem for tests that fails the way real disks do, on real files:
//   kNoSpace      the write stops half way (ENOSPC): the temporary file is
//                 removed, nothing is renamed, ResourceExhausted.
//   kFsyncFails   all data written, fsync fails (EIO): the temporary file is
//                 removed, nothing is renamed, DataLoss.
//   kCrash        the process dies half way through the write: half the data
//                 stays in `path.tmp`, nothing is renamed, Aborted.
//   kLyingDisk    the disk acknowledges a write it then loses: the final
//                 file holds only the first half, and the call returns OK.
// The fault hits the `nth` (1-based) WriteFileAtomically whose path contains
// `match`, once; every other call goes to the real file system.
//
// Thread-safety: thread-safe.
#ifndef BERTPS_COMMON_IO_FAULT_FILE_SYSTEM_H_
#define BERTPS_COMMON_IO_FAULT_FILE_SYSTEM_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/io/file_util.h"

namespace bertps {
namespace io {

class FaultFileSystem : public FileSystem {
 public:
  enum Fault { kNone, kNoSpace, kFsyncFails, kCrash, kLyingDisk };

  // Arms one fault (replacing an armed one).
  void Arm(Fault fault, std::string match, int nth = 1)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the armed fault has hit.
  bool hit() const ABSL_LOCKS_EXCLUDED(mu_);

  using FileSystem::WriteFileAtomically;
  absl::Status WriteFileAtomically(const std::string& path,
                                   absl::string_view data,
                                   const WriteStages& stages) override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  Fault fault_ ABSL_GUARDED_BY(mu_) = kNone;
  std::string match_ ABSL_GUARDED_BY(mu_);
  int left_ ABSL_GUARDED_BY(mu_) = 0;
  bool hit_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace io
}  // namespace bertps

#endif  // BERTPS_COMMON_IO_FAULT_FILE_SYSTEM_H_

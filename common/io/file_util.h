// Small POSIX file helpers shared by the file formats in common/io.
//
// Atomic replacement: data goes to `path + ".tmp"`, is fsync'ed, renamed over
// `path`, and the directory is fsync'ed, so after a crash `path` holds either
// the old or the new complete file, never a partial one.
//
// Thread-safety: the functions are thread-safe, but two writers of the same
// path at once race on the same temporary file.
#ifndef BERTPS_COMMON_IO_FILE_UTIL_H_
#define BERTPS_COMMON_IO_FILE_UTIL_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bertps {
namespace io {

// A status for a failed system call: NotFound for ENOENT, PermissionDenied
// for EACCES/EPERM, otherwise Internal; the message is
// "<what> <path>: <strerror>".
absl::Status ErrnoStatus(int err, absl::string_view what,
                         absl::string_view path);

// The largest file ReadFileToString reads unless told otherwise.
inline constexpr int64_t kMaxReadFileBytes = int64_t{64} << 30;

// Opens `path` read-only and returns its descriptor (the caller closes it),
// refusing with InvalidArgument anything but a regular file: a FIFO (opened
// without blocking, then refused), a device such as /dev/zero, a directory
// or a socket. `size` (may be null) gets the file's size; `open_errno` (may
// be null) the errno of a failed open(2) (0 otherwise), e.g. EMFILE.
absl::StatusOr<int> OpenRegularFile(const std::string& path,
                                    int64_t* size = nullptr,
                                    int* open_errno = nullptr);

// Reads the whole of a regular file (see OpenRegularFile) of at most
// `max_bytes`; a larger one is refused with InvalidArgument naming both
// sizes, before anything is allocated.
absl::StatusOr<std::string> ReadFileToString(
    const std::string& path, int64_t max_bytes = kMaxReadFileBytes);

// preads until n bytes or the end of the file; returns the bytes read.
absl::StatusOr<size_t> PreadFull(int fd, char* dst, size_t n, int64_t offset,
                                 const std::string& path);

// Writes all of `data` to fd (retrying short writes and EINTR).
absl::Status WriteAll(int fd, absl::string_view data, const std::string& path);

// fsyncs the directory that contains `path`.
absl::Status SyncParentDir(const std::string& path);

// Renames tmp_path over path (after the caller fsync'ed and closed it), then
// fsyncs the directory.
absl::Status CommitTempFile(const std::string& tmp_path,
                            const std::string& path);

// Called at each stage of an atomic write: "written" (all the data is in
// path.tmp, not fsynced), "synced" (fsynced and closed, not renamed),
// "renamed" (renamed over path, the directory fsynced: durable). For crash
// points and progress; may be empty.
using WriteStages = std::function<void(const char* stage)>;

// Ends an atomic write whose data went to `tmp` through `fd` (`written`:
// how that went): says "written", fsyncs, closes, says "synced", renames over
// `path` (CommitTempFile), says "renamed". On any error the temporary file
// is removed. For writers that put the data in themselves.
absl::Status FinishTempFile(int fd, const std::string& tmp,
                            const std::string& path, absl::Status written,
                            const WriteStages& stages);

// Writes `data` to path atomically (see above).
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view data,
                                 const WriteStages& stages = nullptr);

// mkdir -p, fsyncing the parent of every directory it creates.
absl::Status MakeDirs(const std::string& dir);

// Whether files can be written in `dir` (created if missing): creates and
// removes a small file there. For outputs written at the end of a long run
// (an export, a checkpoint), checked at its start. The error names `what`.
absl::Status CheckWritableDir(const std::string& dir, absl::string_view what);

// The file operations of durable outputs (checkpoints), behind a seam so that
// tests can inject a full disk, a torn write, a failed fsync or a disk that
// lies (common/io/fault_file_system.h). DefaultFileSystem() is the functions
// above.
class FileSystem {
 public:
  virtual ~FileSystem() = default;
  virtual absl::Status MakeDirs(const std::string& dir);
  absl::Status WriteFileAtomically(const std::string& path,
                                   absl::string_view data) {
    return WriteFileAtomically(path, data, nullptr);
  }
  // The same, calling `stages` (may be empty) at each stage reached.
  virtual absl::Status WriteFileAtomically(const std::string& path,
                                           absl::string_view data,
                                           const WriteStages& stages);
  // The size of a file (NotFound naming it if there is none).
  virtual absl::StatusOr<int64_t> FileSize(const std::string& path);
};

// The process's real file system (never null; not owned).
FileSystem* DefaultFileSystem();

}  // namespace io
}  // namespace bertps

#endif  // BERTPS_COMMON_IO_FILE_UTIL_H_

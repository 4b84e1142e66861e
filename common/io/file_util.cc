#include "common/io/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace bertps {
namespace io {

absl::Status ErrnoStatus(int err, absl::string_view what,
                         absl::string_view path) {
  const std::string msg = absl::StrCat(what, " ", path, ": ", strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

namespace {

const char* FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

absl::StatusOr<int> OpenRegularFile(const std::string& path, int64_t* size,
                                    int* open_errno) {
  if (open_errno != nullptr) *open_errno = 0;
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (open_errno != nullptr) *open_errno = err;
    return ErrnoStatus(err, "open", path);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, "fstat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is ", FileKind(st.st_mode), ", not a regular file"));
  }
  // Regular files ignore O_NONBLOCK; clear it all the same.
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  if (size != nullptr) *size = static_cast<int64_t>(st.st_size);
  return fd;
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                             int64_t max_bytes) {
  int64_t size = 0;
  ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, &size));
  if (size > max_bytes) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is ", size, " bytes, over the limit of ",
                     max_bytes, " bytes for this file"));
  }
  std::string data;
  data.resize(static_cast<size_t>(size));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = pread(fd, &data[done], data.size() - done, done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      return ErrnoStatus(err, "read", path);
    }
    if (n == 0) break;  // The file shrank under us.
    done += static_cast<size_t>(n);
  }
  close(fd);
  data.resize(done);
  return data;
}

absl::StatusOr<size_t> PreadFull(int fd, char* dst, size_t n, int64_t offset,
                                 const std::string& path) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got =
        pread(fd, dst + done, n - done, offset + static_cast<int64_t>(done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "read", path);
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "write", path);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status SyncParentDir(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos
                              ? "."
                              : (slash == 0 ? "/" : path.substr(0, slash));
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open directory", dir);
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  if (rc != 0) return ErrnoStatus(err, "fsync directory", dir);
  return absl::OkStatus();
}

absl::Status CommitTempFile(const std::string& tmp_path,
                            const std::string& path) {
  if (rename(tmp_path.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp_path.c_str());
    return ErrnoStatus(err, absl::StrCat("rename ", tmp_path, " to"), path);
  }
  return SyncParentDir(path);
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view data,
                                 const WriteStages& stages) {
  const std::string tmp = path + ".tmp";
  const int fd =
      open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "create", tmp);
  return FinishTempFile(fd, tmp, path, WriteAll(fd, data, tmp), stages);
}

absl::Status FinishTempFile(int fd, const std::string& tmp,
                            const std::string& path, absl::Status status,
                            const WriteStages& stages) {
  if (status.ok() && stages) stages("written");
  if (status.ok() && fsync(fd) != 0) status = ErrnoStatus(errno, "fsync", tmp);
  if (close(fd) != 0 && status.ok()) status = ErrnoStatus(errno, "close", tmp);
  if (!status.ok()) {
    unlink(tmp.c_str());
    return status;
  }
  if (stages) stages("synced");
  RETURN_IF_ERROR(CommitTempFile(tmp, path));
  if (stages) stages("renamed");
  return absl::OkStatus();
}

absl::Status MakeDirs(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return absl::OkStatus();
  }
  const size_t slash = dir.rfind('/');
  const std::string parent =
      slash == std::string::npos ? "." : slash == 0 ? "/" : dir.substr(0, slash);
  if (parent != dir && parent != ".") RETURN_IF_ERROR(MakeDirs(parent));
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, "create directory", dir);
  }
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " exists and is not a directory"));
  }
  return SyncParentDir(dir);
}

absl::Status CheckWritableDir(const std::string& dir,
                              absl::string_view what) {
  absl::Status made = MakeDirs(dir);
  if (!made.ok()) return Annotate(made, what);
  const std::string probe =
      absl::StrCat(dir.empty() ? "." : dir, "/.bertps-write-check-", getpid());
  const int fd =
      open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Annotate(ErrnoStatus(errno, "cannot write in", dir), what);
  }
  close(fd);
  unlink(probe.c_str());
  return absl::OkStatus();
}

absl::Status FileSystem::MakeDirs(const std::string& dir) {
  return io::MakeDirs(dir);
}

absl::Status FileSystem::WriteFileAtomically(const std::string& path,
                                             absl::string_view data,
                                             const WriteStages& stages) {
  return io::WriteFileAtomically(path, data, stages);
}

absl::StatusOr<int64_t> FileSystem::FileSize(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "stat", path);
  return static_cast<int64_t>(st.st_size);
}

FileSystem* DefaultFileSystem() {
  static FileSystem* fs = new FileSystem();
  return fs;
}

}  // namespace io
}  // namespace bertps

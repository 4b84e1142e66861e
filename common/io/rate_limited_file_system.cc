#include "common/io/rate_limited_file_system.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace bertps {
namespace io {

namespace {
constexpr size_t kPiece = size_t{1} << 20;
}  // namespace

RateLimitedFileSystem::RateLimitedFileSystem(double bytes_per_second)
    : bytes_per_second_(std::max(1.0, bytes_per_second)) {}

void RateLimitedFileSystem::Pace(int64_t bytes) {
  absl::Time start;
  {
    absl::MutexLock l(&mu_);
    const absl::Time now = absl::Now();
    start = std::max(now, next_free_);
    next_free_ = start + absl::Seconds(static_cast<double>(bytes) /
                                       bytes_per_second_);
  }
  absl::SleepFor(start - absl::Now());
}

absl::Status RateLimitedFileSystem::WriteFileAtomically(
    const std::string& path, absl::string_view data,
    const WriteStages& stages) {
  const std::string tmp = path + ".tmp";
  const int fd =
      open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "create", tmp);
  absl::Status status;
  for (size_t at = 0; at < data.size() && status.ok(); at += kPiece) {
    const absl::string_view piece = data.substr(at, kPiece);
    Pace(static_cast<int64_t>(piece.size()));
    status = WriteAll(fd, piece, tmp);
  }
  return FinishTempFile(fd, tmp, path, status, stages);
}

}  // namespace io
}  // namespace bertps

#include "common/io/fault_file_system.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace bertps {
namespace io {

void FaultFileSystem::Arm(Fault fault, std::string match, int nth) {
  absl::MutexLock l(&mu_);
  fault_ = fault;
  match_ = std::move(match);
  left_ = nth;
  hit_ = false;
}

bool FaultFileSystem::hit() const {
  absl::MutexLock l(&mu_);
  return hit_;
}

absl::Status FaultFileSystem::WriteFileAtomically(const std::string& path,
                                                  absl::string_view data,
                                                  const WriteStages& stages) {
  Fault fault = kNone;
  {
    absl::MutexLock l(&mu_);
    if (fault_ != kNone && absl::StrContains(path, match_) && --left_ == 0) {
      fault = fault_;
      fault_ = kNone;
      hit_ = true;
    }
  }
  const std::string tmp = path + ".tmp";
  const absl::string_view half = data.substr(0, data.size() / 2);
  switch (fault) {
    case kNone:
      return FileSystem::WriteFileAtomically(path, data, stages);
    case kNoSpace:
      (void)io::WriteFileAtomically(tmp, half);
      unlink(tmp.c_str());
      return absl::ResourceExhaustedError(
          absl::StrCat("write ", tmp, ": No space left on device"));
    case kFsyncFails:
      (void)io::WriteFileAtomically(tmp, data);
      unlink(tmp.c_str());
      return absl::DataLossError(
          absl::StrCat("fsync ", tmp, ": Input/output error"));
    case kCrash:
      (void)io::WriteFileAtomically(tmp, half);  // left behind
      return absl::AbortedError(
          absl::StrCat("the process died writing ", tmp));
    case kLyingDisk:
      return FileSystem::WriteFileAtomically(path, half);
  }
  return absl::OkStatus();
}

}  // namespace io
}  // namespace bertps

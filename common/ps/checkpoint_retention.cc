#include "common/ps/checkpoint_retention.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"

namespace bertps {
namespace ps {
namespace fs = std::filesystem;

absl::StatusOr<std::vector<int64_t>> ListCheckpoints(const std::string& dir) {
  std::vector<int64_t> versions;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return versions;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint dir ", dir, ": ", ec.message()));
  }
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint dir ", dir, ": ", ec.message()));
    }
    const std::string name = it->path().filename().string();
    int64_t v = 0;
    if (!absl::StartsWith(name, "ckpt-") ||
        !absl::SimpleAtoi(name.substr(5), &v) || v < 0 ||
        name != absl::StrCat("ckpt-", v)) {
      continue;
    }
    if (fs::is_regular_file(it->path() / "manifest.json", ec)) {
      versions.push_back(v);
    }
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

std::vector<int64_t> CheckpointsToRemove(const std::vector<int64_t>& have,
                                         int keep, int64_t newest,
                                         const std::set<int64_t>& pinned) {
  std::vector<int64_t> candidates;
  if (keep <= 0) return candidates;
  for (int64_t v : have) {
    if (v <= newest) candidates.push_back(v);
  }
  std::sort(candidates.begin(), candidates.end());
  // The newest `keep` of them stay.
  const size_t n = candidates.size() > static_cast<size_t>(keep)
                       ? candidates.size() - static_cast<size_t>(keep)
                       : 0;
  std::vector<int64_t> remove;
  for (size_t i = 0; i < n; ++i) {
    if (pinned.count(candidates[i]) == 0) remove.push_back(candidates[i]);
  }
  return remove;
}

absl::Status RemoveCheckpoint(const std::string& dir, int64_t version) {
  const fs::path path = fs::path(dir) / absl::StrCat("ckpt-", version);
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path.string(), " does not exist"));
  }
  // The manifest first: a crash after it leaves an incomplete checkpoint,
  // which nothing lists or restores.
  if (!fs::remove(path / "manifest.json", ec) && ec) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot remove ", (path / "manifest.json").string(), ": ",
        ec.message()));
  }
  fs::remove_all(path, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot remove ", path.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace ps
}  // namespace bertps

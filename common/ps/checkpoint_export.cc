#include "common/ps/checkpoint_export.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/model/bert_config.h"
#include "common/model/params.h"
#include "common/ps/checkpoint.h"
#include "common/status.h"

namespace bertps {
namespace ps {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The steps of the checkpoints under dir (ckpt-<step> directories).
std::vector<int64_t> StepsUnder(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    int64_t v = 0;
    if (absl::StartsWith(name, "ckpt-") &&
        absl::SimpleAtoi(name.substr(5), &v)) {
      steps.push_back(v);
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

}  // namespace

absl::StatusOr<std::string> FindManifest(const std::string& source,
                                         std::optional<int64_t> step) {
  if (source.empty()) {
    return absl::InvalidArgumentError("no checkpoint named");
  }
  if (!IsDirectory(source)) {
    ASSIGN_OR_RETURN(Manifest m, ReadManifest(source));
    if (step && m.version != *step) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", source, " is of step ", m.version,
                       ", not of step ", *step));
    }
    return source;
  }
  if (!step) return LatestManifest(source);
  const std::string path =
      absl::StrCat(source, "/ckpt-", *step, "/manifest.json");
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    const std::vector<int64_t> steps = StepsUnder(source);
    return absl::NotFoundError(absl::StrCat(
        "no checkpoint of step ", *step, " in ", source,
        steps.empty() ? std::string(" (it holds none)")
                      : absl::StrCat(" (it holds steps ",
                                     absl::StrJoin(steps, ", "), ")")));
  }
  return path;
}

absl::StatusOr<int64_t> ExportCheckpointModel(const std::string& manifest_path,
                                              const std::string& export_path,
                                              const HfExportOptions& options) {
  if (export_path.empty()) {
    return absl::InvalidArgumentError("no export path named");
  }
  struct stat st;
  if (lstat(export_path.c_str(), &st) == 0) {
    return absl::AlreadyExistsError(absl::StrCat(
        export_path, " exists: an export is written only to a new path "
                     "(remove it or name another)"));
  }
  ASSIGN_OR_RETURN(Manifest m, ReadManifest(manifest_path));
  ASSIGN_OR_RETURN(BertConfig config, ParseBertConfig(m.config_json));
  BertTask task;
  if (m.task == "pretrain") {
    task = BertTask::kPretrain;
  } else if (m.task == "classify") {
    task = BertTask::kClassify;
  } else {
    return absl::DataLossError(absl::StrCat(
        manifest_path, ": unknown task \"", m.task, "\""));
  }
  if (!IsHfModelDir(export_path)) {
    RETURN_IF_ERROR(ExportCheckpoint(manifest_path, export_path));
    return m.version;
  }
  if (!options.vocab_path.empty()) {
    RETURN_IF_ERROR(CheckHfVocabulary(options.vocab_path, config.vocab_size));
  }
  const ParamLayout layout = ParamLayout::ForBert(config, task);
  std::vector<float> params(layout.total_size());
  ASSIGN_OR_RETURN(int64_t version,
                   LoadCheckpointParams(manifest_path, layout, params.data()));
  // Written beside the destination, then renamed into place.
  std::string dest = export_path;
  while (dest.size() > 1 && dest.back() == '/') dest.pop_back();
  const std::string staging =
      absl::StrCat(dest, ".export-", getpid(), ".tmp");
  std::error_code ec;
  std::filesystem::remove_all(staging, ec);
  absl::Status written =
      WriteHfModelDir(staging, layout, params.data(), config, task, options);
  if (written.ok() && std::rename(staging.c_str(), dest.c_str()) != 0) {
    written = absl::InternalError(absl::StrCat(
        "rename ", staging, " to ", dest, ": ", std::strerror(errno)));
  }
  if (!written.ok()) {
    std::filesystem::remove_all(staging, ec);
    return written;
  }
  return version;
}

}  // namespace ps
}  // namespace bertps

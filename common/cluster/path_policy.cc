#include "common/cluster/path_policy.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace bertps {
namespace {

bool Under(const std::string& path, const std::string& root) {
  const std::string r = LexicalNormal(root);
  return path == r || r == "/" || absl::StartsWith(path, r + "/");
}

}  // namespace

bool LexicallyUnder(absl::string_view path, absl::string_view root) {
  return Under(LexicalNormal(path), std::string(root));
}

std::string LexicalNormal(absl::string_view path) {
  std::vector<absl::string_view> parts;
  const bool absolute = absl::StartsWith(path, "/");
  for (absl::string_view p : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (p == ".") continue;
    if (p == "..") {
      if (!parts.empty() && parts.back() != "..") {
        parts.pop_back();
      } else if (!absolute) {
        parts.push_back(p);
      }
      continue;
    }
    parts.push_back(p);
  }
  const std::string joined = absl::StrJoin(parts, "/");
  if (absolute) return "/" + joined;
  return joined.empty() ? "." : joined;
}

std::vector<std::pair<const char*, std::string>> JobOutputPaths(
    const JobSpec& s) {
  std::vector<std::pair<const char*, std::string>> out;
  for (auto [field, path] : {std::pair<const char*, std::string>{
                                 "checkpoint.dir", s.checkpoint().dir()},
                             {"export_path", s.export_path()},
                             {"output_dir", s.output_dir()},
                             {"tensorboard_dir", s.tensorboard_dir()},
                             {"eval.predictions_dir",
                              s.eval().predictions_dir()},
                             {"job_dir", s.job_dir()}}) {
    if (!path.empty()) out.emplace_back(field, std::move(path));
  }
  return out;
}

absl::Status CheckJobPaths(const JobSpec& s, const PathRoots& roots) {
  auto check = [&](absl::string_view field, const std::string& path,
                   bool output) -> absl::Status {
    if (path.empty()) return absl::OkStatus();
    const std::string& main = output ? roots.output_root : roots.data_root;
    if (main.empty() && (output || roots.output_root.empty())) {
      return absl::OkStatus();  // not confined
    }
    const std::string where =
        output ? absl::StrCat("--output_root ", roots.output_root)
               : roots.output_root.empty()
                     ? absl::StrCat("--data_root ", roots.data_root)
                     : absl::StrCat("--data_root ", roots.data_root,
                                    " or --output_root ", roots.output_root);
    if (!absl::StartsWith(path, "/")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job spec: ", field, " \"", path, "\" must be an absolute path under ",
          where));
    }
    const std::string n = LexicalNormal(path);
    const bool ok = output ? Under(n, roots.output_root)
                           : ((!roots.data_root.empty() && Under(n, roots.data_root)) ||
                              (!roots.output_root.empty() &&
                               Under(n, roots.output_root)));
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job spec: ", field, " \"", path, "\" (", n, ") is outside ", where));
    }
    return absl::OkStatus();
  };
  if (roots.data_root.empty() && roots.output_root.empty()) {
    return absl::OkStatus();
  }
  for (int i = 0; i < s.data_size(); ++i) {
    if (absl::Status st = check(absl::StrCat("data[", i, "]"), s.data(i), false);
        !st.ok()) {
      return st;
    }
  }
  for (int i = 0; i < s.eval().data_size(); ++i) {
    if (absl::Status st = check(absl::StrCat("eval.data[", i, "]"),
                                s.eval().data(i), false);
        !st.ok()) {
      return st;
    }
  }
  // A model is a preset name unless it names a file.
  const bool model_file = s.model().find('/') != std::string::npos ||
                          absl::EndsWith(s.model(), ".json");
  const std::pair<const char*, std::string> inputs[] = {
      {"model", model_file ? s.model() : ""},
      {"init_weights", s.init_weights()},
      {"eval_checkpoint", s.eval_checkpoint()},
      {"checkpoint.restore", s.checkpoint().restore()},
      {"preprocess.vocab", s.preprocess().vocab()},
      {"vocab", s.vocab()},
      {"preprocess.augment.wordnet_dir", s.preprocess().augment().wordnet_dir()},
  };
  for (const auto& [field, path] : inputs) {
    if (absl::Status st = check(field, path, false); !st.ok()) return st;
  }
  for (const auto& [field, path] : JobOutputPaths(s)) {
    if (absl::Status st = check(field, path, true); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace bertps

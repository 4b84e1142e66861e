#include "common/cluster/path_policy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"

namespace bertps {
namespace {

bool Under(const std::string& path, const std::string& root) {
  const std::string r = LexicalNormal(root);
  return path == r || r == "/" || absl::StartsWith(path, r + "/");
}

// A root as the kernel sees it (its links resolved); lexical if it cannot be
// resolved (a root that does not exist yet holds nothing either way).
std::string ResolvedRoot(const std::string& root) {
  absl::StatusOr<std::string> r = ResolvePath(root);
  return r.ok() ? *r : LexicalNormal(root);
}

// "--output_root /srv/out", or for an input "--data_root D or --output_root
// O" (those set); a root whose links resolve elsewhere with that place.
std::string Where(const PathRoots& roots, bool output, bool resolved) {
  auto one = [resolved](const char* flag, const std::string& root) {
    std::string s = absl::StrCat(flag, " ", root);
    if (resolved) {
      const std::string r = ResolvedRoot(root);
      if (r != LexicalNormal(root)) absl::StrAppend(&s, " (", r, ")");
    }
    return s;
  };
  if (output) return one("--output_root", roots.output_root);
  if (roots.output_root.empty()) return one("--data_root", roots.data_root);
  if (roots.data_root.empty()) return one("--output_root", roots.output_root);
  return absl::StrCat(one("--data_root", roots.data_root), " or ",
                      one("--output_root", roots.output_root));
}

// Whether the resolved path `r` lies under a resolved root it may use.
bool ResolvedUnder(const std::string& r, const PathRoots& roots, bool output) {
  if (output) return Under(r, ResolvedRoot(roots.output_root));
  return (!roots.data_root.empty() && Under(r, ResolvedRoot(roots.data_root))) ||
         (!roots.output_root.empty() &&
          Under(r, ResolvedRoot(roots.output_root)));
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

absl::StatusOr<std::string> ResolvePath(absl::string_view path) {
  const bool absolute = absl::StartsWith(path, "/");
  const std::vector<std::string> parts =
      absl::StrSplit(path, '/', absl::SkipEmpty());
  auto prefix_of = [&](size_t k) {
    std::string p = absl::StrJoin(parts.begin(), parts.begin() + k, "/");
    if (absolute) return "/" + p;
    return p.empty() ? std::string(".") : p;
  };
  // The longest prefix that is there ("/" or "." always is).
  for (size_t k = parts.size() + 1; k-- > 0;) {
    const std::string prefix = prefix_of(k);
    struct stat st;
    if (lstat(prefix.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) continue;
      return absl::InvalidArgumentError(
          absl::StrCat("cannot resolve ", prefix, ": ", strerror(errno)));
    }
    char* real = realpath(prefix.c_str(), nullptr);
    if (real == nullptr) {
      const int err = errno;
      if (S_ISLNK(st.st_mode) && err == ENOENT) {
        return absl::InvalidArgumentError(
            absl::StrCat(prefix, " is a symbolic link to nothing"));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("cannot resolve ", prefix, ": ", strerror(err)));
    }
    std::string out = real;
    free(real);
    for (size_t i = k; i < parts.size(); ++i) {
      if (parts[i] == ".") continue;
      if (parts[i] == "..") {
        return absl::InvalidArgumentError(absl::StrCat(
            "\"..\" after ", prefix_of(i), ", which does not exist yet"));
      }
      if (out != "/") out += "/";
      out += parts[i];
    }
    return out;
  }
  return absl::InvalidArgumentError(absl::StrCat("cannot resolve ", path));
}

absl::Status CheckPathCharacters(absl::string_view field,
                                 absl::string_view path) {
  for (size_t i = 0; i < path.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(path[i]);
    if (c < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "job spec: %s \"%s\" holds a control character (byte 0x%02x at "
          "offset %d); a path may not",
          field, absl::CHexEscape(path), c, i));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDataPattern(absl::string_view field,
                              absl::string_view pattern) {
  const size_t slash = pattern.rfind('/');
  if (slash == absl::string_view::npos) return absl::OkStatus();
  const size_t bad = pattern.substr(0, slash).find_first_of("*?[\\");
  if (bad == absl::string_view::npos) return absl::OkStatus();
  const size_t begin = pattern.rfind('/', bad);  // bad < slash: one exists
  const size_t end = pattern.find('/', bad);
  const size_t from = begin == absl::string_view::npos ? 0 : begin + 1;
  return absl::InvalidArgumentError(absl::StrCat(
      "job spec: ", field, " \"", pattern, "\": the glob character '",
      pattern.substr(bad, 1), "' is in the directory \"",
      pattern.substr(from, end - from),
      "\"; only the last component of a data pattern may hold *, ?, [ or \\"));
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
                   bool output, bool pattern) -> absl::Status {
    if (path.empty()) return absl::OkStatus();
    if (absl::Status st = CheckPathCharacters(field, path); !st.ok()) {
      return st;
    }
    if (pattern) {
      if (absl::Status st = CheckDataPattern(field, path); !st.ok()) return st;
    }
    const std::string& main = output ? roots.output_root : roots.data_root;
    if (main.empty() && (output || roots.output_root.empty())) {
      return absl::OkStatus();  // not confined
    }
    if (!absl::StartsWith(path, "/")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job spec: ", field, " \"", path, "\" must be an absolute path under ",
          Where(roots, output, false)));
    }
    const std::string n = LexicalNormal(path);
    const bool ok = output ? Under(n, roots.output_root)
                           : ((!roots.data_root.empty() && Under(n, roots.data_root)) ||
                              (!roots.output_root.empty() &&
                               Under(n, roots.output_root)));
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job spec: ", field, " \"", path, "\" (", n, ") is outside ",
          Where(roots, output, false)));
    }
    // Again with the links resolved: a link inside a root may point out.
    absl::StatusOr<std::string> r = ResolvePath(path);
    if (!r.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job spec: ", field, " \"", path, "\": ", r.status().message()));
    }
    if (!ResolvedUnder(*r, roots, output)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job spec: ", field, " \"", path, "\" resolves to ", *r,
          ", outside ", Where(roots, output, true)));
    }
    return absl::OkStatus();
  };
  // job_dir first: the outputs left empty were made from it.
  RETURN_IF_ERROR(check("job_dir", s.job_dir(), true, false));
  for (int i = 0; i < s.data_size(); ++i) {
    RETURN_IF_ERROR(
        check(absl::StrCat("data[", i, "]"), s.data(i), false, true));
  }
  for (int i = 0; i < s.eval().data_size(); ++i) {
    RETURN_IF_ERROR(check(absl::StrCat("eval.data[", i, "]"),
                               s.eval().data(i), false, true));
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
    RETURN_IF_ERROR(check(field, path, false, false));
  }
  for (const auto& [field, path] : JobOutputPaths(s)) {
    RETURN_IF_ERROR(check(field, path, true, false));
  }
  return absl::OkStatus();
}

absl::Status CheckInputFile(absl::string_view what, const std::string& file,
                            const PathRoots& roots) {
  if (!roots.confined()) return absl::OkStatus();
  absl::StatusOr<std::string> r = ResolvePath(file);
  if (!r.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " \"", file, "\": ", r.status().message()));
  }
  if (!ResolvedUnder(*r, roots, false)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " \"", file, "\" resolves to ", *r, ", outside ",
                     Where(roots, false, true)));
  }
  return absl::OkStatus();
}

absl::Status CheckAssignmentPaths(const Assignment& a) {
  const PathRoots roots{a.data_root(), a.output_root()};
  if (!roots.confined()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckJobPaths(a.spec(), roots));
  for (int i = 0; i < a.data_files_size(); ++i) {
    RETURN_IF_ERROR(CheckInputFile(absl::StrCat("data file ", i),
                                        a.data_files(i).path(), roots));
  }
  if (!a.item().input().empty()) {
    RETURN_IF_ERROR(
        CheckInputFile("item input", a.item().input(), roots));
  }
  if (!a.item().checkpoint().empty()) {
    RETURN_IF_ERROR(
        CheckInputFile("item checkpoint", a.item().checkpoint(), roots));
  }
  return absl::OkStatus();
}

}  // namespace bertps

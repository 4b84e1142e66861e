#include "common/crash_point.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace bertps {

void CrashPoint(const char* point, int64_t version, int index) {
  static const std::string* const spec = [] {
    const char* env = std::getenv("BERTPS_CRASH_AT");
    return new std::string(env == nullptr ? "" : env);
  }();
  if (spec->empty()) return;
  const std::string exact = absl::StrCat(point, ":", version, ":", index);
  const std::string any = absl::StrCat(point, ":*:", index);
  bool hit = false;
  for (absl::string_view one : absl::StrSplit(*spec, ',')) {
    hit = hit || one == exact || one == any;
  }
  if (!hit) return;
  std::fprintf(stderr, "crash point %s of version %lld hit\n", point,
               static_cast<long long>(version));
  std::fflush(stderr);
  std::raise(SIGKILL);
}

}  // namespace bertps

#include "common/crash_point.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace bertps {

namespace {

// Whether `env`'s list names `point` of `version` (or "*") for `index`.
bool Named(const std::string& env, const char* point, int64_t version,
           int index) {
  if (env.empty()) return false;
  const std::string exact = absl::StrCat(point, ":", version, ":", index);
  const std::string any = absl::StrCat(point, ":*:", index);
  for (absl::string_view one : absl::StrSplit(env, ',')) {
    if (one == exact || one == any) return true;
  }
  return false;
}

const std::string& Env(const char* name) {
  const char* v = std::getenv(name);
  return *new std::string(v == nullptr ? "" : v);
}

}  // namespace

void CrashPoint(const char* point, int64_t version, int index) {
  static const std::string& crash = Env("BERTPS_CRASH_AT");
  static const std::string& pause = Env("BERTPS_PAUSE_AT");
  if (crash.empty() && pause.empty()) return;
  const bool kill = Named(crash, point, version, index);
  static std::atomic<bool> paused{false};
  if (!kill && (!Named(pause, point, version, index) || paused.exchange(true))) {
    return;
  }
  std::fprintf(stderr,
               kill ? "crash point %s of version %lld hit\n"
                    : "pause point %s of version %lld reached (SIGSTOP)\n",
               point, static_cast<long long>(version));
  std::fflush(stderr);
  std::raise(kill ? SIGKILL : SIGSTOP);
}

}  // namespace bertps

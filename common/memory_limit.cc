#include "common/memory_limit.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace bertps {
namespace {

// Values this large mean "no limit" (v1 writes 2^63 rounded to a page).
constexpr int64_t kUnlimited = int64_t{1} << 60;

bool ReadInt(const std::string& path, int64_t* out) {
  std::ifstream in(path);
  std::string text;
  if (!in || !std::getline(in, text)) return false;
  text = std::string(absl::StripAsciiWhitespace(text));
  return absl::SimpleAtoi(text, out) && *out > 0 && *out < kUnlimited;
}

// The soft limit of /proc/self/limits' line starting `name` ("Max address
// space"); -1 when unlimited or absent.
int64_t SoftLimit(const std::string& limits, absl::string_view name) {
  std::ifstream in(limits);
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, name)) continue;
    std::vector<std::string> f =
        absl::StrSplit(rest, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    int64_t v = 0;
    if (!f.empty() && absl::SimpleAtoi(f[0], &v) && v >= 0) return v;
    return -1;  // "unlimited"
  }
  return -1;
}

// A "Vm...:   N kB" line of /proc/self/status, in bytes; -1 when absent.
int64_t StatusBytes(const std::string& status, absl::string_view key) {
  std::ifstream in(status);
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, key)) continue;
    std::vector<std::string> f =
        absl::StrSplit(rest, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    int64_t kb = 0;
    if (!f.empty() && absl::SimpleAtoi(f[0], &kb) && kb >= 0) return kb * 1024;
    return -1;
  }
  return -1;
}

}  // namespace

MemoryLimit DetectMemoryLimit(const std::string& root) {
  MemoryLimit limit;
  {
    std::ifstream in(root + "/proc/meminfo");
    std::string line;
    while (std::getline(in, line)) {
      absl::string_view rest = line;
      if (!absl::ConsumePrefix(&rest, "MemTotal:")) continue;
      int64_t kb = 0;
      std::vector<std::string> parts =
          absl::StrSplit(rest, ' ', absl::SkipEmpty());
      if (!parts.empty() && absl::SimpleAtoi(parts[0], &kb) && kb > 0) {
        limit.bytes = kb * 1024;
        limit.source = "MemTotal";
      }
      break;
    }
  }
  // The cgroup paths of this process: "0::/p" (v2), "N:memory:/p" (v1).
  std::vector<std::string> candidates;
  std::ifstream cg(root + "/proc/self/cgroup");
  std::string line;
  while (std::getline(cg, line)) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    const std::string path = f[2] == "/" ? "" : f[2];
    if (f[0] == "0" && f[1].empty()) {
      candidates.push_back(root + "/sys/fs/cgroup" + path + "/memory.max");
      candidates.push_back(root + "/sys/fs/cgroup/memory.max");
    } else if (f[1] == "memory") {
      candidates.push_back(root + "/sys/fs/cgroup/memory" + path +
                           "/memory.limit_in_bytes");
      candidates.push_back(root + "/sys/fs/cgroup/memory/memory.limit_in_bytes");
    }
  }
  for (const std::string& c : candidates) {
    int64_t v = 0;
    if (ReadInt(c, &v)) {
      if (limit.bytes == 0 || v < limit.bytes) {
        limit.bytes = v;
        limit.source = absl::StrCat("cgroup ", c.substr(c.rfind('/') + 1));
      }
      break;
    }
  }
  // Address-space limits: what they leave besides what is mapped now.
  struct Rlimit {
    const char* line;    // in /proc/self/limits
    const char* mapped;  // in /proc/self/status
    const char* name;
  };
  for (const Rlimit& r : {Rlimit{"Max address space", "VmSize:", "RLIMIT_AS"},
                          Rlimit{"Max data size", "VmData:", "RLIMIT_DATA"}}) {
    const int64_t cap = SoftLimit(root + "/proc/self/limits", r.line);
    if (cap < 0 || cap >= kUnlimited) continue;
    const int64_t mapped =
        std::max<int64_t>(0, StatusBytes(root + "/proc/self/status", r.mapped));
    const int64_t left =
        std::max<int64_t>(1, cap - mapped - kAddressSpaceReserve);
    if (limit.bytes == 0 || left < limit.bytes) {
      limit.bytes = left;
      limit.source = absl::StrCat(
          r.name, " ", FormatBytes(cap), " less ", FormatBytes(mapped),
          " mapped and ", FormatBytes(kAddressSpaceReserve),
          " kept for thread stacks and allocator arenas");
    }
  }
  return limit;
}

std::string FormatBytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30)) return absl::StrFormat("%.2f GiB", b / (1 << 30));
  if (bytes >= (int64_t{1} << 20)) return absl::StrFormat("%.1f MiB", b / (1 << 20));
  if (bytes >= (int64_t{1} << 10)) return absl::StrFormat("%.1f KiB", b / (1 << 10));
  return absl::StrCat(bytes, " B");
}

absl::Status OutOfMemoryError(absl::string_view what, absl::string_view cause,
                              int64_t need, absl::string_view detail,
                              const MemoryLimit& limit) {
  return absl::ResourceExhaustedError(absl::StrCat(
      what, " ran out of memory (", cause, "): it needs ~", FormatBytes(need),
      " (", detail, ") and this process may use ",
      limit.bytes > 0 ? FormatBytes(limit.bytes) : std::string("an unknown amount"),
      " (", limit.bytes > 0 ? limit.source : "no limit found", ")",
      "; give it more memory or make the job smaller"));
}

absl::Status CheckFits(absl::string_view what, int64_t need,
                       absl::string_view detail, const MemoryLimit& limit,
                       double fraction) {
  if (limit.bytes <= 0) return absl::OkStatus();  // unknown: cannot judge
  if (static_cast<double>(need) <=
      fraction * static_cast<double>(limit.bytes)) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      what, " needs ~", FormatBytes(need), " (", detail, "), over ",
      static_cast<int>(fraction * 100), "% of this process's limit of ",
      FormatBytes(limit.bytes), " (", limit.source, ")"));
}

}  // namespace bertps

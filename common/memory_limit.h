// How much memory this process may use: its cgroup's limit where there is
// one (cgroup v2 memory.max, or v1 memory.limit_in_bytes; on Kubernetes the
// container's limit), else the machine's RAM (MemTotal), whichever is lower.
// Daemons check a model's estimated size against it before allocating, so a
// job that cannot fit is refused with the figures instead of aborting or
// being killed later (Linux overcommits: a large allocation may succeed and
// the process die when it touches the pages).
// Thread-safety: pure functions over /proc and /sys.
#ifndef BERTPS_COMMON_MEMORY_LIMIT_H_
#define BERTPS_COMMON_MEMORY_LIMIT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace bertps {

struct MemoryLimit {
  int64_t bytes = 0;
  std::string source;  // e.g. "cgroup memory.max", "MemTotal"
};

// Reads the limit under `root` ("" for the real /proc and /sys; tests give a
// directory holding proc/self/cgroup, proc/meminfo and sys/fs/cgroup/...).
MemoryLimit DetectMemoryLimit(const std::string& root = "");

// "1.50 GiB", "512.0 MiB", "640 B".
std::string FormatBytes(int64_t bytes);

// OK when `need` fits within `fraction` of the limit (headroom for the
// allocator, gRPC buffers and the rest of the process); otherwise
// RESOURCE_EXHAUSTED: "<what> needs ~N GiB (<detail>), over <fraction> of
// this process's limit of M GiB (<source>)".
absl::Status CheckFits(absl::string_view what, int64_t need,
                       absl::string_view detail, const MemoryLimit& limit,
                       double fraction = 0.9);

}  // namespace bertps

#endif  // BERTPS_COMMON_MEMORY_LIMIT_H_

// How much memory this process may use: the lowest of its cgroup's limit
// where there is one (cgroup v2 memory.max, or v1 memory.limit_in_bytes; on
// Kubernetes the container's limit), the machine's RAM (MemTotal), and what
// its address-space limits leave (RLIMIT_AS, as `ulimit -v` or `prlimit
// --as` set it, and RLIMIT_DATA): such a limit counts every mapping, the
// libraries, thread stacks and allocator arenas the process has before any
// job included, so what is left for a job is the limit less what is mapped
// now (/proc/self/status VmSize, VmData) less kAddressSpaceReserve for the
// thread stacks and allocator arenas a job adds (a second glibc arena
// reserves 64 MiB; every thread 8 MiB of stack).
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

// What an address-space limit leaves for a job besides what is mapped.
inline constexpr int64_t kAddressSpaceReserve = int64_t{128} << 20;

// Reads the limit under `root` ("" for the real /proc and /sys; tests give a
// directory holding proc/self/cgroup, proc/meminfo, proc/self/limits,
// proc/self/status and sys/fs/cgroup/...). An address-space limit that
// leaves nothing gives 1 byte (every need is refused), never 0 (unknown).
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

// An allocation that failed although the estimate fit (the estimate is
// short of what the process really maps, or the limit shrank):
// RESOURCE_EXHAUSTED "<what> ran out of memory (<cause>): it needs ~N
// (<detail>) and this process may use M (<source>); give it more memory or
// make the job smaller", so that the job says what to change.
absl::Status OutOfMemoryError(absl::string_view what, absl::string_view cause,
                              int64_t need, absl::string_view detail,
                              const MemoryLimit& limit);

}  // namespace bertps

#endif  // BERTPS_COMMON_MEMORY_LIMIT_H_

// The process's file descriptor limit.
//
// Linux starts most processes with a soft RLIMIT_NOFILE of 1024 under a far
// higher hard limit (systemd: 524288; containers: often 1048576). A daemon
// that holds a connection per peer, or files of a data set, runs into the
// soft limit long before the machine minds, so every bertps binary raises
// its soft limit to the hard one at start (InitProcess, common/init.h),
// which any process may do without privileges.
//
// Thread-safety: the functions may be called from any thread; the limit is
// the process's.
#ifndef BERTPS_COMMON_DESCRIPTORS_H_
#define BERTPS_COMMON_DESCRIPTORS_H_

#include <cstdint>

namespace bertps {

struct DescriptorLimit {
  int64_t soft = 0;  // RLIM_INFINITY as -1
  int64_t hard = 0;
};

// The current soft and hard RLIMIT_NOFILE.
DescriptorLimit GetDescriptorLimit();

// Raises the soft RLIMIT_NOFILE to the hard one (an unlimited hard limit:
// to the kernel's fs.nr_open). Returns the limits before and after (equal
// where nothing changed or the kernel refused).
struct DescriptorLimitChange {
  DescriptorLimit before;
  DescriptorLimit after;
  bool raised() const { return after.soft != before.soft; }
};
DescriptorLimitChange RaiseDescriptorLimit();

}  // namespace bertps

#endif  // BERTPS_COMMON_DESCRIPTORS_H_

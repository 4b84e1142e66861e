// A clock for timeouts, liveness and leases that the wall clock cannot
// move: the wall time when the process first asked, plus the monotonic
// time (CLOCK_MONOTONIC) elapsed since. Its values read like wall times (so
// they can also be shown), but stepping the system clock (NTP, an operator,
// a VM restored from a snapshot) changes no duration measured with it.
// Shown times drift from the wall clock by whatever it was stepped since.
// Thread-safety: thread-safe.
#ifndef BERTPS_COMMON_MONOTONIC_CLOCK_H_
#define BERTPS_COMMON_MONOTONIC_CLOCK_H_

#include <time.h>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace bertps {

inline absl::Duration MonotonicElapsed() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return absl::DurationFromTimespec(ts);
}

inline absl::Time MonotonicNow() {
  // Both read once, together, the first time.
  static const absl::Time wall_at_start = absl::Now();
  static const absl::Duration mono_at_start = MonotonicElapsed();
  return wall_at_start + (MonotonicElapsed() - mono_at_start);
}

}  // namespace bertps

#endif  // BERTPS_COMMON_MONOTONIC_CLOCK_H_

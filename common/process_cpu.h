// CPU seconds (user + system) this process has used since it started
// (getrusage; 0 if the call fails). Thread-safe.
#ifndef BERTPS_COMMON_PROCESS_CPU_H_
#define BERTPS_COMMON_PROCESS_CPU_H_

#include <sys/resource.h>

namespace bertps {

inline double ProcessCpuSeconds() {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

}  // namespace bertps

#endif  // BERTPS_COMMON_PROCESS_CPU_H_

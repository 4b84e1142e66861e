// Facts of this process: the CPU seconds it used, its threads. Thread-safe.
#ifndef BERTPS_COMMON_PROCESS_CPU_H_
#define BERTPS_COMMON_PROCESS_CPU_H_

#include <dirent.h>
#include <sys/resource.h>

namespace bertps {

// CPU seconds (user + system) used since the process started (getrusage; 0
// if the call fails).
inline double ProcessCpuSeconds() {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// Threads the process has now (/proc/self/task; 0 if it cannot be read).
inline int ProcessThreadCount() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

}  // namespace bertps

#endif  // BERTPS_COMMON_PROCESS_CPU_H_

#include "common/descriptors.h"

#include <sys/resource.h>

#include <fstream>

namespace bertps {
namespace {

int64_t AsInt(rlim_t v) {
  return v == RLIM_INFINITY ? -1 : static_cast<int64_t>(v);
}

}  // namespace

DescriptorLimit GetDescriptorLimit() {
  rlimit r{};
  DescriptorLimit out;
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return out;
  out.soft = AsInt(r.rlim_cur);
  out.hard = AsInt(r.rlim_max);
  return out;
}

DescriptorLimitChange RaiseDescriptorLimit() {
  DescriptorLimitChange change;
  change.before = GetDescriptorLimit();
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != r.rlim_max) {
    rlimit want = r;
    want.rlim_cur = r.rlim_max;
    if (r.rlim_max == RLIM_INFINITY) {
      // The kernel refuses more than fs.nr_open descriptors.
      long long nr_open = 1 << 20;
      std::ifstream in("/proc/sys/fs/nr_open");
      if (!(in >> nr_open) || nr_open <= 0) nr_open = 1 << 20;
      want.rlim_cur = static_cast<rlim_t>(nr_open);
    }
    if (want.rlim_cur > r.rlim_cur) setrlimit(RLIMIT_NOFILE, &want);
  }
  change.after = GetDescriptorLimit();
  return change;
}

}  // namespace bertps

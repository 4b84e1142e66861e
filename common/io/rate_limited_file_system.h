// A FileSystem whose durable writes go no faster than a set rate: the data
// reaches path.tmp in 1 MiB pieces, each written no earlier than the rate
// allows, then is fsynced and renamed as usual. It stands for a network
// volume (a few hundred MB/s, shared) where the machine has only a local
// disk and no io.max cgroup: `ps_server --checkpoint_write_mbps` and
// `tools/bench.sh checkpoint` use it. Reads and everything else are the real
// file system's.
//
// Thread-safety: thread-safe; concurrent writes share the rate (one budget,
// as on one volume).
#ifndef BERTPS_COMMON_IO_RATE_LIMITED_FILE_SYSTEM_H_
#define BERTPS_COMMON_IO_RATE_LIMITED_FILE_SYSTEM_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/io/file_util.h"

namespace bertps {
namespace io {

class RateLimitedFileSystem : public FileSystem {
 public:
  // bytes_per_second > 0.
  explicit RateLimitedFileSystem(double bytes_per_second);

  using FileSystem::WriteFileAtomically;
  absl::Status WriteFileAtomically(const std::string& path,
                                   absl::string_view data,
                                   const WriteStages& stages) override
      ABSL_LOCKS_EXCLUDED(mu_);

  double bytes_per_second() const { return bytes_per_second_; }

 private:
  // The time at which `bytes` more may be written (waits for it).
  void Pace(int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

  const double bytes_per_second_;
  absl::Mutex mu_;
  absl::Time next_free_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace io
}  // namespace bertps

#endif  // BERTPS_COMMON_IO_RATE_LIMITED_FILE_SYSTEM_H_

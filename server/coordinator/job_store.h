// JobStore: the coordinator's jobs across restarts. The real one is an
// embedded SQLite database, one row per job (id, serialized JobRecord),
// written in WAL mode with synchronous=FULL so that a row written before a
// crash is there after it; MemoryJobStore is the fake for tests.
#ifndef BERTPS_SERVER_COORDINATOR_JOB_STORE_H_
#define BERTPS_SERVER_COORDINATOR_JOB_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/coordinator.pb.h"

namespace bertps {

// Where the coordinator keeps its jobs across restarts. Put replaces a job's
// record (atomically); LoadAll returns every record in id order.
// Thread-safety: implementations are thread-safe; the coordinator calls them
// outside its lock (coordinator_store.cc).
class JobStore {
 public:
  // The SQLite store at `path` (created if needed), locked for this process
  // (an exclusive lock on `path`.lock, held while the store is open): a
  // second Open while it is held, from this or another process, fails
  // FAILED_PRECONDITION naming the holder.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  virtual ~JobStore() = default;

  virtual absl::Status Put(const std::string& id, const JobRecord& record) = 0;
  // DataLoss naming the job if a record does not parse.
  virtual absl::StatusOr<std::vector<JobRecord>> LoadAll() = 0;
};

// The jobs in memory (tests; and a coordinator started without --state_db
// keeps none). `fail_puts` makes every Put fail, like a full disk.
class MemoryJobStore : public JobStore {
 public:
  absl::Status Put(const std::string& id, const JobRecord& record) override;
  absl::StatusOr<std::vector<JobRecord>> LoadAll() override;
  void set_fail_puts(bool fail) ABSL_LOCKS_EXCLUDED(mu_);
  int64_t puts() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> records_ ABSL_GUARDED_BY(mu_);
  bool fail_puts_ ABSL_GUARDED_BY(mu_) = false;
  int64_t puts_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace bertps

#endif  // BERTPS_SERVER_COORDINATOR_JOB_STORE_H_

// JobStore: the coordinator's jobs in an embedded SQLite database, one row per
// job (id, serialized JobRecord), written in WAL mode with synchronous=FULL so
// that a row written before a crash is there after it. Put replaces a job's
// row in one statement (atomic); LoadAll returns every row in id order.
// Thread-safety: thread-compatible (the coordinator calls it under its lock).
#ifndef BERTPS_SERVER_COORDINATOR_JOB_STORE_H_
#define BERTPS_SERVER_COORDINATOR_JOB_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"

struct sqlite3;

namespace bertps {

class JobStore {
 public:
  // Opens (creating if needed) the database at `path`.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  absl::Status Put(const std::string& id, const JobRecord& record);
  // DataLoss naming the job if a row does not parse.
  absl::StatusOr<std::vector<JobRecord>> LoadAll();

 private:
  JobStore(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}
  absl::Status Exec(const char* sql);
  const std::string path_;
  sqlite3* db_;
};

}  // namespace bertps

#endif  // BERTPS_SERVER_COORDINATOR_JOB_STORE_H_

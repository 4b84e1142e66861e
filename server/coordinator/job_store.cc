#include "server/coordinator/job_store.h"

#include <sqlite3.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace bertps {
namespace {

// One row per job in a SQLite database (see job_store.h). sqlite3 is opened
// in serialized (FULLMUTEX) mode: calls from any thread.
class SqliteJobStore : public JobStore {
 public:
  SqliteJobStore(std::string path, sqlite3* db)
      : path_(std::move(path)), db_(db) {}
  ~SqliteJobStore() override { sqlite3_close(db_); }
  absl::Status Exec(const char* sql);
  absl::Status Put(const std::string& id, const JobRecord& record) override;
  absl::StatusOr<std::vector<JobRecord>> LoadAll() override;

 private:
  const std::string path_;
  sqlite3* db_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(
    const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                          SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(
        absl::StrCat("state database ", path, ": ", msg));
  }
  auto s = std::make_unique<SqliteJobStore>(path, db);
  sqlite3_busy_timeout(db, 5000);
  absl::Status st = s->Exec("PRAGMA journal_mode=WAL");
  if (st.ok()) st = s->Exec("PRAGMA synchronous=FULL");
  if (st.ok()) {
    st = s->Exec(
        "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, record BLOB "
        "NOT NULL)");
  }
  if (!st.ok()) return st;
  return std::unique_ptr<JobStore>(std::move(s));
}

absl::Status SqliteJobStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return absl::UnavailableError(
        absl::StrCat("state database ", path_, ": ", sql, ": ", msg));
  }
  return absl::OkStatus();
}

absl::Status SqliteJobStore::Put(const std::string& id, const JobRecord& record) {
  std::string bytes;
  if (!record.SerializeToString(&bytes)) {
    return absl::InternalError(absl::StrCat("job ", id, ": cannot serialize"));
  }
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_,
                         "INSERT OR REPLACE INTO jobs (id, record) VALUES (?, ?)",
                         -1, &stmt, nullptr) != SQLITE_OK) {
    return absl::UnavailableError(
        absl::StrCat("state database ", path_, ": ", sqlite3_errmsg(db_)));
  }
  sqlite3_bind_text(stmt, 1, id.data(), static_cast<int>(id.size()),
                    SQLITE_TRANSIENT);
  sqlite3_bind_blob(stmt, 2, bytes.data(), static_cast<int>(bytes.size()),
                    SQLITE_TRANSIENT);
  const int rc = sqlite3_step(stmt);
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) {
    return absl::UnavailableError(absl::StrCat(
        "state database ", path_, ": writing job ", id, ": ", sqlite3_errmsg(db_)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<JobRecord>> SqliteJobStore::LoadAll() {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT id, record FROM jobs ORDER BY id", -1,
                         &stmt, nullptr) != SQLITE_OK) {
    return absl::UnavailableError(
        absl::StrCat("state database ", path_, ": ", sqlite3_errmsg(db_)));
  }
  std::vector<JobRecord> out;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    const char* id = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    const void* blob = sqlite3_column_blob(stmt, 1);
    const int n = sqlite3_column_bytes(stmt, 1);
    JobRecord r;
    if (!r.ParseFromArray(blob, n)) {
      sqlite3_finalize(stmt);
      return absl::DataLossError(absl::StrCat("state database ", path_,
                                              ": job ", id ? id : "?",
                                              " does not parse"));
    }
    out.push_back(std::move(r));
  }
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) {
    return absl::UnavailableError(
        absl::StrCat("state database ", path_, ": ", sqlite3_errmsg(db_)));
  }
  return out;
}

absl::Status MemoryJobStore::Put(const std::string& id,
                                 const JobRecord& record) {
  absl::MutexLock l(&mu_);
  ++puts_;
  if (fail_puts_) {
    return absl::UnavailableError(
        absl::StrCat("memory store: writing job ", id, ": the disk is full"));
  }
  record.SerializeToString(&records_[id]);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<JobRecord>> MemoryJobStore::LoadAll() {
  absl::MutexLock l(&mu_);
  std::vector<JobRecord> out;
  for (const auto& [id, bytes] : records_) {
    JobRecord r;
    if (!r.ParseFromString(bytes)) {
      return absl::DataLossError(absl::StrCat("job ", id, " does not parse"));
    }
    out.push_back(std::move(r));
  }
  return out;
}

void MemoryJobStore::set_fail_puts(bool fail) {
  absl::MutexLock l(&mu_);
  fail_puts_ = fail;
}

int64_t MemoryJobStore::puts() const {
  absl::MutexLock l(&mu_);
  return puts_;
}

}  // namespace bertps

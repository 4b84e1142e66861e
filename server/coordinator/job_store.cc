#include "server/coordinator/job_store.h"

#include <sqlite3.h>

#include "absl/strings/str_cat.h"

namespace bertps {

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
  std::unique_ptr<JobStore> s(new JobStore(path, db));
  sqlite3_busy_timeout(db, 5000);
  absl::Status st = s->Exec("PRAGMA journal_mode=WAL");
  if (st.ok()) st = s->Exec("PRAGMA synchronous=FULL");
  if (st.ok()) {
    st = s->Exec(
        "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, record BLOB "
        "NOT NULL)");
  }
  if (!st.ok()) return st;
  return s;
}

JobStore::~JobStore() { sqlite3_close(db_); }

absl::Status JobStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return absl::UnavailableError(
        absl::StrCat("state database ", path_, ": ", sql, ": ", msg));
  }
  return absl::OkStatus();
}

absl::Status JobStore::Put(const std::string& id, const JobRecord& record) {
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

absl::StatusOr<std::vector<JobRecord>> JobStore::LoadAll() {
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

}  // namespace bertps

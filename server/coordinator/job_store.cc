#include "server/coordinator/job_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace bertps {
namespace {

// One row per job in a SQLite database (see job_store.h). sqlite3 is opened
// in serialized (FULLMUTEX) mode: calls from any thread.
class SqliteJobStore : public JobStore {
 public:
  SqliteJobStore(std::string path, sqlite3* db, int lock_fd)
      : path_(std::move(path)), db_(db), lock_fd_(lock_fd) {}
  ~SqliteJobStore() override {
    sqlite3_close(db_);
    if (lock_fd_ >= 0) close(lock_fd_);  // releases the store's lock
  }
  absl::Status Exec(const char* sql);
  absl::Status Put(const std::string& id, const JobRecord& record) override;
  absl::StatusOr<std::vector<JobRecord>> LoadAll() override;

 private:
  const std::string path_;
  sqlite3* db_;
  const int lock_fd_;  // holds the exclusive lock of path_ + ".lock"
};

// One writer per store: an exclusive flock on PATH.lock for the life of the
// store (released by the kernel when the process ends, however it ends).
// The file names its holder (pid, host, since) for the next one's message.
absl::StatusOr<int> LockStore(const std::string& path) {
  const std::string lock_path = path + ".lock";
  const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(
        "state database ", path, ": cannot open its lock file ", lock_path,
        ": ", strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[256] = {0};
    const ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
    close(fd);
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "state database ", path, " is in use by another coordinator (",
          n > 0 ? absl::StripAsciiWhitespace(holder) : "holder unknown",
          "): one coordinator per store; stop that one first"));
    }
    return absl::UnavailableError(absl::StrCat(
        "state database ", path, ": cannot lock ", lock_path, ": ",
        strerror(err)));
  }
  char host[128] = {0};
  gethostname(host, sizeof(host) - 1);
  const std::string who = absl::StrCat(
      "pid ", getpid(), " on ", host, " since ",
      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::Now(), absl::UTCTimeZone()),
      "\n");
  if (ftruncate(fd, 0) != 0 ||
      pwrite(fd, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size())) {
    // The lock holds without the note; only the next one's message is poorer.
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(
    const std::string& path) {
  absl::StatusOr<int> lock = LockStore(path);
  if (!lock.ok()) return lock.status();
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                          SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    close(*lock);
    return absl::UnavailableError(
        absl::StrCat("state database ", path, ": ", msg));
  }
  auto s = std::make_unique<SqliteJobStore>(path, db, *lock);
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

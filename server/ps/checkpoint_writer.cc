#include "server/ps/checkpoint_writer.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/crash_point.h"
#include "glog/logging.h"

namespace bertps {
namespace ps {

namespace {
// The write yields the CPU to the step's threads (2 cores: it would compete
// with compute otherwise); it is mostly waiting on the disk anyway.
constexpr int kWriterNice = 5;

double MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t)
      .count();
}
}  // namespace

CheckpointWriter::CheckpointWriter(io::FileSystem* fs, int shard,
                                   int num_shards)
    : fs_(fs),
      shard_(shard),
      num_shards_(num_shards),
      result_(absl::NotFoundError("no checkpoint written")),
      thread_("ckpt-write", kWriterNice) {}

CheckpointWriter::~CheckpointWriter() = default;

void CheckpointWriter::Prefault(int64_t bytes) {
  {
    absl::MutexLock l(&mu_);
    reserved_ = true;
  }
  thread_.Post([this, bytes] {
    buffer_.resize(static_cast<size_t>(bytes));  // zero-filled: touched
    buffer_.clear();                             // the capacity stays
    absl::MutexLock l(&mu_);
    reserved_ = false;
  });
}

absl::Status CheckpointWriter::Reserve(absl::Time deadline) {
  absl::MutexLock l(&mu_);
  if (reserved_) {
    ++waited_;
    LOG(INFO) << "shard " << shard_ << ": a checkpoint cut waits for the "
              << "write of version " << version_ << " (at most one in flight)";
  }
  auto free = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !reserved_; };
  if (!mu_.AwaitWithDeadline(absl::Condition(&free), deadline)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "checkpoint: the write of version ", version_,
        " is still in flight (at most one per shard)"));
  }
  reserved_ = true;
  return absl::OkStatus();
}

void CheckpointWriter::Release() {
  absl::MutexLock l(&mu_);
  reserved_ = false;
}

void CheckpointWriter::Launch(const std::string& dir, int64_t version,
                              std::string example_ledger, double copy_ms) {
  {
    absl::MutexLock l(&mu_);
    if (has_last_) {
      ended_.push_back(Ended{dir_, version_, FindLocked(dir_, version_)});
      if (ended_.size() > kRemembered) ended_.pop_front();
    }
    in_flight_ = true;
    has_last_ = true;
    dir_ = dir;
    version_ = version;
    ledger_ = std::move(example_ledger);
    result_ = absl::UnavailableError("being written");
    copy_ms_ = copy_ms;
    write_ms_ = 0;
  }
  thread_.Post([this, dir, version] {
    const auto t0 = std::chrono::steady_clock::now();
    const int shard = shard_;
    absl::StatusOr<ShardFile> f = WriteShardFile(
        dir, shard_, num_shards_, version, buffer_, fs_,
        [version, shard](const char* stage) {
          CrashPoint(absl::StrCat("ckpt_", stage).c_str(), version, shard);
        });
    const double ms = MsSince(t0);
    if (f.ok()) {
      VLOG(1) << "shard " << shard_ << ": checkpoint " << version
              << " written in background, " << f->bytes << " bytes in " << ms
              << " ms";
    } else {
      LOG(WARNING) << "shard " << shard_ << ": checkpoint " << version
                   << " not written: " << f.status();
    }
    absl::MutexLock l(&mu_);
    result_ = std::move(f);
    write_ms_ = ms;
    in_flight_ = false;
    reserved_ = false;
  });
}

CheckpointWriter::Known CheckpointWriter::FindLocked(
    const std::string& dir, int64_t version) const {
  Known k;
  if (!has_last_ || version != version_ || dir != dir_) {
    for (const Ended& e : ended_) {
      if (e.version == version && e.dir == dir) return e.known;
    }
    return k;
  }
  k.known = true;
  k.pending = in_flight_;
  k.example_ledger = ledger_;
  k.copy_ms = copy_ms_;
  if (!in_flight_) {
    if (result_.ok()) {
      k.file = *result_;
    } else {
      k.error = result_.status();
    }
    k.write_ms = write_ms_;
  }
  return k;
}

CheckpointWriter::Known CheckpointWriter::Find(const std::string& dir,
                                               int64_t version) const {
  absl::MutexLock l(&mu_);
  return FindLocked(dir, version);
}

CheckpointWriter::Known CheckpointWriter::Collect(const std::string& dir,
                                                  int64_t version,
                                                  absl::Time deadline) const {
  absl::MutexLock l(&mu_);
  auto ended = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !(has_last_ && in_flight_ && version_ == version && dir_ == dir);
  };
  mu_.AwaitWithDeadline(absl::Condition(&ended), deadline);
  return FindLocked(dir, version);
}

void CheckpointWriter::Forget() {
  absl::MutexLock l(&mu_);
  auto ended = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !in_flight_;
  };
  mu_.Await(absl::Condition(&ended));
  has_last_ = false;
  ended_.clear();
}

int64_t CheckpointWriter::waited() const {
  absl::MutexLock l(&mu_);
  return waited_;
}

}  // namespace ps
}  // namespace bertps

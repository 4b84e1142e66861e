#include "common/io/record_index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/io/bert_example.h"
#include "common/io/crc32c.h"
#include "common/io/file_util.h"
#include "common/io/tfrecord.h"
#include "common/status.h"
#include "common/splitmix.h"

namespace bertps {
namespace io {
namespace {

constexpr char kMagic[] = "BPSIDX1\n";  // 8 bytes
constexpr size_t kMagicSize = 8;
// Indices longer than this are refused (about 1 G records per file).
constexpr uint64_t kMaxRecords = uint64_t{1} << 30;

void PutLe64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void PutLe32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t Le64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint32_t Le32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// The size and modification time of a regular file.
absl::Status StatFile(const std::string& path, int64_t* size,
                      int64_t* mtime_ns) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "stat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a regular file"));
  }
  *size = static_cast<int64_t>(st.st_size);
  *mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 +
              st.st_mtim.tv_nsec;
  return absl::OkStatus();
}

bool Matches(const RecordIndex& index, int64_t size, int64_t mtime_ns) {
  return index.file_size == size && index.mtime_ns == mtime_ns;
}

}  // namespace

std::string EncodeRecordIndex(const RecordIndex& index) {
  std::string out(kMagic, kMagicSize);
  PutLe64(&out, static_cast<uint64_t>(index.file_size));
  PutLe64(&out, static_cast<uint64_t>(index.mtime_ns));
  PutLe64(&out, index.offsets.size());
  for (int64_t o : index.offsets) PutLe64(&out, static_cast<uint64_t>(o));
  PutLe32(&out, Crc32c(out.data(), out.size()));
  return out;
}

absl::StatusOr<RecordIndex> DecodeRecordIndex(absl::string_view b,
                                              const std::string& what) {
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("record index ", what, ": ", why));
  };
  constexpr size_t kFixed = kMagicSize + 24 + 4;
  if (b.size() < kFixed || b.substr(0, kMagicSize) != kMagic) {
    return bad("not an index (bad magic or too short)");
  }
  const uint64_t count = Le64(b.data() + kMagicSize + 16);
  if (count > kMaxRecords || b.size() != kFixed + 8 * count) {
    return bad(absl::StrCat("size ", b.size(), " does not hold ", count,
                            " offsets"));
  }
  if (Le32(b.data() + b.size() - 4) != Crc32c(b.data(), b.size() - 4)) {
    return bad("checksum mismatch");
  }
  RecordIndex index;
  index.file_size = static_cast<int64_t>(Le64(b.data() + kMagicSize));
  index.mtime_ns = static_cast<int64_t>(Le64(b.data() + kMagicSize + 8));
  index.offsets.resize(count);
  const char* p = b.data() + kMagicSize + 24;
  int64_t prev = -1;
  for (uint64_t i = 0; i < count; ++i) {
    const int64_t o = static_cast<int64_t>(Le64(p + 8 * i));
    if (o <= prev || o >= index.file_size) {
      return bad(absl::StrCat("offset ", i, " (", o, ") out of order"));
    }
    index.offsets[i] = prev = o;
  }
  return index;
}

std::string DefaultIndexCacheDir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x) {
    return absl::StrCat(x, "/bertps/record-index");
  }
  if (const char* h = std::getenv("HOME"); h != nullptr && *h) {
    return absl::StrCat(h, "/.cache/bertps/record-index");
  }
  return "/tmp/bertps-record-index";
}

std::string CachedIndexPath(const std::string& path,
                            const std::string& cache_dir) {
  std::error_code ec;
  std::string abs = std::filesystem::absolute(path, ec).lexically_normal();
  if (ec) abs = path;
  const std::string base = std::filesystem::path(abs).filename().string();
  return absl::StrFormat("%s/%08x-%s%s", cache_dir,
                         Crc32c(abs.data(), abs.size()), base,
                         kRecordIndexSuffix);
}

absl::StatusOr<RecordIndex> LoadOrBuildRecordIndex(
    const std::string& path, const std::string& cache_dir, IndexSource* how) {
  int64_t size = 0, mtime = 0;
  RETURN_IF_ERROR(StatFile(path, &size, &mtime));
  const std::string beside = path + kRecordIndexSuffix;
  const std::string cached =
      cache_dir.empty() ? "" : CachedIndexPath(path, cache_dir);
  for (const std::string& candidate : {beside, cached}) {
    if (candidate.empty()) continue;
    absl::StatusOr<std::string> bytes =
        ReadFileToString(candidate, int64_t{8} * kMaxRecords + 64);
    if (!bytes.ok()) continue;  // none there (or unreadable): look on
    absl::StatusOr<RecordIndex> index = DecodeRecordIndex(*bytes, candidate);
    if (index.ok() && Matches(*index, size, mtime)) {
      if (how != nullptr) *how = IndexSource::kLoaded;
      return index;
    }
    // Stale or corrupt: rebuilt below, and replaced.
  }
  RecordIndex index;
  index.file_size = size;
  index.mtime_ns = mtime;
  ASSIGN_OR_RETURN(index.offsets, TFRecordOffsets(path));
  // The file changed while it was read: its index would be stale at once.
  int64_t size2 = 0, mtime2 = 0;
  RETURN_IF_ERROR(StatFile(path, &size2, &mtime2));
  if (size2 != size || mtime2 != mtime) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " changed while it was indexed"));
  }
  const std::string bytes = EncodeRecordIndex(index);
  if (!WriteFileAtomically(beside, bytes).ok() && !cached.empty()) {
    // A read-only data directory: the cache (a failure there only costs
    // a rebuild next time).
    if (MakeDirs(cache_dir).ok()) (void)WriteFileAtomically(cached, bytes);
  }
  if (how != nullptr) *how = IndexSource::kBuilt;
  return index;
}

EpochPermutation::EpochPermutation(uint64_t seed, int64_t epoch, int64_t n)
    : n_(n) {
  while ((uint64_t{1} << (2 * half_bits_)) < static_cast<uint64_t>(n)) {
    ++half_bits_;
  }
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  uint64_t k = SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(epoch)));
  for (uint64_t& key : keys_) key = k = SplitMix64(k);
}

uint64_t EpochPermutation::Round(uint64_t half, int round) const {
  return SplitMix64(half ^ keys_[round]) & half_mask_;
}

int64_t EpochPermutation::operator()(int64_t i) const {
  // A bijection of [0, 4^half_bits), applied until the value falls in
  // [0, n): a bijection of [0, n) (at most ~4 passes on average).
  uint64_t x = static_cast<uint64_t>(i);
  do {
    uint64_t l = x >> half_bits_, r = x & half_mask_;
    for (int round = 0; round < 4; ++round) {
      const uint64_t next = l ^ Round(r, round);
      l = r;
      r = next;
    }
    x = (l << half_bits_) | r;
  } while (x >= static_cast<uint64_t>(n_));
  return static_cast<int64_t>(x);
}

int64_t IndexedExampleSource::RecordAt(int64_t position) {
  const int64_t p = position % total_;
  if (!shuffle_) return p;
  const int64_t epoch = position / total_;
  if (perm_ == nullptr || epoch != perm_epoch_) {
    perm_ = std::make_unique<EpochPermutation>(seed_, epoch, total_);
    perm_epoch_ = epoch;
  }
  return (*perm_)(p);
}

absl::StatusOr<std::unique_ptr<IndexedExampleSource>>
IndexedExampleSource::Open(const std::vector<std::string>& patterns,
                           const std::string& cache_dir,
                           const std::vector<ExpectedFile>& expected) {
  ASSIGN_OR_RETURN(std::vector<std::string> files, MatchShardFiles(patterns));
  auto changed = [](const std::string& what) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the data changed since the job was submitted: ", what,
        " (a job must run over the data it was submitted with)"));
  };
  if (!expected.empty()) {
    for (size_t i = 0; i < std::max(files.size(), expected.size()); ++i) {
      if (i >= files.size()) return changed(expected[i].path + " is gone");
      if (i >= expected.size() || files[i] != expected[i].path) {
        return changed(absl::StrCat(files[i], " was not among its ",
                                    expected.size(), " files"));
      }
    }
  }
  std::unique_ptr<IndexedExampleSource> s(new IndexedExampleSource());
  for (const std::string& f : files) {
    ASSIGN_OR_RETURN(RecordIndex index, LoadOrBuildRecordIndex(f, cache_dir));
    if (!expected.empty()) {
      const ExpectedFile& e = expected[s->first_.size()];
      const int64_t records = static_cast<int64_t>(index.offsets.size());
      if (index.file_size != e.bytes || records != e.records) {
        return changed(absl::StrCat(f, " had ", e.bytes, " bytes and ",
                                    e.records, " records, has ",
                                    index.file_size, " and ", records));
      }
    }
    s->first_.push_back(s->total_);
    s->total_ += static_cast<int64_t>(index.offsets.size());
    s->indices_.push_back(std::move(index));
  }
  if (s->total_ == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the training data is empty (", files.size(),
                     " file(s), no record)"));
  }
  s->files_ = std::move(files);
  s->fds_.assign(s->files_.size(), -1);
  return s;
}

IndexedExampleSource::~IndexedExampleSource() {
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
}

absl::Status IndexedExampleSource::Read(int64_t position,
                                        std::string* record) {
  if (position < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream position ", position, " < 0"));
  }
  const int64_t p = RecordAt(position);
  const size_t f = static_cast<size_t>(
      std::upper_bound(first_.begin(), first_.end(), p) - first_.begin() - 1);
  const std::string& path = files_[f];
  const RecordIndex& index = indices_[f];
  if (fds_[f] < 0) {
    int64_t size = 0;
    ASSIGN_OR_RETURN(fds_[f], OpenRegularFile(path, &size));
    if (size != index.file_size) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, " changed since it was indexed (", size, " bytes, was ",
          index.file_size, "): the job's data must not change while it runs"));
    }
  }
  const int64_t offset = index.offsets[static_cast<size_t>(p - first_[f])];
  last_file_ = path;
  last_offset_ = offset;
  ASSIGN_OR_RETURN(const int64_t n, ReadTFRecordAt(fds_[f], path, offset, record));
  bytes_read_ += n;
  ++records_read_;
  return absl::OkStatus();
}

std::string IndexedExampleSource::last_position() const {
  return last_offset_ < 0 ? "" : absl::StrCat(last_file_, "@", last_offset_);
}

}  // namespace io
}  // namespace bertps

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
#include "common/io/gzip.h"
#include "common/io/tfrecord.h"
#include "common/status.h"
#include "common/splitmix.h"

namespace bertps {
namespace io {
namespace {

constexpr char kMagic[] = "BPSIDX2\n";  // 8 bytes
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
  PutLe64(&out, index.block_first.size());
  PutLe64(&out, static_cast<uint64_t>(index.raw_size));
  for (int64_t o : index.offsets) PutLe64(&out, static_cast<uint64_t>(o));
  for (size_t b = 0; b < index.block_first.size(); ++b) {
    PutLe64(&out, static_cast<uint64_t>(index.block_offsets[b]));
    PutLe64(&out, static_cast<uint64_t>(index.block_first[b]));
  }
  PutLe32(&out, Crc32c(out.data(), out.size()));
  return out;
}

absl::StatusOr<RecordIndex> DecodeRecordIndex(absl::string_view b,
                                              const std::string& what) {
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("record index ", what, ": ", why));
  };
  constexpr size_t kFixed = kMagicSize + 40 + 4;
  if (b.size() < kFixed || b.substr(0, kMagicSize) != kMagic) {
    return bad("not an index (bad magic or too short)");
  }
  const char* h = b.data() + kMagicSize;
  const uint64_t count = Le64(h + 16), blocks = Le64(h + 24);
  if (count > kMaxRecords || blocks > count ||
      b.size() != kFixed + 8 * count + 16 * blocks) {
    return bad(absl::StrCat("size ", b.size(), " does not hold ", count,
                            " offsets and ", blocks, " blocks"));
  }
  if (Le32(b.data() + b.size() - 4) != Crc32c(b.data(), b.size() - 4)) {
    return bad("checksum mismatch");
  }
  RecordIndex index;
  index.file_size = static_cast<int64_t>(Le64(h));
  index.mtime_ns = static_cast<int64_t>(Le64(h + 8));
  index.raw_size = static_cast<int64_t>(Le64(h + 32));
  if (blocks == 0 && index.raw_size != index.file_size) {
    return bad("a plain file's size differs from its stream's");
  }
  index.offsets.resize(count);
  const char* p = h + 40;
  int64_t prev = -1;
  for (uint64_t i = 0; i < count; ++i) {
    const int64_t o = static_cast<int64_t>(Le64(p + 8 * i));
    if (o <= prev || o >= index.raw_size) {
      return bad(absl::StrCat("offset ", i, " (", o, ") out of order"));
    }
    index.offsets[i] = prev = o;
  }
  p += 8 * count;
  int64_t prev_off = -1, prev_first = -1;
  for (uint64_t i = 0; i < blocks; ++i) {
    const int64_t off = static_cast<int64_t>(Le64(p + 16 * i));
    const int64_t first = static_cast<int64_t>(Le64(p + 16 * i + 8));
    if (off <= prev_off || off >= index.file_size || first <= prev_first ||
        first >= static_cast<int64_t>(count) || (i == 0 && first != 0)) {
      return bad(absl::StrCat("block ", i, " out of order"));
    }
    index.block_offsets.push_back(prev_off = off);
    index.block_first.push_back(prev_first = first);
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
        ReadFileToString(candidate, int64_t{24} * kMaxRecords + 64);
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
  ASSIGN_OR_RETURN(TFRecordLayout layout, ScanTFRecordFile(path));
  index.offsets = std::move(layout.offsets);
  index.block_offsets = std::move(layout.block_offsets);
  index.block_first = std::move(layout.block_first);
  index.raw_size = layout.raw_size;
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

void IndexedExampleSource::PrepareUnits(int64_t epoch) {
  const int64_t units = static_cast<int64_t>(unit_first_.size()) - 1;
  perm_ = std::make_unique<EpochPermutation>(seed_, epoch, units);
  perm_epoch_ = epoch;
  cum_.assign(static_cast<size_t>(units) + 1, 0);
  for (int64_t k = 0; k < units; ++k) {
    const int64_t u = (*perm_)(k);
    cum_[k + 1] = cum_[k] + unit_first_[u + 1] - unit_first_[u];
  }
}

int64_t IndexedExampleSource::RecordAt(int64_t position) {
  const int64_t p = position % total_;
  if (!shuffle_) return p;
  const int64_t epoch = position / total_;
  if (unit_first_.empty()) {
    if (perm_ == nullptr || epoch != perm_epoch_) {
      perm_ = std::make_unique<EpochPermutation>(seed_, epoch, total_);
      perm_epoch_ = epoch;
    }
    return (*perm_)(p);
  }
  // By unit: the k-th unit of the epoch's order, then a record within it.
  if (perm_ == nullptr || epoch != perm_epoch_) PrepareUnits(epoch);
  const int64_t k =
      std::upper_bound(cum_.begin(), cum_.end(), p) - cum_.begin() - 1;
  const int64_t u = (*perm_)(k);
  const int64_t size = unit_first_[u + 1] - unit_first_[u];
  const int64_t within = p - cum_[k];
  if (size == 1) return unit_first_[u];
  const EpochPermutation inner(seed_ ^ SplitMix64(static_cast<uint64_t>(u) + 1),
                               epoch, size);
  return unit_first_[u] + inner(within);
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
  s->lru_at_.assign(s->files_.size(), s->lru_.end());
  if (std::any_of(s->indices_.begin(), s->indices_.end(),
                  [](const RecordIndex& i) { return i.gzip(); })) {
    for (size_t f = 0; f < s->indices_.size(); ++f) {
      const RecordIndex& index = s->indices_[f];
      if (index.gzip()) {
        for (int64_t first : index.block_first) {
          s->unit_first_.push_back(s->first_[f] + first);
        }
      } else {
        for (size_t r = 0; r < index.offsets.size(); ++r) {
          s->unit_first_.push_back(s->first_[f] + static_cast<int64_t>(r));
        }
      }
    }
    s->unit_first_.push_back(s->total_);
  }
  return s;
}

IndexedExampleSource::~IndexedExampleSource() {
  while (CloseLeastRecent()) {
  }
}

void IndexedExampleSource::set_max_open_files(int n) {
  max_open_files_ = std::max(n, 1);
  while (static_cast<int>(lru_.size()) > max_open_files_) CloseLeastRecent();
}

bool IndexedExampleSource::CloseLeastRecent() {
  if (lru_.empty()) return false;
  const size_t f = lru_.back();
  lru_.pop_back();
  lru_at_[f] = lru_.end();
  close(fds_[f]);
  fds_[f] = -1;
  return true;
}

absl::StatusOr<int> IndexedExampleSource::FileDescriptor(size_t f) {
  if (fds_[f] >= 0) {
    lru_.splice(lru_.begin(), lru_, lru_at_[f]);
    return fds_[f];
  }
  while (static_cast<int>(lru_.size()) >= max_open_files_) CloseLeastRecent();
  const std::string& path = files_[f];
  int64_t size = 0;
  int err = 0;
  absl::StatusOr<int> fd = OpenRegularFile(path, &size, &err);
  // Out of descriptors: give up open files until this one opens.
  while (!fd.ok() && (err == EMFILE || err == ENFILE) && CloseLeastRecent()) {
    fd = OpenRegularFile(path, &size, &err);
  }
  if (!fd.ok()) {
    if (err == EMFILE || err == ENFILE) {
      return absl::ResourceExhaustedError(absl::StrCat(
          fd.status().message(), " (no data file is open: the process's "
          "other descriptors fill its limit; raise it, e.g. ulimit -n)"));
    }
    return fd.status();
  }
  if (size != indices_[f].file_size) {
    close(*fd);
    return absl::FailedPreconditionError(absl::StrCat(
        path, " changed since it was indexed (", size, " bytes, was ",
        indices_[f].file_size,
        "): the job's data must not change while it runs"));
  }
  fds_[f] = *fd;
  lru_.push_front(f);
  lru_at_[f] = lru_.begin();
  ++files_opened_;
  return *fd;
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
  if (index.gzip()) return ReadGzip(f, p - first_[f], record);
  ASSIGN_OR_RETURN(const int fd, FileDescriptor(f));
  const int64_t offset = index.offsets[static_cast<size_t>(p - first_[f])];
  last_file_ = path;
  last_offset_ = offset;
  ASSIGN_OR_RETURN(const int64_t n, ReadTFRecordAt(fd, path, offset, record));
  bytes_read_ += n;
  ++records_read_;
  return absl::OkStatus();
}

absl::Status IndexedExampleSource::ReadGzip(size_t f, int64_t local,
                                            std::string* record) {
  const std::string& path = files_[f];
  const RecordIndex& index = indices_[f];
  const size_t nb = index.block_first.size();
  const int64_t b = std::upper_bound(index.block_first.begin(),
                                     index.block_first.end(), local) -
                    index.block_first.begin() - 1;
  const int64_t raw_start = index.offsets[index.block_first[b]];
  // Named only for an error (not built per record).
  auto where = [&] {
    return absl::StrCat(path, " (the gzip block at compressed offset ",
                        index.block_offsets[b], ", uncompressed offset ",
                        raw_start, ")");
  };
  if (cached_file_ != static_cast<int64_t>(f) || cached_block_ != b) {
    cached_file_ = cached_block_ = -1;
    const int64_t from = index.block_offsets[b];
    const int64_t to = static_cast<size_t>(b) + 1 < nb
                           ? index.block_offsets[b + 1]
                           : index.file_size;
    const int64_t raw_end = static_cast<size_t>(b) + 1 < nb
                                ? index.offsets[index.block_first[b + 1]]
                                : index.raw_size;
    block_compressed_.resize(static_cast<size_t>(to - from));
    ASSIGN_OR_RETURN(const int fd, FileDescriptor(f));
    ASSIGN_OR_RETURN(const size_t got,
                     PreadFull(fd, block_compressed_.data(),
                               block_compressed_.size(), from, path));
    if (got < block_compressed_.size()) {
      return absl::DataLossError(absl::StrCat(where(), ": cut short"));
    }
    RETURN_IF_ERROR(InflateGzipMembers(block_compressed_, raw_end - raw_start,
                                       where(), &block_raw_));
    if (static_cast<int64_t>(block_raw_.size()) != raw_end - raw_start) {
      return absl::DataLossError(absl::StrCat(
          where(), ": inflates to ", block_raw_.size(), " bytes, the index says ",
          raw_end - raw_start, " (a stale index?)"));
    }
    bytes_read_ += to - from;
    ++blocks_inflated_;
    cached_file_ = static_cast<int64_t>(f);
    cached_block_ = b;
  }
  const int64_t offset = index.offsets[static_cast<size_t>(local)];
  last_file_ = path;
  last_offset_ = offset;
  if (absl::Status st =
          ParseTFRecordAt(block_raw_, offset - raw_start, path, record);
      !st.ok()) {
    return absl::DataLossError(absl::StrCat(where(), ": ", st.message()));
  }
  ++records_read_;
  return absl::OkStatus();
}

std::string IndexedExampleSource::last_position() const {
  return last_offset_ < 0 ? "" : absl::StrCat(last_file_, "@", last_offset_);
}

}  // namespace io
}  // namespace bertps

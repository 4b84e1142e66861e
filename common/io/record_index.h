// Record indices of TFRecord files, and the job's examples read by stream
// position through them.
//
// A RecordIndex holds the byte offset of every record of one file, with the
// file's size and modification time. It is built once by reading the
// records' framing (one small read per record) and stored beside the file as
// `<file>.bertps-index`, or, where the data's directory is read-only, in a
// cache directory under a name derived from the file's absolute path. An
// index whose size or modification time differs from the file's, or whose
// own checksum fails, is stale or corrupt: it is rebuilt, never trusted.
// Index file: "BPSIDX2\n", u64 file size, i64 mtime (ns), u64 record
// count, u64 block count, u64 decompressed size, the records' u64 offsets,
// per block u64 offset and u64 first record, u32 CRC-32C of all before it;
// little-endian.
//
// A GZIP file (".gz", common/io/gzip.h) is indexed by block: each record's
// offset in the decompressed stream, and the gzip members at which blocks
// that inflate alone start (bertps writes a member per 32 records). Its
// record is read by inflating its block (one pread of the block), and the
// block last inflated is kept, so a worker reading consecutive positions
// inflates each block once.
//
// IndexedExampleSource reads the job's examples by stream position: with N
// records in the sorted files (MatchShardFiles), position p is in epoch
// e = p / N and is record p mod N in file order, or, shuffled, record
// EpochPermutation(seed, e, N)(p mod N): a full pseudo-random permutation of
// the epoch, a pure function of (seed, epoch, the files), different in every
// epoch. Each record is read with one pread at its offset, both CRCs checked.
// When a file is GZIP, the shuffle is by block: the epoch's order is a
// permutation of the units (a block of a GZIP file, a record of a plain
// one), and within a unit a permutation of its records; so consecutive
// positions read from the same block, and a worker whose share of a batch
// spans whole blocks inflates only its own.
// At most max_open_files() data files are open at once (default 64): the
// file read least recently is closed to open another (and also when open
// fails with EMFILE / ENFILE while any is open), so a data set of any number
// of files fits any descriptor limit; a file opened again is checked to have
// kept its size. Every read is still one positioned read.
// A worker so reads only its own examples, and one that joins or resumes at
// step t starts there at once; global batch t is the same whatever the
// number of workers, and a replacement worker or a resumed job sees exactly
// the examples the first run saw at that step.
//
// Thread-safety: the functions are thread-safe; an IndexedExampleSource
// needs external synchronisation.
#ifndef BERTPS_COMMON_IO_RECORD_INDEX_H_
#define BERTPS_COMMON_IO_RECORD_INDEX_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bertps {
namespace io {

inline constexpr char kRecordIndexSuffix[] = ".bertps-index";

struct RecordIndex {
  int64_t file_size = 0;
  int64_t mtime_ns = 0;
  // Of each record's header, increasing (GZIP: in the decompressed stream).
  std::vector<int64_t> offsets;
  // GZIP only (TFRecordLayout): each block's offset in the file and first
  // record; the decompressed size (plain: file_size).
  std::vector<int64_t> block_offsets;
  std::vector<int64_t> block_first;
  int64_t raw_size = 0;

  bool gzip() const { return !block_first.empty(); }
};

std::string EncodeRecordIndex(const RecordIndex& index);
// DataLoss naming `what` for anything but a whole, consistent index.
absl::StatusOr<RecordIndex> DecodeRecordIndex(absl::string_view bytes,
                                              const std::string& what);

// The default cache directory: $XDG_CACHE_HOME/bertps/record-index, else
// $HOME/.cache/bertps/record-index, else /tmp/bertps-record-index.
std::string DefaultIndexCacheDir();

// Where LoadOrBuildRecordIndex keeps `path`'s index in `cache_dir`.
std::string CachedIndexPath(const std::string& path,
                            const std::string& cache_dir);

// How an index was had (for tests and logs).
enum class IndexSource { kLoaded, kBuilt };

// The valid index of the TFRecord file `path`: the stored one (beside the
// file, else in cache_dir) if it matches the file, else built from the file
// and stored (beside it when that directory is writable, else in cache_dir;
// kept in memory only when neither can be written). Errors name the file
// (a corrupt record framing: DataLoss with its offset).
absl::StatusOr<RecordIndex> LoadOrBuildRecordIndex(
    const std::string& path, const std::string& cache_dir,
    IndexSource* how = nullptr);

// A pseudo-random permutation of [0, n), a pure function of (seed, epoch,
// n): a 4-round Feistel network over the smallest even power of two >= n,
// cycle-walked into [0, n). O(1) memory and time per element.
class EpochPermutation {
 public:
  EpochPermutation(uint64_t seed, int64_t epoch, int64_t n);
  int64_t operator()(int64_t i) const;

 private:
  uint64_t Round(uint64_t half, int round) const;
  int64_t n_;
  int half_bits_ = 1;
  uint64_t half_mask_ = 1;
  uint64_t keys_[4];
};

// A data file as a job's plan recorded it (the coordinator, at submit).
struct ExpectedFile {
  std::string path;
  int64_t bytes = 0;
  int64_t records = 0;
};

class IndexedExampleSource {
 public:
  // The files as MatchShardFiles(patterns) gives them, each indexed.
  // InvalidArgument when they hold no record. With `expected` (non-empty),
  // the files must be exactly those, with those sizes and record counts:
  // FailedPrecondition naming the first difference otherwise (data changed
  // under a job would silently put other examples at the same steps).
  static absl::StatusOr<std::unique_ptr<IndexedExampleSource>> Open(
      const std::vector<std::string>& patterns,
      const std::string& cache_dir = DefaultIndexCacheDir(),
      const std::vector<ExpectedFile>& expected = {});
  ~IndexedExampleSource();

  // Records in all files (one epoch).
  int64_t size() const { return total_; }
  // The bound on open data files (>= 1; kDefaultMaxOpenFiles unless set).
  // Lowering it closes the files read least recently.
  static constexpr int kDefaultMaxOpenFiles = 64;
  void set_max_open_files(int n);
  int max_open_files() const { return max_open_files_; }
  // Data files open now, and opens so far (a file closed and opened again
  // counts twice).
  int open_files() const { return static_cast<int>(lru_.size()); }
  int64_t files_opened() const { return files_opened_; }
  // Shuffles every epoch (EpochPermutation with `seed`); off: file order.
  void set_shuffle(bool on, uint64_t seed) {
    shuffle_ = on;
    seed_ = seed;
  }
  // The record index (in file order, [0, size())) that position p reads.
  int64_t RecordAt(int64_t position);
  // GZIP blocks inflated by Read.
  int64_t blocks_inflated() const { return blocks_inflated_; }
  // The record at stream position p >= 0 (p mod size(), in file order).
  absl::Status Read(int64_t position, std::string* record);
  // "file@offset" of the last record read (for messages).
  std::string last_position() const;
  // Bytes and records read from the data files by Read (framing included;
  // GZIP: the compressed blocks read; not the indices).
  int64_t bytes_read() const { return bytes_read_; }
  int64_t records_read() const { return records_read_; }
  const std::vector<std::string>& files() const { return files_; }

 private:
  IndexedExampleSource() = default;
  // Reads record `local` of GZIP file f through its block.
  absl::Status ReadGzip(size_t f, int64_t local, std::string* record);
  // The unit order of `epoch` (cum_ over perm_).
  void PrepareUnits(int64_t epoch);
  // File f's descriptor, opened (and others closed) as the bound demands;
  // f becomes the most recently read.
  absl::StatusOr<int> FileDescriptor(size_t f);
  // Closes the file read least recently (false: none is open).
  bool CloseLeastRecent();

  std::vector<std::string> files_;
  std::vector<RecordIndex> indices_;
  std::vector<int64_t> first_;  // stream position of each file's first record
  std::vector<int> fds_;        // -1: closed (opened when read)
  // The open files, most recently read first; lru_at_[f] is f's place.
  std::list<size_t> lru_;
  std::vector<std::list<size_t>::iterator> lru_at_;
  int max_open_files_ = kDefaultMaxOpenFiles;
  int64_t files_opened_ = 0;
  int64_t total_ = 0;
  bool shuffle_ = false;
  uint64_t seed_ = 0;
  // The permutation of the epoch read last (made again when it changes).
  int64_t perm_epoch_ = -1;
  std::unique_ptr<EpochPermutation> perm_;
  // With a GZIP file: the first record of each unit (sentinel total_), and
  // the epoch's cumulative unit sizes in permuted order (perm_ over units).
  std::vector<int64_t> unit_first_;
  std::vector<int64_t> cum_;
  // The GZIP block inflated last.
  int64_t cached_file_ = -1, cached_block_ = -1;
  std::string block_raw_, block_compressed_;
  int64_t blocks_inflated_ = 0;
  int64_t bytes_read_ = 0, records_read_ = 0;
  std::string last_file_;
  int64_t last_offset_ = -1;
};

}  // namespace io
}  // namespace bertps

#endif  // BERTPS_COMMON_IO_RECORD_INDEX_H_

// TFRecord files: a sequence of records, each framed as
//   u64 length (little-endian)
//   u32 MaskCrc(Crc32c(the 8 length bytes))
//   `length` bytes of data
//   u32 MaskCrc(Crc32c(data))
// (all little-endian), the format TensorFlow's TFRecordWriter produces
// without compression. A path ending in ".gz" is a GZIP TFRecord file: the
// same stream compressed as concatenated gzip members (common/io/gzip.h), as
// TensorFlow's `compression_type="GZIP"` reads it; bertps writes it in
// members of kGzipMemberRecords records, so that it can be read by member.
//
// TFRecordWriter writes to `path + ".tmp"` and renames it to `path` only in a
// successful Close(), after an fsync, so a crash never leaves a partial file
// under the final name. A writer destroyed without Close() deletes its
// temporary file.
//
// TFRecordReader reads through a 1 MB buffer and checks both CRCs of every
// record. A corrupt length CRC, a corrupt data CRC, a record cut short or a
// length over 256 MB is a DataLossError naming the file and the byte offset
// at which the bad record starts; once an error is returned, Next() keeps
// returning it.
//
// Thread-safety: neither class is thread-safe; use one per thread.
#ifndef BERTPS_COMMON_IO_TFRECORD_H_
#define BERTPS_COMMON_IO_TFRECORD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/io/gzip.h"

namespace bertps {
namespace io {

// Records longer than this are treated as corruption.
inline constexpr uint64_t kMaxTFRecordLength = 256u << 20;

enum class TFRecordCompression { kNone, kGzip };

// kGzip for a path ending in ".gz", else kNone.
TFRecordCompression CompressionForPath(absl::string_view path);

class TFRecordWriter {
 public:
  // Compressed as CompressionForPath(path) says, or as told (a temporary
  // name that does not end as the final one does).
  static absl::StatusOr<std::unique_ptr<TFRecordWriter>> Open(
      const std::string& path);
  static absl::StatusOr<std::unique_ptr<TFRecordWriter>> Open(
      const std::string& path, TFRecordCompression compression);
  ~TFRecordWriter();

  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;

  // Appends one record (may be empty). InvalidArgument if it is longer than
  // kMaxTFRecordLength; after an I/O error every call returns that error.
  absl::Status Write(absl::string_view record);
  // Flushes, fsyncs and renames the file into place. Idempotent.
  absl::Status Close();

  // Records and framed bytes written so far (before compression).
  int64_t num_records() const { return num_records_; }
  int64_t num_bytes() const { return num_bytes_; }

 private:
  TFRecordWriter(std::string path, int fd, TFRecordCompression compression);
  absl::Status Flush();
  // GZIP: compresses the records of the open member into buffer_.
  absl::Status EndMember();

  const std::string path_;
  const std::string tmp_path_;
  int fd_;  // -1 once closed.
  const TFRecordCompression compression_;
  std::string buffer_;
  std::string member_;  // GZIP: the framed records of the open member
  int member_records_ = 0;
  absl::Status error_;
  bool closed_ = false;
  int64_t num_records_ = 0;
  int64_t num_bytes_ = 0;
};

class TFRecordReader {
 public:
  static absl::StatusOr<std::unique_ptr<TFRecordReader>> Open(
      const std::string& path);
  ~TFRecordReader();

  TFRecordReader(const TFRecordReader&) = delete;
  TFRecordReader& operator=(const TFRecordReader&) = delete;

  // Reads the next record into *record. Returns false at a clean end of file
  // (no bytes after the last complete record).
  absl::StatusOr<bool> Next(std::string* record);

  // Byte offset in the file (GZIP: in its decompressed stream) of the next
  // record to read.
  int64_t offset() const { return offset_; }
  const std::string& path() const { return path_; }

 private:
  TFRecordReader(std::string path, int fd);
  // Reads up to n bytes; fewer only at end of file.
  absl::StatusOr<size_t> Read(char* dst, size_t n);
  absl::Status Corrupt(absl::string_view what);

  const std::string path_;
  int fd_;
  std::unique_ptr<GzipFileReader> gzip_;  // GZIP files only
  std::unique_ptr<char[]> buffer_;  // (kBufferSize)
  size_t buf_pos_ = 0;
  size_t buf_end_ = 0;
  int64_t offset_ = 0;
  absl::Status error_;
};

// One record as it is framed in a file (for writers that append, such as
// TensorBoard event logs).
std::string FrameTFRecord(absl::string_view record);

// The number of records of a TFRecord file, read from their framing alone:
// each record's 12-byte header (its length CRC checked), then a seek past
// its data, so a file costs one small read per record, not its size (data
// CRCs are checked by the readers that read the data). DataLoss naming the
// file and offset for a bad length CRC or a record cut short; only regular
// files (OpenRegularFile).
absl::StatusOr<int64_t> CountTFRecords(const std::string& path);

// The byte offset of every record of a TFRecord file, read as CountTFRecords
// reads (its framing alone).
absl::StatusOr<std::vector<int64_t>> TFRecordOffsets(const std::string& path);

// Where the records of a TFRecord file are. Plain: `offsets` in the file.
// GZIP: `offsets` in the decompressed stream, and the file as blocks that
// can each be inflated alone: a block starts at a gzip member that starts
// at a record (bertps's members all do; a file written as one gzip stream
// is one block) and ends where the next block starts.
struct TFRecordLayout {
  bool gzip = false;
  std::vector<int64_t> offsets;
  std::vector<int64_t> block_offsets;  // GZIP: of each block in the file
  std::vector<int64_t> block_first;    // GZIP: its first record
  int64_t raw_size = 0;  // decompressed bytes (plain: the file's size)
};

// GZIP blocks that inflate to more than this are refused by
// ScanTFRecordFile: read by block, such a file would cost that much memory
// and reading per random access.
inline constexpr int64_t kMaxGzipBlockBytes = int64_t{64} << 20;

// The layout of `path` (plain as TFRecordOffsets reads it; GZIP by reading
// the whole stream, both CRCs of every record checked). DataLoss naming the
// file and offset for corrupt framing or gzip data; FailedPrecondition for
// a GZIP block over kMaxGzipBlockBytes, saying how to rewrite the file.
absl::StatusOr<TFRecordLayout> ScanTFRecordFile(const std::string& path);

// Parses the record framed at `at` in `bytes` (a GZIP block's decompressed
// bytes), checking both CRCs: DataLoss naming `where` and the offset.
absl::Status ParseTFRecordAt(absl::string_view bytes, int64_t at,
                             const std::string& where, std::string* record);

// Reads the record that starts at `offset` of the open file `fd` (named
// `path` in errors) with pread, checking both CRCs: DataLoss naming the file
// and offset when the bytes there are not a whole record. Returns the bytes
// read (framing included).
absl::StatusOr<int64_t> ReadTFRecordAt(int fd, const std::string& path,
                                       int64_t offset, std::string* record);

}  // namespace io
}  // namespace bertps

#endif  // BERTPS_COMMON_IO_TFRECORD_H_

// GZIP (RFC 1952) through zlib, for GZIP-compressed TFRecord files.
//
// A GZIP TFRecord file is the TFRecord byte stream compressed as one or more
// concatenated gzip members, which gzip(1), Python's gzip module and
// TensorFlow's `compression_type="GZIP"` reader (it resets its inflater at
// each member's end) all read as one stream. bertps writes such a file as
// independent members of kGzipMemberRecords records each, so a reader can
// start at any member: a record is then found by its member's offset in the
// compressed file and its own offset in the member's decompressed bytes.
//
// Thread-safety: the functions are thread-safe; a GzipFileReader is not.
#ifndef BERTPS_COMMON_IO_GZIP_H_
#define BERTPS_COMMON_IO_GZIP_H_

#include <zlib.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bertps {
namespace io {

// Records per gzip member that bertps's TFRecord writer puts in a GZIP file
// (a member is also ended at 1 MiB of records). Small enough that a worker
// whose share of a batch is at least this many records inflates little more
// than its share; large enough that compression loses little (deflate's
// window is 32 KiB; 32 BERT instances of 128 tokens are ~30 KiB; on such
// records members of 32 make the file 1.7% larger than one stream would,
// members of 8 12%).
inline constexpr int kGzipMemberRecords = 32;
inline constexpr int64_t kGzipMemberMaxRawBytes = int64_t{1} << 20;

// Appends `raw` to *out as one whole gzip member (deflate, level 6).
absl::Status AppendGzipMember(absl::string_view raw, std::string* out);

// Inflates `compressed`, one or more whole gzip members, into *raw
// (replaced). DataLoss naming `what` when the bytes are not whole members,
// a member's CRC-32 or length check fails, or they inflate to more than
// `max_raw` bytes.
absl::Status InflateGzipMembers(absl::string_view compressed, int64_t max_raw,
                                const std::string& what, std::string* raw);

// The decompressed bytes of a gzip file, member after member, read through
// a buffer from `fd` (not owned) from its current position (0).
class GzipFileReader {
 public:
  // Where a member starts: in the file and in the decompressed stream.
  struct Member {
    int64_t compressed_offset = 0;
    int64_t raw_offset = 0;
  };

  GzipFileReader(int fd, std::string path);
  ~GzipFileReader();
  GzipFileReader(const GzipFileReader&) = delete;
  GzipFileReader& operator=(const GzipFileReader&) = delete;

  // Reads up to n decompressed bytes; fewer only at the end of the last
  // member. DataLoss naming the file and the member's offset for bytes that
  // are not gzip, a failed check, or a member cut short.
  absl::StatusOr<size_t> Read(char* dst, size_t n);

  // Every member started so far, in order.
  const std::vector<Member>& members() const { return members_; }
  // Decompressed bytes returned so far.
  int64_t raw_offset() const { return raw_offset_; }

 private:
  absl::Status Fill();
  absl::Status Bad(absl::string_view why) const;

  const int fd_;
  const std::string path_;
  z_stream z_{};
  bool z_ready_ = false;
  std::unique_ptr<unsigned char[]> in_;
  int64_t file_read_ = 0;   // bytes read from the file
  bool file_end_ = false;
  bool member_open_ = false;  // inside a member (its end not yet seen)
  bool done_ = false;
  int64_t raw_offset_ = 0;
  std::vector<Member> members_;
  absl::Status error_;
};

}  // namespace io
}  // namespace bertps

#endif  // BERTPS_COMMON_IO_GZIP_H_

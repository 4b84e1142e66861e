// ScanTFRecordFile and ParseTFRecordAt: where a file's records are, for
// plain and GZIP TFRecord files, and one record parsed out of a buffer.
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/io/crc32c.h"
#include "common/io/file_util.h"
#include "common/io/gzip.h"
#include "common/io/tfrecord.h"
#include "common/io/tfrecord_framing.h"
#include "common/status.h"

namespace bertps {
namespace io {
namespace {

using framing::GetLe32;
using framing::GetLe64;
using framing::kFooterSize;
using framing::kHeaderSize;

// Reads n decompressed bytes, fewer only at the end of the stream.
absl::StatusOr<size_t> ReadFull(GzipFileReader* r, char* dst, size_t n) {
  size_t done = 0;
  while (done < n) {
    ASSIGN_OR_RETURN(const size_t got, r->Read(dst + done, n - done));
    if (got == 0) break;
    done += got;
  }
  return done;
}

absl::Status ScanGzip(int fd, const std::string& path, TFRecordLayout* out) {
  GzipFileReader r(fd, path);
  auto corrupt = [&](int64_t at, absl::string_view what) {
    return absl::DataLossError(absl::StrCat(
        path, " at uncompressed offset ", at, ": ", what));
  };
  int64_t at = 0;
  std::string data;
  while (true) {
    char header[kHeaderSize];
    ASSIGN_OR_RETURN(const size_t got, ReadFull(&r, header, kHeaderSize));
    if (got == 0) break;
    if (got < kHeaderSize) {
      return corrupt(at, absl::StrCat("truncated header (", got, " of ",
                                      kHeaderSize, " bytes)"));
    }
    const uint64_t length = GetLe64(header);
    if (UnmaskCrc(GetLe32(header + 8)) != Crc32c(header, 8)) {
      return corrupt(at, "length CRC mismatch");
    }
    if (length > kMaxTFRecordLength) {
      return corrupt(at, absl::StrCat("length ", length,
                                      " exceeds the limit of ",
                                      kMaxTFRecordLength));
    }
    data.resize(length + kFooterSize);
    ASSIGN_OR_RETURN(const size_t body,
                     ReadFull(&r, data.data(), data.size()));
    if (body < data.size()) return corrupt(at, "record cut short");
    if (UnmaskCrc(GetLe32(data.data() + length)) !=
        Crc32c(data.data(), length)) {
      return corrupt(at, "data CRC mismatch");
    }
    out->offsets.push_back(at);
    at += static_cast<int64_t>(kHeaderSize + length + kFooterSize);
  }
  out->raw_size = at;
  // Blocks: the members that start where a record starts.
  size_t k = 0;
  const size_t n = out->offsets.size();
  for (const GzipFileReader::Member& m : r.members()) {
    while (k < n && out->offsets[k] < m.raw_offset) ++k;
    if (k == n) break;
    if (out->offsets[k] != m.raw_offset) continue;  // mid-record
    if (!out->block_first.empty() &&
        out->block_first.back() == static_cast<int64_t>(k)) {
      continue;  // an empty member before it: the block starts there
    }
    out->block_offsets.push_back(m.compressed_offset);
    out->block_first.push_back(static_cast<int64_t>(k));
  }
  for (size_t b = 0; b < out->block_first.size(); ++b) {
    const int64_t start = out->offsets[out->block_first[b]];
    const int64_t end = b + 1 < out->block_first.size()
                            ? out->offsets[out->block_first[b + 1]]
                            : out->raw_size;
    if (end - start > kMaxGzipBlockBytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, ": ", (end - start) >> 20,
          " MiB of records in one gzip stream (from compressed offset ",
          out->block_offsets[b],
          "): bertps reads GZIP TFRecord files by gzip member and refuses "
          "members over ", kMaxGzipBlockBytes >> 20,
          " MiB; write the file in members of a few hundred records (a "
          "preprocess job with compression: \"gzip\" does) or decompress it "
          "(gunzip leaves a plain TFRecord file)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TFRecordLayout> ScanTFRecordFile(const std::string& path) {
  TFRecordLayout layout;
  if (CompressionForPath(path) != TFRecordCompression::kGzip) {
    ASSIGN_OR_RETURN(layout.offsets, TFRecordOffsets(path));
    ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, &layout.raw_size));
    close(fd);
    return layout;
  }
  layout.gzip = true;
  ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path));
  absl::Status st = ScanGzip(fd, path, &layout);
  close(fd);
  RETURN_IF_ERROR(st);
  return layout;
}

absl::Status ParseTFRecordAt(absl::string_view bytes, int64_t at,
                             const std::string& where, std::string* record) {
  auto corrupt = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(where, " at offset ", at, ": ",
                                            what));
  };
  if (at < 0 || static_cast<uint64_t>(at) + kHeaderSize > bytes.size()) {
    return corrupt("truncated header");
  }
  const char* p = bytes.data() + at;
  const uint64_t length = GetLe64(p);
  if (UnmaskCrc(GetLe32(p + 8)) != Crc32c(p, 8)) {
    return corrupt(
        "length CRC mismatch (not a record boundary: a stale index?)");
  }
  if (length > kMaxTFRecordLength ||
      static_cast<uint64_t>(at) + kHeaderSize + length + kFooterSize >
          bytes.size()) {
    return corrupt("record cut short");
  }
  record->assign(p + kHeaderSize, length);
  if (UnmaskCrc(GetLe32(p + kHeaderSize + length)) !=
      Crc32c(record->data(), length)) {
    return corrupt("data CRC mismatch");
  }
  return absl::OkStatus();
}

}  // namespace io
}  // namespace bertps

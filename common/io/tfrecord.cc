#include "common/io/tfrecord.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/io/crc32c.h"
#include "common/io/file_util.h"
#include "common/io/tfrecord_framing.h"
#include "common/status.h"

namespace bertps {
namespace io {
namespace {

constexpr size_t kBufferSize = 1 << 20;
using framing::GetLe32;
using framing::GetLe64;
using framing::kFooterSize;
using framing::kHeaderSize;
using framing::PutLe32;
using framing::PutLe64;

}  // namespace

// ---------------------------------------------------------------------------
// Writer

TFRecordCompression CompressionForPath(absl::string_view path) {
  return absl::EndsWith(path, ".gz") ? TFRecordCompression::kGzip
                                     : TFRecordCompression::kNone;
}

TFRecordWriter::TFRecordWriter(std::string path, int fd,
                               TFRecordCompression compression)
    : path_(std::move(path)),
      tmp_path_(path_ + ".tmp"),
      fd_(fd),
      compression_(compression) {
  buffer_.reserve(kBufferSize);
}

absl::StatusOr<std::unique_ptr<TFRecordWriter>> TFRecordWriter::Open(
    const std::string& path) {
  return Open(path, CompressionForPath(path));
}

absl::StatusOr<std::unique_ptr<TFRecordWriter>> TFRecordWriter::Open(
    const std::string& path, TFRecordCompression compression) {
  const std::string tmp = path + ".tmp";
  const int fd =
      open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "create", tmp);
  return std::unique_ptr<TFRecordWriter>(
      new TFRecordWriter(path, fd, compression));
}

absl::Status TFRecordWriter::EndMember() {
  if (member_records_ == 0) return absl::OkStatus();
  RETURN_IF_ERROR(AppendGzipMember(member_, &buffer_));
  member_.clear();
  member_records_ = 0;
  return buffer_.size() >= kBufferSize ? Flush() : absl::OkStatus();
}

TFRecordWriter::~TFRecordWriter() {
  if (!closed_) {
    if (fd_ >= 0) close(fd_);
    unlink(tmp_path_.c_str());
  }
}

absl::Status TFRecordWriter::Flush() {
  if (buffer_.empty()) return absl::OkStatus();
  absl::Status s = WriteAll(fd_, buffer_, tmp_path_);
  buffer_.clear();
  return s;
}

std::string FrameTFRecord(absl::string_view record) {
  std::string out;
  out.reserve(kHeaderSize + record.size() + kFooterSize);
  char header[kHeaderSize];
  PutLe64(header, record.size());
  PutLe32(header + 8, MaskCrc(Crc32c(header, 8)));
  char footer[kFooterSize];
  PutLe32(footer, MaskCrc(Crc32c(record.data(), record.size())));
  out.append(header, kHeaderSize);
  out.append(record.data(), record.size());
  out.append(footer, kFooterSize);
  return out;
}

absl::Status TFRecordWriter::Write(absl::string_view record) {
  RETURN_IF_ERROR(error_);
  if (closed_) {
    return absl::FailedPreconditionError(
        absl::StrCat("TFRecord ", path_, ": Write after Close"));
  }
  if (record.size() > kMaxTFRecordLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("TFRecord ", path_, ": record of ", record.size(),
                     " bytes exceeds the limit of ", kMaxTFRecordLength));
  }
  char header[kHeaderSize];
  PutLe64(header, record.size());
  PutLe32(header + 8, MaskCrc(Crc32c(header, 8)));
  char footer[kFooterSize];
  PutLe32(footer, MaskCrc(Crc32c(record.data(), record.size())));

  if (compression_ == TFRecordCompression::kGzip) {
    member_.append(header, kHeaderSize);
    member_.append(record.data(), record.size());
    member_.append(footer, kFooterSize);
    ++member_records_;
    if (member_records_ >= kGzipMemberRecords ||
        static_cast<int64_t>(member_.size()) >= kGzipMemberMaxRawBytes) {
      error_ = EndMember();
    }
  } else {
    buffer_.append(header, kHeaderSize);
    if (buffer_.size() + record.size() > kBufferSize) {
      // Large record: write it straight through.
      error_ = Flush();
      if (error_.ok()) error_ = WriteAll(fd_, record, tmp_path_);
    } else {
      buffer_.append(record.data(), record.size());
    }
    buffer_.append(footer, kFooterSize);
    if (error_.ok() && buffer_.size() >= kBufferSize) error_ = Flush();
  }
  RETURN_IF_ERROR(error_);
  ++num_records_;
  num_bytes_ += kHeaderSize + record.size() + kFooterSize;
  return absl::OkStatus();
}

absl::Status TFRecordWriter::Close() {
  if (closed_) return error_;
  if (error_.ok()) error_ = EndMember();
  if (error_.ok()) error_ = Flush();
  if (error_.ok() && fsync(fd_) != 0) {
    error_ = ErrnoStatus(errno, "fsync", tmp_path_);
  }
  if (close(fd_) != 0 && error_.ok()) {
    error_ = ErrnoStatus(errno, "close", tmp_path_);
  }
  fd_ = -1;
  closed_ = true;
  if (!error_.ok()) {
    unlink(tmp_path_.c_str());
    return error_;
  }
  error_ = CommitTempFile(tmp_path_, path_);
  return error_;
}

// ---------------------------------------------------------------------------
// Reader

TFRecordReader::TFRecordReader(std::string path, int fd)
    : path_(std::move(path)), fd_(fd), buffer_(new char[kBufferSize]) {}

absl::StatusOr<std::unique_ptr<TFRecordReader>> TFRecordReader::Open(
    const std::string& path) {
  ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path));
  std::unique_ptr<TFRecordReader> reader(new TFRecordReader(path, fd));
  if (CompressionForPath(path) == TFRecordCompression::kGzip) {
    reader->gzip_ = std::make_unique<GzipFileReader>(fd, path);
  }
  return reader;
}

TFRecordReader::~TFRecordReader() { close(fd_); }

absl::StatusOr<size_t> TFRecordReader::Read(char* dst, size_t n) {
  if (gzip_ != nullptr) return gzip_->Read(dst, n);
  size_t done = 0;
  while (done < n) {
    if (buf_pos_ < buf_end_) {
      const size_t k = std::min(n - done, buf_end_ - buf_pos_);
      std::memcpy(dst + done, buffer_.get() + buf_pos_, k);
      buf_pos_ += k;
      done += k;
      continue;
    }
    // Buffer empty: read big remainders directly, refill for small ones.
    const bool direct = n - done >= kBufferSize;
    char* target = direct ? dst + done : buffer_.get();
    const size_t want = direct ? n - done : kBufferSize;
    const ssize_t got = read(fd_, target, want);
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "read", path_);
    }
    if (got == 0) break;  // End of file.
    if (direct) {
      done += static_cast<size_t>(got);
    } else {
      buf_pos_ = 0;
      buf_end_ = static_cast<size_t>(got);
    }
  }
  return done;
}

absl::Status TFRecordReader::Corrupt(absl::string_view what) {
  error_ = absl::DataLossError(absl::StrCat(
      "TFRecord ", path_, ": ", what, " in the record at ",
      gzip_ != nullptr ? "uncompressed byte offset " : "byte offset ",
      offset_));
  return error_;
}

absl::StatusOr<bool> TFRecordReader::Next(std::string* record) {
  RETURN_IF_ERROR(error_);
  char header[kHeaderSize];
  absl::StatusOr<size_t> got = Read(header, kHeaderSize);
  if (!got.ok()) return error_ = got.status();
  if (*got == 0) return false;
  if (*got < kHeaderSize) {
    return Corrupt(absl::StrCat("truncated header (", *got, " of ", kHeaderSize,
                                " bytes)"));
  }
  const uint64_t length = GetLe64(header);
  if (UnmaskCrc(GetLe32(header + 8)) != Crc32c(header, 8)) {
    return Corrupt("length CRC mismatch");
  }
  if (length > kMaxTFRecordLength) {
    return Corrupt(absl::StrCat("length ", length, " exceeds the limit of ",
                                kMaxTFRecordLength));
  }
  record->resize(length);
  got = Read(&(*record)[0], length);
  if (!got.ok()) return error_ = got.status();
  if (*got < length) {
    return Corrupt(
        absl::StrCat("truncated data (", *got, " of ", length, " bytes)"));
  }
  char footer[kFooterSize];
  got = Read(footer, kFooterSize);
  if (!got.ok()) return error_ = got.status();
  if (*got < kFooterSize) return Corrupt("truncated data CRC");
  if (UnmaskCrc(GetLe32(footer)) != Crc32c(record->data(), length)) {
    return Corrupt("data CRC mismatch");
  }
  offset_ += kHeaderSize + length + kFooterSize;
  return true;
}


absl::StatusOr<std::vector<int64_t>> TFRecordOffsets(const std::string& path) {
  if (CompressionForPath(path) == TFRecordCompression::kGzip) {
    ASSIGN_OR_RETURN(TFRecordLayout layout, ScanTFRecordFile(path));
    return std::move(layout.offsets);
  }
  int64_t size = 0;
  ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, &size));
  std::vector<int64_t> offsets;
  absl::Status st = [&]() -> absl::Status {
    auto corrupt = [&](int64_t at, absl::string_view what) {
      return absl::DataLossError(
          absl::StrCat(path, " at offset ", at, ": ", what));
    };
    int64_t offset = 0;
    while (offset < size) {
      char header[kHeaderSize];
      ASSIGN_OR_RETURN(const size_t done,
                       PreadFull(fd, header, kHeaderSize, offset, path));
      if (done < kHeaderSize) {
        return corrupt(offset, absl::StrCat("truncated header (", done,
                                            " of ", kHeaderSize, " bytes)"));
      }
      const uint64_t length = GetLe64(header);
      if (UnmaskCrc(GetLe32(header + 8)) != Crc32c(header, 8)) {
        return corrupt(offset, "length CRC mismatch");
      }
      if (length > kMaxTFRecordLength) {
        return corrupt(offset, absl::StrCat("length ", length,
                                            " exceeds the limit of ",
                                            kMaxTFRecordLength));
      }
      const int64_t next =
          offset + kHeaderSize + static_cast<int64_t>(length) + kFooterSize;
      if (next > size) return corrupt(offset, "record cut short");
      offsets.push_back(offset);
      offset = next;
    }
    return absl::OkStatus();
  }();
  close(fd);
  RETURN_IF_ERROR(st);
  return offsets;
}

absl::StatusOr<int64_t> CountTFRecords(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<int64_t> offsets, TFRecordOffsets(path));
  return static_cast<int64_t>(offsets.size());
}

absl::StatusOr<int64_t> ReadTFRecordAt(int fd, const std::string& path,
                                       int64_t offset, std::string* record) {
  auto corrupt = [&](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat(path, " at offset ", offset, ": ", what));
  };
  char header[kHeaderSize];
  ASSIGN_OR_RETURN(const size_t done,
                   PreadFull(fd, header, kHeaderSize, offset, path));
  if (done < kHeaderSize) return corrupt("truncated header");
  const uint64_t length = GetLe64(header);
  if (UnmaskCrc(GetLe32(header + 8)) != Crc32c(header, 8)) {
    return corrupt("length CRC mismatch (not a record boundary: a stale "
                   "index?)");
  }
  if (length > kMaxTFRecordLength) {
    return corrupt(absl::StrCat("length ", length, " exceeds the limit of ",
                                kMaxTFRecordLength));
  }
  record->resize(length + kFooterSize);
  ASSIGN_OR_RETURN(const size_t got,
                   PreadFull(fd, record->data(), length + kFooterSize,
                             offset + static_cast<int64_t>(kHeaderSize), path));
  if (got < length + kFooterSize) return corrupt("record cut short");
  const uint32_t want = UnmaskCrc(GetLe32(record->data() + length));
  record->resize(length);
  if (Crc32c(record->data(), record->size()) != want) {
    return corrupt("data CRC mismatch");
  }
  return static_cast<int64_t>(kHeaderSize + length + kFooterSize);
}

}  // namespace io
}  // namespace bertps

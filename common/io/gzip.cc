#include "common/io/gzip.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/io/file_util.h"
#include "common/status.h"

namespace bertps {
namespace io {
namespace {

// deflateInit2/inflateInit2's window bits for a gzip wrapper (15 + 16).
constexpr int kGzipWindowBits = MAX_WBITS + 16;
constexpr size_t kInputBufferSize = 256 << 10;

std::string ZlibWhy(const z_stream& z, int rc) {
  return z.msg != nullptr ? std::string(z.msg)
                          : absl::StrCat("zlib error ", rc);
}

}  // namespace

absl::Status AppendGzipMember(absl::string_view raw, std::string* out) {
  if (raw.size() > std::numeric_limits<uInt>::max() / 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("gzip member of ", raw.size(), " bytes is too large"));
  }
  z_stream z{};
  if (deflateInit2(&z, 6, Z_DEFLATED, kGzipWindowBits, 8,
                   Z_DEFAULT_STRATEGY) != Z_OK) {
    return absl::InternalError("deflateInit2 failed");
  }
  const size_t old = out->size();
  const uLong bound = deflateBound(&z, static_cast<uLong>(raw.size()));
  out->resize(old + bound);
  z.next_in =
      reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(&(*out)[old]);
  z.avail_out = static_cast<uInt>(bound);
  const int rc = deflate(&z, Z_FINISH);
  const size_t written = bound - z.avail_out;
  const std::string why = ZlibWhy(z, rc);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) {
    out->resize(old);
    return absl::InternalError(absl::StrCat("deflate: ", why));
  }
  out->resize(old + written);
  return absl::OkStatus();
}

absl::Status InflateGzipMembers(absl::string_view compressed, int64_t max_raw,
                                const std::string& what, std::string* raw) {
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(what, ": ", why));
  };
  z_stream z{};
  if (inflateInit2(&z, kGzipWindowBits) != Z_OK) {
    return absl::InternalError("inflateInit2 failed");
  }
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  z.avail_in = static_cast<uInt>(compressed.size());
  raw->resize(static_cast<size_t>(std::min<int64_t>(
      max_raw + 1, static_cast<int64_t>(compressed.size()) * 4 + 4096)));
  size_t produced = 0;
  absl::Status st;
  while (true) {
    if (produced == raw->size()) {
      if (static_cast<int64_t>(produced) > max_raw) {
        st = bad(absl::StrCat("inflates to more than ", max_raw, " bytes"));
        break;
      }
      raw->resize(static_cast<size_t>(std::min<int64_t>(
          max_raw + 1, static_cast<int64_t>(raw->size()) * 2)));
    }
    z.next_out = reinterpret_cast<Bytef*>(&(*raw)[produced]);
    z.avail_out = static_cast<uInt>(raw->size() - produced);
    const uInt room = z.avail_out;
    const int rc = inflate(&z, Z_NO_FLUSH);
    produced += room - z.avail_out;
    if (rc == Z_STREAM_END) {
      if (z.avail_in == 0) break;  // the last member's end
      inflateReset(&z);            // another member follows
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && z.avail_out > 0) {
      st = bad("cut short (a gzip member without its end)");
      break;
    }
    if (rc == Z_BUF_ERROR) continue;  // output full: grown above
    st = bad(absl::StrCat("not whole gzip data (", ZlibWhy(z, rc), ")"));
    break;
  }
  inflateEnd(&z);
  if (st.ok() && static_cast<int64_t>(produced) > max_raw) {
    st = bad(absl::StrCat("inflates to more than ", max_raw, " bytes"));
  }
  raw->resize(st.ok() ? produced : 0);
  return st;
}

GzipFileReader::GzipFileReader(int fd, std::string path)
    : fd_(fd), path_(std::move(path)) {}

GzipFileReader::~GzipFileReader() {
  if (z_ready_) inflateEnd(&z_);
}

absl::Status GzipFileReader::Bad(absl::string_view why) const {
  const int64_t at = members_.empty() ? 0 : members_.back().compressed_offset;
  return absl::DataLossError(absl::StrCat(
      path_, ": the gzip member at compressed offset ", at, ": ", why));
}

absl::Status GzipFileReader::Fill() {
  if (in_ == nullptr) in_.reset(new unsigned char[kInputBufferSize]);
  while (true) {
    const ssize_t got = read(fd_, in_.get(), kInputBufferSize);
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "read", path_);
    }
    if (got == 0) file_end_ = true;
    file_read_ += got;
    z_.next_in = in_.get();
    z_.avail_in = static_cast<uInt>(got);
    return absl::OkStatus();
  }
}

absl::StatusOr<size_t> GzipFileReader::Read(char* dst, size_t n) {
  RETURN_IF_ERROR(error_);
  if (!z_ready_) {
    if (inflateInit2(&z_, kGzipWindowBits) != Z_OK) {
      return error_ = absl::InternalError("inflateInit2 failed");
    }
    z_ready_ = true;
  }
  size_t done = 0;
  while (done < n && !done_) {
    if (z_.avail_in == 0 && !file_end_) {
      if (absl::Status st = Fill(); !st.ok()) return error_ = st;
      continue;
    }
    if (!member_open_) {
      // Between members: another starts here, or the file has ended.
      if (z_.avail_in == 0) {
        done_ = true;
        break;
      }
      members_.push_back(
          {file_read_ - static_cast<int64_t>(z_.avail_in), raw_offset_});
      inflateReset(&z_);
      member_open_ = true;
    }
    if (z_.avail_in == 0) {
      return error_ = Bad("cut short (the file ends inside it)");
    }
    z_.next_out = reinterpret_cast<Bytef*>(dst + done);
    z_.avail_out = static_cast<uInt>(std::min<size_t>(
        n - done, std::numeric_limits<uInt>::max()));
    const uInt room = z_.avail_out;
    const int rc = inflate(&z_, Z_NO_FLUSH);
    const size_t produced = room - z_.avail_out;
    done += produced;
    raw_offset_ += static_cast<int64_t>(produced);
    if (rc == Z_STREAM_END) {
      member_open_ = false;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      return error_ = Bad(absl::StrCat("not gzip data or corrupt (",
                                       ZlibWhy(z_, rc), ")"));
    }
  }
  return done;
}

}  // namespace io
}  // namespace bertps

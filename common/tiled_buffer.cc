#include "common/tiled_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace bertps {
namespace {

// Far below the kernel's default limit of mappings per process (65530),
// leaving room for everything else the process maps.
constexpr size_t kMaxTiles = 8192;

absl::Status Errno(const char* what) {
  return absl::InternalError(
      absl::StrCat("tiled buffer: ", what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<TiledBuffer> TiledBuffer::Create(int64_t size,
                                                size_t tile_bytes) {
  if (size < 0) return absl::InvalidArgumentError("tiled buffer: negative size");
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = static_cast<size_t>(size) * sizeof(float);
  tile_bytes = std::max(tile_bytes, page);
  tile_bytes = (tile_bytes + page - 1) / page * page;
  // Longer tiles rather than more mappings than the kernel allows.
  while (bytes / tile_bytes >= kMaxTiles) tile_bytes *= 2;
  TiledBuffer b;
  b.size_ = size;
  b.tile_bytes_ = tile_bytes;
  b.mapped_bytes_ = std::max<size_t>(1, (bytes + tile_bytes - 1) / tile_bytes) *
                    tile_bytes;
  b.fd_ = memfd_create("bertps-tile", MFD_CLOEXEC);
  if (b.fd_ < 0) return Errno("memfd_create");
  if (ftruncate(b.fd_, static_cast<off_t>(tile_bytes)) != 0) {
    return Errno("ftruncate");
  }
  void* base = mmap(nullptr, b.mapped_bytes_, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return Errno("reserving the address range");
  b.data_ = static_cast<float*>(base);
  for (size_t off = 0; off < b.mapped_bytes_; off += tile_bytes) {
    void* at = static_cast<char*>(base) + off;
    if (mmap(at, tile_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
             b.fd_, 0) == MAP_FAILED) {
      return Errno("mapping a tile");
    }
  }
  return b;
}

TiledBuffer& TiledBuffer::operator=(TiledBuffer&& o) noexcept {
  if (this != &o) {
    Release();
    data_ = o.data_;
    size_ = o.size_;
    tile_bytes_ = o.tile_bytes_;
    mapped_bytes_ = o.mapped_bytes_;
    fd_ = o.fd_;
    o.data_ = nullptr;
    o.size_ = 0;
    o.mapped_bytes_ = 0;
    o.fd_ = -1;
  }
  return *this;
}

TiledBuffer::~TiledBuffer() { Release(); }

void TiledBuffer::Release() {
  if (data_ != nullptr) munmap(data_, mapped_bytes_);
  if (fd_ >= 0) close(fd_);
  data_ = nullptr;
  fd_ = -1;
}

}  // namespace bertps

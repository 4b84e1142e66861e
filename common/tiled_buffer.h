// TiledBuffer: a float array of any length whose memory is one small tile
// mapped over and over (memfd + MAP_SHARED at every tile-sized offset):
// element i and element i + tile_elements() are the same memory. Reads and
// writes anywhere cost what they cost on a real array (the same pages, the
// same copies), but the process holds only the tile (its proportional set
// size, Pss, grows by the tile; RSS counts the page once per mapping and
// overstates it).
//
// The simulated-compute worker pulls parameters into one and pushes
// gradients from another (docs/scaling.md): 64 simulated BERT-base workers
// on one host hold 2 x 4 MiB each instead of 2 x 440 MB.
//
// Thread-safety: like a plain array (writers of aliased elements race on
// the same memory; the simulated worker never reads what it pulls).
#ifndef BERTPS_COMMON_TILED_BUFFER_H_
#define BERTPS_COMMON_TILED_BUFFER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace bertps {

class TiledBuffer {
 public:
  static constexpr size_t kDefaultTileBytes = size_t{4} << 20;
  // `size` elements; the tile is rounded up to whole pages.
  static absl::StatusOr<TiledBuffer> Create(int64_t size,
                                            size_t tile_bytes = kDefaultTileBytes);
  TiledBuffer() = default;
  TiledBuffer(TiledBuffer&& o) noexcept { *this = static_cast<TiledBuffer&&>(o); }
  TiledBuffer& operator=(TiledBuffer&& o) noexcept;
  TiledBuffer(const TiledBuffer&) = delete;
  TiledBuffer& operator=(const TiledBuffer&) = delete;
  ~TiledBuffer();

  float* data() { return data_; }
  const float* data() const { return data_; }
  int64_t size() const { return size_; }
  int64_t tile_elements() const { return static_cast<int64_t>(tile_bytes_ / sizeof(float)); }
  // Bytes of memory it holds (the tile).
  size_t resident_bytes() const { return tile_bytes_; }

 private:
  void Release();
  float* data_ = nullptr;
  int64_t size_ = 0;
  size_t tile_bytes_ = 0;
  size_t mapped_bytes_ = 0;
  int fd_ = -1;
};

}  // namespace bertps

#endif  // BERTPS_COMMON_TILED_BUFFER_H_

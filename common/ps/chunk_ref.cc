#include "common/ps/chunk_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/io/half.h"
#include "common/optim/optimizer.h"

namespace bertps {
namespace ps {

ChunkRef ChunkRef::Of(const TensorChunk& chunk) {
  ChunkRef r;
  r.name = chunk.name();
  r.dtype = chunk.dtype();
  r.shape.assign(chunk.shape().begin(), chunk.shape().end());
  r.offset = chunk.offset();
  if (!chunk.data().empty()) r.data.push_back(chunk.data());
  r.data_bytes = chunk.data().size();
  r.rows.assign(chunk.rows().begin(), chunk.rows().end());
  return r;
}

void ChunkRef::CopyDataTo(void* dst) const {
  char* out = static_cast<char*>(dst);
  for (absl::string_view piece : data) {
    std::memcpy(out, piece.data(), piece.size());
    out += piece.size();
  }
}

absl::string_view ChunkRef::Reader::Next(size_t n) {
  while (piece_ < c_.data.size() && off_ == c_.data[piece_].size()) {
    ++piece_;  // done, or empty
    off_ = 0;
  }
  if (piece_ == c_.data.size()) return {};
  const absl::string_view part = c_.data[piece_].substr(off_, n);
  off_ += part.size();
  return part;
}

void ChunkRef::Reader::Read(void* dst, size_t n) {
  char* out = static_cast<char*>(dst);
  while (n > 0) {
    const absl::string_view part = Next(n);
    if (part.empty()) break;
    std::memcpy(out, part.data(), part.size());
    out += part.size();
    n -= part.size();
  }
}

bool ChunkRef::Reader::ReadFinite(float* dst, int64_t n, bool stream) {
  char* const base = reinterpret_cast<char*>(dst);
  size_t left = sizeof(float) * static_cast<size_t>(n);
  size_t at = 0;  // bytes of dst written
  bool ok = true;
  while (left > 0) {
    const absl::string_view part = Next(left);
    if (part.empty()) break;
    const size_t take = part.size();
    const char* in = part.data();
    // [at, at + take) of dst: a partial value at each end, whole ones between.
    // A value split between pieces is checked by the piece that completes it.
    const size_t head = std::min(take, (4 - at % 4) % 4);
    if (head > 0) {
      std::memcpy(base + at, in, head);
      if ((at + head) % 4 == 0) ok = std::isfinite(dst[at / 4]) && ok;
    }
    const size_t whole = (take - head) / 4;
    if (whole > 0) {
      ok = optim::CopyAllFinite(dst + (at + head) / 4, in + head,
                                static_cast<int64_t>(whole), stream) &&
           ok;
    }
    const size_t tail = take - head - 4 * whole;
    if (tail > 0) {
      std::memcpy(base + at + head + 4 * whole, in + head + 4 * whole, tail);
    }
    at += take;
    left -= take;
  }
  return ok;
}

void ChunkRef::Reader::ReadBf16(float* dst, int64_t n) {
  // Through a block that stays in cache (a piece boundary may fall inside
  // a value: Read joins it).
  constexpr int64_t kBlock = 2048;
  uint16_t block[kBlock];
  for (int64_t at = 0; at < n; at += kBlock) {
    const int64_t len = std::min(kBlock, n - at);
    Read(block, sizeof(uint16_t) * static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) dst[at + i] = io::Bf16ToF32(block[i]);
  }
}

}  // namespace ps
}  // namespace bertps

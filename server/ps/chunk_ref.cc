#include "server/ps/chunk_ref.h"

#include <algorithm>
#include <cstring>

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

void ChunkRef::Reader::Read(void* dst, size_t n) {
  char* out = static_cast<char*>(dst);
  while (n > 0 && piece_ < c_.data.size()) {
    const absl::string_view p = c_.data[piece_];
    const size_t take = std::min(n, p.size() - off_);
    std::memcpy(out, p.data() + off_, take);
    out += take;
    n -= take;
    off_ += take;
    if (off_ == p.size()) {
      ++piece_;
      off_ = 0;
    }
  }
}

}  // namespace ps
}  // namespace bertps

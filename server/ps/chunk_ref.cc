#include "server/ps/chunk_ref.h"

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
  return r;
}

void ChunkRef::CopyDataTo(void* dst) const {
  char* out = static_cast<char*>(dst);
  for (absl::string_view piece : data) {
    std::memcpy(out, piece.data(), piece.size());
    out += piece.size();
  }
}

}  // namespace ps
}  // namespace bertps

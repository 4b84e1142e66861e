// ChunkRef: a TensorChunk (proto/tensor.proto) whose payload is not owned --
// it points into received transport buffers (or into a TensorChunk), in one
// or more pieces. Lets a shard or a worker copy a chunk's elements straight
// into their destination, without first copying them into a std::string.
//
// Thread-safety: a plain value; the pieces must outlive every use.
#ifndef BERTPS_COMMON_PS_CHUNK_REF_H_
#define BERTPS_COMMON_PS_CHUNK_REF_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "proto/tensor.pb.h"

namespace bertps {
namespace ps {

struct ChunkRef {
  std::string name;
  DType dtype = DTYPE_UNSPECIFIED;
  std::vector<int64_t> shape;  // empty when the sender left it out
  int64_t offset = 0;          // element offset of the first value
  // The little-endian elements, in order; a piece boundary may fall inside
  // an element.
  std::vector<absl::string_view> data;
  size_t data_bytes = 0;  // sum of the pieces' sizes
  // A row chunk's rows (TensorChunk.rows); empty for a range chunk.
  std::vector<int64_t> rows;

  // A view of a parsed TensorChunk (which must outlive it).
  static ChunkRef Of(const TensorChunk& chunk);
  // Copies all data_bytes bytes to dst.
  void CopyDataTo(void* dst) const;

  // Reads the payload in order, in parts of any size.
  class Reader {
   public:
    explicit Reader(const ChunkRef& chunk) : c_(chunk) {}
    // Copies the next n bytes to dst (n <= the bytes left).
    void Read(void* dst, size_t n);
    // Copies the next n float32 values to dst (4 * n <= the bytes left) and
    // returns whether every one is finite, checking them as they are copied
    // (optim::CopyAllFinite; `stream`: with non-temporal stores). A value
    // split between pieces is checked once it is whole in dst.
    bool ReadFinite(float* dst, int64_t n, bool stream);
    // Reads the next n bfloat16 values (2 * n <= the bytes left) and writes
    // them widened to float32 (exact) to dst.
    void ReadBf16(float* dst, int64_t n);

   private:
    // The next at most n bytes of the current piece (empty at the end).
    absl::string_view Next(size_t n);

    const ChunkRef& c_;
    size_t piece_ = 0;
    size_t off_ = 0;  // in data[piece_]
  };
};

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_COMMON_PS_CHUNK_REF_H_

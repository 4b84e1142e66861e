// Copy-free encoding and decoding of the parameter server's streamed
// messages (PushRequest, PullResponse; docs/wire-format.md) on gRPC byte
// buffers. The bytes on the wire are exactly the protobuf encoding of those
// messages -- any protobuf client or server interoperates -- but a chunk's
// payload is never copied into a std::string:
//   - EncodeChunk() sends the payload as a gRPC slice that refers to the
//     caller's memory (after a small encoded prefix), so the transport writes
//     it to the socket from where it lies;
//   - ParsePushRequest() / ParsePullResponse() leave the payload in the
//     received slices (ChunkRef pieces), so the receiver copies it once,
//     straight into its destination.
//
// Thread-safety: pure functions. Ownership: a parsed message holds references
// to the received slices; its ChunkRef is valid while the message lives.
#ifndef BERTPS_COMMON_PS_CHUNK_CODEC_H_
#define BERTPS_COMMON_PS_CHUNK_CODEC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/ps.pb.h"
#include "common/ps/chunk_ref.h"

namespace bertps {
namespace ps {

// Full method names of the streamed RPCs (proto/ps.proto).
inline constexpr char kPullMethod[] = "/bertps.ParameterServer/Pull";
inline constexpr char kPushMethod[] = "/bertps.ParameterServer/Push";

// PushRequest {chunk} or PullResponse {chunk} (both carry the chunk as field
// 2): a TensorChunk {name, dtype, offset, data}, data given as a slice (which
// may refer to memory the caller keeps alive until the write completed).
grpc::ByteBuffer EncodeChunk(absl::string_view name, DType dtype,
                             int64_t offset, grpc::Slice data);
// A row chunk: data holds `rows` (strictly increasing) of the tensor.
grpc::ByteBuffer EncodeRowChunk(absl::string_view name, DType dtype,
                                absl::Span<const int64_t> rows,
                                grpc::Slice data);
// A row chunk whose data is the concatenation of `pieces`.
grpc::ByteBuffer EncodeRowChunk(absl::string_view name, DType dtype,
                                absl::Span<const int64_t> rows,
                                std::vector<grpc::Slice> pieces);
// The data of `rows` (strictly increasing) of a row-major table whose memory
// `table` holds from row `first_row` on, as pieces for EncodeRowChunk: runs
// of consecutive rows of at least kMinReferencedRun bytes refer to `table`
// (a sub-slice: it shares table's reference, or is static when table is),
// shorter runs are copied together into one new buffer (the short runs
// between two long ones are one piece). The bytes on the
// wire are the same either way; long runs are not copied before the
// socket.
inline constexpr size_t kMinReferencedRun = 2048;
std::vector<grpc::Slice> RowPieces(const grpc::Slice& table, size_t row_bytes,
                                   int64_t first_row,
                                   absl::Span<const int64_t> rows);
// Several chunks as one message: PushRequest / PullResponse `chunks`
// (TensorChunks), so that a stream's small tensors cost one message, one
// socket write and one wake-up of the reader instead of one each. The
// payload slices are kept as given (they may refer to the caller's memory,
// which must then live until the message is written). A batch of one chunk
// is sent as a plain `chunk` message.
inline constexpr int kPushChunksField = 4;
inline constexpr int kPullChunksField = 3;
// Most chunks one received message may carry (the parsers refuse more):
// bounds what a message of empty chunks costs to parse. A batch holds at
// most a model's tensors, a few hundred.
inline constexpr size_t kMaxChunksPerMessage = 1 << 16;
class ChunkBatch {
 public:
  // field: kPushChunksField or kPullChunksField.
  explicit ChunkBatch(int field) : field_(field) {}
  void AddChunk(absl::string_view name, DType dtype, int64_t offset,
                grpc::Slice data);
  void AddRowChunk(absl::string_view name, DType dtype,
                   absl::Span<const int64_t> rows,
                   std::vector<grpc::Slice> pieces);
  bool empty() const { return pending_.empty(); }
  size_t payload_bytes() const { return bytes_; }
  // The message of every chunk added since the last Take(), in order (at
  // least one); the batch is empty after.
  grpc::ByteBuffer Take();

 private:
  void Add(absl::string_view name, DType dtype, int64_t offset,
           absl::Span<const int64_t> rows, std::vector<grpc::Slice> pieces);
  struct Pending {
    std::string name;
    DType dtype = DTYPE_UNSPECIFIED;
    int64_t offset = 0;
    std::vector<int64_t> rows;
    std::vector<grpc::Slice> pieces;
  };
  int field_;
  std::vector<Pending> pending_;
  size_t bytes_ = 0;
};

// Any message, serialised by protobuf (headers, the pull's version).
grpc::ByteBuffer EncodeMessage(const google::protobuf::MessageLite& message);

struct ParsedPushRequest {
  std::vector<grpc::Slice> slices;  // keep chunk's pieces alive
  bool has_header = false;
  PushHeader header;
  bool has_next_first = false;
  TensorRows next_first;
  bool has_chunk = false;
  ChunkRef chunk;
  bool has_chunks = false;  // `chunks`: several, in order
  std::vector<ChunkRef> chunks;
  // Set when protobuf's parser took the message (the chunks view it).
  std::shared_ptr<const PushRequest> owned;
};
struct ParsedPullResponse {
  std::vector<grpc::Slice> slices;
  bool has_version = false;
  int64_t version = 0;
  bool has_chunk = false;
  ChunkRef chunk;
  bool has_chunks = false;
  std::vector<ChunkRef> chunks;
  std::shared_ptr<const PullResponse> owned;  // as ParsedPushRequest's
};

// Parse a received message (any valid protobuf encoding, unknown fields
// skipped): copy-free for what senders write, through protobuf's own parser
// for the rare rest (groups, encodings the fast path does not expect);
// InvalidArgument on malformed bytes or more than kMaxChunksPerMessage
// chunks. `out` is reset first.
absl::Status ParsePushRequest(const grpc::ByteBuffer& buffer,
                              ParsedPushRequest* out);
absl::Status ParsePullResponse(const grpc::ByteBuffer& buffer,
                               ParsedPullResponse* out);

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_COMMON_PS_CHUNK_CODEC_H_

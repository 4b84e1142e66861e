// Fuzzes the parameter server's copy-free parsers of streamed messages
// (common/ps/chunk_codec.h: ParsePushRequest, ParsePullResponse), which read
// every Push request a shard receives, on arbitrary bytes cut into several
// gRPC slices. Differential: whenever protobuf itself parses the bytes as a
// PushRequest / PullResponse, the copy-free parser must accept them too and
// find the same header, chunk name, dtype, shape, offset, rows and payload
// bytes, one chunk or a batch of them (wherever the slice boundaries fall).
// No crash, no read outside the slices.
//
// One deliberate difference, whose inputs are not compared: a message of
// more than kMaxChunksPerMessage chunks is refused. (What the copy-free path
// does not take goes to protobuf's own parser, so the rest must agree.)
//
// Input: byte 0 = number of cuts k (% 8), bytes 1..k = cut positions
// (scaled to the message), then the message bytes.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_input.h"
#include "fuzz/proto_mutator.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/ps.pb.h"
#include "common/ps/chunk_codec.h"

namespace {

using bertps::ps::ChunkRef;

std::string Payload(const ChunkRef& c) {
  std::string out(c.data_bytes, '\0');
  if (!out.empty()) c.CopyDataTo(&out[0]);
  std::string joined;
  for (absl::string_view p : c.data) joined.append(p.data(), p.size());
  BERTPS_FUZZ_CHECK(joined == out, "CopyDataTo differs from the pieces");
  return out;
}

void SameChunk(const ChunkRef& ours, const bertps::TensorChunk& ref) {
  BERTPS_FUZZ_CHECK(ours.name == ref.name(), "name");
  BERTPS_FUZZ_CHECK(ours.dtype == ref.dtype(), "dtype %d vs %d", ours.dtype,
                    ref.dtype());
  BERTPS_FUZZ_CHECK(ours.offset == ref.offset(), "offset");
  BERTPS_FUZZ_CHECK(
      ours.shape == std::vector<int64_t>(ref.shape().begin(), ref.shape().end()),
      "shape");
  BERTPS_FUZZ_CHECK(Payload(ours) == ref.data(), "payload (%zu vs %zu bytes)",
                    ours.data_bytes, ref.data().size());
  BERTPS_FUZZ_CHECK(
      ours.rows == std::vector<int64_t>(ref.rows().begin(), ref.rows().end()),
      "rows");
}

// A batch (`chunks`): the same chunks in the same order.
void SameChunks(const std::vector<ChunkRef>& ours,
                const bertps::TensorChunks& ref) {
  BERTPS_FUZZ_CHECK(ours.size() == static_cast<size_t>(ref.chunks_size()),
                    "chunks: %zu vs %d", ours.size(), ref.chunks_size());
  for (size_t i = 0; i < ours.size(); ++i) SameChunk(ours[i], ref.chunks(i));
}

}  // namespace

[[maybe_unused]] static const bool kQuiet = bertps::fuzz::QuietProtobuf();

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t k = std::min<size_t>(data[0] % 8, size - 1);
  const std::string bytes(reinterpret_cast<const char*>(data) + 1 + k,
                          size - 1 - k);
  std::vector<size_t> cuts = {0, bytes.size()};
  for (size_t i = 0; i < k; ++i) {
    cuts.push_back(bytes.size() * data[1 + i] / 255);
  }
  std::sort(cuts.begin(), cuts.end());
  std::vector<grpc::Slice> slices;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    // Own copies, so ASan sees reads past each slice's end.
    slices.emplace_back(bytes.data() + cuts[i], cuts[i + 1] - cuts[i]);
  }
  const grpc::ByteBuffer buffer(slices.data(), slices.size());

  bertps::ps::ParsedPushRequest push;
  const absl::Status ps = bertps::ps::ParsePushRequest(buffer, &push);
  BERTPS_FUZZ_CHECK(ps.ok() || absl::IsInvalidArgument(ps), "%s",
                    ps.ToString().c_str());
  if (ps.ok() && push.has_chunk) Payload(push.chunk);
  if (ps.ok()) {
    for (const ChunkRef& c : push.chunks) Payload(c);
  }
  bertps::PushRequest push_ref;
  // Beyond kMaxChunksPerMessage chunks this parser refuses on purpose.
  const auto few = [](const bertps::TensorChunks& c) {
    return static_cast<size_t>(c.chunks_size()) <=
           bertps::ps::kMaxChunksPerMessage;
  };
  if (push_ref.ParseFromString(bytes) && few(push_ref.chunks())) {
    BERTPS_FUZZ_CHECK(ps.ok(), "protobuf parses a push this parser refuses: %s",
                      ps.ToString().c_str());
    BERTPS_FUZZ_CHECK(push.has_header == push_ref.has_header() &&
                          push.has_chunk == push_ref.has_chunk() &&
                          push.has_chunks == push_ref.has_chunks(),
                      "push oneof case");
    if (push.has_header) {
      BERTPS_FUZZ_CHECK(push.header.SerializeAsString() ==
                            push_ref.header().SerializeAsString(),
                        "push header");
    }
    if (push.has_chunk) SameChunk(push.chunk, push_ref.chunk());
    if (push.has_chunks) SameChunks(push.chunks, push_ref.chunks());
  }

  bertps::ps::ParsedPullResponse pull;
  const absl::Status pl = bertps::ps::ParsePullResponse(buffer, &pull);
  BERTPS_FUZZ_CHECK(pl.ok() || absl::IsInvalidArgument(pl), "%s",
                    pl.ToString().c_str());
  if (pl.ok() && pull.has_chunk) Payload(pull.chunk);
  if (pl.ok()) {
    for (const ChunkRef& c : pull.chunks) Payload(c);
  }
  bertps::PullResponse pull_ref;
  if (pull_ref.ParseFromString(bytes) && few(pull_ref.chunks())) {
    BERTPS_FUZZ_CHECK(pl.ok(), "protobuf parses a pull this parser refuses: %s",
                      pl.ToString().c_str());
    BERTPS_FUZZ_CHECK(pull.has_version == pull_ref.has_version() &&
                          pull.has_chunk == pull_ref.has_chunk() &&
                          pull.has_chunks == pull_ref.has_chunks(),
                      "pull oneof case");
    if (pull.has_version) {
      BERTPS_FUZZ_CHECK(pull.version == pull_ref.version(), "pull version");
    }
    if (pull.has_chunk) SameChunk(pull.chunk, pull_ref.chunk());
    if (pull.has_chunks) SameChunks(pull.chunks, pull_ref.chunks());
  }
  return 0;
}

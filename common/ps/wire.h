// What both ends of the parameter-server protocol (proto/ps.proto) agree on
// besides the messages: message size limits, the incarnation metadata, chunk
// sizes, and the channel arguments of every client of the shards.
#ifndef BERTPS_COMMON_PS_WIRE_H_
#define BERTPS_COMMON_PS_WIRE_H_

#include <cstddef>
#include <cstdint>

#include "grpcpp/support/channel_arguments.h"

namespace bertps {
namespace ps {

// Largest gRPC message either side accepts (chunks are ~2 MB).
constexpr int kMaxMessageBytes = 16 << 20;
// Call metadata naming the job incarnation a request belongs to
// (ShardOptions.incarnation; required by a shard of a coordinator's job).
constexpr char kIncarnationMetadata[] = "bertps-incarnation";
// Call metadata of every call to a shard of a coordinator's job: the job's
// id and the incarnation's key (Assignment.job_key), which only its members
// hold; peer calls between its shards (Exchange, Replicate, InstallSnapshot)
// also the shard key (Assignment.shard_key), which only its shards hold. A
// call without them is refused (PERMISSION_DENIED) and changes nothing.
constexpr char kJobMetadata[] = "bertps-job";
constexpr char kJobKeyMetadata[] = "bertps-job-key";
constexpr char kShardKeyMetadata[] = "bertps-shard-key";
// Call metadata naming the layout of the job's shards the caller knows: the
// sum of the shard indices' terms (each counts its primary's replacements by
// a backup). A shard that knows a later layout refuses the call (ABORTED):
// its caller still counts on a replaced primary (optional; replicas > 1).
constexpr char kLayoutMetadata[] = "bertps-layout";
// The parameter-server protocol (proto/ps.proto) this release speaks,
// exchanged in the first call (Describe). Bump it with a change an older
// peer would misread; 0 on the wire means a peer of before versions (1).
constexpr int kPsProtocolVersion = 1;
// Elements per TensorChunk on the wire (2 MB of F32).
constexpr int64_t kChunkElements = 512 * 1024;
// Chunks of small tensors ready together travel as one message (ChunkBatch)
// up to about this many payload bytes.
constexpr size_t kBatchBytes = 1 << 20;
// Smallest buffer gRPC offers a socket read on the shards' connections
// (GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, both ends; gRPC's default is 256
// bytes). gRPC sizes its reads from an estimate that starts at 8 KiB and
// decays toward the size of recent reads; a floor of 1 MiB lets every read
// take what the socket holds in one call. It costs no latency: a read
// returns whatever has arrived. 1-shard pushes and pulls of BERT-base moved
// about 7% more (the A/B runs: docs/benchmarks.md as of commit b4cd61a).
constexpr int kMinReadChunkBytes = 1 << 20;

// HTTP/2 keepalive of the shards' clients while a call is open: a ping after
// this long without a frame, the connection closed when its answer has not
// come kKeepaliveTimeoutMs later (gRPC then also sets TCP_USER_TIMEOUT to
// that on the client's socket, as its servers do by default). A connection
// whose other end is gone (half-open: a worker that only waits for a
// version never sends a byte that would be reset) or a shard host frozen
// fails its calls UNAVAILABLE within about 50 s instead of at their
// deadline. The shards accept pings at any rate (no ping strikes).
constexpr int kKeepaliveTimeMs = 30000;
constexpr int kKeepaliveTimeoutMs = 20000;

// Channel arguments of every client of the shards (message size limits,
// kMinReadChunkBytes, keepalive pings every `keepalive_ms` while a call is
// open; 0: none).
grpc::ChannelArguments ClientChannelArguments(int keepalive_ms = kKeepaliveTimeMs);

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_COMMON_PS_WIRE_H_

#include "common/ps/wire.h"

#include <algorithm>

#include "grpc/impl/codegen/grpc_types.h"

namespace bertps {
namespace ps {

grpc::ChannelArguments ClientChannelArguments(int keepalive_ms) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, kMinReadChunkBytes);
  if (keepalive_ms > 0) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, keepalive_ms);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                std::min(keepalive_ms, kKeepaliveTimeoutMs));
    // Pings go on while a call waits with no data either way (a pull
    // waiting for its version).
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  return args;
}

}  // namespace ps
}  // namespace bertps

#include "common/ps/wire.h"

#include "grpc/impl/codegen/grpc_types.h"

namespace bertps {
namespace ps {

grpc::ChannelArguments ClientChannelArguments() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, kMinReadChunkBytes);
  return args;
}

}  // namespace ps
}  // namespace bertps

// What a shard names on its calls to the other shards of its job
// (Exchange, Replicate, InstallSnapshot): the job's id, the incarnation's
// job key and the shards' key (common/ps/wire.h kJobMetadata,
// kJobKeyMetadata, kShardKeyMetadata; Assignment.job_key, shard_key). Empty
// for shards run on their own.
// Thread-safety: a PeerScope is a value; the links that hold one guard it.
#ifndef BERTPS_SERVER_PS_PEER_SCOPE_H_
#define BERTPS_SERVER_PS_PEER_SCOPE_H_

#include <memory>
#include <string>

#include "common/capability.h"
#include "common/ps/wire.h"
#include "grpcpp/client_context.h"

namespace bertps {
namespace ps {

struct PeerScope {
  std::string job_id;
  std::string job_key;
  std::string shard_key;
  // This shard's capability as its latest assignment gave it (null or
  // empty: none, a shard run on its own).
  std::shared_ptr<const CapabilityHolder> capability;

  void AddTo(grpc::ClientContext* ctx) const {
    if (!job_id.empty()) ctx->AddMetadata(kJobMetadata, job_id);
    if (!job_key.empty()) ctx->AddMetadata(kJobKeyMetadata, job_key);
    if (!shard_key.empty()) ctx->AddMetadata(kShardKeyMetadata, shard_key);
    if (capability != nullptr) {
      std::string wire = capability->Get();
      if (!wire.empty()) ctx->AddMetadata(kCapabilityMetadata, std::move(wire));
    }
  }
};

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_SERVER_PS_PEER_SCOPE_H_

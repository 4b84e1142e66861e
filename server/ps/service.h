// The gRPC adapter of a parameter-server shard: a thin layer over ShardCore
// (all logic lives there). Also the gRPC PeerLink used between shards.
//
// The calls that wait (Pull for a version, Announce for every worker's
// batch, Push for its turn) are served on gRPC's callback API: a waiting
// call holds no thread, so a shard's threads do not grow with its workers
// (service_stream.cc). The others, short and rare, are synchronous.
//
// Thread-safety: thread-safe (gRPC calls handlers concurrently).
#ifndef BERTPS_SERVER_PS_SERVICE_H_
#define BERTPS_SERVER_PS_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/aligned_vector.h"
#include "common/capability.h"
#include "common/security.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/channel_arguments.h"
#include "common/ps/wire.h"
#include "proto/ps.grpc.pb.h"
#include "server/ps/replica_link.h"
#include "server/ps/shard.h"

namespace bertps {
namespace ps {

// A shard of a coordinator's job checkpoints only into its checkpoint.dir
// and restores only its checkpoint.restore or a manifest under that
// directory (ShardOptions; lexically, NUL and control characters refused):
// PERMISSION_DENIED otherwise, saying nothing of the file. A shard run on
// its own (no job id) takes any path.
absl::Status CheckCheckpointDir(const ShardOptions& o, const std::string& dir);
absl::Status CheckRestoreManifest(const ShardOptions& o,
                                  const std::string& manifest);

using ShardServiceBase = ParameterServer::WithRawCallbackMethod_Pull<
    ParameterServer::WithRawCallbackMethod_Push<
        ParameterServer::WithCallbackMethod_Announce<ParameterServer::Service>>>;

// Serves the shard core installed in it; without one (a shard daemon waiting
// for the coordinator to assign it a job) every call is UNAVAILABLE.
class ShardService final : public ShardServiceBase {
 public:
  // Pull and Push are served on raw byte buffers (common/ps/chunk_codec.h):
  // the same wire format, without copies of the tensor payloads.
  explicit ShardService(std::shared_ptr<ShardCore> core = nullptr);
  // Serves `core` (null: none); the previous one is aborted.
  void Install(std::shared_ptr<ShardCore> core);
  // The key and revocations that capabilities are checked against.
  CapabilityVerifier& verifier() { return verifier_; }
  std::shared_ptr<ShardCore> core() const {
    absl::MutexLock l(&mu_);
    return core_;
  }

  grpc::Status Describe(grpc::ServerContext*, const DescribeRequest*,
                        DescribeResponse*) override;
  // Callback methods (service_stream.cc).
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Pull(
      grpc::CallbackServerContext* ctx,
      const grpc::ByteBuffer* request) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* Push(
      grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Announce(grpc::CallbackServerContext* ctx,
                                     const AnnounceRequest* request,
                                     AnnounceResponse* response) override;
  grpc::Status Exchange(grpc::ServerContext*, const ExchangeRequest*,
                        ExchangeResponse*) override;
  grpc::Status Checkpoint(grpc::ServerContext*, const CheckpointRequest*,
                          CheckpointResponse*) override;
  grpc::Status Restore(grpc::ServerContext*, const RestoreRequest*,
                       RestoreResponse*) override;
  grpc::Status Stats(grpc::ServerContext*, const StatsRequest*,
                     StatsResponse*) override;
  // Primary to backup (ShardCore::ApplyReplicated); one at a time.
  grpc::Status Replicate(grpc::ServerContext* ctx,
                         grpc::ServerReader<ReplicateRequest>* reader,
                         ReplicateResponse* resp) override;
  // Primary to a joining backup (ShardCore::InstallSnapshot): the header,
  // then the bytes, received whole before anything is applied.
  grpc::Status InstallSnapshot(grpc::ServerContext* ctx,
                               grpc::ServerReader<SnapshotChunk>* reader,
                               InstallSnapshotResponse* resp) override;

 private:
  // The installed core; UNAVAILABLE when none, ABORTED when the call's
  // kIncarnationMetadata names another install, PERMISSION_DENIED when a
  // core of a coordinator's job gets a call without the job's id,
  // incarnation and key (kPeer: and the shards' key).
  // kMember: a trainer's or a shard's call; kPeer: Exchange, from a shard
  // of the job; kReplica: Replicate and InstallSnapshot, from the primary
  // of this shard's index at its term or later.
  enum class CallScope { kMember, kPeer, kReplica };
  // With a capability key (a coordinator's job), the call's capability
  // must hold for the job, its incarnation and the scope; *cap (if given)
  // is set to it (null: no capabilities checked). Its refusals
  // (PERMISSION_DENIED) go to the audit trail.
  absl::StatusOr<std::shared_ptr<ShardCore>> Current(
      const grpc::ServerContextBase* ctx,
      CallScope scope = CallScope::kMember,
      std::shared_ptr<const Capability>* cap = nullptr) const;
  absl::StatusOr<std::shared_ptr<ShardCore>> CurrentUnaudited(
      const grpc::ServerContextBase* ctx, CallScope scope,
      std::shared_ptr<const Capability>* cap) const;
  CapabilityVerifier verifier_;
  mutable absl::Mutex mu_;
  std::shared_ptr<ShardCore> core_ ABSL_GUARDED_BY(mu_);
  // A replicated step's gradient, received whole before it is applied
  // (kept between steps: one buffer of the shard's size).
  absl::Mutex replicate_mu_;
  AlignedVector<float> replicate_grad_ ABSL_GUARDED_BY(replicate_mu_);
};

// Sends partial sums to peer shards over gRPC (lazy channels).
class GrpcPeerLink : public PeerLink {
 public:
  // Dials peers with `security` (TLS, bearer token; common/security.h).
  explicit GrpcPeerLink(std::vector<std::string> addresses,
                        SecurityConfig security = SecurityConfig());
  // Replaces the addresses (e.g. once ephemeral ports are known).
  void SetAddresses(std::vector<std::string> addresses);
  // What its calls name (the installed core's job and keys).
  void SetScope(PeerScope scope) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    scope_ = std::move(scope);
  }
  // SendAll to one shard.
  absl::Status Send(int to_shard, const ExchangeRequest& request,
                    absl::Time deadline, const std::atomic<bool>* stop) override;
  // To every shard in `to` at once (asynchronous calls, no thread each).
  // A peer starting or briefly unreachable is tried again until `deadline`;
  // any answer of the peer itself (refused, another incarnation) is final.
  // Each attempt dials the peer's address as set then (a shard index whose
  // primary was replaced is reached at its new address).
  absl::Status SendAll(const std::vector<int>& to,
                       const ExchangeRequest& request, absl::Time deadline,
                       const std::atomic<bool>* stop,
                       std::vector<ExchangeResponse>* replies = nullptr) override;

 private:
  // The stub and address of `to_shard`, its channel made on first use.
  absl::Status StubOf(int to_shard,
                      std::shared_ptr<ParameterServer::Stub>* stub,
                      std::string* address, PeerScope* scope);
  const SecurityConfig security_;
  absl::Mutex mu_;
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);
  PeerScope scope_ ABSL_GUARDED_BY(mu_);
  // Shared with Send()s in flight, which may outlive a SetAddresses.
  std::vector<std::shared_ptr<ParameterServer::Stub>> stubs_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_SERVER_PS_SERVICE_H_

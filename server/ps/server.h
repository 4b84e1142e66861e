// ShardServer: a ShardCore behind a started gRPC server (the daemon and the
// in-process tests use the same code). Message-size limits are set
// explicitly; the listening port may be 0 (chosen by the system).
// Thread-safety: thread-safe.
#ifndef BERTPS_SERVER_PS_SERVER_H_
#define BERTPS_SERVER_PS_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/security.h"
#include "grpcpp/server.h"
#include "server/ps/service.h"
#include "server/ps/shard.h"

namespace bertps {
namespace ps {

class ShardServer {
 public:
  // Listens on `address` (host:port, port 0 = any free one). `peers` are
  // all shards' addresses (may be set later with SetPeers). `security`:
  // how it listens and how it dials peers (common/security.h).
  static absl::StatusOr<std::unique_ptr<ShardServer>> Start(
      const ShardOptions& options, const std::string& address,
      std::vector<std::string> peers,
      const SecurityConfig& security = SecurityConfig());
  // A server with no shard yet (UNAVAILABLE until Install).
  static absl::StatusOr<std::unique_ptr<ShardServer>> StartIdle(
      const std::string& address,
      const SecurityConfig& security = SecurityConfig());
  // Creates the shard of a job and serves it; replaces any previous one.
  // `backups`: the addresses of this shard's backups when it is a primary
  // (ShardOptions::backup false) of a replicated job.
  absl::Status Install(const ShardOptions& options,
                       std::vector<std::string> peers,
                       std::vector<std::string> backups = {});
  // Stops serving the installed shard (on_retire sees it first).
  void Uninstall();
  // Called with an installed shard just before it stops being served
  // (uninstalled or replaced): e.g. a last export of its counters. Set it
  // before the first Install.
  void set_on_retire(std::function<void(ShardCore&)> f) {
    on_retire_ = std::move(f);
  }
  ~ShardServer();

  int port() const { return port_; }
  std::string address() const;
  void SetPeers(std::vector<std::string> peers) {
    link_.SetAddresses(std::move(peers));
  }
  // Its link to the installed primary's backups.
  GrpcReplicaLink& replica_link() { return replicas_; }
  // The installed shard (null when idle).
  ShardCore* core() { return service_->core().get(); }
  // A coordinator's job: the capabilities its calls must carry
  // (common/capability.h): the verifier of the coordinator's key and the
  // revoked members, and this shard's own capability for its peer calls.
  // ShardMember updates both from each assignment.
  CapabilityVerifier& capability_verifier() { return service_->verifier(); }
  CapabilityHolder& own_capability() { return *own_capability_; }
  // The same, kept alive while the caller holds it.
  std::shared_ptr<ShardCore> shared_core() { return service_->core(); }
  void Shutdown();
  void Wait() { server_->Wait(); }
  const SecurityConfig& security() const { return security_; }
  // Answers SERVING for the grpc.health.v1 service `service` from now on
  // (a member's proof that this address is its own: MemberClient).
  void ServeHealthService(const std::string& service);

 private:
  ShardServer(std::vector<std::string> peers, const SecurityConfig& security)
      : security_(security),
        link_(std::move(peers), security),
        replicas_(security) {}
  const SecurityConfig security_;
  GrpcPeerLink link_;
  GrpcReplicaLink replicas_;
  std::unique_ptr<ShardService> service_;
  // This shard's own capability (ShardMember sets it from each assignment),
  // named on its calls to peer shards.
  const std::shared_ptr<CapabilityHolder> own_capability_ =
      std::make_shared<CapabilityHolder>();
  std::unique_ptr<grpc::Server> server_;
  std::string host_;
  int port_ = 0;
  // Set before the first Install; called from the installing thread.
  std::function<void(ShardCore&)> on_retire_;
};

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_SERVER_PS_SERVER_H_

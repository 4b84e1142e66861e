// MemberClient: a daemon's side of ClusterService. Registers with a role,
// sends heartbeats (with progress reports) and returns the coordinator's
// assignment. Re-registers when the coordinator no longer knows it (e.g. it
// restarted). Every call has a deadline.
// Thread-safety: thread-compatible (one heartbeat loop per daemon).
#ifndef BERTPS_COMMON_CLUSTER_MEMBER_H_
#define BERTPS_COMMON_CLUSTER_MEMBER_H_

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "proto/coordinator.grpc.pb.h"

namespace bertps {

class MemberClient {
 public:
  MemberClient(const std::string& coordinator, Role role,
               std::string my_address,
               absl::Duration rpc_timeout = absl::Seconds(10));
  // Dials with `security` (TLS, bearer token; common/security.h).
  MemberClient(const std::string& coordinator, Role role,
               std::string my_address, const SecurityConfig& security,
               absl::Duration rpc_timeout = absl::Seconds(10));

  absl::StatusOr<Assignment> Heartbeat(const std::string& job,
                                       const std::vector<StepReport>& reports,
                                       bool done, const std::string& error);
  // Any request (member_id is filled in).
  absl::StatusOr<Assignment> Heartbeat(HeartbeatRequest request);
  // Tells the coordinator this member shuts down (its slot, shard or lease
  // is taken back now, not after the member timeout); `request` may carry
  // last results. One attempt with a short deadline; no-op if unregistered.
  absl::Status Leave(HeartbeatRequest request = HeartbeatRequest());
  // One of `share` members one process serves (RegisterRequest.daemon):
  // registers with `daemon` and 1/share of the process's memory limit. Call
  // before the first Heartbeat.
  void set_daemon(std::string daemon, int share) {
    daemon_ = std::move(daemon);
    memory_share_ = std::max(1, share);
  }
  absl::Duration interval() const { return interval_; }
  const std::string& member_id() const { return member_id_; }
  // This member's credential (RegisterResponse.member_secret): every
  // heartbeat carries it; JobService calls of a worker token present it as
  // metadata (kMemberMetadata, kMemberSecretMetadata) to see its job.
  const std::string& member_secret() const { return member_secret_; }
  // A member with an address: the grpc.health.v1 service its server at that
  // address must answer SERVING for (set before the first Heartbeat), the
  // proof the coordinator asks for that the address is this member's
  // (common/cluster/member_instance.h).
  const std::string& instance_service() const { return instance_service_; }

 private:
  absl::Status Register();

  const std::string coordinator_;
  const Role role_;
  const std::string my_address_;
  const absl::Duration rpc_timeout_;
  std::unique_ptr<ClusterService::Stub> stub_;
  std::string member_id_;
  std::string member_secret_;
  const std::string instance_;          // random, for the address proof
  const std::string instance_service_;  // MemberInstanceService(instance_)
  std::string daemon_;
  int memory_share_ = 1;
  absl::Duration interval_ = absl::Milliseconds(500);
};

}  // namespace bertps

#endif  // BERTPS_COMMON_CLUSTER_MEMBER_H_

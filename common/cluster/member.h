// MemberClient: a daemon's side of ClusterService. Registers with a role,
// sends heartbeats (with progress reports) and returns the coordinator's
// assignment. Re-registers when the coordinator no longer knows it (e.g. it
// restarted). Every call has a deadline.
// Thread-safety: thread-compatible (one heartbeat loop per daemon).
#ifndef BERTPS_COMMON_CLUSTER_MEMBER_H_
#define BERTPS_COMMON_CLUSTER_MEMBER_H_

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/cluster/member_instance.h"
#include "common/security.h"
#include "common/timeouts.h"
#include "proto/coordinator.grpc.pb.h"

namespace bertps {

// What a member loop needs of the coordinator (MemberClient; tests fake
// it).
class MemberChannel {
 public:
  virtual ~MemberChannel() = default;
  // One heartbeat (member_id and its credential filled in); registers (or
  // registers again, announcing what announce() says it runs) first when
  // needed. UNAVAILABLE etc. when the coordinator cannot be reached.
  virtual absl::StatusOr<Assignment> Heartbeat(HeartbeatRequest request) = 0;
  // The member leaves (see MemberClient::Leave).
  virtual absl::Status Leave(HeartbeatRequest request) = 0;
  // Send the next heartbeat within this long (the coordinator's word).
  virtual absl::Duration interval() const = 0;
  // The coordinator's member timeout, once registered (0: not known yet).
  virtual absl::Duration member_timeout() const = 0;
  virtual const std::string& member_id() const = 0;
  // What the member runs, announced whenever it registers (again).
  virtual void set_announce(std::function<MemberRun()> announce) = 0;
  // A note sent once with the next registration or heartbeat (a give-up).
  virtual void set_gave_up(std::string note) = 0;
};

class MemberClient : public MemberChannel {
 public:
  MemberClient(const std::string& coordinator, Role role,
               std::string my_address,
               absl::Duration rpc_timeout = kMemberRpcTimeout);
  // Dials with `security` (TLS, bearer token; common/security.h).
  MemberClient(const std::string& coordinator, Role role,
               std::string my_address, const SecurityConfig& security,
               absl::Duration rpc_timeout = kMemberRpcTimeout);

  absl::StatusOr<Assignment> Heartbeat(const std::string& job,
                                       const std::vector<StepReport>& reports,
                                       bool done, const std::string& error);
  // Any request (member_id is filled in).
  absl::StatusOr<Assignment> Heartbeat(HeartbeatRequest request) override;
  // Tells the coordinator this member shuts down (its slot, shard or lease
  // is taken back now, not after the member timeout); `request` may carry
  // last results. One attempt with a short deadline; no-op if unregistered.
  absl::Status Leave(HeartbeatRequest request = HeartbeatRequest()) override;
  // One of `share` members one process serves (RegisterRequest.daemon):
  // registers with `daemon` and 1/share of the process's memory limit. Call
  // before the first Heartbeat.
  void set_daemon(std::string daemon, int share) {
    daemon_ = std::move(daemon);
    memory_share_ = std::max(1, share);
  }
  absl::Duration interval() const override { return interval_; }
  absl::Duration member_timeout() const override { return member_timeout_; }
  const std::string& member_id() const override { return member_id_; }
  void set_announce(std::function<MemberRun()> announce) override {
    announce_ = std::move(announce);
  }
  void set_gave_up(std::string note) override { gave_up_ = std::move(note); }
  // Whether the last registration's announcement was adopted.
  bool adopted() const { return adopted_; }
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
  absl::Duration interval_ = kHeartbeatInterval;
  absl::Duration member_timeout_;
  std::function<MemberRun()> announce_;
  std::string gave_up_;  // sent once, then cleared
  bool adopted_ = false;
};

}  // namespace bertps

#endif  // BERTPS_COMMON_CLUSTER_MEMBER_H_

// Every timeout of the bertps daemons in one place: the default of each
// (the option structs' fields and the flags' defaults refer to these, so
// each number is written once), and the relations between them, checked
// once at a daemon's start (ValidateTimeouts) with an error that names both
// values and their flags. docs/architecture.md ("Timeouts and retries")
// lists them with their flags.
//
// The relations ValidateTimeouts checks, and why each must hold:
//  1. heartbeat interval < --member_timeout_s: a member heartbeating less
//     often than the member timeout is declared lost between two
//     heartbeats.
//  2. a heartbeat's deadline (HeartbeatDeadline) <= --member_timeout_s: a
//     heartbeat answered after the member timeout finds the member lost
//     already.
//  3. the shard probe's deadline <= --member_timeout_s: the probe exists to
//     find a dead shard sooner than the member timeout (docs/jobs.md).
//  4. the address proof's deadline < a member's call deadline: the
//     coordinator checks a registering member's address inside its Register
//     call; a check that outlasts the member's deadline fails every
//     registration of a member with an address.
//  5. the pull stall timeout < --rpc_timeout_s (unless 0: off): a stalled
//     pull must be cancelled (UNAVAILABLE, naming how far it got: started
//     again at once) before the call's own deadline ends it.
//  6. the push stall timeout < --rpc_timeout_s (unless 0: off): likewise;
//     a stalled push fails UNAVAILABLE and is retried in place (PsClient::
//     Push), where DEADLINE_EXCEEDED would fail the step.
// A process that runs pipeline stages (Timeouts::pipeline) also:
//  7. --stage_recv_timeout_s >= the stage send timeout: a neighbour's send
//     of one message may take that long; a receiver that gives up sooner
//     fails a message still arriving.
//  8. --stage_recv_timeout_s >= --rpc_timeout_s: a neighbour may be inside
//     a parameter-server call (a BSP pull or announce waits for every
//     replica) for up to the rpc timeout before it sends.
//  9. --stage_recv_timeout_s > the peer restart wait: a neighbour between
//     two starts of its part is given the restart wait; a receive that
//     ends sooner gives up on it first.
// And every timeout is positive (the stall timeouts and the give-up may be
// 0: off, never).
//
// Relations not checked at start, and why:
//  - --coordinator_give_up_s >= --member_timeout_s (unless 0: never): a
//    member that gives up sooner stops its work (and its job starts again
//    from a checkpoint) over a coordinator absence shorter than the silence
//    after which the coordinator itself declares a member lost (and after
//    its own pause it gives every member a full member timeout). The two
//    are flags of different daemons: the member loop checks it once the
//    coordinator named its member timeout (CheckGiveUp), and warns.
//  - the shard's longest wait and --rpc_timeout_s: none is needed; a shard
//    waits until the sooner of the call's deadline and its own wait.
//  - the connect timeout: how long a worker waits for shards to start; it
//    bounds no other wait.
// Thread-safety: constants, a value type and pure functions.
#ifndef BERTPS_COMMON_TIMEOUTS_H_
#define BERTPS_COMMON_TIMEOUTS_H_

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace bertps {

// Parameter-server client (PsClientOptions, common/ps/ps_client.h).
// --rpc_timeout_s: every call's deadline.
inline constexpr absl::Duration kPsRpcTimeout = absl::Seconds(120);
// How long Connect waits for shards that are starting.
inline constexpr absl::Duration kPsConnectTimeout = absl::Seconds(60);
// A pull stream silent this long after its version is cancelled.
inline constexpr absl::Duration kPullStallTimeout = absl::Seconds(30);
// A push write waiting this long for the shard is cancelled.
inline constexpr absl::Duration kPushStallTimeout = absl::Seconds(30);

// Parameter-server shard (ShardOptions, server/ps/shard.h): its longest wait
// for a version, a push's turn, a peer or a checkpoint.
inline constexpr absl::Duration kShardWaitTimeout = absl::Seconds(120);

// Members (MemberClient, common/cluster/member.h) and the coordinator
// (CoordinatorOptions, server/coordinator/coordinator.h).
// A member's calls to the coordinator (registration; heartbeats, see
// HeartbeatDeadline).
inline constexpr absl::Duration kMemberRpcTimeout = absl::Seconds(10);
// The shortest heartbeat deadline.
inline constexpr absl::Duration kHeartbeatDeadlineFloor = absl::Seconds(1);
// How often members heartbeat (the coordinator may ask for less often).
inline constexpr absl::Duration kHeartbeatInterval = absl::Milliseconds(500);
// --member_timeout_s: a member silent this long is lost.
inline constexpr absl::Duration kMemberTimeout = absl::Seconds(10);
// The coordinator's health probe of a shard a worker could not reach.
inline constexpr absl::Duration kShardProbeTimeout = absl::Seconds(1);
// The coordinator's check that a registering member's address is its own.
inline constexpr absl::Duration kAddressProofTimeout = absl::Seconds(3);
// --coordinator_give_up_s: a member stops its work after the coordinator
// was away this long (0: never).
inline constexpr absl::Duration kCoordinatorGiveUp = absl::ZeroDuration();

// Pipeline stages (PipelineStageOptions, worker/pipeline_stage.h).
// One send of a tensor to a neighbouring stage.
inline constexpr absl::Duration kStageSendTimeout = absl::Seconds(60);
// --stage_recv_timeout_s: the longest wait for a neighbour's message.
inline constexpr absl::Duration kStageRecvTimeout = absl::Seconds(300);
// While waiting, the neighbour is pinged this often, each ping with this
// deadline.
inline constexpr absl::Duration kStageProbeInterval = absl::Seconds(1);
inline constexpr absl::Duration kStageProbeTimeout = absl::Seconds(5);
// A neighbour refusing sends or not answering pings is lost after this.
inline constexpr absl::Duration kPeerRestartWait = absl::Seconds(5);

// A duration as a flag's whole seconds (the flags' defaults).
inline int FlagSeconds(absl::Duration d) {
  return static_cast<int>(absl::ToInt64Seconds(d));
}

// A heartbeat's deadline: the member's call deadline, but at most half the
// member timeout (a heartbeat answered later is of no use: the member
// counts as silent by then; it fails sooner, and the member loop's retries
// and give-up see the coordinator's absence) and at least
// kHeartbeatDeadlineFloor. member_timeout 0: not known yet.
inline absl::Duration HeartbeatDeadline(absl::Duration member_rpc,
                                        absl::Duration member_timeout) {
  if (member_timeout <= absl::ZeroDuration()) return member_rpc;
  return std::min(member_rpc,
                  std::max(kHeartbeatDeadlineFloor, member_timeout / 2));
}

// The timeouts one process uses: the defaults, with its flags set over
// them.
struct Timeouts {
  absl::Duration ps_rpc = kPsRpcTimeout;  // --rpc_timeout_s
  absl::Duration ps_connect = kPsConnectTimeout;
  absl::Duration pull_stall = kPullStallTimeout;  // 0: off
  absl::Duration push_stall = kPushStallTimeout;  // 0: off
  absl::Duration shard_wait = kShardWaitTimeout;
  absl::Duration member_rpc = kMemberRpcTimeout;
  absl::Duration heartbeat_interval = kHeartbeatInterval;
  absl::Duration member_timeout = kMemberTimeout;  // --member_timeout_s
  absl::Duration shard_probe = kShardProbeTimeout;
  absl::Duration address_proof = kAddressProofTimeout;
  absl::Duration give_up = kCoordinatorGiveUp;  // --coordinator_give_up_s
  // Whether the process runs pipeline stages: false leaves the stage_*
  // relations (7-9) unchecked (its stage timeouts are not used).
  bool pipeline = true;
  absl::Duration stage_send = kStageSendTimeout;
  absl::Duration stage_recv = kStageRecvTimeout;  // --stage_recv_timeout_s
  absl::Duration stage_probe_interval = kStageProbeInterval;
  absl::Duration stage_probe_timeout = kStageProbeTimeout;
  absl::Duration peer_restart_wait = kPeerRestartWait;
};

// OK when every relation above holds; else INVALID_ARGUMENT naming each
// broken one: both values, each by its flag ("--rpc_timeout_s") or, for a
// value no flag sets, its name and "no flag", e.g.
//   --stage_recv_timeout_s: 30s must be at least the stage send timeout
//   (kStageSendTimeout, no flag), 1m: a neighbour's send of one message may
//   take that long
// (several joined by "; "), in the form common/flag_checks.h prints.
absl::Status ValidateTimeouts(const Timeouts& t);

// The give-up relation, once the member timeout is known (see above): OK,
// or FAILED_PRECONDITION naming --coordinator_give_up_s and
// --member_timeout_s with their values. give_up 0 (never) is always OK.
absl::Status CheckGiveUp(absl::Duration give_up, absl::Duration member_timeout);

}  // namespace bertps

#endif  // BERTPS_COMMON_TIMEOUTS_H_

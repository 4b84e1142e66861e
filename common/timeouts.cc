#include "common/timeouts.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace bertps {
namespace {

// A timeout as an error names it: its flag, or its name and "no flag".
struct Named {
  const char* label;
  absl::Duration value;
};

std::string Describe(const Named& n) {
  return absl::StrCat(n.label, ", ", absl::FormatDuration(n.value));
}

// "A: va must be <relation> B, vb: why" when `holds` is false.
void Relation(bool holds, const Named& a, const char* relation,
              const Named& b, const char* why,
              std::vector<std::string>* errors) {
  if (holds) return;
  errors->push_back(absl::StrCat(a.label, ": ", absl::FormatDuration(a.value),
                                 " must be ", relation, " ", Describe(b), ": ",
                                 why));
}

void Positive(const Named& n, bool zero_is_off,
              std::vector<std::string>* errors) {
  if (n.value > absl::ZeroDuration() ||
      (zero_is_off && n.value == absl::ZeroDuration())) {
    return;
  }
  errors->push_back(absl::StrCat(n.label, ": ", absl::FormatDuration(n.value),
                                 zero_is_off ? " must be positive (or 0: off)"
                                             : " must be positive"));
}

}  // namespace

absl::Status ValidateTimeouts(const Timeouts& t) {
  const Named ps_rpc{"--rpc_timeout_s", t.ps_rpc};
  const Named ps_connect{
      "the shards' connect timeout (kPsConnectTimeout, no flag)",
      t.ps_connect};
  const Named pull_stall{"the pull stall timeout (kPullStallTimeout, no flag)",
                         t.pull_stall};
  const Named push_stall{"the push stall timeout (kPushStallTimeout, no flag)",
                         t.push_stall};
  const Named shard_wait{"the shard's longest wait (kShardWaitTimeout, no flag)",
                         t.shard_wait};
  const Named member_rpc{
      "a member's call deadline (kMemberRpcTimeout, no flag)", t.member_rpc};
  const Named interval{"the heartbeat interval (kHeartbeatInterval, no flag)",
                       t.heartbeat_interval};
  const Named member_timeout{"--member_timeout_s", t.member_timeout};
  const Named heartbeat_deadline{
      "a heartbeat's deadline (HeartbeatDeadline, no flag)",
      HeartbeatDeadline(t.member_rpc, t.member_timeout)};
  const Named shard_probe{
      "the shard probe's deadline (kShardProbeTimeout, no flag)",
      t.shard_probe};
  const Named address_proof{
      "the address proof's deadline (kAddressProofTimeout, no flag)",
      t.address_proof};
  const Named give_up{"--coordinator_give_up_s", t.give_up};
  const Named stage_send{"the stage send timeout (kStageSendTimeout, no flag)",
                         t.stage_send};
  const Named stage_recv{"--stage_recv_timeout_s", t.stage_recv};
  const Named probe_interval{
      "the stage probe interval (kStageProbeInterval, no flag)",
      t.stage_probe_interval};
  const Named probe_timeout{
      "the stage probe's deadline (kStageProbeTimeout, no flag)",
      t.stage_probe_timeout};
  const Named restart_wait{"the peer restart wait (kPeerRestartWait, no flag)",
                           t.peer_restart_wait};

  std::vector<std::string> errors;
  for (const Named& n : {ps_rpc, ps_connect, shard_wait, member_rpc, interval,
                         member_timeout, shard_probe, address_proof}) {
    Positive(n, /*zero_is_off=*/false, &errors);
  }
  for (const Named& n : {pull_stall, push_stall, give_up}) {
    Positive(n, /*zero_is_off=*/true, &errors);
  }
  if (t.pipeline) {
    for (const Named& n :
         {stage_send, stage_recv, probe_interval, probe_timeout, restart_wait}) {
      Positive(n, /*zero_is_off=*/false, &errors);
    }
  }
  // Relations between values that are wrong in themselves add nothing.
  if (!errors.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
  }

  // 1-4: members and the coordinator.
  Relation(t.member_timeout > t.heartbeat_interval, member_timeout,
           "longer than", interval,
           "a member heartbeating less often than the member timeout is "
           "declared lost between two heartbeats",
           &errors);
  Relation(heartbeat_deadline.value <= t.member_timeout, member_timeout,
           "at least", heartbeat_deadline,
           "a heartbeat answered after the member timeout finds the member "
           "lost already",
           &errors);
  Relation(t.shard_probe <= t.member_timeout, member_timeout, "at least",
           shard_probe,
           "the probe is there to find a dead shard sooner than the member "
           "timeout",
           &errors);
  Relation(t.address_proof < t.member_rpc, address_proof, "shorter than",
           member_rpc,
           "the coordinator checks a registering member's address inside its "
           "Register call, which would time out first",
           &errors);
  // 5-6: the parameter-server client.
  Relation(t.pull_stall == absl::ZeroDuration() || t.ps_rpc > t.pull_stall,
           ps_rpc, "longer than", pull_stall,
           "a stalled pull must be cancelled (UNAVAILABLE: started again at "
           "once) before its call's deadline ends it",
           &errors);
  Relation(t.push_stall == absl::ZeroDuration() || t.ps_rpc > t.push_stall,
           ps_rpc, "longer than", push_stall,
           "a stalled push must fail UNAVAILABLE (retried in place) before "
           "its call's deadline fails the step",
           &errors);
  // 7-9: pipeline stages.
  if (t.pipeline) {
    Relation(t.stage_recv >= t.stage_send, stage_recv, "at least", stage_send,
             "a neighbour's send of one message may take that long", &errors);
    Relation(t.stage_recv >= t.ps_rpc, stage_recv, "at least", ps_rpc,
             "a neighbour may be inside a parameter-server call (a BSP pull "
             "waits for every replica) that long before it sends",
             &errors);
    Relation(t.stage_recv > t.peer_restart_wait, stage_recv, "longer than",
             restart_wait,
             "a neighbour between two starts of its part is given that long",
             &errors);
  }
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
}

absl::Status CheckGiveUp(absl::Duration give_up,
                         absl::Duration member_timeout) {
  if (give_up <= absl::ZeroDuration() ||
      member_timeout <= absl::ZeroDuration() || give_up >= member_timeout) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "--coordinator_give_up_s: ", absl::FormatDuration(give_up),
      " is shorter than the coordinator's --member_timeout_s, ",
      absl::FormatDuration(member_timeout),
      ": this member stops its work (and its job starts again from a "
      "checkpoint) over a coordinator absence shorter than the silence after "
      "which the coordinator itself declares a member lost"));
}

}  // namespace bertps

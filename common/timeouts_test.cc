// The defaults hold every relation of common/timeouts.h; each broken
// relation is refused naming both values, by flag or by name.
#include "common/timeouts.h"

#include <string>

#include "gtest/gtest.h"

namespace bertps {
namespace {

std::string Message(const absl::Status& st) { return std::string(st.message()); }

TEST(Timeouts, TheDefaultsHoldEveryRelation) {
  Timeouts t;
  EXPECT_TRUE(ValidateTimeouts(t).ok()) << ValidateTimeouts(t);
  t.pipeline = false;
  EXPECT_TRUE(ValidateTimeouts(t).ok()) << ValidateTimeouts(t);
  // The smallest member timeout and give-up the flags allow hold them too.
  t.member_timeout = absl::Seconds(1);
  t.give_up = absl::Seconds(1);
  EXPECT_TRUE(ValidateTimeouts(t).ok()) << ValidateTimeouts(t);
}

TEST(Timeouts, AStageReceiveShorterThanTheRpcTimeoutIsRefusedNamingBoth) {
  Timeouts t;
  t.ps_rpc = absl::Seconds(400);
  absl::Status st = ValidateTimeouts(t);
  ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(Message(st).rfind("--stage_recv_timeout_s: 5m must be at least "
                              "--rpc_timeout_s, 6m40s: ",
                              0),
            0u)
      << st;
  // A process that runs no stage does not use its stage timeouts.
  t.pipeline = false;
  EXPECT_TRUE(ValidateTimeouts(t).ok()) << ValidateTimeouts(t);
}

TEST(Timeouts, AStageReceiveShorterThanASendIsRefused) {
  Timeouts t;
  t.stage_recv = absl::Seconds(30);
  const std::string m = Message(ValidateTimeouts(t));
  EXPECT_NE(m.find("--stage_recv_timeout_s: 30s must be at least the stage "
                   "send timeout (kStageSendTimeout, no flag), 1m: "),
            std::string::npos)
      << m;
  // Both broken relations, each named.
  EXPECT_NE(m.find("; --stage_recv_timeout_s: 30s must be at least "
                   "--rpc_timeout_s, 2m: "),
            std::string::npos)
      << m;
  t.stage_recv = absl::Seconds(4);
  t.stage_send = absl::Seconds(1);
  t.ps_rpc = absl::Seconds(2);
  t.pull_stall = t.push_stall = absl::Seconds(1);
  EXPECT_NE(Message(ValidateTimeouts(t))
                .find("--stage_recv_timeout_s: 4s must be longer than the peer "
                      "restart wait (kPeerRestartWait, no flag), 5s"),
            std::string::npos)
      << ValidateTimeouts(t);
}

TEST(Timeouts, AnRpcTimeoutWithinTheStallTimeoutsIsRefused) {
  Timeouts t;
  t.pipeline = false;
  t.ps_rpc = absl::Seconds(30);
  const std::string m = Message(ValidateTimeouts(t));
  EXPECT_NE(m.find("--rpc_timeout_s: 30s must be longer than the pull stall "
                   "timeout (kPullStallTimeout, no flag), 30s: "),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("--rpc_timeout_s: 30s must be longer than the push stall "
                   "timeout (kPushStallTimeout, no flag), 30s: "),
            std::string::npos)
      << m;
  // Stall watches that are off bound nothing.
  t.pull_stall = t.push_stall = absl::ZeroDuration();
  EXPECT_TRUE(ValidateTimeouts(t).ok()) << ValidateTimeouts(t);
}

TEST(Timeouts, AMemberTimeoutWithinAHeartbeatIsRefused) {
  Timeouts t;
  t.member_timeout = absl::Milliseconds(400);
  const std::string m = Message(ValidateTimeouts(t));
  EXPECT_NE(m.find("--member_timeout_s: 400ms must be longer than the "
                   "heartbeat interval (kHeartbeatInterval, no flag), 500ms"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("--member_timeout_s: 400ms must be at least a heartbeat's "
                   "deadline (HeartbeatDeadline, no flag), 1s"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("--member_timeout_s: 400ms must be at least the shard "
                   "probe's deadline (kShardProbeTimeout, no flag), 1s"),
            std::string::npos)
      << m;
}

TEST(Timeouts, AnAddressProofOutlastingTheRegistrationIsRefused) {
  Timeouts t;
  t.address_proof = kMemberRpcTimeout;
  EXPECT_NE(Message(ValidateTimeouts(t))
                .find("the address proof's deadline (kAddressProofTimeout, no "
                      "flag): 10s must be shorter than a member's call "
                      "deadline (kMemberRpcTimeout, no flag), 10s: "),
            std::string::npos)
      << ValidateTimeouts(t);
}

TEST(Timeouts, AValueThatIsNotPositiveIsRefusedAlone) {
  Timeouts t;
  t.ps_rpc = absl::ZeroDuration();
  EXPECT_EQ(Message(ValidateTimeouts(t)), "--rpc_timeout_s: 0 must be positive");
  t = Timeouts();
  t.give_up = absl::Seconds(-1);
  EXPECT_EQ(Message(ValidateTimeouts(t)),
            "--coordinator_give_up_s: -1s must be positive (or 0: off)");
  t = Timeouts();
  t.give_up = absl::ZeroDuration();  // never
  t.pull_stall = absl::ZeroDuration();
  EXPECT_TRUE(ValidateTimeouts(t).ok()) << ValidateTimeouts(t);
}

TEST(Timeouts, HeartbeatDeadlineIsHalfTheMemberTimeoutWithinItsBounds) {
  EXPECT_EQ(HeartbeatDeadline(absl::Seconds(10), absl::ZeroDuration()),
            absl::Seconds(10));  // not known yet
  EXPECT_EQ(HeartbeatDeadline(absl::Seconds(10), absl::Seconds(10)),
            absl::Seconds(5));
  EXPECT_EQ(HeartbeatDeadline(absl::Seconds(10), absl::Seconds(60)),
            absl::Seconds(10));
  EXPECT_EQ(HeartbeatDeadline(absl::Seconds(10), absl::Seconds(1)),
            kHeartbeatDeadlineFloor);
  EXPECT_EQ(HeartbeatDeadline(absl::Seconds(2), absl::Seconds(10)),
            absl::Seconds(2));
}

TEST(Timeouts, AGiveUpShorterThanTheMemberTimeoutIsNamed) {
  EXPECT_TRUE(CheckGiveUp(absl::ZeroDuration(), absl::Seconds(10)).ok());
  EXPECT_TRUE(CheckGiveUp(absl::Seconds(3), absl::Seconds(3)).ok());
  EXPECT_TRUE(CheckGiveUp(absl::Seconds(20), absl::Seconds(10)).ok());
  EXPECT_TRUE(CheckGiveUp(absl::Seconds(3), absl::ZeroDuration()).ok());
  absl::Status st = CheckGiveUp(absl::Seconds(3), absl::Seconds(10));
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Message(st).rfind("--coordinator_give_up_s: 3s is shorter than the "
                              "coordinator's --member_timeout_s, 10s: ",
                              0),
            0u)
      << st;
}

TEST(Timeouts, FlagSecondsAreTheDefaultsInWholeSeconds) {
  EXPECT_EQ(FlagSeconds(kPsRpcTimeout), 120);
  EXPECT_EQ(FlagSeconds(kMemberTimeout), 10);
  EXPECT_EQ(FlagSeconds(kStageRecvTimeout), 300);
  EXPECT_EQ(FlagSeconds(kCoordinatorGiveUp), 0);
}

}  // namespace
}  // namespace bertps

// The capabilities the coordinator issues (common/capability.h): each train
// member's names its job, incarnation and the slots it holds, and changes
// when slots move; each shard's names its index, term and primacy, and its
// assignment carries the key to verify with; a member lost from the job is
// listed as revoked to the shards until a new incarnation; nothing issued
// verifies under another key.
#include <algorithm>
#include <string>
#include <vector>

#include "common/capability.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_test_util.h"

namespace bertps {
namespace {

Capability Open(CapabilityVerifier& v, const Assignment& a, absl::Time now) {
  absl::StatusOr<std::shared_ptr<const Capability>> c =
      v.Verify(a.capability(), now);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? **c : Capability();
}

std::vector<int> Slots(const Capability& c) {
  std::vector<int> s(c.slots().begin(), c.slots().end());
  std::sort(s.begin(), s.end());
  return s;
}

TEST(CoordinatorCapabilities, IssuedPerMemberAndRenewedWhenSlotsMove) {
  auto signer = std::shared_ptr<const CapabilitySigner>(
      *CapabilitySigner::Generate());
  ClockedCoordinator t([&](CoordinatorOptions& o) {
    o.capability_signer = signer;
    o.slot_takeover_after = absl::ZeroDuration();
  });
  const std::string ps = t.Join(PS, "127.0.0.1:1");
  const std::string a = t.Join(TRAIN);
  const std::string b = t.Join(TRAIN);
  const std::string job = *t.c->Submit(TrainSpec(1, 2, 100));
  t.Beat(ps, job);  // told the job; the next beat says it is installed
  const Assignment shard = t.Beat(ps, job);
  ASSERT_EQ(shard.job_id(), job);
  // The shard is given the key, and a shard's capability.
  EXPECT_EQ(shard.capability_key(), signer->public_key());
  CapabilityVerifier v;
  ASSERT_TRUE(v.AddKey(shard.capability_key()).ok());
  const Capability sc = Open(v, shard, t.now);
  EXPECT_EQ(sc.member_id(), ps);
  EXPECT_EQ(sc.kind(), Capability::SHARD);
  EXPECT_EQ(sc.shard_index(), 0);
  EXPECT_TRUE(sc.primary());
  EXPECT_EQ(sc.job_id(), job);

  const Assignment aa = t.Beat(a, job);
  const Assignment ab = t.Beat(b, job);
  ASSERT_FALSE(aa.wait());
  const Capability ca = Open(v, aa, t.now);
  const Capability cb = Open(v, ab, t.now);
  EXPECT_EQ(ca.kind(), Capability::TRAINER);
  EXPECT_EQ(ca.incarnation(), t.c->Get(job)->incarnation());
  EXPECT_EQ(Slots(ca), std::vector<int>{aa.index()});
  EXPECT_EQ(Slots(cb), std::vector<int>{ab.index()});
  EXPECT_NE(aa.index(), ab.index());
  EXPECT_TRUE(shard.capability_key().size() == 32u);
  EXPECT_TRUE(aa.capability_key().empty());  // only shards get the key
  EXPECT_EQ(ca.expires_ms() - ca.issued_ms(),
            absl::ToInt64Milliseconds(kCapabilityLifetime));

  // a is lost: b takes its slot over, its next capability names both, and
  // the shards are told a's no longer holds.
  t.now += absl::Seconds(6);
  t.Beat(ps, job);
  t.Beat(b, job);
  t.now += absl::Seconds(6);
  t.Beat(ps, job);
  t.Beat(b, job);
  t.c->Tick();
  t.Beat(ps, job);
  const Assignment ab2 = t.Beat(b, job);
  const Capability cb2 = Open(v, ab2, t.now);
  EXPECT_EQ(Slots(cb2), std::vector<int>({0, 1}));
  const Assignment shard2 = t.Beat(ps, job);
  EXPECT_EQ(std::vector<std::string>(shard2.revoked_members().begin(),
                                     shard2.revoked_members().end()),
            std::vector<std::string>{a});
  v.SetRevoked({shard2.revoked_members().begin(),
                shard2.revoked_members().end()});
  EXPECT_EQ(v.Verify(aa.capability(), t.now).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(v.Verify(ab2.capability(), t.now).ok());

  // Nothing it issues verifies under another key.
  CapabilityVerifier stranger;
  ASSERT_TRUE(stranger.AddKey((*CapabilitySigner::Generate())->public_key()).ok());
  EXPECT_FALSE(stranger.Verify(ab2.capability(), t.now).ok());
}

// An admin revokes a member: it is dropped as if lost (its slot goes to
// the other), every later heartbeat with its credential is refused, the
// shard is told its capability no longer holds; only cluster admins may.
TEST(CoordinatorCapabilities, RevokedMembersAreRefusedEverywhere) {
  ClockedCoordinator t([](CoordinatorOptions& o) {
    o.slot_takeover_after = absl::ZeroDuration();
  });
  const std::string ps = t.Join(PS, "127.0.0.1:1");
  const std::string a = t.Join(TRAIN);
  const std::string b = t.Join(TRAIN);
  const std::string job = *t.c->Submit(TrainSpec(1, 2, 100));
  t.Beat(ps, job);
  t.Beat(ps, job);
  t.Beat(a, job);
  t.Beat(b, job);

  Caller team;
  team.team = "vision";
  EXPECT_EQ(t.c->Revoke(a, team).status().code(),
            absl::StatusCode::kPermissionDenied);
  Caller worker;
  worker.admin = false;
  EXPECT_EQ(t.c->Revoke(a, worker).status().code(),
            absl::StatusCode::kPermissionDenied);
  absl::StatusOr<RevokeMemberResponse> r = t.c->Revoke(a, Caller());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->job_id(), job);
  EXPECT_FALSE(r->already());
  EXPECT_TRUE(t.c->Revoke(a, Caller())->already());
  EXPECT_EQ(t.c->Revoke("m-none", Caller()).status().code(),
            absl::StatusCode::kNotFound);

  HeartbeatRequest hb;
  hb.set_member_id(a);
  hb.set_job_id(job);
  absl::StatusOr<HeartbeatResponse> refused = SignedHeartbeat(*t.c, hb);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("revoked"), std::string::npos);

  const Assignment shard = t.Beat(ps, job);
  EXPECT_EQ(std::vector<std::string>(shard.revoked_members().begin(),
                                     shard.revoked_members().end()),
            std::vector<std::string>{a});
  t.c->Tick();  // the free slot is taken over
  const Assignment ab = t.Beat(b, job);
  CapabilityVerifier v;
  ASSERT_TRUE(v.AddKey(shard.capability_key()).ok());
  EXPECT_EQ(Slots(Open(v, ab, t.now)), std::vector<int>({0, 1}));
  EXPECT_EQ(t.c->Get(job)->restarts(), 0);
}

}  // namespace
}  // namespace bertps

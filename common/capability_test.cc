// Capabilities: signed by the coordinator's key, verified by the shards with
// the public key only; a changed byte, another key, an expired or revoked
// capability is refused; a key not yet heard of is UNAVAILABLE (try again);
// a verified capability is remembered (no second signature check), but a
// remembered signature over other bytes is no match.
#include "common/capability.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace bertps {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1800000000);

Capability Trainer() {
  Capability c;
  c.set_member_id("m-7");
  c.set_job_id("job-000001");
  c.set_incarnation(3);
  c.set_kind(Capability::TRAINER);
  c.add_slots(1);
  c.set_issued_ms(absl::ToUnixMillis(kNow));
  c.set_expires_ms(absl::ToUnixMillis(kNow + kCapabilityLifetime));
  return c;
}

TEST(CapabilityTest, SignedAndVerified) {
  auto signer = CapabilitySigner::Generate();
  ASSERT_TRUE(signer.ok()) << signer.status();
  EXPECT_EQ((*signer)->public_key().size(), 32u);
  CapabilityVerifier v;
  EXPECT_FALSE(v.has_keys());
  ASSERT_TRUE(v.AddKey((*signer)->public_key()).ok());
  const std::string wire = (*signer)->Sign(Trainer());
  auto cap = v.Verify(wire, kNow);
  ASSERT_TRUE(cap.ok()) << cap.status();
  EXPECT_EQ((*cap)->member_id(), "m-7");
  EXPECT_EQ((*cap)->slots_size(), 1);
  EXPECT_EQ((*cap)->key_id(), (*signer)->key_id());
  EXPECT_EQ(v.signature_checks(), 1);
  ASSERT_TRUE(v.Verify(wire, kNow).ok());
  EXPECT_EQ(v.signature_checks(), 1);  // remembered
}

TEST(CapabilityTest, TamperedForgedAndUnknownAreRefused) {
  auto signer = *CapabilitySigner::Generate();
  auto mallory = *CapabilitySigner::Generate();
  CapabilityVerifier v;
  ASSERT_TRUE(v.AddKey(signer->public_key()).ok());
  const std::string wire = signer->Sign(Trainer());
  ASSERT_TRUE(v.Verify(wire, kNow).ok());  // remembered from here on

  // More slots, the same signature: the remembered signature does not
  // vouch for other bytes, and the check fails.
  SignedCapability s;
  ASSERT_TRUE(s.ParseFromString(wire));
  Capability c;
  ASSERT_TRUE(c.ParseFromString(s.capability()));
  c.add_slots(0);
  c.SerializeToString(s.mutable_capability());
  auto tampered = v.Verify(s.SerializeAsString(), kNow);
  EXPECT_EQ(tampered.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(tampered.status().message().find("bad signature"),
            std::string::npos);

  // Signed by another key that claims the coordinator's key id.
  Capability forged = Trainer();
  std::string forged_wire = mallory->Sign(forged);
  ASSERT_TRUE(s.ParseFromString(forged_wire));
  ASSERT_TRUE(c.ParseFromString(s.capability()));
  c.set_key_id(signer->key_id());
  c.SerializeToString(s.mutable_capability());
  EXPECT_EQ(v.Verify(s.SerializeAsString(), kNow).status().code(),
            absl::StatusCode::kPermissionDenied);

  // Signed by a key the verifier was not given (under its own id): try
  // again once the shard hears of it.
  EXPECT_EQ(v.Verify(forged_wire, kNow).status().code(),
            absl::StatusCode::kUnavailable);

  EXPECT_EQ(v.Verify("", kNow).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(v.Verify("garbage", kNow).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(v.AddKey("short").ok());
}

TEST(CapabilityTest, WindowWithSkewAndRevocation) {
  auto signer = *CapabilitySigner::Generate();
  CapabilityVerifier v;
  ASSERT_TRUE(v.AddKey(signer->public_key()).ok());
  const std::string wire = signer->Sign(Trainer());
  const absl::Time expires = kNow + kCapabilityLifetime;
  EXPECT_TRUE(v.Verify(wire, expires + kCapabilitySkew).ok());
  auto late = v.Verify(wire, expires + kCapabilitySkew + absl::Seconds(1));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(late.status().message().find("expired"), std::string::npos);
  EXPECT_TRUE(v.Verify(wire, kNow - kCapabilitySkew).ok());
  EXPECT_FALSE(v.Verify(wire, kNow - kCapabilitySkew - absl::Seconds(1)).ok());

  v.SetRevoked({"m-7"});
  auto revoked = v.Verify(wire, kNow);
  EXPECT_EQ(revoked.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(revoked.status().message().find("revoked"), std::string::npos);
  v.SetRevoked({});
  EXPECT_TRUE(v.Verify(wire, kNow).ok());
}

TEST(CapabilityTest, KeysOfEarlierStartsHoldAndPemKeysLoad) {
  CapabilityVerifier v;
  auto first = *CapabilitySigner::Generate();
  ASSERT_TRUE(v.AddKey(first->public_key()).ok());
  const std::string old_wire = first->Sign(Trainer());
  auto second = *CapabilitySigner::Generate();
  ASSERT_TRUE(v.AddKey(second->public_key()).ok());
  EXPECT_TRUE(v.Verify(old_wire, kNow).ok());
  EXPECT_TRUE(v.Verify(second->Sign(Trainer()), kNow).ok());

  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/cap.pem";
  ASSERT_EQ(std::system(("openssl genpkey -algorithm ed25519 -out " + path +
                         " 2>/dev/null").c_str()),
            0);
  std::stringstream pem;
  pem << std::ifstream(path).rdbuf();
  auto loaded = CapabilitySigner::FromPem(pem.str());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto again = CapabilitySigner::FromPem(pem.str());
  EXPECT_EQ((*loaded)->public_key(), (*again)->public_key());
  auto bad = CapabilitySigner::FromPem("-----BEGIN PRIVATE KEY-----\nxx\n");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
// A pinned capability is what calls carry until unpinned, while the
// newest is still recorded; a second pin keeps the first.
TEST(CapabilityTest, HolderPinsTheCapabilityOfAStepInFlight) {
  CapabilityHolder h;
  h.Set("slots 0,1");
  h.PinIfUnpinned(h.Latest());
  h.Set("slots 0");
  EXPECT_EQ(h.Get(), "slots 0,1");
  EXPECT_EQ(h.Latest(), "slots 0");
  h.PinIfUnpinned("slots 0");
  EXPECT_EQ(h.Get(), "slots 0,1");
  h.Unpin();
  EXPECT_EQ(h.Get(), "slots 0");
}

}  // namespace bertps

// Signed, expiring, job-scoped capabilities (proto/capability.proto,
// docs/security.md "Capabilities").
//
// The coordinator holds an Ed25519 key (CapabilitySigner) and signs, in
// every assignment of a train job's member, what that member may do at the
// job's shards: the job and incarnation, its kind (trainer or shard), a
// trainer's slots, a shard's index, term and primacy, the checkpoint
// directory, and a validity window. The shards are given the coordinator's
// public key (never the private one) and verify each call's capability
// (CapabilityVerifier): they can check capabilities but not make them.
//
// Cost: a verification is an Ed25519 check (tens of microseconds); the
// verifier remembers the capabilities it verified (by signature), so a call
// with one it has seen costs a hash lookup (tools/capability_bench).
//
// Thread-safety: CapabilitySigner is immutable after creation;
// CapabilityVerifier and CapabilityHolder are internally synchronized.
#ifndef BERTPS_COMMON_CAPABILITY_H_
#define BERTPS_COMMON_CAPABILITY_H_

#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/capability.pb.h"

namespace bertps {

// Call metadata carrying a serialized SignedCapability ("-bin": gRPC sends
// it base64-encoded and hands the server the bytes).
inline constexpr char kCapabilityMetadata[] = "bertps-capability-bin";
// How long a capability holds after it is issued. Members get a fresh one
// on every heartbeat, so this is how long the shards go on serving them
// while the coordinator is away.
inline constexpr absl::Duration kCapabilityLifetime = absl::Minutes(10);
// The clocks of the coordinator and the shards may differ by this much.
inline constexpr absl::Duration kCapabilitySkew = absl::Seconds(30);

class CapabilitySigner {
 public:
  // A fresh key (a coordinator without --capability_key: its capabilities
  // hold until it restarts, when members are given new ones).
  static absl::StatusOr<std::unique_ptr<CapabilitySigner>> Generate();
  // An Ed25519 private key in PEM (openssl genpkey -algorithm ed25519).
  static absl::StatusOr<std::unique_ptr<CapabilitySigner>> FromPem(
      absl::string_view pem);
  ~CapabilitySigner();

  // The raw 32-byte public key, what shards are given.
  const std::string& public_key() const { return public_key_; }
  // Its fingerprint (KeyId).
  const std::string& key_id() const { return key_id_; }
  // `cap` with key_id set, signed: a serialized SignedCapability.
  std::string Sign(Capability cap) const;

 private:
  CapabilitySigner() = default;
  void* key_ = nullptr;  // EVP_PKEY
  std::string public_key_;
  std::string key_id_;
};

// "ed25519:" and 16 hex digits of the public key's SHA-256.
std::string KeyId(absl::string_view public_key);

class CapabilityVerifier {
 public:
  // Accepts capabilities signed with `public_key` from now on (the newest
  // few keys are kept: capabilities signed before a coordinator restart
  // hold until they expire). INVALID_ARGUMENT for a key of the wrong size.
  absl::Status AddKey(absl::string_view public_key) ABSL_LOCKS_EXCLUDED(mu_);
  bool has_keys() const ABSL_LOCKS_EXCLUDED(mu_);
  // Members whose capabilities no longer hold (they left or were excluded
  // from the job): replaces the previous list.
  void SetRevoked(std::set<std::string> member_ids) ABSL_LOCKS_EXCLUDED(mu_);

  // The capability of `wire` (a serialized SignedCapability) if a known
  // key signed it, `now` is inside its window (give or take
  // kCapabilitySkew) and its member is not revoked. UNAVAILABLE when a key
  // this verifier has not been given signed it (the coordinator has a new
  // key that the shard hears of on its next heartbeat: try again);
  // PERMISSION_DENIED otherwise, saying why.
  absl::StatusOr<std::shared_ptr<const Capability>> Verify(
      absl::string_view wire, absl::Time now) const ABSL_LOCKS_EXCLUDED(mu_);

  // Verifications that ran the signature check (not answered from memory).
  int64_t signature_checks() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Key {
    std::string id;
    std::string public_key;
  };
  static constexpr size_t kMaxKeys = 4;
  static constexpr size_t kMaxRemembered = 4096;

  mutable absl::Mutex mu_;
  std::deque<Key> keys_ ABSL_GUARDED_BY(mu_);  // newest first
  std::set<std::string> revoked_ ABSL_GUARDED_BY(mu_);
  // Verified capabilities by signature, with the signed bytes (a known
  // signature over other bytes is no match).
  struct Verified {
    std::string message;
    std::shared_ptr<const Capability> cap;
  };
  mutable absl::flat_hash_map<std::string, Verified> verified_
      ABSL_GUARDED_BY(mu_);
  mutable int64_t signature_checks_ ABSL_GUARDED_BY(mu_) = 0;
};

// A member's current capability (a serialized SignedCapability), replaced
// on each assignment and read by every call it makes.
class CapabilityHolder {
 public:
  // The newest capability (what Get() answers unless one is pinned).
  void Set(std::string wire) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    wire_ = std::move(wire);
  }
  std::string Get() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return pinned_.empty() ? wire_ : pinned_;
  }
  std::string Latest() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return wire_;
  }
  // Until Unpin(), Get() answers `wire` (unless one is pinned already):
  // a train part that gives slots up at its next step boundary still
  // pushes them in the step in flight, which the newest capability (of
  // the slots it keeps) no longer allows. The pinned one is a capability
  // the coordinator issued, naming more slots, and expires as issued.
  void PinIfUnpinned(std::string wire) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    if (pinned_.empty()) pinned_ = std::move(wire);
  }
  void Unpin() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    pinned_.clear();
  }

 private:
  mutable absl::Mutex mu_;
  std::string wire_ ABSL_GUARDED_BY(mu_);
  std::string pinned_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bertps

#endif  // BERTPS_COMMON_CAPABILITY_H_

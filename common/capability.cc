#include "common/capability.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace bertps {
namespace {

constexpr size_t kPublicKeyBytes = 32;
constexpr size_t kSignatureBytes = 64;

EVP_PKEY* AsKey(void* p) { return static_cast<EVP_PKEY*>(p); }

absl::StatusOr<std::string> RawPublicKey(EVP_PKEY* key) {
  std::string out(kPublicKeyBytes, '\0');
  size_t len = out.size();
  if (EVP_PKEY_get_raw_public_key(
          key, reinterpret_cast<unsigned char*>(out.data()), &len) != 1 ||
      len != kPublicKeyBytes) {
    return absl::InvalidArgumentError("not an Ed25519 key");
  }
  return out;
}

bool VerifySignature(const std::string& public_key, absl::string_view message,
                     absl::string_view signature) {
  EVP_PKEY* key = EVP_PKEY_new_raw_public_key(
      EVP_PKEY_ED25519, nullptr,
      reinterpret_cast<const unsigned char*>(public_key.data()),
      public_key.size());
  if (key == nullptr) return false;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  bool ok = ctx != nullptr &&
            EVP_DigestVerifyInit(ctx, nullptr, nullptr, nullptr, key) == 1 &&
            EVP_DigestVerify(
                ctx, reinterpret_cast<const unsigned char*>(signature.data()),
                signature.size(),
                reinterpret_cast<const unsigned char*>(message.data()),
                message.size()) == 1;
  EVP_MD_CTX_free(ctx);
  EVP_PKEY_free(key);
  return ok;
}

}  // namespace

std::string KeyId(absl::string_view public_key) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(public_key.data()),
         public_key.size(), digest);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "ed25519:";
  for (int i = 0; i < 8; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<CapabilitySigner>> CapabilitySigner::Generate() {
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr);
  EVP_PKEY* key = nullptr;
  const bool ok = ctx != nullptr && EVP_PKEY_keygen_init(ctx) == 1 &&
                  EVP_PKEY_keygen(ctx, &key) == 1;
  EVP_PKEY_CTX_free(ctx);
  if (!ok) return absl::InternalError("Ed25519 key generation failed");
  std::unique_ptr<CapabilitySigner> s(new CapabilitySigner());
  s->key_ = key;
  absl::StatusOr<std::string> pub = RawPublicKey(key);
  if (!pub.ok()) return pub.status();
  s->public_key_ = std::move(*pub);
  s->key_id_ = KeyId(s->public_key_);
  return s;
}

absl::StatusOr<std::unique_ptr<CapabilitySigner>> CapabilitySigner::FromPem(
    absl::string_view pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  EVP_PKEY* key =
      bio == nullptr ? nullptr
                     : PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (key == nullptr || EVP_PKEY_get_id(key) != EVP_PKEY_ED25519) {
    EVP_PKEY_free(key);
    return absl::InvalidArgumentError(
        "not an Ed25519 private key in PEM (make one with: openssl genpkey "
        "-algorithm ed25519)");
  }
  std::unique_ptr<CapabilitySigner> s(new CapabilitySigner());
  s->key_ = key;
  absl::StatusOr<std::string> pub = RawPublicKey(key);
  if (!pub.ok()) return pub.status();
  s->public_key_ = std::move(*pub);
  s->key_id_ = KeyId(s->public_key_);
  return s;
}

CapabilitySigner::~CapabilitySigner() { EVP_PKEY_free(AsKey(key_)); }

std::string CapabilitySigner::Sign(Capability cap) const {
  cap.set_key_id(key_id_);
  SignedCapability signed_cap;
  cap.SerializeToString(signed_cap.mutable_capability());
  const std::string& message = signed_cap.capability();
  std::string signature(kSignatureBytes, '\0');
  size_t len = signature.size();
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  const bool ok =
      ctx != nullptr &&
      EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, AsKey(key_)) == 1 &&
      EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(signature.data()),
                     &len,
                     reinterpret_cast<const unsigned char*>(message.data()),
                     message.size()) == 1;
  EVP_MD_CTX_free(ctx);
  // Signing with a valid key into a buffer of the right size cannot fail
  // short of memory exhaustion.
  CHECK(ok && len == kSignatureBytes) << "Ed25519 signing failed";
  signed_cap.set_signature(std::move(signature));
  return signed_cap.SerializeAsString();
}

absl::Status CapabilityVerifier::AddKey(absl::string_view public_key) {
  if (public_key.size() != kPublicKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "capability key of ", public_key.size(), " bytes (Ed25519: 32)"));
  }
  const std::string id = KeyId(public_key);
  absl::MutexLock l(&mu_);
  for (const Key& k : keys_) {
    if (k.id == id) return absl::OkStatus();
  }
  keys_.push_front({id, std::string(public_key)});
  while (keys_.size() > kMaxKeys) keys_.pop_back();
  return absl::OkStatus();
}

bool CapabilityVerifier::has_keys() const {
  absl::MutexLock l(&mu_);
  return !keys_.empty();
}

void CapabilityVerifier::SetRevoked(std::set<std::string> member_ids) {
  absl::MutexLock l(&mu_);
  revoked_ = std::move(member_ids);
}

int64_t CapabilityVerifier::signature_checks() const {
  absl::MutexLock l(&mu_);
  return signature_checks_;
}

absl::StatusOr<std::shared_ptr<const Capability>> CapabilityVerifier::Verify(
    absl::string_view wire, absl::Time now) const {
  SignedCapability signed_cap;
  if (wire.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "no capability (", kCapabilityMetadata,
        "): a shard of a coordinator's job serves only its members, each "
        "with the capability of its assignment"));
  }
  if (!signed_cap.ParseFromArray(wire.data(), static_cast<int>(wire.size())) ||
      signed_cap.signature().size() != kSignatureBytes) {
    return absl::PermissionDeniedError("malformed capability");
  }
  std::shared_ptr<const Capability> cap;
  {
    absl::MutexLock l(&mu_);
    auto it = verified_.find(signed_cap.signature());
    if (it != verified_.end() &&
        it->second.message == signed_cap.capability()) {
      cap = it->second.cap;
    }
  }
  if (cap == nullptr) {
    auto parsed = std::make_shared<Capability>();
    if (!parsed->ParseFromString(signed_cap.capability())) {
      return absl::PermissionDeniedError("malformed capability");
    }
    std::string public_key;
    {
      absl::MutexLock l(&mu_);
      for (const Key& k : keys_) {
        if (k.id == parsed->key_id()) public_key = k.public_key;
      }
      ++signature_checks_;
    }
    if (public_key.empty()) {
      return absl::UnavailableError(absl::StrCat(
          "capability signed by key ", parsed->key_id(),
          ", which this shard has not been given yet (the coordinator "
          "restarted with a new key; the shard hears of it on its next "
          "heartbeat)"));
    }
    if (!VerifySignature(public_key, signed_cap.capability(),
                         signed_cap.signature())) {
      return absl::PermissionDeniedError(
          "capability with a bad signature (not made by the coordinator)");
    }
    cap = std::move(parsed);
    absl::MutexLock l(&mu_);
    if (verified_.size() >= kMaxRemembered) verified_.clear();
    verified_.emplace(signed_cap.signature(),
                      Verified{signed_cap.capability(), cap});
  }
  const int64_t now_ms = absl::ToUnixMillis(now);
  const int64_t skew_ms = absl::ToInt64Milliseconds(kCapabilitySkew);
  if (now_ms + skew_ms < cap->issued_ms()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "capability issued ", cap->issued_ms() - now_ms,
        " ms in the future (clock skew beyond ",
        absl::FormatDuration(kCapabilitySkew), "?)"));
  }
  if (now_ms - skew_ms > cap->expires_ms()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "capability of member ", cap->member_id(), " expired ",
        now_ms - cap->expires_ms(), " ms ago"));
  }
  {
    absl::MutexLock l(&mu_);
    if (revoked_.count(cap->member_id()) > 0) {
      return absl::PermissionDeniedError(absl::StrCat(
          "member ", cap->member_id(), " is no longer in the job (its "
          "capability was revoked)"));
    }
  }
  return cap;
}

}  // namespace bertps

// SHA-256 digests (OpenSSL's EVP), for provenance: what a checkpoint records
// of the spec that wrote it.
// Thread-safety: pure functions.
#ifndef BERTPS_COMMON_DIGEST_H_
#define BERTPS_COMMON_DIGEST_H_

#include <string>

#include "absl/strings/string_view.h"

namespace bertps {

// The SHA-256 of `data` as 64 lowercase hex digits.
std::string Sha256Hex(absl::string_view data);

}  // namespace bertps

#endif  // BERTPS_COMMON_DIGEST_H_

#include "common/digest.h"

#include <openssl/evp.h>

#include "absl/strings/escaping.h"
#include "glog/logging.h"

namespace bertps {

std::string Sha256Hex(absl::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // EVP_Digest fails only without memory or a SHA-256 implementation.
  CHECK_EQ(EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(),
                      nullptr),
           1);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(md), len));
}

}  // namespace bertps

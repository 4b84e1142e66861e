// The token files of a process as they are read, checked and re-read
// (LiveCredentials, CredentialWatcher: common/security.h); shared by
// SecurityConfigFromFiles. Internal to the security library.
#ifndef BERTPS_COMMON_SECURITY_FILES_H_
#define BERTPS_COMMON_SECURITY_FILES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/security.h"

namespace bertps {
namespace security_internal {

// The file of flag --`flag` (at most 1 MiB); errors name the flag.
absl::StatusOr<std::string> ReadFlagFile(const char* flag,
                                         const std::string& path);
// --token_file: one token, no spaces, at most kMaxTokenBytes.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);
// --auth_tokens_file: ParseAuthTokens of the file; errors name it.
absl::StatusOr<std::vector<AcceptedToken>> ReadAuthTokensFile(
    const std::string& path);

}  // namespace security_internal
}  // namespace bertps

#endif  // BERTPS_COMMON_SECURITY_FILES_H_

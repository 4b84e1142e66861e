// The version of the bertps binaries: the release (VERSION at the top of the
// tree), the git commit they were built from (tools/workspace_status.sh,
// stamped at build time) and how they were compiled. InitProcess answers
// --version with it before the flags are parsed.
// Thread-safety: pure functions.
#ifndef BERTPS_COMMON_VERSION_H_
#define BERTPS_COMMON_VERSION_H_

#include <string>

namespace bertps {

// "0.9.0"
const char* Release();
// "1a2b3c4d5e6f", "1a2b3c4d5e6f-dirty" or "unknown".
const char* BuildCommit();
// "bertps_server 0.9.0 (commit 1a2b3c4d5e6f, optimised build)".
std::string VersionLine(const std::string& program);

}  // namespace bertps

#endif  // BERTPS_COMMON_VERSION_H_

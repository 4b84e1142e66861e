// Process start-up shared by every bertps binary: parses absl flags, starts
// glog, raises the soft descriptor limit to the hard one (logging "raised
// the descriptor limit from N to M"; common/descriptors.h). Call once at the
// top of main(); flags belong in *_main.cc only.
// Returns the positional arguments (argv[0] first).
#ifndef BERTPS_COMMON_INIT_H_
#define BERTPS_COMMON_INIT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace bertps {

std::vector<std::string> InitProcess(int argc, char** argv,
                                     const char* usage);

// `--address_file`: writes "HOST:PORT\n" to `path` once the daemon listens,
// atomically (a temporary file renamed over it), so a script that starts a
// daemon with --port 0 reads its address the moment the file appears and
// never a half-written one. An empty path writes nothing.
absl::Status WriteAddressFile(const std::string& path,
                              const std::string& address);

}  // namespace bertps

#endif  // BERTPS_COMMON_INIT_H_

// Process start-up shared by every bertps binary: parses absl flags and
// starts glog. Call once at the top of main(); flags belong in *_main.cc only.
// Returns the positional arguments (argv[0] first).
#ifndef BERTPS_COMMON_INIT_H_
#define BERTPS_COMMON_INIT_H_

#include <string>
#include <vector>

namespace bertps {

std::vector<std::string> InitProcess(int argc, char** argv,
                                     const char* usage);

}  // namespace bertps

#endif  // BERTPS_COMMON_INIT_H_

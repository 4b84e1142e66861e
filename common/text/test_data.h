// Test-only: where the repo's data/ directory (tools/get_data.sh) is.
#ifndef BERTPS_COMMON_TEXT_TEST_DATA_H_
#define BERTPS_COMMON_TEXT_TEST_DATA_H_

#include <string>

namespace bertps::text {

// $BERTPS_DATA_DIR, else found through the test's runfiles (this header is
// among them, a symlink into the workspace), else "data".
std::string DataDir();

// The WordNet 3.0 database the tests read: $BERTPS_WORDNET_DIR, else
// tools/get_data.sh's copy of Debian's wordnet-base (DataDir()/wordnet), so
// every machine tests against the same files.
std::string WordNetDir();

}  // namespace bertps::text

#endif  // BERTPS_COMMON_TEXT_TEST_DATA_H_

#include "common/version.h"

#include <string>

#include "gtest/gtest.h"

namespace bertps {
namespace {

TEST(Version, NamesTheReleaseAndTheCommit) {
  const std::string line = VersionLine("bertps_server");
  EXPECT_EQ(line.rfind("bertps_server 0.", 0), 0u) << line;
  EXPECT_NE(line.find("(commit "), std::string::npos) << line;
  EXPECT_NE(std::string(BuildCommit()), "") << line;
  EXPECT_EQ(line.find("Debug build (NDEBUG"), std::string::npos) << line;
}

}  // namespace
}  // namespace bertps

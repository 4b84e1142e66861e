#include "common/text/test_data.h"

#include <cstdlib>

namespace bertps::text {

std::string DataDir() {
  if (const char* d = std::getenv("BERTPS_DATA_DIR")) return d;
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || ws == nullptr) return "data";
  const std::string rel = "common/text/test_data.h";
  const std::string anchor = std::string(srcdir) + "/" + ws + "/" + rel;
  char* real = realpath(anchor.c_str(), nullptr);
  if (real == nullptr) return "data";
  std::string root(real);
  free(real);
  root.resize(root.size() - rel.size());
  return root + "data";
}

std::string WordNetDir() {
  if (const char* d = std::getenv("BERTPS_WORDNET_DIR")) return d;
  return DataDir() + "/wordnet";
}

}  // namespace bertps::text

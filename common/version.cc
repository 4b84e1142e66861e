#include "common/version.h"

#include "absl/strings/str_cat.h"
#include "common/build_info.h"

namespace bertps {

const char* Release() { return kBertpsRelease; }
const char* BuildCommit() { return kBertpsCommit; }

std::string VersionLine(const std::string& program) {
#if defined(__OPTIMIZE__) && defined(NDEBUG)
  constexpr char kBuild[] = "optimised build";
#elif defined(__OPTIMIZE__)
  constexpr char kBuild[] = "optimised build with assertions";
#else
  constexpr char kBuild[] = "debug build";
#endif
  return absl::StrCat(program, " ", Release(), " (commit ", BuildCommit(),
                      ", ", kBuild, ")");
}

}  // namespace bertps

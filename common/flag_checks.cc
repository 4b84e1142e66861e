#include "common/flag_checks.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace bertps {

FlagChecks& FlagChecks::Range(absl::string_view flag, int64_t value,
                              int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    errors_.push_back(absl::StrCat("--", flag, ": ", value, " is outside [",
                                   lo, ", ", hi, "]"));
  }
  return *this;
}

FlagChecks& FlagChecks::RealRange(absl::string_view flag, double value,
                                  double lo, double hi) {
  if (!std::isfinite(value) || value < lo || value > hi) {
    errors_.push_back(absl::StrCat("--", flag, ": ", value, " is outside [",
                                   lo, ", ", hi, "]"));
  }
  return *this;
}

FlagChecks& FlagChecks::Port(absl::string_view flag, int64_t value,
                             bool allow_off) {
  if (allow_off && value == -1) return *this;
  if (value < 0 || value > 65535) {
    errors_.push_back(absl::StrCat(
        "--", flag, ": ", value, " is not a port (0 to 65535, 0: any free port",
        allow_off ? ", -1: off)" : ")"));
  }
  return *this;
}

FlagChecks& FlagChecks::Require(bool ok, absl::string_view flag,
                                absl::string_view message) {
  if (!ok) errors_.push_back(absl::StrCat("--", flag, ": ", message));
  return *this;
}

FlagChecks& FlagChecks::Check(const absl::Status& status) {
  if (!status.ok()) errors_.emplace_back(status.message());
  return *this;
}

int FlagChecks::Fail() const {
  for (const std::string& e : errors_) {
    std::fprintf(stderr, "%s: %s\n", program_.c_str(), e.c_str());
  }
  return kBadFlagExitCode;
}

}  // namespace bertps

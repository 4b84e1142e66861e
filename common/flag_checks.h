// Range checks for the flags of the bertps binaries. Each *_main.cc states
// the allowed range of every numeric flag it reads, right after parsing:
//
//   bertps::FlagChecks checks("bertps_coordinator");
//   checks.Port("port", absl::GetFlag(FLAGS_port));
//   checks.Range("member_timeout_s", absl::GetFlag(FLAGS_member_timeout_s),
//                1, 86400);
//   if (!checks.ok()) return checks.Fail();  // exit status 2
//
// Relations between flags go through Check (a timeout's relations to the
// others: checks.Check(ValidateTimeouts(timeouts)), common/timeouts.h).
//
// A value out of range is refused with the flag's name, its value and the
// range ("--port: 99999 is outside [0, 65535]"), instead of being wrapped,
// clamped or waited on. Thread-safety: one thread (main).
#ifndef BERTPS_COMMON_FLAG_CHECKS_H_
#define BERTPS_COMMON_FLAG_CHECKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace bertps {

// The exit status of a process started with a bad flag.
inline constexpr int kBadFlagExitCode = 2;

class FlagChecks {
 public:
  explicit FlagChecks(absl::string_view program) : program_(program) {}

  // lo <= value <= hi.
  FlagChecks& Range(absl::string_view flag, int64_t value, int64_t lo,
                    int64_t hi);
  // Finite and lo <= value <= hi.
  FlagChecks& RealRange(absl::string_view flag, double value, double lo,
                        double hi);
  // A TCP port: 0 (any free port) to 65535; -1 (off) too when allow_off.
  FlagChecks& Port(absl::string_view flag, int64_t value,
                   bool allow_off = false);
  // Any condition, with its own message ("--flag: <message>").
  FlagChecks& Require(bool ok, absl::string_view flag,
                      absl::string_view message);
  // A check made elsewhere whose error names its flags itself (e.g.
  // common/timeouts.h ValidateTimeouts, "--a: ... --b ..."): its message as
  // it is, when not OK.
  FlagChecks& Check(const absl::Status& status);

  bool ok() const { return errors_.empty(); }
  const std::vector<std::string>& errors() const { return errors_; }
  // Prints every error on stderr ("program: --flag: ...") and returns
  // kBadFlagExitCode, for `return checks.Fail();` in main.
  int Fail() const;

 private:
  std::string program_;
  std::vector<std::string> errors_;
};

}  // namespace bertps

#endif  // BERTPS_COMMON_FLAG_CHECKS_H_

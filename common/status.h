// Status helpers shared by every bertps process.
//
// Debian's Abseil (20220623) has absl::Status and absl::StatusOr but not the
// propagation macros; these are the project's own, with the usual semantics:
//
//   RETURN_IF_ERROR(expr);            // returns expr's status if not ok
//   ASSIGN_OR_RETURN(lhs, expr);      // lhs = *expr, or returns its status
//
// Both evaluate `expr` exactly once. Thread-safety: none needed (macros only).
#ifndef BERTPS_COMMON_STATUS_H_
#define BERTPS_COMMON_STATUS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define BERTPS_STATUS_CONCAT_INNER_(a, b) a##b
#define BERTPS_STATUS_CONCAT_(a, b) BERTPS_STATUS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                                   \
  do {                                                          \
    ::absl::Status bertps_status_ = (expr);                     \
    if (!bertps_status_.ok()) return bertps_status_;            \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  BERTPS_ASSIGN_OR_RETURN_IMPL_(    \
      BERTPS_STATUS_CONCAT_(bertps_statusor_, __LINE__), lhs, expr)

#define BERTPS_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

namespace bertps {

// Returns `status` with `context: ` prepended to its message (same code).
// An ok status is returned unchanged.
inline absl::Status Annotate(const absl::Status& status,
                             absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(context, ": ", status.message()));
}

}  // namespace bertps

#endif  // BERTPS_COMMON_STATUS_H_

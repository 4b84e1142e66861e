// The audit trail of refused calls, one per process.
//
// Every place that refuses a caller for who it is or what it may do (the
// token check before any handler, a member credential that does not match,
// a call to a shard without the job's key or capability, a team's admin
// reaching another team's job) calls AuditRefusal with a short reason (a
// fixed word such as "unknown_token"), who called (what is known of it: the
// certificate's name, the token's name or a fingerprint of an unknown one,
// the member id, the peer address) and what was refused.
//
// - Each refusal is counted by reason: bertps_refused_calls_total{reason}
//   on every /metrics endpoint of the process (MetricsEndpoint registers the
//   audit trail's collector).
// - It is logged (glog WARNING) at most once a minute per caller and reason;
//   the next line that gets through says how many were left out meanwhile.
//   A flood of refusals costs a counter increment each, not a log line.
//
// Thread-safety: every function may be called from any thread.
#ifndef BERTPS_COMMON_AUDIT_H_
#define BERTPS_COMMON_AUDIT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace bertps {

// Reasons (the `reason` label). Callers may pass others of the same form.
inline constexpr char kRefusedNoToken[] = "no_token";
inline constexpr char kRefusedUnknownToken[] = "unknown_token";
inline constexpr char kRefusedRole[] = "role";
inline constexpr char kRefusedTeam[] = "team";
inline constexpr char kRefusedMemberCredential[] = "member_credential";
inline constexpr char kRefusedJobScope[] = "job_scope";
inline constexpr char kRefusedCapability[] = "capability";
inline constexpr char kRefusedRevoked[] = "revoked";

void AuditRefusal(absl::string_view reason, absl::string_view caller,
                  absl::string_view what);

// Refusals counted so far by reason (tests; the metric reads the same).
std::map<std::string, int64_t> AuditRefusalCounts();
// Log lines written so far (tests: the rate limit).
int64_t AuditLogLines();

// The collector of bertps_refused_calls_total (MetricsEndpoint registers it).
std::shared_ptr<prometheus::Collectable> AuditCollectable();

// Tests: how long one caller's lines for one reason are held back.
void SetAuditLogIntervalForTest(absl::Duration interval);

}  // namespace bertps

#endif  // BERTPS_COMMON_AUDIT_H_

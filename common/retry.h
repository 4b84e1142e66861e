// One retry policy for every loop that tries again (the member loops, the
// shards' clients, the peer and replica links): how long to wait after the
// first failure, how that grows, its ceiling, how many attempts and how long
// in all. Backoff keeps the state of one run of attempts; Retry runs one.
// Waits carry no jitter: bertps's tests order events with them, and the
// callers that many members share (heartbeats) spread themselves by the
// coordinator's interval.
// Thread-safety: RetryPolicy is a value; a Backoff belongs to one loop.
#ifndef BERTPS_COMMON_RETRY_H_
#define BERTPS_COMMON_RETRY_H_

#include <algorithm>
#include <atomic>
#include <functional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/monotonic_clock.h"

namespace bertps {

struct RetryPolicy {
  absl::Duration initial = absl::Milliseconds(100);  // first wait
  double multiplier = 2.0;                            // growth per failure
  absl::Duration max = absl::Seconds(2);              // ceiling of a wait
  int max_attempts = 0;                               // 0: no bound
  // Longest time from the first attempt to the last (infinite: no bound).
  absl::Duration deadline = absl::InfiniteDuration();
};

class Backoff {
 public:
  explicit Backoff(RetryPolicy policy) : policy_(policy) {}
  // The wait before the next attempt: initial, then multiplied each time
  // up to max.
  absl::Duration Next() {
    const absl::Duration wait = next_ <= absl::ZeroDuration()
                                    ? policy_.initial
                                    : next_;
    next_ = std::min(policy_.max, wait * policy_.multiplier);
    ++failures_;
    return std::min(wait, policy_.max);
  }
  // A success: the next failure waits `initial` again.
  void Reset() {
    next_ = absl::ZeroDuration();
    failures_ = 0;
  }
  int failures() const { return failures_; }
  const RetryPolicy& policy() const { return policy_; }

 private:
  const RetryPolicy policy_;
  absl::Duration next_ = absl::ZeroDuration();
  int failures_ = 0;
};

// Calls `attempt` until it returns OK or an error `retryable` rejects, the
// policy's attempts or deadline run out (the last error, annotated), or
// `cancel` is set (CANCELLED). `sleep` waits (tests pass a fake one).
inline absl::Status Retry(
    const RetryPolicy& policy, const std::function<absl::Status()>& attempt,
    const std::function<bool(const absl::Status&)>& retryable,
    const std::atomic<bool>* cancel = nullptr,
    const std::function<void(absl::Duration)>& sleep =
        [](absl::Duration d) { absl::SleepFor(d); },
    const std::function<absl::Time()>& now = [] { return MonotonicNow(); }) {
  Backoff backoff(policy);
  const absl::Time start = now();
  for (int n = 1;; ++n) {
    if (cancel != nullptr && cancel->load()) {
      return absl::CancelledError("retry cancelled");
    }
    absl::Status st = attempt();
    if (st.ok() || !retryable(st)) return st;
    if (policy.max_attempts > 0 && n >= policy.max_attempts) {
      return absl::Status(st.code(), absl::StrCat(st.message(), " (after ", n,
                                                  " attempts)"));
    }
    const absl::Duration wait = backoff.Next();
    if (now() + wait - start > policy.deadline) {
      return absl::Status(
          st.code(), absl::StrCat(st.message(), " (after ", n, " attempts in ",
                                  absl::FormatDuration(now() - start), ")"));
    }
    sleep(wait);
  }
}

}  // namespace bertps

#endif  // BERTPS_COMMON_RETRY_H_

// Graceful shutdown on SIGTERM / SIGINT for the daemons: BlockShutdownSignals
// must run in main() before any thread starts (it blocks SIGHUP as well, which
// CredentialWatcher alone takes); WaitForShutdownSignal then
// blocks one thread until a signal arrives (returns the signal number).
// Thread-safety: call each once.
#ifndef BERTPS_COMMON_SIGNALS_H_
#define BERTPS_COMMON_SIGNALS_H_

#include <atomic>

#include "absl/time/time.h"

namespace bertps {

void BlockShutdownSignals();
int WaitForShutdownSignal();
// Starts a detached thread that sets *flag when a shutdown signal arrives
// (for one-shot commands that stop at their next step).
void CancelOnShutdownSignal(std::atomic<bool>* flag);

// After the first shutdown signal, while a daemon hands its work off: a
// second signal, or `grace` passing, ends the process at once (exit status
// 1, with a line saying which). Starts a detached thread; call once, from
// the thread that took the first signal.
void ExitOnSecondSignalOr(absl::Duration grace);
// --drain_grace_s: how long a daemon may take to hand its work off after
// SIGTERM (keep it below Kubernetes' terminationGracePeriodSeconds).
absl::Duration DrainGraceFromFlags();

}  // namespace bertps

#endif  // BERTPS_COMMON_SIGNALS_H_

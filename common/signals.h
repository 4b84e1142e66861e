// Graceful shutdown on SIGTERM / SIGINT for the daemons: BlockShutdownSignals
// must run in main() before any thread starts (it blocks SIGHUP as well, which
// CredentialWatcher alone takes); WaitForShutdownSignal then
// blocks one thread until a signal arrives (returns the signal number).
// Thread-safety: call each once.
#ifndef BERTPS_COMMON_SIGNALS_H_
#define BERTPS_COMMON_SIGNALS_H_

#include <atomic>

namespace bertps {

void BlockShutdownSignals();
int WaitForShutdownSignal();
// Starts a detached thread that sets *flag when a shutdown signal arrives
// (for one-shot commands that stop at their next step).
void CancelOnShutdownSignal(std::atomic<bool>* flag);

}  // namespace bertps

#endif  // BERTPS_COMMON_SIGNALS_H_

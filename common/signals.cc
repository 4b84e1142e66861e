#include "common/signals.h"

#include <pthread.h>
#include <signal.h>

#include <thread>

namespace bertps {
namespace {

sigset_t ShutdownSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

void BlockShutdownSignals() {
  sigset_t set = ShutdownSet();
  // SIGHUP too: it asks for the token files to be re-read
  // (CredentialWatcher, whose thread alone waits for it), never stops.
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForShutdownSignal() {
  sigset_t set = ShutdownSet();
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

void CancelOnShutdownSignal(std::atomic<bool>* flag) {
  std::thread([flag] {
    WaitForShutdownSignal();
    flag->store(true);
  }).detach();
}

}  // namespace bertps

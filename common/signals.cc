#include "common/signals.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "absl/flags/flag.h"
#include "glog/logging.h"

ABSL_FLAG(int, drain_grace_s, 30,
          "After SIGTERM, how long this daemon may take to hand its work "
          "off (finish its step, give its slots or shard back, leave) before "
          "it exits anyway; a second SIGTERM exits at once. Keep it below "
          "Kubernetes' terminationGracePeriodSeconds.");

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

void ExitOnSecondSignalOr(absl::Duration grace) {
  std::thread([grace] {
    sigset_t set = ShutdownSet();
    const timespec ts = absl::ToTimespec(grace);
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig > 0) {
      LOG(ERROR) << "signal " << sig << " again while handing work off: "
                 << "exiting now";
    } else {
      LOG(ERROR) << "the drain grace (" << absl::FormatDuration(grace)
                 << ") ended before the work was handed off: exiting now";
    }
    google::FlushLogFiles(google::GLOG_INFO);
    std::_Exit(1);
  }).detach();
}

absl::Duration DrainGraceFromFlags() {
  return absl::Seconds(std::max(1, absl::GetFlag(FLAGS_drain_grace_s)));
}

void CancelOnShutdownSignal(std::atomic<bool>* flag) {
  std::thread([flag] {
    WaitForShutdownSignal();
    flag->store(true);
  }).detach();
}

}  // namespace bertps

#include "common/ps/stall_watch.h"

#include <pthread.h>

#include <vector>

#include "absl/time/clock.h"

namespace bertps {
namespace ps {

StallWatch::StallWatch(absl::Duration poll) : poll_(poll) {}

StallWatch::~StallWatch() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (watcher_.joinable()) watcher_.join();
}

void StallWatch::Watch(grpc::ClientContext* ctx, absl::Duration idle) {
  if (idle <= absl::ZeroDuration()) return;
  absl::MutexLock l(&mu_);
  calls_[ctx] = Entry{idle, absl::Now(), false};
  if (!started_) {
    started_ = true;
    watcher_ = std::thread([this] { Loop(); });
  }
}

void StallWatch::Progress(grpc::ClientContext* ctx) {
  absl::MutexLock l(&mu_);
  auto it = calls_.find(ctx);
  if (it != calls_.end()) it->second.last = absl::Now();
}

bool StallWatch::Unwatch(grpc::ClientContext* ctx) {
  absl::MutexLock l(&mu_);
  // Not while the watcher may be cancelling it.
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !cancelling_;
  };
  mu_.Await(absl::Condition(&idle));
  auto it = calls_.find(ctx);
  if (it == calls_.end()) return false;
  const bool stalled = it->second.stalled;
  calls_.erase(it);
  return stalled;
}

int64_t StallWatch::stalls() const {
  absl::MutexLock l(&mu_);
  return stalls_;
}

void StallWatch::Loop() {
  pthread_setname_np(pthread_self(), "ps stall watch");
  absl::MutexLock l(&mu_);
  while (!stop_) {
    auto stopping = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_; };
    mu_.AwaitWithTimeout(absl::Condition(&stopping), poll_);
    const absl::Time now = absl::Now();
    std::vector<grpc::ClientContext*> cancel;
    for (auto& [ctx, e] : calls_) {
      if (e.stalled || now - e.last <= e.idle) continue;
      e.stalled = true;
      ++stalls_;
      cancel.push_back(ctx);
    }
    if (cancel.empty()) continue;
    // Cancelled without the lock (a cancellation may run the call's own
    // callbacks), the contexts kept alive by Unwatch waiting meanwhile.
    cancelling_ = true;
    mu_.Unlock();
    for (grpc::ClientContext* ctx : cancel) ctx->TryCancel();
    mu_.Lock();
    cancelling_ = false;
  }
}

}  // namespace ps
}  // namespace bertps

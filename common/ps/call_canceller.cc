#include "common/ps/call_canceller.h"

namespace bertps {
namespace ps {

CallCanceller::CallCanceller(const std::atomic<bool>* flag,
                             absl::Duration poll)
    : flag_(flag), poll_(poll) {
  if (flag_ != nullptr) watcher_ = std::thread([this] { Loop(); });
}

CallCanceller::~CallCanceller() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (watcher_.joinable()) watcher_.join();
}

void CallCanceller::Add(grpc::ClientContext* ctx) {
  absl::MutexLock l(&mu_);
  live_.insert(ctx);
  if (cancelled_) ctx->TryCancel();  // takes effect when the call starts
}

void CallCanceller::Remove(grpc::ClientContext* ctx) {
  absl::MutexLock l(&mu_);
  live_.erase(ctx);
}

bool CallCanceller::cancelled() const {
  absl::MutexLock l(&mu_);
  return cancelled_;
}

void CallCanceller::Loop() {
  absl::MutexLock l(&mu_);
  while (!stop_ && !cancelled_) {
    auto stopping = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_; };
    mu_.AwaitWithTimeout(absl::Condition(&stopping), poll_);
    if (stop_ || !flag_->load()) continue;
    cancelled_ = true;
    for (grpc::ClientContext* ctx : live_) ctx->TryCancel();
  }
}

}  // namespace ps
}  // namespace bertps

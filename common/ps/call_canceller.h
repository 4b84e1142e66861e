// CallCanceller: cancels a client's calls in flight once a flag is set (a
// member's part told to stop: e.g. to go on at a replaced shard's new
// address while a call waits on a shard that stopped answering). Each call
// registers its ClientContext while it lives; one watcher thread polls the
// flag. A call registered after the flag was seen is cancelled at once.
// Thread-safety: thread-safe.
#ifndef BERTPS_COMMON_PS_CALL_CANCELLER_H_
#define BERTPS_COMMON_PS_CALL_CANCELLER_H_

#include <atomic>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"

namespace bertps {
namespace ps {

class CallCanceller {
 public:
  // `flag` null: calls are never cancelled (and no thread starts).
  explicit CallCanceller(const std::atomic<bool>* flag,
                         absl::Duration poll = absl::Milliseconds(100));
  ~CallCanceller();
  CallCanceller(const CallCanceller&) = delete;
  CallCanceller& operator=(const CallCanceller&) = delete;

  void Add(grpc::ClientContext* ctx) ABSL_LOCKS_EXCLUDED(mu_);
  // Before `ctx` is destroyed.
  void Remove(grpc::ClientContext* ctx) ABSL_LOCKS_EXCLUDED(mu_);
  bool cancelled() const ABSL_LOCKS_EXCLUDED(mu_);

  // Registers a context for a scope.
  class Scope {
   public:
    Scope(CallCanceller* c, grpc::ClientContext* ctx) : c_(c), ctx_(ctx) {
      c_->Add(ctx_);
    }
    ~Scope() { c_->Remove(ctx_); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    CallCanceller* const c_;
    grpc::ClientContext* const ctx_;
  };

 private:
  void Loop();
  const std::atomic<bool>* const flag_;
  const absl::Duration poll_;
  mutable absl::Mutex mu_;
  std::set<grpc::ClientContext*> live_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watcher_;
};

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_COMMON_PS_CALL_CANCELLER_H_

// StallWatch: cancels a client's calls that stopped making progress. A
// stream that goes silent in the middle of a transfer (its connection
// half-open after the peer dropped it, or its HTTP/2 stream window never
// reopened) would otherwise hold its caller until the call's deadline,
// minutes, and with it every worker of a BSP step. A watched call reports
// progress at each message; one watcher thread cancels any watched call
// silent for longer than its limit, and says so when the call ends.
//
//   StallWatch w;
//   w.Watch(&ctx, absl::Seconds(30));  // from when the call must flow
//   while (reader->Read(&m)) w.Progress(&ctx);
//   const bool stalled = w.Unwatch(&ctx);  // before ctx is destroyed
//
// The thread starts at the first Watch and polls 4 times a second.
// Thread-safety: thread-safe.
#ifndef BERTPS_COMMON_PS_STALL_WATCH_H_
#define BERTPS_COMMON_PS_STALL_WATCH_H_

#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"

namespace bertps {
namespace ps {

class StallWatch {
 public:
  explicit StallWatch(absl::Duration poll = absl::Milliseconds(250));
  ~StallWatch();
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

  // Watches `ctx` from now: cancelled once no Progress came for `idle`
  // (<= 0: not watched).
  void Watch(grpc::ClientContext* ctx, absl::Duration idle)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Progress(grpc::ClientContext* ctx) ABSL_LOCKS_EXCLUDED(mu_);
  // Stops watching `ctx`; whether it was cancelled for a stall.
  bool Unwatch(grpc::ClientContext* ctx) ABSL_LOCKS_EXCLUDED(mu_);
  // Calls cancelled for a stall so far.
  int64_t stalls() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    absl::Duration idle;
    absl::Time last;
    bool stalled = false;
  };
  void Loop();

  const absl::Duration poll_;
  mutable absl::Mutex mu_;
  std::map<grpc::ClientContext*, Entry> calls_ ABSL_GUARDED_BY(mu_);
  int64_t stalls_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelling_ ABSL_GUARDED_BY(mu_) = false;  // contexts in use unlocked
  std::thread watcher_;  // started under mu_ at the first Watch
};

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_COMMON_PS_STALL_WATCH_H_

// GrpcReplicaLink: a primary's link to its backups over gRPC (their
// Replicate RPC), and the bringing up to date of a backup that joins a
// running job (re-replication, docs/ps.md "Replicas"): a snapshot of the
// primary's state sent while the job goes on (InstallSnapshot), then the
// steps applied since, in order, then it acknowledges like any backup.
// Thread-safety: thread-safe.
#ifndef BERTPS_SERVER_PS_REPLICA_LINK_H_
#define BERTPS_SERVER_PS_REPLICA_LINK_H_

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "grpcpp/client_context.h"
#include "proto/ps.grpc.pb.h"
#include "server/ps/peer_scope.h"
#include "server/ps/shard.h"

namespace bertps {
namespace ps {

// The most a joining backup's steps may queue while its snapshot travels
// (bytes of gradient): past it the join fails and the primary reports the
// backup dropped (the coordinator may try again later).
constexpr int64_t kJoinQueueBytes = int64_t{1} << 30;
// The join thread sends the queued steps until this few are left, or for
// at most this long; the primary's next step sends the rest itself (it
// waits for them: a queue that the steps fill faster than the thread
// drains it still ends).
constexpr size_t kJoinInlineSteps = 4;
constexpr absl::Duration kJoinDrainFor = absl::Seconds(2);

class GrpcReplicaLink : public ReplicaLink {
 public:
  explicit GrpcReplicaLink(SecurityConfig security = SecurityConfig());
  ~GrpcReplicaLink() override;
  // The backups of the installed primary. `live` acknowledge every step:
  // kept when known (live or joined), else taken live as they are (a job's
  // start, where every replica starts from the same state). `joining` are
  // brought up to date from `core` first, each on a thread of its own.
  // Any other backup or join is dropped (a join in progress is cancelled).
  void SetBackups(std::vector<std::string> live,
                  std::vector<std::string> joining = {},
                  std::shared_ptr<ShardCore> core = nullptr);
  // Cancels every join and waits for their threads (the core is being
  // uninstalled); live backups are forgotten.
  void Reset();
  bool Active() const override;
  int LiveBackups() const override;
  absl::Status Replicate(const ReplicaStep& step, const float* grad,
                         absl::Time deadline) override;
  // The addresses of the backups dropped since the last call (why is
  // logged), joins that failed among them.
  std::vector<std::string> TakeDropped();
  // The joining backups that caught up since the last call.
  std::vector<std::string> TakeJoined();
  // Returns once a backup was dropped or a joiner caught up (not yet taken),
  // Poke() was called since the last return, or after `timeout`: its daemon
  // tells the coordinator at once.
  void WaitForNews(absl::Duration timeout);
  void Poke() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    poked_ = true;
  }
  // What its calls name (the installed core's job and keys).
  void SetScope(PeerScope scope) ABSL_LOCKS_EXCLUDED(scope_mu_) {
    absl::MutexLock l(&scope_mu_);
    scope_ = std::move(scope);
  }

 private:
  struct Backup {
    std::string address;
    std::shared_ptr<ParameterServer::Stub> stub;
  };
  struct QueuedStep {
    ReplicaStep step;
    std::vector<float> grad;
  };
  struct Joiner {
    Backup backup;
    std::atomic<bool> cancel{false};
    absl::Mutex ctx_mu;
    grpc::ClientContext* ctx ABSL_GUARDED_BY(ctx_mu) = nullptr;
    std::thread thread;
    // Guarded by the link's mu_: the snapshot was taken, so every step
    // from then on is queued here until the joiner is live.
    bool queuing = false;
    bool overflow = false;
    // The join thread sent most of the queue: the primary's next step sends
    // the rest (under its update lock, so no step comes meanwhile) and the
    // joiner is live from then on.
    bool handoff = false;
    std::deque<QueuedStep> queue;
    int64_t queued_bytes = 0;
  };
  // One attempt; `j` (optional) can cancel it.
  absl::Status SendTo(const Backup& b, const ReplicaStep& step,
                      const float* grad, absl::Time deadline, Joiner* j);
  // Tries again while UNAVAILABLE (a step applied already is a duplicate).
  absl::Status SendWithRetries(const Backup& b, const ReplicaStep& step,
                               const float* grad, absl::Time deadline,
                               Joiner* j);
  absl::Status SendSnapshot(Joiner& j, const ShardCore::JoinSnapshot& snap);
  // A joiner's next queued step (the queue is not empty), and its sending.
  static QueuedStep PopLocked(Joiner& j);
  absl::Status SendQueued(Joiner& j, const QueuedStep& q, absl::Time deadline);
  // The join thread: snapshot, queued steps, then live.
  void RunJoin(std::shared_ptr<Joiner> j, std::shared_ptr<ShardCore> core);
  absl::Status Join(const std::shared_ptr<Joiner>& j, ShardCore& core);
  // Stops a join: cancels its call in flight.
  static void Cancel(Joiner& j);
  // Joins the threads of joins that ended (not from a join thread).
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A joiner handed off: sends its queue (the current step last) and makes
  // it live, or drops it. From Replicate().
  void FinishJoin(const std::shared_ptr<Joiner>& j, absl::Time deadline);
  // Ends a join (its thread joined later, by ReapLocked).
  void EndJoinLocked(const std::shared_ptr<Joiner>& j, bool live)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  PeerScope Scope() const ABSL_LOCKS_EXCLUDED(scope_mu_) {
    absl::MutexLock l(&scope_mu_);
    return scope_;
  }

  const SecurityConfig security_;
  mutable absl::Mutex scope_mu_;
  PeerScope scope_ ABSL_GUARDED_BY(scope_mu_);
  mutable absl::Mutex mu_;
  std::vector<Backup> live_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Joiner>> joiners_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Joiner>> ended_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> dropped_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> joined_ ABSL_GUARDED_BY(mu_);
  bool poked_ ABSL_GUARDED_BY(mu_) = false;  // Poke(), not yet waited
};

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_SERVER_PS_REPLICA_LINK_H_

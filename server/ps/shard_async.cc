// ShardCore: the waiting calls without a thread per call. Each waits on the
// shard's waitlist for the condition its blocking form waits for, then runs
// that form, which then finds its condition true (or, past the deadline,
// words its error exactly as the blocking form does).
#include <memory>
#include <utility>

#include "server/ps/shard.h"

namespace bertps {
namespace ps {

void ShardCore::WhenReady(std::function<bool()> ready, absl::Time deadline,
                          std::function<void(absl::Status)> then) {
  if (ready()) {
    then(absl::OkStatus());  // on the caller's thread
    return;
  }
  // A layout change (a primary replaced) answers the call at once: its
  // worker goes on against the new layout.
  const int64_t since = relayouts();
  auto ready_or_moved = [this, since, ready = std::move(ready)] {
    return relayouts() != since || ready();
  };
  auto then_or_moved = [this, since, ready_or_moved,
                        then = std::move(then)](bool) {
    absl::Status moved = Relayout(since);
    then(moved.ok() ? absl::OkStatus() : moved);
  };
  waits_->Add(std::move(ready_or_moved), deadline, std::move(then_or_moved));
}

void ShardCore::AcquireSnapshotAsync(
    int worker, int64_t min_version, int64_t step, absl::Time deadline,
    Done<std::shared_ptr<const Snapshot>> done) {
  deadline = std::min(deadline, absl::Now() + options_.wait_timeout);
  auto ready = [this, min_version, step] {
    absl::MutexLock l(&mu_);
    return SnapshotReadyLocked(min_version, step);
  };
  auto finish = [this, worker, min_version, step, done = std::move(done)](absl::Status moved) {
    if (!moved.ok()) return done(moved);
    done(AcquireSnapshot(worker, min_version, step, absl::InfinitePast()));
  };
  WhenReady(std::move(ready), deadline, std::move(finish));
}

void ShardCore::AnnounceAsync(const AnnounceRequest& request,
                              absl::Time deadline,
                              Done<AnnounceResponse> done) {
  if (absl::Status st = RecordAnnounce(request); !st.ok()) {
    done(st);
    return;
  }
  deadline = std::min(deadline, absl::Now() + options_.wait_timeout);
  const int64_t step = request.step();
  auto ready = [this, step] {
    absl::MutexLock l(&mu_);
    return AnnouncesCompleteLocked(step);
  };
  auto finish = [this, step, done = std::move(done)](absl::Status moved) {
    if (!moved.ok()) return done(moved);
    done(AnnounceTotals(step, absl::InfinitePast()));
  };
  WhenReady(std::move(ready), deadline, std::move(finish));
}

void ShardCore::BeginPushAsync(const PushHeader& header,
                               Done<std::unique_ptr<PushSession>> done) {
  const int64_t step = header.step();
  auto ready = [this, step] {
    absl::MutexLock l(&mu_);
    return PushMayBeginLocked(step);
  };
  auto finish = [this, header, done = std::move(done)](absl::Status moved) {
    if (!moved.ok()) return done(moved);
    done(BeginPushUntil(header, absl::InfinitePast()));
  };
  WhenReady(std::move(ready), absl::Now() + options_.wait_timeout,
            std::move(finish));
}

void ShardCore::FinishPushAsync(std::unique_ptr<PushSession> session,
                                absl::Time deadline, Done<PushResponse> done) {
  deadline = std::min(deadline, absl::Now() + options_.wait_timeout);
  const int w = session->header.worker();
  const int64_t step = session->header.step();
  const bool duplicate = session->duplicate;
  // ASP/SSP: a push past the next checkpoint cut is held until the cut's
  // checkpoint is written (FinishPush's wait, done here without a thread).
  auto ready = [this, w, step, duplicate] {
    if (mode() == BSP || duplicate) return true;
    absl::MutexLock l(&mu_);
    return !CheckAlive().ok() || step <= last_step_[w] ||
           !JobPlan::HeldByCut(job_plan().Ticket(w, step), next_cut_);
  };
  // The session moves into the function posted (a std::function must be
  // copyable, so it is held by a shared_ptr).
  auto held = std::make_shared<std::unique_ptr<PushSession>>(std::move(session));
  auto finish = [this, held, deadline,
                 done = std::move(done)](absl::Status moved) {
    if (!moved.ok()) return done(moved);
    finish_thread_->Post([this, held, deadline, done] {
      // At the deadline FinishPush's own wait ends at once and words the
      // error.
      done(FinishPush(std::move(*held), deadline));
    });
  };
  WhenReady(std::move(ready), deadline, std::move(finish));
}

void ShardCore::WaitSnapshotAsync(std::shared_ptr<const Snapshot> snap,
                                  int count, absl::Time deadline,
                                  std::function<void(absl::Status)> done) {
  deadline = std::min(deadline, absl::Now() + options_.wait_timeout);
  auto ready = [snap, count] {
    return count < 0 ? snap->FirstReady() : snap->SlicesReady(count);
  };
  auto finish = [snap, count, done = std::move(done)](absl::Status moved) {
    if (!moved.ok()) return done(moved);
    done(count < 0 ? snap->WaitFirst(absl::InfinitePast())
                   : snap->WaitSlices(count, absl::InfinitePast()));
  };
  WhenReady(std::move(ready), deadline, std::move(finish));
}

}  // namespace ps
}  // namespace bertps

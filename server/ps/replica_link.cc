#include "server/ps/replica_link.h"

#include <algorithm>
#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/ps/wire.h"
#include "common/retry.h"
#include "common/status.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"

namespace bertps {
namespace ps {
namespace {

// The longest a primary waits for one backup's acknowledgement.
constexpr absl::Duration kReplicateTimeout = absl::Seconds(10);

// A snapshot's transfer: this much, plus its bytes at 20 MB/s.
constexpr absl::Duration kSnapshotTimeout = absl::Seconds(30);

// A step to a backup: 3 tries, 200 then 400 ms apart, within the step's
// deadline: a backup's connection that drops for a moment keeps it, one
// that stays down is dropped before the primary's next step waits long.
RetryPolicy StepRetry(absl::Duration deadline) {
  RetryPolicy p;
  p.initial = absl::Milliseconds(200);
  p.multiplier = 2;
  p.max = absl::Milliseconds(400);
  p.max_attempts = 3;
  p.deadline = deadline;
  return p;
}

// A join's snapshot: 3 tries, 400 then 800 ms apart (a snapshot is large
// and its backup is starting: longer pauses than a step's), within the
// transfer's deadline.
RetryPolicy SnapshotRetry(absl::Duration deadline) {
  RetryPolicy p;
  p.initial = absl::Milliseconds(400);
  p.multiplier = 2;
  p.max = absl::Milliseconds(800);
  p.max_attempts = 3;
  p.deadline = deadline;
  return p;
}

}  // namespace

GrpcReplicaLink::GrpcReplicaLink(SecurityConfig security)
    : security_(std::move(security)) {}

GrpcReplicaLink::~GrpcReplicaLink() { Reset(); }

void GrpcReplicaLink::SetBackups(std::vector<std::string> live,
                                 std::vector<std::string> joining,
                                 std::shared_ptr<ShardCore> core) {
  std::vector<std::shared_ptr<Joiner>> cancelled;
  {
    absl::MutexLock l(&mu_);
    ReapLocked();
    auto live_of = [&](const std::string& a) -> const Backup* {
      for (const Backup& b : live_) {
        if (b.address == a) return &b;
      }
      return nullptr;
    };
    auto joiner_of = [&](const std::string& a) -> std::shared_ptr<Joiner> {
      for (const auto& j : joiners_) {
        if (j->backup.address == a) return j;
      }
      return nullptr;
    };
    std::vector<Backup> next_live;
    std::vector<std::shared_ptr<Joiner>> next_joiners;
    auto keep_joiner = [&](std::shared_ptr<Joiner> j) {
      if (std::find(next_joiners.begin(), next_joiners.end(), j) ==
          next_joiners.end()) {
        next_joiners.push_back(std::move(j));
      }
    };
    for (std::string& a : live) {
      if (const Backup* b = live_of(a)) {
        next_live.push_back(*b);
      } else if (std::shared_ptr<Joiner> j = joiner_of(a)) {
        keep_joiner(std::move(j));  // live once caught up
      } else {
        Backup b;
        b.stub = ParameterServer::NewStub(
            MakeChannel(a, security_, ClientChannelArguments()));
        b.address = std::move(a);
        next_live.push_back(std::move(b));
      }
    }
    for (std::string& a : joining) {
      if (const Backup* b = live_of(a)) {
        next_live.push_back(*b);  // caught up already
      } else if (std::shared_ptr<Joiner> j = joiner_of(a)) {
        keep_joiner(std::move(j));
      } else if (core == nullptr) {
        LOG(WARNING) << "backup " << a << " cannot join: no shard installed";
      } else {
        auto j = std::make_shared<Joiner>();
        j->backup.stub = ParameterServer::NewStub(
            MakeChannel(a, security_, ClientChannelArguments()));
        j->backup.address = std::move(a);
        j->thread = std::thread(&GrpcReplicaLink::RunJoin, this, j, core);
        next_joiners.push_back(std::move(j));
      }
    }
    for (const auto& j : joiners_) {
      if (std::find(next_joiners.begin(), next_joiners.end(), j) ==
          next_joiners.end()) {
        j->cancel = true;
        cancelled.push_back(j);
      }
    }
    live_ = std::move(next_live);
    joiners_ = std::move(next_joiners);
  }
  for (const auto& j : cancelled) {
    Cancel(*j);
    if (j->thread.joinable()) j->thread.join();
  }
}

void GrpcReplicaLink::Reset() {
  std::vector<std::shared_ptr<Joiner>> all;
  {
    absl::MutexLock l(&mu_);
    ReapLocked();
    all.swap(joiners_);
    for (const auto& j : all) j->cancel = true;
    live_.clear();
  }
  for (const auto& j : all) {
    Cancel(*j);
    if (j->thread.joinable()) j->thread.join();
  }
}

void GrpcReplicaLink::ReapLocked() {
  for (const auto& j : ended_) {
    if (j->thread.joinable()) j->thread.join();
  }
  ended_.clear();
}

void GrpcReplicaLink::Cancel(Joiner& j) {
  absl::MutexLock l(&j.ctx_mu);
  j.cancel = true;
  if (j.ctx != nullptr) j.ctx->TryCancel();
}

bool GrpcReplicaLink::Active() const {
  absl::MutexLock l(&mu_);
  if (!live_.empty()) return true;
  for (const auto& j : joiners_) {
    if (j->queuing) return true;
  }
  return false;
}

int GrpcReplicaLink::LiveBackups() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(live_.size());
}

std::vector<std::string> GrpcReplicaLink::TakeDropped() {
  absl::MutexLock l(&mu_);
  std::vector<std::string> out;
  out.swap(dropped_);
  return out;
}

void GrpcReplicaLink::WaitForNews(absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  auto news = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !dropped_.empty() || !joined_.empty() || poked_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&news), timeout);
  poked_ = false;
}

std::vector<std::string> GrpcReplicaLink::TakeJoined() {
  absl::MutexLock l(&mu_);
  std::vector<std::string> out;
  out.swap(joined_);
  return out;
}

absl::Status GrpcReplicaLink::SendTo(const Backup& b, const ReplicaStep& step,
                                     const float* grad, absl::Time deadline,
                                     Joiner* j) {
  grpc::ClientContext ctx;
  // A backup that does not answer in time (stopped, or its host gone
  // quiet) is dropped rather than waited for: the primary holds its update
  // lock meanwhile.
  ctx.set_deadline(absl::ToChronoTime(
      std::min(deadline, absl::Now() + kReplicateTimeout)));
  ctx.AddMetadata(kIncarnationMetadata, absl::StrCat(step.incarnation()));
  Scope().AddTo(&ctx);
  if (j != nullptr) {
    absl::MutexLock l(&j->ctx_mu);
    if (j->cancel) return absl::CancelledError("join cancelled");
    j->ctx = &ctx;
  }
  ReplicateResponse resp;
  std::unique_ptr<grpc::ClientWriter<ReplicateRequest>> w =
      b.stub->Replicate(&ctx, &resp);
  ReplicateRequest msg;
  *msg.mutable_step() = step;
  bool ok = w->Write(msg);
  const char* bytes = reinterpret_cast<const char*>(grad);
  const int64_t total =
      step.grad_elements() * static_cast<int64_t>(sizeof(float));
  for (int64_t at = 0; ok && at < total; at += kBatchBytes) {
    msg.set_grad(bytes + at, std::min<int64_t>(kBatchBytes, total - at));
    ok = w->Write(msg);
  }
  w->WritesDone();
  absl::Status st = FromGrpcStatus(w->Finish());
  if (j != nullptr) {
    absl::MutexLock l(&j->ctx_mu);
    j->ctx = nullptr;
  }
  return st;
}

absl::Status GrpcReplicaLink::SendWithRetries(const Backup& b,
                                              const ReplicaStep& step,
                                              const float* grad,
                                              absl::Time deadline, Joiner* j) {
  // A backup briefly unreachable is tried again (a step it applied already
  // is a duplicate); one that stays so is dropped.
  return Retry(
      StepRetry(deadline - absl::Now()),
      [&]() -> absl::Status {
        if (j != nullptr && j->cancel) {
          return absl::CancelledError("join cancelled");
        }
        return SendTo(b, step, grad, deadline, j);
      },
      [&](const absl::Status& st) {
        return st.code() == absl::StatusCode::kUnavailable &&
               absl::Now() < deadline;
      });
}

absl::Status GrpcReplicaLink::Replicate(const ReplicaStep& step,
                                        const float* grad,
                                        absl::Time deadline) {
  std::vector<Backup> backups;
  std::vector<std::shared_ptr<Joiner>> handed_off;
  {
    absl::MutexLock l(&mu_);
    backups = live_;
    // Joining backups get the step later, in order, from their queue.
    const int64_t n = step.grad_elements();
    const int64_t bytes = n * static_cast<int64_t>(sizeof(float));
    for (const auto& j : joiners_) {
      if (!j->queuing || j->overflow) continue;
      if (j->queued_bytes + bytes > kJoinQueueBytes) {
        j->overflow = true;
        j->queue.clear();
        j->queued_bytes = 0;
        continue;
      }
      QueuedStep q;
      q.step = step;
      if (n > 0) q.grad.assign(grad, grad + n);
      j->queue.push_back(std::move(q));
      j->queued_bytes += bytes;
      if (j->handoff) handed_off.push_back(j);
    }
  }
  // Joiners whose thread sent most of their queue: the rest, this step
  // last, now (this primary's next step waits for it).
  for (const auto& j : handed_off) FinishJoin(j, deadline);
  // To every live backup at once (R = 3 waits for one transfer, not two).
  std::vector<absl::Status> results(backups.size());
  {
    std::vector<std::future<absl::Status>> others;
    for (size_t i = 1; i < backups.size(); ++i) {
      others.push_back(std::async(std::launch::async, [&, i] {
        return SendWithRetries(backups[i], step, grad, deadline, nullptr);
      }));
    }
    if (!backups.empty()) {
      results[0] = SendWithRetries(backups[0], step, grad, deadline, nullptr);
    }
    for (size_t i = 1; i < backups.size(); ++i) results[i] = others[i - 1].get();
  }
  for (size_t i = 0; i < backups.size(); ++i) {
    const Backup& b = backups[i];
    const absl::Status& st = results[i];
    if (st.ok()) continue;
    if (st.code() == absl::StatusCode::kAborted) {
      // A newer term or another install: this primary must stop.
      return Annotate(st, absl::StrCat("backup at ", b.address));
    }
    LOG(WARNING) << "dropping backup " << b.address << " at step "
                 << step.version() << ": " << st;
    absl::MutexLock l(&mu_);
    for (auto it = live_.begin(); it != live_.end(); ++it) {
      if (it->address == b.address) {
        live_.erase(it);
        break;
      }
    }
    dropped_.push_back(b.address);
  }
  return absl::OkStatus();
}

absl::Status GrpcReplicaLink::SendSnapshot(
    Joiner& j, const ShardCore::JoinSnapshot& snap) {
  const int64_t total =
      static_cast<int64_t>(snap.data.size() * sizeof(float));
  const absl::Time deadline =
      absl::Now() + kSnapshotTimeout + absl::Seconds(total / 20e6);
  auto attempt = [&]() -> absl::Status {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    ctx.AddMetadata(kIncarnationMetadata,
                    absl::StrCat(snap.header.incarnation()));
    Scope().AddTo(&ctx);
    {
      absl::MutexLock l(&j.ctx_mu);
      if (j.cancel) return absl::CancelledError("join cancelled");
      j.ctx = &ctx;
    }
    InstallSnapshotResponse resp;
    std::unique_ptr<grpc::ClientWriter<SnapshotChunk>> w =
        j.backup.stub->InstallSnapshot(&ctx, &resp);
    SnapshotChunk msg;
    *msg.mutable_header() = snap.header;
    bool ok = w->Write(msg);
    const char* bytes = reinterpret_cast<const char*>(snap.data.data());
    for (int64_t at = 0; ok && at < total; at += kBatchBytes) {
      msg.set_data(bytes + at, std::min<int64_t>(kBatchBytes, total - at));
      ok = w->Write(msg);
    }
    w->WritesDone();
    absl::Status st = FromGrpcStatus(w->Finish());
    {
      absl::MutexLock l(&j.ctx_mu);
      j.ctx = nullptr;
    }
    return st;
  };
  // A backup briefly unreachable gets the snapshot again, within its
  // deadline.
  return Retry(SnapshotRetry(deadline - absl::Now()), attempt,
               [&](const absl::Status& st) {
                 return st.code() == absl::StatusCode::kUnavailable &&
                        absl::Now() < deadline;
               });
}

absl::Status GrpcReplicaLink::Join(const std::shared_ptr<Joiner>& jp,
                                   ShardCore& core) {
  Joiner& j = *jp;
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(ShardCore::JoinSnapshot snap,
                   core.SnapshotForJoin([&](int64_t) {
                     absl::MutexLock l(&mu_);
                     j.queuing = true;
                   }));
  const int64_t version = snap.header.version();
  const double mb = snap.data.size() * sizeof(float) / 1e6;
  const absl::Time copied = absl::Now();
  RETURN_IF_ERROR(SendSnapshot(j, snap));
  snap.data = HugeBuffer();  // the copy is not needed any more
  LOG(INFO) << "backup " << j.backup.address << " installed the snapshot of "
            << "version " << version << " (" << mb << " MB in "
            << absl::ToDoubleMilliseconds(absl::Now() - start) << " ms: "
            << absl::ToDoubleMilliseconds(copied - start) << " ms to copy, "
            << absl::ToDoubleMilliseconds(absl::Now() - copied)
            << " ms to send and install); sending the steps since";
  const absl::Time drain_start = absl::Now();
  for (int64_t sent = 0;; ++sent) {
    QueuedStep next;
    {
      absl::MutexLock l(&mu_);
      if (j.cancel) return absl::CancelledError("join cancelled");
      if (j.overflow) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "more than ", kJoinQueueBytes >> 20, " MiB of steps queued while "
            "the snapshot of version ", version, " travelled"));
      }
      if (j.queue.empty()) {
        // Caught up, with no step in between: the next one reaches it as a
        // live backup (Replicate queues under this lock).
        LOG(INFO) << "backup " << j.backup.address << " caught up (" << sent
                  << " steps after the snapshot of version " << version
                  << ", " << absl::ToDoubleMilliseconds(absl::Now() - start)
                  << " ms in all); it acknowledges every step now";
        EndJoinLocked(jp, /*live=*/true);
        return absl::OkStatus();
      }
      if (j.queue.size() <= kJoinInlineSteps ||
          absl::Now() - drain_start > kJoinDrainFor) {
        // The rest goes with the primary's next step (none can come in
        // between: Replicate queues under this lock).
        j.handoff = true;
        LOG(INFO) << "backup " << j.backup.address << ": " << sent
                  << " steps sent after the snapshot of version " << version
                  << " (" << absl::ToDoubleMilliseconds(absl::Now() - start)
                  << " ms in all); " << j.queue.size()
                  << " queued go with the primary's next step";
        return absl::OkStatus();
      }
      next = PopLocked(j);
    }
    RETURN_IF_ERROR(SendQueued(j, next, absl::Now()));
  }
}

void GrpcReplicaLink::RunJoin(std::shared_ptr<Joiner> j,
                              std::shared_ptr<ShardCore> core) {
  const absl::Status st = Join(j, *core);
  core.reset();
  if (st.ok()) return;  // handed off to the primary's next step
  absl::MutexLock l(&mu_);
  if (std::find(joiners_.begin(), joiners_.end(), j) == joiners_.end()) {
    return;  // cancelled: its canceller joins this thread
  }
  LOG(WARNING) << "backup " << j->backup.address << " could not join: " << st;
  EndJoinLocked(j, /*live=*/false);
}

void GrpcReplicaLink::EndJoinLocked(const std::shared_ptr<Joiner>& j,
                                    bool live) {
  auto it = std::find(joiners_.begin(), joiners_.end(), j);
  if (it == joiners_.end()) return;
  joiners_.erase(it);
  ended_.push_back(j);
  j->queuing = false;
  j->queue.clear();
  if (live) {
    live_.push_back(j->backup);
    joined_.push_back(j->backup.address);
  } else {
    dropped_.push_back(j->backup.address);
  }
}

GrpcReplicaLink::QueuedStep GrpcReplicaLink::PopLocked(Joiner& j) {
  QueuedStep next = std::move(j.queue.front());
  j.queue.pop_front();
  j.queued_bytes -=
      next.step.grad_elements() * static_cast<int64_t>(sizeof(float));
  return next;
}

absl::Status GrpcReplicaLink::SendQueued(Joiner& j, const QueuedStep& q,
                                         absl::Time deadline) {
  return SendWithRetries(j.backup, q.step,
                         q.grad.empty() ? nullptr : q.grad.data(),
                         std::max(deadline, absl::Now() + kReplicateTimeout),
                         &j);
}

void GrpcReplicaLink::FinishJoin(const std::shared_ptr<Joiner>& j,
                                 absl::Time deadline) {
  size_t sent = 0;
  for (;;) {
    QueuedStep next;
    {
      absl::MutexLock l(&mu_);
      if (j->cancel) return;  // removed by SetBackups or Reset
      if (j->queue.empty()) {
        // Caught up: this step and every later one it acknowledges before
        // the primary publishes.
        EndJoinLocked(j, /*live=*/true);
        LOG(INFO) << "backup " << j->backup.address << " caught up (its "
                  << sent << " last queued steps sent with the primary's "
                  << "step); it acknowledges every step now";
        return;
      }
      next = PopLocked(*j);
    }
    absl::Status st = SendQueued(*j, next, deadline);
    ++sent;
    if (!st.ok()) {
      absl::MutexLock l(&mu_);
      if (j->cancel) return;
      LOG(WARNING) << "backup " << j->backup.address
                   << " could not join: " << st;
      EndJoinLocked(j, /*live=*/false);
      return;
    }
  }
}

}  // namespace ps
}  // namespace bertps

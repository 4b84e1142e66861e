// Test helpers of the shard tests: a small BERT config, a PeerLink that
// delivers straight to in-process cores (with their answers, as the gRPC
// link does), and a push of a constant gradient.
#ifndef BERTPS_SERVER_PS_SHARD_TEST_UTIL_H_
#define BERTPS_SERVER_PS_SHARD_TEST_UTIL_H_

#include <algorithm>
#include <atomic>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/cluster/plan_for.h"
#include "server/ps/shard.h"

namespace bertps {
namespace ps {

inline BertConfig Small() {
  BertConfig c;
  c.vocab_size = 30;
  c.hidden_size = 8;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.intermediate_size = 16;
  c.max_position_embeddings = 8;
  return c;
}

class LocalLink : public PeerLink {
 public:
  void Add(ShardCore* c) {
    absl::MutexLock l(&mu_);
    cores_.push_back(c);
  }
  void Set(int shard, ShardCore* c) {
    absl::MutexLock l(&mu_);
    if (static_cast<int>(cores_.size()) <= shard) cores_.resize(shard + 1);
    cores_[shard] = c;
  }
  absl::Status Send(int to, const ExchangeRequest& r, absl::Time,
                    const std::atomic<bool>*) override {
    return Core(to)->ReceiveExchange(r);
  }
  absl::Status SendAll(const std::vector<int>& to, const ExchangeRequest& r,
                       absl::Time, const std::atomic<bool>*,
                       std::vector<ExchangeResponse>* replies) override {
    if (replies != nullptr) replies->assign(to.size(), ExchangeResponse());
    for (size_t i = 0; i < to.size(); ++i) {
      absl::Status st = Core(to[i])->ReceiveExchange(
          r, replies != nullptr ? &(*replies)[i] : nullptr);
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }

 private:
  ShardCore* Core(int shard) {
    absl::MutexLock l(&mu_);
    return cores_[shard];
  }
  absl::Mutex mu_;
  std::vector<ShardCore*> cores_ ABSL_GUARDED_BY(mu_);
};

// In-process ReplicaLink: applies each step on the backup at once (after
// the gate, when one is set). Errors other than ABORTED drop the backup,
// as the gRPC link does.
class LocalReplicas : public ReplicaLink {
 public:
  void Add(ShardCore* backup) {
    absl::MutexLock l(&mu_);
    backups_.push_back(backup);
  }
  void SetGate(absl::Notification* gate) {
    absl::MutexLock l(&mu_);
    gate_ = gate;
  }
  // The primary "dies" at its first step of `kind`: a STAGE is delivered
  // first, a COMMIT is not; then the call hangs until `release`, and
  // returns ABORTED (as a deposed primary's would).
  void DieAt(ReplicaStep::Kind kind, absl::Notification* reached,
             absl::Notification* release) {
    absl::MutexLock l(&mu_);
    die_kind_ = kind;
    reached_ = reached;
    release_ = release;
  }
  bool Active() const override {
    absl::MutexLock l(&mu_);
    return !backups_.empty();
  }
  int LiveBackups() const override {
    absl::MutexLock l(&mu_);
    return static_cast<int>(backups_.size());
  }
  absl::Status Replicate(const ReplicaStep& step, const float* grad,
                         absl::Time deadline) override {
    std::vector<ShardCore*> backups;
    absl::Notification* gate;
    absl::Notification* release = nullptr;
    absl::Notification* reached = nullptr;
    {
      absl::MutexLock l(&mu_);
      backups = backups_;
      gate = gate_;
      if (release_ != nullptr && step.kind() == die_kind_) {
        std::swap(release, release_);
        std::swap(reached, reached_);
      }
    }
    if (gate != nullptr) gate->WaitForNotification();
    if (release != nullptr) {
      if (step.kind() == ReplicaStep::STAGE) {
        for (ShardCore* b : backups) {
          EXPECT_TRUE(b->ApplyReplicated(step, grad, deadline).ok());
        }
      }
      reached->Notify();
      release->WaitForNotification();
      return absl::AbortedError("this primary was replaced");
    }
    for (ShardCore* b : backups) {
      absl::StatusOr<ReplicateResponse> r =
          b->ApplyReplicated(step, grad, deadline);
      if (r.ok()) continue;
      if (r.status().code() == absl::StatusCode::kAborted) return r.status();
      absl::MutexLock l(&mu_);
      backups_.erase(std::find(backups_.begin(), backups_.end(), b));
      dropped_.push_back(std::string(r.status().message()));
    }
    return absl::OkStatus();
  }
  std::vector<std::string> dropped() const {
    absl::MutexLock l(&mu_);
    return dropped_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<ShardCore*> backups_ ABSL_GUARDED_BY(mu_);
  absl::Notification* gate_ ABSL_GUARDED_BY(mu_) = nullptr;
  ReplicaStep::Kind die_kind_ ABSL_GUARDED_BY(mu_) = ReplicaStep::FULL;
  absl::Notification* reached_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Notification* release_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<std::string> dropped_ ABSL_GUARDED_BY(mu_);
};

// The replica tests' shard: a small model, clipping on (the norm matters).
inline ShardOptions TestShardOptions(ConsistencyMode mode, int workers, int shards, int shard,
                  optim::OptimizerKind kind = optim::OptimizerKind::kAdamW) {
  ShardOptions o;
  o.config = Small();
  o.num_shards = shards;
  o.shard = shard;
  o.optimizer.kind = kind;
  o.optimizer.learning_rate = 0.01;
  o.job_plan = PlanFor(mode, workers, o.optimizer);
  o.optimizer.clip_norm = 0.5;  // clipping: the norm matters
  o.wait_timeout = absl::Seconds(5);
  return o;
}

// A gradient that differs per element, worker and step.
inline float GradAt(int worker, int64_t step, int64_t i) {
  return 0.01f * static_cast<float>((i * 7 + worker * 13 + step * 5) % 23) -
         0.1f;
}

inline absl::StatusOr<PushResponse> PushTestGrad(ShardCore* core, int worker, int64_t step) {
  PushHeader h;
  h.set_worker(worker);
  h.set_step(step);
  h.set_examples(4);
  h.set_first_example((step * 2 + worker) * 4);
  double sq = 0;
  std::vector<std::vector<float>> grads;
  for (int i : core->local_slices()) {
    const SliceSpec& sl = core->plan().slices()[i];
    std::vector<float> g(sl.size());
    for (int64_t k = 0; k < sl.size(); ++k) {
      g[k] = GradAt(worker, step, sl.shard_offset + k);
      sq += double(g[k]) * g[k];
    }
    grads.push_back(std::move(g));
  }
  h.set_grad_sq_sum(sq);
  auto s = core->BeginPush(h);
  if (!s.ok()) return s.status();
  size_t j = 0;
  for (int i : core->local_slices()) {
    const SliceSpec& sl = core->plan().slices()[i];
    TensorChunk c;
    c.set_name(sl.name);
    c.set_dtype(F32);
    c.set_offset(sl.begin);
    c.set_data(grads[j].data(), 4 * grads[j].size());
    ++j;
    absl::Status st = core->AddChunk(s->get(), c);
    if (!st.ok()) return st;
  }
  return core->FinishPush(std::move(*s), absl::Now() + absl::Seconds(5));
}

// A primary's step runs after the push that completes it is answered: wait
// until version v is published (or the error that stops it).
inline absl::Status WaitVersion(ShardCore* core, int64_t v) {
  return core->AcquireSnapshot(0, v, 0, absl::Now() + absl::Seconds(5))
      .status();
}

inline std::string ReadTestFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The whole state of a core at `version`, as its checkpoint file's bytes
// (parameters, optimizer state) and its ledger.
inline std::string StateOf(ShardCore* core, int64_t version, const std::string& tag) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/replica-", tag,
                                       "-", core->options().shard);
  auto r = core->Checkpoint(dir, version, absl::Now() + absl::Seconds(5));
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return "";
  return absl::StrCat(ReadTestFile(r->file()), "|", r->example_ledger());
}

// Pushes a full gradient of constant value to one core.
inline absl::StatusOr<PushResponse> PushConst(ShardCore* core, int worker,
                                              int64_t step, float value,
                                              double grad_sq = -1) {
  PushHeader h;
  h.set_worker(worker);
  h.set_step(step);
  const int64_t n = core->shard_size();
  h.set_grad_sq_sum(grad_sq >= 0 ? grad_sq : double(value) * value * n);
  absl::StatusOr<std::unique_ptr<ShardCore::PushSession>> s =
      core->BeginPush(h);
  if (!s.ok()) return s.status();
  for (int i : core->local_slices()) {
    const SliceSpec& sl = core->plan().slices()[i];
    std::vector<float> g(sl.size(), value);
    TensorChunk c;
    c.set_name(sl.name);
    c.set_dtype(F32);
    c.set_offset(sl.begin);
    c.set_data(g.data(), 4 * g.size());
    absl::Status st = core->AddChunk(s->get(), c);
    if (!st.ok()) return st;
  }
  return core->FinishPush(std::move(*s), absl::Now() + absl::Seconds(5));
}

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_SERVER_PS_SHARD_TEST_UTIL_H_

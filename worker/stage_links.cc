// A pipeline stage's links to the other stages of its replica
// (worker/pipeline_stage.h): the inbox of received activations and
// gradients, sends, probes and aborts.
#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grpc_status.h"
#include "common/retry.h"
#include "common/security.h"
#include "common/status.h"
#include "grpcpp/grpcpp.h"
#include "worker/pipeline_stage.h"
#include "worker/stage_router.h"
#include "worker/stage_wire.h"

namespace bertps {

using stage_internal::KindName;
using stage_internal::kMaxChunk;
using stage_internal::kMaxMessageBytes;
using stage_internal::kMinChunk;

namespace {
// A send to a peer between two starts of its part: every 100 ms (a stage
// starts again within a few hundred ms; sends are cheap to refuse) until
// peer_restart_wait, after which the peer counts as lost.
RetryPolicy PeerRestartRetry(absl::Duration peer_restart_wait) {
  RetryPolicy p;
  p.initial = absl::Milliseconds(100);
  p.multiplier = 1;
  p.max = absl::Milliseconds(100);
  p.deadline = peer_restart_wait;
  return p;
}
}  // namespace

void StageInbox::Put(Key key, std::vector<float> values) {
  absl::MutexLock l(&mu_);
  items_[key] = std::move(values);
}

absl::StatusOr<std::vector<float>> StageInbox::Take(
    Key key, absl::Time deadline, absl::Duration probe_every,
    const std::function<absl::Status()>& probe) {
  for (;;) {
    const absl::Time slice = std::min(deadline, absl::Now() + probe_every);
    {
      absl::MutexLock l(&mu_);
      auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return !aborted_.ok() || items_.count(key) > 0;
      };
      mu_.AwaitWithDeadline(absl::Condition(&ready), slice);
      if (!aborted_.ok()) return aborted_;
      auto it = items_.find(key);
      if (it != items_.end()) {
        std::vector<float> v = std::move(it->second);
        items_.erase(it);
        return v;
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError("no message before the deadline");
    }
    if (!probe) continue;
    absl::Status st = probe();
    if (st.ok()) continue;
    // It may have come while the probe ran.
    absl::MutexLock l(&mu_);
    auto it = items_.find(key);
    if (it == items_.end()) return st;
    std::vector<float> v = std::move(it->second);
    items_.erase(it);
    return v;
  }
}

void StageInbox::Abort(absl::Status status) {
  absl::MutexLock l(&mu_);
  if (aborted_.ok()) aborted_ = std::move(status);
}

void StageInbox::Forget(int64_t step) {
  absl::MutexLock l(&mu_);
  while (!items_.empty() && std::get<1>(items_.begin()->first) < step) {
    items_.erase(items_.begin());
  }
}

std::string PipelineStage::PeersKey() {
  absl::MutexLock l(&peers_mu_);
  return absl::StrJoin(peers_, ",");
}

void PipelineStage::SetPeers(std::vector<std::string> peers) {
  absl::MutexLock l(&peers_mu_);
  peers_ = std::move(peers);
  stubs_.clear();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  for (const std::string& a : peers_) {
    stubs_.push_back(
        StageService::NewStub(MakeChannel(a, options_.ps.security, args)));
  }
}

void PipelineStage::AddCapability(grpc::ClientContext* ctx) const {
  if (options_.ps.capability == nullptr) return;
  std::string wire = options_.ps.capability->Get();
  if (!wire.empty()) ctx->AddMetadata(kCapabilityMetadata, std::move(wire));
}

StageService::Stub* PipelineStage::Peer(int stage) {
  absl::MutexLock l(&peers_mu_);
  if (stage < 0 || stage >= static_cast<int>(stubs_.size())) return nullptr;
  return stubs_[stage].get();
}

void PipelineStage::Kill() {
  killed_ = true;
  if (routed_ != nullptr) {
    options_.router->Remove(options_.replica, options_.stage, routed_);
  }
  inbox_.Abort(absl::AbortedError("this stage was killed"));
  if (server_) server_->Shutdown(std::chrono::system_clock::now());
}

absl::Status PipelineStage::SendTensor(int to, StageTensorKind kind,
                                       int64_t step, int micro_batch,
                                       const float* data, int64_t n) {
  // A peer between two starts of its part (refused, or running with other
  // stage addresses) is tried again for peer_restart_wait.
  return Retry(
      PeerRestartRetry(options_.peer_restart_wait),
      [&] { return SendTensorOnce(to, kind, step, micro_batch, data, n); },
      [&](const absl::Status& st) {
        return st.code() == absl::StatusCode::kUnavailable && !killed_ &&
               (options_.cancel == nullptr || !options_.cancel->load());
      });
}

absl::Status PipelineStage::SendTensorOnce(int to, StageTensorKind kind,
                                           int64_t step, int micro_batch,
                                           const float* data, int64_t n) {
  StageService::Stub* stub = Peer(to);
  if (stub == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("no address for pipeline stage ", to));
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.send_timeout));
  AddCapability(&ctx);
  StageSendResponse resp;
  auto w = stub->Send(&ctx, &resp);
  StageChunk msg;
  StageTensorHeader* h = msg.mutable_header();
  h->set_replica(options_.replica);
  h->set_from_stage(options_.stage);
  h->set_step(step);
  h->set_micro_batch(micro_batch);
  h->set_kind(kind);
  h->set_elements(n);
  h->set_peers(PeersKey());
  bool ok = w->Write(msg);
  const int64_t chunk =
      std::clamp<int64_t>(options_.chunk_bytes, kMinChunk, kMaxChunk);
  const char* bytes = reinterpret_cast<const char*>(data);
  const int64_t total = n * static_cast<int64_t>(sizeof(float));
  for (int64_t off = 0; ok && off < total; off += chunk) {
    msg.set_data(bytes + off, std::min(chunk, total - off));
    ok = w->Write(msg);
  }
  w->WritesDone();
  absl::Status st = FromGrpcStatus(w->Finish());
  if (!st.ok()) {
    std::string addr;
    {
      absl::MutexLock l(&peers_mu_);
      addr = peers_[to];
    }
    return Annotate(st, absl::StrCat("sending ", KindName(kind),
                                     " of step ", step, " micro-batch ",
                                     micro_batch, " to pipeline stage ", to,
                                     " (", addr, ")"));
  }
  bytes_sent_ += total;
  return absl::OkStatus();
}

absl::Status PipelineStage::Probe(int stage, int64_t* peer_step) {
  StageService::Stub* stub = Peer(stage);
  if (stub == nullptr) return absl::OkStatus();
  StagePingRequest req;  // for that stage of this replica
  req.set_replica(options_.replica);
  req.set_stage(stage);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.probe_timeout));
  AddCapability(&ctx);
  StagePingResponse resp;
  absl::Status st =
      FromGrpcStatus(stub->Ping(&ctx, req, &resp));
  if (st.ok()) {
    if (peer_step != nullptr) *peer_step = resp.step();
    return st;
  }
  std::string addr;
  {
    absl::MutexLock l(&peers_mu_);
    addr = peers_[stage];
  }
  return absl::UnavailableError(
      absl::StrCat("pipeline stage ", stage, " of replica ", options_.replica,
                   " (", addr, ") is not answering: ", st.ToString()));
}

absl::StatusOr<std::vector<float>> PipelineStage::Receive(
    int from, StageTensorKind kind, int64_t step, int micro_batch,
    int64_t n) {
  // A peer that does not answer is lost once it stayed so for
  // peer_restart_wait (it may be starting again); a cancelled part ends.
  // A peer past `step` sent all it had of it (a send ends once the
  // receiver holds it): what is awaited will not come -- the step was done
  // by an earlier start of this stage's part (the replica's stages started
  // again apart, one after the shards' step moved on): start again at the
  // shards' step.
  absl::Time silent_since = absl::InfiniteFuture();
  auto probe = [this, from, step, &silent_since]() -> absl::Status {
    if (options_.cancel != nullptr && options_.cancel->load()) {
      return absl::CancelledError("pipeline stage cancelled");
    }
    int64_t peer_step = -1;
    absl::Status st = Probe(from, &peer_step);
    if (st.ok() && peer_step > step) {
      return absl::AbortedError(absl::StrCat(
          "pipeline stage ", from, " of replica ", options_.replica,
          " is at step ", peer_step, ", past step ", step,
          " (done by an earlier start): starting again at the shards' step"));
    }
    const absl::Time now = absl::Now();
    if (st.ok()) {
      silent_since = absl::InfiniteFuture();
    } else if (silent_since == absl::InfiniteFuture()) {
      silent_since = now;
    }
    return st.ok() || now - silent_since < options_.peer_restart_wait
               ? absl::OkStatus()
               : st;
  };
  absl::StatusOr<std::vector<float>> v = inbox_.Take(
      {kind, step, micro_batch}, absl::Now() + options_.recv_timeout,
      options_.probe_interval, probe);
  if (!v.ok()) {
    return Annotate(v.status(),
                    absl::StrCat("waiting for ", KindName(kind), " of step ",
                                 step, " micro-batch ", micro_batch,
                                 " from pipeline stage ", from));
  }
  if (static_cast<int64_t>(v->size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline stage ", from, " sent ", v->size(), " ", KindName(kind),
        " values for micro-batch ", micro_batch, ", expected ", n));
  }
  return v;
}

absl::Status PipelineStage::NameDeadPeer(absl::Status st) {
  if (st.ok()) return st;
  for (int s = 0; s < options_.plan.stages; ++s) {
    if (s == options_.stage) continue;
    absl::Status p = Probe(s);
    if (!p.ok()) {
      return absl::UnavailableError(
          absl::StrCat(p.message(), " (and then: ", st.message(), ")"));
    }
  }
  return st;
}

void PipelineStage::AbortPeers(const absl::Status& why) {
  for (int s = 0; s < options_.plan.stages; ++s) {
    if (s == options_.stage) continue;
    StageService::Stub* stub = Peer(s);
    if (stub == nullptr) continue;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    AddCapability(&ctx);
    StageAbortRequest req;
    req.set_replica(options_.replica);
    req.set_from_stage(options_.stage);
    req.set_reason(std::string(why.message()));
    req.set_peers(PeersKey());
    req.set_to_stage(s);
    StageAbortResponse resp;
    stub->Abort(&ctx, req, &resp);  // best effort
  }
}

}  // namespace bertps

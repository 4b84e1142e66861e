#include "server/ps/service.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status.h"
#include "common/process_cpu.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "common/ps/chunk_codec.h"

namespace bertps {
namespace ps {
namespace {

absl::Time DeadlineOf(const grpc::ServerContext* ctx) {
  return absl::FromChrono(ctx->deadline());
}

}  // namespace

ShardService::ShardService(std::shared_ptr<ShardCore> core)
    : core_(std::move(core)) {}

absl::StatusOr<std::shared_ptr<ShardCore>> ShardService::Current(
    const grpc::ServerContextBase* ctx) const {
  std::shared_ptr<ShardCore> c = core();
  if (!c) {
    return absl::UnavailableError(
        "this parameter-server shard has no job assigned");
  }
  // A request naming a job incarnation is served only by that install (a
  // worker of a job's earlier start must not reach its restart).
  const auto& md = ctx->client_metadata();
  auto it = md.find(kIncarnationMetadata);
  if (it != md.end()) {
    int64_t inc = 0;
    if (!absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()),
                          &inc)) {
      return absl::InvalidArgumentError(
          absl::StrCat(kIncarnationMetadata, " metadata is not a number"));
    }
    if (inc != c->options().incarnation) {
      return absl::AbortedError(absl::StrCat(
          "request of job incarnation ", inc, "; this shard serves incarnation ",
          c->options().incarnation, " (the job was started again)"));
    }
  }
  // A caller that still counts on a replaced primary goes on against the
  // new layout (its pushes to that primary may be lost: it pushes again).
  it = md.find(kLayoutMetadata);
  if (it != md.end()) {
    int64_t layout = 0;
    if (!absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()),
                          &layout)) {
      return absl::InvalidArgumentError(
          absl::StrCat(kLayoutMetadata, " metadata is not a number"));
    }
    if (layout < c->shard_layout()) {
      return absl::AbortedError(absl::StrCat(
          "request of shard layout ", layout, "; this shard knows layout ",
          c->shard_layout(), " (a primary was replaced by its backup)"));
    }
  }
  return c;
}

void ShardService::Install(std::shared_ptr<ShardCore> core) {
  std::shared_ptr<ShardCore> old;
  {
    absl::MutexLock l(&mu_);
    old = std::move(core_);
    core_ = std::move(core);
  }
  // Calls still waiting on the previous install fail now rather than at
  // their deadline.
  if (old) {
    old->Abort(absl::AbortedError(
        "the job left this shard or was installed again"));
  }
}

#define BERTPS_CORE_OR_RETURN(var)                              \
  absl::StatusOr<std::shared_ptr<ShardCore>> var##_or = Current(ctx); \
  if (!var##_or.ok()) return ToGrpcStatus(var##_or.status());   \
  ShardCore* var = var##_or->get()

grpc::Status ShardService::Describe(grpc::ServerContext* ctx,
                                    const DescribeRequest*,
                                    DescribeResponse* resp) {
  BERTPS_CORE_OR_RETURN(shard);
  *resp = shard->Describe();
  return grpc::Status::OK;
}

grpc::Status ShardService::Exchange(grpc::ServerContext* ctx,
                                    const ExchangeRequest* req,
                                    ExchangeResponse* resp) {
  BERTPS_CORE_OR_RETURN(shard);
  return ToGrpcStatus(shard->ReceiveExchange(*req, resp));
}

grpc::Status ShardService::Checkpoint(grpc::ServerContext* ctx,
                                      const CheckpointRequest* req,
                                      CheckpointResponse* resp) {
  BERTPS_CORE_OR_RETURN(shard);
  if (req->dir().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "checkpoint needs a directory");
  }
  absl::StatusOr<CheckpointResponse> r =
      shard->Checkpoint(req->dir(), req->version(), DeadlineOf(ctx));
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *r;
  return grpc::Status::OK;
}

grpc::Status ShardService::Restore(grpc::ServerContext* ctx,
                                   const RestoreRequest* req,
                                   RestoreResponse* resp) {
  BERTPS_CORE_OR_RETURN(shard);
  absl::StatusOr<int64_t> v = shard->Restore(req->manifest());
  if (!v.ok()) return ToGrpcStatus(v.status());
  resp->set_version(*v);
  return grpc::Status::OK;
}

grpc::Status ShardService::Stats(grpc::ServerContext* ctx, const StatsRequest*,
                                 StatsResponse* resp) {
  BERTPS_CORE_OR_RETURN(shard);
  *resp = shard->Stats();
  // The process's, not the core's: the transport's threads are most of it.
  resp->set_process_cpu_seconds(ProcessCpuSeconds());
  return grpc::Status::OK;
}

grpc::Status ShardService::Replicate(
    grpc::ServerContext* ctx, grpc::ServerReader<ReplicateRequest>* reader,
    ReplicateResponse* resp) {
  BERTPS_CORE_OR_RETURN(shard);
  ReplicateRequest msg;
  if (!reader->Read(&msg) || !msg.has_step()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "replicate: the first message must be the step");
  }
  const ReplicaStep step = msg.step();
  const int64_t n = shard->shard_size();
  if (step.kind() == ReplicaStep::COMMIT || step.grad_elements() != n) {
    // No gradient (a commit), or the wrong size: refused before anything
    // is received.
    if (step.grad_elements() == 0 && reader->Read(&msg)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "replicate: a commit carries no gradient");
    }
    absl::StatusOr<ReplicateResponse> r =
        shard->ApplyReplicated(step, nullptr, DeadlineOf(ctx));
    if (!r.ok()) return ToGrpcStatus(r.status());
    *resp = *r;
    return grpc::Status::OK;
  }
  absl::MutexLock l(&replicate_mu_);
  replicate_grad_.resize(n);
  char* const out = reinterpret_cast<char*>(replicate_grad_.data());
  const int64_t want = n * static_cast<int64_t>(sizeof(float));
  int64_t got = 0;
  while (reader->Read(&msg)) {
    if (msg.msg_case() != ReplicateRequest::kGrad) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "replicate: only gradient bytes follow the step");
    }
    const std::string& b = msg.grad();
    if (got + static_cast<int64_t>(b.size()) > want) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("replicate: more than the ", want,
                       " gradient bytes of step ", step.version()));
    }
    std::memcpy(out + got, b.data(), b.size());
    got += static_cast<int64_t>(b.size());
  }
  if (got != want) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("replicate: step ", step.version(), " came with ", got,
                     " of its ", want, " gradient bytes"));
  }
  absl::StatusOr<ReplicateResponse> r =
      shard->ApplyReplicated(step, replicate_grad_.data(), DeadlineOf(ctx));
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *r;
  return grpc::Status::OK;
}

grpc::Status ShardService::InstallSnapshot(
    grpc::ServerContext* ctx, grpc::ServerReader<SnapshotChunk>* reader,
    InstallSnapshotResponse* resp) {
  BERTPS_CORE_OR_RETURN(shard);
  SnapshotChunk msg;
  if (!reader->Read(&msg) || !msg.has_header()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "install snapshot: the first message must be the "
                        "header");
  }
  const SnapshotHeader header = msg.header();
  // Another install, wrong sizes or clocks: refused before anything is
  // received.
  if (absl::Status st = shard->CheckSnapshotHeader(header); !st.ok()) {
    return ToGrpcStatus(st);
  }
  HugeBuffer data(header.params_elements() + header.state_elements());
  char* const out = reinterpret_cast<char*>(data.data());
  const int64_t want = static_cast<int64_t>(data.size() * sizeof(float));
  int64_t got = 0;
  while (reader->Read(&msg)) {
    if (msg.msg_case() != SnapshotChunk::kData) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "install snapshot: only data follows the header");
    }
    const std::string& b = msg.data();
    if (got + static_cast<int64_t>(b.size()) > want) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("install snapshot: more than the ", want,
                       " bytes of version ", header.version()));
    }
    std::memcpy(out + got, b.data(), b.size());
    got += static_cast<int64_t>(b.size());
  }
  if (got != want) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("install snapshot: version ", header.version(),
                     " came with ", got, " of its ", want, " bytes"));
  }
  CrashPoint("snapshot", header.version(), shard->options().shard);
  absl::StatusOr<int64_t> v = shard->InstallSnapshot(header, data.data());
  if (!v.ok()) return ToGrpcStatus(v.status());
  resp->set_version(*v);
  return grpc::Status::OK;
}

GrpcPeerLink::GrpcPeerLink(std::vector<std::string> addresses,
                           SecurityConfig security)
    : security_(std::move(security)) {
  SetAddresses(std::move(addresses));
}

void GrpcPeerLink::SetAddresses(std::vector<std::string> addresses) {
  absl::MutexLock l(&mu_);
  addresses_ = std::move(addresses);
  stubs_.clear();
  stubs_.resize(addresses_.size());
}

absl::Status GrpcPeerLink::StubOf(int to_shard,
                                  std::shared_ptr<ParameterServer::Stub>* stub,
                                  std::string* address) {
  absl::MutexLock l(&mu_);
  if (to_shard < 0 || to_shard >= static_cast<int>(addresses_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("no shard ", to_shard));
  }
  *address = addresses_[to_shard];
  if (!stubs_[to_shard]) {
    stubs_[to_shard] = ParameterServer::NewStub(MakeChannel(
        addresses_[to_shard], security_, ClientChannelArguments()));
  }
  *stub = stubs_[to_shard];
  return absl::OkStatus();
}

absl::Status GrpcPeerLink::Send(int to_shard, const ExchangeRequest& request,
                                absl::Time deadline,
                                const std::atomic<bool>* stop) {
  return SendAll({to_shard}, request, deadline, stop);
}

absl::Status GrpcPeerLink::SendAll(const std::vector<int>& to,
                                   const ExchangeRequest& request,
                                   absl::Time deadline,
                                   const std::atomic<bool>* stop,
                                   std::vector<ExchangeResponse>* replies) {
  struct Call {
    int shard = 0;
    std::string address;
    std::shared_ptr<ParameterServer::Stub> stub;
    std::unique_ptr<grpc::ClientContext> ctx;
    ExchangeResponse resp;
    absl::Status status;  // of the last attempt
    bool done = false;    // answered by the peer itself (ok or refused)
  };
  std::vector<Call> calls(to.size());
  for (size_t i = 0; i < to.size(); ++i) calls[i].shard = to[i];
  // Rounds of attempts: every peer not yet done at once; a peer starting
  // or briefly unreachable is tried again after a pause.
  for (int attempt = 0;; ++attempt) {
    if (stop != nullptr && stop->load()) {
      return absl::AbortedError("this shard's install ended");
    }
    absl::Mutex mu;
    int pending = 0;
    for (Call& c : calls) {
      if (c.done) continue;
      absl::Status st = StubOf(c.shard, &c.stub, &c.address);
      if (!st.ok()) return Annotate(st, absl::StrCat("shard ", c.shard));
      c.ctx = std::make_unique<grpc::ClientContext>();
      c.ctx->set_deadline(absl::ToChronoTime(
          std::min(deadline, absl::Now() + absl::Seconds(2))));
      c.ctx->set_wait_for_ready(true);
      {
        absl::MutexLock l(&mu);
        ++pending;
      }
      c.stub->async()->Exchange(c.ctx.get(), &request, &c.resp,
                                [&mu, &pending, &c](grpc::Status s) {
                                  absl::MutexLock l(&mu);
                                  c.status = FromGrpcStatus(s);
                                  --pending;
                                });
    }
    {
      absl::MutexLock l(&mu);
      auto all = [&pending]() { return pending == 0; };
      mu.Await(absl::Condition(&all));  // each attempt has its deadline
    }
    bool again = false;
    for (Call& c : calls) {
      if (c.done) continue;
      const absl::StatusCode code = c.status.code();
      if (code == absl::StatusCode::kUnavailable ||
          code == absl::StatusCode::kDeadlineExceeded) {
        again = true;
        continue;
      }
      c.done = true;
      if (!c.status.ok()) {
        return Annotate(c.status, absl::StrCat("shard ", c.shard));
      }
    }
    if (!again) {
      if (replies != nullptr) {
        replies->clear();
        for (Call& c : calls) replies->push_back(std::move(c.resp));
      }
      return absl::OkStatus();
    }
    if (absl::Now() >= deadline) {
      for (const Call& c : calls) {
        if (!c.done) {
          return absl::DeadlineExceededError(
              absl::StrCat("shard ", c.shard, " at ", c.address,
                           " unreachable: ", c.status.message()));
        }
      }
    }
    absl::SleepFor(absl::Milliseconds(std::min(1000, 50 << std::min(attempt, 4))));
  }
}

}  // namespace ps
}  // namespace bertps

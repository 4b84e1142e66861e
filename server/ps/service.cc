#include "server/ps/service.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/security.h"
#include "common/audit.h"
#include "common/grpc_status.h"
#include "common/status.h"
#include "common/process_cpu.h"
#include "common/retry.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "common/ps/chunk_codec.h"

namespace bertps {
namespace ps {
namespace {

absl::Time DeadlineOf(const grpc::ServerContext* ctx) {
  return absl::FromChrono(ctx->deadline());
}

// Rounds of a peer exchange: 50 ms doubling to 800 ms between them, until
// the exchange's deadline: a peer restarting is found within a second of
// its return, and one that stays away costs about a call a second.
RetryPolicy PeerRetry() {
  RetryPolicy p;
  p.initial = absl::Milliseconds(50);
  p.multiplier = 2;
  p.max = absl::Milliseconds(800);
  return p;
}

}  // namespace

ShardService::ShardService(std::shared_ptr<ShardCore> core)
    : core_(std::move(core)) {}

namespace {

// `path` lexically normal: "." and ".." resolved, repeated slashes dropped
// (a relative path stays relative: the shard and its caller read it from
// the same spec); nullopt for an empty path or one with a NUL or control
// character.
std::optional<std::string> NormalPath(absl::string_view path) {
  if (path.empty()) return std::nullopt;
  for (char ch : path) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) return std::nullopt;
  }
  const bool absolute = path[0] == '/';
  std::vector<absl::string_view> parts;
  for (absl::string_view p : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (p == ".") continue;
    if (p == "..") {
      if (!parts.empty() && parts.back() != "..") {
        parts.pop_back();
      } else if (!absolute) {
        parts.push_back(p);
      }
      continue;
    }
    parts.push_back(p);
  }
  const std::string joined = absl::StrJoin(parts, "/");
  if (absolute) return absl::StrCat("/", joined);
  return joined.empty() ? std::string(".") : joined;
}

bool IsUnder(absl::string_view path, absl::string_view dir) {
  std::optional<std::string> p = NormalPath(path), d = NormalPath(dir);
  if (!p || !d) return false;
  if ((*p)[0] == '/' && (*d)[0] != '/') return false;  // one of each:
  if ((*p)[0] != '/' && (*d)[0] == '/') return false;  // never under
  if (absl::StartsWith(*p, "..") && *p != *d) return false;  // out of dir
  return *p == *d || *d == "/" || (*d == "." && !absl::StartsWith(*p, "..")) ||
         absl::StartsWith(*p, *d + "/");
}

}  // namespace

absl::Status CheckCheckpointDir(const ShardOptions& o, const std::string& dir) {
  if (o.job_id.empty()) return absl::OkStatus();  // a shard run on its own
  if (o.checkpoint_dir.empty() || !IsUnder(dir, o.checkpoint_dir) ||
      !IsUnder(o.checkpoint_dir, dir)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "checkpoint into \"", dir, "\" refused: this shard of job ", o.job_id,
        " writes checkpoints only into the job's checkpoint.dir",
        o.checkpoint_dir.empty() ? " (it has none)" : ""));
  }
  return absl::OkStatus();
}

absl::Status CheckRestoreManifest(const ShardOptions& o,
                                  const std::string& manifest) {
  if (o.job_id.empty()) return absl::OkStatus();  // a shard run on its own
  const bool named = !o.restore_manifest.empty() &&
                     NormalPath(manifest) == NormalPath(o.restore_manifest);
  const bool own = !o.checkpoint_dir.empty() &&
                   IsUnder(manifest, o.checkpoint_dir) &&
                   NormalPath(manifest) != NormalPath(o.checkpoint_dir);
  if (!named && !own) {
    // Says nothing of whether the file exists.
    return absl::PermissionDeniedError(absl::StrCat(
        "restore of \"", manifest, "\" refused: this shard of job ", o.job_id,
        " restores only its checkpoint.restore or a manifest under its "
        "checkpoint.dir"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ShardCore>> ShardService::Current(
    const grpc::ServerContextBase* ctx, CallScope scope,
    std::shared_ptr<const Capability>* cap) const {
  absl::StatusOr<std::shared_ptr<ShardCore>> c =
      CurrentUnaudited(ctx, scope, cap);
  if (c.status().code() == absl::StatusCode::kPermissionDenied) {
    AuditRefusal(absl::StrContains(c.status().message(), "capabilit")
                     ? kRefusedCapability
                     : kRefusedJobScope,
                 ctx->peer(), c.status().message());
  }
  return c;
}

absl::Status CapabilityAllows(const Capability& cap, const ShardCore& core,
                              absl::string_view what) {
  const ShardOptions& o = core.options();
  if (cap.job_id() != o.job_id || cap.incarnation() != o.incarnation) {
    return absl::PermissionDeniedError(absl::StrCat(
        what, ": the capability is of job ", cap.job_id(), " incarnation ",
        cap.incarnation(), ", not this shard's"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ShardCore>> ShardService::CurrentUnaudited(
    const grpc::ServerContextBase* ctx, CallScope scope,
    std::shared_ptr<const Capability>* cap_out) const {
  std::shared_ptr<ShardCore> c = core();
  if (!c) {
    return absl::UnavailableError(
        "this parameter-server shard has no job assigned");
  }
  const ShardOptions& o = c->options();
  const auto& md = ctx->client_metadata();
  auto value = [&md](const char* key) -> std::optional<absl::string_view> {
    auto it = md.find(key);
    if (it == md.end()) return std::nullopt;
    return absl::string_view(it->second.data(), it->second.size());
  };
  // A shard of a coordinator's job serves only that job's members: the
  // call names the job (checked before anything else, so a member of
  // another job learns nothing of this one).
  if (!o.job_id.empty() && value(kJobMetadata) != absl::string_view(o.job_id)) {
    return absl::PermissionDeniedError(
        "this parameter-server shard serves another job (a call names its "
        "job, incarnation and key: ps::kJobMetadata)");
  }
  // A request naming a job incarnation is served only by that install (a
  // worker of a job's earlier start must not reach its restart); a shard of
  // a coordinator's job requires the name.
  std::optional<absl::string_view> inc_text = value(kIncarnationMetadata);
  if (!inc_text && !o.job_id.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "a call to a shard of job ", o.job_id, " must name its incarnation (",
        kIncarnationMetadata, ")"));
  }
  if (inc_text) {
    int64_t inc = 0;
    if (!absl::SimpleAtoi(*inc_text, &inc)) {
      return absl::InvalidArgumentError(
          absl::StrCat(kIncarnationMetadata, " metadata is not a number"));
    }
    if (inc != o.incarnation) {
      return absl::AbortedError(absl::StrCat(
          "request of job incarnation ", inc, "; this shard serves incarnation ",
          o.incarnation, " (the job was started again)"));
    }
  }
  // The incarnation's keys (after the incarnation: a member of an earlier
  // start is told ABORTED and starts again, not refused).
  if (!o.job_key.empty() &&
      !ConstantTimeEquals(value(kJobKeyMetadata).value_or(""), o.job_key)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "a call to a shard of job ", o.job_id,
        " without the job's key (only its members hold it)"));
  }
  if (scope != CallScope::kMember && !o.job_id.empty() &&
      (o.shard_key.empty() ||
       !ConstantTimeEquals(value(kShardKeyMetadata).value_or(""), o.shard_key))) {
    return absl::PermissionDeniedError(absl::StrCat(
        "a peer call (exchange, replication, snapshot) to a shard of job ",
        o.job_id, " without the shards' key (only the job's shards hold it)"));
  }
  // A coordinator's job whose coordinator signs capabilities: the call's
  // must hold for this job and incarnation, and for the call's scope.
  if (!o.job_id.empty() && verifier_.has_keys()) {
    ASSIGN_OR_RETURN(std::shared_ptr<const Capability> cap,
                     verifier_.Verify(value(kCapabilityMetadata).value_or(""),
                                      absl::Now()));
    RETURN_IF_ERROR(CapabilityAllows(*cap, *c, "call"));
    if (scope != CallScope::kMember && cap->kind() != Capability::SHARD) {
      return absl::PermissionDeniedError(absl::StrCat(
          "a peer call (exchange, replication, snapshot) needs a shard's "
          "capability; member ", cap->member_id(), "'s is a trainer's"));
    }
    if (scope == CallScope::kReplica &&
        (!cap->primary() || cap->shard_index() != o.shard ||
         cap->shard_term() < c->term())) {
      return absl::PermissionDeniedError(absl::StrCat(
          "replication to shard ", o.shard, " (term ", c->term(),
          ") only from its primary: the caller's capability is of shard ",
          cap->shard_index(), ", term ", cap->shard_term(),
          cap->primary() ? ", primary" : ", not primary"));
    }
    if (cap_out != nullptr) *cap_out = std::move(cap);
  }
  // A caller that still counts on a replaced primary goes on against the
  // new layout (its pushes to that primary may be lost: it pushes again).
  auto it = md.find(kLayoutMetadata);
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
  const bool replaced = core != nullptr;
  std::shared_ptr<ShardCore> old;
  {
    absl::MutexLock l(&mu_);
    old = std::move(core_);
    core_ = std::move(core);
  }
  // Calls still waiting on the previous install fail now rather than at
  // their deadline: ABORTED when another install replaced it (a primary
  // replicating to it is of a stale incarnation and must stop), UNAVAILABLE
  // when the job left this shard (as a call arriving later finds it: a
  // primary drops a backup that left, e.g. drained, rather than stopping).
  if (old) {
    old->Abort(replaced ? absl::AbortedError(
                              "the job was installed again on this shard")
                        : absl::UnavailableError(
                              "the job left this shard (its daemon leaves "
                              "or was told to)"));
  }
}

#define BERTPS_CORE_OR_RETURN_SCOPED(var, scope)                        \
  absl::StatusOr<std::shared_ptr<ShardCore>> var##_or = Current(ctx, scope); \
  if (!var##_or.ok()) return ToGrpcStatus(var##_or.status());           \
  ShardCore* var = var##_or->get()
#define BERTPS_CORE_OR_RETURN(var) \
  BERTPS_CORE_OR_RETURN_SCOPED(var, CallScope::kMember)

grpc::Status ShardService::Describe(grpc::ServerContext* ctx,
                                    const DescribeRequest* req,
                                    DescribeResponse* resp) {
  const int theirs =
      req->protocol_version() == 0 ? 1 : req->protocol_version();
  if (theirs != kPsProtocolVersion) {
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat("this shard speaks parameter-server protocol ",
                     kPsProtocolVersion, ", the client ", theirs,
                     ": run members of one release"));
  }
  BERTPS_CORE_OR_RETURN(shard);
  *resp = shard->Describe();
  resp->set_protocol_version(kPsProtocolVersion);
  return grpc::Status::OK;
}

grpc::Status ShardService::Exchange(grpc::ServerContext* ctx,
                                    const ExchangeRequest* req,
                                    ExchangeResponse* resp) {
  BERTPS_CORE_OR_RETURN_SCOPED(shard, CallScope::kPeer);
  return ToGrpcStatus(shard->ReceiveExchange(*req, resp));
}

grpc::Status ShardService::Checkpoint(grpc::ServerContext* ctx,
                                      const CheckpointRequest* req,
                                      CheckpointResponse* resp) {
  std::shared_ptr<const Capability> cap;
  absl::StatusOr<std::shared_ptr<ShardCore>> shard_or =
      Current(ctx, CallScope::kMember, &cap);
  if (!shard_or.ok()) return ToGrpcStatus(shard_or.status());
  ShardCore* shard = shard_or->get();
  if (req->dir().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "checkpoint needs a directory");
  }
  if (cap != nullptr && (cap->checkpoint_dir().empty() ||
                         !IsUnder(req->dir(), cap->checkpoint_dir()) ||
                         !IsUnder(cap->checkpoint_dir(), req->dir()))) {
    const std::string why = absl::StrCat(
        "checkpoint into ", req->dir(), ": member ", cap->member_id(),
        "'s capability allows only its job's checkpoint directory");
    AuditRefusal(kRefusedCapability, ctx->peer(), why);
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, why);
  }
  if (absl::Status st = CheckCheckpointDir(shard->options(), req->dir());
      !st.ok()) {
    return ToGrpcStatus(st);
  }
  absl::StatusOr<CheckpointResponse> r =
      shard->Checkpoint(req->dir(), req->version(), DeadlineOf(ctx),
                        req->mode());
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *r;
  return grpc::Status::OK;
}

grpc::Status ShardService::Restore(grpc::ServerContext* ctx,
                                   const RestoreRequest* req,
                                   RestoreResponse* resp) {
  BERTPS_CORE_OR_RETURN(shard);
  if (absl::Status st = CheckRestoreManifest(shard->options(), req->manifest());
      !st.ok()) {
    return ToGrpcStatus(st);
  }
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
  BERTPS_CORE_OR_RETURN_SCOPED(shard, CallScope::kReplica);
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
  BERTPS_CORE_OR_RETURN_SCOPED(shard, CallScope::kReplica);
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
                                  std::string* address, PeerScope* scope) {
  absl::MutexLock l(&mu_);
  *scope = scope_;
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
  // or briefly unreachable is tried again after a pause (PeerRetry), until
  // `deadline`.
  Backoff backoff(PeerRetry());
  for (;;) {
    if (stop != nullptr && stop->load()) {
      return absl::AbortedError("this shard's install ended");
    }
    absl::Mutex mu;
    int pending = 0;
    for (Call& c : calls) {
      if (c.done) continue;
      PeerScope scope;
      absl::Status st = StubOf(c.shard, &c.stub, &c.address, &scope);
      if (!st.ok()) return Annotate(st, absl::StrCat("shard ", c.shard));
      c.ctx = std::make_unique<grpc::ClientContext>();
      scope.AddTo(c.ctx.get());
      // The receiver checks the incarnation in the request too.
      c.ctx->AddMetadata(kIncarnationMetadata,
                         absl::StrCat(request.incarnation()));
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
    absl::SleepFor(backoff.Next());
  }
}

}  // namespace ps
}  // namespace bertps

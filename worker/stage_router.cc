#include "worker/stage_router.h"

#include <chrono>
#include <vector>

#include "common/audit.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/health_check_service_interface.h"
#include "common/tcp_tuning.h"
#include "worker/stage_wire.h"

namespace bertps {

absl::StatusOr<std::unique_ptr<StageRouter>> StageRouter::Start(
    const std::string& listen, const SecurityConfig& security) {
  // Nothing listens under a security configuration that does not hold.
  if (absl::Status st = ValidateServing(security); !st.ok()) return st;
  std::unique_ptr<StageRouter> r(new StageRouter());
  MethodRoles roles = DefaultMethodRoles();
  roles.rules["/bertps.StageService/*"] = Access::kWorker;
  // grpc.health.v1 too: the coordinator probes a stage daemon another
  // stage could not reach.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, ServerCredentials(security, roles),
                           &r->port_);
  AddTcpTuning(&builder);
  builder.SetMaxReceiveMessageSize(stage_internal::kMaxMessageBytes);
  builder.RegisterService(r.get());
  r->server_ = builder.BuildAndStart();
  if (!r->server_ || r->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("stage daemon: cannot listen on ", listen));
  }
  return r;
}

void StageRouter::ServeHealthService(const std::string& service) {
  if (server_ && server_->GetHealthCheckService() != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(service, true);
  }
}

StageRouter::~StageRouter() {
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(1));
  }
}

void StageRouter::Add(int replica, int stage, std::shared_ptr<Target> target) {
  absl::MutexLock l(&mu_);
  targets_[{replica, stage}] = std::move(target);
}

void StageRouter::Remove(int replica, int stage,
                         const std::shared_ptr<Target>& target) {
  absl::MutexLock l(&mu_);
  auto it = targets_.find({replica, stage});
  if (it != targets_.end() && it->second == target) targets_.erase(it);
  // Calls in flight use it: wait for them to end.
  const Target* t = target.get();
  auto idle = [this, t]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    auto c = in_flight_.find(t);
    return c == in_flight_.end() || c->second == 0;
  };
  mu_.Await(absl::Condition(&idle));
  in_flight_.erase(t);
}

StageRouter::Held StageRouter::Find(int replica, int stage) {
  absl::MutexLock l(&mu_);
  auto it = targets_.find({replica, stage});
  if (it == targets_.end()) return Held(this, nullptr);
  ++in_flight_[it->second.get()];
  return Held(this, it->second);
}

StageRouter::Held::~Held() {
  if (target_ == nullptr) return;
  absl::MutexLock l(&router_->mu_);
  --router_->in_flight_[target_.get()];
}

namespace {

grpc::Status Refused(const grpc::ServerContext* ctx, const absl::Status& st) {
  AuditRefusal(kRefusedCapability, ctx->peer(), st.message());
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      std::string(st.message()));
}

grpc::Status NotHere(int replica, int stage) {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      absl::StrCat("this daemon does not serve pipeline stage ",
                                   stage, " of replica ", replica,
                                   " now (it may be starting again)"));
}

}  // namespace

absl::Status StageRouter::Admit(const grpc::ServerContext* ctx,
                                const Target& target, int replica,
                                int from_stage) const {
  if (!verifier_.has_keys()) return absl::OkStatus();  // no coordinator key
  const auto& md = ctx->client_metadata();
  auto it = md.find(kCapabilityMetadata);
  const absl::string_view wire =
      it == md.end() ? absl::string_view()
                     : absl::string_view(it->second.data(), it->second.size());
  absl::StatusOr<std::shared_ptr<const Capability>> cap =
      verifier_.Verify(wire, absl::Now());
  if (!cap.ok()) return cap.status();
  return target.CheckPeer(**cap, replica, from_stage);
}

grpc::Status StageRouter::Send(grpc::ServerContext* ctx,
                               grpc::ServerReader<StageChunk>* r,
                               StageSendResponse*) {
  StageChunk msg;
  if (!r->Read(&msg) || !msg.has_header()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "a stage stream starts with its header");
  }
  const StageTensorHeader& h = msg.header();
  constexpr int kMaxStages = 1 << 16;
  if ((h.kind() != ACTIVATION && h.kind() != GRADIENT) || h.from_stage() < 0 ||
      h.from_stage() >= kMaxStages || h.replica() < 0 ||
      (h.kind() == GRADIENT && h.from_stage() == 0)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("a stage tensor from stage ",
                                     h.from_stage(), " of replica ",
                                     h.replica(), " of kind ", h.kind(),
                                     " goes to no stage"));
  }
  const int to =
      h.kind() == ACTIVATION ? h.from_stage() + 1 : h.from_stage() - 1;
  Held t = Find(h.replica(), to);
  if (!t) return NotHere(h.replica(), to);
  if (absl::Status st = Admit(ctx, *t, h.replica(), h.from_stage()); !st.ok()) {
    return Refused(ctx, st);
  }
  return t->Accept(h, r);
}

grpc::Status StageRouter::Ping(grpc::ServerContext* ctx,
                               const StagePingRequest* request,
                               StagePingResponse* response) {
  if (!request->has_replica() || !request->has_stage()) {
    return grpc::Status::OK;  // the daemon answers
  }
  Held t = Find(request->replica(), request->stage());
  if (!t) return NotHere(request->replica(), request->stage());
  if (absl::Status st = Admit(ctx, *t, request->replica(), -1); !st.ok()) {
    return Refused(ctx, st);
  }
  return t->Answer(response);
}

grpc::Status StageRouter::Abort(grpc::ServerContext* ctx,
                                const StageAbortRequest* request,
                                StageAbortResponse*) {
  std::vector<int> stages;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [key, t] : targets_) {
      if (key.first != request->replica()) continue;
      if (request->has_to_stage() ? key.second == request->to_stage()
                                  : key.second != request->from_stage()) {
        stages.push_back(key.second);
      }
    }
  }
  for (int stage : stages) {
    Held t = Find(request->replica(), stage);
    if (!t) continue;
    if (absl::Status st =
            Admit(ctx, *t, request->replica(), request->from_stage());
        !st.ok()) {
      return Refused(ctx, st);
    }
    t->TakeAbort(*request);
  }
  return grpc::Status::OK;
}

}  // namespace bertps

#include "common/cluster/member.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/cluster/member_instance.h"
#include "common/grpc_status.h"
#include "common/memory_limit.h"
#include "common/retry.h"
#include "common/status.h"
#include "common/timeouts.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"

namespace bertps {

MemberClient::MemberClient(const std::string& coordinator, Role role,
                           std::string my_address,
                           absl::Duration rpc_timeout)
    : MemberClient(coordinator, role, std::move(my_address), SecurityConfig(),
                   rpc_timeout) {}

MemberClient::MemberClient(const std::string& coordinator, Role role,
                           std::string my_address,
                           const SecurityConfig& security,
                           absl::Duration rpc_timeout)
    : coordinator_(coordinator),
      role_(role),
      my_address_(std::move(my_address)),
      rpc_timeout_(rpc_timeout),
      stub_(ClusterService::NewStub(MakeChannel(coordinator, security))),
      instance_(RandomSecret(16)),
      instance_service_(MemberInstanceService(instance_)) {}

absl::Status MemberClient::Register() {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + rpc_timeout_));
  ctx.set_wait_for_ready(true);
  RegisterRequest req;
  req.set_role(role_);
  req.set_address(my_address_);
  // What the member may use: the coordinator places train jobs by it.
  const MemoryLimit limit = DetectMemoryLimit();
  req.set_memory_limit_bytes(limit.bytes / memory_share_);
  req.set_memory_limit_source(
      memory_share_ > 1
          ? absl::StrCat(limit.source, " / ", memory_share_, " members")
          : limit.source);
  req.set_daemon(daemon_);
  if (!my_address_.empty()) req.set_instance(instance_);
  req.set_protocol_version(kMemberProtocolVersion);
  if (announce_) {
    MemberRun run = announce_();
    if (!run.job_id().empty()) *req.mutable_running() = std::move(run);
  }
  req.set_gave_up(gave_up_);
  RegisterResponse resp;
  absl::Status st = FromGrpcStatus(stub_->Register(&ctx, req, &resp));
  if (!st.ok()) return Annotate(st, absl::StrCat("coordinator ", coordinator_));
  member_id_ = resp.member_id();
  // The id operators name (bertpsctl drain, revoke).
  LOG(INFO) << "registered as member " << member_id_ << " with coordinator "
            << coordinator_;
  member_secret_ = resp.member_secret();
  member_timeout_ = absl::Milliseconds(resp.member_timeout_ms());
  adopted_ = resp.adopted();
  gave_up_.clear();  // told
  interval_ = absl::Milliseconds(std::max<int64_t>(50, resp.heartbeat_ms()));
  return absl::OkStatus();
}

absl::StatusOr<Assignment> MemberClient::Heartbeat(
    const std::string& job, const std::vector<StepReport>& reports, bool done,
    const std::string& error) {
  HeartbeatRequest req;
  req.set_job_id(job);
  for (const StepReport& r : reports) *req.add_steps() = r;
  req.set_done(done);
  req.set_error(error);
  return Heartbeat(std::move(req));
}

namespace {
// A heartbeat the coordinator answers NOT_FOUND (it forgot this member: it
// restarted, or reclaimed it) is sent once more, at once, after registering
// again; a wait would add nothing, and a coordinator that forgets the member
// twice in a row is reported (the member loop's backoff retries later).
RetryPolicy ReRegisterRetry() {
  RetryPolicy p;
  p.initial = absl::ZeroDuration();
  p.max = absl::ZeroDuration();
  p.max_attempts = 2;
  return p;
}
}  // namespace

absl::StatusOr<Assignment> MemberClient::Heartbeat(HeartbeatRequest req) {
  HeartbeatResponse resp;
  bool forgotten = false;  // the last attempt's heartbeat: NOT_FOUND
  absl::Status st = Retry(
      ReRegisterRetry(),
      [&]() -> absl::Status {
        forgotten = false;
        if (member_id_.empty()) RETURN_IF_ERROR(Register());
        grpc::ClientContext ctx;
        // A heartbeat answered later than half the member timeout is of no
        // use (the member counts as silent by then): it fails sooner, and
        // the member loop's retries and give-up see the coordinator's
        // absence.
        ctx.set_deadline(absl::ToChronoTime(
            absl::Now() + HeartbeatDeadline(rpc_timeout_, member_timeout_)));
        req.set_member_id(member_id_);
        req.set_member_secret(member_secret_);
        if (!gave_up_.empty()) req.set_gave_up(gave_up_);
        resp.Clear();
        absl::Status hb = FromGrpcStatus(stub_->Heartbeat(&ctx, req, &resp));
        if (hb.ok()) gave_up_.clear();  // told
        if (hb.code() == absl::StatusCode::kNotFound) {
          member_id_.clear();  // the coordinator forgot us: register again
          forgotten = true;
          return hb;
        }
        if (!hb.ok()) {
          return Annotate(hb, absl::StrCat("coordinator ", coordinator_));
        }
        return absl::OkStatus();
      },
      [&](const absl::Status&) { return forgotten; });
  if (forgotten) {
    return absl::UnavailableError("coordinator keeps forgetting this member");
  }
  RETURN_IF_ERROR(st);
  if (resp.heartbeat_ms() > 0) {
    interval_ = absl::Milliseconds(std::max<int64_t>(50, resp.heartbeat_ms()));
  }
  return resp.assignment();
}

absl::Status MemberClient::Leave(HeartbeatRequest req) {
  if (member_id_.empty()) return absl::OkStatus();
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(
      absl::Now() + std::min(rpc_timeout_, absl::Seconds(3))));
  req.set_member_id(member_id_);
  req.set_member_secret(member_secret_);
  req.set_leaving(true);
  HeartbeatResponse resp;
  absl::Status st = FromGrpcStatus(stub_->Heartbeat(&ctx, req, &resp));
  if (!st.ok()) return Annotate(st, absl::StrCat("leaving ", coordinator_));
  member_id_.clear();
  member_secret_.clear();
  return absl::OkStatus();
}

}  // namespace bertps

#include "server/coordinator/service.h"

#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "common/grpc_status.h"
#include "common/security.h"

namespace bertps {

Caller CallerOf(const grpc::ServerContextBase& ctx) {
  Caller caller;
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (!auth) return caller;
  std::vector<grpc::string_ref> role = auth->FindPropertyValues(kRoleProperty);
  if (role.empty()) return caller;  // no token checked: everyone may
  caller.admin = std::string(role[0].data(), role[0].size()) ==
                 AuthRoleName(AuthRole::kAdmin);
  std::vector<grpc::string_ref> token = auth->FindPropertyValues(kTokenProperty);
  if (!token.empty()) caller.token.assign(token[0].data(), token[0].size());
  std::vector<grpc::string_ref> team = auth->FindPropertyValues(kTeamProperty);
  if (!team.empty()) caller.team.assign(team[0].data(), team[0].size());
  const auto& md = ctx.client_metadata();
  if (auto it = md.find(kMemberMetadata); it != md.end()) {
    caller.member_id.assign(it->second.data(), it->second.size());
  }
  if (auto it = md.find(kMemberSecretMetadata); it != md.end()) {
    caller.member_secret.assign(it->second.data(), it->second.size());
  }
  return caller;
}

absl::Status WatchLimits::Begin(const std::string& token) {
  absl::MutexLock l(&mu_);
  int& n = open_[token];
  if (limit_ > 0 && n >= limit_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "token ", token.empty() ? "(none)" : token, " has ", n,
        " watches open, the most one token may (close one first)"));
  }
  ++n;
  return absl::OkStatus();
}

void WatchLimits::End(const std::string& token) {
  absl::MutexLock l(&mu_);
  auto it = open_.find(token);
  if (it == open_.end()) return;
  if (--it->second <= 0) open_.erase(it);
}

int WatchLimits::open(const std::string& token) const {
  absl::MutexLock l(&mu_);
  auto it = open_.find(token);
  return it == open_.end() ? 0 : it->second;
}

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* ctx,
                                       const SubmitJobRequest* req,
                                       SubmitJobResponse* resp) {
  absl::StatusOr<std::string> id = c_->Submit(req->spec(), CallerOf(*ctx).team);
  if (!id.ok()) return ToGrpcStatus(id.status());
  resp->set_id(*id);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* ctx,
                                    const GetJobRequest* req,
                                    JobStatus* resp) {
  absl::StatusOr<JobStatus> s = c_->Get(req->id(), CallerOf(*ctx));
  if (!s.ok()) return ToGrpcStatus(s.status());
  *resp = *s;
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* ctx,
                                      const ListJobsRequest* req,
                                      ListJobsResponse* resp) {
  absl::StatusOr<ListJobsResponse> page =
      c_->ListPageFor(CallerOf(*ctx), req->page_size(), req->page_token());
  if (!page.ok()) return ToGrpcStatus(page.status());
  *resp = std::move(*page);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* ctx,
                                       const CancelJobRequest* req,
                                       CancelJobResponse*) {
  return ToGrpcStatus(c_->Cancel(req->id(), CallerOf(*ctx)));
}

grpc::Status JobServiceImpl::DrainMember(grpc::ServerContext* ctx,
                                         const DrainMemberRequest* req,
                                         DrainMemberResponse* resp) {
  absl::StatusOr<DrainMemberResponse> r =
      c_->Drain(req->member_id(), CallerOf(*ctx), req->force());
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::RevokeMember(grpc::ServerContext* ctx,
                                          const RevokeMemberRequest* req,
                                          RevokeMemberResponse* resp) {
  absl::StatusOr<RevokeMemberResponse> r =
      c_->Revoke(req->member_id(), CallerOf(*ctx));
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

namespace {

// One watch: the job's events from the first, then each as it comes, until
// the job ends (its final event is the last), the watcher goes or the
// call's deadline passes. Between events it waits on the coordinator's
// fan-out. One operation outstanding at a time (a write or the wait);
// `cancelled_` alone is read across threads.
class WatchReactor final : public grpc::ServerWriteReactor<JobEvent> {
 public:
  WatchReactor(Coordinator* c, WatchLimits* limits,
               grpc::CallbackServerContext* ctx, const WatchJobRequest& request)
      : c_(c), limits_(limits), ctx_(ctx), id_(request.id()),
        backlog_only_(request.backlog_only()) {}

  void Start() {
    const Caller caller = CallerOf(*ctx_);
    if (absl::Status st = c_->CheckCanRead(id_, caller); !st.ok()) {
      return Finish(ToGrpcStatus(st));
    }
    if (absl::Status st = limits_->Begin(caller.token); !st.ok()) {
      return Finish(ToGrpcStatus(st));
    }
    token_ = caller.token;
    counted_ = true;
    Next();
  }

 private:
  void OnWriteDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::OK);  // the watcher went
    Next();
  }
  void OnCancel() override {
    cancelled_ = true;
    c_->PokeWatchers();
  }
  void OnDone() override {
    if (counted_) limits_->End(token_);
    delete this;
  }

  void Next() {
    if (cancelled_.load()) {
      return Finish(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
    }
    if (at_ < events_.size()) {
      const JobEvent& e = events_[at_++];
      if (IsFinal(e.status().state())) {
        return StartWriteAndFinish(&e, grpc::WriteOptions(), grpc::Status::OK);
      }
      return StartWrite(&e);
    }
    if (backlog_only_ && started_) return Finish(grpc::Status::OK);
    started_ = true;
    // What is there now (no wait: the deadline has passed).
    absl::StatusOr<std::vector<JobEvent>> events =
        c_->WaitForEvents(id_, &seq_, absl::InfinitePast());
    if (!events.ok()) return Finish(ToGrpcStatus(events.status()));
    if (!events->empty() || backlog_only_) {
      events_ = std::move(*events);
      at_ = 0;
      return Next();
    }
    const absl::Time deadline = absl::FromChrono(ctx_->deadline());
    c_->WhenEvents(id_, seq_, deadline, [this] { return cancelled_.load(); },
                   [this, deadline](bool ready) {
                     if (!ready && absl::Now() >= deadline) {
                       return Finish(grpc::Status(
                           grpc::StatusCode::DEADLINE_EXCEEDED,
                           "watch deadline reached"));
                     }
                     Next();
                   });
  }

  Coordinator* const c_;
  WatchLimits* const limits_;
  grpc::CallbackServerContext* const ctx_;
  const std::string id_;
  const bool backlog_only_;
  std::string token_;    // counted against its watches while open
  bool counted_ = false;
  std::atomic<bool> cancelled_{false};
  bool started_ = false;
  int64_t seq_ = 0;
  std::vector<JobEvent> events_;  // fetched, written up to at_
  size_t at_ = 0;
};

}  // namespace

grpc::ServerWriteReactor<JobEvent>* JobServiceImpl::WatchJob(
    grpc::CallbackServerContext* ctx, const WatchJobRequest* req) {
  auto* r = new WatchReactor(c_, &watches_, ctx, *req);
  r->Start();
  return r;
}

grpc::Status ClusterServiceImpl::Register(grpc::ServerContext* ctx,
                                          const RegisterRequest* req,
                                          RegisterResponse* resp) {
  absl::StatusOr<RegisterResponse> r = c_->Register(*req, CallerOf(*ctx));
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *r;
  return grpc::Status::OK;
}

grpc::Status ClusterServiceImpl::Heartbeat(grpc::ServerContext*,
                                           const HeartbeatRequest* req,
                                           HeartbeatResponse* resp) {
  absl::StatusOr<HeartbeatResponse> r = c_->Heartbeat(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *r;
  return grpc::Status::OK;
}

}  // namespace bertps

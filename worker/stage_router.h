// StageRouter: the one StageService of a pipeline-stage daemon, for every
// part it runs (its own slot, and slots of another replica it took over):
// each call goes to the stage it is for -- a tensor to its receiver (from
// its header: the next stage for activations, the previous for gradients of
// the header's replica), a ping or an abort to the stage it names. A stage
// not served at the moment (between two starts of its part) is UNAVAILABLE,
// which its peers try again for a while.
// Thread-safety: thread-safe.
#ifndef BERTPS_WORKER_STAGE_ROUTER_H_
#define BERTPS_WORKER_STAGE_ROUTER_H_

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "common/capability.h"
#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/security.h"
#include "grpcpp/grpcpp.h"
#include "proto/pipeline.grpc.pb.h"

namespace bertps {

class StageRouter final : public StageService::Service {
 public:
  // What one stage serves (PipelineStage's service).
  class Target {
   public:
    virtual ~Target() = default;
    // A tensor whose header was read; the chunks follow in `reader`.
    virtual grpc::Status Accept(const StageTensorHeader& header,
                                grpc::ServerReader<StageChunk>* reader) = 0;
    virtual grpc::Status Answer(StagePingResponse* response) = 0;
    virtual grpc::Status TakeAbort(const StageAbortRequest& request) = 0;
    // Whether `cap` (verified by the router) is of a member of this
    // stage's job and start that holds the slot of stage `from_stage` of
    // `replica` (from_stage < 0: any slot of the job).
    virtual absl::Status CheckPeer(const Capability& cap, int replica,
                                   int from_stage) const = 0;
  };

  // Listens on `listen` (host:port; port 0: a free one).
  static absl::StatusOr<std::unique_ptr<StageRouter>> Start(
      const std::string& listen, const SecurityConfig& security);
  ~StageRouter() override;

  int port() const { return port_; }
  // The coordinator's key and the revoked members (StageMember sets them
  // from its assignments): once it has a key, every Send, Ping and Abort
  // needs a capability of a member of the target stage's job, and Send and
  // Abort the one that holds the sending stage's slot.
  CapabilityVerifier& verifier() { return verifier_; }
  // Answers SERVING for the grpc.health.v1 service `service` from now on
  // (a member's proof that this address is its own: MemberClient).
  void ServeHealthService(const std::string& service);
  // Serves stage `stage` of `replica` with `target` (replacing any).
  void Add(int replica, int stage, std::shared_ptr<Target> target)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Stops serving `target`, and returns once no call uses it.
  void Remove(int replica, int stage, const std::shared_ptr<Target>& target)
      ABSL_LOCKS_EXCLUDED(mu_);

  grpc::Status Send(grpc::ServerContext*, grpc::ServerReader<StageChunk>* r,
                    StageSendResponse*) override;
  grpc::Status Ping(grpc::ServerContext*, const StagePingRequest* request,
                    StagePingResponse* response) override;
  grpc::Status Abort(grpc::ServerContext*, const StageAbortRequest* request,
                     StageAbortResponse*) override;

 private:
  // The call's capability, verified and judged by `target` (OK when the
  // router has no key).
  absl::Status Admit(const grpc::ServerContext* ctx, const Target& target,
                     int replica, int from_stage) const;
  // A target held by a call: counted in flight until it ends.
  class Held {
   public:
    Held(StageRouter* router, std::shared_ptr<Target> target)
        : router_(router), target_(std::move(target)) {}
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;
    ~Held();
    Target* operator->() const { return target_.get(); }
    Target& operator*() const { return *target_; }
    explicit operator bool() const { return target_ != nullptr; }

   private:
    StageRouter* const router_;
    const std::shared_ptr<Target> target_;
  };
  StageRouter() = default;
  Held Find(int replica, int stage) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  std::map<std::pair<int, int>, std::shared_ptr<Target>> targets_
      ABSL_GUARDED_BY(mu_);
  std::map<const Target*, int> in_flight_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  CapabilityVerifier verifier_;
};

}  // namespace bertps

#endif  // BERTPS_WORKER_STAGE_ROUTER_H_

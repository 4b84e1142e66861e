// PipelineStage: the `stage` role of bertps_worker (model parallelism).
//
// A job of D data-parallel replicas x S pipeline stages runs D*S stage
// workers. Stage s of replica r holds BERT's layers of stage s
// (common/model/stage.h); per step it
//   1. reads the replica's batch (the same examples a train worker with
//      worker index r of D reads: every stage reads the data itself, only
//      activations travel between stages);
//   2. announces its share of the batch totals to the parameter server
//      (stage 0 the replica's MLM weight and examples, the others zero) and
//      gets the global loss denominators;
//   3. pulls only its own tensors, version = step (BSP);
//   4. runs the schedule (GPipe or 1F1B) over M micro-batches: activations
//      go to stage s + 1 and their gradients come back to stage s - 1 over
//      StageService streams (proto/pipeline.proto); parameter gradients
//      accumulate over the micro-batches;
//   5. pushes its gradients as PS worker r*S + s (the plan's slot of
//      (replica r, stage s): JobPlan::SlotOf). A push must cover every
//      slice of the model (the shard validates coverage), so the tensors of
//      other stages go as zeros; the shard sums the D*S pushes in worker
//      order, which gives exactly the data-parallel sum (adding zeros is
//      exact) and adds the two contributions to the tied word embeddings.
// The PS shards' plan has D*S workers (bertps_server --workers D --stages S).
// The replica's data, steps and slot are the job plan's
// (PipelineStageOptions::plan, common/cluster/job_plan.h).
//
// Failure: every send has a deadline; while waiting for a neighbour's
// message the stage pings that neighbour every probe_interval, so a dead
// stage is named within about probe_timeout; a stage that fails sends
// Abort(reason) to the other stages of its replica, which fail at once with
// that reason. Nothing waits forever.
//
// Thread-safety: Run()/Step() from one thread; Kill() and the gRPC handlers
// from any.
#ifndef BERTPS_WORKER_PIPELINE_STAGE_H_
#define BERTPS_WORKER_PIPELINE_STAGE_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cluster/job_plan.h"
#include "common/io/bert_example.h"
#include "common/io/record_index.h"
#include "common/kernels/matmul.h"
#include "common/model/pipeline_schedule.h"
#include "common/model/stage.h"
#include "common/timeouts.h"
#include "grpcpp/server.h"
#include "proto/pipeline.grpc.pb.h"
#include "worker/stage_router.h"
#include "common/ps/ps_client.h"

namespace bertps {

struct PipelineStageOptions {
  PsClientOptions ps;
  BertConfig config;
  BertTask task = BertTask::kPretrain;
  // The job's plan: its stages per replica (plan.stages), replicas
  // (plan.replicas), examples per replica per step (plan.batch), steps
  // (plan.updates), each replica's share of the data and each slot.
  JobPlan plan;
  int stage = 0;    // of plan.stages
  int replica = 0;  // of plan.replicas
  std::string listen = "127.0.0.1:0";  // this stage's StageService
  std::vector<std::string> peers;      // this replica's stages, by index
  int micro_batches = 4;
  PipelineScheduleKind schedule = PipelineScheduleKind::kOneFOneB;
  std::vector<int> layers_per_stage;  // empty: balanced by compute
  std::vector<std::string> data;      // TFRecord globs
  uint64_t seed = 12345;
  bool dropout = true;
  bool shuffle = false;               // a new order every epoch (seed)
  // The products' precision (kernels/matmul.h); a CPU without native bf16
  // runs fp32, and each step's report says which ran.
  kernels::Precision precision = kernels::Precision::kFp32;
  // As TrainWorkerOptions::pull_fp32: bf16 products pull the dense layers'
  // weights as bf16 unless this is set.
  bool pull_fp32 = false;
  // The data as the job was submitted with (empty: not checked).
  std::vector<io::ExpectedFile> expected_files;
  int64_t chunk_bytes = 2 << 20;      // 1-4 MB per StageChunk
  // The defaults and their relations: common/timeouts.h.
  absl::Duration send_timeout = kStageSendTimeout;
  absl::Duration recv_timeout = kStageRecvTimeout;  // longest wait for a peer
  absl::Duration probe_interval = kStageProbeInterval;
  absl::Duration probe_timeout = kStageProbeTimeout;
  // How long a peer that refuses a send as UNAVAILABLE, or does not answer
  // the probes while this stage waits for it, is given before it counts as
  // lost (it may be between two starts of its part, or started with other
  // stage addresses: the replica's stages start a step again together when
  // one of them is replaced).
  absl::Duration peer_restart_wait = kPeerRestartWait;
  int64_t log_every = 10;
  std::ostream* log = nullptr;  // JSON lines; null: quiet
  // Run(): called after each step; Run() stops with CANCELLED at the next
  // step once *cancel is true.
  std::function<void(const struct StageStepReport&)> on_step;
  // Run(): called once with the step it starts at (the shards' version),
  // before that step; an error ends Run() with it.
  std::function<absl::Status(int64_t start)> on_start;
  // A stage daemon's one server for all its parts (worker/stage_router.h):
  // the stage is served there, not on `listen` (whose host still names it).
  StageRouter* router = nullptr;
  const std::atomic<bool>* cancel = nullptr;
};

struct StageStepReport {
  int64_t step = 0;
  int64_t version = 0;
  double loss = 0;  // last stage: the replica's share of the global loss
  double wait_ms = 0, pull_ms = 0, schedule_ms = 0, compute_ms = 0,
         push_ms = 0;
  double bubble = 0;  // 1 - compute / schedule time
  kernels::Precision precision = kernels::Precision::kFp32;  // what ran
  int64_t bytes_sent = 0, bytes_received = 0;  // activations and gradients
  int64_t pull_bytes = 0;  // parameter bytes pulled (bf16 pulls: fewer)
  double learning_rate = 0;  // the shards' (PushResponse.learning_rate)
};

// Received activations and gradients by (kind, step, micro-batch).
class StageInbox {
 public:
  using Key = std::tuple<int, int64_t, int>;  // kind, step, micro-batch
  void Put(Key key, std::vector<float> values);
  // Waits for `key` until `deadline`; every `probe_every` calls probe(),
  // whose error ends the wait.
  absl::StatusOr<std::vector<float>> Take(
      Key key, absl::Time deadline, absl::Duration probe_every,
      const std::function<absl::Status()>& probe);
  // Every waiter (and later Take) fails with `status`.
  void Abort(absl::Status status);
  // Drops everything older than `step`.
  void Forget(int64_t step);

 private:
  absl::Mutex mu_;
  std::map<Key, std::vector<float>> items_ ABSL_GUARDED_BY(mu_);
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
};

class PipelineStage {
 public:
  // Connects to the shards, builds the stage and starts its StageService.
  static absl::StatusOr<std::unique_ptr<PipelineStage>> Create(
      const PipelineStageOptions& options);
  ~PipelineStage();

  // Where this stage's StageService listens (host:port).
  std::string address() const;
  // The replica's stage addresses (when not known at Create).
  void SetPeers(std::vector<std::string> peers);
  // The replica's stage addresses, comma-joined (StageTensorHeader.peers).
  std::string PeersKey() ABSL_LOCKS_EXCLUDED(peers_mu_);

  absl::Status Run();
  absl::StatusOr<StageStepReport> Step(int64_t step);
  // Tests: the stage dies (its server stops answering, no Abort is sent).
  void Kill();

  BertStage<float>* stage() { return stage_.get(); }
  PsClient* client() { return client_.get(); }
  int ps_worker() const {
    return options_.plan.SlotOf(options_.replica, options_.stage);
  }

 private:
  class Service;
  explicit PipelineStage(const PipelineStageOptions& options);
  absl::Status ReadBatch(int64_t step);
  // This stage's tensors, through client_ (PsClient::PullInto).
  absl::Status PullOwnTensors(int64_t step, int64_t* payload_bytes);
  absl::Status SendTensor(int to_stage, StageTensorKind kind, int64_t step,
                          int micro_batch, const float* data, int64_t n);
  absl::Status SendTensorOnce(int to_stage, StageTensorKind kind,
                              int64_t step, int micro_batch, const float* data,
                              int64_t n);  // one try of SendTensor
  absl::StatusOr<std::vector<float>> Receive(int from_stage,
                                             StageTensorKind kind,
                                             int64_t step, int micro_batch,
                                             int64_t n);
  // Pings `stage` of this replica; `peer_step`: the step it works on.
  absl::Status Probe(int stage, int64_t* peer_step = nullptr);
  // A failed parameter-server call while a stage of the replica is dead
  // (its push or announcement never comes): names that stage.
  absl::Status NameDeadPeer(absl::Status st);
  void AbortPeers(const absl::Status& why);
  StageService::Stub* Peer(int stage);
  // This member's capability on a call to a peer stage (its router checks
  // it: StageRouter).
  void AddCapability(grpc::ClientContext* ctx) const;

  const PipelineStageOptions options_;
  std::unique_ptr<PsClient> client_;
  kernels::MatmulEngine mm_;
  StageSpec spec_;
  std::unique_ptr<BertStage<float>> stage_;
  std::vector<float> zeros_;  // (largest tensor) for other stages' tensors
  // The job's data by stream position (common/io/record_index.h).
  std::unique_ptr<io::IndexedExampleSource> source_;
  int seq_ = 0, preds_ = 0;
  io::BertBatch batch_;
  StageInbox inbox_;
  std::shared_ptr<Service> service_;
  // service_ as served by options_.router (null: on server_).
  std::shared_ptr<StageRouter::Target> routed_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::atomic<int64_t> current_step_{-1};
  std::atomic<bool> killed_{false};
  std::atomic<int64_t> bytes_sent_{0}, bytes_received_{0};
  absl::Mutex peers_mu_;
  std::vector<std::string> peers_ ABSL_GUARDED_BY(peers_mu_);
  std::vector<std::unique_ptr<StageService::Stub>> stubs_
      ABSL_GUARDED_BY(peers_mu_);
};

}  // namespace bertps

#endif  // BERTPS_WORKER_PIPELINE_STAGE_H_

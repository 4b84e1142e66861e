// PsClient: a worker's connection to every parameter-server shard.
//
// Pull: fetches every shard's slices in parallel straight into a flat buffer
// in the model's ParamLayout. PullAsync returns a handle to wait on (so the
// next step's parameters can be fetched while other work goes on); Pull is
// the synchronous wrapper.
// Push: a PushStream opens one client stream per shard; Send() hands whole
// tensors to per-shard sender threads as soon as backward produced them, so
// communication overlaps the rest of backward; Finish() closes the streams.
// Optional bf16 compression with error feedback (the rounding error of each
// element is carried into the next push).
// Every RPC has a deadline; failures name the shard and its address.
//
// Thread-safety: one step at a time (Pull/Push are not called concurrently
// with each other); internally multi-threaded.
#ifndef BERTPS_COMMON_PS_PS_CLIENT_H_
#define BERTPS_COMMON_PS_PS_CLIENT_H_

#include <atomic>
#include <future>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/status/statusor.h"
#include "common/model/hf_export.h"
#include "absl/time/time.h"
#include "common/model/bert_config.h"
#include "common/model/params.h"
#include "common/security.h"
#include "common/thread_lanes.h"
#include "common/timeouts.h"
#include "proto/ps.grpc.pb.h"
#include "common/capability.h"
#include "common/ps/call_canceller.h"
#include "common/ps/stall_watch.h"
#include "common/ps/wire.h"
#include "common/ps/partition.h"

namespace bertps {

struct PsClientOptions {
  std::vector<std::string> addresses;  // shard i at index i
  // The defaults and their relations: common/timeouts.h.
  absl::Duration rpc_timeout = kPsRpcTimeout;
  absl::Duration connect_timeout = kPsConnectTimeout;
  bool compress_bf16 = false;
  SecurityConfig security;  // TLS and bearer token (common/security.h)
  // The job incarnation every call names (0: none); shards of another
  // incarnation answer ABORTED.
  int64_t incarnation = 0;
  // The shards' layout every call names (ps::kLayoutMetadata; 0: none).
  int64_t layout = 0;
  // A coordinator's job: its id and the incarnation's key, named on every
  // call (ps::kJobMetadata, kJobKeyMetadata; Assignment.job_key). Empty:
  // shards run on their own.
  std::string job_id;
  std::string job_key;
  // The member's capability (Assignment.capability, renewed on each
  // heartbeat), named on every call (kCapabilityMetadata). Null or empty:
  // none.
  std::shared_ptr<const CapabilityHolder> capability;
  // Provenance the checkpoint manifests record: the SHA-256 of the job
  // spec's text form (empty: none).
  std::string spec_sha256;
  // Set: Connect stops waiting for the shards (CANCELLED), and every call
  // in flight or made after is cancelled within ~100 ms (a part told to
  // stop does not wait out a call to a shard that stopped answering).
  const std::atomic<bool>* cancel = nullptr;
  // Pull: per shard, a thread of its own copies the received chunks into
  // the parameters while the shard's reading thread goes back to the socket
  // (common/handoff.h). Unset: when there are at most as many shards as
  // cores (docs/ps.md, Overlap 9); with more, the reading threads alone
  // keep the cores busy.
  std::optional<bool> pull_copy_thread;
  // HTTP/2 receive window of each shard's stream, in bytes. 0: gRPC's
  // (it grows with its bandwidth-delay probes). Unset: fixed at
  // kFixedPullWindowBytes when the reading thread copies (no
  // pull_copy_thread), else gRPC's. A reading thread that also copies
  // drains the socket in bursts; the probes then grew the windows, the
  // shards sent far ahead, and the worker grew its receive buffers by
  // hundreds of MB it had to touch first (docs/ps.md, Overlap 10).
  std::optional<int> pull_window_bytes;
  // A pull stream that has sent its version but then nothing more for this
  // long is cancelled and fails UNAVAILABLE, naming how far it got (its
  // connection half-open, or its stream window never reopened): the caller
  // retries now instead of at rpc_timeout. 0: never.
  absl::Duration pull_stall_timeout = kPullStallTimeout;
  // The same for a push: a stream write (one message, about a MB) still
  // waiting this long for the shard to take it is cancelled, and the push
  // fails UNAVAILABLE naming how far it got (a push is retried and applied
  // once). Only a write in progress is timed: waiting for backward's
  // gradients, or for the step's answer once everything is written, is
  // not. A BSP shard holds a push that follows a version still being made
  // until it is (milliseconds, unless that update is itself stuck); a hold
  // longer than this counts as a stall and the push is retried. 0: never.
  absl::Duration push_stall_timeout = kPushStallTimeout;
  // HTTP/2 keepalive pings while a call is open (ps::kKeepaliveTimeMs; 0:
  // none): a connection whose shard end is gone or frozen fails its calls
  // UNAVAILABLE about this plus min(this, 20 s) later.
  absl::Duration keepalive = absl::Milliseconds(ps::kKeepaliveTimeMs);
  // StartPull and PullInto (a step's pulls) ask the shards for the tensors
  // the model reads only as matrix products' operands in bf16
  // (PullRequest.bf16_products; ParamSpec::product_only): for a worker
  // whose products run in bf16, the same results from about half the bytes
  // of those tensors. Pull, PullAsync and Export always pull fp32.
  bool pull_bf16_products = false;
  // Called (on the calling thread) with each UNAVAILABLE a shard's pull,
  // push or announce ends in: a shard unreachable, perhaps gone. A member
  // tells the coordinator at once, which probes the shards instead of
  // waiting out their member timeout. Null: not told.
  std::function<void(const absl::Status&)> on_unavailable;
};

// PsClientOptions::pull_window_bytes, when fixed by default.
inline constexpr int kFixedPullWindowBytes = 32 << 20;

class PsClient {
 public:
  class PushStream;
  class PendingPull;

  // Connects and checks that every shard serves the same model and plan.
  static absl::StatusOr<std::unique_ptr<PsClient>> Connect(
      const PsClientOptions& options, const BertConfig& config, BertTask task);
  ~PsClient();

  const ParamLayout& layout() const { return layout_; }
  const ps::PartitionPlan& plan() const { return plan_; }
  const DescribeResponse& description(int shard) const { return described_[shard]; }
  int num_shards() const { return static_cast<int>(stubs_.size()); }
  // Whether pulls copy on threads of their own (PsClientOptions).
  bool pull_copy_thread() const { return pull_copy_thread_; }
  // PsClientOptions::pull_window_bytes, resolved (0: gRPC's).
  int pull_window_bytes() const { return pull_window_bytes_; }
  // Pull and push streams cancelled for a stall so far.
  int64_t pull_stalls() const { return pull_stalls_.load(); }
  int64_t push_stalls() const { return push_stalls_.load(); }

  // Parameters of version >= min_version (BSP) / allowed for `step` (SSP)
  // into params (layout order). Returns the version (all shards agree under
  // BSP; the smallest otherwise).
  absl::StatusOr<int64_t> Pull(int worker, int64_t min_version, int64_t step,
                               float* params);
  std::future<absl::StatusOr<int64_t>> PullAsync(int worker,
                                                 int64_t min_version,
                                                 int64_t step, float* params);
  // Starts a pull whose parameters can be read while the rest arrives
  // (PendingPull::Wait). `first`: rows of one tensor every shard sends
  // before anything else (e.g. the word-embedding rows of the next batch).
  // params must stay untouched by others until Finish().
  std::unique_ptr<PendingPull> StartPull(int worker, int64_t min_version,
                                         int64_t step, float* params,
                                         const TensorRows* first = nullptr);
  // Pulls only some tensors, each to a place of its own: dest[t] (one per
  // layout tensor) receives tensor t's elements in order; null: not pulled
  // (the request names only the wanted tensors, and a shard holding none of
  // them is not asked). E.g. a pipeline stage's own layers into its local
  // buffer. Returns the version, as Pull; `payload_bytes` (if set): the
  // tensor bytes received (PendingPull::payload_bytes).
  absl::StatusOr<int64_t> PullInto(int worker, int64_t min_version,
                                   int64_t step,
                                   const std::vector<float*>& dest,
                                   int64_t* payload_bytes = nullptr);

  // Starts a push of one step's gradient.
  absl::StatusOr<std::unique_ptr<PushStream>> BeginPush(const PushHeader& header);
  // The whole gradient (layout order) in one call, with retries of failed
  // shards (a retried push is recognised by the shard and applied once).
  absl::StatusOr<int64_t> Push(const PushHeader& header, const float* grads);
  // The learning rate the shards apply in the update the last finished push
  // took part in (shard 0's PushResponse.learning_rate: every shard's plan
  // gives the same rate for an update; 0 when unknown).
  double last_push_learning_rate() const {
    return last_push_learning_rate_.load();
  }

  absl::StatusOr<AnnounceResponse> Announce(const AnnounceRequest& request);
  // Several announces (one per worker slot: a member computing several
  // slots) in flight together, since shard 0 answers none before every
  // slot's batch is announced; the answers in the requests' order.
  absl::StatusOr<std::vector<AnnounceResponse>> AnnounceAll(
      const std::vector<AnnounceRequest>& requests);
  // Checkpoint of `version` on every shard, then the manifest. Returns the
  // manifest path.
  absl::StatusOr<std::string> Checkpoint(const std::string& dir,
                                         int64_t version);
  // A checkpoint in two halves, so that the step goes on while the files
  // are written (CheckpointRequest.START / COLLECT): StartCheckpoint has
  // every shard copy its state of `version` (what the step waits for);
  // FinishCheckpoint waits until every shard's file is durable, then writes
  // the manifest and moves LATEST (the checkpoint is complete only then),
  // and returns the manifest's path. FinishCheckpoint may run on another
  // thread than the step's, while steps go on (it uses none of the step's
  // lanes). An error of a shard's write is its error; NotFound when a shard
  // was replaced meanwhile (the checkpoint is lost: the previous one stays
  // the newest).
  struct PendingCheckpoint {
    std::string dir;
    int64_t version = 0;
    std::string example_ledger;  // of the version (shard 0's)
    double copy_ms = 0;          // the slowest shard's copy
  };
  absl::StatusOr<PendingCheckpoint> StartCheckpoint(const std::string& dir,
                                                    int64_t version);
  // `write_ms` (may be null): the slowest shard's write. `before_manifest`
  // (may be empty) runs once every file is durable (crash points).
  absl::StatusOr<std::string> FinishCheckpoint(
      const PendingCheckpoint& p, double* write_ms = nullptr,
      const std::function<void()>& before_manifest = nullptr);
  // Checkpoint(dir, version) written again by a part started at `version`
  // (BSP), unless the shards are already past it (nullopt): then another
  // member of its slot pushed that step, and wrote the checkpoint first.
  // With `pusher` (the worker index the part pushes as), also nothing when
  // a shard already holds that worker's push of step `version`
  // (StatsResponse.last_step): the member that pushed it wrote the
  // checkpoint before it pushed. After a failover such a shard may be
  // inside that step, its norm exchange waiting for the promoted peer,
  // which waits for this part to push the step again: the checkpoint would
  // wait for that shard, and the part would never push.
  absl::StatusOr<std::optional<std::string>> CheckpointUnlessPast(
      const std::string& dir, int64_t version, int pusher = -1);
  // StartCheckpoint, unless the shards are already past `version`.
  absl::StatusOr<std::optional<PendingCheckpoint>> StartCheckpointUnlessPast(
      const std::string& dir, int64_t version);
  absl::Status Restore(const std::string& manifest);
  absl::StatusOr<std::vector<StatsResponse>> Stats();
  // Pulls the latest parameters and writes them as Hugging Face safetensors,
  // or, where `path` does not end in .safetensors, as a Hugging Face model
  // directory (common/model/hf_export.h) with `hf`'s labels and vocabulary.
  absl::Status Export(const std::string& path,
                      const HfExportOptions& hf = HfExportOptions());
  // Threads started for pulls, copies, pushes and checkpoints so far: a
  // lane per shard for each, once, plus any extra ones (ThreadLanes).
  int64_t threads_started() const;

 private:
  PsClient(const PsClientOptions& options, const BertConfig& config,
           BertTask task, ParamLayout layout, ps::PartitionPlan plan);
  // dest: where each layout tensor goes (null: not asked of the shard).
  absl::Status PullShard(int shard, const PullRequest& request,
                         grpc::ClientContext* ctx,
                         const std::vector<float*>& dest, int64_t* version,
                         PendingPull* progress);
  // bf16: PullRequest.bf16_products.
  std::unique_ptr<PendingPull> StartPullInto(int worker, int64_t min_version,
                                             int64_t step,
                                             std::vector<float*> dest,
                                             const TensorRows* first,
                                             bool bf16);
  // Every layout tensor's place in the flat buffer `params`.
  std::vector<float*> AllTensorsIn(float* params) const;
  absl::Status PushShard(int shard, const PushHeader& header,
                         const float* grads);
  grpc::ClientContext* NewContext(grpc::ClientContext* ctx) const;
  // Whether a shard's version is past `version`.
  absl::StatusOr<bool> ShardsPast(int64_t version);
  // Checkpoint of `version` in `mode` on every shard at once (the lanes).
  absl::StatusOr<std::vector<CheckpointResponse>> CheckpointCall(
      const std::string& dir, int64_t version, CheckpointRequest::Mode mode);
  // The manifest of `version` naming files[i] for shard i; then LATEST.
  absl::StatusOr<std::string> WriteCheckpointManifest(
      const std::string& dir, int64_t version, const std::string& ledger,
      const std::vector<CheckpointResponse>& files);
  // Tells options_.on_unavailable of `st` when it is UNAVAILABLE.
  void NoteUnavailable(const absl::Status& st) const {
    if (st.code() == absl::StatusCode::kUnavailable && options_.on_unavailable) {
      options_.on_unavailable(st);
    }
  }

  const PsClientOptions options_;
  const BertConfig config_;
  const BertTask task_;
  const ParamLayout layout_;
  const ps::PartitionPlan plan_;
  bool pull_copy_thread_ = false;  // options_.pull_copy_thread, resolved
  int pull_window_bytes_ = 0;      // options_.pull_window_bytes, resolved
  std::vector<std::unique_ptr<ParameterServer::Stub>> stubs_;
  // Pull and Push run on raw byte buffers over these (common/ps/chunk_codec.h).
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<DescribeResponse> described_;
  std::vector<float> residual_;  // bf16 error feedback (layout order)
  // Cancels the calls in flight once options_.cancel is set. Outlives the
  // lanes (declared before them), whose tasks register calls.
  std::unique_ptr<ps::CallCanceller> canceller_;
  // Cancels pull streams that stopped (options_.pull_stall_timeout).
  std::unique_ptr<ps::StallWatch> stall_watch_;
  std::atomic<int64_t> pull_stalls_{0}, push_stalls_{0};
  std::atomic<double> last_push_learning_rate_{0};
  // Long-lived threads, a lane per shard: pull streams, their copiers, push
  // senders and checkpoint calls (no thread is created per step). Last:
  // they stop, waiting for their tasks, before the channels go.
  std::unique_ptr<ThreadLanes> pull_lanes_, copy_lanes_, push_lanes_;
};

class PsClient::PendingPull {
 public:
  ~PendingPull();  // cancels the pull if not finished
  // Waits until every element of the layout tensors `tensors` arrived and,
  // with first_rows, the rows asked first; the pull's error if it failed.
  absl::Status Wait(const std::vector<int>& tensors, bool first_rows)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for all of it; the version (as Pull).
  absl::StatusOr<int64_t> Finish();
  // After Finish(): the version each shard sent (-1: not asked).
  const std::vector<int64_t>& versions() const { return versions_; }
  // Payload bytes received so far (tensor data, as sent: bf16 or fp32).
  int64_t payload_bytes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class PsClient;
  PendingPull() = default;
  // Elements (and asked-first rows) of `tensor` arrived; a shard finished.
  void Arrived(int tensor, int64_t elements, int64_t first_rows,
               int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  void ShardDone(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  const ParamLayout* layout_ = nullptr;
  ps::CallCanceller* canceller_ = nullptr;  // the client's
  int first_tensor_ = -1;             // tensor of the rows asked first
  std::vector<uint8_t> first_mask_;   // per row of it: asked first
  int64_t first_wanted_ = 0;          // rows asked first
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts_;  // per shard
  std::vector<std::shared_ptr<absl::Notification>> done_;  // per shard task
  std::vector<absl::Status> status_;  // per shard, written by its thread
  std::vector<int64_t> versions_;     // per shard, written by its thread
  std::vector<float*> dest_;          // per layout tensor (null: not pulled)
  bool finished_ = false;
  mutable absl::Mutex mu_;
  std::vector<int64_t> received_ ABSL_GUARDED_BY(mu_);  // per tensor
  int64_t payload_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t first_received_ ABSL_GUARDED_BY(mu_) = 0;
  int shards_left_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

class PsClient::PushStream {
 public:
  ~PushStream();
  // Queues the gradient of layout tensor `tensor` for sending; `grad` must
  // stay valid until Finish().
  void Send(int tensor, const float* grad);
  // Queues some rows of it only: `rows` (sorted, unique), or with
  // except=true all its other rows. Each row must be sent exactly once.
  void SendRows(int tensor, const float* grad,
                std::shared_ptr<const std::vector<int64_t>> rows, bool except);
  // Tells every shard the rows this worker will pull first next step
  // (PushRequest.next_first), so that they update those first.
  void SendNextFirst(const TensorRows& rows);
  // Ends the streams (every queued tensor written); the shards may then
  // complete the step. Finish() does it when not done yet.
  void CloseWrites();
  // Closes every stream; returns the smallest version the shards reported.
  absl::StatusOr<int64_t> Finish();

 private:
  friend class PsClient;
  struct Shard;
  PsClient* client_ = nullptr;
  PushHeader header_;
  std::vector<std::unique_ptr<Shard>> shards_;
  bool closed_ = false;
};

}  // namespace bertps

#endif  // BERTPS_COMMON_PS_PS_CLIENT_H_

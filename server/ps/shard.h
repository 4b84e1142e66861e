// ShardCore: the transport-free logic of one parameter-server shard.
//
// Holds this shard's slices of the model (PartitionPlan) and their optimizer
// state, takes gradient pushes from workers and applies the server-side
// optimizer under one of three consistency modes:
//   BSP  a step's update is applied once the pushes of all expected workers
//        for that step arrived (or the first N - backup of them); gradients
//        are summed in worker order, so the result does not depend on arrival
//        order. Workers compute their gradients with the global batch's loss
//        denominators (Announce), so the sum equals one big batch's gradient.
//   ASP  every push is applied as it comes.
//   SSP  ASP, but a worker's pull for step t waits until every worker has
//        pushed step t - staleness - 1.
// Every push carries (worker, step); a retried push is recognised and not
// applied again. A push is validated completely (names, ranges, dtype,
// coverage, finiteness) in a staging buffer before it touches any state.
//
// Global-norm clipping and LAMB's per-tensor norms need sums over all
// shards: under BSP the shards exchange their partial sums for each step
// through a PeerLink (summed in shard order, so every shard computes the
// same value bit for bit); ASP/SSP pushes carry their own gradient's squared
// norm and LAMB uses per-slice norms there (documented in docs/ps.md).
//
// Pulls read immutable snapshots: each applied step publishes a copy of the
// parameters, so a pull streams one consistent version without blocking
// updates.
//
// Thread-safety: all methods are thread-safe. Updates are serialised.
#ifndef BERTPS_SERVER_PS_SHARD_H_
#define BERTPS_SERVER_PS_SHARD_H_

#include <atomic>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/io/file_util.h"
#include "common/serial_thread.h"
#include "common/timeouts.h"
#include "common/waitlist.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/aligned_vector.h"
#include "common/cluster/job_plan.h"
#include "common/crash_point.h"
#include "common/huge_buffer.h"
#include "common/memory_limit.h"
#include "common/model/bert_config.h"
#include "common/model/params.h"
#include "common/optim/optimizer.h"
#include "proto/ps.pb.h"
#include "server/ps/checkpoint_writer.h"
#include "common/ps/chunk_ref.h"
#include "common/ps/example_ledger.h"
#include "common/ps/partition.h"
#include "unsupported/Eigen/CXX11/ThreadPool"

namespace bertps {
namespace ps {

struct ShardOptions {
  int shard = 0;
  int num_shards = 1;
  BertConfig config;
  BertTask task = BertTask::kPretrain;
  // The update rule (kind, betas, decay, clipping). Its learning-rate
  // fields are the plan's (ShardCore::Create refuses others): the rate of
  // each update is job_plan.LearningRateAt(update).
  optim::OptimizerConfig optimizer;
  // The job's plan (common/cluster/job_plan.h): the consistency mode, the
  // workers (job_plan.pushers: every slot pushes as a worker of its own),
  // the update ticket of a worker's step, the learning rate of an update
  // and, under ASP/SSP with checkpoints, the consistent cuts: the shard
  // applies the tickets below the next cut k (JobPlan::NextCut), holds
  // later ones until the checkpoint of version k is written, then goes on,
  // so every shard's version k holds the same k pushes.
  JobPlan job_plan;
  int backup_workers = 0;  // BSP: a step completes with N - backup pushes
  int64_t staleness = 0;   // SSP bound
  uint64_t init_seed = 12345;
  // Checkpoint files are written through it (null: io::DefaultFileSystem();
  // tests inject faults). Not owned.
  io::FileSystem* fs = nullptr;
  // The memory this shard may use (bytes 0: DetectMemoryLimit()); a slice
  // whose estimate does not fit is refused before anything is allocated.
  MemoryLimit memory_limit;
  // Safetensors (Hugging Face names) or a checkpoint manifest whose tensors
  // replace the seeded initial values; a missing task head keeps them.
  std::string init_weights;
  // The longest server wait (common/timeouts.h).
  absl::Duration wait_timeout = kShardWaitTimeout;
  // Which start of the job this install is (the coordinator's count; 0 for
  // a shard run on its own). Requests naming another are refused.
  int64_t incarnation = 0;
  // The job served (empty for a shard run on its own). A shard of a job
  // serves only calls naming it, its incarnation and its key (ps::wire.h
  // kJobMetadata, kJobKeyMetadata); peer calls (Exchange, Replicate,
  // InstallSnapshot) also the shard key. Checkpoint calls write only under
  // checkpoint_dir; Restore calls read only a manifest under it or
  // restore_manifest.
  std::string job_id;
  std::string job_key;
  std::string shard_key;
  std::string checkpoint_dir;
  std::string restore_manifest;
  // Threads of an optimizer step: the slices are split in a fixed way, and
  // each slice's update is element-wise, so any count gives the same bits.
  int update_threads = 2;
  // BSP with next-pull hints: once the rows asked first are updated, the
  // rest of the step's update runs this many nice levels lower (0:
  // unchanged; at most nice 19), below
  // the threads that serve pulls and pushes. Forward reads those pieces
  // later; on a host shared with workers the transfers go first.
  int update_nice = 10;
  // Pushes are staged with non-temporal stores when this shard's staging
  // buffer (its share of the model, fp32) has at least this many bytes: far
  // more than the cache holds, so the update reads it from memory anyway and
  // writing it around the cache saves reading its old lines in first.
  // Smaller shards' staging stays in cache for the update. The values are
  // the same either way.
  int64_t stream_staging_bytes = int64_t{64} << 20;
  // Replication (docs/ps.md "Replicas"). A backup applies only the
  // ReplicaSteps of its primary and refuses pulls, pushes, announces and
  // exchanges until Promote(); `term` numbers the primaries of this shard
  // index (a backup refuses steps of a lower term, which fences a deposed
  // primary).
  bool backup = false;
  int64_t term = 0;
};

// Delivers a primary's applied updates to its backups (their Replicate RPC).
class ReplicaLink {
 public:
  virtual ~ReplicaLink() = default;
  // Whether any backup is live (a primary without one publishes its
  // versions as soon as they are made).
  virtual bool Active() const = 0;
  // Sends one applied update to every live backup and waits for their
  // acknowledgements. OK once each live backup applied it; a backup that
  // cannot be reached or is behind is dropped (reported, no longer waited
  // for). ABORTED when a backup knows a newer term: this primary was
  // replaced and must apply and serve nothing more.
  virtual absl::Status Replicate(const ReplicaStep& step, const float* grad,
                                 absl::Time deadline) = 0;
  // Backups live now (Stats).
  virtual int LiveBackups() const = 0;
};

// What fixes an optimizer step's norms besides the gradient: found by the
// primary (exchanged with its peer shards under BSP), given to its backups.
struct StepNorms {
  std::optional<double> grad_sq;              // global squared norm
  std::optional<std::vector<double>> lamb;    // LAMB split-tensor totals
};

// Delivers this shard's partial sums to a peer shard (its Exchange RPC).
class PeerLink {
 public:
  virtual ~PeerLink() = default;
  // Gives up (ABORTED) once *stop is set, if given.
  virtual absl::Status Send(int to_shard, const ExchangeRequest& request,
                            absl::Time deadline,
                            const std::atomic<bool>* stop) = 0;
  // The same to every shard in `to`; the first error (in `to`'s order).
  // This default sends one after the other; a link over a network sends to
  // all at once, so a step waits one round trip, not one per peer.
  // `replies` (optional) gets each peer's answer, in `to`'s order.
  virtual absl::Status SendAll(const std::vector<int>& to,
                               const ExchangeRequest& request,
                               absl::Time deadline,
                               const std::atomic<bool>* stop,
                               std::vector<ExchangeResponse>* replies = nullptr) {
    if (replies != nullptr) replies->assign(to.size(), ExchangeResponse());
    for (int peer : to) {
      absl::Status st = Send(peer, request, deadline, stop);
      if (!st.ok()) {
        return absl::Status(st.code(), absl::StrCat("shard ", peer, ": ",
                                                    st.message()));
      }
    }
    return absl::OkStatus();
  }
};

// One version of this shard's parameters. Published whole, or (BSP, when
// the workers sent PushRequest.next_first) while the update that makes it
// still runs: then rows of `first_tensor` are final first, and the local
// slices in ShardCore::update_order() one after the other.
struct Snapshot {
  static constexpr int kAllSlices = 1 << 30;
  int64_t version = 0;
  AlignedVector<float> params;  // (shard_size)
  // Set before the snapshot is shared, immutable after: the rows updated
  // first (sorted), of tensor first_tensor (-1: none).
  int first_tensor = -1;
  std::vector<int64_t> first_rows;

  // Wait (until deadline) for the first rows / the first `count` slices of
  // the update order; the update's error if it failed.
  absl::Status WaitFirst(absl::Time deadline) const ABSL_LOCKS_EXCLUDED(mu);
  absl::Status WaitSlices(int count, absl::Time deadline) const
      ABSL_LOCKS_EXCLUDED(mu);
  bool Complete() const ABSL_LOCKS_EXCLUDED(mu);
  // Whether WaitSlices(count) / WaitFirst() would return now.
  bool SlicesReady(int count) const ABSL_LOCKS_EXCLUDED(mu);
  bool FirstReady() const ABSL_LOCKS_EXCLUDED(mu);

  mutable absl::Mutex mu;
  bool first_done ABSL_GUARDED_BY(mu) = true;
  int slices_done ABSL_GUARDED_BY(mu) = kAllSlices;
  absl::Status failed ABSL_GUARDED_BY(mu);
};

class ShardCore {
 public:
  // One in-flight push: its staging buffer and per-slice coverage.
  class PushSession {
   public:
    PushHeader header;
    bool duplicate = false;
    AlignedVector<float> grad;  // (shard_size) staged gradient
    std::vector<int64_t> next;  // per local slice: next element expected
    // Per local slice taking row chunks instead: rows received (a flag per
    // row of the slice, sized at the first row chunk) and their count.
    std::vector<std::vector<uint8_t>> row_seen;
    std::vector<int64_t> rows_done;
    int64_t bytes = 0;
    // PushRequest.next_first (tensor index, -1: none; sorted rows).
    int next_first_tensor = -1;
    std::vector<int64_t> next_first_rows;
  };

  // `peers` may be null when num_shards == 1; it must outlive the core.
  // `replicas` (may be null: no backups) must outlive the core too.
  static absl::StatusOr<std::unique_ptr<ShardCore>> Create(
      const ShardOptions& options, PeerLink* peers,
      ReplicaLink* replicas = nullptr);
  ~ShardCore();

  const ShardOptions& options() const { return options_; }
  const JobPlan& job_plan() const { return options_.job_plan; }
  const ParamLayout& layout() const { return layout_; }
  const PartitionPlan& plan() const { return plan_; }
  int64_t shard_size() const { return plan_.shard_size(options_.shard); }
  // Whether pushes are staged with non-temporal stores
  // (ShardOptions::stream_staging_bytes).
  bool StreamStaging() const {
    return shard_size() * static_cast<int64_t>(sizeof(float)) >=
           options_.stream_staging_bytes;
  }
  // Indices into plan().slices() of this shard's slices.
  const std::vector<int>& local_slices() const {
    return plan_.shard_slices(options_.shard);
  }
  // The local slices in the order an update makes them final and a pull
  // sends them: forward's order, with the word embedding (read last, by the
  // tied decoder) at the end.
  const std::vector<int>& update_order() const { return update_order_; }
  int64_t version() const;
  DescribeResponse Describe() const;

  // Waits (until `deadline`) for the parameters a pull may read: version
  // >= min_version (every mode; BSP also a snapshot being made), and under
  // SSP every worker's clock >= step - staleness; then the latest. Fails
  // fast if the shard is broken.
  absl::StatusOr<std::shared_ptr<const Snapshot>> AcquireSnapshot(
      int worker, int64_t min_version, int64_t step, absl::Time deadline);

  // Push protocol: BeginPush(header), AddChunk()*, FinishPush(). A session
  // for a duplicate push validates but applies nothing.
  absl::StatusOr<std::unique_ptr<PushSession>> BeginPush(
      const PushHeader& header);
  absl::Status AddChunk(PushSession* session, const TensorChunk& chunk);
  // The same for a chunk whose payload lies in received transport buffers:
  // copied once, straight into the staging buffer.
  absl::Status AddChunk(PushSession* session, const ChunkRef& chunk);
  // PushRequest.next_first of a push (checked: a known tensor, increasing
  // rows in range; at most once).
  absl::Status SetNextFirst(PushSession* session, const TensorRows& rows);
  // Row chunks of a tensor (any order, each row once) may cover a slice
  // instead of range chunks; one slice takes one kind only.
  absl::StatusOr<PushResponse> FinishPush(std::unique_ptr<PushSession> session,
                                          absl::Time deadline);

  // BSP batch totals (shard 0 serves them).
  absl::StatusOr<AnnounceResponse> Announce(const AnnounceRequest& request,
                                            absl::Time deadline);

  // The calls above that wait, without a thread per waiting call (the
  // gRPC service's reactors use them): `done` gets what the call would have
  // returned. It runs on the caller's thread when the result is known at
  // once, else on the shard's waitlist thread (or, for FinishPushAsync, the
  // thread that finishes pushes); it must not block.
  template <typename T>
  using Done = std::function<void(absl::StatusOr<T>)>;
  void AcquireSnapshotAsync(int worker, int64_t min_version, int64_t step,
                            absl::Time deadline,
                            Done<std::shared_ptr<const Snapshot>> done);
  void AnnounceAsync(const AnnounceRequest& request, absl::Time deadline,
                     Done<AnnounceResponse> done);
  void BeginPushAsync(const PushHeader& header,
                      Done<std::unique_ptr<PushSession>> done);
  // Runs FinishPush on the shard's push-finishing thread (after, for an
  // ASP/SSP push held by a checkpoint cut, a wait on the waitlist): the
  // update it may apply never runs on a transport thread.
  void FinishPushAsync(std::unique_ptr<PushSession> session,
                       absl::Time deadline, Done<PushResponse> done);
  // snap->WaitFirst() (count < 0) or snap->WaitSlices(count), without a
  // thread.
  void WaitSnapshotAsync(std::shared_ptr<const Snapshot> snap, int count,
                         absl::Time deadline,
                         std::function<void(absl::Status)> done);
  // Calls waiting now, and the waitlist's count of state changes found only
  // by its poll (0 unless a change forgot to poke it).
  int64_t waiting_calls() const { return waits_->waiting(); }
  int64_t missed_pokes() const { return waits_->missed_pokes(); }
  // A peer's partial sums for (version, phase). `reply` (optional) gets
  // this shard's own for the same key when it has them (in progress, or
  // among the last few it sent).
  absl::Status ReceiveExchange(const ExchangeRequest& request,
                               ExchangeResponse* reply = nullptr);

  // Writes this shard's slices and optimizer state after exactly `version`
  // steps (waits for it; FailedPrecondition when already past). Updates
  // wait only while the state is copied at the boundary; the file is
  // written by writer_ (server/ps/checkpoint_writer.h), and `mode`
  // (CheckpointRequest.Mode) says whether the call waits for it.
  absl::StatusOr<CheckpointResponse> Checkpoint(
      const std::string& dir, int64_t version, absl::Time deadline,
      CheckpointRequest::Mode mode = CheckpointRequest::WAIT);
  // Cuts that waited for the previous checkpoint's write.
  int64_t checkpoint_waits() const { return writer_->waited(); }
  // Restores from a checkpoint manifest (any number of shards).
  // `new_phase` (checkpoint.restore_as NEW_PHASE): the parameters and,
  // unless `reset_optimizer`, the optimizer state are the checkpoint's; the
  // version, the workers' clocks and the example ledger start at 0. Returns
  // the version the shard is at.
  absl::StatusOr<int64_t> Restore(const std::string& manifest,
                                  bool new_phase = false,
                                  bool reset_optimizer = false);

  StatsResponse Stats() const;

  // Replication (shard_replica.cc). A backup applies its primary's update
  // of version step.version() (grad: shard_size() floats): the same bits as
  // the primary's. A step already applied is a duplicate (OK); one past the
  // next is FAILED_PRECONDITION (the backup is behind); a lower term than
  // this core's is ABORTED (its sender was replaced).
  absl::StatusOr<ReplicateResponse> ApplyReplicated(const ReplicaStep& step,
                                                    const float* grad,
                                                    absl::Time deadline);
  // A backup becomes the primary of `term` (> its term): it serves from its
  // current version on. FAILED_PRECONDITION if not a backup or term too low.
  absl::Status Promote(int64_t term);
  bool backup() const;
  int64_t term() const;
  // Re-replication (shard_join.cc). A primary's whole state at its current
  // version, copied between two steps: header plus data (parameters, then
  // the optimizer state in this core's layout). `begin(version)` runs while
  // no step can start (the update lock held): whoever it registers sees
  // every step applied after the copy (ReplicaLink::Replicate).
  struct JoinSnapshot {
    SnapshotHeader header;
    HugeBuffer data;
  };
  absl::StatusOr<JoinSnapshot> SnapshotForJoin(
      const std::function<void(int64_t version)>& begin);
  // A backup takes a primary's snapshot as its whole state (data as
  // above); the primary's steps since then follow as ReplicaSteps. Refused
  // (nothing changed) unless this core is a backup of the same incarnation
  // and term at least its own, the sizes and the checksum match, and the
  // clocks are in range.
  absl::StatusOr<int64_t> InstallSnapshot(const SnapshotHeader& header,
                                          const float* data);
  // The header's part of those checks (before any data is received).
  absl::Status CheckSnapshotHeader(const SnapshotHeader& header) const;
  // The layout of the job's shards this core knows (ps::kLayoutMetadata).
  // A later one answers every call waiting now (ABORTED: their workers go
  // on against the new layout; a pushed gradient a lost primary held is
  // pushed again).
  void NewShardLayout(int64_t layout);
  int64_t shard_layout() const;

  // Ends this install: every waiting and later call fails with `why` (the
  // job left the shard or was installed again).
  void Abort(const absl::Status& why);

 private:
  // The checkpoint of (dir, version) once its file is durable (WAIT).
  absl::StatusOr<CheckpointResponse> Durable(const std::string& dir,
                                             int64_t version,
                                             absl::Time deadline);
  explicit ShardCore(const ShardOptions& options, PeerLink* peers,
                     ReplicaLink* replicas, ParamLayout layout,
                     PartitionPlan plan);
  // Create's allocations and threads (std::bad_alloc, std::system_error
  // when the process is short of memory; Create turns them into errors).
  static absl::StatusOr<std::unique_ptr<ShardCore>> Make(
      const ShardOptions& options, PeerLink* peers, ReplicaLink* replicas,
      ParamLayout layout, PartitionPlan plan);
  // The plan's consistency mode, and the workers that push (its slots).
  ConsistencyMode mode() const { return options_.job_plan.mode; }
  int workers() const { return options_.job_plan.pushers; }
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, update_mu_);
  // AcquireSnapshot's condition: a pull of `step` needing `min_version`
  // may read now (or the shard is broken).
  bool SnapshotReadyLocked(int64_t min_version, int64_t step) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // BeginPush's condition: a push of `step` is not for a version being made.
  bool PushMayBeginLocked(int64_t step) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // BeginPush, waiting for PushMayBeginLocked until `made_deadline` at most.
  absl::StatusOr<std::unique_ptr<PushSession>> BeginPushUntil(
      const PushHeader& header, absl::Time made_deadline);
  // Announce in two parts: the request recorded (validated), then the totals
  // once every worker's is in (until `deadline`).
  absl::Status RecordAnnounce(const AnnounceRequest& request);
  bool AnnouncesCompleteLocked(int64_t step) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::StatusOr<AnnounceResponse> AnnounceTotals(int64_t step,
                                                  absl::Time deadline);
  // then(OK) now if ready(), else once it is (on the waitlist's thread) or
  // at `deadline`; then(ABORTED) when the shards' layout changed meanwhile
  // (NewLayout).
  void WhenReady(std::function<bool()> ready, absl::Time deadline,
                 std::function<void(absl::Status)> then);
  int64_t relayouts() const;
  // The answer of a call that waited since `relayouts` when the layout has
  // changed since (ABORTED), else OK.
  absl::Status Relayout(int64_t relayouts) const;
  // OK while this core serves: not broken, not a backup.
  absl::Status CheckAlive() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Sends one update to the backups (when any is live): FULL (grad and
  // norms), STAGE (grad, no norms) or COMMIT (norms only). An error means
  // this primary was replaced. Holds update_mu_ (grad is read).
  absl::Status ReplicateStep(ReplicaStep::Kind kind, int64_t version,
                             const float* grad, float grad_scale,
                             const StepNorms* norms,
                             const std::vector<int>& workers,
                             const std::vector<int64_t>& steps,
                             const std::vector<std::pair<int64_t, int64_t>>&
                                 examples,
                             absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // A backup's: applies `s` (its workers' pushes) with `grad` and norms.
  absl::Status ApplyReplicaLocked(const ReplicaStep& s, const float* grad,
                                  StepNorms norms, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // A promoted backup holding a STAGE of its current version: runs that
  // step as its primary would have (the norms exchanged with the peers).
  void CompleteStaged() ABSL_LOCKS_EXCLUDED(mu_, update_mu_);
  // Runs one optimizer step over `grad` (shard_size). Holds update_mu_.
  // With `into` (BSP, element-wise optimizers), the update runs first rows
  // first, then in update order, and fills *into piece by piece.
  // `norms`: given values are used, the others found (exchanged) and set.
  // `norms_final` (optional) is called on this thread once *norms is
  // complete and before the update (the backups can apply the step while
  // this shard does).
  absl::Status ApplyStep(
      int64_t step_index, const float* grad, float grad_scale,
      StepNorms* norms, absl::Time deadline, Snapshot* into = nullptr,
      const std::function<void(const StepNorms&)>& norms_final = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu_);
  // A replicated step's header: kind, this install and term, `version`,
  // scale and norms (as ApplyStep found them; unset ones 0).
  ReplicaStep MakeReplicaStep(ReplicaStep::Kind kind, int64_t version,
                              float grad_scale, const StepNorms& norms)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The update of ApplyStep piece by piece into `into`.
  absl::Status ApplyInOrder(int64_t step_index, const float* grad, float scale,
                            Snapshot* into)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu_);
  // The parameters of the current version (see params_behind_); valid, and
  // not written by anyone, while update_mu_ is held. Takes mu_ briefly.
  const float* CurrentParams() ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu_)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Copies the current parameters into params_ when it is behind.
  void CatchUpParams() ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu_)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A snapshot buffer no pull holds (from the pool, or new).
  std::shared_ptr<Snapshot> FreeSnapshotLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // fn(g) for every update group g, group 0 on this thread and the others
  // on their own; the first error.
  absl::Status RunGroups(const std::function<absl::Status(size_t)>& fn);
  absl::StatusOr<std::vector<double>> AllReduce(int64_t version, int phase,
                                                std::vector<double> local,
                                                absl::Time deadline);
  AlignedVector<float> TakeBuffer() ABSL_LOCKS_EXCLUDED(mu_);
  void ReturnBuffer(AlignedVector<float> buffer) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status AddRowChunk(PushSession* session, const ChunkRef& chunk,
                           const ParamSpec& spec, const std::vector<int>& slices,
                           int elem);
  absl::Status ApplyBspLocked(absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sums the staged pushes and runs the step's update (into `next`, piece
  // by piece, when given); publishes the new version.
  void RunBspStep(std::map<int, AlignedVector<float>> staged,
                  std::shared_ptr<Snapshot> next, int64_t v, int contributors,
                  absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_, update_mu_);

  const ShardOptions options_;
  PeerLink* const peers_;
  ReplicaLink* const replicas_;  // may be null
  const ParamLayout layout_;
  const PartitionPlan plan_;
  const int state_slots_;
  // name -> this shard's slice indices (into plan_.slices()) of that tensor.
  absl::flat_hash_map<std::string, std::vector<int>> by_name_;
  // Local slices (indices into plan_.slices()) cut into update_threads
  // contiguous groups of about equal size.
  std::vector<std::vector<int>> update_groups_;
  // Threads of groups 1.. of RunGroups, kept for the shard's life (null
  // with one group). Set in Create(), then only used.
  std::unique_ptr<Eigen::ThreadPool> group_pool_;
  // Long-lived (set in Create(), then only used): the update of a BSP step
  // whose pushes were answered already runs on update_thread_; once its
  // first rows are done, the rest runs on background_thread_, which runs at
  // update_nice levels lower priority (a lowered thread cannot raise itself
  // again, so the two are kept apart).
  std::unique_ptr<SerialThread> update_thread_;
  std::unique_ptr<SerialThread> background_thread_;
  // Long-lived (made in the constructor): calls waiting for a state change
  // (poked where the state changes), and the thread that finishes pushes.
  std::unique_ptr<Waitlist> waits_;
  std::unique_ptr<SerialThread> finish_thread_;
  // Long-lived (made in the constructor): the background checkpoint write.
  std::unique_ptr<CheckpointWriter> writer_;
  // Tensors split across several slices: index into the LAMB exchange.
  std::vector<int> split_tensors_;  // tensor indices
  std::vector<int> update_order_;   // see update_order()

  // Serialises optimizer steps, checkpoints and restores. Taken before mu_.
  absl::Mutex update_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  AlignedVector<float> params_ ABSL_GUARDED_BY(update_mu_);  // (shard_size)
  // True after a step made out of place into the next snapshot (ApplyInOrder):
  // the current values are then published_->params (which only a holder of
  // update_mu_ replaces) and params_ is older. CurrentParams() reads them;
  // CatchUpParams() brings params_ up to date before an update in place.
  bool params_behind_ ABSL_GUARDED_BY(update_mu_) = false;
  // Per slice [slot 0 (n) | slot 1 (n)], at state_slots * shard_offset.
  AlignedVector<float> state_ ABSL_GUARDED_BY(update_mu_);
  AlignedVector<float> update_scratch_ ABSL_GUARDED_BY(update_mu_);  // LAMB
  AlignedVector<float> aggregate_ ABSL_GUARDED_BY(update_mu_);       // BSP sum
  // A backup's STAGE of its primary's next BSP step, until its COMMIT.
  std::optional<ReplicaStep> replica_stage_ ABSL_GUARDED_BY(update_mu_);
  AlignedVector<float> replica_grad_ ABSL_GUARDED_BY(update_mu_);

  mutable absl::Mutex mu_;
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  bool updating_ ABSL_GUARDED_BY(mu_) = false;
  // The latest version. Replaced only with update_mu_ held as well (so a
  // holder of update_mu_ may read its parameters without mu_); its params
  // are never written once it is shared.
  std::shared_ptr<Snapshot> published_ ABSL_GUARDED_BY(mu_);
  // The version being made, while pulls may read its final pieces.
  std::shared_ptr<Snapshot> pending_ ABSL_GUARDED_BY(mu_);
  // BSP: the union of the current step's pushes' next_first rows.
  int hint_tensor_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<int64_t> hint_rows_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Snapshot>> snapshot_pool_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> last_step_ ABSL_GUARDED_BY(mu_);  // per worker
  std::vector<int64_t> clock_ ABSL_GUARDED_BY(mu_);      // pushes applied
  // ASP/SSP: the update index of the next checkpoint cut (0: none;
  // JobPlan::NextCut).
  int64_t next_cut_ ABSL_GUARDED_BY(mu_) = 0;
  // BSP: staged gradients of the current step, by worker, and the examples
  // each trained on; those of the step being applied.
  std::map<int, AlignedVector<float>> staged_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::pair<int64_t, int64_t>> staged_examples_
      ABSL_GUARDED_BY(mu_);
  std::map<int, std::pair<int64_t, int64_t>> applying_examples_
      ABSL_GUARDED_BY(mu_);
  // The examples the applied updates consumed (example_ledger.h).
  ExampleLedger ledger_ ABSL_GUARDED_BY(mu_);
  std::vector<AlignedVector<float>> free_buffers_ ABSL_GUARDED_BY(mu_);
  struct AnnounceEntry {
    std::map<int, std::pair<double, int64_t>> by_worker;
  };
  std::map<int64_t, AnnounceEntry> announces_ ABSL_GUARDED_BY(mu_);
  int64_t pushes_applied_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pushes_duplicate_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pushes_rejected_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_in_ ABSL_GUARDED_BY(mu_) = 0;
  double last_grad_norm_ ABSL_GUARDED_BY(mu_) = 0;
  double last_lr_ ABSL_GUARDED_BY(mu_) = 0;
  // Replication: see ShardOptions::backup and ::term.
  bool backup_ ABSL_GUARDED_BY(mu_) = false;
  int64_t term_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t steps_replicated_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t shard_layout_ ABSL_GUARDED_BY(mu_) = 0;
  // Counts NewShardLayout()s: a waiting call that sees it change is answered.
  int64_t relayouts_ ABSL_GUARDED_BY(mu_) = 0;

  absl::Mutex ex_mu_;
  absl::Status aborted_ ABSL_GUARDED_BY(ex_mu_);  // Abort(), for the exchange
  std::atomic<bool> stop_sending_{false};         // Abort(), for PeerLink
  // (version, phase) -> per shard values.
  std::map<std::pair<int64_t, int>, std::vector<std::optional<std::vector<double>>>>
      exchange_ ABSL_GUARDED_BY(ex_mu_);
  // This shard's own partial sums of the last few (version, phase) keys,
  // kept after their exchange completed: a peer that replaced a lost
  // primary may still ask for them (ExchangeResponse).
  std::map<std::pair<int64_t, int>, std::vector<double>> own_sent_
      ABSL_GUARDED_BY(ex_mu_);
};

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_SERVER_PS_SHARD_H_

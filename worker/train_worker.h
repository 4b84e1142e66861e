// TrainWorker: the `train` role of bertps_worker. Stateless: everything it
// needs comes from its options (later: the coordinator) and the
// parameter-server shards.
//
// Every step, ticket, share of the data, checkpoint and cut is the job
// plan's (TrainWorkerOptions::plan, common/cluster/job_plan.h).
// Data: the examples of all files (sorted glob matches) form one global
// stream; global batch t is examples [t*B*N, (t+1)*B*N) (B per worker, N
// workers), and worker i takes [t*B*N + i*B, t*B*N + (i+1)*B)
// (JobPlan::FirstExample). So the union of the workers' batches is exactly
// what one worker with batch B*N reads, whatever N is, and a restarted
// worker resumes at the shards' step. Each worker reads only its own
// examples, through the files' record indices (common/io/record_index.h): a
// worker that joins at step t reads nothing before its first example.
// Dropout keys use the example's index in the global batch
// (JobPlan::ExampleOffset).
// The learning rate a step reports is the one the shards applied
// (PushResponse.learning_rate).
//
// Step t (BSP): announce the batch's loss denominators, pull version t, run
// forward/backward with the global denominators while pushing each layer's
// gradients as backward produces them, finish the push.
// ASP/SSP: pull (SSP waits for the staleness bound), compute, push the whole
// gradient with its squared norm.
//
// Overlap: forward starts while the pull still arrives, waiting before each
// layer for its parameters (the shards send the word-embedding rows of the
// batch's input ids first and the rest of that table, read only by the tied
// decoder at the end of forward, last). Under BSP the next step's batch is
// read, announced and its pull started as soon as this step's push is
// written, before the shards answer; the push sends the word embedding's
// gradient early, except the rows of the input ids, which come last.
//
// Thread-safety: Run() from one thread.
#ifndef BERTPS_WORKER_TRAIN_WORKER_H_
#define BERTPS_WORKER_TRAIN_WORKER_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/cluster/job_plan.h"
#include "common/io/bert_example.h"
#include "common/io/batch_prefetcher.h"
#include "common/io/record_index.h"
#include "common/kernels/matmul.h"
#include "common/cluster/memory_plan.h"
#include "common/memory_limit.h"
#include "common/model/bert.h"
#include "common/serial_thread.h"
#include "common/tiled_buffer.h"
#include "common/ps/ps_client.h"
#include "worker/slot_feed.h"

namespace bertps {

struct TrainWorkerOptions {
  PsClientOptions ps;
  BertConfig config;
  BertTask task = BertTask::kPretrain;
  // The job's plan: its workers (plan.replicas), the examples per
  // micro-batch (plan.batch) and the micro-batches computed and summed per
  // push (plan.accumulation: gradient accumulation; a step reads, announces
  // and pushes batch x accumulation examples, while the model holds the
  // activations of one micro-batch), the updates the shards apply in all
  // (plan.updates: BSP one per global batch; ASP/SSP one per push, so with
  // N workers worker i pushes its steps j while the update ticket
  // j * N + i < updates, and trains step j on global batch j * N + i, each
  // batch once), the consistency mode and the checkpoints (worker 0 writes
  // them, with checkpoint_dir; plan.CheckpointDue, and under ASP/SSP the
  // cuts the shards hold at).
  JobPlan plan;
  int worker = 0;
  // BSP without backup workers: the further slots (worker indices) this
  // worker computes too, serially on its one model (a train member holding
  // several slots): each step one pull, then each slot's batch (its
  // micro-batches, as accumulation does) forward and backward in slot
  // order, its gradient streamed out as that slot's push before the next
  // slot's backward, so the shards sum exactly what as many workers push.
  // The memory of one worker, not of one per slot. Empty: `worker` alone.
  std::vector<int> also_workers;
  // Optional (the same conditions as also_workers): the slots from the next
  // step on (worker/slot_feed.h), read as each step is prepared. A set that
  // keeps `worker`, and slot 0 as held or not held, is taken at that step
  // (the batches read ahead are read again); another is ignored (the
  // member starts the part again for it).
  std::shared_ptr<SlotFeed> slot_feed;
  std::vector<std::string> data;  // TFRecord globs
  // Simulated compute (> 0): forward and backward are replaced by a wait of
  // this many milliseconds (a third before the gradients, the rest spread
  // over backward's tensor groups, which go out as a real backward's do),
  // with gradients of the model's shape, fixed, small and finite. The data
  // is read, announced and counted, and the pulls and pushes are those of
  // a real worker; no model or activations are held (parameters and
  // gradients only). For measuring the service's own costs at scale
  // (docs/scaling.md). The reported loss is 0.
  double simulate_compute_ms = 0;
  uint64_t seed = 12345;          // dropout, and the data's order
  bool dropout = true;
  // A new pseudo-random order of all examples every epoch, a function of
  // (seed, epoch, the files); off: file order.
  bool shuffle = false;
  bool overlap_push = true;       // push layers during backward (BSP)
  // Batches read ahead by Run() on a thread of their own (read, CRC
  // checks, decoding; common/io/batch_prefetcher.h).
  int prefetch_batches = 4;
  std::string checkpoint_dir;     // worker 0 checkpoints here (the plan's)
  // CheckpointSpec.synchronous: the step waits for every checkpoint's
  // whole write. Otherwise only for the shards' copy of their state; a
  // CheckpointFinisher completes each one (manifest, LATEST) in the
  // background, and the step report after that names it.
  bool synchronous_checkpoints = false;
  // The data as the job was submitted with (empty: not checked).
  std::vector<io::ExpectedFile> expected_files;
  // Where record indices go when the data's directory is read-only
  // (empty: io::DefaultIndexCacheDir()).
  std::string index_cache_dir;
  // Data files kept open at once, the least recently read closed first
  // (common/io/record_index.h): any number of files fits the descriptors.
  int max_open_files = io::IndexedExampleSource::kDefaultMaxOpenFiles;
  std::string export_path;        // worker 0 exports the final model
  // An export directory's labels and vocabulary (common/model/hf_export.h).
  HfExportOptions export_hf;
  int64_t log_every = 10;
  std::ostream* log = nullptr;    // JSON lines; null: quiet
  // Called after every pushed step (progress reports to the coordinator).
  std::function<void(const struct TrainStepReport&)> on_step;
  // Run() stops with CANCELLED at the next step once this is true.
  const std::atomic<bool>* cancel = nullptr;
  // The memory this worker may use (bytes 0: DetectMemoryLimit()). A model
  // whose estimate does not fit is refused before anything is allocated.
  MemoryLimit memory_limit;
  // The products' precision (kernels/matmul.h); a CPU without native bf16
  // runs fp32, and each step's report says which ran.
  kernels::Precision precision = kernels::Precision::kFp32;
  // Where the products run in bf16, the dense layers' weights are pulled
  // as bf16 (PsClientOptions::pull_bf16_products: the same results, about
  // half their bytes) unless this is set.
  bool pull_fp32 = false;
};

struct TrainStepReport {
  int slot = 0;  // the worker slot whose batch this is
  int64_t step = 0;
  int64_t version = 0;  // after the push
  int64_t first_example = 0;  // global stream index of this worker's first
  int examples = 0;
  int tokens = 0;             // non-padding tokens of this worker's batch
  double learning_rate = 0;   // the shards': PushResponse.learning_rate
  double loss = 0;
  double pull_ms = 0, compute_ms = 0, push_ms = 0, wait_ms = 0;
  int64_t pull_bytes = 0;  // the step's pull: tensor bytes received
  // CPU time of compute_ms on the compute threads (all of them).
  double compute_cpu_ms = 0;
  // Waiting for this step's batch to be read (input), apart from the rest.
  double input_ms = 0;
  std::string checkpoint;  // manifest written after this step, if any
  int64_t checkpoint_version = 0;  // its version
  // Checkpoints completed (in the background) since the last report but
  // before `checkpoint`, oldest first: each is reported too (the
  // coordinator starts an eval round at each one due).
  struct Completed {
    std::string manifest;
    int64_t version = 0;
  };
  std::vector<Completed> earlier_checkpoints;
  kernels::Precision precision = kernels::Precision::kFp32;  // what ran
};

class TrainWorker {
 public:
  static absl::StatusOr<std::unique_ptr<TrainWorker>> Create(
      const TrainWorkerOptions& options);
  ~TrainWorker();

  // Runs from the shards' current step to this worker's last
  // (plan.WorkerSteps).
  absl::Status Run();
  // One step (exposed for tests and benchmarks): the report of the first
  // slot; StepSlots: one per slot, in slot order.
  absl::StatusOr<TrainStepReport> Step(int64_t step);
  absl::StatusOr<std::vector<TrainStepReport>> StepSlots(int64_t step);
  // The slots of the step in hand (or the last one), ascending: worker and
  // also_workers, then as slot_feed says.
  const std::vector<int>& slots() const { return slots_; }
  PsClient* client() { return client_.get(); }
  // Null with simulate_compute_ms.
  BertModel<float>* model() { return model_.get(); }

 private:
  TrainWorker(const TrainWorkerOptions& options);
  // RESOURCE_EXHAUSTED: an allocation failed (`cause`), with what this
  // worker needs and may use (common/memory_limit.h OutOfMemoryError).
  absl::Status MemoryError(absl::string_view cause) const;
  bool HasSlot(int slot) const {
    return std::find(slots_.begin(), slots_.end(), slot) != slots_.end();
  }
  // The batch of every slot of `step` (read_slots_), one after another.
  absl::Status ReadBatch(int64_t step, io::BertBatch* out);
  // The slots `step` is prepared with: slot_feed's when it names another
  // set this worker can take (then read from that step on), else those
  // read so far. Called where Prepare is (one thread at a time).
  std::vector<int> SlotsFor(int64_t step);
  // Slot j's (of slots_) model computation over its share of batch_: one
  // Step, or with accumulation one per micro-batch, summed.
  absl::StatusOr<StepResult> ComputeMicroBatches(const StepOptions& so,
                                                 size_t j, int slot);
  // The simulated forward and backward (simulate_compute_ms).
  absl::StatusOr<StepResult> SimulatedCompute(const StepOptions& so);
  // The parameters pulled into and the gradients pushed from: the model's,
  // or the simulation's buffers.
  float* params() { return model_ ? model_->params() : sim_params_.data(); }
  float* grads() { return model_ ? model_->grads() : sim_grads_.data(); }
  const ParamLayout& layout() const { return client_->layout(); }
  // Examples per step (one push): batch x accumulation.
  int64_t push_examples() const { return options_.plan.examples_per_push; }
  // Step's phases (train_step.cc) and the state they share.
  struct StepState;
  absl::Status StartStep(StepState& s);
  absl::StatusOr<StepResult> Compute(StepState& s);
  absl::Status CheckLoss(StepState& s, size_t j, const StepResult& r);
  absl::Status FinishPush(StepState& s);
  absl::Status PushWhole(StepState& s, const StepResult& r);
  void Report(StepState& s);
  // Backward's callbacks under overlap, and what they use.
  void OnGradsReady(StepState& s, const std::vector<int>& tensors);
  void OnGradsReadyExceptRows(StepState& s, int t,
                              const std::vector<int64_t>& rows);
  PsClient::PushStream* OpenPush(StepState& s);
  bool TakeNext(StepState& s, bool wait);
  void StartNextPull(StepState& s, PsClient::PushStream* ps);
  // The batch of `step`, its announced denominators, and its pull started.
  // input_ms (optional) adds the read's time; read_done (optional) gets
  // when the read ended.
  // *slots gets the slots the batch is of.
  absl::Status Prepare(int64_t step, io::BertBatch* batch,
                       std::vector<int>* slots,
                       double* mlm_denominator, double* example_denominator,
                       double* wait_ms, double* input_ms = nullptr,
                       std::chrono::steady_clock::time_point* read_done =
                           nullptr);

  const TrainWorkerOptions options_;
  // The slots of batch_ and of next_batch_, ascending.
  std::vector<int> slots_, next_slots_;
  // The slots ReadBatch reads (the prefetcher's thread reads them).
  absl::Mutex read_mu_;
  std::vector<int> read_slots_ ABSL_GUARDED_BY(read_mu_);
  // What the memory plan says this worker needs, and what it may use.
  MemoryNeed memory_need_;
  MemoryLimit memory_limit_;
  std::unique_ptr<PsClient> client_;
  kernels::MatmulEngine mm_;
  std::unique_ptr<BertModel<float>> model_;  // null when simulating
  // Simulated compute: parameters pulled into and gradients pushed from a
  // tile of memory mapped over the model's length (common/tiled_buffer.h).
  TiledBuffer sim_params_, sim_grads_;
  // The job's data by stream position (common/io/record_index.h).
  std::unique_ptr<io::IndexedExampleSource> source_;
  int seq_ = 0, preds_ = 0;
  io::BertBatch batch_, next_batch_;
  // Layout tensors of each forward parameter group (ParamGroup*).
  std::vector<std::vector<int>> groups_;
  // The step whose batch_, denominators and pull_ are ready (-1: none).
  int64_t prepared_step_ = -1;
  double mlm_denominator_ = 0, example_denominator_ = 0;
  std::unique_ptr<PsClient::PendingPull> pull_;
  // Reads and announces the next step's batch while a step computes (one
  // thread for the worker's life, not one per step).
  std::unique_ptr<SerialThread> prepare_thread_;
  // Run()'s read-ahead (null outside Run: Step reads the batch itself).
  // After source_: stopped before the source goes.
  std::unique_ptr<io::BatchPrefetcher> prefetcher_;
  // Run() (BSP, background checkpoints): waits for the START of the cut
  // before the step's push opens (OpenPush / PushWhole call it once).
  std::function<absl::Status()> before_push_;
};

}  // namespace bertps

#endif  // BERTPS_WORKER_TRAIN_WORKER_H_

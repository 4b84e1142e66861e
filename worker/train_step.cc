// TrainWorker::Step in named phases:
//   StartStep    this step's batch, denominators and pull (unless prepared
//                by the previous step)
//   Compute      forward and backward; under BSP with overlap, the push
//                streams out during backward (OnGradsReady), the next
//                step's batch is prepared on the side and its pull starts
//                at the first gradient (StartNextPull)
//   CheckLoss    this worker's loss, refused when not finite
//   FinishPush   the overlapped push's end and the hand-over to the next
//                step, or PushWhole: the whole gradient in one push
//   Report       the timings
// docs/ps.md ("Overlap: a BSP step end to end") says why each is where it is.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/crash_point.h"
#include "common/kernels/threads.h"
#include "common/model/batch_view.h"
#include "common/optim/optimizer.h"
#include "common/status.h"
#include "worker/train_worker.h"

namespace bertps {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The word-embedding rows a batch's pull asks first (its input ids).
TensorRows FirstRows(const io::BertBatch& b) {
  TensorRows r;
  r.set_name("bert.embeddings.word_embeddings.weight");
  for (int64_t id : DistinctInputIds(ViewOf(b))) r.add_rows(id);
  return r;
}

}  // namespace

// What one step's phases, and the callbacks backward makes, share.
struct TrainWorker::StepState {
  // The next step's batch may still be read on the prepare thread, into
  // this state: wait for it before the state goes.
  ~StepState() {
    if (next_prepared.valid()) next_prepared.wait();
  }

  int64_t step = 0;
  bool bsp = false;
  bool overlap = false;  // BSP: push during backward
  bool next = false;     // overlap, and a next step to prepare on the side
  TrainStepReport rep;
  Clock::time_point t0, t1, t2, t3, t4;
  // Waits: for this step's announce when it was not prepared ahead, for the
  // next step's batch and announce, for parameters inside forward and at its
  // end; pull time spent in backward.
  double start_wait_ms = 0, wait_ms = 0, next_wait_ms = 0;
  // Waits for batches to be read: this step's when not read ahead (inside
  // StartStep), the next one's when its read outlasted this step.
  double start_input_ms = 0, input_ms = 0;
  Clock::time_point next_read_done;  // set by the prepare thread
  double forward_wait_ms = 0, pull_end_ms = 0, early_pull_ms = 0;
  PushHeader header;
  std::unique_ptr<PsClient::PushStream> stream;
  absl::Status stream_error;
  // The next step: its batch's denominators, its preparation, its rows and
  // its pull.
  double next_mlm = 0, next_examples = 0;
  std::future<absl::Status> next_prepared;
  absl::Status next_status;  // of next_prepared, once taken
  bool next_taken = false;
  TensorRows next_first;
  std::unique_ptr<PsClient::PendingPull> next_pull;
  // The word embedding's gradient goes out early but for the rows of the
  // input ids, which backward adds last and which follow then.
  std::vector<int> pending;  // tensors whose rows are still to come
  std::shared_ptr<const std::vector<int64_t>> pending_rows;
};

absl::StatusOr<TrainStepReport> TrainWorker::Step(int64_t step) {
  StepState s;
  s.step = step;
  s.rep.step = step;
  s.bsp = options_.plan.mode == BSP;
  s.overlap = s.bsp && options_.overlap_push;
  s.next = s.overlap && step + 1 < options_.plan.WorkerSteps(options_.worker);
  s.t0 = Clock::now();
  RETURN_IF_ERROR(StartStep(s));
  ASSIGN_OR_RETURN(StepResult r, Compute(s));
  RETURN_IF_ERROR(CheckLoss(s, r));
  s.t3 = Clock::now();
  RETURN_IF_ERROR(s.overlap ? FinishPush(s) : PushWhole(s, r));
  s.t4 = Clock::now();
  Report(s);
  return s.rep;
}

absl::Status TrainWorker::StartStep(StepState& s) {
  CrashPoint("train_step", s.step + 1, options_.worker);
  if (prepared_step_ != s.step) {
    pull_.reset();
    RETURN_IF_ERROR(Prepare(s.step, &batch_, &mlm_denominator_,
                            &example_denominator_, &s.wait_ms, &s.input_ms));
    s.start_wait_ms = s.wait_ms;
    s.start_input_ms = s.input_ms;
    const TensorRows first = FirstRows(batch_);
    pull_ = client_->StartPull(options_.worker, s.bsp ? s.step : 0, s.step,
                               params(), &first);
    prepared_step_ = s.step;
  }
  s.header.set_worker(options_.worker);
  s.header.set_step(s.step);
  s.header.set_examples(push_examples());
  // The examples this step's batch was read from (ReadBatch): global batch
  // step * N + worker's share (BSP: worker i's B of global batch `step`;
  // ASP/SSP: update ticket step * N + i). Shard 0 counts them.
  s.header.set_first_example(batch_.first_position);
  return absl::OkStatus();
}

PsClient::PushStream* TrainWorker::OpenPush(StepState& s) {
  if (mm_.failed()) {
    // The gradients are not what the step computes: none goes out, and the
    // stream (if open) is cancelled with the step.
    if (s.stream_error.ok()) s.stream_error = MemoryError(mm_.status().message());
    return nullptr;
  }
  // The stream opens at the first gradient: the shards refuse a push of a
  // step they have not reached, and this step's parameters (so its
  // version) arrived only during forward.
  if (!s.stream && s.stream_error.ok() && before_push_) {
    std::function<absl::Status()> before = std::move(before_push_);
    before_push_ = nullptr;
    s.stream_error = before();
  }
  if (!s.stream && s.stream_error.ok()) {
    absl::StatusOr<std::unique_ptr<PsClient::PushStream>> st =
        client_->BeginPush(s.header);
    if (st.ok()) {
      s.stream = std::move(*st);
    } else {
      s.stream_error = st.status();
    }
  }
  return s.stream.get();
}

bool TrainWorker::TakeNext(StepState& s, bool wait) {
  if (s.next_taken) return true;
  if (!wait && s.next_prepared.wait_for(std::chrono::seconds(0)) !=
                   std::future_status::ready) {
    return false;
  }
  s.next_status = s.next_prepared.get();
  s.next_taken = true;
  if (s.next_status.ok()) s.next_first = FirstRows(next_batch_);
  return true;
}

void TrainWorker::StartNextPull(StepState& s, PsClient::PushStream* ps) {
  // The next step's pull starts at this step's first gradient, once its
  // batch is known: the shards hold it until this step's update makes its
  // pieces, so the pull's own start is off the step's critical path. Its
  // values can only arrive after this worker's push ends when every shard
  // is at this step and all workers are needed. Otherwise it starts after
  // the push: with backup workers a step may end without this one, and a
  // shard already past this step (this worker restarted after some shards
  // took its push) would send while backward still reads the parameters.
  if (!s.next || s.next_pull != nullptr ||
      client_->description(0).backup_workers() > 0 || !TakeNext(s, false) ||
      !s.next_status.ok()) {
    return;
  }
  const auto e0 = Clock::now();
  // Every parameter of this step arrived before backward.
  if (!pull_->Finish().ok()) return;  // reported when Step ends
  for (int64_t v : pull_->versions()) {
    if (v != s.step) return;
  }
  // The shards update the rows the next pull asks first, first.
  ps->SendNextFirst(s.next_first);
  s.next_pull = client_->StartPull(options_.worker, s.step + 1, s.step + 1,
                                   params(), &s.next_first);
  s.early_pull_ms += Ms(e0, Clock::now());
}

void TrainWorker::OnGradsReady(StepState& s, const std::vector<int>& tensors) {
  PsClient::PushStream* ps = OpenPush(s);
  if (ps == nullptr) return;
  StartNextPull(s, ps);
  for (int t : tensors) {
    const float* g = grads() + layout().tensors()[t].offset;
    if (std::find(s.pending.begin(), s.pending.end(), t) != s.pending.end()) {
      ps->SendRows(t, g, s.pending_rows, /*except=*/false);
    } else {
      ps->Send(t, g);
    }
  }
}

void TrainWorker::OnGradsReadyExceptRows(StepState& s, int t,
                                         const std::vector<int64_t>& rows) {
  PsClient::PushStream* ps = OpenPush(s);
  if (ps == nullptr) return;
  StartNextPull(s, ps);
  s.pending_rows = std::make_shared<const std::vector<int64_t>>(rows);
  ps->SendRows(t, grads() + layout().tensors()[t].offset,
               s.pending_rows, /*except=*/true);
  s.pending.push_back(t);
}

absl::StatusOr<StepResult> TrainWorker::Compute(StepState& s) {
  StepOptions so;
  so.train = options_.dropout;
  so.seed = options_.seed;
  so.step = s.step;
  // Dropout keys: (seed, step, index within the global batch).
  so.example_offset = options_.plan.ExampleOffset(options_.worker);
  so.mlm_denominator = mlm_denominator_;
  so.example_denominator = example_denominator_;
  // Forward reads each group of parameters once it arrived.
  so.before_params = [this, &s](int group) {
    const auto w0 = Clock::now();
    absl::Status st = pull_->Wait(groups_[group],
                                  group == kParamGroupEmbeddings);
    s.forward_wait_ms += Ms(w0, Clock::now());
    return st;
  };
  if (s.overlap) {
    so.on_grads_ready_except_rows = [this, &s](
        int t, const std::vector<int64_t>& rows) {
      OnGradsReadyExceptRows(s, t, rows);
    };
    so.on_grads_ready = [this, &s](const std::vector<int>& tensors) {
      OnGradsReady(s, tensors);
    };
  }
  if (s.next) {
    // Under BSP the next step's batch is read and announced on the prepare
    // thread while this one computes (the announce waits for every
    // worker's batch).
    auto done = std::make_shared<std::promise<absl::Status>>();
    s.next_prepared = done->get_future();
    const int64_t next_step = s.step + 1;
    prepare_thread_->Post([this, &s, done, next_step] {
      done->set_value(Prepare(next_step, &next_batch_, &s.next_mlm,
                              &s.next_examples, &s.next_wait_ms,
                              /*input_ms=*/nullptr, &s.next_read_done));
    });
  }
  s.t1 = Clock::now();
  const double cpu0 = kernels::ComputeCpuSeconds();
  absl::StatusOr<StepResult> r = ComputeMicroBatches(so);
  // A product that could not run (out of memory): nothing of this step is
  // used, and nothing more of it was sent (OpenPush).
  if (mm_.failed()) return MemoryError(mm_.status().message());
  RETURN_IF_ERROR(r.status());
  s.rep.compute_cpu_ms = 1e3 * (kernels::ComputeCpuSeconds() - cpu0);
  s.t2 = Clock::now();
  // Every parameter arrived before backward; the pull is over.
  const auto p0 = Clock::now();
  RETURN_IF_ERROR(pull_->Finish().status());  // again: no wait
  s.rep.pull_bytes = pull_->payload_bytes();
  pull_.reset();
  prepared_step_ = -1;
  s.pull_end_ms = Ms(p0, Clock::now());
  return r;
}

absl::StatusOr<StepResult> TrainWorker::ComputeMicroBatches(
    const StepOptions& so) {
  if (options_.simulate_compute_ms > 0) return SimulatedCompute(so);
  // The micro-batches in order (one without accumulation), each adding to
  // the gradients (the global denominators make the sum the whole batch's);
  // only the last one streams its gradients out, the first one waits for
  // the parameters.
  const BertBatchView all = ViewOf(batch_);
  StepResult sum;
  const int64_t b = options_.plan.batch;
  const int64_t micro_batches = options_.plan.accumulation;
  for (int64_t m = 0; m < micro_batches; ++m) {
    StepOptions mo = so;
    mo.example_offset = so.example_offset + m * b;
    mo.accumulate = m > 0;
    if (m > 0) mo.before_params = nullptr;
    if (m + 1 < micro_batches) {
      mo.on_grads_ready = nullptr;
      mo.on_grads_ready_except_rows = nullptr;
    }
    ASSIGN_OR_RETURN(StepResult r, model_->Step(SliceOf(all, m * b, b), mo));
    sum.loss += r.loss;
    sum.mlm_loss += r.mlm_loss;
    sum.nsp_loss += r.nsp_loss;
    sum.mlm.Add(r.mlm);
    sum.nsp.Add(r.nsp);
    sum.cls.Add(r.cls);
    sum.logits.insert(sum.logits.end(), r.logits.begin(), r.logits.end());
  }
  return sum;
}

absl::StatusOr<StepResult> TrainWorker::SimulatedCompute(
    const StepOptions& so) {
  // Forward: each parameter group once it arrived, as a real forward
  // reads them, then a third of the time.
  const auto wait = [](double ms) {
    if (ms > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
    }
  };
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (so.before_params) {
      RETURN_IF_ERROR(so.before_params(static_cast<int>(g)));
    }
  }
  const double total = options_.simulate_compute_ms;
  wait(total / 3);
  // Backward: the groups from the last (heads) to the first (embeddings),
  // each going out after its share of the rest of the time.
  const double share =
      (total - total / 3) / static_cast<double>(groups_.size());
  for (size_t k = groups_.size(); k-- > 0;) {
    wait(share);
    if (so.on_grads_ready && !groups_[k].empty()) so.on_grads_ready(groups_[k]);
  }
  return StepResult();  // loss 0
}

absl::Status TrainWorker::CheckLoss(StepState& s, const StepResult& r) {
  // The loss of this worker's own batch (with global denominators r.loss is
  // only this worker's share of the global batch's loss).
  if (options_.task == BertTask::kPretrain) {
    s.rep.loss = r.mlm.weighted_nll / (r.mlm.weight + 1e-5) +
                 r.nsp.weighted_nll / std::max(r.nsp.weight, 1.0);
  } else {
    s.rep.loss = r.cls.weighted_nll / std::max(r.cls.weight, 1.0);
  }
  if (!std::isfinite(r.loss) || !std::isfinite(s.rep.loss)) {
    // The shards would refuse the gradient anyway; say why here, before the
    // push completes, so nothing of this step is applied.
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", s.step, ": the loss of worker ", options_.worker,
        "'s batch is not finite (", s.rep.loss,
        "): the parameters or the learning rate diverged (or the initial "
        "weights hold NaN/Inf); nothing of this step was applied"));
  }
  for (int32_t m : batch_.input_mask) s.rep.tokens += m;
  return absl::OkStatus();
}

absl::Status TrainWorker::FinishPush(StepState& s) {
  RETURN_IF_ERROR(s.stream_error);
  if (OpenPush(s) == nullptr) return s.stream_error;
  // The next step's batch, totals and pull (when not started during
  // backward), while the push's last bytes travel; its pull waits on the
  // shards for this step's update.
  if (s.next) {
    // Read and announced during this step; usually done.
    const auto n0 = Clock::now();
    TakeNext(s, /*wait=*/true);
    RETURN_IF_ERROR(s.next_status);
    // Of the wait, the part before the read ended was for the input; the
    // rest for the announce (the other workers' batches).
    const double waited = Ms(n0, Clock::now());
    const double input =
        std::min(waited, std::max(0.0, Ms(n0, s.next_read_done)));
    s.input_ms += input;
    s.wait_ms += waited - input;
    mlm_denominator_ = s.next_mlm;
    example_denominator_ = s.next_examples;
    if (s.next_pull == nullptr) s.stream->SendNextFirst(s.next_first);
  }
  s.stream->CloseWrites();
  if (s.next) {
    std::swap(batch_, next_batch_);
    if (s.next_pull == nullptr) {
      s.next_pull = client_->StartPull(options_.worker, s.step + 1,
                                       s.step + 1, params(),
                                       &s.next_first);
    }
    pull_ = std::move(s.next_pull);
    prepared_step_ = s.step + 1;
  }
  absl::StatusOr<int64_t> v = s.stream->Finish();
  if (!v.ok() && v.status().code() == absl::StatusCode::kUnavailable) {
    v = client_->Push(s.header, grads());  // retried, applied once
  }
  if (!v.ok() && v.status().code() == absl::StatusCode::kFailedPrecondition &&
      client_->description(0).backup_workers() > 0) {
    // A backup worker that came late: the step completed without it.
    v = s.step + 1;
  }
  RETURN_IF_ERROR(v.status());
  s.rep.version = *v;
  return absl::OkStatus();
}

absl::Status TrainWorker::PushWhole(StepState& s, const StepResult& r) {
  double sq = 0;
  for (const ParamSpec& p : layout().tensors()) {
    sq += optim::GradSquaredSum(grads() + p.offset, p.size);
  }
  if (!std::isfinite(sq)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", s.step, ": the gradient of worker ", options_.worker,
        "'s batch is not finite (loss ", r.loss,
        "); nothing of this step was applied"));
  }
  s.header.set_grad_sq_sum(sq);
  if (before_push_) {
    std::function<absl::Status()> before = std::move(before_push_);
    before_push_ = nullptr;
    RETURN_IF_ERROR(before());
  }
  ASSIGN_OR_RETURN(s.rep.version, client_->Push(s.header, grads()));
  return absl::OkStatus();
}

void TrainWorker::Report(StepState& s) {
  TrainStepReport& rep = s.rep;
  rep.first_example = s.header.first_example();
  rep.examples = push_examples();
  // The rate the shards applied to this push's update (they said so in
  // their answer: their plan's rate of that update).
  rep.learning_rate = client_->last_push_learning_rate();
  rep.wait_ms = s.wait_ms;
  rep.input_ms = s.input_ms;
  rep.pull_ms = Ms(s.t0, s.t1) - s.start_wait_ms - s.start_input_ms +
                s.forward_wait_ms + s.pull_end_ms + s.early_pull_ms;
  rep.compute_ms = Ms(s.t1, s.t2) - s.forward_wait_ms - s.early_pull_ms;
  rep.precision = mm_.precision();
  rep.push_ms = Ms(s.t3, s.t4) - (s.wait_ms - s.start_wait_ms) -
                (s.input_ms - s.start_input_ms);
}

}  // namespace bertps

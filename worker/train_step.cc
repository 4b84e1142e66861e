// TrainWorker::Step in named phases:
//   StartStep    this step's batch, denominators and pull (unless prepared
//                by the previous step)
//   Compute      forward and backward, slot by slot (a worker computing
//                several slots: each slot's push streams out during its
//                backward and is written whole before the next slot's
//                backward); under BSP with overlap, the push streams out
//                during backward (OnGradsReady), the next step's batch is
//                prepared on the side and its pull starts at the last
//                slot's first gradient (StartNextPull)
//   CheckLoss    each slot's loss, refused when not finite
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
  std::vector<int> slots;  // the step's (its batch's), ascending
  bool bsp = false;
  bool overlap = false;  // BSP: push during backward
  bool next = false;     // overlap, and a next step to prepare on the side
  TrainStepReport rep;   // the step's timings
  // One push per slot (`slots` order) and the slot computing.
  struct SlotPush {
    PushHeader header;
    std::unique_ptr<PsClient::PushStream> stream;
    absl::Status stream_error;
    // The word embedding's gradient goes out early but for the rows of the
    // input ids, which backward adds last and which follow then.
    std::vector<int> pending;  // tensors whose rows are still to come
    std::shared_ptr<const std::vector<int64_t>> pending_rows;
    TrainStepReport rep;  // the slot's loss, tokens and compute
  };
  std::vector<SlotPush> pushes;
  size_t current = 0;
  SlotPush& push() { return pushes[current]; }
  bool last_slot() const { return current + 1 == pushes.size(); }
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
  // The next step: its batch's denominators, its preparation, its rows and
  // its pull.
  double next_mlm = 0, next_examples = 0;
  std::future<absl::Status> next_prepared;
  absl::Status next_status;  // of next_prepared, once taken
  bool next_taken = false;
  TensorRows next_first;
  std::unique_ptr<PsClient::PendingPull> next_pull;
};

absl::StatusOr<TrainStepReport> TrainWorker::Step(int64_t step) {
  ASSIGN_OR_RETURN(std::vector<TrainStepReport> reps, StepSlots(step));
  return reps[0];
}

absl::StatusOr<std::vector<TrainStepReport>> TrainWorker::StepSlots(
    int64_t step) {
  StepState s;
  s.step = step;
  s.rep.step = step;
  s.bsp = options_.plan.mode == BSP;
  // Several slots always stream their pushes: a whole push waits for the
  // step's update, which needs the next slot's push too.
  s.t0 = Clock::now();
  RETURN_IF_ERROR(StartStep(s));
  s.overlap = s.bsp && (options_.overlap_push || s.slots.size() > 1);
  s.next = s.overlap && step + 1 < options_.plan.WorkerSteps(options_.worker);
  ASSIGN_OR_RETURN(StepResult r, Compute(s));
  s.t3 = Clock::now();
  RETURN_IF_ERROR(s.overlap ? FinishPush(s) : PushWhole(s, r));
  s.t4 = Clock::now();
  Report(s);
  std::vector<TrainStepReport> reps;
  for (StepState::SlotPush& p : s.pushes) reps.push_back(std::move(p.rep));
  return reps;
}

absl::Status TrainWorker::StartStep(StepState& s) {
  CrashPoint("train_step", s.step + 1, options_.worker);
  if (prepared_step_ != s.step) {
    pull_.reset();
    RETURN_IF_ERROR(Prepare(s.step, &batch_, &slots_, &mlm_denominator_,
                            &example_denominator_, &s.wait_ms, &s.input_ms));
    s.start_wait_ms = s.wait_ms;
    s.start_input_ms = s.input_ms;
    const TensorRows first = FirstRows(batch_);
    pull_ = client_->StartPull(options_.worker, s.bsp ? s.step : 0, s.step,
                               params(), &first);
    prepared_step_ = s.step;
  }
  s.slots = slots_;
  if (options_.slot_feed != nullptr) options_.slot_feed->Computing(s.slots);
  s.pushes.resize(s.slots.size());
  for (size_t j = 0; j < s.slots.size(); ++j) {
    PushHeader& h = s.pushes[j].header;
    h.set_worker(s.slots[j]);
    h.set_step(s.step);
    h.set_examples(push_examples());
    // The examples this slot's batch was read from (ReadBatch): global
    // batch step * N + the slot's share (BSP: worker i's B of global batch
    // `step`; ASP/SSP: update ticket step * N + i). Shard 0 counts them.
    h.set_first_example(j == 0 ? batch_.first_position
                               : options_.plan.FirstExample(s.slots[j], s.step));
  }
  return absl::OkStatus();
}

PsClient::PushStream* TrainWorker::OpenPush(StepState& s) {
  StepState::SlotPush& p = s.push();
  if (mm_.failed()) {
    // The gradients are not what the step computes: none goes out, and the
    // stream (if open) is cancelled with the step.
    if (p.stream_error.ok()) p.stream_error = MemoryError(mm_.status().message());
    return nullptr;
  }
  // The stream opens at the first gradient: the shards refuse a push of a
  // step they have not reached, and this step's parameters (so its
  // version) arrived only during forward.
  if (!p.stream && p.stream_error.ok() && before_push_) {
    std::function<absl::Status()> before = std::move(before_push_);
    before_push_ = nullptr;
    p.stream_error = before();
  }
  if (!p.stream && p.stream_error.ok()) {
    absl::StatusOr<std::unique_ptr<PsClient::PushStream>> st =
        client_->BeginPush(p.header);
    if (st.ok()) {
      p.stream = std::move(*st);
    } else {
      p.stream_error = st.status();
    }
  }
  return p.stream.get();
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
  // (Of several slots, at the last one's: the earlier ones' pushes are in.)
  if (!s.next || !s.last_slot() || s.next_pull != nullptr ||
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
  StepState::SlotPush& p = s.push();
  for (int t : tensors) {
    const float* g = grads() + layout().tensors()[t].offset;
    if (std::find(p.pending.begin(), p.pending.end(), t) != p.pending.end()) {
      ps->SendRows(t, g, p.pending_rows, /*except=*/false);
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
  StepState::SlotPush& p = s.push();
  p.pending_rows = std::make_shared<const std::vector<int64_t>>(rows);
  ps->SendRows(t, grads() + layout().tensors()[t].offset,
               p.pending_rows, /*except=*/true);
  p.pending.push_back(t);
}

absl::StatusOr<StepResult> TrainWorker::Compute(StepState& s) {
  StepOptions so;
  so.train = options_.dropout;
  so.seed = options_.seed;
  so.step = s.step;
  // Dropout keys: (seed, step, index within the global batch): each slot's
  // (ComputeMicroBatches).
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
      done->set_value(Prepare(next_step, &next_batch_, &next_slots_,
                              &s.next_mlm,
                              &s.next_examples, &s.next_wait_ms,
                              /*input_ms=*/nullptr, &s.next_read_done));
    });
  }
  s.t1 = Clock::now();
  const double cpu0 = kernels::ComputeCpuSeconds();
  StepResult r;
  for (size_t j = 0; j < s.slots.size(); ++j) {
    s.current = j;
    const auto c0 = Clock::now();
    const double slot_cpu0 = kernels::ComputeCpuSeconds();
    const double waited0 = s.forward_wait_ms + s.early_pull_ms;
    // The previous slot's push ends its writes once this slot's backward
    // begins (its forward ran beside them): the gradients are one buffer.
    StepOptions sj = so;
    if (j > 0) {
      sj.before_backward = [&s, j] {
        if (s.pushes[j - 1].stream) s.pushes[j - 1].stream->CloseWrites();
      };
    }
    absl::StatusOr<StepResult> rj = ComputeMicroBatches(sj, j, s.slots[j]);
    // A product that could not run (out of memory): nothing of this step
    // is used, and nothing more of it was sent (OpenPush).
    if (mm_.failed()) return MemoryError(mm_.status().message());
    RETURN_IF_ERROR(rj.status());
    StepState::SlotPush& p = s.push();
    p.rep.compute_cpu_ms = 1e3 * (kernels::ComputeCpuSeconds() - slot_cpu0);
    p.rep.compute_ms = Ms(c0, Clock::now()) -
                       (s.forward_wait_ms + s.early_pull_ms - waited0);
    RETURN_IF_ERROR(CheckLoss(s, j, *rj));
    // (A slot before the last: its push is open, written whole before the
    // next slot's backward writes over the gradients, and answered with the
    // step's update.)
    if (!s.last_slot() && OpenPush(s) == nullptr) return p.stream_error;
    r = *std::move(rj);
  }
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
    const StepOptions& so, size_t j, int slot) {
  // Only the first slot's forward waits for the parameters.
  StepOptions first = so;
  if (j > 0) first.before_params = nullptr;
  if (options_.simulate_compute_ms > 0) return SimulatedCompute(first);
  // The slot's micro-batches in order (one without accumulation), each
  // adding to the gradients (the global denominators make the sum the whole
  // batch's); only the last one streams its gradients out.
  const BertBatchView all = ViewOf(batch_);
  StepResult sum;
  const int64_t b = options_.plan.batch;
  const int64_t micro_batches = options_.plan.accumulation;
  const int64_t base = static_cast<int64_t>(j) * push_examples();
  for (int64_t m = 0; m < micro_batches; ++m) {
    StepOptions mo = first;
    // Dropout keys: the example's index in the global batch.
    mo.example_offset = options_.plan.ExampleOffset(slot) + m * b;
    mo.accumulate = m > 0;
    if (m > 0) {
      mo.before_params = nullptr;
      mo.before_backward = nullptr;
    }
    if (m + 1 < micro_batches) {
      mo.on_grads_ready = nullptr;
      mo.on_grads_ready_except_rows = nullptr;
    }
    ASSIGN_OR_RETURN(StepResult r,
                     model_->Step(SliceOf(all, base + m * b, b), mo));
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

absl::Status TrainWorker::CheckLoss(StepState& s, size_t j,
                                    const StepResult& r) {
  // The loss of slot j's own batch (with global denominators r.loss is only
  // the slot's share of the global batch's loss).
  TrainStepReport& rep = s.pushes[j].rep;
  if (options_.task == BertTask::kPretrain) {
    rep.loss = r.mlm.weighted_nll / (r.mlm.weight + 1e-5) +
               r.nsp.weighted_nll / std::max(r.nsp.weight, 1.0);
  } else {
    rep.loss = r.cls.weighted_nll / std::max(r.cls.weight, 1.0);
  }
  if (!std::isfinite(r.loss) || !std::isfinite(rep.loss)) {
    // The shards would refuse the gradient anyway; say why here, before the
    // push completes, so nothing of this step is applied.
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", s.step, ": the loss of worker ", s.slots[j],
        "'s batch is not finite (", rep.loss,
        "): the parameters or the learning rate diverged (or the initial "
        "weights hold NaN/Inf); nothing of this step was applied"));
  }
  const size_t per_slot = batch_.input_mask.size() / s.slots.size();
  for (size_t i = j * per_slot; i < (j + 1) * per_slot; ++i) {
    rep.tokens += batch_.input_mask[i];
  }
  return absl::OkStatus();
}

absl::Status TrainWorker::FinishPush(StepState& s) {
  StepState::SlotPush& p = s.push();  // the last slot's
  RETURN_IF_ERROR(p.stream_error);
  if (OpenPush(s) == nullptr) return p.stream_error;
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
    if (s.next_pull == nullptr) p.stream->SendNextFirst(s.next_first);
  }
  p.stream->CloseWrites();
  if (s.next) {
    std::swap(batch_, next_batch_);
    std::swap(slots_, next_slots_);
    if (s.next_pull == nullptr) {
      s.next_pull = client_->StartPull(options_.worker, s.step + 1,
                                       s.step + 1, params(),
                                       &s.next_first);
    }
    pull_ = std::move(s.next_pull);
    prepared_step_ = s.step + 1;
  }
  // Every slot's writes end before any answer is waited for (the shards
  // answer once the step's update is applied, which needs them all).
  for (size_t j = 0; j + 1 < s.pushes.size(); ++j) {
    s.pushes[j].stream->CloseWrites();
  }
  absl::StatusOr<int64_t> v = p.stream->Finish();
  if (!v.ok() && v.status().code() == absl::StatusCode::kUnavailable) {
    v = client_->Push(p.header, grads());  // retried, applied once
  }
  if (!v.ok() && v.status().code() == absl::StatusCode::kFailedPrecondition &&
      client_->description(0).backup_workers() > 0) {
    // A backup worker that came late: the step completed without it.
    v = s.step + 1;
  }
  RETURN_IF_ERROR(v.status());
  s.rep.version = *v;
  // The earlier slots' answers (their writes ended before the next slot's
  // backward). Their gradients are gone: a push that failed is not sent
  // again here; the error (UNAVAILABLE: transient) starts the part again at
  // the shards' step, and what a shard took already is applied once.
  for (size_t j = 0; j + 1 < s.pushes.size(); ++j) {
    absl::StatusOr<int64_t> vj = s.pushes[j].stream->Finish();
    if (!vj.ok()) {
      return Annotate(vj.status(),
                      absl::StrCat("push of slot ", s.slots[j]));
    }
    s.rep.version = std::min(s.rep.version, *vj);
  }
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
  // (One slot: several always stream, StepSlots.)
  PushHeader& header = s.push().header;
  header.set_grad_sq_sum(sq);
  if (before_push_) {
    std::function<absl::Status()> before = std::move(before_push_);
    before_push_ = nullptr;
    RETURN_IF_ERROR(before());
  }
  ASSIGN_OR_RETURN(s.rep.version, client_->Push(header, grads()));
  return absl::OkStatus();
}

void TrainWorker::Report(StepState& s) {
  TrainStepReport& rep = s.rep;
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
  // Each slot's report: the step's timings, its own batch, loss and (of
  // several slots) compute.
  for (size_t j = 0; j < s.pushes.size(); ++j) {
    TrainStepReport& r = s.pushes[j].rep;
    const double loss = r.loss, compute = r.compute_ms,
                 cpu = r.compute_cpu_ms;
    const int tokens = r.tokens;
    r = rep;
    r.slot = s.slots[j];
    r.first_example = s.pushes[j].header.first_example();
    r.examples = push_examples();
    r.loss = loss;
    r.tokens = tokens;
    if (s.pushes.size() > 1) {
      r.compute_ms = compute;
      r.compute_cpu_ms = cpu;
    }
  }
}

}  // namespace bertps

#include "worker/train_worker.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/kernels/threads.h"
#include "common/model/batch_view.h"
#include "common/optim/optimizer.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace bertps {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}


}  // namespace

TrainWorker::TrainWorker(const TrainWorkerOptions& options)
    : options_(options) {}
TrainWorker::~TrainWorker() = default;

absl::StatusOr<std::unique_ptr<TrainWorker>> TrainWorker::Create(
    const TrainWorkerOptions& o) {
  if (o.worker < 0 || o.worker >= o.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker index ", o.worker, " outside [0, ", o.num_workers, ")"));
  }
  if (o.batch <= 0 || o.steps < 0) {
    return absl::InvalidArgumentError("batch must be > 0 and steps >= 0");
  }
  if (o.data.empty()) return absl::InvalidArgumentError("no training data");
  std::unique_ptr<TrainWorker> w(new TrainWorker(o));
  ASSIGN_OR_RETURN(w->client_, PsClient::Connect(o.ps, o.config, o.task));
  if (w->client_->description(0).num_workers() != o.num_workers) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the shards expect ", w->client_->description(0).num_workers(),
        " workers, this worker was told ", o.num_workers));
  }
  // Sequence and prediction lengths from the first example.
  ASSIGN_OR_RETURN(w->stream_, io::ExampleStream::Open(o.data));
  std::string record;
  ASSIGN_OR_RETURN(bool got, w->stream_->Next(&record));
  if (!got) return absl::InvalidArgumentError("the training data is empty");
  if (o.task == BertTask::kPretrain) {
    ASSIGN_OR_RETURN(io::PretrainExample e, io::DecodePretrainExample(record));
    w->seq_ = static_cast<int>(e.input_ids.size());
    w->preds_ = static_cast<int>(e.masked_lm_ids.size());
  } else {
    ASSIGN_OR_RETURN(io::ClassifyExample e, io::DecodeClassifyExample(record));
    w->seq_ = static_cast<int>(e.input_ids.size());
  }
  ASSIGN_OR_RETURN(w->stream_, io::ExampleStream::Open(o.data));
  w->stream_pos_ = 0;
  ASSIGN_OR_RETURN(w->model_, BertModel<float>::Create(
                                  o.config, o.task, o.batch, w->seq_,
                                  std::max(w->preds_, 1), &w->mm_));
  return w;
}

absl::Status TrainWorker::ReadBatch(int64_t step) {
  const int64_t global = static_cast<int64_t>(options_.batch) * options_.num_workers;
  const int64_t want = step * global + static_cast<int64_t>(options_.worker) * options_.batch;
  if (want < stream_pos_) {
    ASSIGN_OR_RETURN(stream_, io::ExampleStream::Open(options_.data));
    stream_pos_ = 0;
  }
  std::string record;
  // The stream wraps around at the end of the data (epochs).
  auto next = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(bool got, stream_->Next(&record));
    if (!got) {
      stream_->Reset();
      ASSIGN_OR_RETURN(got, stream_->Next(&record));
      if (!got) return absl::InvalidArgumentError("the training data is empty");
    }
    ++stream_pos_;
    return absl::OkStatus();
  };
  while (stream_pos_ < want) RETURN_IF_ERROR(next());  // others' examples
  // Decode this worker's B examples.
  io::BertBatch& b = batch_;
  b = io::BertBatch();
  b.seq = seq_;
  b.preds = preds_;
  for (int i = 0; i < options_.batch; ++i) {
    RETURN_IF_ERROR(next());
    auto check = [&](size_t s, size_t p) -> absl::Status {
      if (static_cast<int>(s) != seq_ || static_cast<int>(p) != preds_) {
        return absl::InvalidArgumentError(absl::StrCat(
            stream_->last_position(), ": example shape (", s, ", ", p,
            ") differs from the first example's (", seq_, ", ", preds_, ")"));
      }
      return absl::OkStatus();
    };
    if (options_.task == BertTask::kPretrain) {
      absl::StatusOr<io::PretrainExample> e = io::DecodePretrainExample(record);
      if (!e.ok()) return Annotate(e.status(), stream_->last_position());
      RETURN_IF_ERROR(check(e->input_ids.size(), e->masked_lm_ids.size()));
      io::AppendExample(*e, &b);
    } else {
      absl::StatusOr<io::ClassifyExample> e = io::DecodeClassifyExample(record);
      if (!e.ok()) return Annotate(e.status(), stream_->last_position());
      RETURN_IF_ERROR(check(e->input_ids.size(), 0));
      io::AppendExample(*e, &b);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainStepReport> TrainWorker::Step(int64_t step) {
  TrainStepReport rep;
  rep.step = step;
  const ConsistencyMode mode = client_->description(0).mode();
  const bool bsp = mode == BSP;
  const bool global_denominators =
      bsp && client_->description(0).backup_workers() == 0;
  RETURN_IF_ERROR(ReadBatch(step));
  StepOptions so;
  so.train = options_.dropout;
  so.seed = options_.seed;
  so.step = step;
  // Dropout keys: (seed, step, index within the global batch).
  so.example_offset = static_cast<int64_t>(options_.worker) * options_.batch;
  auto t0 = Clock::now();
  if (global_denominators) {
    AnnounceRequest a;
    a.set_worker(options_.worker);
    a.set_step(step);
    double w = 0;
    for (float x : batch_.masked_lm_weights) w += x;
    a.set_mlm_weight(w);
    a.set_examples(options_.batch);
    ASSIGN_OR_RETURN(AnnounceResponse totals, client_->Announce(a));
    so.mlm_denominator = totals.mlm_weight_total() + 1e-5;
    so.example_denominator = static_cast<double>(totals.examples_total());
  }
  auto t1 = Clock::now();
  ASSIGN_OR_RETURN(int64_t version,
                   client_->Pull(options_.worker, bsp ? step : 0, step,
                                 model_->params()));
  (void)version;
  auto t2 = Clock::now();
  PushHeader header;
  header.set_worker(options_.worker);
  header.set_step(step);
  header.set_examples(options_.batch);
  std::unique_ptr<PsClient::PushStream> stream;
  if (bsp && options_.overlap_push) {
    ASSIGN_OR_RETURN(stream, client_->BeginPush(header));
    so.on_grads_ready = [&](const std::vector<int>& tensors) {
      for (int t : tensors) {
        stream->Send(t, model_->grads() + model_->layout().tensors()[t].offset);
      }
    };
  }
  ASSIGN_OR_RETURN(StepResult r, model_->Step(ViewOf(batch_), so));
  auto t3 = Clock::now();
  if (stream) {
    absl::StatusOr<int64_t> v = stream->Finish();
    if (!v.ok() && v.status().code() == absl::StatusCode::kUnavailable) {
      v = client_->Push(header, model_->grads());  // retried, applied once
    }
    if (!v.ok() && v.status().code() == absl::StatusCode::kFailedPrecondition &&
        client_->description(0).backup_workers() > 0) {
      // A backup worker that came late: the step completed without it.
      v = step + 1;
    }
    RETURN_IF_ERROR(v.status());
    rep.version = *v;
  } else {
    double sq = 0;
    for (const ParamSpec& p : model_->layout().tensors()) {
      sq += optim::GradSquaredSum(model_->grads() + p.offset, p.size);
    }
    if (!std::isfinite(sq)) {
      return absl::InternalError(absl::StrCat(
          "step ", step, ": the gradient is not finite (loss ", r.loss, ")"));
    }
    header.set_grad_sq_sum(sq);
    ASSIGN_OR_RETURN(rep.version, client_->Push(header, model_->grads()));
  }
  auto t4 = Clock::now();
  // The loss of this worker's own batch (with global denominators r.loss is
  // only this worker's share of the global batch's loss).
  if (options_.task == BertTask::kPretrain) {
    rep.loss = r.mlm.weighted_nll / (r.mlm.weight + 1e-5) +
               r.nsp.weighted_nll / std::max(r.nsp.weight, 1.0);
  } else {
    rep.loss = r.cls.weighted_nll / std::max(r.cls.weight, 1.0);
  }
  rep.first_example = (step * options_.num_workers + options_.worker) *
                      static_cast<int64_t>(options_.batch);
  rep.examples = options_.batch;
  for (int32_t m : batch_.input_mask) rep.tokens += m;
  rep.learning_rate = optim::LearningRate(options_.optimizer, step);
  rep.wait_ms = Ms(t0, t1);
  rep.pull_ms = Ms(t1, t2);
  rep.compute_ms = Ms(t2, t3);
  rep.push_ms = Ms(t3, t4);
  return rep;
}

absl::Status TrainWorker::Run() {
  kernels::UseConfiguredThreads();  // a member runs this on its own thread
  // A restarted worker joins at the shards' current step.
  int64_t start = 0;
  {
    ASSIGN_OR_RETURN(std::vector<StatsResponse> stats, client_->Stats());
    start = stats[0].version();
    if (client_->description(0).mode() != BSP) {
      start = stats[0].worker_clock(options_.worker);
    }
  }
  auto begin = Clock::now();
  double loss_sum = 0;
  int64_t n = 0;
  TrainStepReport sum;
  for (int64_t step = start; step < options_.steps; ++step) {
    if (options_.cancel != nullptr && options_.cancel->load()) {
      return absl::CancelledError("the job was stopped");
    }
    ASSIGN_OR_RETURN(TrainStepReport rep, Step(step));
    loss_sum += rep.loss;
    ++n;
    sum.pull_ms += rep.pull_ms;
    sum.compute_ms += rep.compute_ms;
    sum.push_ms += rep.push_ms;
    sum.wait_ms += rep.wait_ms;
    // Worker 0 checkpoints every checkpoint_every steps and after the last
    // step (when a directory is set), before reporting the step, so the
    // report names the manifest (the coordinator evaluates it).
    if (options_.worker == 0 && !options_.checkpoint_dir.empty() &&
        ((options_.checkpoint_every > 0 &&
          (step + 1) % options_.checkpoint_every == 0) ||
         step + 1 == options_.steps)) {
      ASSIGN_OR_RETURN(std::string manifest,
                       client_->Checkpoint(options_.checkpoint_dir, step + 1));
      rep.checkpoint = manifest;
      if (options_.log) {
        nlohmann::ordered_json j;
        j["checkpoint"] = manifest;
        j["version"] = step + 1;
        *options_.log << j.dump() << std::endl;
      }
    }
    if (options_.on_step) options_.on_step(rep);
    if (options_.log && ((step + 1) % options_.log_every == 0 ||
                         step + 1 == options_.steps)) {
      const double secs =
          std::chrono::duration<double>(Clock::now() - begin).count();
      nlohmann::ordered_json j;
      j["worker"] = options_.worker;
      j["step"] = step + 1;
      j["loss"] = loss_sum / n;
      j["examples_per_sec"] = (step + 1 - start) * options_.batch / secs;
      j["tokens_per_sec"] = (step + 1 - start) * options_.batch * seq_ / secs;
      j["pull_ms"] = sum.pull_ms / n;
      j["compute_ms"] = sum.compute_ms / n;
      j["push_ms"] = sum.push_ms / n;
      j["wait_ms"] = sum.wait_ms / n;
      *options_.log << j.dump() << std::endl;
      loss_sum = 0;
      n = 0;
      sum = TrainStepReport();
    }
  }
  if (options_.worker == 0 && !options_.export_path.empty()) {
    if (client_->description(0).mode() == BSP) {
      // Wait for the last step to be applied everywhere.
      std::vector<float> scratch(model_->num_params());
      RETURN_IF_ERROR(client_->Pull(0, options_.steps, options_.steps,
                                    scratch.data())
                          .status());
    }
    RETURN_IF_ERROR(client_->Export(options_.export_path));
  }
  return absl::OkStatus();
}

}  // namespace bertps

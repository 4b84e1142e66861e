#include "worker/train_worker.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/io/file_util.h"
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
  if (o.worker == 0) {
    // Worker 0 writes these at the end of the run: found unwritable now,
    // not after all the training.
    if (!o.export_path.empty()) {
      const size_t slash = o.export_path.rfind('/');
      RETURN_IF_ERROR(io::CheckWritableDir(
          slash == std::string::npos ? "." : o.export_path.substr(0, slash),
          absl::StrCat("export_path ", o.export_path)));
    }
    if (!o.checkpoint_dir.empty()) {
      RETURN_IF_ERROR(io::CheckWritableDir(
          o.checkpoint_dir, absl::StrCat("checkpoint dir ", o.checkpoint_dir)));
    }
  }
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
  {
    // The model, its gradients and activations, plus a parameter-sized
    // buffer of the client (bf16 residuals or pull staging).
    const int64_t preds = std::max(w->preds_, 1);
    const int64_t params = ParamLayout::ForBert(o.config, o.task).total_size();
    const int64_t need =
        BertModel<float>::MemoryBytes(o.config, o.task, o.batch, w->seq_,
                                      preds) +
        params * static_cast<int64_t>(sizeof(float));
    const MemoryLimit limit =
        o.memory_limit.bytes > 0 ? o.memory_limit : DetectMemoryLimit();
    RETURN_IF_ERROR(CheckFits(
        absl::StrCat("train worker ", o.worker), need,
        absl::StrCat(params, " parameters; activations of batch ", o.batch,
                     " x seq ", w->seq_, ": ",
                     FormatBytes(BertModel<float>::ActivationBytes(
                         o.config, o.task, o.batch, w->seq_, preds)),
                     "; lower batch_size or use a smaller model"),
        limit));
  }
  ASSIGN_OR_RETURN(w->model_, BertModel<float>::Create(
                                  o.config, o.task, o.batch, w->seq_,
                                  std::max(w->preds_, 1), &w->mm_));
  // Forward's parameter groups: the embeddings but the word table (whose
  // rows come first), each layer, the rest (with the whole word table).
  w->groups_.assign(ParamGroupRest(o.config) + 1, {});
  const auto& tensors = w->model_->layout().tensors();
  for (size_t t = 0; t < tensors.size(); ++t) {
    const std::string& name = tensors[t].name;
    int g = ParamGroupRest(o.config);
    int layer = -1;
    if (name != "bert.embeddings.word_embeddings.weight" &&
        absl::StartsWith(name, "bert.embeddings.")) {
      g = kParamGroupEmbeddings;
    } else if (std::sscanf(name.c_str(), "bert.encoder.layer.%d.", &layer) == 1) {
      g = ParamGroupOfLayer(layer);
    }
    w->groups_[g].push_back(static_cast<int>(t));
  }
  return w;
}

absl::Status TrainWorker::ReadBatch(int64_t step, io::BertBatch* out) {
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
  io::BertBatch& b = *out;
  b = io::BertBatch();
  b.seq = seq_;
  b.preds = preds_;
  b.first_position = stream_pos_;  // what the push will say it trained on
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
    // Each example checked alone (ids in the vocabulary, labels, mask), so
    // that an error names its file and offset, not a row of a batch.
    io::BertBatch one;
    one.seq = seq_;
    one.preds = preds_;
    if (options_.task == BertTask::kPretrain) {
      absl::StatusOr<io::PretrainExample> e = io::DecodePretrainExample(record);
      if (!e.ok()) return Annotate(e.status(), stream_->last_position());
      RETURN_IF_ERROR(check(e->input_ids.size(), e->masked_lm_ids.size()));
      io::AppendExample(*e, &one);
      io::AppendExample(*e, &b);
    } else {
      absl::StatusOr<io::ClassifyExample> e = io::DecodeClassifyExample(record);
      if (!e.ok()) return Annotate(e.status(), stream_->last_position());
      RETURN_IF_ERROR(check(e->input_ids.size(), 0));
      io::AppendExample(*e, &one);
      io::AppendExample(*e, &b);
    }
    const BertConfig& c = options_.config;
    absl::Status valid = one.Validate(
        static_cast<int>(c.vocab_size), static_cast<int>(c.max_position_embeddings),
        static_cast<int>(c.type_vocab_size),
        options_.task == BertTask::kClassify ? static_cast<int>(c.num_labels) : 0);
    if (!valid.ok()) return Annotate(valid, stream_->last_position());
  }
  return absl::OkStatus();
}

absl::Status TrainWorker::Prepare(int64_t step, io::BertBatch* batch,
                                  double* mlm_denominator,
                                  double* example_denominator,
                                  double* wait_ms) {
  const bool bsp = client_->description(0).mode() == BSP;
  RETURN_IF_ERROR(ReadBatch(step, batch));
  *mlm_denominator = 0;
  *example_denominator = 0;
  if (bsp && client_->description(0).backup_workers() == 0) {
    // Global loss denominators, so that the pushes add up to one big
    // batch's gradient.
    const auto t0 = Clock::now();
    AnnounceRequest a;
    a.set_worker(options_.worker);
    a.set_step(step);
    double w = 0;
    for (float x : batch->masked_lm_weights) w += x;
    a.set_mlm_weight(w);
    a.set_examples(options_.batch);
    ASSIGN_OR_RETURN(AnnounceResponse totals, client_->Announce(a));
    *mlm_denominator = totals.mlm_weight_total() + 1e-5;
    *example_denominator = static_cast<double>(totals.examples_total());
    *wait_ms += Ms(t0, Clock::now());
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainStepReport> TrainWorker::Step(int64_t step) {
  TrainStepReport rep;
  rep.step = step;
  const ConsistencyMode mode = client_->description(0).mode();
  const bool bsp = mode == BSP;
  const auto t0 = Clock::now();
  // Waits: for this step's announce when it was not prepared ahead, for the
  // next step's batch and announce (prepared on the side), for parameters
  // inside forward and at its end.
  double start_wait_ms = 0, wait_ms = 0, next_wait_ms = 0;
  double forward_wait_ms = 0, pull_end_ms = 0;
  auto first_rows = [&](const io::BertBatch& b) {
    TensorRows r;
    r.set_name("bert.embeddings.word_embeddings.weight");
    for (int64_t id : DistinctInputIds(ViewOf(b))) r.add_rows(id);
    return r;
  };
  if (prepared_step_ != step) {
    pull_.reset();
    RETURN_IF_ERROR(Prepare(step, &batch_, &mlm_denominator_,
                            &example_denominator_, &wait_ms));
    start_wait_ms = wait_ms;
    const TensorRows first = first_rows(batch_);
    pull_ = client_->StartPull(options_.worker, bsp ? step : 0, step,
                               model_->params(), &first);
    prepared_step_ = step;
  }
  StepOptions so;
  so.train = options_.dropout;
  so.seed = options_.seed;
  so.step = step;
  // Dropout keys: (seed, step, index within the global batch).
  so.example_offset = static_cast<int64_t>(options_.worker) * options_.batch;
  so.mlm_denominator = mlm_denominator_;
  so.example_denominator = example_denominator_;
  // Forward reads each group of parameters once it arrived.
  so.before_params = [&](int group) {
    const auto w0 = Clock::now();
    absl::Status st = pull_->Wait(groups_[group],
                                  group == kParamGroupEmbeddings);
    forward_wait_ms += Ms(w0, Clock::now());
    return st;
  };
  PushHeader header;
  header.set_worker(options_.worker);
  header.set_step(step);
  header.set_examples(options_.batch);
  // The examples this step's batch was read from (ReadBatch): global batch
  // step * N + worker's share (BSP: worker i's B of global batch `step`;
  // ASP/SSP: update ticket step * N + i). Shard 0 counts them.
  header.set_first_example(batch_.first_position);
  std::unique_ptr<PsClient::PushStream> stream;
  absl::Status stream_error;
  const bool overlap = bsp && options_.overlap_push;
  // The stream opens at the first gradient: the shards refuse a push of a
  // step they have not reached, and this step's parameters (so its
  // version) arrived only during forward.
  auto open = [&]() -> PsClient::PushStream* {
    if (!stream && stream_error.ok()) {
      absl::StatusOr<std::unique_ptr<PsClient::PushStream>> s =
          client_->BeginPush(header);
      if (s.ok()) {
        stream = std::move(*s);
      } else {
        stream_error = s.status();
      }
    }
    return stream.get();
  };
  // Under BSP the next step's batch is read and announced on the side while
  // this one computes (the announce waits for every worker's batch).
  const bool next = overlap && step + 1 < options_.steps;
  double next_mlm = 0, next_examples = 0;
  std::future<absl::Status> next_prepared;
  absl::Status next_status;  // of next_prepared, once taken
  bool next_taken = false;
  TensorRows next_first;  // the next batch's word-embedding rows
  std::unique_ptr<PsClient::PendingPull> next_pull;
  // Takes the next step's batch (waits for it when `wait`); false while it
  // is still being read.
  auto take_next = [&](bool wait) {
    if (next_taken) return true;
    if (!wait && next_prepared.wait_for(std::chrono::seconds(0)) !=
                     std::future_status::ready) {
      return false;
    }
    next_status = next_prepared.get();
    next_taken = true;
    if (next_status.ok()) next_first = first_rows(next_batch_);
    return true;
  };
  // The next step's pull starts at this step's first gradient, once its
  // batch is known: the shards hold it until this step's update makes its
  // pieces, so the pull's own start is off the step's critical path. Its
  // values can only arrive after this worker's push ends when every shard
  // is at this step and all workers are needed. Otherwise it starts after
  // the push: with backup workers a step may end without this one, and a
  // shard already past this step (this worker restarted after some shards
  // took its push) would send while backward still reads the parameters.
  double early_pull_ms = 0;  // spent here, in backward: pull time
  auto start_next_pull = [&](PsClient::PushStream* ps) {
    if (!next || next_pull != nullptr ||
        client_->description(0).backup_workers() > 0 || !take_next(false) ||
        !next_status.ok()) {
      return;
    }
    const auto e0 = Clock::now();
    // Every parameter of this step arrived before backward.
    if (!pull_->Finish().ok()) return;  // reported when Step ends
    for (int64_t v : pull_->versions()) {
      if (v != step) return;
    }
    // The shards update the rows the next pull asks first, first.
    ps->SendNextFirst(next_first);
    next_pull = client_->StartPull(options_.worker, step + 1, step + 1,
                                   model_->params(), &next_first);
    early_pull_ms += Ms(e0, Clock::now());
  };
  // The word embedding's gradient goes out early but for the rows of the
  // input ids, which backward adds last and which follow then.
  std::vector<int> pending;  // tensors whose rows are still to come
  std::shared_ptr<const std::vector<int64_t>> pending_rows;
  if (overlap) {
    so.on_grads_ready_except_rows = [&](int t,
                                        const std::vector<int64_t>& rows) {
      PsClient::PushStream* ps = open();
      if (ps == nullptr) return;
      start_next_pull(ps);
      pending_rows = std::make_shared<const std::vector<int64_t>>(rows);
      ps->SendRows(t, model_->grads() + model_->layout().tensors()[t].offset,
                   pending_rows, /*except=*/true);
      pending.push_back(t);
    };
    so.on_grads_ready = [&](const std::vector<int>& tensors) {
      PsClient::PushStream* ps = open();
      if (ps == nullptr) return;
      start_next_pull(ps);
      for (int t : tensors) {
        const float* g = model_->grads() + model_->layout().tensors()[t].offset;
        if (std::find(pending.begin(), pending.end(), t) != pending.end()) {
          ps->SendRows(t, g, pending_rows, /*except=*/false);
        } else {
          ps->Send(t, g);
        }
      }
    };
  }
  if (next) {
    next_prepared = std::async(std::launch::async, [&] {
      return Prepare(step + 1, &next_batch_, &next_mlm, &next_examples,
                     &next_wait_ms);
    });
  }
  const auto t1 = Clock::now();
  absl::StatusOr<StepResult> stepped = model_->Step(ViewOf(batch_), so);
  if (!stepped.ok() && next && !next_taken) next_prepared.wait();
  ASSIGN_OR_RETURN(StepResult r, std::move(stepped));
  const auto t2 = Clock::now();
  // Every parameter arrived before backward; the pull is over.
  {
    const auto p0 = Clock::now();
    ASSIGN_OR_RETURN(int64_t version, pull_->Finish());  // again: no wait
    (void)version;
    pull_.reset();
    prepared_step_ = -1;
    pull_end_ms = Ms(p0, Clock::now());
  }
  // The loss of this worker's own batch (with global denominators r.loss is
  // only this worker's share of the global batch's loss).
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
        "step ", step, ": the loss of worker ", options_.worker,
        "'s batch is not finite (", rep.loss,
        "): the parameters or the learning rate diverged (or the initial "
        "weights hold NaN/Inf); nothing of this step was applied"));
  }
  for (int32_t m : batch_.input_mask) rep.tokens += m;
  const auto t3 = Clock::now();
  if (overlap) {
    RETURN_IF_ERROR(stream_error);
    if (open() == nullptr) return stream_error;
    // The next step's batch, totals and pull (when not started during
    // backward), while the push's last bytes travel; its pull waits on the
    // shards for this step's update.
    if (next) {
      // Read and announced during this step; usually done.
      const auto n0 = Clock::now();
      take_next(/*wait=*/true);
      RETURN_IF_ERROR(next_status);
      wait_ms += Ms(n0, Clock::now());
      mlm_denominator_ = next_mlm;
      example_denominator_ = next_examples;
      if (next_pull == nullptr) stream->SendNextFirst(next_first);
    }
    stream->CloseWrites();
    if (next) {
      std::swap(batch_, next_batch_);
      if (next_pull == nullptr) {
        next_pull = client_->StartPull(options_.worker, step + 1, step + 1,
                                       model_->params(), &next_first);
      }
      pull_ = std::move(next_pull);
      prepared_step_ = step + 1;
    }
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
      return absl::FailedPreconditionError(absl::StrCat(
          "step ", step, ": the gradient of worker ", options_.worker,
          "'s batch is not finite (loss ", r.loss,
          "); nothing of this step was applied"));
    }
    header.set_grad_sq_sum(sq);
    ASSIGN_OR_RETURN(rep.version, client_->Push(header, model_->grads()));
  }
  const auto t4 = Clock::now();
  rep.first_example = header.first_example();
  rep.examples = options_.batch;
  // The rate the shard applied to this update: its index is the version
  // before it (BSP: the step; ASP/SSP: the update this push became).
  rep.learning_rate =
      optim::LearningRate(options_.optimizer, std::max<int64_t>(rep.version - 1, 0));
  rep.wait_ms = wait_ms;
  rep.pull_ms = Ms(t0, t1) - start_wait_ms + forward_wait_ms + pull_end_ms +
                early_pull_ms;
  rep.compute_ms = Ms(t1, t2) - forward_wait_ms - early_pull_ms;
  rep.push_ms = Ms(t3, t4) - (wait_ms - start_wait_ms);
  return rep;
}

absl::Status TrainWorker::Run() {
  kernels::UseConfiguredThreads();  // a member runs this on its own thread
  const bool bsp = client_->description(0).mode() == BSP;
  const int64_t n = options_.num_workers;
  // The update ticket of this worker's step j (see TrainWorkerOptions).
  auto ticket = [&](int64_t step) {
    return bsp ? step : step * n + options_.worker;
  };
  // A restarted worker joins at the shards' current step.
  int64_t start = 0;
  {
    ASSIGN_OR_RETURN(std::vector<StatsResponse> stats, client_->Stats());
    start = stats[0].version();
    if (!bsp) start = stats[0].worker_clock(options_.worker);
  }
  const bool checkpoints = options_.worker == 0 &&
                           !options_.checkpoint_dir.empty();
  const int64_t every = options_.checkpoint_every;
  // ASP/SSP: the shards hold the tickets at or past each multiple k of
  // `every` until the checkpoint of version k is written (ShardOptions::
  // checkpoint_every); worker 0 writes it before pushing such a ticket.
  int64_t cut = 0;
  if (!bsp && every > 0) {
    ASSIGN_OR_RETURN(std::vector<StatsResponse> stats, client_->Stats());
    cut = (stats[0].version() / every + 1) * every;
  }
  std::string pending_checkpoint;
  int64_t pending_version = 0;
  bool final_written = false;
  auto write_checkpoint = [&](int64_t version) -> absl::Status {
    ASSIGN_OR_RETURN(pending_checkpoint,
                     client_->Checkpoint(options_.checkpoint_dir, version));
    pending_version = version;
    if (options_.log) {
      nlohmann::ordered_json j;
      j["checkpoint"] = pending_checkpoint;
      j["version"] = version;
      *options_.log << j.dump() << std::endl;
    }
    return absl::OkStatus();
  };
  auto begin = Clock::now();
  double loss_sum = 0;
  int64_t count = 0;
  TrainStepReport sum;
  for (int64_t step = start; ticket(step) < options_.steps; ++step) {
    if (options_.cancel != nullptr && options_.cancel->load()) {
      return absl::CancelledError("the job was stopped");
    }
    if (checkpoints && !bsp && every > 0) {
      for (; cut <= ticket(step) && cut < options_.steps; cut += every) {
        RETURN_IF_ERROR(write_checkpoint(cut));
      }
    }
    ASSIGN_OR_RETURN(TrainStepReport rep, Step(step));
    loss_sum += rep.loss;
    ++count;
    sum.pull_ms += rep.pull_ms;
    sum.compute_ms += rep.compute_ms;
    sum.push_ms += rep.push_ms;
    sum.wait_ms += rep.wait_ms;
    // BSP: worker 0 checkpoints every checkpoint_every steps and after the
    // last step, before reporting the step, so the report names the
    // manifest (the coordinator evaluates it).
    if (checkpoints && bsp &&
        ((every > 0 && (step + 1) % every == 0) ||
         step + 1 == options_.steps)) {
      RETURN_IF_ERROR(write_checkpoint(step + 1));
    }
    const bool last = ticket(step + 1) >= options_.steps;
    if (checkpoints && !bsp && last) {
      // The remaining cuts, then the last update (every worker's pushes),
      // before this step's report so that it names the final checkpoint.
      for (; every > 0 && cut < options_.steps; cut += every) {
        RETURN_IF_ERROR(write_checkpoint(cut));
      }
      RETURN_IF_ERROR(write_checkpoint(options_.steps));
      final_written = true;
    }
    // ASP/SSP: the checkpoint of a cut reached while this step was done.
    if (!pending_checkpoint.empty()) {
      rep.checkpoint = std::move(pending_checkpoint);
      rep.checkpoint_version = pending_version;
      pending_checkpoint.clear();
    }
    if (options_.on_step) options_.on_step(rep);
    if (options_.log && ((step + 1) % options_.log_every == 0 || last)) {
      const double secs =
          std::chrono::duration<double>(Clock::now() - begin).count();
      nlohmann::ordered_json j;
      j["worker"] = options_.worker;
      j["step"] = step + 1;
      j["loss"] = loss_sum / count;
      j["examples_per_sec"] = (step + 1 - start) * options_.batch / secs;
      j["tokens_per_sec"] = (step + 1 - start) * options_.batch * seq_ / secs;
      j["pull_ms"] = sum.pull_ms / count;
      j["compute_ms"] = sum.compute_ms / count;
      j["push_ms"] = sum.push_ms / count;
      j["wait_ms"] = sum.wait_ms / count;
      *options_.log << j.dump() << std::endl;
      loss_sum = 0;
      count = 0;
      sum = TrainStepReport();
    }
  }
  if (checkpoints && !bsp && !final_written) {
    // Restarted after its last step: the final checkpoint all the same,
    // reported with a repeat of that step (counted once).
    for (; every > 0 && cut < options_.steps; cut += every) {
      RETURN_IF_ERROR(write_checkpoint(cut));
    }
    RETURN_IF_ERROR(write_checkpoint(options_.steps));
    if (options_.on_step && start > 0) {
      TrainStepReport rep;
      rep.step = start - 1;
      rep.checkpoint = std::move(pending_checkpoint);
      rep.checkpoint_version = pending_version;
      rep.version = options_.steps;
      options_.on_step(rep);
    }
  }
  if (options_.worker == 0 && !options_.export_path.empty()) {
    // Wait for the last update to be applied everywhere (every mode).
    std::vector<float> scratch(model_->num_params());
    RETURN_IF_ERROR(
        client_->Pull(0, options_.steps, options_.steps, scratch.data())
            .status());
    RETURN_IF_ERROR(client_->Export(options_.export_path));
  }
  return absl::OkStatus();
}

}  // namespace bertps

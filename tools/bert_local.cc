#include "tools/bert_local.h"

#include <chrono>
#include <cmath>
#include <memory>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/io/bert_example.h"
#include "common/io/safetensors.h"
#include "common/io/tfrecord.h"
#include "common/kernels/matmul.h"
#include "common/kernels/threads.h"
#include "common/model/batch_view.h"
#include "common/model/bert.h"
#include "common/model/weights.h"
#include "common/optim/optimizer.h"
#include "common/status.h"
#include "glog/logging.h"
#include "common/ps/checkpoint.h"
#include "nlohmann/json.hpp"

namespace bertps {
namespace {


// Reads a batch given as safetensors of BERT's feature tensors.
absl::StatusOr<io::BertBatch> ReadBatchFile(const std::string& path,
                                            BertTask task) {
  ASSIGN_OR_RETURN(io::SafetensorsReader r, io::SafetensorsReader::Open(path));
  io::BertBatch b;
  auto get = [&](const char* name, std::vector<int32_t>* dst,
                 int rank) -> absl::Status {
    const io::TensorInfo* t = r.Find(name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": batch lacks ", name));
    }
    if (static_cast<int>(t->shape.size()) != rank) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", name, " must have rank ", rank));
    }
    ASSIGN_OR_RETURN(*dst, r.ReadI32(name));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(get("input_ids", &b.input_ids, 2));
  const io::TensorInfo* ids = r.Find("input_ids");
  b.batch = static_cast<int>(ids->shape[0]);
  b.seq = static_cast<int>(ids->shape[1]);
  RETURN_IF_ERROR(get("input_mask", &b.input_mask, 2));
  RETURN_IF_ERROR(get("segment_ids", &b.segment_ids, 2));
  if (r.Find("input_mask")->shape != ids->shape ||
      r.Find("segment_ids")->shape != ids->shape) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": input_mask and segment_ids must match input_ids"));
  }
  auto need_rows = [&](const char* name, int64_t cols) -> absl::Status {
    const io::TensorInfo* t = r.Find(name);
    std::vector<int64_t> want = {b.batch};
    if (cols >= 0) want.push_back(cols);
    if (t->shape != want) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", name, " has the wrong shape"));
    }
    return absl::OkStatus();
  };
  if (task == BertTask::kPretrain) {
    RETURN_IF_ERROR(get("masked_lm_positions", &b.masked_lm_positions, 2));
    b.preds = static_cast<int>(r.Find("masked_lm_positions")->shape[1]);
    RETURN_IF_ERROR(get("masked_lm_ids", &b.masked_lm_ids, 2));
    RETURN_IF_ERROR(need_rows("masked_lm_ids", b.preds));
    if (r.Find("masked_lm_weights") == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": batch lacks masked_lm_weights"));
    }
    RETURN_IF_ERROR(need_rows("masked_lm_weights", b.preds));
    ASSIGN_OR_RETURN(b.masked_lm_weights, r.ReadF32("masked_lm_weights"));
    RETURN_IF_ERROR(get("next_sentence_labels", &b.next_sentence_labels, 1));
    RETURN_IF_ERROR(need_rows("next_sentence_labels", -1));
  } else {
    RETURN_IF_ERROR(get("label_ids", &b.label_ids, 1));
    RETURN_IF_ERROR(need_rows("label_ids", -1));
  }
  return b;
}

// The engine of the requested precision; a bf16 request on a CPU without
// native bf16 runs fp32 and says so on stderr (the JSON says which ran).
std::unique_ptr<kernels::MatmulEngine> MakeEngine(const LocalOptions& o) {
  auto mm = std::make_unique<kernels::MatmulEngine>(o.precision);
  if (mm->precision() != o.precision) {
    LOG(WARNING) << "--precision " << kernels::PrecisionName(o.precision)
                 << ": this CPU has no native bf16 (oneDNN ISA "
                 << kernels::Bf16Hardware() << "); running "
                 << kernels::PrecisionName(mm->precision());
  }
  return mm;
}

absl::StatusOr<std::unique_ptr<BertModel<float>>> MakeModel(
    const LocalOptions& o, int64_t batch, int64_t seq, int64_t preds,
    kernels::MatmulEngine* mm) {
  return BertModel<float>::Create(o.config, o.task, batch, seq,
                                  std::max<int64_t>(preds, 1), mm);
}

// (seq, preds) of the first example of the data.
absl::StatusOr<std::pair<int, int>> PeekShape(const LocalOptions& o) {
  ASSIGN_OR_RETURN(auto stream, io::ExampleStream::Open(o.data));
  std::string record;
  ASSIGN_OR_RETURN(bool got, stream->Next(&record));
  if (!got) {
    return absl::InvalidArgumentError("the training data holds no examples");
  }
  if (o.task == BertTask::kPretrain) {
    ASSIGN_OR_RETURN(io::PretrainExample e, io::DecodePretrainExample(record));
    return std::make_pair(static_cast<int>(e.input_ids.size()),
                          static_cast<int>(e.masked_lm_ids.size()));
  }
  ASSIGN_OR_RETURN(io::ClassifyExample e, io::DecodeClassifyExample(record));
  return std::make_pair(static_cast<int>(e.input_ids.size()), 0);
}

}  // namespace

absl::Status RunGrad(const LocalOptions& o, std::ostream& out) {
  ASSIGN_OR_RETURN(io::BertBatch batch, ReadBatchFile(o.batch_file, o.task));
  auto mm = MakeEngine(o);
  ASSIGN_OR_RETURN(auto model,
                   MakeModel(o, batch.batch, batch.seq, batch.preds, mm.get()));
  ASSIGN_OR_RETURN(WeightsReport report,
                   LoadBertWeights(o.weights, model->layout(),
                                   AllowMissing::kNone, model->params()));
  StepOptions so;
  so.train = false;
  ASSIGN_OR_RETURN(StepResult r, model->Step(ViewOf(batch), so));
  RETURN_IF_ERROR(
      SaveBertWeights(o.out, model->layout(), model->grads(), &o.config));
  nlohmann::ordered_json j;
  if (o.task == BertTask::kPretrain) {
    j["mlm_loss"] = r.mlm_loss;
    j["nsp_loss"] = r.nsp_loss;
    j["loss"] = r.loss;
  } else {
    j["loss"] = r.loss;
    nlohmann::json rows = nlohmann::json::array();
    const int64_t nl = o.config.num_labels;
    for (int i = 0; i < batch.batch; ++i) {
      rows.push_back(std::vector<float>(r.logits.begin() + i * nl,
                                        r.logits.begin() + (i + 1) * nl));
    }
    j["logits"] = rows;
  }
  j["precision"] = kernels::PrecisionName(mm->precision());
  out << j.dump() << std::endl;
  return absl::OkStatus();
}

absl::Status RunTrain(const LocalOptions& o, std::ostream& out) {
  if (o.data.empty()) return absl::InvalidArgumentError("--data is required");
  if (o.out.empty()) return absl::InvalidArgumentError("--out is required");
  if (o.batch_size <= 0 || o.steps <= 0) {
    return absl::InvalidArgumentError("--batch and --steps must be positive");
  }
  RETURN_IF_ERROR(optim::ValidateConfig(o.optimizer));
  ASSIGN_OR_RETURN(auto shape, PeekShape(o));
  const int seq = shape.first, preds = shape.second;
  auto mm = MakeEngine(o);
  ASSIGN_OR_RETURN(auto model,
                   MakeModel(o, o.batch_size, seq, preds, mm.get()));
  InitBertParams(model->layout(), o.config, o.seed, model->params());
  if (!o.init.empty()) {
    ASSIGN_OR_RETURN(WeightsReport report,
                     LoadBertWeights(o.init, model->layout(),
                                     AllowMissing::kHeads, model->params()));
    (void)report;
  }
  const int slots = optim::StateSlots(o.optimizer);
  std::vector<float> state(static_cast<size_t>(slots) * model->num_params());
  std::vector<optim::NamedTensor> tensors;
  for (const ParamSpec& p : model->layout().tensors()) {
    tensors.push_back(optim::NamedTensor{
        p.name, model->params() + p.offset, model->grads() + p.offset,
        slots ? state.data() + static_cast<int64_t>(slots) * p.offset : nullptr,
        p.size});
  }
  ASSIGN_OR_RETURN(optim::TensorOptimizer opt,
                   optim::TensorOptimizer::Create(o.optimizer, tensors));
  ASSIGN_OR_RETURN(auto stream, io::ExampleStream::Open(o.data));
  io::BertBatch batch;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  double loss_sum = 0;
  int64_t loss_n = 0;
  // Per-step time split, summed over the log interval: reading the batch,
  // forward + backward, the optimizer step.
  double read_ms = 0, compute_ms = 0, optimizer_ms = 0, compute_cpu_ms = 0;
  auto ms_since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };
  StepResult last;
  for (int64_t step = 0; step < o.steps; ++step) {
    const auto t0 = Clock::now();
    if (o.task == BertTask::kPretrain) {
      RETURN_IF_ERROR(
          io::FillPretrainBatch(*stream, o.batch_size, seq, preds, &batch));
    } else {
      RETURN_IF_ERROR(io::FillClassifyBatch(*stream, o.batch_size, seq, &batch));
    }
    StepOptions so;
    so.train = o.dropout;
    so.seed = o.seed;
    so.step = step;
    so.example_offset = 0;
    read_ms += ms_since(t0);
    const auto t1 = Clock::now();
    const double cpu0 = kernels::ComputeCpuSeconds();
    ASSIGN_OR_RETURN(last, model->Step(ViewOf(batch), so));
    compute_cpu_ms += 1e3 * (kernels::ComputeCpuSeconds() - cpu0);
    compute_ms += ms_since(t1);
    const auto t2 = Clock::now();
    RETURN_IF_ERROR(opt.Step(step));
    optimizer_ms += ms_since(t2);
    loss_sum += last.loss;
    ++loss_n;
    if ((step + 1) % o.log_every == 0 || step + 1 == o.steps) {
      const double secs =
          std::chrono::duration<double>(Clock::now() - start).count();
      nlohmann::ordered_json j;
      j["step"] = step + 1;
      j["loss"] = loss_sum / loss_n;
      j["lr"] = opt.last_learning_rate();
      j["grad_norm"] = opt.last_global_norm();
      j["epoch"] = stream->epoch();
      j["examples_per_sec"] = (step + 1) * o.batch_size / secs;
      j["read_ms"] = read_ms / loss_n;
      j["compute_ms"] = compute_ms / loss_n;
      j["compute_cpu_ms"] = compute_cpu_ms / loss_n;
      j["optimizer_ms"] = optimizer_ms / loss_n;
      j["precision"] = kernels::PrecisionName(mm->precision());
      out << j.dump() << std::endl;
      loss_sum = 0;
      loss_n = 0;
      read_ms = compute_ms = optimizer_ms = compute_cpu_ms = 0;
    }
  }
  RETURN_IF_ERROR(
      SaveBertWeights(o.out, model->layout(), model->params(), &o.config));
  return absl::OkStatus();
}

absl::Status RunEval(const LocalOptions& o, std::ostream& out) {
  if (o.data.empty()) return absl::InvalidArgumentError("--data is required");
  if (o.batch_size <= 0) return absl::InvalidArgumentError("--batch must be > 0");
  ASSIGN_OR_RETURN(auto shape, PeekShape(o));
  const int seq = shape.first, preds = shape.second;
  auto mm = MakeEngine(o);
  ASSIGN_OR_RETURN(auto model,
                   MakeModel(o, o.batch_size, seq, preds, mm.get()));
  if (absl::EndsWith(o.weights, "manifest.json")) {
    // A checkpoint of the parameter servers (one consistent version).
    RETURN_IF_ERROR(ps::LoadCheckpointParams(o.weights, model->layout(),
                                             model->params())
                        .status());
  } else {
    ASSIGN_OR_RETURN(WeightsReport report,
                     LoadBertWeights(o.weights, model->layout(),
                                     AllowMissing::kNone, model->params()));
    (void)report;
  }
  ASSIGN_OR_RETURN(std::vector<std::string> files, io::MatchShardFiles(o.data));
  XentResult mlm, nsp, cls;
  int64_t examples = 0;
  io::BertBatch batch;
  std::string record;
  // Batches never span files (so a file evaluated alone, as an eval worker
  // does, gives the same batches).
  for (const std::string& file : files) {
  auto stream = std::make_unique<io::ExampleStream>(std::vector<std::string>{file});
  bool more = true;
  while (more) {
    // One pass: fill up to batch_size examples, never wrapping around.
    batch = io::BertBatch();
    batch.seq = seq;
    batch.preds = preds;
    while (batch.batch < o.batch_size) {
      ASSIGN_OR_RETURN(more, stream->Next(&record));
      if (!more) break;
      auto check = [&](size_t tokens, size_t predictions) -> absl::Status {
        if (static_cast<int>(tokens) != seq ||
            static_cast<int>(predictions) != preds) {
          return absl::InvalidArgumentError(absl::StrCat(
              stream->last_position(), ": example shape (", tokens, ", ",
              predictions, ") differs from the first example's (", seq, ", ",
              preds, ")"));
        }
        return absl::OkStatus();
      };
      if (o.task == BertTask::kPretrain) {
        ASSIGN_OR_RETURN(io::PretrainExample e,
                         io::DecodePretrainExample(record));
        RETURN_IF_ERROR(check(e.input_ids.size(), e.masked_lm_ids.size()));
        io::AppendExample(e, &batch);
      } else {
        ASSIGN_OR_RETURN(io::ClassifyExample e,
                         io::DecodeClassifyExample(record));
        RETURN_IF_ERROR(check(e.input_ids.size(), 0));
        io::AppendExample(e, &batch);
      }
    }
    if (batch.batch == 0) break;
    StepOptions so;
    so.train = false;
    so.backward = false;
    ASSIGN_OR_RETURN(StepResult r, model->Step(ViewOf(batch), so));
    examples += batch.batch;
    mlm.Add(r.mlm);
    nsp.Add(r.nsp);
    cls.Add(r.cls);
  }
  }
  if (examples == 0) return absl::InvalidArgumentError("no examples to evaluate");
  nlohmann::ordered_json j;
  j["examples"] = examples;
  j["precision"] = kernels::PrecisionName(mm->precision());
  if (o.task == BertTask::kPretrain) {
    const double mlm_loss = mlm.weighted_nll / std::max(mlm.weight, 1e-12);
    j["mlm_accuracy"] = mlm.correct / std::max(mlm.weight, 1e-12);
    j["mlm_loss"] = mlm_loss;
    j["mlm_perplexity"] = std::exp(mlm_loss);
    j["nsp_accuracy"] = static_cast<double>(nsp.correct) / examples;
    j["nsp_loss"] = nsp.weighted_nll / examples;
    j["mlm_correct"] = mlm.correct;
    j["mlm_weight"] = mlm.weight;
    j["mlm_loss_sum"] = mlm.weighted_nll;
    j["nsp_correct"] = nsp.correct;
  } else {
    j["accuracy"] = static_cast<double>(cls.correct) / examples;
    j["loss"] = cls.weighted_nll / examples;
    j["correct"] = cls.correct;
    j["loss_sum"] = cls.weighted_nll;
  }
  out << j.dump() << std::endl;
  return absl::OkStatus();
}

absl::Status RunSyntheticData(const std::string& dir, int files,
                              int examples_per_file, int seq, int preds,
                              int vocab, uint64_t seed) {
  if (files <= 0 || examples_per_file <= 0 || seq < 4 || preds <= 0 ||
      preds > seq - 2 || vocab < 10) {
    return absl::InvalidArgumentError("synthetic data: bad sizes");
  }
  std::mt19937_64 rng(seed);
  for (int f = 0; f < files; ++f) {
    ASSIGN_OR_RETURN(auto w, io::TFRecordWriter::Open(absl::StrCat(
                                 dir, "/synthetic-", f, ".tfrecord")));
    for (int i = 0; i < examples_per_file; ++i) {
      io::PretrainExample e;
      // Tokens from a band of at most 100 ids, so that a small model learns
      // the pattern within a few hundred steps.
      const int band = std::min(100, vocab - 5);
      const int first = vocab > 1100 ? 1000 : 5;
      auto draw = [&] { return first + static_cast<int>(rng() % band); };
      const int tok = draw();
      for (int j = 0; j < seq; ++j) {
        e.input_ids.push_back(j == 0 ? 1 : (rng() % 2 ? tok : draw()));
        e.input_mask.push_back(1);
        e.segment_ids.push_back(j < seq / 2 ? 0 : 1);
      }
      for (int k = 0; k < preds; ++k) {
        const int pos = 1 + k * (seq - 2) / preds;
        e.masked_lm_positions.push_back(pos);
        e.masked_lm_ids.push_back(tok);
        e.masked_lm_weights.push_back(1.0f);
        e.input_ids[pos] = 4;
      }
      e.next_sentence_label = tok % 2;
      RETURN_IF_ERROR(w->Write(io::EncodePretrainExample(e)));
    }
    RETURN_IF_ERROR(w->Close());
  }
  return absl::OkStatus();
}

}  // namespace bertps

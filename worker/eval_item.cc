#include "worker/eval_item.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/io/file_util.h"
#include "common/kernels/threads.h"
#include "common/io/bert_example.h"
#include "common/model/batch_view.h"
#include "common/model/bert_config.h"
#include "common/model/params.h"
#include "common/status.h"
#include "common/ps/checkpoint.h"

namespace bertps {
namespace {

// The records of the item, as decoded examples appended to batches.
class ItemReader {
 public:
  explicit ItemReader(const WorkItem& item)
      : item_(item), stream_(std::vector<std::string>{item.input()}) {}

  // Next record of the item (false at the end).
  absl::StatusOr<bool> Next(std::string* record) {
    for (;;) {
      ASSIGN_OR_RETURN(bool got, stream_.Next(record));
      if (!got) return false;
      const int64_t k = k_++;
      if (k % item_.parts() == item_.part()) return true;
    }
  }
  std::string position() const { return stream_.last_position(); }
  // The index in the file of the record Next() returned last.
  int64_t record() const { return k_ - 1; }

 private:
  const WorkItem item_;
  io::ExampleStream stream_;
  int64_t k_ = 0;
};

}  // namespace

EvalItemRunner::EvalItemRunner() = default;
EvalItemRunner::~EvalItemRunner() = default;

absl::Status EvalItemRunner::Load(const std::string& manifest, int batch,
                                  int seq, int preds) {
  if (manifest == manifest_ && model_ && batch == batch_ && seq == seq_ &&
      preds == preds_) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(ps::Manifest m, ps::ReadManifest(manifest));
  ASSIGN_OR_RETURN(BertConfig config, ParseBertConfig(m.config_json));
  ASSIGN_OR_RETURN(BertTask task, ParseBertTask(m.task));
  model_.reset();
  manifest_.clear();
  ASSIGN_OR_RETURN(model_, BertModel<float>::Create(config, task, batch, seq,
                                                    preds, &mm_));
  ASSIGN_OR_RETURN(version_, ps::LoadCheckpointParams(
                                 manifest, model_->layout(), model_->params()));
  manifest_ = manifest;
  batch_ = batch;
  seq_ = seq;
  preds_ = preds;
  return absl::OkStatus();
}

absl::StatusOr<WorkResult> EvalItemRunner::Run(const JobSpec& spec,
                                               const WorkItem& item,
                                               const std::atomic<bool>& cancel) {
  kernels::UseConfiguredThreads();  // runs on the member's item thread
  if (item.parts() < 1 || item.part() < 0 || item.part() >= item.parts()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "eval item ", item.index(), ": part ", item.part(), " of ", item.parts()));
  }
  if (item.checkpoint().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("eval item ", item.index(), ": no checkpoint"));
  }
  std::string manifest = item.checkpoint();
  if (!absl::EndsWith(manifest, ".json")) {
    ASSIGN_OR_RETURN(manifest, ps::LatestManifest(manifest));
  }
  ASSIGN_OR_RETURN(ps::Manifest m, ps::ReadManifest(manifest));
  ASSIGN_OR_RETURN(BertTask task, ParseBertTask(m.task));
  const int batch_size = std::max(1, spec.batch_size());

  const std::string& predictions_dir = spec.eval().predictions_dir();
  if (!predictions_dir.empty() && task != BertTask::kClassify) {
    return absl::InvalidArgumentError(absl::StrCat(
        "eval.predictions_dir: ", manifest, " is not a classifier's "
        "checkpoint (per-example predictions are written for classification)"));
  }
  // With predictions_dir: a line per example (file, record, label,
  // predicted, probabilities).
  std::string predictions;
  std::vector<int64_t> records;  // of the batch being filled
  ItemReader reader(item);
  EvalStats st;
  std::string record;
  bool more = true;
  int seq = -1, preds = -1;
  while (more) {
    if (cancel.load()) return absl::CancelledError("eval item cancelled");
    io::BertBatch batch;
    records.clear();
    while (batch.batch < batch_size) {
      ASSIGN_OR_RETURN(more, reader.Next(&record));
      if (!more) break;
      records.push_back(reader.record());
      auto check = [&](size_t tokens, size_t predictions) -> absl::Status {
        if (seq < 0) {
          seq = static_cast<int>(tokens);
          preds = static_cast<int>(predictions);
        }
        if (static_cast<int>(tokens) != seq ||
            static_cast<int>(predictions) != preds) {
          return absl::InvalidArgumentError(absl::StrCat(
              reader.position(), ": example shape (", tokens, ", ",
              predictions, ") differs from the item's first example's (", seq,
              ", ", preds, ")"));
        }
        batch.seq = seq;
        batch.preds = preds;
        return absl::OkStatus();
      };
      if (task == BertTask::kPretrain) {
        absl::StatusOr<io::PretrainExample> e = io::DecodePretrainExample(record);
        if (!e.ok()) return Annotate(e.status(), reader.position());
        RETURN_IF_ERROR(check(e->input_ids.size(), e->masked_lm_ids.size()));
        io::AppendExample(*e, &batch);
      } else {
        absl::StatusOr<io::ClassifyExample> e = io::DecodeClassifyExample(record);
        if (!e.ok()) return Annotate(e.status(), reader.position());
        RETURN_IF_ERROR(check(e->input_ids.size(), 0));
        io::AppendExample(*e, &batch);
      }
    }
    if (batch.batch == 0) break;
    batch.seq = seq;
    batch.preds = preds;
    RETURN_IF_ERROR(Load(manifest, batch_size, seq, preds));
    StepOptions so;
    so.train = false;
    so.backward = false;
    ASSIGN_OR_RETURN(StepResult r, model_->Step(ViewOf(batch), so));
    st.set_examples(st.examples() + batch.batch);
    if (task == BertTask::kPretrain) {
      st.set_mlm_loss_sum(st.mlm_loss_sum() + r.mlm.weighted_nll);
      st.set_mlm_weight(st.mlm_weight() + r.mlm.weight);
      st.set_mlm_correct(st.mlm_correct() + r.mlm.correct);
      st.set_nsp_correct(st.nsp_correct() + r.nsp.correct);
      st.set_nsp_loss_sum(st.nsp_loss_sum() + r.nsp.weighted_nll);
    } else {
      const int L = model_->config().num_labels;
      if (st.num_labels() == 0) {
        st.set_num_labels(L);
        st.mutable_confusion()->Resize(L * L, 0);
      }
      st.set_cls_loss_sum(st.cls_loss_sum() + r.cls.weighted_nll);
      for (int b = 0; b < batch.batch; ++b) {
        const float* row = r.logits.data() + static_cast<size_t>(b) * L;
        const int pred = static_cast<int>(std::max_element(row, row + L) - row);
        const int truth = batch.label_ids[b];
        if (truth < 0 || truth >= L) {
          return absl::InvalidArgumentError(absl::StrCat(
              item.input(), ": label ", truth, " outside [0, ", L, ")"));
        }
        st.set_confusion(truth * L + pred, st.confusion(truth * L + pred) + 1);
        if (!predictions_dir.empty()) {
          // Probabilities: softmax of the row (in double).
          const float top = row[pred];
          double z = 0;
          for (int k = 0; k < L; ++k) z += std::exp(double(row[k]) - top);
          absl::StrAppend(&predictions, item.input(), "\t", records[b], "\t",
                          truth, "\t", pred);
          for (int k = 0; k < L; ++k) {
            absl::StrAppend(&predictions, "\t",
                            absl::StrFormat("%.6g", std::exp(double(row[k]) -
                                                             top) / z));
          }
          predictions += '\n';
        }
      }
    }
  }
  if (task == BertTask::kClassify && st.num_labels() == 0) {
    ASSIGN_OR_RETURN(BertConfig config, ParseBertConfig(m.config_json));
    st.set_num_labels(config.num_labels);
    st.mutable_confusion()->Resize(config.num_labels * config.num_labels, 0);
  }
  if (!predictions_dir.empty()) {
    std::string header = "file\trecord\tlabel\tpredicted";
    for (int k = 0; k < st.num_labels(); ++k) {
      absl::StrAppend(&header, "\tp_", k);
    }
    RETURN_IF_ERROR(io::MakeDirs(predictions_dir));
    // Written whole (a retried item replaces it).
    RETURN_IF_ERROR(io::WriteFileAtomically(
        absl::StrFormat("%s/predictions-%s-%05d.tsv", predictions_dir,
                        item.round().empty() ? "eval" : item.round(),
                        item.index()),
        absl::StrCat(header, "\n", predictions)));
  }
  WorkResult res;
  res.set_index(item.index());
  res.set_round(item.round());
  res.set_records(st.examples());
  res.set_version(m.version);
  *res.mutable_eval() = std::move(st);
  return res;
}

}  // namespace bertps

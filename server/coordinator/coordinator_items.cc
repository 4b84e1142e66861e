// The Coordinator's Leased work items (preprocess, eval) and eval rounds: leasing, results,
// merged statistics and metrics.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/io/bert_example.h"
#include "common/status.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_internal.h"

namespace bertps {

using coordinator_internal::EvalGlobs;

absl::StatusOr<std::vector<WorkItem>> MakeWorkItems(
    const std::vector<std::string>& globs, int shards, const PathRoots& roots) {
  ASSIGN_OR_RETURN(std::vector<std::string> files,
                   io::MatchShardFiles(globs, 0, 1, [&](const std::string& f) {
                     return CheckInputFile("input file", f, roots);
                   }));
  const int n = static_cast<int>(files.size());
  const int parts = shards <= n ? 1 : (shards + n - 1) / n;
  std::vector<WorkItem> items;
  for (const std::string& f : files) {
    for (int p = 0; p < parts; ++p) {
      WorkItem w;
      w.set_index(static_cast<int>(items.size()));
      w.set_input(f);
      w.set_part(p);
      w.set_parts(parts);
      items.push_back(std::move(w));
    }
  }
  return items;
}

absl::Status AddEvalStats(const EvalStats& b, EvalStats* a) {
  if (a->num_labels() == 0 && a->confusion_size() == 0) {
    a->set_num_labels(b.num_labels());
    a->mutable_confusion()->Resize(b.confusion_size(), 0);
  }
  if (a->num_labels() != b.num_labels() ||
      a->confusion_size() != b.confusion_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "eval statistics: ", b.num_labels(), " labels (", b.confusion_size(),
        " cells) do not add to ", a->num_labels(), " labels"));
  }
  a->set_examples(a->examples() + b.examples());
  a->set_mlm_loss_sum(a->mlm_loss_sum() + b.mlm_loss_sum());
  a->set_mlm_weight(a->mlm_weight() + b.mlm_weight());
  a->set_mlm_correct(a->mlm_correct() + b.mlm_correct());
  a->set_nsp_correct(a->nsp_correct() + b.nsp_correct());
  a->set_nsp_loss_sum(a->nsp_loss_sum() + b.nsp_loss_sum());
  a->set_cls_loss_sum(a->cls_loss_sum() + b.cls_loss_sum());
  for (int i = 0; i < b.confusion_size(); ++i) {
    a->set_confusion(i, a->confusion(i) + b.confusion(i));
  }
  return absl::OkStatus();
}

EvalMetrics MetricsOf(const EvalStats& st,
                      const std::vector<std::string>& label_names) {
  EvalMetrics m;
  *m.mutable_stats() = st;
  m.set_examples(st.examples());
  const double n = std::max<int64_t>(st.examples(), 1);
  if (st.num_labels() == 0) {
    const double w = std::max(st.mlm_weight(), 1e-12);
    m.set_mlm_accuracy(st.mlm_correct() / w);
    m.set_mlm_loss(st.mlm_loss_sum() / w);
    m.set_mlm_perplexity(std::exp(m.mlm_loss()));
    m.set_nsp_accuracy(st.nsp_correct() / n);
    m.set_nsp_loss(st.nsp_loss_sum() / n);
    return m;
  }
  const int L = st.num_labels();
  auto cell = [&](int t, int p) -> int64_t {
    const int i = t * L + p;
    return i < st.confusion_size() ? st.confusion(i) : 0;
  };
  int64_t correct = 0;
  double f1_sum = 0;
  for (int c = 0; c < L; ++c) {
    int64_t tp = cell(c, c), predicted = 0, actual = 0;
    for (int k = 0; k < L; ++k) {
      predicted += cell(k, c);
      actual += cell(c, k);
    }
    correct += tp;
    ClassMetrics* cm = m.add_classes();
    cm->set_label(c < static_cast<int>(label_names.size())
                      ? label_names[c]
                      : absl::StrCat(c));
    cm->set_precision(predicted ? double(tp) / predicted : 0);
    cm->set_recall(actual ? double(tp) / actual : 0);
    const double pr = cm->precision() + cm->recall();
    cm->set_f1(pr > 0 ? 2 * cm->precision() * cm->recall() / pr : 0);
    cm->set_support(actual);
    f1_sum += cm->f1();
  }
  m.set_accuracy(correct / n);
  m.set_loss(st.cls_loss_sum() / n);
  m.set_macro_f1(f1_sum / L);
  return m;
}

void Coordinator::ReleaseLocked(Member& m) {
  if (m.job.empty()) return;
  auto it = jobs_.find(m.job);
  if (it != jobs_.end() && m.index >= 0 &&
      m.index < static_cast<int>(it->second.work.size())) {
    Item& item = it->second.work[m.index];
    if (item.holder == m.id && !item.done) {
      item.holder.clear();
      EventLocked(it->second,
                  absl::StrCat("item ", m.index, " (member ", m.id,
                               ") given back; it will be redone"));
    }
  }
  m.lost_lease_job = m.job;
  m.lost_lease_index = m.index;
  m.job.clear();
  m.index = -1;
}

absl::StatusOr<bool> Coordinator::CheckResultLocked(const Member& m,
                                                    const std::string& job_id,
                                                    const WorkResult& r) const {
  if (m.job == job_id && m.index == r.index()) return true;
  auto it = jobs_.find(job_id);
  // Nothing a result could change: a job that is gone or over, an item that
  // does not exist or is done, a lease taken back from this member when it
  // was lost (redone by another).
  if (it == jobs_.end() || it->second.status.state() != RUNNING) return false;
  const Job& job = it->second;
  if (r.index() < 0 || r.index() >= static_cast<int>(job.work.size()) ||
      job.work[r.index()].done) {
    return false;
  }
  if (m.lost_lease_job == job_id && m.lost_lease_index == r.index()) {
    return false;
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "member ", m.id, " holds no lease of job ", job_id, " item ", r.index(),
      ": its result is refused (a member reports only the item it was "
      "leased)"));
}

void Coordinator::LeaseLocked(Member& m) {
  if (m.draining) return;  // no new work for a member that drains
  const bool eval = m.role == EVAL_ROLE;
  for (auto& [id, job] : jobs_) {
    if (job.status.state() != RUNNING) continue;
    const bool pre = job.status.spec().task() == PREPROCESS;
    if (pre == eval) continue;  // preprocess members take preprocess items
    if (eval && job.rounds.empty()) continue;
    for (size_t i = 0; i < job.work.size(); ++i) {
      Item& item = job.work[i];
      if (item.done || !item.holder.empty()) continue;
      if (eval && item.item.round().empty()) continue;
      item.holder = m.id;
      m.job = id;
      m.index = static_cast<int>(i);
      return;
    }
  }
}

void Coordinator::TakeResultLocked(Member& m, const std::string& job_id,
                                   const WorkResult& r) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  Job& job = it->second;
  // Only the member holding the item's lease reports it (CheckResultLocked
  // refused others before anything counted); a late result of a lease taken
  // back is ignored: another member redoes the item.
  if (m.job != job_id || m.index != r.index()) return;
  m.job.clear();
  m.index = -1;
  if (job.status.state() != RUNNING) return;
  if (r.index() < 0 || r.index() >= static_cast<int>(job.work.size())) return;
  Item& item = job.work[r.index()];
  if (item.done) return;  // redone by another member: counted once
  if (!r.error().empty()) {
    FinishLocked(job, FAILED,
                 absl::StrCat("item ", r.index(), " (", item.item.input(),
                              " part ", item.item.part(), "/",
                              item.item.parts(), ", member ", m.id,
                              "): ", r.error()));
    return;
  }
  item.done = true;
  item.holder.clear();
  item.result = r;
  job.status.set_items_done(job.status.items_done() + 1);
  if (job.status.spec().task() == PREPROCESS) {
    job.status.set_records_written(job.status.records_written() + r.records());
    EventLocked(job, absl::StrCat("item ", r.index(), " done: ", r.records(),
                                  " records"));
  }
  for (Round& round : job.rounds) {
    if (r.index() >= round.first && r.index() < round.first + round.count) {
      if (++round.done == round.count) FinishRoundLocked(job, round);
    }
  }
  MaybeSucceedLocked(job);
}

void Coordinator::AddRoundLocked(Job& job, const std::string& name,
                                 int64_t version,
                                 const std::string& checkpoint) {
  absl::StatusOr<std::vector<WorkItem>> items =
      MakeWorkItems(EvalGlobs(job.status.spec()),
                    job.status.spec().eval().shards(), options_.roots);
  if (!items.ok()) {
    FinishLocked(job, FAILED, absl::StrCat("eval round ", name, ": ",
                                           items.status().message()));
    return;
  }
  Round round;
  round.name = name;
  round.version = version;
  round.checkpoint = checkpoint;
  round.first = static_cast<int>(job.work.size());
  round.count = static_cast<int>(items->size());
  for (WorkItem& w : *items) {
    Item it;
    it.item = std::move(w);
    it.item.set_index(static_cast<int>(job.work.size()));
    it.item.set_round(name);
    it.item.set_checkpoint(checkpoint);
    it.item.set_version(version);
    job.work.push_back(std::move(it));
  }
  job.rounds.push_back(round);
  job.status.set_items_total(static_cast<int>(job.work.size()));
  EventLocked(job, absl::StrCat("eval ", name, ": ", round.count, " item(s)"));
}

void Coordinator::FinishRoundLocked(Job& job, Round& round) {
  EvalStats total;
  int64_t version = round.version;
  for (int i = round.first; i < round.first + round.count; ++i) {
    absl::Status st = AddEvalStats(job.work[i].result.eval(), &total);
    if (!st.ok()) {
      FinishLocked(job, FAILED, absl::StrCat("eval ", round.name, ": ",
                                             st.message()));
      return;
    }
    version = std::max(version, job.work[i].result.version());
  }
  const JobSpec& spec = job.status.spec();
  std::vector<std::string> names(spec.label_names().begin(),
                                 spec.label_names().end());
  if (names.empty()) {
    names.assign(spec.preprocess().labels().begin(),
                 spec.preprocess().labels().end());
  }
  EvalMetrics m = MetricsOf(total, names);
  m.set_round(round.name);
  m.set_step(version);
  m.set_time_ms(NowMs());
  round.finished = true;
  QueuePruneLocked(job);  // the round no longer pins its checkpoint
  *job.status.add_evals() = m;
  if (total.num_labels() > 0) {
    ScalarLocked(job, version, "eval/accuracy", m.accuracy());
    ScalarLocked(job, version, "eval/macro_f1", m.macro_f1());
    ScalarLocked(job, version, "eval/loss", m.loss());
  } else {
    ScalarLocked(job, version, "eval/mlm_accuracy", m.mlm_accuracy());
    ScalarLocked(job, version, "eval/mlm_loss", m.mlm_loss());
    ScalarLocked(job, version, "eval/mlm_perplexity", m.mlm_perplexity());
    ScalarLocked(job, version, "eval/nsp_accuracy", m.nsp_accuracy());
  }
  EventLocked(job,
              total.num_labels() > 0
                  ? absl::StrFormat("eval %s at step %d: accuracy %.4f, macro-F1 "
                                    "%.4f over %d examples",
                                    round.name, version, m.accuracy(),
                                    m.macro_f1(), m.examples())
                  : absl::StrFormat("eval %s at step %d: MLM accuracy %.4f, "
                                    "perplexity %.2f, NSP accuracy %.4f over "
                                    "%d examples",
                                    round.name, version, m.mlm_accuracy(),
                                    m.mlm_perplexity(), m.nsp_accuracy(),
                                    m.examples()));
}

}  // namespace bertps

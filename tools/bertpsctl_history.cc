// bertpsctl's verbs over a job's history: metrics (progress and the loss
// history), plot (the loss curve as SVG), events (the job's log), resubmit
// (an ended job's spec again).
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/strings/str_format.h"
#include "common/io/file_util.h"
#include "nlohmann/json.hpp"
#include "tools/bertpsctl.h"
#include "tools/bertpsctl_internal.h"
#include "tools/printable.h"
#include "tools/svg_plot.h"

namespace bertps {
namespace ctl {

using internal::Fail;
using internal::GetJob;
using internal::IsProgressOnly;
using internal::IsTerminal;
using internal::MessageToObject;
using internal::PrintStructured;
using internal::RpcError;
using internal::SetDeadline;
using internal::StepText;
using internal::TimeText;

int CmdMetrics(JobService::StubInterface* stub, const CtlOptions& o,
               const std::string& job, std::ostream& out, std::ostream& err) {
  JobStatus s;
  const grpc::Status st = GetJob(stub, o, job, &s);
  if (!st.ok()) return Fail(err, RpcError(o, "GetJob", st, job));
  if (o.json || o.yaml) {
    nlohmann::json j;
    j["id"] = s.id();
    j["name"] = s.spec().name();
    j["state"] = JobState_Name(s.state());
    j["reason"] = s.reason();
    j["progress"] = MessageToObject(s.progress());
    nlohmann::json history = nlohmann::json::array();
    for (const LossPoint& p : s.history()) {
      history.push_back(MessageToObject(p));
    }
    j["history"] = std::move(history);
    nlohmann::json evals = nlohmann::json::array();
    for (const EvalMetrics& e : s.evals()) evals.push_back(MessageToObject(e));
    j["evals"] = std::move(evals);
    if (s.items_total() > 0) {
      j["items_total"] = s.items_total();
      j["items_done"] = s.items_done();
      j["records_written"] = s.records_written();
    }
    PrintStructured(o, j.dump(), out);
    return kExitOk;
  }
  out << "# job " << s.id() << " " << JobState_Name(s.state()) << " step "
      << StepText(s.progress()) << "\n";
  out << "step\tloss\tlearning_rate\n";
  for (const LossPoint& p : s.history()) {
    out << p.step() << "\t" << absl::StrFormat("%.6g", p.loss()) << "\t"
        << absl::StrFormat("%.6g", p.learning_rate()) << "\n";
  }
  return kExitOk;
}

int CmdPlot(JobService::StubInterface* stub, const CtlOptions& o,
            const std::string& job, std::ostream& out, std::ostream& err) {
  JobStatus s;
  const grpc::Status st = GetJob(stub, o, job, &s);
  if (!st.ok()) return Fail(err, RpcError(o, "GetJob", st, job));
  if (s.history_size() == 0) {
    return Fail(err, absl::StrCat("job ", job, " has no loss history yet"));
  }
  plot::Series loss{"training loss",    {}, {}, plot::Axis::kLeft,
                    plot::Style::kLine, ""};
  plot::Series lr{"learning rate",    {}, {}, plot::Axis::kRight,
                  plot::Style::kLine, ""};
  bool any_lr = false;
  for (const LossPoint& p : s.history()) {
    loss.x.push_back(p.step());
    loss.y.push_back(p.loss());
    lr.x.push_back(p.step());
    lr.y.push_back(p.learning_rate());
    any_lr = any_lr || p.learning_rate() != 0;
  }
  std::vector<plot::Series> series = {loss};
  // Eval rounds as points on the loss axis (same loss: MLM + NSP, or the
  // classification loss).
  plot::Series eval{"eval loss (held out)", {}, {}, plot::Axis::kLeft,
                    plot::Style::kPoints, ""};
  for (const EvalMetrics& e : s.evals()) {
    eval.x.push_back(e.step());
    eval.y.push_back(e.stats().num_labels() > 0 ? e.loss()
                                                : e.mlm_loss() + e.nsp_loss());
  }
  if (!eval.x.empty()) series.push_back(eval);
  if (any_lr) series.push_back(lr);
  plot::PlotOptions po;
  po.title = s.spec().name().empty()
                 ? absl::StrCat("job ", s.id())
                 : absl::StrCat("job ", s.id(), " (", s.spec().name(), ")");
  absl::StrAppend(&po.title, ": ", JobState_Name(s.state()), ", step ",
                  StepText(s.progress()));
  const absl::Status w =
      io::WriteFileAtomically(o.out, plot::RenderLossSvg(series, po));
  if (!w.ok()) return Fail(err, w.message());
  out << "wrote " << o.out << " (" << s.history_size() << " points, steps "
      << s.history(0).step() << "-" << s.history(s.history_size() - 1).step()
      << ")\n";
  return kExitOk;
}

int CmdEvents(JobService::StubInterface* stub, const CtlOptions& o,
              const std::string& job, std::ostream& out, std::ostream& err) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, o);
  WatchJobRequest req;
  req.set_id(job);
  req.set_backlog_only(true);
  std::unique_ptr<grpc::ClientReaderInterface<JobEvent>> reader =
      stub->WatchJob(&ctx, req);
  JobEvent ev;
  while (reader->Read(&ev)) {
    const std::string& m = ev.message();
    if (IsProgressOnly(m)) continue;
    const JobStatus& s = ev.status();
    if (o.json || o.yaml) {
      // One object per line (JSON lines), or one YAML list item each.
      nlohmann::ordered_json j;
      j["time_ms"] = ev.time_ms();
      j["state"] = JobState_Name(s.state());
      j["step"] = s.progress().step();
      j["message"] = m;
      if (o.yaml) {
        PrintStructured(o, nlohmann::ordered_json::array({j}).dump(), out);
      } else {
        out << j.dump() << "\n";
      }
    } else {
      out << TimeText(ev.time_ms()) << "  "
          << absl::StrFormat("%-9s step %-12s ", JobState_Name(s.state()),
                             StepText(s.progress()))
          << Printable(m) << "\n";
    }
  }
  const grpc::Status st = reader->Finish();
  if (!st.ok()) return Fail(err, RpcError(o, "WatchJob", st, job));
  return kExitOk;
}

void GiveOwnDirectory(const std::string& id, JobSpec* spec) {
  std::string old = spec->job_dir();
  if (old.empty()) return;
  while (old.size() > 1 && old.back() == '/') old.pop_back();
  // The old directory (its checkpoints, export, records) is the old job's:
  // the new one reads it (checkpoint.restore) and writes its own.
  auto under = [&old](const std::string& p) {
    return p == old || absl::StartsWith(p, old + "/");
  };
  if (under(spec->checkpoint().dir())) spec->mutable_checkpoint()->clear_dir();
  if (under(spec->export_path())) spec->clear_export_path();
  if (under(spec->tensorboard_dir())) spec->clear_tensorboard_dir();
  if (under(spec->output_dir())) spec->clear_output_dir();
  if (under(spec->eval().predictions_dir())) {
    spec->mutable_eval()->clear_predictions_dir();
  }
  const std::string& trimmed = old;
  const size_t slash = trimmed.rfind('/');
  const std::string base =
      slash == std::string::npos ? trimmed : trimmed.substr(slash + 1);
  if (base == id) {
    // Named after the job by the coordinator's --jobs_root: it names the
    // new one's after its own id.
    spec->clear_job_dir();
  } else {
    spec->set_job_dir(absl::StrCat(
        trimmed, ".resubmit-",
        absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::UTCTimeZone())));
  }
}

int CmdResubmit(JobService::StubInterface* stub, const CtlOptions& o,
                const std::string& job, std::ostream& out, std::ostream& err) {
  JobStatus s;
  grpc::Status st = GetJob(stub, o, job, &s);
  if (!st.ok()) return Fail(err, RpcError(o, "GetJob", st, job));
  if (!IsTerminal(s.state())) {
    return Fail(err, absl::StrCat("job ", job, " is ", JobState_Name(s.state()),
                                  ": only an ended job is submitted again "
                                  "(cancel it first)"));
  }
  SubmitJobRequest req;
  *req.mutable_spec() = s.spec();
  GiveOwnDirectory(s.id(), req.mutable_spec());
  std::string from;
  if (o.from_checkpoint) {
    if (s.last_checkpoint().empty()) {
      return Fail(err, absl::StrCat("job ", job, " reported no checkpoint to "
                                    "resume from (set checkpoint.dir)"));
    }
    if (s.last_checkpoint_version() >= s.progress().total_steps() &&
        s.progress().total_steps() > 0) {
      // Restored there, the new job would have nothing left to train.
      return Fail(err, absl::StrCat(
                           "job ", job, "'s newest checkpoint is of its last "
                           "step (", s.last_checkpoint_version(), " of ",
                           s.progress().total_steps(),
                           "): nothing is left to train from it; resubmit "
                           "without --from_checkpoint to train again"));
    }
    CheckpointSpec* c = req.mutable_spec()->mutable_checkpoint();
    c->set_restore(s.last_checkpoint());
    c->set_restore_as(CheckpointSpec::CONTINUE);  // its run goes on
    c->set_reset_optimizer(false);
    from = absl::StrCat(" from the checkpoint of step ",
                        s.last_checkpoint_version());
  }
  grpc::ClientContext ctx;
  SetDeadline(&ctx, o);
  SubmitJobResponse resp;
  st = stub->SubmitJob(&ctx, req, &resp);
  if (!st.ok()) return Fail(err, RpcError(o, "SubmitJob", st, ""));
  err << "bertpsctl: resubmitted " << Printable(job) << " as "
      << Printable(resp.id()) << from << "\n";
  out << Printable(resp.id()) << "\n";
  return kExitOk;
}

}  // namespace ctl
}  // namespace bertps

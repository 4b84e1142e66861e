#include "tools/bertpsctl.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "common/cluster/job_spec.h"
#include "common/memory_limit.h"
#include "tools/printable.h"
#include "tools/bertpsctl_internal.h"

namespace bertps {
namespace ctl {
namespace internal {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// An event that only says a step was made ("step N", or no message).
bool IsProgressOnly(const std::string& message) {
  return message.empty() ||
         (absl::StartsWith(message, "step ") && message.size() > 5 &&
          message.find_first_not_of("0123456789", 5) == std::string::npos);
}

bool IsTerminal(JobState s) {
  return s == SUCCEEDED || s == FAILED || s == CANCELLED;
}

void SetDeadline(grpc::ClientContext* ctx, const CtlOptions& o) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + o.timeout));
}

// One "bertpsctl: ..." line for a failed RPC, naming the job or the address.
std::string RpcError(const CtlOptions& o, absl::string_view rpc,
                     const grpc::Status& s, absl::string_view job) {
  const std::string& addr = o.coordinator;
  switch (s.error_code()) {
    case grpc::StatusCode::NOT_FOUND:
      if (!job.empty()) return absl::StrCat("no job ", job);
      break;
    case grpc::StatusCode::UNAVAILABLE:
      return absl::StrCat("cannot reach the coordinator at ", addr, " (", rpc,
                          ": ", s.error_message(), ")");
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::StrCat("the coordinator at ", addr, " did not answer ", rpc,
                          " within ", absl::FormatDuration(o.timeout));
    case grpc::StatusCode::INVALID_ARGUMENT:
      return absl::StrCat("the coordinator at ", addr, " rejected ", rpc, ": ",
                          s.error_message());
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      if (absl::StrContains(s.error_message(), "metadata")) {
        // gRPC's own words name no cause a user can act on.
        return absl::StrCat(
            "the coordinator at ", addr, " refused ", rpc,
            ": the call's metadata (its bearer token and headers) is larger "
            "than gRPC's limit (8 KiB; tokens may be at most 4096 bytes) (",
            s.error_message(), ")");
      }
      return absl::StrCat("the coordinator at ", addr, " refused ", rpc,
                          " as too large: ", s.error_message());
    default:
      break;
  }
  return absl::StrCat(
      rpc, " at the coordinator ", addr, " failed: ",
      absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())),
      ": ", s.error_message());
}

int Fail(std::ostream& err, absl::string_view message, int code) {
  err << "bertpsctl: " << Printable(message) << "\n";
  err.flush();
  return code;
}

grpc::Status GetJob(JobService::StubInterface* stub, const CtlOptions& o,
                    const std::string& job, JobStatus* status) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, o);
  GetJobRequest req;
  req.set_id(job);
  return stub->GetJob(&ctx, req, status);
}

std::string PrintJson(const Message& m, bool pretty) {
  google::protobuf::util::JsonPrintOptions jo;
  jo.add_whitespace = pretty;
  jo.always_print_primitive_fields = true;
  jo.preserve_proto_field_names = true;
  std::string s;
  auto st = google::protobuf::util::MessageToJsonString(m, &s, jo);
  if (!st.ok()) return "{}";
  // add_whitespace ends without a newline on some versions; normalise.
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

std::string TimeText(int64_t ms) {
  if (ms <= 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S %Z", absl::FromUnixMillis(ms),
                          absl::LocalTimeZone());
}

std::string StepText(const JobProgress& p) {
  if (p.total_steps() > 0) {
    return absl::StrCat(p.step(), "/", p.total_steps());
  }
  return absl::StrCat(p.step());
}

bool HasLoss(const JobProgress& p) { return p.step() > 0 || p.loss() != 0; }

std::string LossText(const JobProgress& p) {
  return HasLoss(p) ? absl::StrFormat("%.4g", p.loss()) : "-";
}

// Numbers as JSON numbers (protobuf's JSON writes int64 as strings), enums by
// name, non-finite doubles as null; every field present.
nlohmann::json FieldToJson(const Message& m, const FieldDescriptor* f,
                           int index);

nlohmann::json MessageToObject(const Message& m) {
  nlohmann::json j = nlohmann::json::object();
  const auto* d = m.GetDescriptor();
  const Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->is_repeated()) {
      nlohmann::json a = nlohmann::json::array();
      for (int k = 0; k < r->FieldSize(m, f); ++k) {
        a.push_back(FieldToJson(m, f, k));
      }
      j[f->name()] = std::move(a);
    } else {
      j[f->name()] = FieldToJson(m, f, -1);
    }
  }
  return j;
}

nlohmann::json FieldToJson(const Message& m, const FieldDescriptor* f,
                           int index) {
  const Reflection* r = m.GetReflection();
  const bool rep = index >= 0;
  auto real = [](double v) -> nlohmann::json {
    if (!std::isfinite(v)) return nullptr;
    return v;
  };
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f);
    case FieldDescriptor::CPPTYPE_INT64:
      return rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f);
    case FieldDescriptor::CPPTYPE_UINT32:
      return rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f);
    case FieldDescriptor::CPPTYPE_UINT64:
      return rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return real(rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return real(rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f));
    case FieldDescriptor::CPPTYPE_BOOL:
      return rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f);
    case FieldDescriptor::CPPTYPE_STRING:
      return rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f);
    case FieldDescriptor::CPPTYPE_ENUM:
      return (rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f))->name();
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return MessageToObject(rep ? r->GetRepeatedMessage(m, f, index)
                                 : r->GetMessage(m, f));
  }
  return nullptr;
}

// Watch's liveness check. A watch stream may be silent for a long time (a
// pending job), and a hung or unreachable coordinator does not close it, so
// after `watch_probe_after` without an event this asks GetJob (with the usual
// deadline). If that fails, or shows the job ended, it cancels the stream.
class WatchDog {
 public:
  WatchDog(JobService::StubInterface* stub, const CtlOptions& o,
           std::string job, grpc::ClientContext* stream_ctx)
      : stub_(stub),
        options_(o),
        job_(std::move(job)),
        stream_ctx_(stream_ctx),
        last_activity_(absl::Now()),
        thread_([this] { Run(); }) {}
  ~WatchDog() { Stop(); }

  // An event arrived.
  void Touch() {
    absl::MutexLock l(&mu_);
    last_activity_ = absl::Now();
  }

  void Stop() {
    {
      absl::MutexLock l(&mu_);
      done_ = true;
      if (probe_ctx_ != nullptr) probe_ctx_->TryCancel();
    }
    if (thread_.joinable()) thread_.join();
  }

  // Valid after Stop().
  std::optional<grpc::Status> probe_error() {
    absl::MutexLock l(&mu_);
    return probe_error_;
  }
  std::optional<JobStatus> final_status() {
    absl::MutexLock l(&mu_);
    return final_;
  }

 private:
  void Run() {
    while (true) {
      {
        absl::MutexLock l(&mu_);
        mu_.AwaitWithDeadline(absl::Condition(&done_),
                              last_activity_ + options_.watch_probe_after);
        if (done_) return;
        if (absl::Now() < last_activity_ + options_.watch_probe_after) continue;
      }
      grpc::ClientContext ctx;
      SetDeadline(&ctx, options_);
      {
        absl::MutexLock l(&mu_);
        if (done_) return;
        probe_ctx_ = &ctx;
      }
      GetJobRequest req;
      req.set_id(job_);
      JobStatus status;
      const grpc::Status st = stub_->GetJob(&ctx, req, &status);
      absl::MutexLock l(&mu_);
      probe_ctx_ = nullptr;
      if (done_) return;
      if (!st.ok()) {
        probe_error_ = st;
        stream_ctx_->TryCancel();
        return;
      }
      if (IsTerminal(status.state())) {
        final_ = status;
        stream_ctx_->TryCancel();
        return;
      }
      last_activity_ = absl::Now();
    }
  }

  JobService::StubInterface* const stub_;
  const CtlOptions options_;
  const std::string job_;
  grpc::ClientContext* const stream_ctx_;  // thread-safe TryCancel only

  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_activity_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* probe_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::optional<grpc::Status> probe_error_ ABSL_GUARDED_BY(mu_);
  std::optional<JobStatus> final_ ABSL_GUARDED_BY(mu_);

  std::thread thread_;  // last: starts after everything above is set
};

std::optional<absl::Duration> EstimateEta(const JobStatus& s,
                                          const StepRate& rate) {
  const JobProgress& p = s.progress();
  if (p.total_steps() <= 0) return std::nullopt;
  std::optional<absl::Duration> eta = rate.Eta(p.step(), p.total_steps());
  if (eta) return eta;
  // Before two steps were seen: from throughput, one step being a batch per
  // worker.
  const double per_step = static_cast<double>(s.spec().batch_size()) *
                          std::max(1, s.spec().num_workers());
  if (p.examples_per_sec() > 0 && per_step > 0) {
    const double left = std::max<int64_t>(0, p.total_steps() - p.step());
    return absl::Seconds(left * per_step / p.examples_per_sec());
  }
  return std::nullopt;
}

std::string FinalLine(const JobStatus& s) {
  std::string line =
      absl::StrCat("job ", s.id(), " ", JobState_Name(s.state()));
  if (!s.reason().empty()) absl::StrAppend(&line, ": ", s.reason());
  absl::StrAppend(&line, " (step ", StepText(s.progress()), ", loss ",
                  LossText(s.progress()));
  if (s.start_time_ms() > 0 && s.end_time_ms() >= s.start_time_ms()) {
    absl::StrAppend(
        &line, ", ran ",
        FormatClock(absl::Milliseconds(s.end_time_ms() - s.start_time_ms())));
  }
  absl::StrAppend(&line, ")");
  return line;
}

int ExitCodeOf(JobState s) {
  switch (s) {
    case SUCCEEDED:
      return kExitOk;
    case FAILED:
      return kExitJobFailed;
    case CANCELLED:
      return kExitJobCancelled;
    default:
      return kExitError;
  }
}


}  // namespace internal

using internal::Fail;
using internal::GetJob;
using internal::IsProgressOnly;
using internal::IsTerminal;
using internal::PrintJson;
using internal::RpcError;
using internal::SetDeadline;
using internal::StepText;
using internal::TimeText;
using internal::EstimateEta;
using internal::ExitCodeOf;
using internal::FinalLine;
using internal::HasLoss;
using internal::LossText;
using internal::MessageToObject;
using internal::PrintStructured;
using internal::WatchDog;

// ---------------------------------------------------------------- formatting

std::string FormatClock(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return "?";
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  const int64_t total = absl::ToInt64Seconds(d + absl::Milliseconds(500));
  const int64_t h = total / 3600, m = (total / 60) % 60, s = total % 60;
  if (h > 0) return absl::StrFormat("%d:%02d:%02d", h, m, s);
  return absl::StrFormat("%d:%02d", m, s);
}

void StepRate::Observe(absl::Time now, int64_t step) {
  if (!window_.empty() && window_.back().second == step) return;
  if (!window_.empty() && step < window_.back().second) window_.clear();
  window_.emplace_back(now, step);
  while (window_.size() > 20) window_.pop_front();
}

std::optional<absl::Duration> StepRate::Eta(int64_t step, int64_t total) const {
  if (window_.size() < 2) return std::nullopt;
  const double steps = window_.back().second - window_.front().second;
  const double secs =
      absl::ToDoubleSeconds(window_.back().first - window_.front().first);
  if (steps <= 0 || secs <= 0) return std::nullopt;
  const double left = std::max<int64_t>(0, total - step);
  return absl::Seconds(left * secs / steps);
}

std::string ProgressLine(const JobStatus& s, bool bar,
                         std::optional<absl::Duration> eta) {
  const JobProgress& p = s.progress();
  std::string line;
  if (bar && p.total_steps() > 0) {
    constexpr int kWidth = 20;
    const int filled = static_cast<int>(
        std::clamp<int64_t>(p.step() * kWidth / p.total_steps(), 0, kWidth));
    absl::StrAppend(&line, "[", std::string(filled, '#'),
                    std::string(kWidth - filled, '.'), "] ");
  }
  if (!bar || s.state() != RUNNING) {
    absl::StrAppend(&line, JobState_Name(s.state()), " ");
  }
  absl::StrAppend(&line, "step ", StepText(p), " loss ", LossText(p));
  if (!bar && p.learning_rate() != 0) {
    absl::StrAppend(&line, absl::StrFormat(" lr %.3g", p.learning_rate()));
  }
  if (p.examples_per_sec() > 0) {
    absl::StrAppend(&line, absl::StrFormat(" %.0f ex/s", p.examples_per_sec()));
  }
  if (p.total_steps() > 0 && s.state() == RUNNING) {
    absl::StrAppend(&line, " ETA ", eta ? FormatClock(*eta) : "?");
  }
  return line;
}

// ---------------------------------------------------------------- verbs

int CmdSubmit(JobService::StubInterface* stub, const CtlOptions& o,
              const std::string& spec_path, std::ostream& out,
              std::ostream& err) {
  absl::StatusOr<JobSpec> spec = LoadJobSpec(spec_path);
  if (!spec.ok()) {
    // Name the file once (the loader may already have).
    const absl::string_view message = spec.status().message();
    return Fail(err, absl::StrContains(message, spec_path)
                         ? std::string(message)
                         : absl::StrCat(spec_path, ": ", message));
  }
  grpc::ClientContext ctx;
  SetDeadline(&ctx, o);
  SubmitJobRequest req;
  *req.mutable_spec() = *spec;
  SubmitJobResponse resp;
  const grpc::Status st = stub->SubmitJob(&ctx, req, &resp);
  if (!st.ok()) return Fail(err, RpcError(o, "SubmitJob", st, ""));
  out << Printable(resp.id()) << "\n";
  return kExitOk;
}

int CmdStatus(JobService::StubInterface* stub, const CtlOptions& o,
              const std::string& job, std::ostream& out, std::ostream& err) {
  JobStatus s;
  const grpc::Status st = GetJob(stub, o, job, &s);
  if (!st.ok()) return Fail(err, RpcError(o, "GetJob", st, job));
  if (o.json || o.yaml) {
    PrintStructured(o, PrintJson(s, /*pretty=*/true), out);
    return kExitOk;
  }
  const JobProgress& p = s.progress();
  const JobSpec& spec = s.spec();
  auto row = [&out](absl::string_view key, const std::string& value) {
    out << absl::StrFormat("%-10s %s\n", key, Printable(value));
  };
  row("job", spec.name().empty()
                 ? s.id()
                 : absl::StrCat(s.id(), " (", spec.name(), ")"));
  row("state", JobState_Name(s.state()));
  if (!s.owner().empty()) row("team", s.owner());
  if (!s.reason().empty()) row("reason", s.reason());
  if (!s.store_error().empty()) {
    row("store", absl::StrCat("the coordinator cannot write its job store (",
                              s.store_error(),
                              "): a restart of it would lose what happened "
                              "since the last good write"));
  }
  if (!s.waiting().empty()) {
    const int64_t for_ms = std::max<int64_t>(
        0, absl::ToUnixMillis(absl::Now()) - s.waiting_since_ms());
    row("waiting", absl::StrCat("for ", s.waiting(), " (since ",
                                TimeText(s.waiting_since_ms()), ", ",
                                FormatClock(absl::Milliseconds(for_ms)), ")"));
  }
  row("task",
      absl::StrCat(Task_Name(spec.task()), ", model ",
                   spec.model().empty() ? "-" : spec.model(), ", ",
                   spec.num_workers(), " worker(s) x batch ", spec.batch_size(),
                   spec.accumulation_steps() > 1
                       ? absl::StrCat(" x ", spec.accumulation_steps(),
                                      " accumulated")
                       : "",
                   ", ", spec.num_ps_shards(), " PS shard(s)"));
  std::string step = StepText(p);
  if (p.total_steps() > 0) {
    absl::StrAppend(&step, absl::StrFormat(" (%.1f%%)",
                                           100.0 * p.step() / p.total_steps()));
  }
  absl::StrAppend(&step, ", epoch ", p.epoch(), ", ", p.examples(),
                  " examples");
  row("step", step);
  row("loss", LossText(p));
  row("lr", p.learning_rate() != 0 ? absl::StrFormat("%.4g", p.learning_rate())
                                   : "-");
  row("speed", absl::StrFormat("%.1f ex/s, %.0f tokens/s", p.examples_per_sec(),
                               p.tokens_per_sec()));
  if (p.pull_ms() + p.compute_ms() + p.push_ms() + p.wait_ms() +
          p.input_ms() > 0) {
    row("step time",
        absl::StrFormat("input %.1f ms, pull %.1f ms, compute %.1f ms%s, "
                        "push %.1f ms, wait %.1f ms",
                        p.input_ms(), p.pull_ms(), p.compute_ms(),
                        p.compute_cpu_ms() > 0
                            ? absl::StrFormat(" (CPU %.1f ms)",
                                              p.compute_cpu_ms())
                            : "",
                        p.push_ms(), p.wait_ms()));
  }
  if (s.items_total() > 0) {
    row("items", absl::StrCat(s.items_done(), " of ", s.items_total(), " done",
                              spec.task() == PREPROCESS
                                  ? absl::StrCat(", ", s.records_written(),
                                                 " records written")
                                  : ""));
  }
  if (!s.preprocess_report().empty()) row("report", s.preprocess_report());
  for (const EvalMetrics& e : s.evals()) {
    std::string line = absl::StrCat(e.round(), " (step ", e.step(), ", ",
                                    e.examples(), " examples): ");
    if (e.stats().num_labels() > 0) {
      absl::StrAppend(&line, absl::StrFormat("accuracy %.4f, macro-F1 %.4f, "
                                             "loss %.4f",
                                             e.accuracy(), e.macro_f1(),
                                             e.loss()));
      for (const ClassMetrics& c : e.classes()) {
        absl::StrAppend(&line, absl::StrFormat("; %s P %.3f R %.3f F1 %.3f",
                                               c.label(), c.precision(),
                                               c.recall(), c.f1()));
      }
    } else {
      absl::StrAppend(&line, absl::StrFormat(
                                 "MLM accuracy %.4f, MLM loss %.4f "
                                 "(perplexity %.2f), NSP accuracy %.4f",
                                 e.mlm_accuracy(), e.mlm_loss(),
                                 e.mlm_perplexity(), e.nsp_accuracy()));
    }
    row("eval", line);
  }
  row("submitted", TimeText(s.submit_time_ms()));
  row("started", TimeText(s.start_time_ms()));
  if (s.end_time_ms() > 0) row("ended", TimeText(s.end_time_ms()));
  if (s.start_time_ms() > 0) {
    const int64_t end =
        s.end_time_ms() > 0 ? s.end_time_ms() : absl::ToUnixMillis(absl::Now());
    row("elapsed", FormatClock(absl::Milliseconds(end - s.start_time_ms())));
  }
  if (s.ps_addresses_size() > 0) {
    row("ps", absl::StrJoin(s.ps_addresses(), ", "));
  }
  if (s.memory().shard_bytes() > 0) {
    // The estimate members are placed by (and check before allocating).
    row("memory", absl::StrCat(
                      "~", FormatBytes(s.memory().shard_bytes()), " per shard",
                      s.memory().worker_bytes() > 0
                          ? absl::StrCat(", ~", FormatBytes(
                                                    s.memory().worker_bytes()),
                                         " per train worker")
                          : ""));
  }
  for (const auto& [key, value] : internal::HolderRows(s)) row(key, value);
  if (s.membership_size() > 1) {
    // Members over time: the count now, the changes, the latest's cost.
    const MembershipChange& last = s.membership(s.membership_size() - 1);
    row("members",
        absl::StrCat(s.members(), " now; ", s.membership_size() - 1,
                     " change(s) since the start, the latest (", last.cause(),
                     " at step ", last.step(), ") ",
                     last.first_step_after_ms() > 0
                         ? absl::StrCat("took ", last.first_step_after_ms(),
                                        " ms to its first step")
                         : std::string("has no step yet")));
  }
  if (s.restarts() > 0) {
    row("restarts", absl::StrCat(s.restarts(), " (from checkpoints, after lost "
                                               "shards or stages)"));
  }
  return kExitOk;
}

int CmdList(JobService::StubInterface* stub, const CtlOptions& o,
            std::ostream& out, std::ostream& err) {
  // Every page (the coordinator answers a page at a time).
  ListJobsResponse resp;
  ListJobsRequest req;
  do {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, o);
    ListJobsResponse page;
    const grpc::Status st = stub->ListJobs(&ctx, req, &page);
    if (!st.ok()) return Fail(err, RpcError(o, "ListJobs", st, ""));
    if (!page.next_page_token().empty() &&
        page.next_page_token() <= req.page_token()) {
      return Fail(err, "ListJobs: the coordinator's next page does not "
                       "advance");
    }
    for (JobStatus& s : *page.mutable_jobs()) *resp.add_jobs() = std::move(s);
    req.set_page_token(page.next_page_token());
  } while (!req.page_token().empty());
  if (o.json || o.yaml) {
    PrintStructured(o, PrintJson(resp, /*pretty=*/true), out);
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ID", "NAME", "STATE", "STEP", "LOSS"}};
  for (const JobStatus& s : resp.jobs()) {
    rows.push_back({Printable(s.id()),
                    s.spec().name().empty() ? "-" : Printable(s.spec().name()),
                    JobState_Name(s.state()), StepText(s.progress()),
                    LossText(s.progress())});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c) {
      width[c] = std::max(width[c], r[c].size());
    }
  }
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      if (c + 1 == r.size()) {
        absl::StrAppend(&line, r[c]);
      } else {
        absl::StrAppend(&line, r[c],
                        std::string(width[c] - r[c].size() + 2, ' '));
      }
    }
    out << line << "\n";
  }
  return kExitOk;
}

int CmdWatch(JobService::StubInterface* stub, const CtlOptions& o,
             const std::string& job, std::ostream& out, std::ostream& err) {
  grpc::ClientContext ctx;  // no deadline: the stream lives as long as the job
  WatchJobRequest req;
  req.set_id(job);
  std::unique_ptr<grpc::ClientReaderInterface<JobEvent>> reader =
      stub->WatchJob(&ctx, req);
  WatchDog dog(stub, o, job, &ctx);

  StepRate rate;
  JobStatus last;
  bool ended = false, bar_drawn = false, first = true;
  JobState prev_state = JOB_STATE_UNSPECIFIED;
  absl::Time last_line = absl::InfinitePast();
  JobEvent ev;
  while (reader->Read(&ev)) {
    dog.Touch();
    const JobStatus& s = ev.status();
    if (s.state() == RUNNING) rate.Observe(absl::Now(), s.progress().step());
    const std::optional<absl::Duration> eta = EstimateEta(s, rate);
    if (o.tty) {
      // State changes and their messages scroll; the bar is redrawn in place.
      if (first || s.state() != prev_state) {
        out << "\r\x1b[K" << JobState_Name(s.state());
        if (!ev.message().empty()) out << ": " << Printable(ev.message());
        out << "\n";
      }
      out << "\r\x1b[K" << ProgressLine(s, /*bar=*/true, eta);
      bar_drawn = true;
    } else {
      // Progress alone ("step N") prints a line at most every
      // watch_line_every; anything else prints at once.
      const std::string& m = ev.message();
      const bool progress_only = IsProgressOnly(m);
      const absl::Time now = absl::Now();
      if (first || s.state() != prev_state || IsTerminal(s.state()) ||
          !progress_only || now - last_line >= o.watch_line_every) {
        out << ProgressLine(s, /*bar=*/false, eta);
        if (!m.empty()) out << " (" << Printable(m) << ")";
        out << "\n";
        last_line = now;
      }
    }
    out.flush();
    first = false;
    prev_state = s.state();
    last = s;
    if (IsTerminal(s.state())) {
      ended = true;
      break;
    }
  }
  dog.Stop();
  grpc::Status st;
  if (ended) {
    ctx.TryCancel();
    reader->Finish();
  } else {
    st = reader->Finish();
  }
  if (bar_drawn) out << "\n";
  if (!ended) {
    if (std::optional<grpc::Status> probe = dog.probe_error()) {
      return Fail(err,
                  absl::StrCat("lost the coordinator while watching job ", job,
                               ": ", RpcError(o, "GetJob", *probe, job)));
    }
    if (std::optional<JobStatus> fin = dog.final_status()) {
      last = *fin;
    } else if (!st.ok()) {
      return Fail(err, RpcError(o, "WatchJob", st, job));
    } else {
      // The server closed the stream early: ask once more.
      JobStatus s;
      const grpc::Status gst = GetJob(stub, o, job, &s);
      if (!gst.ok()) return Fail(err, RpcError(o, "GetJob", gst, job));
      if (!IsTerminal(s.state())) {
        return Fail(
            err, absl::StrCat("the coordinator at ", o.coordinator,
                              " ended the watch of job ", job, " while it is ",
                              JobState_Name(s.state())));
      }
      last = s;
    }
  }
  out << Printable(FinalLine(last)) << "\n";
  out.flush();
  return ExitCodeOf(last.state());
}

int CmdCancel(JobService::StubInterface* stub, const CtlOptions& o,
              const std::string& job, std::ostream& out, std::ostream& err) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, o);
  CancelJobRequest req;
  req.set_id(job);
  CancelJobResponse resp;
  const grpc::Status st = stub->CancelJob(&ctx, req, &resp);
  if (!st.ok()) return Fail(err, RpcError(o, "CancelJob", st, job));
  out << "cancelled " << job << "\n";
  return kExitOk;
}

int CmdDrain(JobService::StubInterface* stub, const CtlOptions& o,
             const std::string& member, std::ostream& out, std::ostream& err) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, o);
  DrainMemberRequest req;
  req.set_member_id(member);
  req.set_force(o.force);
  DrainMemberResponse resp;
  const grpc::Status st = stub->DrainMember(&ctx, req, &resp);
  if (!st.ok()) return Fail(err, RpcError(o, "DrainMember", st, ""));
  out << "member " << Printable(member) << " (" << Role_Name(resp.role())
      << (resp.job_id().empty() ? std::string(", idle")
                                : ", of job " + Printable(resp.job_id()))
      << ") " << (resp.already() ? "was already told to drain" : "drains")
      << ": it hands its work back and leaves\n";
  return kExitOk;
}

int CmdRevoke(JobService::StubInterface* stub, const CtlOptions& o,
              const std::string& member, std::ostream& out, std::ostream& err) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, o);
  RevokeMemberRequest req;
  req.set_member_id(member);
  RevokeMemberResponse resp;
  const grpc::Status st = stub->RevokeMember(&ctx, req, &resp);
  if (!st.ok()) return Fail(err, RpcError(o, "RevokeMember", st, ""));
  out << "member " << Printable(member) << " (" << Role_Name(resp.role())
      << (resp.job_id().empty() ? std::string(", idle")
                                : ", of job " + Printable(resp.job_id()))
      << ") " << (resp.already() ? "was already revoked" : "is revoked")
      << ": its work went to the others and its credential is refused\n";
  return kExitOk;
}

// ---------------------------------------------------------------- driver

int RunCommand(JobService::StubInterface* stub, const CommandLine& cmd,
               std::ostream& out, std::ostream& err) {
  const CtlOptions& o = cmd.options;
  const std::string arg = cmd.args.empty() ? "" : cmd.args[0];
  if (cmd.help) {
    out << Usage();
    return kExitOk;
  }
  if (cmd.verb == "submit") return CmdSubmit(stub, o, arg, out, err);
  if (cmd.verb == "status") return CmdStatus(stub, o, arg, out, err);
  if (cmd.verb == "list") return CmdList(stub, o, out, err);
  if (cmd.verb == "watch") return CmdWatch(stub, o, arg, out, err);
  if (cmd.verb == "cancel") return CmdCancel(stub, o, arg, out, err);
  if (cmd.verb == "drain") return CmdDrain(stub, o, arg, out, err);
  if (cmd.verb == "revoke") return CmdRevoke(stub, o, arg, out, err);
  if (cmd.verb == "metrics") return CmdMetrics(stub, o, arg, out, err);
  if (cmd.verb == "plot") return CmdPlot(stub, o, arg, out, err);
  if (cmd.verb == "events") return CmdEvents(stub, o, arg, out, err);
  if (cmd.verb == "resubmit") return CmdResubmit(stub, o, arg, out, err);
  if (cmd.verb == "export") {
    return CmdExport(stub, o, arg, cmd.args[1], out, err);
  }
  err << "bertpsctl: unknown verb '" << cmd.verb << "'\n" << Usage();
  return kExitUsage;
}

int Main(const std::vector<std::string>& args, const char* env_coordinator,
         bool stdout_is_tty, std::ostream& out, std::ostream& err) {
  absl::StatusOr<CommandLine> cmd = ParseCommandLine(args, env_coordinator);
  if (!cmd.ok()) {
    // The whole usage when the verb is missing or unknown, else one line.
    const absl::string_view message = cmd.status().message();
    err << "bertpsctl: " << message << "\n";
    if (absl::StartsWith(message, "no verb") ||
        absl::StartsWith(message, "unknown verb")) {
      err << Usage();
    } else {
      err << "usage: bertpsctl [flags] <verb> ...; bertpsctl --help lists "
             "the verbs and flags\n";
    }
    return kExitUsage;
  }
  cmd->options.tty = stdout_is_tty;
  if (cmd->help) return RunCommand(nullptr, *cmd, out, err);
  absl::StatusOr<SecurityConfig> security =
      SecurityConfigFromFiles(cmd->options.security);
  if (!security.ok()) {
    err << "bertpsctl: " << security.status().message() << "\n";
    return kExitError;
  }
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(64 << 20);  // long job histories
  std::unique_ptr<JobService::Stub> stub = JobService::NewStub(
      MakeChannel(cmd->options.coordinator, *security, channel_args));
  return RunCommand(stub.get(), *cmd, out, err);
}

}  // namespace ctl
}  // namespace bertps

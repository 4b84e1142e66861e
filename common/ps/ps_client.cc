#include "common/version.h"
#include "common/ps/ps_client.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/grpc_status.h"
#include "common/handoff.h"
#include "common/io/half.h"
#include "common/model/weights.h"
#include "common/retry.h"
#include "common/status.h"
#include "grpcpp/grpcpp.h"
#include "common/ps/checkpoint.h"
#include "common/ps/chunk_codec.h"
#include "common/ps/wire.h"

namespace bertps {

using ps::SliceSpec;

PsClient::PsClient(const PsClientOptions& options, const BertConfig& config,
                   BertTask task, ParamLayout layout, ps::PartitionPlan plan)
    : options_(options),
      config_(config),
      task_(task),
      layout_(std::move(layout)),
      plan_(std::move(plan)) {
  const int shards = static_cast<int>(options_.addresses.size());
  canceller_ = std::make_unique<ps::CallCanceller>(options_.cancel);
  stall_watch_ = std::make_unique<ps::StallWatch>();
  pull_lanes_ = std::make_unique<ThreadLanes>("ps pull", shards);
  copy_lanes_ = std::make_unique<ThreadLanes>("ps pull copy", shards);
  push_lanes_ = std::make_unique<ThreadLanes>("ps push", shards);
}

int64_t PsClient::threads_started() const {
  return pull_lanes_->threads_started() + copy_lanes_->threads_started() +
         push_lanes_->threads_started();
}

PsClient::~PsClient() = default;

namespace {

// Connect's waits for a shard that is starting (or has not yet taken its
// job): 20 ms doubling to 500 ms, so a shard that is up a moment later is
// found at once and one still starting costs two calls a second, until
// connect_timeout.
RetryPolicy ConnectRetry(absl::Duration connect_timeout) {
  RetryPolicy p;
  p.initial = absl::Milliseconds(20);
  p.multiplier = 2;
  p.max = absl::Milliseconds(500);
  p.deadline = connect_timeout;
  return p;
}

void SetIncarnation(const PsClientOptions& o, grpc::ClientContext* ctx) {
  if (o.incarnation > 0) {
    ctx->AddMetadata(ps::kIncarnationMetadata, absl::StrCat(o.incarnation));
  }
  if (o.layout > 0) {
    ctx->AddMetadata(ps::kLayoutMetadata, absl::StrCat(o.layout));
  }
  if (!o.job_id.empty()) ctx->AddMetadata(ps::kJobMetadata, o.job_id);
  if (!o.job_key.empty()) ctx->AddMetadata(ps::kJobKeyMetadata, o.job_key);
  if (o.capability != nullptr) {
    std::string wire = o.capability->Get();
    if (!wire.empty()) ctx->AddMetadata(kCapabilityMetadata, std::move(wire));
  }
}
}  // namespace

grpc::ClientContext* PsClient::NewContext(grpc::ClientContext* ctx) const {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  SetIncarnation(options_, ctx);
  return ctx;
}

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Connect(
    const PsClientOptions& options, const BertConfig& config, BertTask task) {
  if (options.addresses.empty()) {
    return absl::InvalidArgumentError("no parameter-server addresses");
  }
  ParamLayout layout = ParamLayout::ForBert(config, task);
  ASSIGN_OR_RETURN(ps::PartitionPlan plan,
                   ps::PartitionPlan::Make(
                       layout, static_cast<int>(options.addresses.size())));
  std::unique_ptr<PsClient> c(new PsClient(options, config, task,
                                           std::move(layout), std::move(plan)));
  c->pull_copy_thread_ = options.pull_copy_thread.value_or(
      static_cast<int>(options.addresses.size()) <=
      static_cast<int>(std::thread::hardware_concurrency()));
  c->pull_window_bytes_ = options.pull_window_bytes.value_or(
      c->pull_copy_thread_ ? 0 : kFixedPullWindowBytes);
  if (c->pull_window_bytes_ < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pull_window_bytes must be >= 0, not ", c->pull_window_bytes_));
  }
  // The lanes' threads now: a process that cannot start threads (a tight
  // memory limit) hears it here, as an error, not in a step.
  RETURN_IF_ERROR(c->pull_lanes_->Start());
  RETURN_IF_ERROR(c->push_lanes_->Start());
  if (c->pull_copy_thread_) RETURN_IF_ERROR(c->copy_lanes_->Start());
  grpc::ChannelArguments args = ps::ClientChannelArguments(
      static_cast<int>(absl::ToInt64Milliseconds(options.keepalive)));
  if (c->pull_window_bytes_ > 0) {
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, c->pull_window_bytes_);
  }
  for (size_t i = 0; i < options.addresses.size(); ++i) {
    auto channel = MakeChannel(options.addresses[i], options.security, args);
    c->stubs_.push_back(ParameterServer::NewStub(channel));
    c->channels_.push_back(channel);
    // A shard that is starting, or has not yet taken the job from the
    // coordinator, answers UNAVAILABLE: retry until connect_timeout.
    const absl::Time until = absl::Now() + options.connect_timeout;
    DescribeResponse d;
    bool cancelled = false;
    absl::Status st = Retry(
        ConnectRetry(options.connect_timeout),
        [&]() -> absl::Status {
          if (options.cancel != nullptr && options.cancel->load()) {
            cancelled = true;
            return absl::CancelledError("connecting to the shards: cancelled");
          }
          grpc::ClientContext ctx;
          // Short attempts, so a cancellation is noticed within a second.
          ctx.set_deadline(absl::ToChronoTime(
              std::min(until, absl::Now() + absl::Seconds(1))));
          ctx.set_wait_for_ready(true);
          SetIncarnation(options, &ctx);
          DescribeRequest hello;
          hello.set_protocol_version(ps::kPsProtocolVersion);
          return FromGrpcStatus(c->stubs_.back()->Describe(&ctx, hello, &d));
        },
        [&](const absl::Status& s) {
          return (s.code() == absl::StatusCode::kUnavailable ||
                  s.code() == absl::StatusCode::kDeadlineExceeded) &&
                 absl::Now() + absl::Milliseconds(100) < until;
        });
    if (cancelled) return st;
    if (!st.ok()) {
      return Annotate(st, absl::StrCat("parameter-server shard ", i, " at ",
                                       options.addresses[i]));
    }
    if (const int theirs =
            d.protocol_version() == 0 ? 1 : d.protocol_version();
        theirs != ps::kPsProtocolVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "parameter-server shard ", i, " at ", options.addresses[i],
          " speaks protocol ", theirs, ", this client ", ps::kPsProtocolVersion,
          ": run members of one release"));
    }
    if (d.shard_index() != static_cast<int>(i) ||
        d.num_shards() != static_cast<int>(options.addresses.size())) {
      return absl::FailedPreconditionError(absl::StrCat(
          options.addresses[i], " is shard ", d.shard_index(), " of ",
          d.num_shards(), ", expected shard ", i, " of ",
          options.addresses.size()));
    }
    if (d.task() != BertTaskName(task)) {
      return absl::FailedPreconditionError(
          absl::StrCat(options.addresses[i], " serves task ", d.task()));
    }
    ASSIGN_OR_RETURN(BertConfig sc, ParseBertConfig(d.model_config_json()));
    if (sc.ToJson() != config.ToJson()) {
      return absl::FailedPreconditionError(absl::StrCat(
          options.addresses[i], " serves a different model config"));
    }
    // The slices must be exactly our plan's.
    const auto& mine = c->plan_.shard_slices(static_cast<int>(i));
    if (static_cast<size_t>(d.slices_size()) != mine.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat(options.addresses[i], " has a different partition"));
    }
    for (size_t k = 0; k < mine.size(); ++k) {
      const SliceSpec& s = c->plan_.slices()[mine[k]];
      if (d.slices(k).name() != s.name || d.slices(k).begin() != s.begin ||
          d.slices(k).end() != s.end) {
        return absl::FailedPreconditionError(
            absl::StrCat(options.addresses[i], " has a different partition"));
      }
    }
    c->described_.push_back(d);
  }
  if (options.compress_bf16) c->residual_.assign(c->layout_.total_size(), 0.f);
  return c;
}


absl::StatusOr<AnnounceResponse> PsClient::Announce(
    const AnnounceRequest& request) {
  grpc::ClientContext ctx;
  NewContext(&ctx);
  ps::CallCanceller::Scope tracked(canceller_.get(), &ctx);
  AnnounceResponse resp;
  absl::Status st =
      FromGrpcStatus(stubs_[0]->Announce(&ctx, request, &resp));
  NoteUnavailable(st);
  if (!st.ok()) return Annotate(st, "batch totals from shard 0");
  return resp;
}

absl::StatusOr<std::vector<AnnounceResponse>> PsClient::AnnounceAll(
    const std::vector<AnnounceRequest>& requests) {
  const size_t n = requests.size();
  std::vector<grpc::ClientContext> ctx(n);
  std::vector<std::unique_ptr<ps::CallCanceller::Scope>> tracked;
  std::vector<AnnounceResponse> resp(n);
  std::vector<grpc::Status> st(n);
  absl::BlockingCounter left(static_cast<int>(n));
  for (size_t i = 0; i < n; ++i) {
    NewContext(&ctx[i]);
    tracked.push_back(
        std::make_unique<ps::CallCanceller::Scope>(canceller_.get(), &ctx[i]));
  }
  for (size_t i = 0; i < n; ++i) {
    stubs_[0]->async()->Announce(&ctx[i], &requests[i], &resp[i],
                                 [&st, &left, i](grpc::Status s) {
                                   st[i] = std::move(s);
                                   left.DecrementCount();
                                 });
  }
  left.Wait();
  for (size_t i = 0; i < n; ++i) {
    absl::Status s = FromGrpcStatus(st[i]);
    NoteUnavailable(s);
    if (!s.ok()) {
      return Annotate(s, absl::StrCat("batch totals of worker ",
                                      requests[i].worker(), " from shard 0"));
    }
  }
  return resp;
}

absl::StatusOr<std::vector<CheckpointResponse>> PsClient::CheckpointCall(
    const std::string& dir, int64_t version, CheckpointRequest::Mode mode) {
  std::vector<absl::Status> st(num_shards());
  std::vector<CheckpointResponse> resp(num_shards());
  std::vector<std::shared_ptr<absl::Notification>> done;
  for (int i = 0; i < num_shards(); ++i) {
    done.push_back(push_lanes_->Run(i, [&, i] {
      grpc::ClientContext ctx;
      NewContext(&ctx);
      ps::CallCanceller::Scope tracked(canceller_.get(), &ctx);
      CheckpointRequest req;
      req.set_dir(dir);
      req.set_version(version);
      req.set_mode(mode);
      st[i] = FromGrpcStatus(stubs_[i]->Checkpoint(&ctx, req, &resp[i]));
    }));
  }
  for (auto& d : done) d->WaitForNotification();
  for (int i = 0; i < num_shards(); ++i) {
    if (!st[i].ok()) {
      return Annotate(st[i], absl::StrCat("checkpoint of shard ", i));
    }
  }
  return resp;
}

absl::StatusOr<std::string> PsClient::WriteCheckpointManifest(
    const std::string& dir, int64_t version, const std::string& ledger,
    const std::vector<CheckpointResponse>& files) {
  ps::Manifest m;
  m.version = version;
  m.num_shards = num_shards();
  m.config_json = config_.ToJson();
  m.task = std::string(BertTaskName(task_));
  m.optimizer = described_[0].optimizer();
  m.plan_text = plan_.ToText();
  for (int i = 0; i < num_shards(); ++i) {
    ps::ShardFile f;
    f.shard = i;
    f.file = files[i].file();  // WriteManifest stores it relative to itself
    f.crc32c = files[i].crc32c();
    f.bytes = files[i].bytes();
    m.files.push_back(f);
  }
  m.state_slots = described_[0].state_slots();
  m.example_ledger = ledger;
  m.release = Release();
  m.spec_sha256 = options_.spec_sha256;
  return ps::WriteManifest(dir, m);
}

absl::StatusOr<std::string> PsClient::Checkpoint(const std::string& dir,
                                                 int64_t version) {
  ASSIGN_OR_RETURN(std::vector<CheckpointResponse> resp,
                   CheckpointCall(dir, version, CheckpointRequest::WAIT));
  return WriteCheckpointManifest(dir, version, resp[0].example_ledger(),
                                 resp);
}

absl::StatusOr<PsClient::PendingCheckpoint> PsClient::StartCheckpoint(
    const std::string& dir, int64_t version) {
  ASSIGN_OR_RETURN(std::vector<CheckpointResponse> resp,
                   CheckpointCall(dir, version, CheckpointRequest::START));
  PendingCheckpoint p;
  p.dir = dir;
  p.version = version;
  p.example_ledger = resp[0].example_ledger();
  for (const CheckpointResponse& r : resp) {
    p.copy_ms = std::max(p.copy_ms, r.copy_ms());
  }
  return p;
}

absl::StatusOr<std::string> PsClient::FinishCheckpoint(
    const PendingCheckpoint& p, double* write_ms,
    const std::function<void()>& before_manifest) {
  std::vector<CheckpointResponse> files(num_shards());
  double slowest = 0;
  // One shard after the other on the calling thread (not the step's lanes):
  // the writes run in parallel on the shards, so this waits for the slowest.
  for (int i = 0; i < num_shards(); ++i) {
    while (true) {
      if (options_.cancel != nullptr && options_.cancel->load()) {
        return absl::CancelledError("the job was stopped");
      }
      grpc::ClientContext ctx;
      NewContext(&ctx);
      ps::CallCanceller::Scope tracked(canceller_.get(), &ctx);
      CheckpointRequest req;
      req.set_dir(p.dir);
      req.set_version(p.version);
      req.set_mode(CheckpointRequest::COLLECT);
      absl::Status st =
          FromGrpcStatus(stubs_[i]->Checkpoint(&ctx, req, &files[i]));
      if (!st.ok()) {
        return Annotate(st, absl::StrCat("checkpoint ", p.version,
                                         " of shard ", i));
      }
      if (!files[i].pending()) break;
    }
    slowest = std::max(slowest, files[i].write_ms());
  }
  if (write_ms != nullptr) *write_ms = slowest;
  if (before_manifest) before_manifest();
  return WriteCheckpointManifest(p.dir, p.version, p.example_ledger, files);
}

absl::StatusOr<bool> PsClient::ShardsPast(int64_t version) {
  ASSIGN_OR_RETURN(std::vector<StatsResponse> stats, Stats());
  for (const StatsResponse& s : stats) {
    if (s.version() > version) return true;
  }
  return false;
}

absl::StatusOr<std::optional<std::string>> PsClient::CheckpointUnlessPast(
    const std::string& dir, int64_t version, int pusher) {
  if (pusher >= 0) {
    ASSIGN_OR_RETURN(std::vector<StatsResponse> stats, Stats());
    for (const StatsResponse& s : stats) {
      if (s.version() > version ||
          (pusher < s.last_step_size() && s.last_step(pusher) >= version)) {
        return std::optional<std::string>();
      }
    }
  }
  absl::StatusOr<std::string> m = Checkpoint(dir, version);
  if (m.ok()) return std::optional<std::string>(*std::move(m));
  if (!absl::IsFailedPrecondition(m.status())) return m.status();
  ASSIGN_OR_RETURN(bool past, ShardsPast(version));
  if (past) return std::optional<std::string>();
  return m.status();
}

absl::StatusOr<std::optional<PsClient::PendingCheckpoint>>
PsClient::StartCheckpointUnlessPast(const std::string& dir, int64_t version) {
  absl::StatusOr<PendingCheckpoint> p = StartCheckpoint(dir, version);
  if (p.ok()) return std::optional<PendingCheckpoint>(*std::move(p));
  if (!absl::IsFailedPrecondition(p.status())) return p.status();
  ASSIGN_OR_RETURN(bool past, ShardsPast(version));
  if (past) return std::optional<PendingCheckpoint>();
  return p.status();
}

absl::Status PsClient::Restore(const std::string& manifest) {
  for (int i = 0; i < num_shards(); ++i) {
    grpc::ClientContext ctx;
    NewContext(&ctx);
    ps::CallCanceller::Scope tracked(canceller_.get(), &ctx);
    RestoreRequest req;
    req.set_manifest(manifest);
    RestoreResponse resp;
    absl::Status st = FromGrpcStatus(stubs_[i]->Restore(&ctx, req, &resp));
    if (!st.ok()) return Annotate(st, absl::StrCat("restore of shard ", i));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StatsResponse>> PsClient::Stats() {
  std::vector<StatsResponse> out(num_shards());
  for (int i = 0; i < num_shards(); ++i) {
    grpc::ClientContext ctx;
    NewContext(&ctx);
    ps::CallCanceller::Scope tracked(canceller_.get(), &ctx);
    absl::Status st =
        FromGrpcStatus(stubs_[i]->Stats(&ctx, StatsRequest(), &out[i]));
    if (!st.ok()) return Annotate(st, absl::StrCat("stats of shard ", i));
  }
  return out;
}

absl::Status PsClient::Export(const std::string& path,
                              const HfExportOptions& hf) {
  std::vector<float> params(layout_.total_size());
  ASSIGN_OR_RETURN(int64_t v, Pull(0, 0, 0, params.data()));
  (void)v;
  if (IsHfModelDir(path)) {
    return WriteHfModelDir(path, layout_, params.data(), config_, task_, hf);
  }
  return SaveBertWeights(path, layout_, params.data(), &config_);
}

}  // namespace bertps

#include "worker/pipeline_stage.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/crash_point.h"
#include "common/kernels/threads.h"
#include "common/grpc_status.h"
#include "common/model/batch_view.h"
#include "common/security.h"
#include "common/status.h"
#include "common/tcp_tuning.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "worker/batch_reader.h"
#include "common/ps/wire.h"
#include "worker/stage_router.h"
#include "worker/stage_wire.h"

namespace bertps {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

using stage_internal::KindName;
using stage_internal::kMaxMessageBytes;

// A micro-batch: rows [m*mb, (m+1)*mb) of the replica's batch.
BertBatchView MicroBatch(const BertBatchView& v, int m, int mb) {
  BertBatchView o = v;
  o.batch = mb;
  const int64_t first = static_cast<int64_t>(m) * mb;
  o.input_ids += first * v.seq;
  o.input_mask += first * v.seq;
  o.segment_ids += first * v.seq;
  if (o.masked_lm_positions) o.masked_lm_positions += first * v.preds;
  if (o.masked_lm_ids) o.masked_lm_ids += first * v.preds;
  if (o.masked_lm_weights) o.masked_lm_weights += first * v.preds;
  if (o.next_sentence_labels) o.next_sentence_labels += first;
  if (o.label_ids) o.label_ids += first;
  return o;
}

}  // namespace

// -------------------------------------------------------------- service

// Serves one stage: on a server of its own, or through the daemon's
// StageRouter (the calls' routing done there).
class PipelineStage::Service final : public StageService::Service,
                                     public StageRouter::Target {
 public:
  explicit Service(PipelineStage* owner) : owner_(owner) {}

  grpc::Status Send(grpc::ServerContext*, grpc::ServerReader<StageChunk>* r,
                    StageSendResponse*) override {
    StageChunk msg;
    if (!r->Read(&msg) || !msg.has_header()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "a stage stream starts with its header");
    }
    return Accept(msg.header(), r);
  }

  grpc::Status Accept(const StageTensorHeader& h,
                      grpc::ServerReader<StageChunk>* r) override {
    if (owner_->killed_) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "stage killed");
    }
    const PipelineStageOptions& o = owner_->options_;
    const int expect_from =
        h.kind() == ACTIVATION ? o.stage - 1 : o.stage + 1;
    if (h.replica() != o.replica || h.from_stage() != expect_from ||
        h.elements() < 0 || h.micro_batch() < 0 ||
        h.micro_batch() >= o.micro_batches) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("stage ", o.stage, " of replica ", o.replica,
                       " does not take ", KindName(h.kind()), " from stage ",
                       h.from_stage(), " of replica ", h.replica(),
                       " (micro-batch ", h.micro_batch(), ")"));
    }
    if (!h.peers().empty() && h.peers() != owner_->PeersKey()) {
      return grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("stage ", o.stage, " of replica ", o.replica,
                       " runs with stage addresses ", owner_->PeersKey(),
                       ", the sender with ", h.peers(), " (a stage is being "
                       "replaced): try again"));
    }
    const int64_t bytes = h.elements() * static_cast<int64_t>(sizeof(float));
    std::vector<float> values(h.elements());
    int64_t got = 0;
    StageChunk msg;
    while (r->Read(&msg)) {
      if (!msg.has_data() && msg.has_header()) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "a second header in one stage stream");
      }
      const std::string& d = msg.data();
      if (got + static_cast<int64_t>(d.size()) > bytes) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            absl::StrCat("more than the announced ", bytes,
                                         " bytes"));
      }
      std::memcpy(reinterpret_cast<char*>(values.data()) + got, d.data(),
                  d.size());
      got += static_cast<int64_t>(d.size());
    }
    if (got != bytes) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("received ", got, " of ", bytes,
                                       " bytes of ", KindName(h.kind())));
    }
    owner_->bytes_received_ += bytes;
    owner_->inbox_.Put({h.kind(), h.step(), h.micro_batch()},
                       std::move(values));
    return grpc::Status::OK;
  }

  grpc::Status Ping(grpc::ServerContext*, const StagePingRequest*,
                    StagePingResponse* resp) override {
    return Answer(resp);
  }

  grpc::Status Answer(StagePingResponse* resp) override {
    if (owner_->killed_) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "stage killed");
    }
    resp->set_replica(owner_->options_.replica);
    resp->set_stage(owner_->options_.stage);
    resp->set_step(owner_->current_step_);
    return grpc::Status::OK;
  }

  grpc::Status Abort(grpc::ServerContext*, const StageAbortRequest* req,
                     StageAbortResponse*) override {
    return TakeAbort(*req);
  }

  absl::Status CheckPeer(const Capability& cap, int replica,
                         int from_stage) const override {
    const PipelineStageOptions& o = owner_->options_;
    if (cap.kind() != Capability::TRAINER || cap.job_id() != o.ps.job_id ||
        cap.incarnation() != o.ps.incarnation) {
      return absl::PermissionDeniedError(absl::StrCat(
          "pipeline stage ", o.stage, " of replica ", o.replica,
          " takes calls only from the stages of its job's start; member ",
          cap.member_id(), "'s capability is of job ", cap.job_id(),
          " incarnation ", cap.incarnation()));
    }
    if (from_stage < 0) return absl::OkStatus();
    const int slot = o.plan.SlotOf(replica, from_stage);
    for (int s : cap.slots()) {
      if (s == slot) return absl::OkStatus();
    }
    return absl::PermissionDeniedError(absl::StrCat(
        "a tensor or abort from stage ", from_stage, " of replica ", replica,
        ": member ", cap.member_id(), " does not hold that stage's slot ",
        slot));
  }

  grpc::Status TakeAbort(const StageAbortRequest& req) override {
    // From a start of the replica with other stage addresses: not ours.
    if (!req.peers().empty() && req.peers() != owner_->PeersKey()) {
      return grpc::Status::OK;
    }
    owner_->inbox_.Abort(absl::AbortedError(
        absl::StrCat("pipeline stage ", req.from_stage(), " of replica ",
                     req.replica(), " failed: ", req.reason())));
    return grpc::Status::OK;
  }

 private:
  PipelineStage* const owner_;
};

// --------------------------------------------------------------- runtime

PipelineStage::PipelineStage(const PipelineStageOptions& options)
    : options_(options), mm_(options.precision) {}

PipelineStage::~PipelineStage() {
  if (routed_ != nullptr) {
    options_.router->Remove(options_.replica, options_.stage, routed_);
  }
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(1));
  }
}

absl::StatusOr<std::unique_ptr<PipelineStage>> PipelineStage::Create(
    const PipelineStageOptions& o) {
  const JobPlan& plan = o.plan;
  if (plan.stages < 1 || o.stage < 0 || o.stage >= plan.stages) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage index ", o.stage, " outside [0, ", plan.stages, ")"));
  }
  if (plan.replicas < 1 || o.replica < 0 || o.replica >= plan.replicas) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replica ", o.replica, " outside [0, ", plan.replicas, ")"));
  }
  if (plan.mode != BSP || plan.accumulation != 1) {
    return absl::InvalidArgumentError(
        "pipeline stages run BSP without accumulation (micro_batches)");
  }
  if (o.micro_batches < 1 || plan.batch <= 0 || plan.batch > (1 << 20) ||
      plan.batch % o.micro_batches != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the batch (", plan.batch,
                     ") must be a positive multiple of micro_batches (",
                     o.micro_batches, ")"));
  }
  if (!o.peers.empty() && static_cast<int>(o.peers.size()) != plan.stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("--peers names ", o.peers.size(), " stages, the job has ",
                     plan.stages));
  }
  if (o.data.empty()) return absl::InvalidArgumentError("no training data");
  std::unique_ptr<PipelineStage> p(new PipelineStage(o));
  ASSIGN_OR_RETURN(auto specs,
                   SplitBertStages(o.config, o.task, plan.stages,
                                   o.layers_per_stage));
  p->spec_ = specs[o.stage];
  PsClientOptions po = o.ps;
  po.pull_bf16_products =
      p->mm_.precision() == kernels::Precision::kBf16 && !o.pull_fp32;
  ASSIGN_OR_RETURN(p->client_, PsClient::Connect(po, o.config, o.task));
  const DescribeResponse& d = p->client_->description(0);
  if (d.mode() != BSP || d.backup_workers() != 0) {
    return absl::FailedPreconditionError(
        "pipeline stages need BSP shards without backup workers");
  }
  if (d.num_workers() != plan.pushers) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the shards expect ", d.num_workers(), " workers; ", plan.replicas,
        " replicas x ", plan.stages, " stages push as ", plan.pushers));
  }
  // Sequence and prediction lengths from the first example.
  ASSIGN_OR_RETURN(p->source_,
                   io::IndexedExampleSource::Open(
                       o.data, io::DefaultIndexCacheDir(), o.expected_files));
  p->source_->set_shuffle(o.shuffle, o.seed);
  std::string record;
  RETURN_IF_ERROR(p->source_->Read(0, &record));
  if (o.task == BertTask::kPretrain) {
    ASSIGN_OR_RETURN(io::PretrainExample e, io::DecodePretrainExample(record));
    p->seq_ = static_cast<int>(e.input_ids.size());
    p->preds_ = static_cast<int>(e.masked_lm_ids.size());
  } else {
    ASSIGN_OR_RETURN(io::ClassifyExample e, io::DecodeClassifyExample(record));
    p->seq_ = static_cast<int>(e.input_ids.size());
  }
  ASSIGN_OR_RETURN(
      p->stage_,
      BertStage<float>::Create(
          o.config, o.task, p->spec_,
          static_cast<int>(plan.batch) / o.micro_batches, p->seq_,
          std::max(p->preds_, 1),
          PipelineSlots(o.schedule, o.stage, plan.stages, o.micro_batches),
          &p->mm_));
  int64_t largest = 0;
  for (const ParamSpec& t : p->stage_->model_layout().tensors()) {
    largest = std::max(largest, t.size);
  }
  p->zeros_.assign(largest, 0.0f);

  p->service_ = std::make_shared<Service>(p.get());
  if (o.router != nullptr) {  // the daemon's server serves it
    p->port_ = o.router->port();
    if (!o.peers.empty()) p->SetPeers(o.peers);  // before any call comes
    p->routed_ = p->service_;
    o.router->Add(o.replica, o.stage, p->routed_);
    return p;
  }
  MethodRoles roles = DefaultMethodRoles();
  roles.rules["/bertps.StageService/*"] = Access::kWorker;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(o.listen, ServerCredentials(o.ps.security, roles),
                           &p->port_);
  AddTcpTuning(&builder);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.RegisterService(p->service_.get());
  p->server_ = builder.BuildAndStart();
  if (!p->server_ || p->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("stage ", o.stage, ": cannot listen on ", o.listen));
  }
  if (!o.peers.empty()) p->SetPeers(o.peers);
  return p;
}

std::string PipelineStage::address() const {
  const std::string host = options_.listen.substr(0, options_.listen.rfind(':'));
  return absl::StrCat(host == "0.0.0.0" ? "127.0.0.1" : host, ":", port_);
}

// Pulls this stage's tensors (version >= step) through the client, from
// the shards that hold any of them, straight into the stage's local buffer.
absl::Status PipelineStage::PullOwnTensors(int64_t step,
                                           int64_t* payload_bytes) {
  const ParamLayout& layout = stage_->model_layout();
  std::vector<float*> dest(layout.tensors().size(), nullptr);
  for (size_t t = 0; t < dest.size(); ++t) {
    const int64_t off = stage_->local_offset(static_cast<int>(t));
    if (off >= 0) dest[t] = stage_->params() + off;
  }
  return client_->PullInto(ps_worker(), step, step, dest, payload_bytes)
      .status();
}

absl::Status PipelineStage::ReadBatch(int64_t step) {
  // This replica's B examples of global batch `step`, read where they lie,
  // each validated as a train worker's are.
  return ReadExamples(source_.get(),
                      options_.plan.FirstExample(options_.replica, step),
                      options_.plan.examples_per_push,
                      {options_.task, seq_, preds_}, options_.config, &batch_);
}

absl::StatusOr<StageStepReport> PipelineStage::Step(int64_t step) {
  if (killed_) return absl::AbortedError("this stage was killed");
  const PipelineStageOptions& o = options_;
  StageStepReport rep;
  rep.step = step;
  current_step_ = step;
  inbox_.Forget(step);
  const int64_t sent0 = bytes_sent_, recv0 = bytes_received_;
  RETURN_IF_ERROR(ReadBatch(step));
  const BertBatchView view = ViewOf(batch_);

  auto t0 = Clock::now();
  // Batch totals: stage 0 speaks for the replica, the others add zeros, so
  // the totals (summed in worker order) equal the data-parallel ones.
  AnnounceRequest a;
  a.set_worker(ps_worker());
  a.set_step(step);
  double wsum = 0;
  for (float x : batch_.masked_lm_weights) wsum += x;
  a.set_mlm_weight(spec_.first() ? wsum : 0.0);
  a.set_examples(spec_.first() ? o.plan.examples_per_push : 0);
  absl::StatusOr<AnnounceResponse> totals = client_->Announce(a);
  if (!totals.ok()) {
    return Annotate(NameDeadPeer(totals.status()),
                    absl::StrCat("step ", step, ": batch totals (PS worker ",
                                 ps_worker(), " = replica ", o.replica,
                                 " stage ", o.stage, ")"));
  }
  StepOptions so;
  so.train = o.dropout;
  so.seed = o.seed;
  so.step = step;
  so.mlm_denominator = totals->mlm_weight_total() + 1e-5;
  so.example_denominator = static_cast<double>(totals->examples_total());
  auto t1 = Clock::now();
  BertStage<float>& st = *stage_;
  RETURN_IF_ERROR(NameDeadPeer(PullOwnTensors(step, &rep.pull_bytes)));
  auto t2 = Clock::now();

  st.ZeroGrads();
  const int mb = static_cast<int>(o.plan.batch) / o.micro_batches;
  const int64_t n = st.boundary_size(mb, seq_);
  std::vector<float> d_input(spec_.first() ? 0 : n);
  double compute_ms = 0;
  for (const PipelineOp& op :
       MakePipelineSchedule(o.schedule, o.stage, o.plan.stages,
                            o.micro_batches)) {
    const BertBatchView v = MicroBatch(view, op.micro_batch, mb);
    StepOptions mo = so;
    mo.example_offset = o.plan.ExampleOffset(o.replica) +
                        static_cast<int64_t>(op.micro_batch) * mb;
    if (op.forward) {
      std::vector<float> in;
      if (!spec_.first()) {
        ASSIGN_OR_RETURN(in, Receive(o.stage - 1, ACTIVATION, step,
                                     op.micro_batch, n));
      }
      auto c0 = Clock::now();
      ASSIGN_OR_RETURN(StepResult r,
                       st.Forward(op.slot, v, mo,
                                  spec_.first() ? nullptr : in.data()));
      compute_ms += Ms(c0, Clock::now());
      rep.loss += r.loss;
      if (!spec_.last()) {
        RETURN_IF_ERROR(SendTensor(o.stage + 1, ACTIVATION, step,
                                   op.micro_batch, st.output(op.slot), n));
      }
    } else {
      std::vector<float> dout;
      if (!spec_.last()) {
        ASSIGN_OR_RETURN(dout, Receive(o.stage + 1, GRADIENT, step,
                                       op.micro_batch, n));
      }
      auto c0 = Clock::now();
      RETURN_IF_ERROR(st.Backward(op.slot, v, mo,
                                  spec_.last() ? nullptr : dout.data(),
                                  spec_.first() ? nullptr : d_input.data()));
      compute_ms += Ms(c0, Clock::now());
      if (!spec_.first()) {
        RETURN_IF_ERROR(SendTensor(o.stage - 1, GRADIENT, step,
                                   op.micro_batch, d_input.data(), n));
      }
    }
  }
  auto t3 = Clock::now();
  CrashPoint("stage_push", step + 1, ps_worker());

  // Push: own tensors, zeros for the rest (the shards check coverage).
  PushHeader header;
  header.set_worker(ps_worker());
  header.set_step(step);
  header.set_examples(spec_.first() ? o.plan.examples_per_push : 0);
  header.set_first_example(batch_.first_position);  // what ReadBatch read
  {
    ASSIGN_OR_RETURN(std::unique_ptr<PsClient::PushStream> push,
                     client_->BeginPush(header));
    const int nt = static_cast<int>(st.model_layout().tensors().size());
    for (int t = 0; t < nt; ++t) {
      const int64_t off = st.local_offset(t);
      push->Send(t, off >= 0 ? st.grads() + off : zeros_.data());
    }
    absl::StatusOr<int64_t> v = push->Finish();
    if (!v.ok()) {
      return Annotate(NameDeadPeer(v.status()), absl::StrCat("step ", step,
                                               ": pushing the gradients of "
                                               "stage ", o.stage));
    }
    rep.version = *v;
    rep.learning_rate = client_->last_push_learning_rate();
  }
  auto t4 = Clock::now();
  rep.wait_ms = Ms(t0, t1);
  rep.pull_ms = Ms(t1, t2);
  rep.schedule_ms = Ms(t2, t3);
  rep.compute_ms = compute_ms;
  rep.precision = mm_.precision();
  rep.push_ms = Ms(t3, t4);
  rep.bubble = rep.schedule_ms > 0 ? 1.0 - compute_ms / rep.schedule_ms : 0;
  rep.bytes_sent = bytes_sent_ - sent0;
  rep.bytes_received = bytes_received_ - recv0;
  return rep;
}

absl::Status PipelineStage::Run() {
  kernels::UseConfiguredThreads();  // a member runs this on its own thread
  ASSIGN_OR_RETURN(std::vector<StatsResponse> stats, client_->Stats());
  const int64_t start = stats[0].version();
  if (options_.on_start) RETURN_IF_ERROR(options_.on_start(start));
  double loss = 0, bubble = 0;
  int64_t n = 0;
  const int64_t steps = options_.plan.WorkerSteps(options_.replica);
  for (int64_t step = start; step < steps; ++step) {
    if (options_.cancel != nullptr && options_.cancel->load()) {
      return absl::CancelledError("pipeline stage cancelled");
    }
    absl::StatusOr<StageStepReport> rep = Step(step);
    if (!rep.ok()) {
      absl::Status st = Annotate(
          rep.status(), absl::StrCat("pipeline stage ", options_.stage,
                                     " of replica ", options_.replica));
      if (!killed_) AbortPeers(st);
      return st;
    }
    if (options_.on_step) options_.on_step(*rep);
    loss += rep->loss;
    bubble += rep->bubble;
    ++n;
    if (options_.log && ((step + 1) % options_.log_every == 0 ||
                         step + 1 == steps)) {
      nlohmann::ordered_json j;
      j["replica"] = options_.replica;
      j["stage"] = options_.stage;
      j["step"] = step + 1;
      if (spec_.last()) j["loss"] = loss / n;
      j["bubble"] = bubble / n;
      j["schedule_ms"] = rep->schedule_ms;
      j["compute_ms"] = rep->compute_ms;
      j["pull_ms"] = rep->pull_ms;
      j["push_ms"] = rep->push_ms;
      j["bytes_sent"] = rep->bytes_sent;
      *options_.log << j.dump() << std::endl;
      loss = bubble = 0;
      n = 0;
    }
  }
  return absl::OkStatus();
}

}  // namespace bertps

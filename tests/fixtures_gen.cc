#include "tests/fixtures_gen.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/digest.h"
#include "common/io/file_util.h"
#include "common/io/tfevents.h"
#include "common/model/hf_export.h"
#include "common/model/params.h"
#include "common/model/weights.h"
#include "common/ps/checkpoint.h"
#include "common/status.h"
#include "google/protobuf/text_format.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "proto/coordinator.pb.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/job_store.h"
#include "common/cluster/plan_for.h"
#include "server/ps/shard.h"
#include "server/ps/shard_metrics.h"
#include "worker/worker_metrics.h"

namespace bertps {
namespace fixtures {
namespace {

namespace fs = std::filesystem;

// Delivers a shard's partial sums straight to the other in-process core.
class LocalPeers : public ps::PeerLink {
 public:
  void Add(ps::ShardCore* core) { cores_.push_back(core); }
  absl::Status Send(int to, const ExchangeRequest& request, absl::Time,
                    const std::atomic<bool>*) override {
    return cores_.at(to)->ReceiveExchange(request);
  }

 private:
  std::vector<ps::ShardCore*> cores_;  // set before the first step
};

// Worker 0's push of `step` to one shard: every local slice whole.
absl::Status Push(const ParamLayout& layout, ps::ShardCore* core,
                  int64_t step) {
  PushHeader h;
  h.set_worker(0);
  h.set_step(step);
  h.set_examples(kExamplesPerStep);
  h.set_first_example(step * kExamplesPerStep);
  double sq = 0;  // of the whole gradient, as a worker sends it
  for (int64_t i = 0; i < layout.total_size(); ++i) {
    const double g = FixtureGrad(step, i);
    sq += g * g;
  }
  h.set_grad_sq_sum(sq);
  ASSIGN_OR_RETURN(std::unique_ptr<ps::ShardCore::PushSession> session,
                   core->BeginPush(h));
  for (int index : core->local_slices()) {
    const ps::SliceSpec& s = core->plan().slices()[index];
    const int64_t base = layout.tensors()[s.tensor].offset + s.begin;
    std::vector<float> g(s.size());  // (slice size)
    for (int64_t k = 0; k < s.size(); ++k) g[k] = FixtureGrad(step, base + k);
    TensorChunk c;
    c.set_name(s.name);
    c.set_dtype(F32);
    c.set_offset(s.begin);
    c.set_data(g.data(), g.size() * sizeof(float));
    RETURN_IF_ERROR(core->AddChunk(session.get(), c));
  }
  return core->FinishPush(std::move(session), absl::Now() + absl::Seconds(30))
      .status();
}

constexpr char kJobRecords[] = R"pb(
status {
  id: "job-000001"
  spec {
    name: "pretrain-waiting"
    task: PRETRAIN
    model: "tiny"
    data: "/data/pretrain/*.tfrecord"
    batch_size: 32
    steps: 1000
    optimizer { kind: "adam_weight_decay" learning_rate: 0.0001 warmup_steps: 100 weight_decay: 0.01 clip_norm: 1 }
    checkpoint { dir: "/jobs/job-000001/checkpoints" every_steps: 100 max_restarts: 10 keep: 3 }
    eval { data: "/data/heldout/*.tfrecord" every_steps: 500 }
    num_ps_shards: 2
    num_workers: 2
    seed: 12345
    export_path: "/jobs/job-000001/model"
    tensorboard_dir: "/jobs/job-000001/tensorboard"
    job_dir: "/jobs/job-000001"
    accumulation_steps: 1
    vocab: "/data/vocab.txt"
    replicas: 1
  }
  state: PENDING
  submit_time_ms: 1700000000000
  waiting: "0/2 idle train workers"
  waiting_since_ms: 1700000000000
  data_files { path: "/data/pretrain/part-0.tfrecord" bytes: 1048576 records: 2048 seq_length: 128 masked_positions: 20 }
  data_files { path: "/data/pretrain/part-1.tfrecord" bytes: 524288 records: 1024 }
  history_stride: 1
  memory { shard_bytes: 33554432 shard_detail: "parameters and 2 optimizer slots" worker_bytes: 268435456 worker_detail: "activations of batch 32 x 128" }
}
examples_per_epoch: 3072
)pb"
                              R"pb(
status {
  id: "job-000002"
  spec {
    name: "preprocess-running"
    task: PREPROCESS
    data: "/data/raw/*.txt"
    output_dir: "/jobs/job-000002/output"
    seed: 12345
    preprocess {
      input_format: "text"
      output: "pretrain"
      vocab: "/data/vocab.txt"
      max_seq_length: 128
      max_predictions_per_seq: 20
      masked_lm_prob: 0.15
      dupe_factor: 2
      short_seq_prob: 0.1
      shards: 2
      clean { normalization: "NFC" dedup_exact: true min_words: 3 }
    }
  }
  state: RUNNING
  submit_time_ms: 1700000001000
  start_time_ms: 1700000002000
  items_total: 2
  items_done: 1
  records_written: 640
}
items {
  item { index: 0 input: "/data/raw/a.txt" part: 0 parts: 1 }
  done: true
  result { index: 0 records: 640 report_json: "{\"documents\": 40, \"dropped\": 2}" }
}
items {
  item { index: 1 input: "/data/raw/b.txt" part: 0 parts: 1 }
}
)pb"
                              R"pb(
status {
  id: "job-000003"
  spec {
    name: "pretrain-done"
    task: PRETRAIN
    model: "tiny"
    data: "/data/pretrain/*.tfrecord"
    batch_size: 16
    steps: 4
    optimizer { kind: "adam_weight_decay" learning_rate: 0.001 weight_decay: 0.01 clip_norm: 1 }
    consistency { mode: BSP }
    checkpoint { dir: "/jobs/job-000003/checkpoints" every_steps: 2 max_restarts: 10 }
    eval { data: "/data/heldout/*.tfrecord" shards: 1 }
    num_ps_shards: 2
    num_workers: 1
    seed: 7
    export_path: "/jobs/job-000003/model.safetensors"
    accumulation_steps: 1
    replicas: 1
  }
  state: SUCCEEDED
  progress {
    step: 4
    total_steps: 4
    epoch: 0
    examples: 64
    examples_per_epoch: 64
    loss: 6.5
    learning_rate: 0.0005
    examples_per_sec: 128
    tokens_per_sec: 16384
    pull_ms: 1.5
    compute_ms: 40.25
    push_ms: 2.5
    wait_ms: 0.5
    input_ms: 0.25
    compute_cpu_ms: 38
  }
  submit_time_ms: 1700000003000
  start_time_ms: 1700000004000
  end_time_ms: 1700000009000
  ps_addresses: "127.0.0.1:7000"
  ps_addresses: "127.0.0.1:7001"
  history { step: 1 loss: 7.25 learning_rate: 0.001 }
  history { step: 2 loss: 7 learning_rate: 0.00075 }
  history { step: 3 loss: 6.75 learning_rate: 0.0005 }
  history { step: 4 loss: 6.5 learning_rate: 0.00025 }
  items_total: 1
  items_done: 1
  evals {
    round: "final"
    step: 4
    examples: 32
    mlm_accuracy: 0.125
    mlm_loss: 6.25
    mlm_perplexity: 518.012824668342
    nsp_accuracy: 0.5
    nsp_loss: 0.6875
    stats { examples: 32 mlm_loss_sum: 400 mlm_weight: 64 mlm_correct: 8 nsp_correct: 16 nsp_loss_sum: 22 }
    time_ms: 1700000008500
  }
  incarnation: 1
  data_files { path: "/data/pretrain/part-0.tfrecord" bytes: 65536 records: 64 seq_length: 128 masked_positions: 20 }
  history_stride: 1
  slots { slot: 0 member: "m-000004" done: true }
  last_checkpoint: "/jobs/job-000003/checkpoints/ckpt-4/manifest.json"
  last_checkpoint_version: 4
}
examples_per_epoch: 64
items {
  item { index: 0 input: "/data/heldout/part-0.tfrecord" part: 0 parts: 1 round: "final" checkpoint: "/jobs/job-000003/checkpoints/ckpt-4/manifest.json" version: 4 }
  done: true
  result { index: 0 round: "final" records: 32 version: 4 eval { examples: 32 mlm_loss_sum: 400 mlm_weight: 64 mlm_correct: 8 nsp_correct: 16 nsp_loss_sum: 22 } }
}
rounds { name: "final" version: 4 checkpoint: "/jobs/job-000003/checkpoints/ckpt-4/manifest.json" first: 0 count: 1 done: 1 finished: true }
training_done: true
last_checkpoint: "/jobs/job-000003/checkpoints/ckpt-4/manifest.json"
last_checkpoint_version: 4
tokens_per_example: 128
)pb"
                              R"pb(
status {
  id: "job-000004"
  spec {
    name: "classify-failed"
    task: CLASSIFY
    model: "tiny"
    data: "/data/spam/train-*.tfrecord"
    batch_size: 8
    epochs: 2
    optimizer { kind: "adamw" learning_rate: 0.00002 warmup_steps: 10 weight_decay: 0.01 clip_norm: 1 }
    checkpoint { dir: "/jobs/job-000004/checkpoints" max_restarts: 10 }
    num_ps_shards: 1
    num_workers: 2
    seed: 12345
    init_weights: "/models/bert-tiny.safetensors"
    num_labels: 2
    label_names: "ham"
    label_names: "spam"
    accumulation_steps: 1
    replicas: 1
  }
  state: FAILED
  reason: "shard 0 (member m-000002 at 127.0.0.1:7000) stopped answering and checkpoint.max_restarts (10) is spent"
  progress { step: 37 total_steps: 250 epoch: 0 examples: 592 examples_per_epoch: 592 loss: 0.5 }
  submit_time_ms: 1700000010000
  start_time_ms: 1700000011000
  end_time_ms: 1700000020000
  incarnation: 11
  restarts: 10
  history_stride: 2
  slots { slot: 0 member: "m-000005" }
  slots { slot: 1 member: "m-000005" shared: true own_slot: 0 since_ms: 1700000015000 }
}
examples_per_epoch: 2000
)pb"
                              R"pb(
status {
  id: "job-000005"
  spec {
    name: "eval-cancelled"
    task: EVAL
    model: "tiny"
    data: "/data/spam/test-*.tfrecord"
    batch_size: 32
    eval_checkpoint: "/jobs/job-000004/checkpoints/ckpt-30/manifest.json"
    output_dir: "/jobs/job-000005/output"
    num_labels: 2
    label_names: "ham"
    label_names: "spam"
  }
  state: CANCELLED
  reason: "cancelled by the user"
  submit_time_ms: 1700000021000
  start_time_ms: 1700000022000
  end_time_ms: 1700000023000
  items_total: 2
  items_done: 1
}
items {
  item { index: 0 input: "/data/spam/test-0.tfrecord" part: 0 parts: 1 round: "final" checkpoint: "/jobs/job-000004/checkpoints/ckpt-30/manifest.json" version: 30 }
  done: true
  result { index: 0 round: "final" records: 10 version: 30 eval { examples: 10 cls_loss_sum: 2.5 num_labels: 2 confusion: 6 confusion: 1 confusion: 0 confusion: 3 } }
}
items {
  item { index: 1 input: "/data/spam/test-1.tfrecord" part: 0 parts: 1 round: "final" checkpoint: "/jobs/job-000004/checkpoints/ckpt-30/manifest.json" version: 30 }
}
rounds { name: "final" version: 30 checkpoint: "/jobs/job-000004/checkpoints/ckpt-30/manifest.json" first: 0 count: 2 done: 1 }
)pb";

// The records of kJobRecords (one per "status {" block).
absl::StatusOr<std::vector<JobRecord>> JobRecords() {
  std::vector<JobRecord> out;
  const std::string text = kJobRecords;
  size_t at = text.find("\nstatus {");
  while (at != std::string::npos) {
    const size_t next = text.find("\nstatus {", at + 1);
    const std::string one =
        text.substr(at, next == std::string::npos ? next : next - at);
    JobRecord r;
    if (!google::protobuf::TextFormat::ParseFromString(one, &r)) {
      return absl::InternalError(
          absl::StrCat("the fixture's job record does not parse:\n", one));
    }
    out.push_back(std::move(r));
    at = next;
  }
  return out;
}

}  // namespace

BertConfig FixtureConfig() {
  BertConfig c;
  c.vocab_size = 100;
  c.hidden_size = 8;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 16;
  c.max_position_embeddings = 16;
  return c;
}

optim::OptimizerConfig FixtureOptimizer() {
  optim::OptimizerConfig o;
  o.kind = optim::OptimizerKind::kAdamWeightDecay;
  o.learning_rate = 0.01;
  o.clip_norm = 1.0;
  return o;
}

float FixtureInit(int64_t i) {
  return static_cast<float>((i * 37) % 101 - 50) / 1024.0f;
}

float FixtureGrad(int64_t step, int64_t i) {
  return static_cast<float>((i * 7 + step * 5) % 23 - 11) / 256.0f;
}

std::string FixtureSpecText() {
  return R"(name: "fixture"
task: PRETRAIN
data: "/data/fixture/*.tfrecord"
batch_size: 4
steps: 3
optimizer { kind: "adam_weight_decay" learning_rate: 0.01 clip_norm: 1 }
checkpoint { dir: "/jobs/fixture/checkpoints" }
num_ps_shards: 2
num_workers: 1
)";
}

std::string FixtureVocab() {
  std::string v = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (char c = 'a'; c <= 'z'; ++c) absl::StrAppend(&v, std::string(1, c), "\n");
  for (char c = 'a'; c <= 'z'; ++c) absl::StrAppend(&v, "##", std::string(1, c), "\n");
  for (int i = 57; i < 100; ++i) absl::StrAppend(&v, "word", i, "\n");
  return v;
}

absl::Status WriteCheckpointFixture(const std::string& dir,
                                    const std::string& scratch) {
  const BertConfig config = FixtureConfig();
  const ParamLayout layout = ParamLayout::ForBert(config, BertTask::kPretrain);
  std::vector<float> init(layout.total_size());  // (total)
  for (int64_t i = 0; i < layout.total_size(); ++i) init[i] = FixtureInit(i);
  RETURN_IF_ERROR(io::MakeDirs(scratch));
  const std::string init_path = scratch + "/fixture-init.safetensors";
  RETURN_IF_ERROR(SaveBertWeights(init_path, layout, init.data(), &config));

  LocalPeers peers;
  std::vector<std::unique_ptr<ps::ShardCore>> cores;
  for (int shard = 0; shard < kShards; ++shard) {
    ps::ShardOptions o;
    o.shard = shard;
    o.num_shards = kShards;
    o.config = config;
    o.task = BertTask::kPretrain;
    o.optimizer = FixtureOptimizer();
    o.job_plan = PlanFor(BSP, 1, o.optimizer);
    o.init_weights = init_path;
    o.wait_timeout = absl::Seconds(30);
    ASSIGN_OR_RETURN(std::unique_ptr<ps::ShardCore> core,
                     ps::ShardCore::Create(o, &peers));
    peers.Add(core.get());
    cores.push_back(std::move(core));
  }
  for (int64_t step = 0; step < kSteps; ++step) {
    // To both shards at once, as a worker's push lanes send them: a step
    // applies once the shards exchanged their partial sums.
    std::vector<absl::Status> pushed(cores.size());
    {
      std::vector<std::thread> lanes;
      for (size_t k = 0; k < cores.size(); ++k) {
        lanes.emplace_back([&, k] {
          pushed[k] = Push(layout, cores[k].get(), step);
        });
      }
      for (std::thread& t : lanes) t.join();
    }
    for (const absl::Status& st : pushed) {
      RETURN_IF_ERROR(Annotate(st, absl::StrCat("fixture push of step ", step)));
    }
    for (auto& core : cores) {
      RETURN_IF_ERROR(core->AcquireSnapshot(0, step + 1, 0,
                                            absl::Now() + absl::Seconds(30))
                          .status());
    }
  }
  // The manifest as PsClient::Checkpoint assembles it from the shards.
  const DescribeResponse d = cores[0]->Describe();
  ps::Manifest m;
  m.version = kSteps;
  m.num_shards = kShards;
  m.config_json = config.ToJson();
  m.task = std::string(BertTaskName(BertTask::kPretrain));
  m.optimizer = d.optimizer();
  m.plan_text = cores[0]->plan().ToText();
  m.state_slots = d.state_slots();
  for (int shard = 0; shard < kShards; ++shard) {
    ASSIGN_OR_RETURN(CheckpointResponse r,
                     cores[shard]->Checkpoint(dir, kSteps,
                                              absl::Now() + absl::Seconds(30)));
    ps::ShardFile f;
    f.shard = shard;
    f.file = r.file();
    f.crc32c = r.crc32c();
    f.bytes = r.bytes();
    m.files.push_back(f);
    if (shard == 0) m.example_ledger = r.example_ledger();
  }
  cores.clear();
  m.release = kFixtureRelease;
  m.spec_sha256 = Sha256Hex(FixtureSpecText());
  RETURN_IF_ERROR(ps::WriteManifest(dir, m).status());
  std::error_code ec;
  fs::remove(init_path, ec);
  return absl::OkStatus();
}

absl::Status WriteExportFixture(const std::string& manifest,
                                const std::string& dir,
                                const std::string& scratch) {
  const BertConfig config = FixtureConfig();
  const ParamLayout layout = ParamLayout::ForBert(config, BertTask::kPretrain);
  std::vector<float> params(layout.total_size());  // (total)
  RETURN_IF_ERROR(
      ps::LoadCheckpointParams(manifest, layout, params.data()).status());
  RETURN_IF_ERROR(io::MakeDirs(scratch));
  HfExportOptions hf;
  hf.vocab_path = scratch + "/fixture-vocab.txt";
  hf.do_lower_case = true;
  RETURN_IF_ERROR(io::WriteFileAtomically(hf.vocab_path, FixtureVocab()));
  RETURN_IF_ERROR(WriteHfModelDir(dir, layout, params.data(), config,
                                  BertTask::kPretrain, hf));
  std::error_code ec;
  fs::remove(hf.vocab_path, ec);
  return absl::OkStatus();
}

std::string JobStoreFixtureText() { return kJobRecords; }

absl::Status WriteJobStoreFixture(const std::string& path) {
  std::error_code ec;
  if (fs::exists(path, ec)) {
    return absl::AlreadyExistsError(
        absl::StrCat(path, " exists: the job store fixture is written new"));
  }
  ASSIGN_OR_RETURN(std::vector<JobRecord> records, JobRecords());
  {
    ASSIGN_OR_RETURN(std::unique_ptr<JobStore> store, JobStore::Open(path));
    for (const JobRecord& r : records) {
      RETURN_IF_ERROR(store->Put(r.status().id(), r));
    }
  }  // closed: the write-ahead log is checkpointed into the file and removed
  for (const char* suffix : {"-wal", "-shm"}) {
    if (fs::exists(path + suffix, ec)) {
      return absl::InternalError(
          absl::StrCat(path, suffix, " is left after the store was closed"));
    }
  }
  return absl::OkStatus();
}

std::string TensorBoardTags() {
  return "train/loss\n"
         "train/learning_rate\n"
         "train/examples_per_second\n"
         "step_time/input_ms\n"
         "step_time/pull_ms\n"
         "step_time/compute_ms\n"
         "step_time/compute_cpu_ms\n"
         "step_time/push_ms\n"
         "step_time/wait_ms\n"
         "eval/accuracy\n"
         "eval/macro_f1\n"
         "eval/loss\n"
         "eval/mlm_accuracy\n"
         "eval/mlm_loss\n"
         "eval/mlm_perplexity\n"
         "eval/nsp_accuracy\n";
}

absl::Status WriteEventsFixture(const std::string& dir) {
  const std::vector<std::string> tags =
      absl::StrSplit(TensorBoardTags(), '\n', absl::SkipEmpty());
  constexpr double kWall = 1700000000;
  std::string written;
  {
    io::EventLog log(dir);
    for (size_t k = 0; k < tags.size(); ++k) {
      log.AddScalar(1, tags[k], 0.25 * (k + 1), kWall + 1);
    }
    RETURN_IF_ERROR(log.Flush());
    log.AddStart(1, kWall + 2);
    for (size_t k = 0; k < tags.size(); ++k) {
      log.AddScalar(2, tags[k], 0.5 * (k + 1), kWall + 2);
    }
    RETURN_IF_ERROR(log.Flush());
    written = log.path();
  }
  std::error_code ec;
  fs::rename(written, dir + "/" + kEventsFile, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("rename ", written, ": ", ec.message()));
  }
  return absl::OkStatus();
}

std::map<std::string, std::string> ExportedMetricFamilies() {
  // Fed as tests/dashboard_test.cc feeds them: a classification job with an
  // eval round, a pretraining one, shard stats, a worker step.
  prometheus::Registry registry;
  CoordinatorMetrics coordinator(registry);
  std::vector<JobStatus> jobs(2);
  jobs[0].set_id("job-000001");
  jobs[0].set_state(RUNNING);
  jobs[0].add_evals()->mutable_stats()->set_num_labels(2);
  jobs[1].set_id("job-000002");
  jobs[1].set_state(SUCCEEDED);
  jobs[1].add_evals();
  coordinator.Update(jobs);
  ps::ShardMetrics shard(registry);
  int install = 0;
  shard.Update("job-000001", &install, StatsResponse());
  WorkerMetrics worker(registry);
  worker.Observe("job-000001", StepReport());
  std::map<std::string, std::string> exported;
  for (const prometheus::MetricFamily& f : registry.Collect()) {
    std::set<std::string> labels;
    for (const prometheus::ClientMetric& m : f.metric) {
      for (const prometheus::ClientMetric::Label& l : m.label) {
        labels.insert(l.name);
      }
    }
    const char* type = "untyped";
    switch (f.type) {
      case prometheus::MetricType::Counter: type = "counter"; break;
      case prometheus::MetricType::Gauge: type = "gauge"; break;
      case prometheus::MetricType::Summary: type = "summary"; break;
      case prometheus::MetricType::Histogram: type = "histogram"; break;
      case prometheus::MetricType::Untyped: break;
    }
    exported[f.name] = absl::StrCat(
        type, " ", labels.empty() ? "-" : absl::StrJoin(labels, ","));
  }
  return exported;
}

absl::StatusOr<std::string> DashboardMetricNames(const std::string& dashboard) {
  ASSIGN_OR_RETURN(std::string text, io::ReadFileToString(dashboard));
  const nlohmann::json d =
      nlohmann::json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (d.is_discarded() || !d.contains("panels")) {
    return absl::InvalidArgumentError(
        absl::StrCat(dashboard, " is not a Grafana dashboard"));
  }
  std::map<std::string, std::string> exported = ExportedMetricFamilies();
  const std::regex metric(R"(\bbertps_[a-z0-9_]+)");
  const std::regex histogram_part(R"(_(bucket|sum|count)$)");
  std::set<std::string> used;
  for (const auto& panel : d.at("panels")) {
    if (!panel.contains("targets")) continue;
    for (const auto& target : panel.at("targets")) {
      if (!target.contains("expr")) continue;
      const std::string expr = target.at("expr").get<std::string>();
      for (std::sregex_iterator it(expr.begin(), expr.end(), metric), end;
           it != end; ++it) {
        std::string name = it->str();
        if (!exported.count(name)) {
          name = std::regex_replace(name, histogram_part, "");
        }
        if (!exported.count(name)) {
          return absl::FailedPreconditionError(absl::StrCat(
              dashboard, " queries ", it->str(), ", which no daemon exports"));
        }
        used.insert(name);
      }
    }
  }
  std::string out;
  for (const std::string& name : used) {
    absl::StrAppend(&out, name, " ", exported[name], "\n");
  }
  return out;
}

}  // namespace fixtures
}  // namespace bertps

// Pipeline stages over real gRPC on 127.0.0.1 in this process, with
// parameter-server shards: gradients equal to the single-process model, five
// steps equal to data parallelism, D = 2 x S = 2 equal to one worker with the
// combined batch, and a killed stage failing the others fast.
#include "worker/pipeline_stage.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/io/bert_example.h"
#include "common/io/tfrecord.h"
#include "common/model/batch_view.h"
#include "common/model/params.h"
#include "gtest/gtest.h"
#include "tests/bad_example_file.h"
#include "server/ps/server.h"
#include "worker/train_worker.h"

namespace bertps {
namespace {

std::string TempDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

BertConfig Small() {
  BertConfig c;
  c.vocab_size = 40;
  c.hidden_size = 32;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.intermediate_size = 64;
  c.max_position_embeddings = 32;
  return c;
}

std::string WriteData(int n) {
  const std::string path = TempDir() + "/pipeline_data.tfrecord";
  std::mt19937 rng(17);
  auto w = *io::TFRecordWriter::Open(path);
  for (int i = 0; i < n; ++i) {
    io::PretrainExample e;
    const int tok = 5 + rng() % 30;
    const int len = 10 + rng() % 7;  // padding varies
    for (int j = 0; j < 16; ++j) {
      e.input_ids.push_back(j >= len ? 0 : j == 0 ? 1 : 5 + (tok + j) % 30);
      e.input_mask.push_back(j < len);
      e.segment_ids.push_back(j < len / 2 ? 0 : 1);
    }
    const int preds = 1 + rng() % 3;  // varying real predictions
    for (int k = 0; k < 3; ++k) {
      e.masked_lm_positions.push_back(k < preds ? 1 + k * 3 : 0);
      e.masked_lm_ids.push_back(k < preds ? tok : 0);
      e.masked_lm_weights.push_back(k < preds ? 1.0f : 0.0f);
    }
    e.next_sentence_label = tok % 2;
    EXPECT_TRUE(w->Write(io::EncodePretrainExample(e)).ok());
  }
  EXPECT_TRUE(w->Close().ok());
  return path;
}

struct Cluster {
  std::vector<std::unique_ptr<ps::ShardServer>> shards;
  std::vector<std::string> addresses;
};

// The plan of a job of `replicas` x `stages` (1: no pipeline) with `batch`
// examples per replica for `steps` updates, learning rate 1e-3 after 2
// warm-up updates.
JobPlan TestPlan(int stages, int replicas, int batch, int64_t steps) {
  JobSpec j;
  j.set_task(PRETRAIN);
  j.set_num_workers(replicas);
  if (stages > 1) j.mutable_pipeline()->set_stages(stages);
  j.set_batch_size(batch);
  j.set_steps(steps);
  j.mutable_optimizer()->set_learning_rate(1e-3);
  j.mutable_optimizer()->set_warmup_steps(2);
  return PlanOf(j);
}

// Shards for `workers` pushers (replicas x stages), 10 updates.
Cluster StartCluster(int workers, absl::Duration wait = absl::Seconds(30)) {
  ps::ShardOptions o;
  o.config = Small();
  o.job_plan = TestPlan(1, workers, 1, 10);
  o.optimizer.learning_rate = 1e-3;
  o.optimizer.warmup_steps = 2;
  o.optimizer.total_steps = 10;
  o.init_seed = 7;
  o.wait_timeout = wait;
  Cluster c;
  for (int s = 0; s < 2; ++s) {
    o.shard = s;
    o.num_shards = 2;
    auto server = ps::ShardServer::Start(o, "127.0.0.1:0", {});
    EXPECT_TRUE(server.ok()) << server.status();
    c.addresses.push_back((*server)->address());
    c.shards.push_back(std::move(*server));
  }
  for (auto& s : c.shards) s->SetPeers(c.addresses);
  return c;
}

PipelineStageOptions StageOpts(const Cluster& c, const std::string& data,
                               int stage, int stages, int replica,
                               int replicas, PipelineScheduleKind kind,
                               int batch, int64_t steps) {
  PipelineStageOptions o;
  o.ps.addresses = c.addresses;
  o.ps.rpc_timeout = absl::Seconds(30);
  o.config = Small();
  o.plan = TestPlan(stages, replicas, batch, steps);
  o.stage = stage;
  o.replica = replica;
  o.micro_batches = 4;
  o.schedule = kind;
  o.data = {data};
  o.dropout = true;  // masks must match the single-process model's
  return o;
}

// D replicas x S stages; each replica's stages know each other's addresses.
std::vector<std::unique_ptr<PipelineStage>> StartStages(
    const Cluster& c, const std::string& data, int S, int D,
    PipelineScheduleKind kind, int batch, int64_t steps,
    void (*tweak)(PipelineStageOptions*) = nullptr) {
  std::vector<std::unique_ptr<PipelineStage>> out;
  for (int r = 0; r < D; ++r) {
    std::vector<std::string> peers;
    for (int s = 0; s < S; ++s) {
      PipelineStageOptions o = StageOpts(c, data, s, S, r, D, kind, batch, steps);
      if (tweak) tweak(&o);
      auto p = PipelineStage::Create(o);
      EXPECT_TRUE(p.ok()) << p.status();
      peers.push_back((*p)->address());
      out.push_back(std::move(*p));
    }
    for (int s = 0; s < S; ++s) out[r * S + s]->SetPeers(peers);
  }
  return out;
}

std::vector<absl::Status> RunAll(
    const std::vector<std::unique_ptr<PipelineStage>>& stages) {
  std::vector<absl::Status> st(stages.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < stages.size(); ++i) {
    threads.emplace_back([&, i] { st[i] = stages[i]->Run(); });
  }
  for (auto& t : threads) t.join();
  return st;
}

// The shards' parameters at version 0 (StartCluster's init_seed 7).
std::vector<float> InitialParams() {
  const ParamLayout l = ParamLayout::ForBert(Small(), BertTask::kPretrain);
  std::vector<float> p(l.total_size());
  InitBertParams(l, Small(), 7, p.data());
  return p;
}

std::vector<float> PullAll(const Cluster& c, int64_t version) {
  PsClientOptions o;
  o.addresses = c.addresses;
  auto client = *PsClient::Connect(o, Small(), BertTask::kPretrain);
  std::vector<float> p(client->layout().total_size());
  EXPECT_TRUE(client->Pull(0, version, version, p.data()).ok());
  return p;
}

// Per tensor, relative: max|a - b| <= tol * max|b| (b: the reference). The
// attention key biases, whose gradient is zero in exact arithmetic, hold
// only rounding noise: both sides must be below tol times the largest value
// of all tensors. A tensor of zeros where the reference has values fails.
// `origin` (may be empty) is subtracted from both first, so parameters are
// compared by the updates they received, within tol of the largest update
// plus 2 float ulps of the tensor's largest parameter (the rounding of a
// parameter near 1 itself, ~1.2e-7, is ~1e-5 of a 0.01 update).
void ExpectClose(const std::vector<float>& a, const std::vector<float>& b,
                 const std::vector<float>& origin, double tol,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  const ParamLayout l = ParamLayout::ForBert(Small(), BertTask::kPretrain);
  auto at = [&](const std::vector<float>& v, int64_t i) {
    return double(v[i]) - (origin.empty() ? 0.0 : double(origin[i]));
  };
  double global = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    global = std::max(global, std::fabs(at(b, static_cast<int64_t>(i))));
  }
  int checked = 0;
  for (const ParamSpec& p : l.tensors()) {
    double worst = 0, scale = 0, a_max = 0, param_max = 0;
    for (int64_t i = p.offset; i < p.offset + p.size; ++i) {
      worst = std::max(worst, std::fabs(at(a, i) - at(b, i)));
      scale = std::max(scale, std::fabs(at(b, i)));
      a_max = std::max(a_max, std::fabs(at(a, i)));
      param_max = std::max(param_max, std::fabs(double(b[i])));
    }
    const double ulps =
        origin.empty() ? 0.0 : 2 * std::numeric_limits<float>::epsilon() * param_max;
    if (absl::EndsWith(p.name, "attention.self.key.bias")) {
      EXPECT_LE(std::max(a_max, scale), tol * global) << what << ": " << p.name;
      continue;
    }
    ASSERT_GT(scale, 0) << what << ": " << p.name;
    EXPECT_LE(worst, tol * scale + ulps)
        << what << ": " << p.name << " (largest " << scale << ")";
    ++checked;
  }
  EXPECT_GE(checked, 30) << what;
}

// One step: every stage's gradient (the tied word embeddings summed over
// the first and last stage) against BertModel on the same batch.
void CheckOneStep(int S, PipelineScheduleKind kind) {
  const std::string data = WriteData(64);
  Cluster c = StartCluster(S);
  const int B = 8;
  auto stages = StartStages(c, data, S, 1, kind, B, 1);
  std::vector<absl::StatusOr<StageStepReport>> reps(S);
  {
    std::vector<std::thread> threads;
    for (int s = 0; s < S; ++s) {
      threads.emplace_back([&, s] { reps[s] = stages[s]->Step(0); });
    }
    for (auto& t : threads) t.join();
  }
  for (int s = 0; s < S; ++s) ASSERT_TRUE(reps[s].ok()) << reps[s].status();
  const ParamLayout layout = ParamLayout::ForBert(Small(), BertTask::kPretrain);
  std::vector<float> params(layout.total_size()), grads(layout.total_size());
  for (auto& p : stages) {
    BertStage<float>* st = p->stage();
    for (int t : st->tensors()) {
      const ParamSpec& sp = layout.tensors()[t];
      for (int64_t i = 0; i < sp.size; ++i) {
        params[sp.offset + i] = st->params()[st->local_offset(t) + i];
        grads[sp.offset + i] += st->grads()[st->local_offset(t) + i];
      }
    }
  }
  // The single-process model on the same 8 examples.
  auto stream = *io::ExampleStream::Open({data});
  io::BertBatch batch;
  batch.seq = 16;
  batch.preds = 3;
  std::string rec;
  for (int i = 0; i < B; ++i) {
    ASSERT_TRUE(*stream->Next(&rec));
    io::AppendExample(*io::DecodePretrainExample(rec), &batch);
  }
  kernels::MatmulEngine mm;
  auto model = *BertModel<float>::Create(Small(), BertTask::kPretrain, B, 16,
                                         3, &mm);
  std::copy(params.begin(), params.end(), model->params());
  StepOptions o;
  o.train = true;
  o.seed = 12345;
  o.step = 0;
  auto r = model->Step(ViewOf(batch), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(reps[S - 1]->loss, r->loss, 1e-5 * std::max(1.0, r->loss));
  std::vector<float> ref(model->grads(),
                         model->grads() + model->num_params());
  ExpectClose(grads, ref, {}, 1e-5,
              absl::StrCat("S=", S, " ", PipelineScheduleName(kind)));
  // Activations moved: (S - 1) boundaries x (forward + backward) x B*16*H.
  int64_t sent = 0;
  for (int s = 0; s < S; ++s) sent += reps[s]->bytes_sent;
  EXPECT_EQ(sent, int64_t{2} * (S - 1) * B * 16 * 32 * 4);
  // Each stage pulled its own tensors (fp32 here), the tied word table by
  // the first stage and the last: together at least the whole model.
  int64_t pulled = 0;
  for (int s = 0; s < S; ++s) {
    EXPECT_GT(reps[s]->pull_bytes, 0) << "stage " << s;
    pulled += reps[s]->pull_bytes;
  }
  EXPECT_GE(pulled, model->num_params() * int64_t{4});
}

TEST(PipelineStageTest, GradientsEqualSingleProcessS2) {
  CheckOneStep(2, PipelineScheduleKind::kGPipe);
  CheckOneStep(2, PipelineScheduleKind::kOneFOneB);
}

TEST(PipelineStageTest, GradientsEqualSingleProcessS3) {
  CheckOneStep(3, PipelineScheduleKind::kGPipe);
  CheckOneStep(3, PipelineScheduleKind::kOneFOneB);
}

// Parameters after 5 steps of a train worker with batch B*N.
std::vector<float> DataParallel(const std::string& data, int batch) {
  Cluster c = StartCluster(1);
  TrainWorkerOptions o;
  o.ps.addresses = c.addresses;
  o.config = Small();
  o.plan = TestPlan(1, 1, batch, 5);
  o.data = {data};
  o.dropout = true;
  auto tw = TrainWorker::Create(o);
  EXPECT_TRUE(tw.ok()) << tw.status();
  absl::Status st = (*tw)->Run();
  EXPECT_TRUE(st.ok()) << st;
  return PullAll(c, 5);
}

TEST(PipelineStageTest, FiveStepsEqualDataParallel) {
  const std::string data = WriteData(64);
  const std::vector<float> ref = DataParallel(data, 8);
  for (auto kind :
       {PipelineScheduleKind::kGPipe, PipelineScheduleKind::kOneFOneB}) {
    Cluster c = StartCluster(2);
    auto stages = StartStages(c, data, 2, 1, kind, 8, 5);
    for (const absl::Status& st : RunAll(stages)) ASSERT_TRUE(st.ok()) << st;
    ExpectClose(PullAll(c, 5), ref, InitialParams(), 1e-5,
                PipelineScheduleName(kind).data());
  }
}

TEST(PipelineStageTest, HybridTwoReplicasOfTwoStagesEqualOneWorker) {
  const std::string data = WriteData(64);
  const std::vector<float> ref = DataParallel(data, 16);
  Cluster c = StartCluster(4);
  auto stages =
      StartStages(c, data, 2, 2, PipelineScheduleKind::kOneFOneB, 8, 5);
  for (const absl::Status& st : RunAll(stages)) ASSERT_TRUE(st.ok()) << st;
  ExpectClose(PullAll(c, 5), ref, InitialParams(), 1e-5, "D=2 x S=2");
}

// Three runs of the same pipeline job end with the same parameters, bit for
// bit (a restart from a checkpoint relies on it). Activation buffers of
// varying alignment once made Eigen's reductions add in a different order
// from run to run (1-ulp differences that grew with the steps).
TEST(PipelineStageTest, RunsAreBitForBitReproducible) {
  const std::string data = WriteData(64);
  std::vector<std::vector<float>> runs;
  for (int r = 0; r < 3; ++r) {
    Cluster c = StartCluster(2);
    auto stages =
        StartStages(c, data, 2, 1, PipelineScheduleKind::kOneFOneB, 8, 4);
    for (const absl::Status& st : RunAll(stages)) ASSERT_TRUE(st.ok()) << st;
    runs.push_back(PullAll(c, 4));
    // Allocations between runs move the heap, as in a longer-lived process.
    std::vector<std::unique_ptr<char[]>> shift;
    for (int k = 0; k <= r; ++k) shift.emplace_back(new char[48 + 16 * k]);
  }
  const ParamLayout l = ParamLayout::ForBert(Small(), BertTask::kPretrain);
  for (const ParamSpec& p : l.tensors()) {
    int differing = 0;
    for (int64_t i = p.offset; i < p.offset + p.size; ++i) {
      differing += runs[0][i] != runs[1][i] || runs[0][i] != runs[2][i];
    }
    EXPECT_EQ(differing, 0) << p.name;
  }
}

TEST(PipelineStageTest, KilledStageFailsTheOthersFast) {
  const std::string data = WriteData(64);
  Cluster c = StartCluster(3, absl::Seconds(5));
  auto stages = StartStages(
      c, data, 3, 1, PipelineScheduleKind::kOneFOneB, 8, 1000,
      [](PipelineStageOptions* o) {
        o->probe_interval = absl::Milliseconds(200);
        o->probe_timeout = absl::Seconds(1);
        o->peer_restart_wait = absl::Seconds(1);
      });
  std::vector<absl::Status> st(3);
  std::vector<absl::Time> ended(3);
  std::vector<std::thread> threads;
  for (int s = 0; s < 3; ++s) {
    threads.emplace_back([&, s] {
      st[s] = stages[s]->Run();
      ended[s] = absl::Now();
    });
  }
  absl::SleepFor(absl::Seconds(1));  // a few steps in
  const absl::Time killed = absl::Now();
  stages[1]->Kill();
  for (auto& t : threads) t.join();
  for (int s : {0, 2}) {
    EXPECT_FALSE(st[s].ok());
    EXPECT_NE(st[s].message().find("stage 1"), std::string::npos) << st[s];
    EXPECT_LT(ended[s] - killed, absl::Seconds(15)) << st[s];
    std::cerr << "stage " << s << " after " << (ended[s] - killed) << ": "
              << st[s] << "\n";
  }
}

// A token id outside the vocabulary is refused before the model reads it,
// naming the file and offset of its example, as a train worker's batch is
// (one batch reader for both).
TEST(PipelineStageTest, ABadExampleIsNamedByFileAndOffset) {
  const std::string path = TempDir() + "/stage-bad-0.tfrecord";
  ASSERT_TRUE(WriteFileWithABadToken(path).ok());
  Cluster c = StartCluster(2, absl::Seconds(5));
  auto stages = StartStages(c, path, 2, 1, PipelineScheduleKind::kGPipe, 8, 1);
  ASSERT_EQ(stages.size(), 2u);
  std::vector<absl::Status> st = RunAll(stages);
  bool named = false;
  for (const absl::Status& s : st) {
    EXPECT_FALSE(s.ok());
    if (s.code() == absl::StatusCode::kInvalidArgument &&
        absl::StrContains(s.message(), "stage-bad-0.tfrecord@") &&
        absl::StrContains(s.message(), "40000")) {
      named = true;
    }
  }
  EXPECT_TRUE(named) << st[0] << " / " << st[1];
}

TEST(PipelineStageTest, BadOptionsAreRefused) {
  const std::string data = WriteData(8);
  Cluster c = StartCluster(2);
  PipelineStageOptions o = StageOpts(c, data, 0, 2, 0, 1,
                                     PipelineScheduleKind::kGPipe, 6, 1);
  EXPECT_FALSE(PipelineStage::Create(o).ok());  // 6 % 4 micro-batches
  o.plan = TestPlan(3, 1, 8, 1);  // shards expect 2 workers
  auto p = PipelineStage::Create(o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("expect 2 workers"), std::string::npos);
  o.plan = TestPlan(2, 1, 8, 1);
  o.stage = 2;
  EXPECT_FALSE(PipelineStage::Create(o).ok());
}

}  // namespace
}  // namespace bertps

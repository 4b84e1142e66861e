// Real gRPC servers over 127.0.0.1 in this process: parameter-server shards
// and train workers.
#include "worker/train_worker.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/io/bert_example.h"
#include "common/io/safetensors.h"
#include "common/io/tfrecord.h"
#include "common/kernels/matmul.h"
#include "common/kernels/threads.h"
#include "common/model/weights.h"
#include "gtest/gtest.h"
#include "tests/bad_example_file.h"
#include "common/ps/checkpoint.h"
#include "server/ps/server.h"
#include "worker/test_util.h"

namespace bertps {
namespace {

using testing_util::SmallConfig;
using testing_util::TempDir;
using testing_util::WriteVaryingPretrainData;

struct Cluster {
  std::vector<std::unique_ptr<ps::ShardServer>> shards;
  std::vector<std::string> addresses;
};

Cluster StartCluster(int num_shards, ps::ShardOptions o) {
  Cluster c;
  for (int s = 0; s < num_shards; ++s) {
    o.shard = s;
    o.num_shards = num_shards;
    auto server = ps::ShardServer::Start(o, "127.0.0.1:0", {});
    EXPECT_TRUE(server.ok()) << server.status();
    c.addresses.push_back((*server)->address());
    c.shards.push_back(std::move(*server));
  }
  for (auto& s : c.shards) s->SetPeers(c.addresses);
  return c;
}

// The tests' job: `workers` x `batch` for `steps` updates under `mode`,
// learning rate 1e-3 after 2 warm-up updates. Shards and workers take its
// plan (PlanOf), as a coordinator's members do.
JobSpec TestJob(int workers, ConsistencyMode mode = BSP, int batch = 4,
                int64_t steps = 10) {
  JobSpec j;
  j.set_task(PRETRAIN);
  j.set_num_workers(workers);
  j.mutable_consistency()->set_mode(mode);
  j.set_batch_size(batch);
  j.set_steps(steps);
  j.mutable_optimizer()->set_learning_rate(1e-3);
  j.mutable_optimizer()->set_warmup_steps(2);
  return j;
}

ps::ShardOptions ShardOpts(const JobSpec& job) {
  ps::ShardOptions o;
  o.config = SmallConfig();
  o.job_plan = PlanOf(job);
  o.optimizer.learning_rate = job.optimizer().learning_rate();
  o.optimizer.warmup_steps = job.optimizer().warmup_steps();
  o.optimizer.total_steps = job.steps();
  o.init_seed = 7;
  o.wait_timeout = absl::Seconds(30);
  return o;
}

ps::ShardOptions ShardOpts(int workers, ConsistencyMode mode = BSP) {
  return ShardOpts(TestJob(workers, mode));
}

TrainWorkerOptions WorkerOpts(const Cluster& c, int worker, const JobSpec& job,
                              const std::string& data) {
  TrainWorkerOptions o;
  o.ps.addresses = c.addresses;
  o.ps.rpc_timeout = absl::Seconds(30);
  o.config = SmallConfig();
  o.plan = PlanOf(job);
  o.worker = worker;
  o.data = {data};
  o.dropout = false;
  return o;
}

TrainWorkerOptions WorkerOpts(const Cluster& c, int worker, int workers,
                              int batch, const std::string& data) {
  return WorkerOpts(c, worker, TestJob(workers, BSP, batch), data);
}

// Runs `workers` workers to completion; returns the final parameters.
std::vector<float> Train(int shards, int workers, int batch,
                         const std::string& data, int backup_workers = 0,
                         bool bf16_push = false, bool shuffle = false,
                         int accumulation = 1, bool dropout = false,
                         kernels::Precision precision =
                             kernels::Precision::kFp32,
                         std::vector<TrainStepReport>* reports = nullptr,
                         bool pull_fp32 = false) {
  JobSpec job = TestJob(workers, BSP, batch);
  job.set_accumulation_steps(accumulation);
  ps::ShardOptions so = ShardOpts(job);
  so.backup_workers = backup_workers;
  Cluster c = StartCluster(shards, so);
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      TrainWorkerOptions o = WorkerOpts(c, w, job, data);
      o.ps.compress_bf16 = bf16_push;
      o.shuffle = shuffle;
      o.dropout = dropout;
      o.precision = precision;
      o.pull_fp32 = pull_fp32;
      if (reports != nullptr && w == 0) {
        o.on_step = [reports](const TrainStepReport& r) {
          reports->push_back(r);
        };
      }
      auto tw = TrainWorker::Create(o);
      ASSERT_TRUE(tw.ok()) << tw.status();
      absl::Status st = (*tw)->Run();
      ASSERT_TRUE(st.ok()) << "worker " << w << ": " << st;
    });
  }
  for (auto& t : threads) t.join();
  PsClientOptions po;
  po.addresses = c.addresses;
  auto client = *PsClient::Connect(po, SmallConfig(), BertTask::kPretrain);
  std::vector<float> params(client->layout().total_size());
  auto v = client->Pull(0, 10, 10, params.data());
  EXPECT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 10);
  return params;
}

void ExpectClose(const std::vector<float>& a, const std::vector<float>& b,
                 double tol) {
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  }
  EXPECT_LE(worst, tol);
}

class Distributed : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    WriteVaryingPretrainData(TempDir() + "/train-0.tfrecord", 40, 1);
    WriteVaryingPretrainData(TempDir() + "/train-1.tfrecord", 40, 2);
  }
  std::string data() const { return TempDir() + "/train-*.tfrecord"; }
};

TEST_F(Distributed, TwoWorkersEqualOneWorkerWithTheCombinedBatch) {
  for (int shards : {1, 3}) {
    std::vector<float> two = Train(shards, 2, 4, data());
    std::vector<float> one = Train(shards, 1, 8, data());
    ExpectClose(two, one, 1e-5);
  }
}

// Gradient accumulation: 2 workers x 2 micro-batches of 2 (the model holds
// activations of 2 examples) train as 2 workers x 4 and as 1 worker x 8, the
// same examples in the same global batches, with dropout on (its keys follow
// the examples) and shuffled data; within float summation order.
TEST_F(Distributed, AccumulatedMicroBatchesEqualTheWholeBatch) {
  std::vector<float> acc = Train(2, 2, 2, data(), 0, false, true, 2, true);
  std::vector<float> whole = Train(2, 2, 4, data(), 0, false, true, 1, true);
  std::vector<float> one = Train(2, 1, 8, data(), 0, false, true, 1, true);
  ExpectClose(acc, whole, 1e-5);
  ExpectClose(acc, one, 1e-5);
  // And it is not the run of batch 2 alone.
  std::vector<float> small = Train(2, 2, 2, data(), 0, false, true, 1, true);
  double diff = 0;
  for (size_t i = 0; i < acc.size(); ++i) {
    diff = std::max(diff, std::fabs(double(acc[i]) - small[i]));
  }
  EXPECT_GT(diff, 1e-3);
}

// A shuffled order is a function of (seed, epoch, files) and of the stream
// position alone: 2 workers x 4 see the global batches 1 worker x 8 sees,
// and the run differs from one in file order.
TEST_F(Distributed, ShuffledTwoWorkersEqualOneWorkerAndDifferFromFileOrder) {
  std::vector<float> two = Train(2, 2, 4, data(), 0, false, /*shuffle=*/true);
  std::vector<float> one = Train(2, 1, 8, data(), 0, false, /*shuffle=*/true);
  ExpectClose(two, one, 1e-5);
  std::vector<float> ordered = Train(2, 1, 8, data());
  double diff = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    diff = std::max(diff, std::fabs(double(one[i]) - ordered[i]));
  }
  EXPECT_GT(diff, 1e-4);
}

// GZIP TFRecord data (the same records, in gzip members) trains exactly as
// the plain files in file order; shuffled (by gzip block), 2 workers still
// see the global batches 1 worker sees.
TEST_F(Distributed, GzipDataTrainsAsThePlainData) {
  const std::string dir = TempDir() + "/gz";
  std::filesystem::create_directories(dir);
  WriteVaryingPretrainData(dir + "/train-0.tfrecord.gz", 40, 1);
  WriteVaryingPretrainData(dir + "/train-1.tfrecord.gz", 40, 2);
  const std::string gz = dir + "/train-*.tfrecord.gz";
  ExpectClose(Train(2, 2, 4, gz), Train(2, 2, 4, data()), 0);
  std::vector<float> two = Train(2, 2, 4, gz, 0, false, /*shuffle=*/true);
  std::vector<float> one = Train(2, 1, 8, gz, 0, false, /*shuffle=*/true);
  ExpectClose(two, one, 1e-5);
}

// A step creates no thread: the client's pulls, their copies, pushes and
// checkpoints run on a lane per shard each, started once (10 steps, with
// the next step's pull overlapping the push, and 2 checkpoints).
TEST_F(Distributed, StepsReuseTheClientsThreads) {
  for (int shards : {1, 3}) {
    JobSpec job = TestJob(1);
    job.mutable_checkpoint()->set_dir(TempDir() + "/lanes-ckpt-" +
                                      std::to_string(shards));
    job.mutable_checkpoint()->set_every_steps(5);
    Cluster c = StartCluster(shards, ShardOpts(job));
    TrainWorkerOptions o = WorkerOpts(c, 0, job, data());
    o.checkpoint_dir = job.checkpoint().dir();
    auto tw = TrainWorker::Create(o);
    ASSERT_TRUE(tw.ok()) << tw.status();
    ASSERT_TRUE((*tw)->Run().ok());
    const int64_t lanes = (*tw)->client()->pull_copy_thread() ? 3 : 2;
    EXPECT_LE((*tw)->client()->threads_started(), lanes * shards) << shards;
    EXPECT_GE((*tw)->client()->threads_started(), 2 * shards) << shards;
  }
}

// bf16 pushes with error feedback (--bf16_push): BF16 range and row chunks,
// batched like F32 ones, are taken by the shards; the run stays close to the
// F32 one (Adam's step is about lr whatever the gradient's rounding) but is
// not the same (the rounding reached the update).
TEST_F(Distributed, Bf16PushesTrackTheF32Run) {
  std::vector<float> f32 = Train(2, 1, 8, data());
  std::vector<float> bf16 = Train(2, 1, 8, data(), 0, /*bf16_push=*/true);
  ExpectClose(bf16, f32, 2e-3);
  EXPECT_NE(bf16, f32);
}

// BF16 products (fp32 everywhere else, fp32 on the wire and the shards):
// every step says it ran bf16 (fp32 where the CPU has no native bf16), and
// the run tracks the fp32 one as closely as bf16 pushes do.
TEST_F(Distributed, Bf16ProductsTrackTheF32Run) {
  std::vector<TrainStepReport> f32_steps, bf16_steps;
  std::vector<float> f32 = Train(2, 1, 8, data(), 0, false, false, 1, false,
                                 kernels::Precision::kFp32, &f32_steps);
  std::vector<float> bf16 = Train(2, 1, 8, data(), 0, false, false, 1, false,
                                  kernels::Precision::kBf16, &bf16_steps);
  const bool native = kernels::Bf16Hardware() != "none";
  std::printf("bf16 hardware: %s\n", kernels::Bf16Hardware().c_str());
  ASSERT_EQ(bf16_steps.size(), 10u);
  ASSERT_EQ(f32_steps.size(), 10u);
  for (size_t i = 0; i < bf16_steps.size(); ++i) {
    EXPECT_EQ(bf16_steps[i].precision, native ? kernels::Precision::kBf16
                                              : kernels::Precision::kFp32);
    EXPECT_EQ(f32_steps[i].precision, kernels::Precision::kFp32);
    // The compute's CPU on the compute threads: some, and no more than the
    // threads could use in its wall time (with forward's waits for the
    // pull, which compute_ms leaves out and pull_ms holds: OpenMP's
    // threads may spin through them).
    EXPECT_GT(f32_steps[i].compute_cpu_ms, 0) << "step " << i;
    EXPECT_LE(f32_steps[i].compute_cpu_ms,
              (f32_steps[i].compute_ms + f32_steps[i].pull_ms) *
                      kernels::NumThreads() + 5)
        << "step " << i;
    EXPECT_NEAR(bf16_steps[i].loss, f32_steps[i].loss,
                1e-2 * std::fabs(f32_steps[i].loss))
        << "step " << i;
  }
  ExpectClose(bf16, f32, 2e-3);
  if (native) EXPECT_NE(bf16, f32);
}

// bf16 pulls (the default of bf16 products): the dense layers' weights come
// rounded to bf16 as the products would round them, so the run is the same
// bit for bit as one pulling fp32, from fewer bytes. Where the CPU has no
// native bf16 the worker computes fp32 and pulls fp32 (the same bytes).
TEST_F(Distributed, Bf16PullsGiveTheSameBitsFromFewerBytes) {
  std::vector<TrainStepReport> half_steps, full_steps;
  std::vector<float> half = Train(2, 2, 4, data(), 0, false, false, 1, false,
                                  kernels::Precision::kBf16, &half_steps);
  std::vector<float> full = Train(2, 2, 4, data(), 0, false, false, 1, false,
                                  kernels::Precision::kBf16, &full_steps,
                                  /*pull_fp32=*/true);
  const bool native = kernels::Bf16Hardware() != "none";
  if (!native) {
    // Then both runs compute and pull fp32: what is checked is that a
    // worker falling back to fp32 products pulls fp32 too.
    std::printf("no native bf16 here: both runs fp32 (the fallback checked)\n");
  }
  const ParamLayout layout = ParamLayout::ForBert(SmallConfig(),
                                                  BertTask::kPretrain);
  int64_t products = 0;
  for (const ParamSpec& t : layout.tensors()) products += t.product_only ? t.size : 0;
  ASSERT_EQ(half_steps.size(), 10u);
  ASSERT_EQ(full_steps.size(), 10u);
  for (size_t i = 0; i < half_steps.size(); ++i) {
    EXPECT_EQ(half_steps[i].loss, full_steps[i].loss) << "step " << i;
    EXPECT_EQ(full_steps[i].pull_bytes, 4 * layout.total_size()) << i;
    EXPECT_EQ(half_steps[i].pull_bytes,
              4 * layout.total_size() - (native ? 2 * products : 0))
        << "step " << i;
  }
  EXPECT_EQ(half, full);
}

// First-2-of-3 BSP: each step completes with the first two pushes; a late
// worker's push is refused and it goes on from the next version. The
// overlapped step must not start its next pull during backward here (the
// step may complete without this worker): every worker runs to the end and
// the shards reach the last version with finite parameters.
TEST_F(Distributed, BackupWorkersRunToCompletion) {
  const std::vector<float> params =
      Train(/*shards=*/2, /*workers=*/3, /*batch=*/2, data(),
            /*backup_workers=*/1);
  for (float x : params) ASSERT_TRUE(std::isfinite(x));
}

TEST_F(Distributed, CheckpointOnTwoShardsRestoresOnThree) {
  Cluster two = StartCluster(2, ShardOpts(TestJob(1, BSP, 4, 3)));
  {
    TrainWorkerOptions o = WorkerOpts(two, 0, TestJob(1, BSP, 4, 3), data());
    auto tw = *TrainWorker::Create(o);
    ASSERT_TRUE(tw->Run().ok());
  }
  PsClientOptions po;
  po.addresses = two.addresses;
  auto c2 = *PsClient::Connect(po, SmallConfig(), BertTask::kPretrain);
  auto manifest = c2->Checkpoint(TempDir() + "/ckpt", 3);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_TRUE(c2->Export(TempDir() + "/from2.safetensors").ok());

  Cluster three = StartCluster(3, ShardOpts(TestJob(1, BSP, 4, 5)));
  po.addresses = three.addresses;
  auto c3 = *PsClient::Connect(po, SmallConfig(), BertTask::kPretrain);
  ASSERT_TRUE(c3->Restore(*manifest).ok());
  ASSERT_TRUE(c3->Export(TempDir() + "/from3.safetensors").ok());
  ASSERT_TRUE(ps::ExportCheckpoint(*manifest, TempDir() + "/fromckpt.safetensors").ok());
  auto a = *io::SafetensorsReader::Open(TempDir() + "/from2.safetensors");
  auto b = *io::SafetensorsReader::Open(TempDir() + "/from3.safetensors");
  auto d = *io::SafetensorsReader::Open(TempDir() + "/fromckpt.safetensors");
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (const auto& t : a.tensors()) {
    EXPECT_EQ(*a.ReadF32(t.name), *b.ReadF32(t.name)) << t.name;
    EXPECT_EQ(*a.ReadF32(t.name), *d.ReadF32(t.name)) << t.name;
  }
  auto stats = c3->Stats();
  ASSERT_TRUE(stats.ok());
  for (const auto& s : *stats) EXPECT_EQ(s.version(), 3);
  // Training continues on three shards from step 3.
  TrainWorkerOptions o = WorkerOpts(three, 0, TestJob(1, BSP, 4, 5), data());
  auto tw = *TrainWorker::Create(o);
  ASSERT_TRUE(tw->Run().ok());
  EXPECT_EQ((*c3->Stats())[0].version(), 5);
}

// ASP and SSP with 2 and 3 workers: `steps` counts updates in all (the
// plan's one step counter), so the shards apply exactly `steps` updates,
// each worker its share of the tickets, and the learning rate of the last
// update is the schedule's at index steps - 1 (warmup and decay end where
// the plan says; the schedule once reached 0 halfway, at N x steps pushes).
// With checkpoints every 2 updates, each is a consistent cut: version k on
// every shard, holding the same k pushes.
TEST_F(Distributed, AspAndSspCountUpdatesAndCheckpointConsistentCuts) {
  for (ConsistencyMode mode : {ASP, SSP}) {
    for (int workers : {2, 3}) {
      const std::string name =
          absl::StrCat(ConsistencyMode_Name(mode), " x ", workers);
      const std::string dir =
          absl::StrCat(TempDir(), "/cuts-", ConsistencyMode_Name(mode), "-",
                       workers);
      constexpr int64_t kSteps = 7;
      JobSpec job = TestJob(workers, mode, 4, kSteps);
      job.mutable_checkpoint()->set_dir(dir);
      job.mutable_checkpoint()->set_every_steps(2);
      ps::ShardOptions so = ShardOpts(job);
      so.staleness = 1;
      Cluster c = StartCluster(2, so);
      std::vector<std::thread> threads;
      std::vector<int64_t> pushed(workers, 0);
      for (int w = 0; w < workers; ++w) {
        threads.emplace_back([&, w] {
          TrainWorkerOptions o = WorkerOpts(c, w, job, data());
          o.checkpoint_dir = dir;
          o.on_step = [&pushed, w](const TrainStepReport&) { ++pushed[w]; };
          auto tw = TrainWorker::Create(o);
          ASSERT_TRUE(tw.ok()) << tw.status();
          absl::Status st = (*tw)->Run();
          ASSERT_TRUE(st.ok()) << name << " worker " << w << ": " << st;
        });
      }
      for (auto& t : threads) t.join();
      PsClientOptions po;
      po.addresses = c.addresses;
      auto client = *PsClient::Connect(po, SmallConfig(), BertTask::kPretrain);
      auto stats = client->Stats();
      ASSERT_TRUE(stats.ok()) << stats.status();
      for (const auto& s : *stats) {
        EXPECT_EQ(s.version(), kSteps) << name;
        EXPECT_EQ(s.pushes_applied(), kSteps) << name;
        EXPECT_DOUBLE_EQ(s.last_learning_rate(),
                         optim::LearningRate(so.optimizer, kSteps - 1))
            << name;
        EXPECT_GT(s.last_learning_rate(), 0) << name;
      }
      // Worker w pushed the tickets j * workers + w below kSteps.
      for (int w = 0; w < workers; ++w) {
        EXPECT_EQ(pushed[w], (kSteps - w + workers - 1) / workers) << name;
      }
      for (int64_t k : {2, 4, 6, 7}) {
        const std::string m = absl::StrCat(dir, "/ckpt-", k, "/manifest.json");
        EXPECT_TRUE(std::ifstream(m).good()) << name << ": no " << m;
        // Restored anywhere, a cut gives every shard version k.
        Cluster r = StartCluster(2, so);
        PsClientOptions ro;
        ro.addresses = r.addresses;
        auto rc = *PsClient::Connect(ro, SmallConfig(), BertTask::kPretrain);
        ASSERT_TRUE(rc->Restore(m).ok()) << name << " " << m;
        auto restored = rc->Stats();
        ASSERT_TRUE(restored.ok()) << restored.status();
        for (const auto& s : *restored) {
          EXPECT_EQ(s.version(), k) << name;
          int64_t clocks = 0;
          for (int64_t cl : s.worker_clock()) clocks += cl;
          EXPECT_EQ(clocks, k) << name;
        }
      }
    }
  }
}

TEST_F(Distributed, WorkerFailsFastOnAMissingShard) {
  Cluster c = StartCluster(2, ShardOpts(1));
  TrainWorkerOptions o = WorkerOpts(c, 0, 1, 4, data());
  o.ps.addresses[1] = "127.0.0.1:1";  // nothing listens there
  o.ps.connect_timeout = absl::Milliseconds(300);
  auto tw = TrainWorker::Create(o);
  ASSERT_FALSE(tw.ok());
  EXPECT_NE(tw.status().message().find("127.0.0.1:1"), std::string::npos)
      << tw.status();
}

// A learning rate of 1e30 is finite, so the job is valid, but the first
// update sends the weights to +-1e30 and the next loss is not finite: the
// worker fails that step with the reason, and the shards apply nothing of
// it (BSP streams the push during backward; ASP pushes once at the end).
TEST_F(Distributed, ANonFiniteLossFailsTheStepAndAppliesNothing) {
  for (ConsistencyMode mode : {BSP, ASP}) {
    JobSpec job = TestJob(1, mode);
    job.mutable_optimizer()->set_learning_rate(1e30);
    job.mutable_optimizer()->set_warmup_steps(0);
    Cluster c = StartCluster(2, ShardOpts(job));
    TrainWorkerOptions o = WorkerOpts(c, 0, job, data());
    auto tw = TrainWorker::Create(o);
    ASSERT_TRUE(tw.ok()) << tw.status();
    absl::Status st = (*tw)->Run();
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
    EXPECT_NE(st.message().find("step 1: the loss of worker 0's batch is not "
                                "finite"),
              std::string::npos)
        << st;
    PsClientOptions po;
    po.addresses = c.addresses;
    auto client = *PsClient::Connect(po, SmallConfig(), BertTask::kPretrain);
    auto stats = client->Stats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    for (const auto& s : *stats) {
      EXPECT_EQ(s.version(), 1) << ConsistencyMode_Name(mode);
      EXPECT_EQ(s.pushes_applied(), 1) << ConsistencyMode_Name(mode);
    }
  }
}

// batch 65536: the worker estimates its model and activations and refuses
// with the figures before allocating (it used to abort with bad_alloc).
TEST_F(Distributed, ABatchThatCannotFitIsRefusedWithTheFigures) {
  Cluster c = StartCluster(1, ShardOpts(1));
  TrainWorkerOptions o = WorkerOpts(c, 0, 1, 65536, data());
  o.memory_limit = MemoryLimit{int64_t{256} << 20, "test limit"};
  auto tw = TrainWorker::Create(o);
  ASSERT_FALSE(tw.ok());
  EXPECT_EQ(tw.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(tw.status().message().find("train worker 0 needs ~"),
            std::string::npos)
      << tw.status();
  EXPECT_NE(tw.status().message().find("activations of batch 65536 x seq 16"),
            std::string::npos)
      << tw.status();
  o.plan = PlanOf(TestJob(1, BSP, 4));
  EXPECT_TRUE(TrainWorker::Create(o).ok());
}

// A token id outside the vocabulary names the file and offset of its example.
TEST_F(Distributed, ABadExampleIsNamedByFileAndOffset) {
  const std::string path = TempDir() + "/bad-0.tfrecord";
  ASSERT_TRUE(WriteFileWithABadToken(path).ok());
  Cluster c = StartCluster(1, ShardOpts(1));
  TrainWorkerOptions o = WorkerOpts(c, 0, 1, 4, path);
  auto tw = TrainWorker::Create(o);
  ASSERT_TRUE(tw.ok()) << tw.status();
  absl::Status st = (*tw)->Run();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("bad-0.tfrecord@"), std::string::npos) << st;
  EXPECT_NE(st.message().find("40000"), std::string::npos) << st;
}

// An export path or checkpoint directory that cannot be written is found
// when worker 0 starts, not after the training.
TEST_F(Distributed, UnwritableOutputsAreFoundAtTheStart) {
  const std::string file = TempDir() + "/a-regular-file";
  { std::ofstream(file) << "x"; }
  Cluster c = StartCluster(1, ShardOpts(1));
  TrainWorkerOptions o = WorkerOpts(c, 0, 1, 4, data());
  o.export_path = file + "/sub/final.safetensors";
  auto tw = TrainWorker::Create(o);
  ASSERT_FALSE(tw.ok());
  EXPECT_NE(tw.status().message().find("export_path " + o.export_path),
            std::string::npos)
      << tw.status();
  o.export_path = TempDir() + "/ok/final.safetensors";
  o.checkpoint_dir = file + "/ckpt";
  tw = TrainWorker::Create(o);
  ASSERT_FALSE(tw.ok());
  EXPECT_NE(tw.status().message().find("checkpoint dir " + o.checkpoint_dir),
            std::string::npos)
      << tw.status();
  o.checkpoint_dir = TempDir() + "/ok-ckpt";
  EXPECT_TRUE(TrainWorker::Create(o).ok());
}

// An export path that is not a .safetensors file is a Hugging Face model
// directory: worker 0 writes config.json, model.safetensors (the trained
// parameters) and the job's vocabulary; a vocabulary that cannot be read is
// found at the start.
TEST_F(Distributed, ExportsAHuggingFaceDirectory) {
  const std::string vocab = TempDir() + "/hf-vocab.txt";
  {
    std::ofstream out(vocab);
    out << "[PAD]\n";
    for (int64_t i = 1; i < SmallConfig().vocab_size; ++i) out << "w" << i << "\n";
  }
  Cluster c = StartCluster(1, ShardOpts(1));
  TrainWorkerOptions o = WorkerOpts(c, 0, 1, 4, data());
  o.export_path = TempDir() + "/hf-model";
  for (const std::string& v : {TempDir() + "/no-such-vocab.txt", data()}) {
    o.export_hf.vocab_path = v == data() ? TempDir() + "/train-0.tfrecord" : v;
    auto bad = TrainWorker::Create(o);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("vocab"), std::string::npos)
        << bad.status();
  }
  o.export_hf.vocab_path = vocab;
  auto tw = TrainWorker::Create(o);
  ASSERT_TRUE(tw.ok()) << tw.status();
  ASSERT_TRUE((*tw)->Run().ok());
  auto config = LoadBertConfig(o.export_path + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->hidden_size, SmallConfig().hidden_size);
  const ParamLayout layout = ParamLayout::ForBert(*config, BertTask::kPretrain);
  std::vector<float> exported(layout.total_size());
  ASSERT_TRUE(LoadBertWeights(o.export_path + "/model.safetensors", layout,
                              AllowMissing::kNone, exported.data())
                  .ok());
  PsClientOptions po;
  po.addresses = c.addresses;
  auto client = *PsClient::Connect(po, SmallConfig(), BertTask::kPretrain);
  std::vector<float> params(layout.total_size());
  ASSERT_TRUE(client->Pull(0, 10, 10, params.data()).ok());
  EXPECT_EQ(exported, params);
  std::ifstream v(o.export_path + "/vocab.txt");
  std::string first;
  std::getline(v, first);
  EXPECT_EQ(first, "[PAD]");
  EXPECT_TRUE(std::ifstream(o.export_path + "/tokenizer_config.json").good());
}

// The shards' parameters at version 10 (the tests' last), and the version
// the pull answered.
std::vector<float> FinalParams(const Cluster& c, int64_t* version) {
  PsClientOptions po;
  po.addresses = c.addresses;
  auto client = *PsClient::Connect(po, SmallConfig(), BertTask::kPretrain);
  std::vector<float> params(client->layout().total_size());
  *version = *client->Pull(0, 10, 10, params.data());
  return params;
}

// Runs a 4-slot BSP job (batch 2, accumulation 2, dropout and shuffling
// on) on one worker per group of `groups`, each computing its group's
// slots; returns the final parameters. `reports`: the reports of the group
// holding slot 0.
std::vector<float> TrainSlots(const std::vector<std::vector<int>>& groups,
                              const std::string& data,
                              std::vector<TrainStepReport>* reports) {
  JobSpec job = TestJob(4, BSP, 2);
  job.set_accumulation_steps(2);
  Cluster c = StartCluster(2, ShardOpts(job));
  std::vector<std::thread> threads;
  for (const std::vector<int>& group : groups) {
    threads.emplace_back([&, group] {
      TrainWorkerOptions o = WorkerOpts(c, group[0], job, data);
      o.also_workers.assign(group.begin() + 1, group.end());
      o.shuffle = true;
      o.dropout = true;
      if (group[0] == 0) {
        o.on_step = [reports](const TrainStepReport& r) {
          reports->push_back(r);
        };
      }
      auto tw = TrainWorker::Create(o);
      ASSERT_TRUE(tw.ok()) << tw.status();
      absl::Status st = (*tw)->Run();
      ASSERT_TRUE(st.ok()) << "worker " << group[0] << ": " << st;
    });
  }
  for (auto& t : threads) t.join();
  int64_t version = 0;
  std::vector<float> params = FinalParams(c, &version);
  EXPECT_EQ(version, 10);
  return params;
}

// A worker computing several slots serially on one model (a train member
// holding more than one slot of an elastic job) pushes exactly what as many
// workers push: 4 slots on 4 workers, on 2 (slots {0, 2} and {3, 1}) and on
// 1 end with the same bits. Each slot is reported with its own batch.
TEST_F(Distributed, SlotsComputedSeriallyOnOneModelGiveTheBitsOfOneWorkerEach) {
  std::vector<TrainStepReport> four_reports, two_reports, one_reports;
  const std::vector<float> four =
      TrainSlots({{0}, {1}, {2}, {3}}, data(), &four_reports);
  const std::vector<float> two =
      TrainSlots({{0, 2}, {3, 1}}, data(), &two_reports);
  const std::vector<float> one = TrainSlots({{0, 1, 2, 3}}, data(),
                                            &one_reports);
  EXPECT_TRUE(four == two) << "2 workers of 2 slots differ from 4 workers";
  EXPECT_TRUE(four == one) << "1 worker of 4 slots differs from 4 workers";
  // One report per slot and step, in slot order, each of its own examples
  // and loss, as the separate workers report them.
  ASSERT_EQ(four_reports.size(), 10u);
  ASSERT_EQ(one_reports.size(), 40u);
  ASSERT_EQ(two_reports.size(), 20u);
  const JobPlan plan = PlanOf([] {
    JobSpec j = TestJob(4, BSP, 2);
    j.set_accumulation_steps(2);
    return j;
  }());
  for (size_t i = 0; i < one_reports.size(); ++i) {
    const TrainStepReport& r = one_reports[i];
    EXPECT_EQ(r.slot, static_cast<int>(i % 4));
    EXPECT_EQ(r.step, static_cast<int64_t>(i / 4));
    EXPECT_EQ(r.first_example, plan.FirstExample(r.slot, r.step));
    EXPECT_EQ(r.examples, 4);
    EXPECT_GT(r.tokens, 0);
    EXPECT_GT(r.compute_ms, 0);
    if (r.slot == 0) {
      EXPECT_EQ(r.loss, four_reports[r.step].loss) << i;
    }
  }
  EXPECT_EQ(two_reports[1].slot, 2);
  EXPECT_EQ(two_reports[1].loss, one_reports[2].loss);
}

// Slots taken back from a worker computing several (a daemon joined an
// elastic job) are given up at its next step boundary through its
// SlotFeed, without starting again: worker A computes slots 0-3; after its
// step 3 it is told to keep 0 and 1, and worker B starts with 2 and 3 at
// the shards' step. A slot may be computed by both for a step (the same
// bits, applied once); the job ends with the bits of 4 workers, every
// (slot, step) is reported, and A reports slots 2 and 3 no later than
// the step after the one it was told in.
TEST_F(Distributed, SlotsGivenUpAtAStepBoundaryKeepTheBits) {
  std::vector<TrainStepReport> four_reports;
  const std::vector<float> four =
      TrainSlots({{0}, {1}, {2}, {3}}, data(), &four_reports);
  JobSpec job = TestJob(4, BSP, 2);
  job.set_accumulation_steps(2);
  Cluster c = StartCluster(2, ShardOpts(job));
  absl::Mutex mu;
  std::vector<TrainStepReport> reports_a, reports_b;
  bool told = false;
  auto feed = std::make_shared<SlotFeed>(std::vector<int>{0, 1, 2, 3});
  std::thread a([&] {
    TrainWorkerOptions o = WorkerOpts(c, 0, job, data());
    o.also_workers = {1, 2, 3};
    o.slot_feed = feed;
    o.shuffle = true;
    o.dropout = true;
    o.on_step = [&](const TrainStepReport& r) {
      absl::MutexLock l(&mu);
      reports_a.push_back(r);
      if (r.step == 3 && r.slot == 3 && !told) {
        feed->Set({0, 1});
        told = true;
      }
    };
    auto tw = TrainWorker::Create(o);
    ASSERT_TRUE(tw.ok()) << tw.status();
    absl::Status st = (*tw)->Run();
    ASSERT_TRUE(st.ok()) << "worker 0: " << st;
  });
  {
    absl::MutexLock l(&mu);
    mu.Await(absl::Condition(&told));
  }
  std::thread b([&] {
    TrainWorkerOptions o = WorkerOpts(c, 2, job, data());
    o.also_workers = {3};
    o.shuffle = true;
    o.dropout = true;
    o.on_step = [&](const TrainStepReport& r) {
      absl::MutexLock l(&mu);
      reports_b.push_back(r);
    };
    auto tw = TrainWorker::Create(o);
    ASSERT_TRUE(tw.ok()) << tw.status();
    absl::Status st = (*tw)->Run();
    ASSERT_TRUE(st.ok()) << "worker 2: " << st;
  });
  a.join();
  b.join();
  int64_t version = 0;
  const std::vector<float> params = FinalParams(c, &version);
  ASSERT_EQ(version, 10);
  EXPECT_TRUE(four == params)
      << "slots handed over at a step boundary changed the bits";
  std::set<std::pair<int, int64_t>> seen;
  int64_t last_a_of_2 = -1;
  for (const TrainStepReport& r : reports_a) {
    seen.insert({r.slot, r.step});
    if (r.slot == 2) last_a_of_2 = std::max(last_a_of_2, r.step);
  }
  for (const TrainStepReport& r : reports_b) {
    EXPECT_TRUE(r.slot == 2 || r.slot == 3) << r.slot;
    seen.insert({r.slot, r.step});
  }
  EXPECT_EQ(seen.size(), 40u);
  // Told after step 3; step 4 was prepared during step 3 (with 4 slots).
  EXPECT_GE(last_a_of_2, 3);
  EXPECT_LE(last_a_of_2, 4);
  ASSERT_FALSE(reports_b.empty());
  EXPECT_LE(reports_b.front().step, last_a_of_2 + 1)
      << "a step without slot 2's push";
}

// Slots handed over by a worker that drains are taken at a step boundary
// through the taker's SlotFeed, without starting again: worker A computes
// slots 0 and 1, worker B slots 2 and 3; after B's step 3, A is told to
// compute all four; B goes on until A reported a step of slots 2 and 3,
// then stops (cancelled, as a drained member's part is). The job ends with
// the bits of 4 workers and every (slot, step) reported.
TEST_F(Distributed, SlotsHandedOverAtAStepBoundaryKeepTheBits) {
  std::vector<TrainStepReport> four_reports;
  const std::vector<float> four =
      TrainSlots({{0}, {1}, {2}, {3}}, data(), &four_reports);
  JobSpec job = TestJob(4, BSP, 2);
  job.set_accumulation_steps(2);
  Cluster c = StartCluster(2, ShardOpts(job));
  absl::Mutex mu;
  std::set<std::pair<int, int64_t>> seen;
  std::set<int> taken;  // slots 2 and 3 as A reported them
  bool told = false;
  int64_t a_first_of_2 = -1;
  auto feed = std::make_shared<SlotFeed>(std::vector<int>{0, 1});
  std::atomic<bool> cancel_b{false};
  std::thread b([&] {
    TrainWorkerOptions o = WorkerOpts(c, 2, job, data());
    o.also_workers = {3};
    o.shuffle = true;
    o.dropout = true;
    o.cancel = &cancel_b;
    o.on_step = [&](const TrainStepReport& r) {
      absl::MutexLock l(&mu);
      seen.insert({r.slot, r.step});
      if (r.step == 3 && r.slot == 3 && !told) {
        feed->Set({0, 1, 2, 3});
        told = true;
      }
    };
    auto tw = TrainWorker::Create(o);
    ASSERT_TRUE(tw.ok()) << tw.status();
    absl::Status st = (*tw)->Run();
    EXPECT_TRUE(st.ok() || absl::IsCancelled(st)) << "worker 2: " << st;
  });
  std::thread a([&] {
    TrainWorkerOptions o = WorkerOpts(c, 0, job, data());
    o.also_workers = {1};
    o.slot_feed = feed;
    o.shuffle = true;
    o.dropout = true;
    o.on_step = [&](const TrainStepReport& r) {
      absl::MutexLock l(&mu);
      seen.insert({r.slot, r.step});
      if (r.slot == 2 && a_first_of_2 < 0) a_first_of_2 = r.step;
      if (r.slot >= 2) taken.insert(r.slot);
    };
    auto tw = TrainWorker::Create(o);
    ASSERT_TRUE(tw.ok()) << tw.status();
    absl::Status st = (*tw)->Run();
    ASSERT_TRUE(st.ok()) << "worker 0: " << st;
  });
  {
    absl::MutexLock l(&mu);
    auto both = [&taken]() { return taken.size() == 2; };
    mu.Await(absl::Condition(&both));
  }
  cancel_b = true;
  b.join();
  a.join();
  int64_t version = 0;
  const std::vector<float> params = FinalParams(c, &version);
  ASSERT_EQ(version, 10);
  EXPECT_TRUE(four == params)
      << "slots handed over at a step boundary changed the bits";
  EXPECT_EQ(seen.size(), 40u);
  // Told after B's step 3: A's step 4 was prepared during its step 3 (and
  // its step 5 may have been, during its step 4, as B's report came).
  EXPECT_GE(a_first_of_2, 4);
  EXPECT_LE(a_first_of_2, 6);
}

// Several slots only where their pushes add up to one update: refused under
// ASP/SSP and with a slot outside the job or named twice.
TEST_F(Distributed, SeveralSlotsAreRefusedWhereTheyCannotBeSerial) {
  JobSpec asp = TestJob(2, ASP);
  Cluster c = StartCluster(1, ShardOpts(asp));
  TrainWorkerOptions o = WorkerOpts(c, 0, asp, data());
  o.also_workers = {1};
  absl::Status st = TrainWorker::Create(o).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("only under BSP"), std::string::npos) << st;
  JobSpec bsp = TestJob(2, BSP);
  Cluster b = StartCluster(1, ShardOpts(bsp));
  for (std::vector<int> bad : {std::vector<int>{2}, std::vector<int>{0},
                               std::vector<int>{1, 1}}) {
    TrainWorkerOptions w = WorkerOpts(b, 0, bsp, data());
    w.also_workers = bad;
    st = TrainWorker::Create(w).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find("outside [0, 2) or named twice"),
              std::string::npos)
        << st;
  }
}

// Simulated compute: no model, a timed wait instead of forward and
// backward, fixed gradients; the pulls, pushes (overlapped, by tensor group)
// and the data's accounting are a real worker's, so 2 workers run the job's
// 10 updates and two runs end with the same parameters.
TEST_F(Distributed, SimulatedComputeRunsTheProtocolWithoutAModel) {
  auto run = [&]() {
    ps::ShardOptions so = ShardOpts(2);
    Cluster c = StartCluster(2, so);
    std::vector<std::thread> threads;
    std::vector<TrainStepReport> last(2);
    for (int w = 0; w < 2; ++w) {
      threads.emplace_back([&, w] {
        TrainWorkerOptions o = WorkerOpts(c, w, 2, 4, data());
        o.simulate_compute_ms = 6;
        o.on_step = [&last, w](const TrainStepReport& r) { last[w] = r; };
        auto tw = TrainWorker::Create(o);
        ASSERT_TRUE(tw.ok()) << tw.status();
        EXPECT_EQ((*tw)->model(), nullptr);
        ASSERT_TRUE((*tw)->Run().ok());
      });
    }
    for (auto& t : threads) t.join();
    for (const TrainStepReport& r : last) {
      EXPECT_EQ(r.step, 9);
      EXPECT_GE(r.version, 9);  // the update may apply after the push ends
      EXPECT_EQ(r.loss, 0);
      EXPECT_GE(r.compute_ms, 4.0);  // the wait, less the parameter waits
    }
    PsClientOptions po;
    po.addresses = c.addresses;
    auto client = *PsClient::Connect(po, SmallConfig(), BertTask::kPretrain);
    std::vector<float> params(client->layout().total_size());
    EXPECT_EQ(*client->Pull(0, 10, 10, params.data()), 10);
    auto stats = client->Stats();
    EXPECT_TRUE(stats.ok());
    return params;
  };
  std::vector<float> a = run(), b = run();
  EXPECT_EQ(a, b);
  // And the fixed gradients moved the parameters from their initial values.
  ps::ShardOptions so = ShardOpts(1);
  Cluster fresh = StartCluster(1, so);
  PsClientOptions po;
  po.addresses = fresh.addresses;
  auto client = *PsClient::Connect(po, SmallConfig(), BertTask::kPretrain);
  std::vector<float> init(client->layout().total_size());
  ASSERT_TRUE(client->Pull(0, 0, 0, init.data()).ok());
  EXPECT_NE(a, init);
}

}  // namespace
}  // namespace bertps

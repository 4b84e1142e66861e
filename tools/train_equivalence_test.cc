// N-worker equivalence where a scale error would show. Under Adam (scale
// invariant) with clipping at 1.0 (always on at BERT's gradient norms), a
// gradient summed twice or halved trains exactly as the right one, so the
// distributed tests there cannot see it. Here: plain SGD (no momentum, no
// weight decay, no clipping; the job's linear decay, no warmup), where the
// update is lr times the gradient itself. 2 workers x batch 4 on the parameter server,
// 1 worker x batch 8, and bert_local train (one process, no parameter
// server) with batch 8 must end with the same parameters, on 1 and 3 shards,
// and the parameters must have moved far more than the tolerance.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/cluster/plan_for.h"
#include "common/io/bert_example.h"
#include "common/io/tfrecord.h"
#include "common/model/params.h"
#include "common/model/weights.h"
#include "gtest/gtest.h"
#include "server/ps/server.h"
#include "tools/bert_local.h"
#include "worker/test_util.h"
#include "worker/train_worker.h"

namespace bertps {
namespace {

using testing_util::SmallConfig;
using testing_util::TempDir;
using testing_util::WriteVaryingPretrainData;

constexpr int kSteps = 10;
constexpr uint64_t kSeed = 7;

optim::OptimizerConfig Sgd() {
  optim::OptimizerConfig o;
  o.kind = optim::OptimizerKind::kSgd;
  o.learning_rate = 0.5;
  o.momentum = 0;
  o.weight_decay = 0;
  o.clip_norm = 0;  // off
  o.warmup_steps = 0;
  o.total_steps = kSteps;  // the job's steps (a job's rate decays over them)
  return o;
}

std::string Data() { return TempDir() + "/eq-*.tfrecord"; }

// Final parameters of `workers` x `batch` on `shards` parameter-server shards.
std::vector<float> TrainOnShards(int shards, int workers, int batch) {
  // One plan for the shards and the workers: the job's.
  JobSpec spec = SpecFor(BSP, workers, Sgd());
  spec.set_batch_size(batch);
  const JobPlan plan = PlanOf(spec);
  ps::ShardOptions so;
  so.config = SmallConfig();
  so.job_plan = plan;
  so.optimizer = Sgd();
  so.init_seed = kSeed;
  so.wait_timeout = absl::Seconds(30);
  std::vector<std::unique_ptr<ps::ShardServer>> servers;
  std::vector<std::string> addresses;
  for (int s = 0; s < shards; ++s) {
    so.shard = s;
    so.num_shards = shards;
    auto server = ps::ShardServer::Start(so, "127.0.0.1:0", {});
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return {};
    addresses.push_back((*server)->address());
    servers.push_back(std::move(*server));
  }
  for (auto& s : servers) s->SetPeers(addresses);
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      TrainWorkerOptions o;
      o.ps.addresses = addresses;
      o.ps.rpc_timeout = absl::Seconds(30);
      o.config = SmallConfig();
      o.plan = plan;
      o.worker = w;
      o.data = {Data()};
      o.dropout = false;
      auto tw = TrainWorker::Create(o);
      ASSERT_TRUE(tw.ok()) << tw.status();
      absl::Status st = (*tw)->Run();
      ASSERT_TRUE(st.ok()) << "worker " << w << ": " << st;
    });
  }
  for (auto& t : threads) t.join();
  PsClientOptions po;
  po.addresses = addresses;
  auto client = *PsClient::Connect(po, SmallConfig(), BertTask::kPretrain);
  std::vector<float> params(client->layout().total_size());
  auto v = client->Pull(0, kSteps, kSteps, params.data());
  EXPECT_TRUE(v.ok()) << v.status();
  return params;
}

// Final parameters of bert_local train, one process, batch 8.
std::vector<float> TrainLocally() {
  LocalOptions o;
  o.config = SmallConfig();
  o.data = {Data()};
  o.batch_size = 8;
  o.steps = kSteps;
  o.seed = kSeed;
  o.dropout = false;
  o.log_every = kSteps;
  o.optimizer = Sgd();
  o.out = TempDir() + "/eq-local.safetensors";
  std::ostringstream log;
  absl::Status st = RunTrain(o, log);
  EXPECT_TRUE(st.ok()) << st;
  const ParamLayout layout = ParamLayout::ForBert(SmallConfig(), BertTask::kPretrain);
  std::vector<float> params(layout.total_size());
  auto r = LoadBertWeights(o.out, layout, AllowMissing::kNone, params.data());
  EXPECT_TRUE(r.ok()) << r.status();
  return params;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  }
  return worst;
}

TEST(TrainEquivalence, SgdTwoWorkersOneWorkerAndOneProcessAgree) {
  WriteVaryingPretrainData(TempDir() + "/eq-0.tfrecord", 40, 1);
  WriteVaryingPretrainData(TempDir() + "/eq-1.tfrecord", 40, 2);
  const ParamLayout layout = ParamLayout::ForBert(SmallConfig(), BertTask::kPretrain);
  std::vector<float> init(layout.total_size());
  InitBertParams(layout, SmallConfig(), kSeed, init.data());
  const std::vector<float> local = TrainLocally();
  const double moved = MaxAbsDiff(local, init);
  constexpr double kTol = 2e-5;
  // A gradient off by a factor of 2 would move the parameters by `moved`
  // more or less; the check below must be able to see that.
  EXPECT_GT(moved, 1000 * kTol) << "the parameters hardly moved";
  for (int shards : {1, 3}) {
    const std::vector<float> one = TrainOnShards(shards, 1, 8);
    const std::vector<float> two = TrainOnShards(shards, 2, 4);
    EXPECT_LE(MaxAbsDiff(one, local), kTol) << shards << " shards, 1 x 8";
    EXPECT_LE(MaxAbsDiff(two, local), kTol) << shards << " shards, 2 x 4";
    EXPECT_LE(MaxAbsDiff(two, one), kTol) << shards << " shards";
    std::printf("%d shards: moved %.3g; |1x8 - local| %.3g, |2x4 - local| %.3g\n",
                shards, moved, MaxAbsDiff(one, local), MaxAbsDiff(two, local));
  }
}

}  // namespace
}  // namespace bertps

// The job plan (common/cluster/job_plan.h) is the only home of steps,
// update tickets, cuts, checkpoints, slots, each worker's share of the data
// and the learning rate of an update. This test runs the members' real code
// over 127.0.0.1 in this process -- parameter-server shards (ShardCore behind
// its gRPC server), TrainWorker, PipelineStage, and then a coordinator with
// shard, train and stage members -- for accumulation 1 and 3, BSP, ASP and
// SSP, 1 to 3 workers and pipelines, and checks everything they did against
// the plan alone:
//   - every worker ran exactly its steps (JobPlan::WorkerSteps), each step's
//     batch at JobPlan::FirstExample, and the shards applied exactly the
//     plan's updates: version `updates`, each worker's clock its steps, the
//     example ledger exactly [0, updates x examples_per_update) once;
//   - the checkpoints written are exactly the versions JobPlan::CheckpointDue
//     names, and each holds exactly the examples of its first k updates
//     (under ASP/SSP a consistent cut: JobPlan::NextCut);
//   - every learning rate the members report (the shards' answer) and the
//     shards' last one are JobPlan::LearningRateAt of their update;
//   - shards restored from a cut hold each worker's JobPlan::StepsBefore, and
//     the job resumed there ends with the same ledger (and, where the order
//     of the pushes is fixed, the same bits) as the uninterrupted run;
//   - pipeline stage (replica r, stage s) pushes as JobPlan::SlotOf(r, s),
//     reads its replica's share, and the coordinator's members and slots
//     agree (a pipeline job and an ASP job with accumulation run through a
//     coordinator).
// A member that derived any of these itself and drifted from the plan
// fails here (see the commit that added this test for the drifts planted).
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/cluster/job_plan.h"
#include "common/cluster/job_spec.h"
#include "common/ps/checkpoint.h"
#include "common/ps/example_ledger.h"
#include "common/ps/ps_client.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/coordinator/service.h"
#include "server/ps/server.h"
#include "server/ps/shard_member.h"
#include "worker/pipeline_stage.h"
#include "worker/stage_member.h"
#include "worker/test_util.h"
#include "worker/train_member.h"
#include "worker/train_worker.h"

namespace bertps {
namespace {

using testing_util::SmallConfig;
using testing_util::TempDir;
using testing_util::WriteVaryingPretrainData;

constexpr int kShards = 2;
// Tickets that reach past a cut on every worker count (1-3 workers).
constexpr int64_t kUpdates = 10;
constexpr int64_t kEvery = 3;  // checkpoints 3, 6, 9 and 10; cuts 3, 6, 9

std::string Data() { return TempDir() + "/pc-*.tfrecord"; }

class PlanConformance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    WriteVaryingPretrainData(TempDir() + "/pc-0.tfrecord", 40, 1);
    WriteVaryingPretrainData(TempDir() + "/pc-1.tfrecord", 40, 2);
  }
};

// A train job of the small model over Data(): `workers` x batch 2 x
// `accumulation`, kUpdates updates, checkpoints every kEvery into `dir`.
JobSpec TrainJob(ConsistencyMode mode, int workers, int accumulation,
                 const std::string& dir) {
  JobSpec j;
  j.set_task(PRETRAIN);
  j.add_data(Data());
  j.set_num_ps_shards(kShards);
  j.set_num_workers(workers);
  j.set_batch_size(2);
  j.set_accumulation_steps(accumulation);
  j.set_steps(kUpdates);
  j.set_seed(7);
  j.mutable_consistency()->set_mode(mode);
  j.mutable_consistency()->set_staleness(1);
  OptimizerSpec* o = j.mutable_optimizer();
  o->set_kind("adam_weight_decay");
  o->set_learning_rate(1e-3);
  o->set_warmup_steps(2);
  o->set_weight_decay(0.01);
  o->set_clip_norm(1.0);
  j.mutable_checkpoint()->set_dir(dir);
  j.mutable_checkpoint()->set_every_steps(kEvery);
  return j;
}

struct Shards {
  std::vector<std::unique_ptr<ps::ShardServer>> servers;
  std::vector<std::string> addresses;
};

// The job's shards as a coordinator installs them (its plan, optimizer).
Shards StartShards(const JobSpec& job) {
  ps::ShardOptions o;
  o.config = SmallConfig();
  o.job_plan = PlanOf(job);
  absl::StatusOr<optim::OptimizerConfig> opt = JobOptimizerConfig(job);
  EXPECT_TRUE(opt.ok()) << opt.status();
  o.optimizer = *opt;
  o.staleness = job.consistency().staleness();
  o.init_seed = job.seed();
  o.wait_timeout = absl::Seconds(10);
  Shards s;
  for (int i = 0; i < job.num_ps_shards(); ++i) {
    o.shard = i;
    o.num_shards = job.num_ps_shards();
    auto server = ps::ShardServer::Start(o, "127.0.0.1:0", {});
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return s;
    s.addresses.push_back((*server)->address());
    s.servers.push_back(std::move(*server));
  }
  for (auto& server : s.servers) server->SetPeers(s.addresses);
  return s;
}

std::unique_ptr<PsClient> Client(const Shards& s) {
  PsClientOptions po;
  po.addresses = s.addresses;
  po.rpc_timeout = absl::Seconds(20);
  auto c = PsClient::Connect(po, SmallConfig(), BertTask::kPretrain);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

// Runs every worker of the job to its end; each worker's reports by step.
std::vector<std::vector<TrainStepReport>> RunWorkers(const JobSpec& job,
                                                     const Shards& s,
                                                     const std::string& dir) {
  const JobPlan plan = PlanOf(job);
  std::vector<std::vector<TrainStepReport>> reports(plan.replicas);
  std::vector<std::thread> threads;
  for (int w = 0; w < plan.replicas; ++w) {
    threads.emplace_back([&, w] {
      TrainWorkerOptions o;
      o.ps.addresses = s.addresses;
      o.ps.rpc_timeout = absl::Seconds(20);
      o.config = SmallConfig();
      o.plan = plan;
      o.worker = w;
      o.data = {Data()};
      o.seed = job.seed();
      o.checkpoint_dir = dir;
      if (w == 0) o.export_path = dir + "/final.safetensors";
      o.on_step = [&reports, w](const TrainStepReport& r) {
        reports[w].push_back(r);
      };
      auto tw = TrainWorker::Create(o);
      ASSERT_TRUE(tw.ok()) << "worker " << w << ": " << tw.status();
      absl::Status st = (*tw)->Run();
      EXPECT_TRUE(st.ok()) << "worker " << w << ": " << st;
    });
  }
  for (auto& t : threads) t.join();
  return reports;
}

// The checkpoint versions written into `dir` (ckpt-<version>/manifest.json).
std::set<int64_t> CheckpointVersions(const std::string& dir) {
  std::set<int64_t> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    int64_t v = 0;
    if (name.rfind("ckpt-", 0) == 0 &&
        absl::SimpleAtoi(name.substr(5), &v) &&
        std::filesystem::exists(e.path() / "manifest.json")) {
      out.insert(v);
    }
  }
  return out;
}

std::set<int64_t> DueVersions(const JobPlan& plan, int64_t after = 0) {
  std::set<int64_t> out;
  for (int64_t v = after + 1; v <= plan.updates; ++v) {
    if (plan.CheckpointDue(v)) out.insert(v);
  }
  return out;
}

// `ledger_text` holds exactly the positions [0, n), each once.
void ExpectLedgerIsPrefix(const std::string& ledger_text, int64_t n,
                          const std::string& what) {
  absl::StatusOr<ps::ExampleLedger> l = ps::ExampleLedger::Parse(ledger_text);
  ASSERT_TRUE(l.ok()) << what << ": " << l.status();
  EXPECT_EQ(l->twice(), 0) << what;
  using R = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(l->ranges(), (n > 0 ? R{{0, n}} : R{}))
      << what << ": ledger " << ledger_text << ", want [0, " << n << ")";
}

// What the shards hold after the job ran to its end.
void ExpectShardsAtTheEnd(const JobPlan& plan, PsClient* client,
                          const std::string& what) {
  auto stats = client->Stats();
  ASSERT_TRUE(stats.ok()) << what << ": " << stats.status();
  for (const StatsResponse& s : *stats) {
    EXPECT_EQ(s.version(), plan.updates) << what;
    ASSERT_EQ(s.worker_clock_size(), plan.pushers) << what;
    for (int w = 0; w < plan.replicas; ++w) {
      EXPECT_EQ(s.worker_clock(w), plan.WorkerSteps(w)) << what << " worker " << w;
    }
    EXPECT_EQ(s.last_learning_rate(),
              static_cast<double>(plan.LearningRateAt(plan.updates - 1)))
        << what;
    ExpectLedgerIsPrefix(s.example_ledger(),
                         plan.updates * plan.examples_per_update, what);
  }
}

// Worker w's reports are its steps [first, WorkerSteps(w)), once each, with
// the plan's examples; BSP rates are the plan's for the step; ASP/SSP rates
// are collected into *rates (each push is one update of shard 0's).
void ExpectReports(const JobPlan& plan, int w,
                   const std::vector<TrainStepReport>& reports, int64_t first,
                   std::multiset<double>* rates, const std::string& what) {
  std::vector<int64_t> steps;
  for (const TrainStepReport& r : reports) {
    steps.push_back(r.step);
    EXPECT_EQ(r.first_example, plan.FirstExample(w, r.step))
        << what << " worker " << w << " step " << r.step;
    EXPECT_EQ(r.examples, plan.examples_per_push) << what;
    if (plan.mode == BSP) {
      EXPECT_EQ(r.learning_rate,
                static_cast<double>(plan.LearningRateAt(r.step)))
          << what << " worker " << w << " step " << r.step;
    } else {
      rates->insert(r.learning_rate);
    }
  }
  std::vector<int64_t> want;
  for (int64_t j = first; j < plan.WorkerSteps(w); ++j) want.push_back(j);
  EXPECT_EQ(steps, want) << what << " worker " << w;
}

// Every checkpoint the plan has due after version `after` was written into
// `dir`, and nothing else (but under BSP a worker 0 started at a due
// version writes that one again); each holds its first k updates' examples.
void ExpectCheckpoints(const JobPlan& plan, const std::string& dir,
                       int64_t after, const std::string& what) {
  std::set<int64_t> got = CheckpointVersions(dir);
  if (plan.mode == BSP && after > 0 && plan.CheckpointDue(after)) {
    got.erase(after);  // worker 0 started at a due version writes it again
  }
  EXPECT_EQ(got, DueVersions(plan, after)) << what;
  for (int64_t v : CheckpointVersions(dir)) {
    absl::StatusOr<ps::Manifest> m = ps::ReadManifest(
        absl::StrCat(dir, "/ckpt-", v, "/manifest.json"));
    ASSERT_TRUE(m.ok()) << what << ": " << m.status();
    EXPECT_EQ(m->version, v) << what;
    ExpectLedgerIsPrefix(m->example_ledger, v * plan.examples_per_update,
                         absl::StrCat(what, " checkpoint ", v));
  }
}

std::vector<float> Parameters(PsClient* client, int64_t version) {
  std::vector<float> p(client->layout().total_size());
  auto v = client->Pull(0, version, /*step=*/0, p.data());  // (SSP: any)
  EXPECT_TRUE(v.ok()) << v.status();
  return p;
}

// Train workers and shards, every mode, 1-3 workers, accumulation 1 and 3:
// a run to the end, then shards restored from the first cut and the job
// resumed there.
TEST_F(PlanConformance, TrainWorkersAndShardsFollowThePlan) {
  for (ConsistencyMode mode : {BSP, ASP, SSP}) {
    for (int workers : {1, 2, 3}) {
      for (int accumulation : {1, 3}) {
        const std::string what = absl::StrCat(
            ConsistencyMode_Name(mode), " x ", workers, " A=", accumulation);
        const std::string dir = absl::StrCat(
            TempDir(), "/pc-ckpt-", ConsistencyMode_Name(mode), "-", workers,
            "-", accumulation);
        std::filesystem::remove_all(dir);
        std::filesystem::remove_all(dir + "-resumed");
        const JobSpec job = TrainJob(mode, workers, accumulation, dir);
        const JobPlan plan = PlanOf(job);
        // The whole job.
        Shards s = StartShards(job);
        ASSERT_EQ(static_cast<int>(s.servers.size()), kShards) << what;
        std::vector<std::vector<TrainStepReport>> reports =
            RunWorkers(job, s, dir);
        std::multiset<double> rates;
        for (int w = 0; w < workers; ++w) {
          ExpectReports(plan, w, reports[w], 0, &rates, what);
        }
        if (mode != BSP) {
          std::multiset<double> want;
          for (int64_t u = 0; u < plan.updates; ++u) {
            want.insert(plan.LearningRateAt(u));
          }
          EXPECT_EQ(rates, want) << what << ": the rates of the updates";
        }
        std::unique_ptr<PsClient> client = Client(s);
        ASSERT_NE(client, nullptr);
        ExpectShardsAtTheEnd(plan, client.get(), what);
        ExpectCheckpoints(plan, dir, 0, what);
        const std::vector<float> whole = Parameters(client.get(), kUpdates);

        // Fresh shards restored from the first cut: each worker's clock is
        // its steps below the cut; the job resumed there ends the same way.
        const int64_t cut = *DueVersions(plan).begin();
        Shards r = StartShards(job);
        std::unique_ptr<PsClient> rc = Client(r);
        ASSERT_NE(rc, nullptr);
        ASSERT_TRUE(rc->Restore(absl::StrCat(dir, "/ckpt-", cut,
                                             "/manifest.json"))
                        .ok())
            << what;
        auto restored = rc->Stats();
        ASSERT_TRUE(restored.ok()) << restored.status();
        for (const StatsResponse& st : *restored) {
          EXPECT_EQ(st.version(), cut) << what;
          for (int w = 0; w < workers; ++w) {
            EXPECT_EQ(st.worker_clock(w), plan.StepsBefore(w, cut))
                << what << " restored, worker " << w;
          }
        }
        const std::string resumed_dir = dir + "-resumed";
        std::filesystem::create_directories(resumed_dir);
        std::vector<std::vector<TrainStepReport>> resumed =
            RunWorkers(job, r, resumed_dir);
        std::multiset<double> unused;
        for (int w = 0; w < workers; ++w) {
          ExpectReports(plan, w, resumed[w], plan.StepsBefore(w, cut),
                        &unused, what + " resumed");
        }
        ExpectShardsAtTheEnd(plan, rc.get(), what + " resumed");
        ExpectCheckpoints(plan, resumed_dir, cut, what + " resumed");
        if (mode == BSP || workers == 1) {
          // The pushes' order is fixed: the same bits.
          EXPECT_TRUE(Parameters(rc.get(), kUpdates) == whole)
              << what << ": the resumed job ends with other parameters";
        }
      }
    }
  }
}

// Pipeline stages: D replicas x 2 stages push as the plan's slots, read
// their replica's share, run the plan's steps and report the shards' rates.
TEST_F(PlanConformance, PipelineStagesFollowThePlan) {
  for (int replicas : {1, 2}) {
    const std::string what = absl::StrCat(replicas, " x 2 stages");
    JobSpec job = TrainJob(BSP, replicas, 1, "");
    job.clear_checkpoint();
    job.set_batch_size(4);
    job.set_steps(5);
    job.mutable_pipeline()->set_stages(2);
    job.mutable_pipeline()->set_micro_batches(2);
    job.mutable_pipeline()->set_schedule("1f1b");
    const JobPlan plan = PlanOf(job);
    Shards s = StartShards(job);
    ASSERT_EQ(static_cast<int>(s.servers.size()), kShards) << what;
    std::vector<std::unique_ptr<PipelineStage>> stages;
    std::map<int, std::vector<StageStepReport>> reports;  // by slot
    absl::Mutex mu;
    for (int r = 0; r < replicas; ++r) {
      std::vector<std::string> peers;
      for (int st = 0; st < plan.stages; ++st) {
        PipelineStageOptions o;
        o.ps.addresses = s.addresses;
        o.ps.rpc_timeout = absl::Seconds(20);
        o.config = SmallConfig();
        o.plan = plan;
        o.stage = st;
        o.replica = r;
        o.micro_batches = 2;
        o.schedule = PipelineScheduleKind::kOneFOneB;
        o.data = {Data()};
        o.seed = job.seed();
        const int slot = plan.SlotOf(r, st);
        o.on_step = [&reports, &mu, slot](const StageStepReport& rep) {
          absl::MutexLock l(&mu);
          reports[slot].push_back(rep);
        };
        auto p = PipelineStage::Create(o);
        ASSERT_TRUE(p.ok()) << what << ": " << p.status();
        // Stage s of replica r pushes as the plan's slot.
        EXPECT_EQ((*p)->ps_worker(), slot) << what;
        peers.push_back((*p)->address());
        stages.push_back(std::move(*p));
      }
      for (int st = 0; st < plan.stages; ++st) {
        stages[stages.size() - plan.stages + st]->SetPeers(peers);
      }
    }
    std::vector<std::thread> threads;
    for (auto& p : stages) {
      threads.emplace_back([&p, &what] {
        absl::Status st = p->Run();
        EXPECT_TRUE(st.ok()) << what << ": " << st;
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_EQ(static_cast<int>(reports.size()), plan.pushers) << what;
    for (const auto& [slot, reps] : reports) {
      std::vector<int64_t> steps;
      for (const StageStepReport& rep : reps) {
        steps.push_back(rep.step);
        EXPECT_EQ(rep.learning_rate,
                  static_cast<double>(plan.LearningRateAt(rep.step)))
            << what << " slot " << slot << " step " << rep.step;
      }
      std::vector<int64_t> want;
      for (int64_t j = 0; j < plan.WorkerSteps(plan.ReplicaOf(slot)); ++j) {
        want.push_back(j);
      }
      EXPECT_EQ(steps, want) << what << " slot " << slot;
    }
    std::unique_ptr<PsClient> client = Client(s);
    ASSERT_NE(client, nullptr);
    auto stats = client->Stats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    for (const StatsResponse& st : *stats) {
      EXPECT_EQ(st.version(), plan.updates) << what;
      EXPECT_EQ(st.last_learning_rate(),
                static_cast<double>(plan.LearningRateAt(plan.updates - 1)))
          << what;
      // Each replica's first stage pushes its examples: the replicas'
      // shares make up every update's global batch.
      ExpectLedgerIsPrefix(st.example_ledger(),
                           plan.updates * plan.examples_per_update, what);
    }
  }
}

// Through a coordinator: its slots, the shard, train and stage members'
// plans (from the assignment's spec) and the checkpoints they write.
class CoordinatedPlan : public PlanConformance {
 protected:
  void SetUp() override {
    std::FILE* f = std::fopen((TempDir() + "/pc-model.json").c_str(), "w");
    const BertConfig c = SmallConfig();
    std::fputs(c.ToJson().c_str(), f);
    std::fclose(f);
    CoordinatorOptions co;
    co.member_timeout = absl::Seconds(5);
    co.heartbeat_ms = 100;
    coordinator_ = std::make_unique<Coordinator>(co);
    jobs_ = std::make_unique<JobServiceImpl>(coordinator_.get());
    cluster_ = std::make_unique<ClusterServiceImpl>(coordinator_.get());
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(jobs_.get());
    b.RegisterService(cluster_.get());
    server_ = b.BuildAndStart();
    address_ = absl::StrCat("127.0.0.1:", port);
    for (int s = 0; s < kShards; ++s) {
      shards_.push_back(*ps::ShardServer::StartIdle("127.0.0.1:0"));
      auto m = std::make_unique<ps::ShardMember>(address_, shards_.back().get());
      threads_.emplace_back([m = m.get()] { (void)m->Run(); });
      shard_members_.push_back(std::move(m));
    }
  }
  void TearDown() override {
    for (auto& m : train_members_) m->Stop();
    for (auto& m : stage_members_) m->Stop();
    for (auto& m : shard_members_) m->Stop();
    for (auto& t : threads_) t.join();
    for (auto& s : shards_) s->Shutdown();
    server_->Shutdown();
  }
  void AddTrainMembers(int n) {
    for (int i = 0; i < n; ++i) {
      auto m = std::make_unique<TrainMember>(address_);
      threads_.emplace_back([m = m.get()] { (void)m->Run(); });
      train_members_.push_back(std::move(m));
    }
  }
  void AddStageMembers(int n) {
    for (int i = 0; i < n; ++i) {
      auto m = StageMember::Create(address_, "127.0.0.1:0", SecurityConfig());
      ASSERT_TRUE(m.ok()) << m.status();
      threads_.emplace_back([m = m->get()] { (void)m->Run(); });
      stage_members_.push_back(std::move(*m));
    }
  }
  JobStatus RunJob(JobSpec spec) {
    spec.set_model(TempDir() + "/pc-model.json");
    auto id = coordinator_->Submit(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return JobStatus();
    const absl::Time end = absl::Now() + absl::Seconds(120);
    while (absl::Now() < end) {
      JobStatus s = *coordinator_->Get(*id);
      if (s.state() == SUCCEEDED || s.state() == FAILED ||
          s.state() == CANCELLED) {
        return s;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    return *coordinator_->Get(*id);
  }
  // The job's examples: every epoch (80 examples) counted exactly.
  static void ExpectEpochs(const JobPlan& plan, const JobStatus& st) {
    int64_t left = plan.updates * plan.examples_per_update;
    for (int64_t e : st.progress().examples_per_epoch()) {
      EXPECT_EQ(e, std::min<int64_t>(left, 80));
      left -= e;
    }
    EXPECT_EQ(left, 0);
    EXPECT_EQ(st.progress().examples_applied_twice(), 0);
  }

  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<JobServiceImpl> jobs_;
  std::unique_ptr<ClusterServiceImpl> cluster_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::vector<std::unique_ptr<ps::ShardServer>> shards_;
  std::vector<std::unique_ptr<ps::ShardMember>> shard_members_;
  std::vector<std::unique_ptr<TrainMember>> train_members_;
  std::vector<std::unique_ptr<StageMember>> stage_members_;
  std::vector<std::thread> threads_;
};

// A 2 x 2 pipeline job: the coordinator gives each replica's stages their
// peers and slots, the stage members take (replica, stage) from the slot,
// and the leader writes exactly the checkpoints due; the loss points carry
// the shards' rates.
TEST_F(CoordinatedPlan, PipelineJob) {
  AddStageMembers(4);
  const std::string dir = TempDir() + "/pc-coord-pipe";
  std::filesystem::remove_all(dir);
  JobSpec job = TrainJob(BSP, 2, 1, dir);
  job.set_batch_size(4);
  job.set_steps(5);
  job.mutable_checkpoint()->set_every_steps(2);
  job.mutable_pipeline()->set_stages(2);
  job.mutable_pipeline()->set_micro_batches(2);
  job.mutable_pipeline()->set_schedule("1f1b");
  const JobPlan plan = PlanOf(job);
  const JobStatus st = RunJob(job);
  ASSERT_EQ(st.state(), SUCCEEDED) << st.reason();
  EXPECT_EQ(st.progress().step(), plan.updates);
  EXPECT_EQ(CheckpointVersions(dir), DueVersions(plan));
  EXPECT_EQ(st.last_checkpoint_version(), plan.updates);
  ExpectEpochs(plan, st);
  ASSERT_EQ(st.history_size(), plan.updates);
  for (const LossPoint& p : st.history()) {
    // Point k is update k - 1's.
    EXPECT_EQ(p.learning_rate(),
              static_cast<double>(plan.LearningRateAt(p.step() - 1)))
        << "point " << p.step();
  }
}

// 2 ASP workers with accumulation 3: the shard members' cuts and train
// worker 0's checkpoints agree, each a consistent cut.
TEST_F(CoordinatedPlan, AspJobWithAccumulation) {
  AddTrainMembers(2);
  const std::string dir = TempDir() + "/pc-coord-asp";
  std::filesystem::remove_all(dir);
  const JobSpec job = TrainJob(ASP, 2, 3, dir);
  const JobPlan plan = PlanOf(job);
  const JobStatus st = RunJob(job);
  ASSERT_EQ(st.state(), SUCCEEDED) << st.reason();
  EXPECT_EQ(CheckpointVersions(dir), DueVersions(plan));
  for (int64_t v : DueVersions(plan)) {
    absl::StatusOr<ps::Manifest> m = ps::ReadManifest(
        absl::StrCat(dir, "/ckpt-", v, "/manifest.json"));
    ASSERT_TRUE(m.ok()) << m.status();
    ExpectLedgerIsPrefix(m->example_ledger, v * plan.examples_per_update,
                         absl::StrCat("checkpoint ", v));
  }
  ExpectEpochs(plan, st);
}

}  // namespace
}  // namespace bertps

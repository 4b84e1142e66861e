#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <thread>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator_test_util.h"
#include "server/coordinator/job_store.h"
#include "common/io/tfrecord.h"
#include <filesystem>
#include <fstream>

namespace bertps {
namespace {

class CoordinatorTest : public ::testing::Test {
 protected:
  CoordinatorTest() : coord_(Options()) {}
  CoordinatorOptions Options() {
    CoordinatorOptions o;
    o.member_timeout = absl::Seconds(10);
    o.now = [this] { return now_; };
    // The fake clock jumps: no stall detection (CoordinatorStall tests it).
    o.stall_threshold = absl::InfiniteDuration();
    o.count_examples = [](const JobSpec&) -> absl::StatusOr<int64_t> {
      return 100;  // examples per epoch
    };
    return o;
  }
  JobSpec Spec(int shards, int workers, int64_t steps) {
    return TrainSpec(shards, workers, steps);
  }
  std::string Join(Role role, const std::string& addr = "") {
    return JoinAs(coord_, role, addr);
  }
  Assignment Beat(const std::string& member, const std::string& job = "",
                  std::vector<StepReport> steps = {}, bool done = false,
                  const std::string& error = "") {
    HeartbeatRequest r;
    r.set_member_id(member);
    r.set_job_id(job);
    for (auto& s : steps) *r.add_steps() = s;
    r.set_done(done);
    r.set_error(error);
    // Members name the incarnation they were assigned (the current one).
    if (!job.empty()) {
      absl::StatusOr<JobStatus> st = coord_.Get(job);
      if (st.ok()) r.set_incarnation(st->incarnation());
    }
    return SignedHeartbeat(coord_, r)->assignment();
  }
  // Shard `member` (index 0) reports the examples its updates consumed.
  void Ledger(const std::string& member, const std::string& job,
              const std::string& ledger, int64_t version) {
    HeartbeatRequest r;
    r.set_member_id(member);
    r.set_job_id(job);
    r.set_incarnation(coord_.Get(job)->incarnation());
    r.set_example_ledger(ledger);
    r.set_applied_version(version);
    ASSERT_TRUE(SignedHeartbeat(coord_, r).ok());
  }
  StepReport Report(int64_t step, int worker, int workers, int batch,
                    double loss) {
    StepReport s;
    s.set_step(step);
    s.set_first_example((step * workers + worker) * batch);
    s.set_examples(batch);
    s.set_loss(loss);
    return s;
  }
  absl::Time now_ = absl::FromUnixSeconds(1000);
  Coordinator coord_;
};


// The TensorBoard log in `dir` (one file) as "1 2 3 START@10 11 ...": the
// steps of its train/loss points, and a START where TensorBoard drops the
// points after it. "" (with a failure) when there is not one file.
std::string TensorBoardSteps(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    files.push_back(e.path().string());
  }
  if (files.size() != 1) {
    ADD_FAILURE() << files.size() << " event files in " << dir;
    return "";
  }
  auto reader = io::TFRecordReader::Open(files[0]);
  if (!reader.ok()) {
    ADD_FAILURE() << reader.status();
    return "";
  }
  std::string record, seen;
  for (;;) {
    auto got = (*reader)->Next(&record);
    if (!got.ok()) {
      ADD_FAILURE() << got.status();
      return seen;
    }
    if (!*got) break;
    tf::Event e;
    if (!e.ParseFromString(record)) {
      ADD_FAILURE() << "an event that does not parse";
      return seen;
    }
    if (e.has_session_log()) {
      absl::StrAppend(&seen, "START@", e.step(), " ");
    } else if (e.has_summary() && e.summary().value(0).tag() == "train/loss") {
      absl::StrAppend(&seen, e.step(), " ");
    }
  }
  return seen;
}

// Two jobs writing to the same checkpoint directory, export file or output
// directory would overwrite each other: refused while the first may write,
// accepted once it ended. Paths compare after "." and "//" are dropped.
// ListJobs pages: 250 jobs come as 100 + 100 + 50, in id order, each page
// naming the next; a byte budget cuts pages shorter, never to zero jobs.
TEST_F(CoordinatorTest, ListJobsPages) {
  for (int i = 0; i < 250; ++i) ASSERT_TRUE(coord_.Submit(Spec(1, 1, 10)).ok());
  std::vector<std::string> ids;
  std::string token;
  int pages = 0;
  do {
    ListJobsResponse page = coord_.ListPage(0, token);
    ++pages;
    for (const JobStatus& j : page.jobs()) ids.push_back(j.id());
    token = page.next_page_token();
    EXPECT_LE(page.jobs_size(), 100);
  } while (!token.empty());
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(ids.size(), 250u);
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  EXPECT_EQ(coord_.ListPage(5000, "").jobs_size(), 250);  // capped at 1000
  ListJobsResponse small = coord_.ListPage(100, "", /*max_bytes=*/1);
  EXPECT_EQ(small.jobs_size(), 1);
  EXPECT_EQ(small.next_page_token(), ids[0]);
}

TEST_F(CoordinatorTest, JobsDoNotShareOutputPaths) {
  JobSpec a = Spec(1, 1, 10);
  a.mutable_checkpoint()->set_dir("/runs/ckpt/");
  a.set_export_path("/runs/final.safetensors");
  auto first = coord_.Submit(a);
  ASSERT_TRUE(first.ok()) << first.status();
  JobSpec b = Spec(1, 1, 10);
  b.mutable_checkpoint()->set_dir("/runs/./ckpt");
  auto second = coord_.Submit(b);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.status().message(),
            "job spec: checkpoint.dir \"/runs/ckpt\" is the checkpoint.dir of "
            "job " + *first + " (PENDING), which writes there; give each job "
            "its own");
  JobSpec c = Spec(1, 1, 10);
  c.set_export_path("/runs//final.safetensors");
  EXPECT_FALSE(coord_.Submit(c).ok());
  JobSpec d = Spec(1, 1, 10);
  d.set_export_path("/runs/other.safetensors");
  d.mutable_checkpoint()->set_dir("/runs/ckpt2");
  EXPECT_TRUE(coord_.Submit(d).ok());
  ASSERT_TRUE(coord_.Cancel(*first).ok());
  EXPECT_TRUE(coord_.Submit(b).ok());
}

// A job says what it waits for, and since when: members to start, then a
// train worker for the slot of one that died (no spare), until one comes.
TEST_F(CoordinatorTest, StatusSaysWhatTheJobWaitsFor) {
  std::string p0 = Join(PS, "127.0.0.1:1");
  std::string w0 = Join(TRAIN);
  auto id = coord_.Submit(Spec(1, 2, 15));
  ASSERT_TRUE(id.ok()) << id.status();
  JobStatus st = *coord_.Get(*id);
  EXPECT_EQ(st.state(), PENDING);
  EXPECT_EQ(st.waiting(),
            "members: 1/1 idle parameter-server daemons, 1/2 idle train "
            "workers");
  EXPECT_EQ(st.waiting_since_ms(), absl::ToUnixMillis(now_));
  now_ += absl::Seconds(3);
  std::string w1 = Join(TRAIN);
  // p0 and w0, silent for 3 s, may be gone (a kill -9 is declared only at
  // the member timeout): the job starts once they are heard again.
  st = *coord_.Get(*id);
  EXPECT_EQ(st.state(), PENDING);
  EXPECT_EQ(st.waiting(),
            "members: 0/1 idle parameter-server daemons, 1/2 idle train "
            "workers; 1 idle parameter-server daemon not heard for 3.0 s "
            "(given work once heard); 1 idle train worker not heard for "
            "3.0 s (given work once heard)");
  Beat(p0), Beat(w0);
  coord_.Tick();
  st = *coord_.Get(*id);
  EXPECT_EQ(st.state(), RUNNING);
  EXPECT_EQ(st.waiting(), "");
  Beat(p0, *id);
  Beat(w0, *id), Beat(w1, *id);
  // Worker 1 dies; nobody takes its slot.
  now_ += absl::Seconds(6);
  Beat(p0, *id), Beat(w0, *id);
  now_ += absl::Seconds(6);
  Beat(p0, *id), Beat(w0, *id);
  coord_.Tick();
  st = *coord_.Get(*id);
  EXPECT_EQ(st.state(), RUNNING);
  EXPECT_EQ(st.waiting(),
            "an idle train worker for slot 1 (the other workers wait at the "
            "next step; a surviving worker takes the slot over if none "
            "registers within 10s)");
  EXPECT_EQ(st.waiting_since_ms(), absl::ToUnixMillis(now_));
  // A new train worker takes the slot: nothing to wait for.
  Join(TRAIN);
  coord_.Tick();
  EXPECT_EQ(coord_.Get(*id)->waiting(), "");
}

// One step counter: the updates the shards apply. BSP: a global batch each
// (2 workers x 10 = 20 of the 100 examples); ASP/SSP: one push each (10).
TEST_F(CoordinatorTest, EpochsBecomeUpdatesOfThePlan) {
  for (ConsistencyMode mode : {BSP, ASP, SSP}) {
    JobSpec s = Spec(1, 2, 0);
    s.set_epochs(2);
    s.mutable_consistency()->set_mode(mode);
    auto id = coord_.Submit(s);
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(coord_.Get(*id)->progress().total_steps(), mode == BSP ? 10 : 20)
        << ConsistencyMode_Name(mode);
    ASSERT_TRUE(coord_.Cancel(*id).ok());
  }
}

// With --data_root/--output_root a job naming a path outside them is
// refused at submit, before anything reads it.
TEST(CoordinatorRoots, PathsOutsideTheRootsAreRefused) {
  CoordinatorOptions o;
  o.roots = {"/srv/data", "/srv/out"};
  bool counted = false;
  o.count_examples = [&](const JobSpec&) -> absl::StatusOr<int64_t> {
    counted = true;
    return 100;
  };
  Coordinator c(o);
  JobSpec s;
  s.set_task(PRETRAIN);
  s.add_data("/srv/data/../../etc/*");
  s.set_steps(10);
  auto id = c.Submit(s);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().message(),
            "job spec: data[0] \"/srv/data/../../etc/*\" (/etc/*) is outside "
            "--data_root /srv/data or --output_root /srv/out");
  EXPECT_FALSE(counted);
  s.set_data(0, "/srv/data/x/*.tfrecord");
  s.set_export_path("/srv/out/final.safetensors");
  EXPECT_TRUE(c.Submit(s).ok());
}

// The store is written outside the coordinator's lock. This store's Put asks
// the coordinator for its jobs from another thread and waits up to 2 s for
// the answer, which cannot come while Put runs under the lock: then it
// records the fact and lets the asking thread finish later (JoinProbes), so
// the check fails rather than hangs, and cannot pass vacuously.
class LockProbingStore : public MemoryJobStore {
 public:
  absl::Status Put(const std::string& id, const JobRecord& r) override {
    if (coordinator != nullptr) {
      auto answered = std::make_shared<std::atomic<bool>>(false);
      std::thread t([c = coordinator, answered] {
        c->List();
        *answered = true;
      });
      for (int i = 0; i < 200 && !*answered; ++i) {
        absl::SleepFor(absl::Milliseconds(10));
      }
      if (*answered) {
        t.join();
      } else {
        under_lock = true;
        probes_.push_back(std::move(t));
      }
    }
    return MemoryJobStore::Put(id, r);
  }
  void JoinProbes() {
    for (std::thread& t : probes_) t.join();
    probes_.clear();
  }
  Coordinator* coordinator = nullptr;
  bool under_lock = false;

 private:
  std::vector<std::thread> probes_;
};

// The data's files as found at submit travel with every trainer's
// assignment (the workers refuse data changed since) and count the epoch.
TEST(CoordinatorData, TheSubmittedFilesGoToTheTrainers) {
  CoordinatorOptions o;
  o.stall_threshold = absl::InfiniteDuration();
  o.describe_data = [](const JobSpec&) -> absl::StatusOr<std::vector<DataFile>> {
    std::vector<DataFile> files(2);
    files[0].set_path("/d/a.tfrecord");
    files[0].set_bytes(1000);
    files[0].set_records(60);
    files[1].set_path("/d/b.tfrecord");
    files[1].set_bytes(700);
    files[1].set_records(40);
    return files;
  };
  Coordinator c(o);
  const auto members = JoinShardAndTrainer(c);
  const std::string& ps = members.first;
  const std::string& w = members.second;
  JobSpec spec;
  spec.set_task(PRETRAIN);
  spec.add_data("/d/*.tfrecord");
  spec.set_batch_size(10);
  spec.set_epochs(2);
  auto id = c.Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  auto st = c.Get(*id);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->spec().steps(), 20);  // 2 epochs of 100 at 10 per update
  ASSERT_EQ(st->data_files_size(), 2);
  BeatIn(c, ps, *id);
  BeatIn(c, ps, *id);
  const Assignment a = BeatIn(c, w, *id);
  ASSERT_EQ(a.data_files_size(), 2);
  EXPECT_EQ(a.data_files(1).path(), "/d/b.tfrecord");
  EXPECT_EQ(a.data_files(1).records(), 40);
  EXPECT_EQ(BeatIn(c, ps, *id).data_files_size(), 0);  // shards do not read data
}

// The loss history keeps at most max_history points, spread evenly over the
// whole run (the stride doubles), so a long job's plot shows all of it.
TEST(CoordinatorHistory, KeepsPointsOverTheWholeRun) {
  CoordinatorOptions o;
  o.stall_threshold = absl::InfiniteDuration();
  o.max_history = 8;
  o.count_examples = [](const JobSpec&) -> absl::StatusOr<int64_t> {
    return 1000;
  };
  Coordinator c(o);
  const auto members = JoinShardAndTrainer(c);
  const std::string& ps = members.first;
  const std::string& w = members.second;
  JobSpec spec;
  spec.set_task(PRETRAIN);
  spec.add_data("d/*.tfrecord");
  spec.set_batch_size(10);
  spec.set_steps(100);
  auto id = c.Submit(spec);
  ASSERT_TRUE(id.ok());
  BeatIn(c, ps, *id, {});
  BeatIn(c, ps, *id, {});
  BeatIn(c, w, *id, {});
  for (int64_t step = 0; step < 100; ++step) {
    StepReport r;
    r.set_step(step);
    r.set_version(step + 1);
    r.set_examples(10);
    r.set_loss(100.0 - step);
    BeatIn(c, w, *id, {r});
  }
  JobStatus st = *c.Get(*id);
  ASSERT_LE(st.history_size(), 8);
  ASSERT_GE(st.history_size(), 4);
  const int64_t stride = st.history_stride();
  EXPECT_EQ(stride, 16);  // 100 steps in at most 8 points
  for (int i = 0; i < st.history_size(); ++i) {
    EXPECT_EQ(st.history(i).step(), stride * (i + 1));
    EXPECT_EQ(st.history(i).loss(), 100.0 - (st.history(i).step() - 1));
  }
  EXPECT_GE(st.history(st.history_size() - 1).step(), 100 - stride);
}

TEST(CoordinatorStore, WritesOutsideTheLockAtMostOnceASecondForProgress) {
  absl::Time now = absl::FromUnixSeconds(1000);
  LockProbingStore store;
  CoordinatorOptions o;
  o.store = &store;
  o.now = [&now] { return now; };
  o.stall_threshold = absl::InfiniteDuration();
  o.count_examples = [](const JobSpec&) -> absl::StatusOr<int64_t> {
    return 100;
  };
  Coordinator c(o);
  store.coordinator = &c;
  const auto members = JoinShardAndTrainer(c);
  const std::string& ps = members.first;
  const std::string& w = members.second;
  JobSpec spec;
  spec.set_task(PRETRAIN);
  spec.add_data("d/*.tfrecord");
  spec.set_batch_size(10);
  spec.set_steps(100);
  auto id = c.Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_GE(store.puts(), 1);  // stored before Submit answered
  BeatIn(c, ps, *id, {});
  BeatIn(c, ps, *id, {});
  BeatIn(c, w, *id, {});
  c.Tick();
  const int64_t before = store.puts();
  // 20 steps in 2 s of ticks every 100 ms: progress is written about twice.
  for (int step = 0; step < 20; ++step) {
    StepReport s;
    s.set_step(step);
    s.set_version(step + 1);
    s.set_examples(10);
    s.set_loss(1.0);
    BeatIn(c, w, *id, {s});
    now += absl::Milliseconds(100);
    c.Tick();
  }
  const int64_t progress_puts = store.puts() - before;
  EXPECT_GE(progress_puts, 1);
  EXPECT_LE(progress_puts, 3);
  // A store that fails refuses the cancel (nothing acknowledged is lost:
  // the job runs on), is retried and is visible in every job's status.
  store.set_fail_puts(true);
  absl::Status refused = c.Cancel(*id);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_EQ(c.Get(*id)->state(), RUNNING);
  c.Tick();
  EXPECT_NE(c.Get(*id)->store_error().find("the disk is full"),
            std::string::npos);
  EXPECT_NE(c.store_error(), "");
  store.set_fail_puts(false);
  ASSERT_TRUE(c.Cancel(*id).ok());
  EXPECT_EQ(c.Get(*id)->state(), CANCELLED);
  c.Tick();
  EXPECT_EQ(c.store_error(), "");
  EXPECT_EQ(c.Get(*id)->store_error(), "");
  auto stored = store.LoadAll();
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].status().state(), CANCELLED);  // the retry landed
  store.JoinProbes();
  EXPECT_FALSE(store.under_lock);
}

// Heartbeats that only report progress run no tick of their own (a tick
// walks every member and job): once every member of a 64-worker job was
// told its part, 10 rounds of heartbeats at one instant run none; the next
// one after kHeartbeatTickEvery runs one. A heartbeat that changes what a
// tick acts on (a worker done) still runs it at once.
TEST_F(CoordinatorTest, RoutineHeartbeatsDoNotTickEveryTime) {
  constexpr int kWorkers = 64;
  std::string p0 = Join(PS, "127.0.0.1:1");
  std::vector<std::string> w;
  for (int i = 0; i < kWorkers; ++i) w.push_back(Join(TRAIN));
  auto id = coord_.Submit(Spec(1, kWorkers, 1000));
  ASSERT_TRUE(id.ok()) << id.status();
  Beat(p0);
  Beat(p0, *id);
  std::vector<int> index(kWorkers);
  for (int i = 0; i < kWorkers; ++i) {
    Assignment a = Beat(w[i]);
    ASSERT_EQ(a.job_id(), *id);
    ASSERT_FALSE(a.wait());
    index[i] = a.index();
  }
  const int64_t told = coord_.ticks();
  for (int round = 0; round < 10; ++round) {
    Beat(p0, *id);
    for (int i = 0; i < kWorkers; ++i) {
      Beat(w[i], *id, {Report(round, index[i], kWorkers, 10, 2.0)});
    }
  }
  EXPECT_EQ(coord_.ticks(), told);
  EXPECT_EQ(coord_.Get(*id)->progress().step(), 10);  // reports still count
  now_ += Coordinator::kHeartbeatTickEvery;
  Beat(w[0], *id);
  EXPECT_EQ(coord_.ticks(), told + 1);
  Beat(w[1], *id);
  EXPECT_EQ(coord_.ticks(), told + 1);
  Beat(w[1], *id, {}, /*done=*/true);
  EXPECT_EQ(coord_.ticks(), told + 2);
}

// Members are told a longer interval as they grow in number, so that the
// coordinator's heartbeats per second stay at most max_heartbeats_per_s
// (default 64) however large the cluster: 500 ms up to 32 members, then
// members / 64 s, never longer than a fifth of the member timeout (2 s).
TEST_F(CoordinatorTest, HeartbeatsPerSecondStayBoundedAsMembersJoin) {
  std::vector<std::string> m;
  auto interval_told = [&](const std::string& member) {
    HeartbeatRequest r;
    r.set_member_id(member);
    absl::StatusOr<HeartbeatResponse> resp = SignedHeartbeat(coord_, r);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->heartbeat_ms() : -1;
  };
  for (int i = 0; i < 32; ++i) {
    m.push_back(i % 4 ? Join(TRAIN) : Join(PS, absl::StrCat("127.0.0.1:", i + 1)));
  }
  EXPECT_EQ(coord_.heartbeat_interval_ms(), 500);
  EXPECT_EQ(interval_told(m[0]), 500);
  m.push_back(Join(TRAIN));
  EXPECT_EQ(coord_.heartbeat_interval_ms(), 516);  // ceil(33 / 64 s)
  while (m.size() < 100) m.push_back(Join(TRAIN));
  EXPECT_EQ(interval_told(m[7]), 1563);
  RegisterRequest r;
  r.set_role(TRAIN);
  absl::StatusOr<RegisterResponse> reg = RegisterMember(coord_, r);
  ASSERT_TRUE(reg.ok());
  EXPECT_EQ(reg->heartbeat_ms(), 1579);  // 101 members
  m.push_back(reg->member_id());
  while (m.size() < 300) m.push_back(Join(TRAIN));
  EXPECT_EQ(interval_told(m[0]), 2000);  // member_timeout / 5
  // Members that fell silent stop counting: 20 heard, the rest dead.
  now_ += absl::Seconds(6);
  for (int i = 0; i < 20; ++i) interval_told(m[i]);
  now_ += absl::Seconds(5);
  coord_.Tick();
  EXPECT_EQ(interval_told(m[0]), 500);
}

// Every member is there but one worker stopped reporting (its pull
// stalled): 30 s after its last report, while the others finished the next
// step, the job says it waits for that slot, naming the member.
TEST_F(CoordinatorTest, StatusNamesAWorkerThatFellBehind) {
  std::string p0 = Join(PS, "127.0.0.1:1");
  std::string w0 = Join(TRAIN), w1 = Join(TRAIN);
  auto id = coord_.Submit(Spec(1, 2, 100));
  ASSERT_TRUE(id.ok()) << id.status();
  Beat(p0), Beat(p0, *id);
  const int i0 = Beat(w0).index(), i1 = Beat(w1).index();
  Beat(w0, *id, {Report(0, i0, 2, 10, 2.0)});
  Beat(w1, *id, {Report(0, i1, 2, 10, 2.0)});
  // Members heartbeat every 5 s; w1 reports nothing more.
  auto wait = [&](int seconds) {
    for (int t = 0; t < seconds; t += 5) {
      now_ += absl::Seconds(5);
      Beat(p0, *id), Beat(w0, *id), Beat(w1, *id);
    }
    coord_.Tick();
  };
  wait(5);
  Beat(w0, *id, {Report(1, i0, 2, 10, 2.0)});
  wait(20);
  EXPECT_EQ(coord_.Get(*id)->waiting(), "");  // 25 s: not yet
  wait(10);
  const std::string waiting = coord_.Get(*id)->waiting();
  EXPECT_NE(waiting.find(absl::StrCat("slot ", i1, " (member ", w1,
                                      ", last step 0) to report step 1")),
            std::string::npos)
      << waiting;
  // It reports: nothing is waited for; nor when it then runs ahead of w0,
  // whose last report is 35 s old (the step it reports is new).
  Beat(w1, *id, {Report(1, i1, 2, 10, 2.0)});
  coord_.Tick();
  EXPECT_EQ(coord_.Get(*id)->waiting(), "");
  Beat(w1, *id, {Report(2, i1, 2, 10, 2.0)});
  coord_.Tick();
  EXPECT_EQ(coord_.Get(*id)->waiting(), "");
}

TEST_F(CoordinatorTest, JobRunsToSuccessWithExactCounts) {
  std::string p0 = Join(PS, "127.0.0.1:1"), p1 = Join(PS, "127.0.0.1:2");
  std::string w0 = Join(TRAIN), w1 = Join(TRAIN);
  auto id = coord_.Submit(Spec(2, 2, 15));  // 15 steps x 20 = 3 epochs of 100
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(coord_.Get(*id)->state(), RUNNING);
  // Workers wait until every shard has the job installed.
  EXPECT_TRUE(Beat(w0).wait());
  Beat(p0), Beat(p1);          // sent the job
  Beat(p0, *id);               // installed
  EXPECT_TRUE(Beat(w0).wait());
  Beat(p1, *id);
  Assignment a0 = Beat(w0), a1 = Beat(w1), s1 = Beat(p1, *id);
  EXPECT_EQ(a0.job_id(), *id);
  EXPECT_EQ(a0.ps_addresses_size(), 2);
  EXPECT_NE(a0.index(), a1.index());
  EXPECT_EQ(s1.index(), 1);
  for (int64_t step = 0; step < 15; ++step) {
    Beat(w0, *id, {Report(step, a0.index(), 2, 10, 2.0)});
    // Worker 1's report is delivered twice (a retried heartbeat).
    Beat(w1, *id, {Report(step, a1.index(), 2, 10, 4.0)});
    Beat(w1, *id, {Report(step, a1.index(), 2, 10, 4.0)});
  }
  JobStatus st = *coord_.Get(*id);
  EXPECT_EQ(st.progress().step(), 15);
  EXPECT_DOUBLE_EQ(st.progress().loss(), 3.0);
  EXPECT_EQ(st.progress().examples(), 0);  // counted by shard 0, not computed
  EXPECT_EQ(st.history_size(), 15);
  Ledger(p0, *id, "0;0-280", 14);
  st = *coord_.Get(*id);
  EXPECT_EQ(st.progress().examples(), 280);
  ASSERT_EQ(st.progress().examples_per_epoch_size(), 3);
  EXPECT_EQ(st.progress().examples_per_epoch(2), 80);
  Beat(w0, *id, {}, /*done=*/true);
  EXPECT_EQ(coord_.Get(*id)->state(), RUNNING);
  Beat(w1, *id, {}, /*done=*/true);
  // Trained, but shard 0 has not counted the last update yet: the job waits.
  EXPECT_EQ(coord_.Get(*id)->state(), RUNNING);
  EXPECT_EQ(coord_.Get(*id)->waiting(),
            "shard 0's count of the examples of the last update");
  Ledger(p0, *id, "0;0-300", 15);
  st = *coord_.Get(*id);
  EXPECT_EQ(st.state(), SUCCEEDED) << st.reason();
  EXPECT_EQ(st.progress().examples(), 300);
  ASSERT_EQ(st.progress().examples_per_epoch_size(), 3);
  for (int64_t e : st.progress().examples_per_epoch()) EXPECT_EQ(e, 100);
  EXPECT_TRUE(Beat(p0, *id).stop());
  // Events: submitted, slots, running, 15 steps, succeeded.
  int64_t seq = 0;
  auto events = coord_.WaitForEvents(*id, &seq, now_);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->front().message(), "submitted");
  EXPECT_EQ(events->back().status().state(), SUCCEEDED);
}

// A BF16 job never mixes precisions silently: a worker whose steps ran in
// F32 (no native bf16 on its CPU) is named once in an event and on its slot.
TEST_F(CoordinatorTest, Bf16JobSaysWhichWorkersComputeInFp32) {
  std::string p = Join(PS, "127.0.0.1:1");
  std::string w0 = Join(TRAIN), w1 = Join(TRAIN);
  JobSpec spec = Spec(1, 2, 10);
  spec.set_precision(BF16);
  spec.mutable_checkpoint()->set_dir("ckpt");
  auto id = *coord_.Submit(spec);
  Beat(p), Beat(p, id);
  Assignment a0 = Beat(w0), a1 = Beat(w1);
  EXPECT_EQ(a0.spec().precision(), BF16);
  StepReport bf = Report(0, a0.index(), 2, 10, 1.0);
  bf.set_precision(BF16);
  bf.set_compute_ms(50);
  StepReport fp = Report(0, a1.index(), 2, 10, 1.0);
  fp.set_precision(F32);
  fp.set_compute_ms(80);
  // A report of a checkpoint alone (a part started again at a checkpoint's
  // step) computed nothing and says no precision: not an F32 member.
  StepReport ckpt;
  ckpt.set_step(0);
  ckpt.set_version(1);
  ckpt.set_checkpoint("ckpt/ckpt-1/manifest.json");
  ckpt.set_checkpoint_version(1);
  Beat(w0, id, {ckpt});
  Beat(w0, id, {bf});
  Beat(w1, id, {fp});
  fp.set_step(1);
  Beat(w1, id, {fp});  // said once
  JobStatus st = *coord_.Get(id);
  ASSERT_EQ(st.slots_size(), 2);
  EXPECT_EQ(st.slots(a0.index()).precision(), DTYPE_UNSPECIFIED);
  EXPECT_EQ(st.slots(a1.index()).precision(), F32);
  int64_t seq = 0;
  auto events = coord_.WaitForEvents(id, &seq, now_);
  ASSERT_TRUE(events.ok());
  int said = 0;
  for (const JobEvent& e : *events) {
    if (e.message().find("computes in F32, not BF16") != std::string::npos) {
      ++said;
      EXPECT_NE(e.message().find(w1), std::string::npos) << e.message();
    }
  }
  EXPECT_EQ(said, 1);
}

TEST_F(CoordinatorTest, DeadWorkersSlotGoesToAnotherWorker) {
  std::string p = Join(PS, "127.0.0.1:1");
  std::string w0 = Join(TRAIN), w1 = Join(TRAIN);
  auto id = *coord_.Submit(Spec(1, 2, 10));
  Beat(p), Beat(p, id);  // the shard installs the job
  Assignment a0 = Beat(w0), a1 = Beat(w1);
  Beat(w0, id, {Report(0, a0.index(), 2, 10, 1.0)});
  Beat(w1, id, {Report(0, a1.index(), 2, 10, 1.0)});
  // w1 goes silent; w0 and the shard keep beating.
  for (int i = 0; i < 2; ++i) {
    now_ += absl::Seconds(6);
    Beat(p, id);
    Beat(w0, id);
  }
  EXPECT_EQ(coord_.Get(id)->state(), RUNNING);
  std::string spare = Join(TRAIN);
  Assignment as = Beat(spare);
  EXPECT_EQ(as.job_id(), id);
  EXPECT_EQ(as.index(), a1.index());  // the dead worker's slot
  // The dead worker comes back: it is told to stop.
  EXPECT_TRUE(Beat(w1, id).stop());
  // The replacement redoes step 1 from the same data; counted once.
  Beat(spare, id, {Report(1, as.index(), 2, 10, 1.0)});
  Beat(w0, id, {Report(1, a0.index(), 2, 10, 1.0)});
  Ledger(p, id, "0;0-40", 2);
  EXPECT_EQ(coord_.Get(id)->progress().examples(), 40);
}

// No idle train daemon: after slot_takeover_after (the member timeout by
// default) a surviving worker computes the lost slot as well. Its reports
// and "done" for that slot count; status says who holds each slot; the next
// train daemon to register takes the slot back, and the survivor is told to
// stop that part.
// An elastic job (min_workers 2 of 4 slots) starts on 2 train daemons,
// each computing 2 slots; a daemon that registers takes a slot from a member
// holding two; a lost member's slots go to the others at once (no takeover
// delay).
TEST_F(CoordinatorTest, AnElasticJobRunsOnFewerDaemonsThanSlots) {
  std::string p = Join(PS, "127.0.0.1:1");
  std::string w0 = Join(TRAIN);
  JobSpec spec = Spec(1, 4, 20);
  spec.set_min_workers(2);
  auto id = *coord_.Submit(spec);
  Beat(p), Beat(p, id);
  EXPECT_EQ(coord_.Get(id)->state(), PENDING);  // 1 of min_workers 2
  EXPECT_NE(coord_.Get(id)->waiting().find("1/2 idle train workers"),
            std::string::npos)
      << coord_.Get(id)->waiting();
  std::string w1 = Join(TRAIN);
  Beat(p);
  ASSERT_EQ(coord_.Get(id)->state(), RUNNING);
  Beat(p, id);
  Assignment a0 = Beat(w0), a1 = Beat(w1);
  EXPECT_EQ(a0.also_indices_size() + a1.also_indices_size(), 2);
  EXPECT_EQ(a0.also_indices_size(), 1);  // spread evenly
  JobStatus st = *coord_.Get(id);
  for (const SlotHolder& h : st.slots()) EXPECT_FALSE(h.member().empty());
  EXPECT_EQ(st.waiting(), "");
  // A third daemon takes one of the shared slots.
  std::string w2 = Join(TRAIN);
  Beat(p, id);
  Assignment a2 = Beat(w2);
  EXPECT_EQ(a2.job_id(), id);
  EXPECT_EQ(Beat(w0, id).also_indices_size() + Beat(w1, id).also_indices_size(),
            1);
  // w2 leaves: its slot goes to the member with the fewest at once.
  HeartbeatRequest leave;
  leave.set_member_id(w2);
  leave.set_job_id(id);
  leave.set_leaving(true);
  ASSERT_TRUE(SignedHeartbeat(coord_, leave).ok());
  st = *coord_.Get(id);
  for (const SlotHolder& h : st.slots()) {
    EXPECT_TRUE(h.member() == w0 || h.member() == w1) << h.member();
  }
  EXPECT_EQ(st.restarts(), 0);
  // w0 is drained, asked again with no error: on its next heartbeat its
  // slots are handed to w1, which takes them at a step boundary; w0 is told
  // to leave once w1 reported a step of each. An unknown member: NOT_FOUND.
  EXPECT_EQ(coord_.Drain("m-none").status().code(),
            absl::StatusCode::kNotFound);
  absl::StatusOr<DrainMemberResponse> d = coord_.Drain(w0);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->job_id(), id);
  EXPECT_FALSE(d->already());
  EXPECT_TRUE(coord_.Drain(w0)->already());
  Assignment handing = Beat(w0, id);
  EXPECT_FALSE(handing.drain()) << "told to leave before its slots are taken";
  EXPECT_EQ(handing.index(), 0);  // it still computes them
  Assignment taker = Beat(w1, id);
  EXPECT_FALSE(taker.drain());
  // Its slot besides slot 0 is handed; slot 0 (the checkpoints' writer) is
  // freed when it leaves.
  ASSERT_EQ(taker.handed_indices_size(), 1);
  const int k = taker.handed_indices(0);
  EXPECT_NE(k, 0);
  StepReport r = Report(3, k, 4, 10, 2.0);
  r.set_slot(k);
  EXPECT_FALSE(Beat(w0, id).drain()) << "its slot is not taken yet";
  EXPECT_EQ(Beat(w1, id, {r}).handed_indices_size(), 0);
  EXPECT_TRUE(Beat(w0, id).drain());
  leave.set_member_id(w0);
  ASSERT_TRUE(SignedHeartbeat(coord_, leave).ok());
  st = *coord_.Get(id);
  for (const SlotHolder& h : st.slots()) EXPECT_EQ(h.member(), w1);
  EXPECT_EQ(st.restarts(), 0);
  // Gone, and asked again: answered as before.
  d = coord_.Drain(w0);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->already());
  EXPECT_EQ(d->job_id(), id);
}

// A daemon that joins an elastic job takes a slot from the member holding
// the most (ties: the lowest own slot), its highest slot: 6 slots on 2
// daemons ({0, 2, 4} and {1, 3, 5}); the third takes 4, the fourth 5 (from
// the one now holding three), the fifth 2.
TEST_F(CoordinatorTest, AJoiningDaemonTakesFromTheMemberHoldingTheMost) {
  std::string p = Join(PS, "127.0.0.1:1");
  std::string w0 = Join(TRAIN), w1 = Join(TRAIN);
  JobSpec spec = Spec(1, 6, 20);
  spec.set_min_workers(2);
  auto id = *coord_.Submit(spec);
  Beat(p), Beat(p, id);
  ASSERT_EQ(coord_.Get(id)->state(), RUNNING);
  Assignment a0 = Beat(w0), a1 = Beat(w1);
  ASSERT_EQ(a0.index(), 0);
  ASSERT_EQ(a0.also_indices_size(), 2);
  ASSERT_EQ(a1.also_indices_size(), 2);
  for (int want : {4, 5, 2}) {
    std::string w = Join(TRAIN);
    Beat(p, id);
    Assignment a = Beat(w);
    EXPECT_EQ(a.job_id(), id);
    EXPECT_EQ(a.index(), want);
    EXPECT_EQ(a.also_indices_size(), 0);
  }
  const JobStatus st = *coord_.Get(id);
  for (const SlotHolder& h : st.slots()) EXPECT_FALSE(h.member().empty());
  EXPECT_EQ(Beat(w0, id).also_indices_size(), 0);
  EXPECT_EQ(Beat(w1, id).also_indices_size(), 1);
}

// A train member that drains (its heartbeat says so, as on SIGTERM) and is
// killed before its slots were taken: the member they were handed to is
// told they are no longer handed (its part starts again at the shards'
// step); the job never restarts. A member of an ASP job (no serial slots)
// is told to leave at once.
TEST_F(CoordinatorTest, AHandOffEndsWhenTheDrainedMemberIsLost) {
  // ASP: no hand-off, told to leave at once.
  std::string q = Join(PS, "127.0.0.1:2");
  std::string v0 = Join(TRAIN), v1 = Join(TRAIN);
  JobSpec asp = Spec(1, 2, 20);
  asp.mutable_consistency()->set_mode(ASP);
  asp.set_min_workers(1);
  auto aid = *coord_.Submit(asp);
  for (int i = 0; i < 3; ++i) Beat(q), Beat(q, aid), Beat(v0), Beat(v1);
  ASSERT_EQ(coord_.Get(aid)->state(), RUNNING) << coord_.Get(aid)->waiting();
  HeartbeatRequest r;
  r.set_draining(true);
  r.set_member_id(v0);
  r.set_job_id(aid);
  r.set_incarnation(coord_.Get(aid)->incarnation());
  Assignment told = SignedHeartbeat(coord_, r)->assignment();
  EXPECT_TRUE(told.drain()) << told.DebugString();

  std::string p = Join(PS, "127.0.0.1:1");
  std::string w0 = Join(TRAIN), w1 = Join(TRAIN);
  JobSpec spec = Spec(1, 2, 20);
  spec.set_min_workers(1);
  auto id = *coord_.Submit(spec);
  Beat(p), Beat(p, id);
  ASSERT_EQ(coord_.Get(id)->state(), RUNNING);
  Assignment a0 = Beat(w0, id), a1 = Beat(w1, id);
  const std::string& drained = a0.index() == 1 ? w0 : w1;
  const std::string& taker = a0.index() == 1 ? w1 : w0;
  r.set_member_id(drained);
  r.set_job_id(id);
  r.set_incarnation(coord_.Get(id)->incarnation());
  r.set_draining(true);
  EXPECT_FALSE(SignedHeartbeat(coord_, r)->assignment().drain());
  Assignment t = Beat(taker, id);
  ASSERT_EQ(t.handed_indices_size(), 1);
  EXPECT_EQ(t.handed_indices(0), 1);
  EXPECT_NE(JobEventsText(coord_, id).find("worker 1 is handed from member " +
                                           drained + " (draining)"),
            std::string::npos)
      << JobEventsText(coord_, id);
  for (int i = 0; i < 4; ++i) {  // the drained member is lost
    now_ += absl::Seconds(4);
    Beat(p, id);
    t = Beat(taker, id);
  }
  EXPECT_EQ(t.also_indices_size(), 1);
  EXPECT_EQ(t.handed_indices_size(), 0);
  EXPECT_NE(JobEventsText(coord_, id).find("left before member " + taker +
                                           " computed worker 1"),
            std::string::npos)
      << JobEventsText(coord_, id);
  EXPECT_EQ(coord_.Get(id)->restarts(), 0);

}

TEST_F(CoordinatorTest, SurvivorTakesOverALostSlotUntilADaemonComes) {
  std::string p = Join(PS, "127.0.0.1:1");
  std::string w0 = Join(TRAIN), w1 = Join(TRAIN);
  auto id = *coord_.Submit(Spec(1, 2, 4));
  Beat(p), Beat(p, id);
  Assignment a0 = Beat(w0), a1 = Beat(w1);
  ASSERT_EQ(a0.index(), 0);
  EXPECT_EQ(a0.also_indices_size(), 0);
  Beat(w0, id, {Report(0, 0, 2, 10, 1.0)});
  Beat(w1, id, {Report(0, 1, 2, 10, 3.0)});
  // w1 goes silent: dead after 10 s, then its slot waits 10 s for a daemon.
  for (int i = 0; i < 2; ++i) {
    now_ += absl::Seconds(6);
    Beat(p, id), Beat(w0, id);
  }
  JobStatus st = *coord_.Get(id);
  ASSERT_EQ(st.slots_size(), 2);
  EXPECT_EQ(st.slots(1).member(), "");
  EXPECT_NE(st.waiting().find("slot 1"), std::string::npos) << st.waiting();
  EXPECT_EQ(Beat(w0, id).also_indices_size(), 0);  // not yet
  now_ += absl::Seconds(10);
  Beat(p, id);
  Assignment both = Beat(w0, id);
  EXPECT_EQ(both.index(), 0);
  ASSERT_EQ(both.also_indices_size(), 1);
  EXPECT_EQ(both.also_indices(0), 1);
  st = *coord_.Get(id);
  EXPECT_EQ(st.waiting(), "");
  EXPECT_EQ(st.slots(1).member(), w0);
  EXPECT_TRUE(st.slots(1).shared());
  EXPECT_EQ(st.slots(1).own_slot(), 0);
  EXPECT_EQ(st.slots(1).since_ms(), absl::ToUnixMillis(now_));
  EXPECT_FALSE(st.slots(0).shared());
  // w0 reports both slots' step 1: the mean loss of both counts.
  StepReport r0 = Report(1, 0, 2, 10, 2.0), r1 = Report(1, 1, 2, 10, 4.0);
  r1.set_slot(1);
  StepReport stray = Report(1, 0, 2, 10, 100.0);
  stray.set_slot(5);  // a slot w0 does not hold: ignored
  Beat(w0, id, {r0, r1, stray});
  st = *coord_.Get(id);
  EXPECT_EQ(st.progress().step(), 2);
  EXPECT_DOUBLE_EQ(st.progress().loss(), 3.0);
  // A new daemon takes slot 1 back; w0 keeps only its own.
  std::string w2 = Join(TRAIN);
  Beat(p, id);
  Assignment back = Beat(w2);
  EXPECT_EQ(back.job_id(), id);
  EXPECT_EQ(back.index(), 1);
  EXPECT_EQ(Beat(w0, id).also_indices_size(), 0);
  st = *coord_.Get(id);
  EXPECT_EQ(st.slots(1).member(), w2);
  EXPECT_FALSE(st.slots(1).shared());
  // w0's late report for slot 1 no longer counts; w2's does.
  StepReport late = Report(2, 1, 2, 10, 100.0);
  late.set_slot(1);
  Beat(w0, id, {Report(2, 0, 2, 10, 2.0), late});
  Beat(w2, id, {Report(2, 1, 2, 10, 4.0)});
  EXPECT_DOUBLE_EQ(coord_.Get(id)->progress().loss(), 3.0);
  // Taken over again when w2 dies; "done" of both slots through done_slots.
  for (int i = 0; i < 4; ++i) {
    now_ += absl::Seconds(6);
    Beat(p, id), Beat(w0, id);
  }
  ASSERT_EQ(Beat(w0, id).also_indices_size(), 1);
  HeartbeatRequest done;
  done.set_member_id(w0);
  done.set_job_id(id);
  done.set_incarnation(coord_.Get(id)->incarnation());
  done.add_done_slots(1);
  ASSERT_TRUE(SignedHeartbeat(coord_, done).ok());
  // Slot 1 is done, slot 0 not yet: training is not over.
  EXPECT_EQ(coord_.Get(id)->waiting(), "");
  done.set_done(true);
  ASSERT_TRUE(SignedHeartbeat(coord_, done).ok());
  EXPECT_EQ(coord_.Get(id)->waiting(),
            "shard 0's count of the examples of the last update");
  std::string events;
  int64_t seq = 0;
  auto all = coord_.WaitForEvents(id, &seq, now_);
  ASSERT_TRUE(all.ok());
  for (const JobEvent& e : *all) {
    absl::StrAppend(&events, e.message(), "\n");
  }
  EXPECT_NE(events.find("worker 1 is taken over by member " + w0 +
                        " (worker 0): no idle train daemon registered within "
                        "10s; it computes both slots, slower, until one does"),
            std::string::npos)
      << events;
  EXPECT_NE(events.find("worker 1 is member " + w2 + " (taken back from member " +
                        w0 + ", worker 0)"),
            std::string::npos)
      << events;
}

// checkpoint.keep: after each new checkpoint the coordinator removes all but
// the newest `keep` in the job's checkpoint directory; a checkpoint being
// written (no manifest yet) and newer ones stay.
TEST_F(CoordinatorTest, CheckpointKeepRemovesTheOldest) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::path(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") /
      "keep-ckpt";
  fs::remove_all(dir);
  auto make = [&](int v, bool manifest) {
    fs::create_directories(dir / absl::StrCat("ckpt-", v));
    std::FILE* f = std::fopen(
        (dir / absl::StrCat("ckpt-", v) /
         (manifest ? "manifest.json" : "shard-0-of-1.safetensors"))
            .c_str(),
        "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  };
  std::string p = Join(PS, "127.0.0.1:1"), w = Join(TRAIN);
  JobSpec spec = Spec(1, 1, 50);
  spec.mutable_checkpoint()->set_dir(dir.string());
  spec.mutable_checkpoint()->set_every_steps(10);
  spec.mutable_checkpoint()->set_keep(2);
  auto id = *coord_.Submit(spec);
  Beat(p), Beat(p, id);
  Beat(w);
  for (int step = 0; step < 40; ++step) {
    StepReport r = Report(step, 0, 1, 10, 1.0);
    if ((step + 1) % 10 == 0) {
      make(step + 1, true);
      r.set_checkpoint((dir / absl::StrCat("ckpt-", step + 1) / "manifest.json")
                           .string());
    }
    Beat(w, id, {r});
    coord_.Tick();
  }
  make(50, false);  // being written
  auto exists = [&](int v) { return fs::exists(dir / absl::StrCat("ckpt-", v)); };
  EXPECT_FALSE(exists(10));
  EXPECT_FALSE(exists(20));
  EXPECT_TRUE(exists(30));
  EXPECT_TRUE(exists(40));
  EXPECT_TRUE(exists(50));
  std::string events;
  int64_t seq = 0;
  auto all = coord_.WaitForEvents(id, &seq, now_);
  ASSERT_TRUE(all.ok());
  for (const JobEvent& e : *all) absl::StrAppend(&events, e.message(), "\n");
  EXPECT_NE(events.find("removed the checkpoint of step 20 (checkpoint.keep 2)"),
            std::string::npos)
      << events;
}

// A train member that could not reach the shards says so on its heartbeat:
// the coordinator probes every shard of the job at once (at most once a
// second per job); one that fails is lost now (the job restarts), not after
// member_timeout; one that answers stays.
TEST(CoordinatorProbe, AnUnreachableShardThatFailsAProbeIsLostAtOnce) {
  std::vector<std::string> probed;
  ClockedCoordinator cc([&probed](CoordinatorOptions& o) {
    o.member_timeout = absl::Seconds(60);
    o.probe = [&probed](const std::string& address) {
      probed.push_back(address);
      return address == "127.0.0.1:2"
                 ? absl::UnavailableError("connection refused")
                 : absl::OkStatus();
    };
  });
  Coordinator& coord = *cc.c;
  auto beat = [&cc](const std::string& m, const std::string& job,
                    const std::string& unreachable) {
    return cc.Beat(m, job, unreachable);
  };
  std::string p0 = cc.Join(PS, "127.0.0.1:1"), p1 = cc.Join(PS, "127.0.0.1:2");
  std::string w = cc.Join(TRAIN);
  const std::string id = *coord.Submit(TrainSpec(2, 1, 10));
  beat(p0, "", ""), beat(p1, "", ""), beat(p0, id, ""), beat(p1, id, "");
  beat(w, "", "");
  EXPECT_EQ(coord.Get(id)->restarts(), 0);
  beat(w, id, "pull from 127.0.0.1:2: Socket closed");
  coord.Tick();
  EXPECT_EQ(probed, (std::vector<std::string>{"127.0.0.1:1", "127.0.0.1:2"}));
  JobStatus st = *coord.Get(id);
  EXPECT_EQ(st.restarts(), 1);
  int64_t seq = 0;
  auto events = coord.WaitForEvents(id, &seq, cc.now);
  ASSERT_TRUE(events.ok());
  std::string all;
  for (const JobEvent& e : *events) absl::StrAppend(&all, e.message(), "\n");
  EXPECT_NE(all.find("restart 1 of 10: parameter-server shard 1 (member " + p1 +
                     " at 127.0.0.1:2) did not answer a probe (connection "
                     "refused) after member " + w + " could not reach the "
                     "shards (pull from 127.0.0.1:2: Socket closed)"),
            std::string::npos)
      << all;
  // Another report within the second: no new round of probes.
  probed.clear();
  beat(w, id, "again");
  coord.Tick();
  EXPECT_TRUE(probed.empty());
}

// A probe that times out is no verdict on a member that heartbeats (a loaded
// host answers late); once the member is silent for 3 intervals it is.
TEST(CoordinatorProbe, ALateProbeIsNoVerdictOnAMemberThatHeartbeats) {
  int probes = 0;
  ClockedCoordinator cc([&probes](CoordinatorOptions& o) {
    o.member_timeout = absl::Seconds(60);
    o.probe = [&probes](const std::string& address) {
      ++probes;
      return address == "127.0.0.1:2"
                 ? absl::DeadlineExceededError("deadline exceeded")
                 : absl::OkStatus();
    };
  });
  Coordinator& coord = *cc.c;
  std::string p0 = cc.Join(PS, "127.0.0.1:1"), p1 = cc.Join(PS, "127.0.0.1:2");
  std::string w = cc.Join(TRAIN);
  const std::string id = *coord.Submit(TrainSpec(2, 1, 10));
  cc.Beat(p0, "", ""), cc.Beat(p1, "", ""), cc.Beat(p0, id, ""), cc.Beat(p1, id, "");
  cc.Beat(w, "", "");
  cc.Beat(w, id, "pull from 127.0.0.1:2: Deadline Exceeded");
  coord.Tick();
  EXPECT_EQ(probes, 2);
  EXPECT_EQ(coord.Get(id)->restarts(), 0);  // p1 heartbeat just now
  // The report is in the job's events all the same.
  int64_t seq = 0;
  auto events = coord.WaitForEvents(id, &seq, cc.now);
  ASSERT_TRUE(events.ok());
  std::string all;
  for (const JobEvent& e : *events) absl::StrAppend(&all, e.message(), "\n");
  EXPECT_NE(all.find("member " + w + " could not reach the shards (pull from "
                     "127.0.0.1:2: Deadline Exceeded): probing them"),
            std::string::npos)
      << all;
  // p1 falls silent: 1.5 s (3 x 500 ms) later a late probe is a verdict.
  cc.now += absl::Milliseconds(1600);
  cc.Beat(p0, id, "");
  cc.Beat(w, id, "pull from 127.0.0.1:2: Deadline Exceeded");
  coord.Tick();
  EXPECT_EQ(probes, 4);
  EXPECT_EQ(coord.Get(id)->restarts(), 1);
}

// --jobs_root: a job without job_dir gets jobs_root/<its id>, created at
// submit, holding the outputs it left empty; two jobs never share one.
TEST(CoordinatorJobDir, EachJobGetsItsOwnDirectory) {
  namespace fs = std::filesystem;
  const fs::path root =
      fs::path(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") /
      "jobs-root";
  fs::remove_all(root);
  CoordinatorOptions o;
  o.jobs_root = root.string();
  o.count_examples = [](const JobSpec&) -> absl::StatusOr<int64_t> {
    return 100;
  };
  Coordinator coord(o);
  JobSpec s;
  s.set_task(PRETRAIN);
  s.add_data("data/*.tfrecord");
  s.set_batch_size(10);
  s.set_steps(10);
  const std::string a = *coord.Submit(s);
  const JobSpec got = coord.Get(a)->spec();
  EXPECT_EQ(got.job_dir(), (root / a).string());
  EXPECT_TRUE(fs::is_directory(root / a));
  EXPECT_EQ(got.checkpoint().dir(), (root / a / "checkpoints").string());
  EXPECT_EQ(got.export_path(), (root / a / "model.safetensors").string());
  EXPECT_EQ(got.tensorboard_dir(), (root / a / "tensorboard").string());
  // Another job is refused the first one's directory while it may write.
  JobSpec b = s;
  b.set_job_dir((root / a).string());
  absl::StatusOr<std::string> refused = coord.Submit(b);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(
                "of job " + a + " (PENDING), which writes there"),
            std::string::npos)
      << refused.status();
  // The next job gets a directory of its own.
  const std::string c = *coord.Submit(s);
  EXPECT_NE(c, a);
  EXPECT_EQ(coord.Get(c)->spec().job_dir(), (root / c).string());
  // A job_dir that cannot be created is refused, naming it.
  JobSpec d = s;
  d.set_job_dir("/proc/bertps-cannot/x");
  absl::StatusOr<std::string> bad = coord.Submit(d);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("job_dir \"/proc/bertps-cannot/x\": "
                                        "cannot create it"),
            std::string::npos)
      << bad.status();
}

// With slot_takeover_after infinite the job waits for a daemon, and says so.
TEST(CoordinatorTakeover, OffMeansTheJobWaits) {
  ClockedCoordinator cc([](CoordinatorOptions& o) {
    o.slot_takeover_after = absl::InfiniteDuration();
  });
  std::string p = cc.Join(PS, "127.0.0.1:1");
  std::string w0 = cc.Join(TRAIN), w1 = cc.Join(TRAIN);
  const std::string id = *cc.c->Submit(TrainSpec(1, 2, 4));
  cc.Beat(p, ""), cc.Beat(p, id), cc.Beat(w0, ""), cc.Beat(w1, "");
  for (int i = 0; i < 20; ++i) {
    cc.now += absl::Seconds(6);
    cc.Beat(p, id);
    EXPECT_EQ(cc.Beat(w0, id).also_indices_size(), 0);
  }
  EXPECT_EQ(cc.c->Get(id)->waiting(),
            "an idle train worker for slot 1 (the other workers wait at the "
            "next step)");
}

// A finished job whose shard 0 applied an example twice, or missed one, has
// consumed something else than its plan: it fails and says what it got.
TEST_F(CoordinatorTest, DataAccountingCatchesDuplicatesAndGaps) {
  for (const char* ledger : {"20;0-100", "0;0-40,60-120"}) {
    std::string p = Join(PS, "127.0.0.1:1");
    std::string w = Join(TRAIN);
    auto id = *coord_.Submit(Spec(1, 1, 10));  // 10 updates x 10 examples
    Beat(p), Beat(p, id);
    Assignment a = Beat(w);
    for (int64_t step = 0; step < 10; ++step) {
      Beat(w, id, {Report(step, a.index(), 1, 10, 1.0)});
    }
    Ledger(p, id, ledger, 10);
    Beat(w, id, {}, /*done=*/true);
    JobStatus st = *coord_.Get(id);
    EXPECT_EQ(st.state(), FAILED) << ledger;
    EXPECT_NE(st.reason().find("data accounting: the 10 updates should "
                               "consume stream positions [0, 100) once each"),
              std::string::npos)
        << st.reason();
    now_ += absl::Seconds(60);  // the members go; the next round starts clean
    coord_.Tick();
  }
}

// replicas: 2 on 4 shard daemons: a backup per index. The trainer waits for
// every primary and backup; a lost primary is replaced by its backup in
// term 1 with no restart (every member told the new layout); a lost backup
// is dropped; a primary lost with no backup left restarts the job.
TEST_F(CoordinatorTest, ReplicasFailOverWithoutARestart) {
  std::vector<std::string> ps;
  for (int i = 1; i <= 4; ++i) ps.push_back(Join(PS, absl::StrCat("127.0.0.1:", i)));
  std::string w = Join(TRAIN);
  JobSpec spec = Spec(2, 1, 50);
  spec.set_replicas(2);
  auto id = *coord_.Submit(spec);
  std::map<std::string, Assignment> as;
  for (const auto& p : ps) as[p] = Beat(p);
  std::vector<std::string> primary(2), backup(2);
  for (const auto& p : ps) {
    const Assignment& a = as[p];
    ASSERT_EQ(a.job_id(), id);
    (a.backup() ? backup : primary)[a.index()] = p;
    EXPECT_EQ(a.ps_layout(), 1);
    EXPECT_EQ(a.ps_terms_size(), 2);
  }
  for (int i = 0; i < 2; ++i) ASSERT_FALSE(primary[i].empty() || backup[i].empty());
  EXPECT_EQ(as[primary[1]].backups_size(), 1);
  EXPECT_EQ(as[backup[1]].backups_size(), 0);
  // Installed: the primaries and one backup; the trainer still waits.
  Beat(primary[0], id), Beat(primary[1], id), Beat(backup[0], id);
  EXPECT_TRUE(Beat(w).wait());
  Beat(backup[1], id);
  Assignment a = Beat(w);
  ASSERT_FALSE(a.wait());
  EXPECT_EQ(a.ps_layout(), 1);
  const std::string old1 = a.ps_addresses(1);
  JobStatus st = *coord_.Get(id);
  ASSERT_EQ(st.shards_size(), 2);
  EXPECT_EQ(st.shards(1).primary(), primary[1]);
  EXPECT_EQ(st.shards(1).backups(0), backup[1]);
  // The members of `live` heartbeat for 12 s; the others go silent.
  auto only = [&](std::vector<std::string> live) {
    for (int round = 0; round < 2; ++round) {
      now_ += absl::Seconds(6);
      for (const auto& m : live) Beat(m, id);
    }
  };
  // Shard 1's primary goes silent.
  only({primary[0], backup[0], backup[1], w});
  st = *coord_.Get(id);
  EXPECT_EQ(st.state(), RUNNING);
  EXPECT_EQ(st.restarts(), 0);
  EXPECT_EQ(st.failovers(), 1);
  EXPECT_EQ(st.shards(1).primary(), backup[1]);
  EXPECT_EQ(st.shards(1).term(), 1);
  EXPECT_EQ(st.shards(1).backups_size(), 0);
  EXPECT_NE(st.ps_addresses(1), old1);
  Assignment promoted = Beat(backup[1], id);
  EXPECT_FALSE(promoted.backup());
  EXPECT_EQ(promoted.ps_terms(1), 1);
  EXPECT_EQ(promoted.ps_layout(), 2);
  Assignment wa = Beat(w, id);
  EXPECT_FALSE(wa.wait());
  EXPECT_EQ(wa.ps_layout(), 2);
  EXPECT_EQ(wa.ps_addresses(1), st.ps_addresses(1));
  EXPECT_EQ(wa.incarnation(), a.incarnation());
  // Shard 0's backup is lost: dropped, its primary told.
  only({primary[0], backup[1], w});
  st = *coord_.Get(id);
  EXPECT_EQ(st.shards(0).backups_size(), 0);
  EXPECT_EQ(Beat(primary[0], id).backups_size(), 0);
  EXPECT_EQ(st.restarts(), 0);
  // Shard 1's new primary lost with no backup left: a restart.
  only({primary[0], w});
  st = *coord_.Get(id);
  EXPECT_EQ(st.restarts(), 1);
  EXPECT_EQ(st.failovers(), 1);
  int64_t seq = 0;
  auto events = coord_.WaitForEvents(id, &seq, absl::InfinitePast());
  ASSERT_TRUE(events.ok());
  std::string all;
  for (const JobEvent& e : *events) absl::StrAppend(&all, e.message(), "\n");
  EXPECT_NE(all.find("shard 1: primary (member " + primary[1] +
                     " at 127.0.0.1:"), std::string::npos) << all;
  EXPECT_NE(all.find(") stopped answering; failed over to its backup member " +
                     backup[1]), std::string::npos) << all;
  EXPECT_NE(all.find("backup of shard 0 (member " + backup[0]), std::string::npos)
      << all;
}

TEST_F(CoordinatorTest, LostShardRestartsTheJobFromItsNewestCheckpoint) {
  std::string p0 = Join(PS, "127.0.0.1:1"), p1 = Join(PS, "127.0.0.1:2");
  std::string w = Join(TRAIN);
  JobSpec spec = Spec(2, 1, 50);
  spec.mutable_checkpoint()->set_dir("/ckpt");
  const std::string tb = ::testing::TempDir() + "/tb-lost-shard";
  std::filesystem::remove_all(tb);
  spec.set_tensorboard_dir(tb);
  auto id = *coord_.Submit(spec);
  Beat(p0), Beat(p1), Beat(p0, id), Beat(p1, id);
  Assignment a = Beat(w);
  ASSERT_FALSE(a.wait());
  const int64_t first = a.incarnation();
  EXPECT_GT(first, 0);
  for (int64_t step = 0; step < 14; ++step) {
    StepReport r = Report(step, 0, 1, 10, 1.0);
    if (step == 9) r.set_checkpoint("/ckpt/ckpt-10/manifest.json");
    Beat(w, id, {r});
  }
  EXPECT_EQ(coord_.Get(id)->progress().step(), 14);
  // Shard 1 goes silent; its process comes back at the same address.
  now_ += absl::Seconds(6);
  Beat(p0, id), Beat(w, id);
  std::string p1b = Join(PS, "127.0.0.1:2");
  JobStatus st = *coord_.Get(id);
  EXPECT_EQ(st.state(), RUNNING);
  EXPECT_EQ(st.restarts(), 1);
  EXPECT_EQ(st.incarnation(), first + 1);
  EXPECT_EQ(st.progress().step(), 10);  // back to the checkpoint
  EXPECT_EQ(st.history_size(), 10);
  EXPECT_EQ(st.spec().checkpoint().restore(), "/ckpt/ckpt-10/manifest.json");
  // Reports of the old incarnation are ignored.
  {
    HeartbeatRequest old;
    old.set_member_id(w);
    old.set_job_id(id);
    old.set_incarnation(first);
    *old.add_steps() = Report(14, 0, 1, 10, 1.0);
    ASSERT_TRUE(SignedHeartbeat(coord_, old).ok());
    EXPECT_EQ(coord_.Get(id)->progress().step(), 10);
  }
  // The trainer waits until both shards installed the new incarnation.
  Assignment wa = Beat(w, id);
  EXPECT_TRUE(wa.wait());
  EXPECT_EQ(wa.incarnation(), first + 1);
  Assignment s0 = Beat(p0, id), s1 = Beat(p1b);
  EXPECT_EQ(s0.incarnation(), first + 1);
  EXPECT_EQ(s1.index(), 1);  // the lost shard's index
  EXPECT_EQ(s1.spec().checkpoint().restore(), "/ckpt/ckpt-10/manifest.json");
  Beat(p0, id), Beat(p1b, id);
  a = Beat(w, id);
  EXPECT_FALSE(a.wait());
  EXPECT_EQ(a.ps_addresses(1), "127.0.0.1:2");
  Beat(w, id, {Report(10, 0, 1, 10, 1.0)});
  EXPECT_EQ(coord_.Get(id)->progress().step(), 11);
  {
    // TensorBoard: the loss of steps 1..14, a START at the checkpoint's step
    // 10 (TensorBoard drops 11..14 written before), then step 11 again.
    coord_.Tick();
    EXPECT_EQ(TensorBoardSteps(tb),
              "1 2 3 4 5 6 7 8 9 10 11 12 13 14 START@10 11 ");
  }
  // A shard that leaves (SIGTERM) restarts the job at once; with no idle
  // shard it waits for one.
  HeartbeatRequest leave;
  leave.set_member_id(p0);
  leave.set_job_id(id);
  leave.set_leaving(true);
  ASSERT_TRUE(SignedHeartbeat(coord_, leave).ok());
  st = *coord_.Get(id);
  EXPECT_EQ(st.restarts(), 2);
  EXPECT_TRUE(Beat(w, id).wait());
  // The other shard waits too: its peer at index 0 is not known yet.
  EXPECT_TRUE(Beat(p1b, id).wait());
  std::string p2 = Join(PS, "127.0.0.1:3");
  EXPECT_EQ(Beat(p2).index(), 0);
  EXPECT_EQ(coord_.Get(id)->ps_addresses(0), "127.0.0.1:3");
}

// Trained (every slot done, the export written) but shard 0 went before it
// counted the last update (it gave up while the coordinator was away): the
// count would never come, so the job starts again from its last checkpoint
// rather than wait forever. Another shard lost after training restarts
// nothing: only shard 0 counts.
TEST_F(CoordinatorTest, ShardZeroLostBeforeTheLastCountRestartsTheJob) {
  std::string p0 = Join(PS, "127.0.0.1:1"), p1 = Join(PS, "127.0.0.1:2");
  std::string w = Join(TRAIN);
  JobSpec spec = Spec(2, 1, 10);
  spec.mutable_checkpoint()->set_dir("/ckpt");
  auto id = *coord_.Submit(spec);
  Beat(p0), Beat(p1), Beat(p0, id), Beat(p1, id);
  ASSERT_FALSE(Beat(w).wait());
  for (int64_t step = 0; step < 10; ++step) {
    StepReport r = Report(step, 0, 1, 10, 1.0);
    if (step == 9) r.set_checkpoint("/ckpt/ckpt-10/manifest.json");
    Beat(w, id, {r});
  }
  Beat(w, id, {}, /*done=*/true);
  EXPECT_EQ(coord_.Get(id)->waiting(),
            "shard 0's count of the examples of the last update");
  auto gave_up = [&](const std::string& member) {
    HeartbeatRequest r;
    r.set_member_id(member);
    r.set_job_id(id);
    r.set_incarnation(coord_.Get(id)->incarnation());
    r.set_gave_up("stopped its work after the coordinator did not answer");
    ASSERT_TRUE(SignedHeartbeat(coord_, r).ok());
  };
  gave_up(p1);  // shard 1: not needed any more
  JobStatus st = *coord_.Get(id);
  EXPECT_EQ(st.state(), RUNNING);
  EXPECT_EQ(st.restarts(), 0);
  gave_up(p0);
  st = *coord_.Get(id);
  ASSERT_EQ(st.state(), RUNNING) << st.reason();
  EXPECT_EQ(st.restarts(), 1);
  EXPECT_EQ(st.spec().checkpoint().restore(), "/ckpt/ckpt-10/manifest.json");
  // Both daemons take their shards again (the freed ones first), the worker
  // its slot; the step after the checkpoint is none, so it is done at once.
  Assignment s0 = Beat(p0), s1 = Beat(p1);
  EXPECT_EQ(s0.job_id(), id);
  EXPECT_EQ(s1.job_id(), id);
  Beat(p0, id), Beat(p1, id);
  Assignment a = Beat(w);
  ASSERT_EQ(a.job_id(), id);
  a = Beat(w, id);
  ASSERT_FALSE(a.wait());
  Beat(w, id, {}, /*done=*/true);
  const std::string& zero = s0.index() == 0 ? p0 : p1;
  Ledger(zero, id, "0;0-100", 10);
  st = *coord_.Get(id);
  EXPECT_EQ(st.state(), SUCCEEDED) << st.reason() << " " << st.waiting();
}

// TensorBoard writes that fail are told in the job's events (once), not
// only in the coordinator's log, and once more when they work again; the
// points are kept meanwhile and none is lost.
TEST_F(CoordinatorTest, TensorBoardWriteFailuresAreJobEvents) {
  const std::string tb = ::testing::TempDir() + "/tb-blocked";
  std::filesystem::remove_all(tb);
  std::string p = Join(PS, "127.0.0.1:1"), w = Join(TRAIN);
  JobSpec spec = Spec(1, 1, 50);
  spec.set_tensorboard_dir(tb);
  auto id = *coord_.Submit(spec);
  // Taken after the submit (a volume that filled up, a directory removed).
  std::filesystem::remove_all(tb);
  std::ofstream(tb) << "a file where the directory should be";
  Beat(p), Beat(p, id);
  ASSERT_FALSE(Beat(w).wait());
  auto events = [&] {
    int64_t seq = 0;
    std::string all;
    auto got = coord_.WaitForEvents(id, &seq, now_);
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) return all;
    for (const JobEvent& e : *got) absl::StrAppend(&all, e.message(), "\n");
    return all;
  };
  for (int64_t step = 0; step < 3; ++step) {
    Beat(w, id, {Report(step, 0, 1, 10, 1.0)});
    coord_.Tick();
  }
  std::string got = events();
  EXPECT_NE(got.find("TensorBoard events cannot be written"), std::string::npos)
      << got;
  size_t n = 0;
  for (size_t at = got.find("TensorBoard"); at != std::string::npos;
       at = got.find("TensorBoard", at + 1)) {
    ++n;
  }
  EXPECT_EQ(n, 1u) << got;  // once, not at every flush
  std::filesystem::remove(tb);
  Beat(w, id, {Report(3, 0, 1, 10, 1.0)});
  coord_.Tick();
  got = events();
  EXPECT_NE(got.find("TensorBoard events are written again"), std::string::npos)
      << got;
  // Every point was kept: steps 1..4 are in the file.
  EXPECT_EQ(TensorBoardSteps(tb), "1 2 3 4 ");
}

TEST_F(CoordinatorTest, LostShardFailsTheJobWhenNoRestartIsLeft) {
  std::string p = Join(PS, "127.0.0.1:9"), w = Join(TRAIN);
  JobSpec spec = Spec(1, 1, 10);
  spec.mutable_checkpoint()->set_max_restarts(-1);
  auto id = *coord_.Submit(spec);
  Beat(w);
  now_ += absl::Seconds(11);
  Beat(w, id);
  JobStatus st = *coord_.Get(id);
  EXPECT_EQ(st.state(), FAILED);
  EXPECT_NE(st.reason().find("127.0.0.1:9"), std::string::npos) << st.reason();
  EXPECT_NE(st.reason().find("max_restarts"), std::string::npos) << st.reason();
  (void)p;
}

TEST_F(CoordinatorTest, LeavingWorkerFreesItsSlotAtOnce) {
  std::string p = Join(PS, "127.0.0.1:1");
  std::string w0 = Join(TRAIN), w1 = Join(TRAIN);
  auto id = *coord_.Submit(Spec(1, 2, 10));
  Beat(p), Beat(p, id);
  Assignment a0 = Beat(w0), a1 = Beat(w1);
  HeartbeatRequest leave;
  leave.set_member_id(w1);
  leave.set_job_id(id);
  leave.set_incarnation(a1.incarnation());
  leave.set_leaving(true);
  *leave.add_steps() = Report(0, a1.index(), 2, 10, 1.0);
  ASSERT_TRUE(SignedHeartbeat(coord_, leave).ok());
  // No member timeout: a new member takes the slot now.
  std::string spare = Join(TRAIN);
  EXPECT_EQ(Beat(spare).index(), a1.index());
  EXPECT_EQ(coord_.Get(id)->restarts(), 0);
  // The leaver is forgotten: its next heartbeat must register again.
  HeartbeatRequest again;
  again.set_member_id(w1);
  EXPECT_EQ(SignedHeartbeat(coord_, again).status().code(), absl::StatusCode::kNotFound);
  (void)a0;
}

// A daemon killed a moment ago is alive until the member timeout: a freed
// slot goes to an idle daemon heard lately, not to one silent for seconds.
TEST_F(CoordinatorTest, AFreedSlotGoesToADaemonHeardLately) {
  std::string p = Join(PS, "127.0.0.1:1");
  std::string w0 = Join(TRAIN), w1 = Join(TRAIN);
  auto id = *coord_.Submit(Spec(1, 2, 10));
  Beat(p), Beat(p, id);
  Beat(w0, id);
  const int slot = Beat(w1, id).index();
  std::string gone = Join(TRAIN);  // killed -9 right after registering
  now_ += absl::Seconds(3);
  std::string fresh_later = Join(TRAIN);
  now_ += absl::Seconds(3);  // fresh_later: 3 s silent too
  Beat(p, id), Beat(w0, id);
  HeartbeatRequest leave;
  leave.set_member_id(w1);
  leave.set_job_id(id);
  leave.set_leaving(true);
  ASSERT_TRUE(SignedHeartbeat(coord_, leave).ok());
  JobStatus st = *coord_.Get(id);
  EXPECT_EQ(st.slots(slot).member(), "") << st.DebugString();
  EXPECT_NE(st.waiting().find(absl::StrCat("an idle train worker for slot ", slot)),
            std::string::npos) << st.waiting();
  // The daemon that is alive heartbeats: the slot is its at once.
  Assignment a = Beat(fresh_later);
  EXPECT_EQ(a.job_id(), id);
  EXPECT_EQ(a.index(), slot);
  EXPECT_EQ(coord_.Get(id)->slots(slot).member(), fresh_later);
  (void)gone;
}

TEST(CoordinatorEvents, OnlyTheNewestEventsAreKept) {
  CoordinatorOptions o;
  o.max_events = 5;
  o.count_examples = [](const JobSpec&) -> absl::StatusOr<int64_t> { return 100; };
  Coordinator c(o);
  RegisterRequest r;
  r.set_role(PS);
  r.set_address("127.0.0.1:1");
  const std::string p = RegisterMember(c, r)->member_id();
  r.set_role(TRAIN);
  r.set_address("");
  const std::string w = RegisterMember(c, r)->member_id();
  JobSpec spec;
  spec.set_task(PRETRAIN);
  spec.add_data("data/*.tfrecord");
  spec.set_batch_size(10);
  spec.set_steps(5000);
  const std::string id = *c.Submit(spec);
  auto beat = [&](const std::string& m, const std::string& job,
                  std::vector<StepReport> steps = {}) {
    HeartbeatRequest h;
    h.set_member_id(m);
    h.set_job_id(job);
    if (!job.empty()) h.set_incarnation(c.Get(job)->incarnation());
    for (auto& s : steps) *h.add_steps() = s;
    return SignedHeartbeat(c, h)->assignment();
  };
  beat(p, ""), beat(p, id), beat(w, "");
  for (int64_t step = 0; step < 30; ++step) {
    StepReport s;
    s.set_step(step);
    s.set_examples(10);
    s.set_loss(1.0);
    beat(w, id, {s});
  }
  // A repeat of a long-finished step is ignored (its (step, slot) entry was
  // forgotten to bound memory): the history keeps one point per step.
  for (int64_t step = 30; step < 1040; ++step) {
    StepReport s;
    s.set_step(step);
    s.set_loss(1.0);
    beat(w, id, {s});
  }
  {
    StepReport old;
    old.set_step(3);
    old.set_loss(9.0);
    beat(w, id, {old});
    EXPECT_EQ(c.Get(id)->history_size(), 1040);
  }
  int64_t seq = 0;
  auto events = c.WaitForEvents(id, &seq, absl::Now());
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 5u);
  EXPECT_EQ(events->back().message(), "step 1040");
  EXPECT_GT(seq, 1040);  // every event is counted, kept or not
  const int64_t total = seq;
  events = c.WaitForEvents(id, &seq, absl::Now());
  EXPECT_TRUE(events->empty());
  EXPECT_EQ(seq, total);
}

TEST_F(CoordinatorTest, QueueCancelAndErrors) {
  std::string p = Join(PS, "a:1");
  std::string w = Join(TRAIN);
  auto first = *coord_.Submit(Spec(1, 1, 5));
  auto second = *coord_.Submit(Spec(1, 1, 5));
  EXPECT_EQ(coord_.Get(second)->state(), PENDING);  // members are busy
  ASSERT_TRUE(coord_.Cancel(first).ok());
  EXPECT_EQ(coord_.Get(first)->state(), CANCELLED);
  EXPECT_EQ(coord_.Cancel(first).code(), absl::StatusCode::kFailedPrecondition);
  Beat(w);
  EXPECT_EQ(coord_.Get(second)->state(), RUNNING);
  EXPECT_EQ(coord_.Get("job-999").status().code(), absl::StatusCode::kNotFound);
  JobSpec bad = Spec(1, 1, 5);
  bad.set_batch_size(-1);
  auto r = coord_.Submit(bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("batch_size"), std::string::npos);
  // A worker reporting an error fails its job with the reason, once it was
  // sent the job (after the shard installed it): an error for a job it was
  // never sent is ignored.
  Beat(w, second, {}, false, "out of memory");
  EXPECT_EQ(coord_.Get(second)->state(), RUNNING);
  Beat(p), Beat(p, second);
  Assignment a = Beat(w);
  EXPECT_EQ(a.job_id(), second);
  Beat(w, second, {}, false, "out of memory");
  EXPECT_EQ(coord_.Get(second)->state(), FAILED);
  EXPECT_NE(coord_.Get(second)->reason().find("out of memory"), std::string::npos);
  (void)a;
}

// ------------------------------------------------------- leased work items

std::string TempFile(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return path;
}

HeartbeatRequest Results(const std::string& member, const std::string& job,
                         std::vector<WorkResult> results) {
  HeartbeatRequest r;
  r.set_member_id(member);
  r.set_job_id(job);
  for (auto& x : results) *r.add_results() = x;
  return r;
}

WorkResult Done(int index, int64_t records, const std::string& report) {
  WorkResult w;
  w.set_index(index);
  w.set_records(records);
  w.set_report_json(report);
  return w;
}

TEST_F(CoordinatorTest, PreprocessItemsAreLeasedRedoneAndCountedOnce) {
  TempFile("pre-a.txt", "a\n");
  TempFile("pre-b.txt", "b\n");
  JobSpec spec;
  spec.set_task(PREPROCESS);
  spec.add_data(std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
                "/pre-[ab].txt");
  spec.set_output_dir("/nonexistent/out");
  spec.mutable_preprocess()->set_vocab("vocab.txt");
  spec.mutable_preprocess()->set_shards(4);  // 2 files x 2 parts
  auto id = coord_.Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(coord_.Get(*id)->state(), PENDING);  // no preprocess member yet
  std::string a = Join(PREPROCESS_ROLE), b = Join(PREPROCESS_ROLE);
  EXPECT_EQ(coord_.Get(*id)->state(), RUNNING);
  EXPECT_EQ(coord_.Get(*id)->items_total(), 4);
  Assignment la = Beat(a), lb = Beat(b);
  ASSERT_TRUE(la.has_item() && lb.has_item());
  EXPECT_NE(la.item().index(), lb.item().index());
  EXPECT_EQ(la.item().parts(), 2);
  // A heartbeat without a result keeps the lease.
  EXPECT_EQ(Beat(a, *id).item().index(), la.item().index());
  // a goes silent; b finishes its items and takes a's.
  std::set<int> done_by_b;
  for (int round = 0; round < 8; ++round) {
    now_ += absl::Seconds(4);
    auto r = SignedHeartbeat(coord_, Results(b, *id, {Done(lb.item().index(), 10,
                                                    R"({"n":1,"clean":{"x":2}})")}));
    ASSERT_TRUE(r.ok());
    done_by_b.insert(lb.item().index());
    lb = r->assignment();
    if (!lb.has_item()) break;
  }
  EXPECT_EQ(done_by_b.size(), 4u);  // a's item was redone by b
  JobStatus st = *coord_.Get(*id);
  EXPECT_EQ(st.state(), SUCCEEDED);
  EXPECT_EQ(st.items_done(), 4);
  EXPECT_EQ(st.records_written(), 40);
  EXPECT_EQ(st.preprocess_report(), R"({"n":4,"clean":{"x":8}})");
  // a comes back with a result for the redone item: ignored.
  ASSERT_TRUE(SignedHeartbeat(coord_, Results(a, *id, {Done(la.item().index(), 10, "{}")})).ok());
  EXPECT_EQ(coord_.Get(*id)->records_written(), 40);
  EXPECT_FALSE(Beat(a).has_item());
}

TEST_F(CoordinatorTest, ItemErrorFailsTheJobNamingTheItem) {
  TempFile("err-a.txt", "a\n");
  JobSpec spec;
  spec.set_task(PREPROCESS);
  spec.add_data(std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
                "/err-a.txt");
  spec.set_output_dir("/out");
  spec.mutable_preprocess()->set_vocab("vocab.txt");
  std::string a = Join(PREPROCESS_ROLE);
  auto id = coord_.Submit(spec);
  ASSERT_TRUE(id.ok());
  Assignment la = Beat(a);
  ASSERT_TRUE(la.has_item());
  WorkResult bad;
  bad.set_index(la.item().index());
  bad.set_error("DATA_LOSS: corrupt input");
  ASSERT_TRUE(SignedHeartbeat(coord_, Results(a, *id, {bad})).ok());
  JobStatus st = *coord_.Get(*id);
  EXPECT_EQ(st.state(), FAILED);
  EXPECT_NE(st.reason().find("item 0"), std::string::npos) << st.reason();
  EXPECT_NE(st.reason().find("corrupt input"), std::string::npos) << st.reason();
}

TEST_F(CoordinatorTest, EvalJobMergesSufficientStatisticsInItemOrder) {
  TempFile("ev-0.tfrecord", "x");
  TempFile("ev-1.tfrecord", "x");
  JobSpec spec;
  spec.set_task(EVAL);
  spec.add_data(std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
                "/ev-*.tfrecord");
  spec.set_eval_checkpoint("/ckpt/ckpt-7/manifest.json");
  spec.add_label_names("ham");
  spec.add_label_names("spam");
  spec.set_num_labels(2);
  std::string e = Join(EVAL_ROLE);
  auto id = coord_.Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<std::vector<int64_t>> conf = {{5, 1, 0, 2}, {0, 0, 2, 0}};
  for (int k = 0; k < 2; ++k) {
    Assignment a = Beat(e, *id);
    ASSERT_TRUE(a.has_item());
    EXPECT_EQ(a.item().checkpoint(), "/ckpt/ckpt-7/manifest.json");
    EXPECT_EQ(a.item().round(), "final");
    WorkResult r;
    r.set_index(a.item().index());
    r.set_version(7);
    EvalStats* s = r.mutable_eval();
    s->set_num_labels(2);
    for (int64_t c : conf[a.item().index()]) s->add_confusion(c);
    s->set_examples(a.item().index() == 0 ? 8 : 2);
    s->set_cls_loss_sum(a.item().index() == 0 ? 4.0 : 1.0);
    ASSERT_TRUE(SignedHeartbeat(coord_, Results(e, *id, {r})).ok());
  }
  JobStatus st = *coord_.Get(*id);
  ASSERT_EQ(st.state(), SUCCEEDED) << st.reason();
  ASSERT_EQ(st.evals_size(), 1);
  const EvalMetrics& m = st.evals(0);
  EXPECT_EQ(m.step(), 7);
  EXPECT_EQ(m.examples(), 10);
  // Confusion [[5, 1], [2, 2]]: accuracy 7/10.
  EXPECT_DOUBLE_EQ(m.accuracy(), 0.7);
  EXPECT_DOUBLE_EQ(m.loss(), 0.5);
  ASSERT_EQ(m.classes_size(), 2);
  EXPECT_EQ(m.classes(0).label(), "ham");
  EXPECT_DOUBLE_EQ(m.classes(0).precision(), 5.0 / 7);
  EXPECT_DOUBLE_EQ(m.classes(0).recall(), 5.0 / 6);
  EXPECT_DOUBLE_EQ(m.classes(1).precision(), 2.0 / 3);
  EXPECT_DOUBLE_EQ(m.classes(1).recall(), 0.5);
  const double f0 = 2 * (5.0 / 7) * (5.0 / 6) / (5.0 / 7 + 5.0 / 6);
  const double f1 = 2 * (2.0 / 3) * 0.5 / (2.0 / 3 + 0.5);
  EXPECT_NEAR(m.macro_f1(), (f0 + f1) / 2, 1e-15);
}

TEST_F(CoordinatorTest, EvalStatisticsOfDifferentShapesDoNotAdd) {
  EvalStats a, b;
  a.set_num_labels(2);
  a.mutable_confusion()->Resize(4, 0);
  b.set_num_labels(3);
  b.mutable_confusion()->Resize(9, 0);
  EXPECT_EQ(AddEvalStats(b, &a).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorTest, PretrainMetricsFromSums) {
  EvalStats s;
  s.set_examples(4);
  s.set_mlm_loss_sum(20);
  s.set_mlm_weight(10);
  s.set_mlm_correct(3);
  s.set_nsp_correct(3);
  s.set_nsp_loss_sum(2);
  EvalMetrics m = MetricsOf(s, {});
  EXPECT_DOUBLE_EQ(m.mlm_accuracy(), 0.3);
  EXPECT_DOUBLE_EQ(m.mlm_loss(), 2.0);
  EXPECT_DOUBLE_EQ(m.mlm_perplexity(), std::exp(2.0));
  EXPECT_DOUBLE_EQ(m.nsp_accuracy(), 0.75);
  EXPECT_DOUBLE_EQ(m.nsp_loss(), 0.5);
}

// A coordinator paused for 20 s (SIGSTOP, a long stall) does not declare its
// members dead when it resumes: silence counts from the resume, and only a
// member still silent member_timeout later is lost.
TEST(CoordinatorStall, MembersGetATimeoutFromTheResume) {
  ClockedCoordinator cc(
      [](CoordinatorOptions& o) { o.stall_threshold = absl::Seconds(2); });
  Coordinator& c = *cc.c;
  absl::Time& now = cc.now;
  auto join = [&cc](Role role, const std::string& addr) {
    return cc.Join(role, addr);
  };
  auto beat = [&cc](const std::string& id, const std::string& job) {
    return cc.Beat(id, job);
  };
  const std::string ps = join(PS, "127.0.0.1:1"), w = join(TRAIN, "");
  JobSpec spec = TrainSpec(1, 1, 100);
  auto id = c.Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  beat(ps, "");
  beat(ps, *id);  // installed
  beat(w, "");
  for (int i = 0; i < 4; ++i) {  // ticking every 500 ms
    now += absl::Milliseconds(500);
    c.Tick();
    beat(ps, *id);
    beat(w, *id);
  }
  ASSERT_EQ(c.Get(*id)->state(), RUNNING);
  const int64_t incarnation = c.Get(*id)->incarnation();
  now += absl::Seconds(20);  // the coordinator was stopped
  c.Tick();
  EXPECT_EQ(c.Get(*id)->state(), RUNNING);
  EXPECT_EQ(c.Get(*id)->incarnation(), incarnation);
  EXPECT_EQ(c.Get(*id)->restarts(), 0);
  // The shard answers again; the worker stays silent: it alone is lost,
  // member_timeout after the resume, and the job does not restart.
  for (int i = 0; i < 19; ++i) {
    now += absl::Milliseconds(500);
    c.Tick();
    beat(ps, *id);
  }
  EXPECT_EQ(c.Get(*id)->restarts(), 0);
  auto events = [&] {
    std::string all;
    int64_t seq = 0;
    auto ev = c.WaitForEvents(*id, &seq, absl::InfinitePast());
    if (ev.ok()) {
      for (const JobEvent& e : *ev) absl::StrAppend(&all, e.message(), "\n");
    }
    return all;
  };
  EXPECT_EQ(events().find("stopped answering"), std::string::npos)
      << events();
  now += absl::Seconds(1) + absl::Milliseconds(500);
  c.Tick();
  beat(ps, *id);
  EXPECT_NE(events().find("stopped answering; its slot is free"),
            std::string::npos)
      << events();
  EXPECT_EQ(c.Get(*id)->restarts(), 0);
}

}  // namespace
}  // namespace bertps

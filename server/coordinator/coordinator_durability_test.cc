// Nothing acknowledged is lost (docs/jobs.md "Durability"): a state a client
// or a member is told of is in the store first; a store that cannot write
// refuses the call and changes nothing; one coordinator per store; job ids
// and directories never repeat; liveness follows the coordinator's own
// clock. Each case is what an outside audit found otherwise.
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_test_util.h"
#include "server/coordinator/job_store.h"

namespace bertps {
namespace {

using absl::StatusCode;

std::string TmpDir(const std::string& name) {
  const char* d = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(d ? d : "/tmp", "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A coordinator on a fake clock over `store`.
std::unique_ptr<ClockedCoordinator> Over(JobStore* store,
                                         const std::string& jobs_root = "") {
  return std::make_unique<ClockedCoordinator>([&](CoordinatorOptions& o) {
    o.store = store;
    o.jobs_root = jobs_root;
  });
}

// A 1 x 1 train job of `steps` on members ps and w, running.
std::string RunningJob(ClockedCoordinator& t, const std::string& ps,
                       const std::string& w, int64_t steps = 2) {
  const std::string id = *t.c->Submit(TrainSpec(1, 1, steps));
  t.Beat(ps, id);
  t.Beat(ps, id);
  t.Beat(w, id);
  EXPECT_EQ(t.c->Get(id)->state(), RUNNING);
  return id;
}

// The heartbeat that ends the job: its worker's part is done, shard 0 has
// applied every step.
absl::StatusOr<HeartbeatResponse> Finish(ClockedCoordinator& t,
                                         const std::string& ps,
                                         const std::string& w,
                                         const std::string& id, int64_t steps) {
  HeartbeatRequest l;
  l.set_member_id(ps);
  l.set_job_id(id);
  l.set_incarnation(t.c->Get(id)->incarnation());
  l.set_example_ledger(absl::StrCat("0;0-", steps * 10));
  l.set_applied_version(steps);
  EXPECT_TRUE(SignedHeartbeat(*t.c, l).ok());
  HeartbeatRequest d;
  d.set_member_id(w);
  d.set_job_id(id);
  d.set_incarnation(t.c->Get(id)->incarnation());
  for (int64_t s = 0; s < steps; ++s) {
    StepReport* r = d.add_steps();
    r->set_step(s);
    r->set_version(s + 1);
    r->set_first_example(s * 10);
    r->set_examples(10);
  }
  d.set_done(true);
  return SignedHeartbeat(*t.c, d);
}

// Finding 1: a job shown SUCCEEDED came back PENDING (and ran again) when
// the coordinator was killed before its next tick wrote it.
TEST(Durability, AFinalStateIsStoredBeforeAnyoneHearsOfIt) {
  MemoryJobStore store;
  auto t = Over(&store);
  auto [ps, w] = JoinShardAndTrainer(*t->c);
  const std::string id = RunningJob(*t, ps, w);
  ASSERT_TRUE(Finish(*t, ps, w, id, 2).ok());
  ASSERT_EQ(t->c->Get(id)->state(), SUCCEEDED);
  // Killed now, before any tick: a coordinator started on the store finds
  // the job as it was shown.
  auto again = Over(&store);
  ASSERT_TRUE(again->c->Recover().ok());
  EXPECT_EQ(again->c->Get(id)->state(), SUCCEEDED);
}

// A final state the store could not take is not shown: the heartbeat that
// made it is refused (the member tries again), GetJob and the events show
// the job running, until the store writes again.
TEST(Durability, AStateTheStoreCannotTakeIsNotShown) {
  MemoryJobStore store;
  auto t = Over(&store);
  auto [ps, w] = JoinShardAndTrainer(*t->c);
  const std::string id = RunningJob(*t, ps, w);
  int64_t seq = 0;
  ASSERT_TRUE(t->c->WaitForEvents(id, &seq, absl::InfinitePast()).ok());
  store.set_fail_puts(true);
  absl::StatusOr<HeartbeatResponse> r = Finish(*t, ps, w, id, 2);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status();
  EXPECT_EQ(t->c->Get(id)->state(), RUNNING);
  EXPECT_NE(t->c->Get(id)->store_error(), "");
  absl::StatusOr<std::vector<JobEvent>> events =
      t->c->WaitForEvents(id, &seq, absl::InfinitePast());
  ASSERT_TRUE(events.ok());
  for (const JobEvent& e : *events) {
    EXPECT_NE(e.status().state(), SUCCEEDED) << e.message();
  }
  ListJobsResponse page = t->c->ListPage(0, "");
  ASSERT_EQ(page.jobs_size(), 1);
  EXPECT_EQ(page.jobs(0).state(), RUNNING);
  // The store writes again: now it is shown, and stored.
  store.set_fail_puts(false);
  t->c->Tick();
  EXPECT_EQ(t->c->Get(id)->state(), SUCCEEDED);
  events = t->c->WaitForEvents(id, &seq, absl::InfinitePast());
  ASSERT_TRUE(events.ok());
  ASSERT_FALSE(events->empty());
  EXPECT_EQ(events->back().status().state(), SUCCEEDED);
  auto again = Over(&store);
  ASSERT_TRUE(again->c->Recover().ok());
  EXPECT_EQ(again->c->Get(id)->state(), SUCCEEDED);
}

// Finding 3: a full store still acknowledged a submit, and the job was gone
// after a restart. Now the submit is refused and nothing is queued.
TEST(Durability, ASubmitIsStoredOrRefused) {
  MemoryJobStore store;
  auto t = Over(&store);
  store.set_fail_puts(true);
  absl::StatusOr<std::string> id = t->c->Submit(TrainSpec(1, 1, 2));
  EXPECT_EQ(id.status().code(), StatusCode::kUnavailable) << id.status();
  EXPECT_TRUE(absl::StrContains(id.status().message(), "not submitted"));
  EXPECT_TRUE(t->c->List().empty());
  store.set_fail_puts(false);
  id = t->c->Submit(TrainSpec(1, 1, 2));
  ASSERT_TRUE(id.ok()) << id.status();
  auto again = Over(&store);
  ASSERT_TRUE(again->c->Recover().ok());
  ASSERT_EQ(again->c->List().size(), 1u);
  EXPECT_EQ(again->c->List()[0].id(), *id);
}

// Finding 3 again: a cancel acknowledged with a full store was PENDING
// again after a restart. Now it is refused, and one acknowledged is kept.
TEST(Durability, ACancelIsStoredOrRefused) {
  MemoryJobStore store;
  auto t = Over(&store);
  const std::string id = *t->c->Submit(TrainSpec(1, 1, 2));
  store.set_fail_puts(true);
  EXPECT_EQ(t->c->Cancel(id).code(), StatusCode::kUnavailable);
  EXPECT_EQ(t->c->Get(id)->state(), PENDING);
  store.set_fail_puts(false);
  ASSERT_TRUE(t->c->Cancel(id).ok());
  auto again = Over(&store);
  ASSERT_TRUE(again->c->Recover().ok());
  EXPECT_EQ(again->c->Get(id)->state(), CANCELLED);
}

// Finding 4: two coordinators on one --state_db both ran.
TEST(Durability, OneCoordinatorPerStore) {
  const std::string db = TmpDir("one-writer") + "/jobs.db";
  absl::StatusOr<std::unique_ptr<JobStore>> first = JobStore::Open(db);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<JobStore>> second = JobStore::Open(db);
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(second.status().message(), "in use by another "
                                                            "coordinator"))
      << second.status();
  EXPECT_TRUE(absl::StrContains(second.status().message(), "pid "))
      << second.status();
  first->reset();  // the holder ends: the store is free
  EXPECT_TRUE(JobStore::Open(db).ok());
}

// Finding 2: a coordinator restarted with --jobs_root and no store handed
// out job-000001 again, and the new job wrote into the old one's
// directory.
TEST(Durability, JobIdsAndDirectoriesNeverRepeat) {
  const std::string root = TmpDir("jobs-root");
  auto first = std::make_unique<ClockedCoordinator>(
      [&](CoordinatorOptions& o) { o.jobs_root = root; });
  const std::string a = *first->c->Submit(TrainSpec(1, 1, 2));
  first.reset();  // restarted, memory only
  auto second = std::make_unique<ClockedCoordinator>(
      [&](CoordinatorOptions& o) { o.jobs_root = root; });
  const std::string b = *second->c->Submit(TrainSpec(1, 1, 2));
  EXPECT_NE(a, b);
  EXPECT_NE(second->c->Get(b)->spec().job_dir(),
            absl::StrCat(root, "/", a));
  std::ifstream marker(absl::StrCat(root, "/", a, "/.bertps-job"));
  std::string owner;
  marker >> owner;
  EXPECT_EQ(owner, a);
  // A directory that is another job's, or holds files, is refused.
  JobSpec into_a = TrainSpec(1, 1, 2);
  into_a.set_job_dir(absl::StrCat(root, "/", a));
  absl::StatusOr<std::string> refused = second->c->Submit(into_a);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), a))
      << refused.status();
  const std::string full = TmpDir("full-dir");
  std::ofstream(full + "/something") << "x";
  JobSpec into_full = TrainSpec(1, 1, 2);
  into_full.set_job_dir(full);
  EXPECT_EQ(second->c->Submit(into_full).status().code(),
            StatusCode::kFailedPrecondition);
  // An empty directory made for the job is taken.
  JobSpec into_empty = TrainSpec(1, 1, 2);
  into_empty.set_job_dir(TmpDir("empty-dir"));
  EXPECT_TRUE(second->c->Submit(into_empty).ok());
}

// With a store, ids number on from the store's jobs across restarts.
TEST(Durability, StoredIdsNumberOn) {
  MemoryJobStore store;
  auto t = Over(&store);
  const std::string a = *t->c->Submit(TrainSpec(1, 1, 2));
  EXPECT_EQ(a, "job-000001");
  auto again = Over(&store);
  ASSERT_TRUE(again->c->Recover().ok());
  EXPECT_EQ(*again->c->Submit(TrainSpec(1, 1, 2)), "job-000002");
}

// Recover() as a round trip, over the memory store and over SQLite: jobs
// in every state (queued, running with progress and a checkpoint, each
// final state) come back as they were: state, reason, spec, progress,
// history, checkpoint, incarnation; the queued one starts once members
// come; the running one, whose members never come back, restarts from its
// checkpoint once the adoption window passed.
TEST(Durability, RecoverBringsBackEveryStateOverEitherStore) {
  for (const bool sqlite : {false, true}) {
    SCOPED_TRACE(sqlite ? "sqlite" : "memory");
    std::unique_ptr<JobStore> owned;
    MemoryJobStore memory;
    JobStore* store = &memory;
    const std::string db = TmpDir("recover-db") + "/jobs.sqlite";
    if (sqlite) {
      absl::StatusOr<std::unique_ptr<JobStore>> opened = JobStore::Open(db);
      ASSERT_TRUE(opened.ok()) << opened.status();
      owned = std::move(*opened);
      store = owned.get();
    }
    std::map<std::string, JobStatus> before;
    {
      auto t = Over(store);
      auto [ps, w] = JoinShardAndTrainer(*t->c);
      // Succeeded, failed, cancelled.
      const std::string done = RunningJob(*t, ps, w);
      ASSERT_TRUE(Finish(*t, ps, w, done, 2).ok());
      const std::string failed = RunningJob(*t, ps, w);
      HeartbeatRequest e;
      e.set_member_id(w);
      e.set_job_id(failed);
      e.set_incarnation(t->c->Get(failed)->incarnation());
      e.set_error("a worker's error");
      ASSERT_TRUE(SignedHeartbeat(*t->c, e).ok());
      ASSERT_EQ(t->c->Get(failed)->state(), FAILED);
      const std::string cancelled = *t->c->Submit(TrainSpec(1, 1, 2));
      ASSERT_TRUE(t->c->Cancel(cancelled).ok());
      // Running with progress and a checkpoint, and one queued behind it.
      JobSpec spec = TrainSpec(1, 1, 20);
      spec.mutable_checkpoint()->set_dir("/ckpt");
      const std::string running = *t->c->Submit(spec);
      t->Beat(ps, running), t->Beat(ps, running), t->Beat(w, running);
      HeartbeatRequest r;
      r.set_member_id(w);
      r.set_job_id(running);
      r.set_incarnation(t->c->Get(running)->incarnation());
      for (int64_t step = 0; step < 5; ++step) {
        StepReport* s = r.add_steps();
        s->set_step(step);
        s->set_first_example(step * 10);
        s->set_examples(10);
        s->set_loss(2.0 - 0.1 * step);
        if (step == 3) s->set_checkpoint("/ckpt/ckpt-4/manifest.json");
      }
      ASSERT_TRUE(SignedHeartbeat(*t->c, r).ok());
      const std::string queued = *t->c->Submit(TrainSpec(1, 1, 2));
      t->c->Tick();
      ASSERT_TRUE(t->c->FlushStore().ok());
      for (const std::string& id : {done, failed, cancelled, running, queued}) {
        before[id] = *t->c->Get(id);
      }
      EXPECT_EQ(before[running].state(), RUNNING);
      EXPECT_EQ(before[running].progress().step(), 5);
      EXPECT_EQ(before[queued].state(), PENDING);
    }
    auto again = Over(store);
    ASSERT_TRUE(again->c->Recover().ok());
    for (const auto& [id, was] : before) {
      SCOPED_TRACE(id);
      absl::StatusOr<JobStatus> now = again->c->Get(id);
      ASSERT_TRUE(now.ok()) << now.status();
      EXPECT_EQ(now->state(), was.state());
      EXPECT_EQ(now->reason(), was.reason());
      EXPECT_EQ(now->spec().SerializeAsString(), was.spec().SerializeAsString());
      EXPECT_EQ(now->incarnation(), was.incarnation());
      EXPECT_EQ(now->progress().step(), was.progress().step());
      EXPECT_EQ(now->history_size(), was.history_size());
      EXPECT_EQ(now->last_checkpoint(), was.last_checkpoint());
    }
    // The running job's members never re-register: after the adoption
    // window it starts again from its checkpoint of step 4.
    std::string running, queued;
    for (const auto& [id, was] : before) {
      if (was.state() == RUNNING) running = id;
      if (was.state() == PENDING) queued = id;
    }
    again->now += absl::Seconds(11);
    again->c->Tick();
    JobStatus st = *again->c->Get(running);
    EXPECT_EQ(st.incarnation(), before[running].incarnation() + 1);
    EXPECT_EQ(st.spec().checkpoint().restore(), "/ckpt/ckpt-4/manifest.json");
    EXPECT_EQ(st.progress().step(), 4);
    // New members: the running job takes them, then the queued one waits
    // for its own.
    auto [ps, w] = JoinShardAndTrainer(*again->c);
    again->Beat(ps, running), again->Beat(ps, running), again->Beat(w, running);
    EXPECT_EQ(again->c->Get(running)->state(), RUNNING);
    EXPECT_EQ(again->c->Get(queued)->state(), PENDING);
    if (sqlite) {
      again.reset();
      owned.reset();
    }
  }
}

// Finding 8: stepping the coordinator's clock back an hour right after a
// worker died hid the death. The default clock is monotonic: a member
// silent for the member timeout is lost whatever the wall clock did.
TEST(Durability, TheDefaultClockIsMonotonic) {
  const absl::Time a = MonotonicNow();
  const absl::Time b = MonotonicNow();
  EXPECT_GE(b, a);
  // It reads like the wall clock (shown times stay sensible) ...
  EXPECT_LT(absl::AbsDuration(MonotonicNow() - absl::Now()), absl::Minutes(5));
  // ... and is the coordinator's default.
  CoordinatorOptions o;
  const absl::Time c = o.now();
  EXPECT_LT(absl::AbsDuration(c - MonotonicNow()), absl::Seconds(5));
}

}  // namespace
}  // namespace bertps

// Nothing acknowledged is lost (docs/jobs.md "Durability"): a state a client
// or a member is told of is in the store first; a store that cannot write
// refuses the call and changes nothing; one coordinator per store; job ids
// and directories never repeat; liveness follows the coordinator's own
// clock. Each case is what an outside audit found otherwise.
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
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

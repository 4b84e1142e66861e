// What a member with a valid worker token cannot do to the coordinator
// (docs/security.md): speak for another member, report another lease's
// results, report a checkpoint outside its job's directory, take an address
// it does not serve, read other jobs, register without bound. Each refusal
// changes nothing.
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_test_util.h"

namespace bertps {
namespace {

using absl::StatusCode;

std::string TmpDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

std::string TempFile(const std::string& name, const std::string& text) {
  const std::string path = TmpDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

JobSpec PreprocessSpec(const std::string& input) {
  JobSpec spec;
  spec.set_task(PREPROCESS);
  spec.add_data(input);
  spec.set_output_dir(TmpDir() + "/pre-out-" + std::to_string(std::rand()));
  spec.mutable_preprocess()->set_vocab("vocab.txt");
  return spec;
}

WorkResult Result(int index, int64_t records, const std::string& error = "") {
  WorkResult w;
  w.set_index(index);
  w.set_records(records);
  w.set_report_json("{}");
  w.set_error(error);
  return w;
}

HeartbeatRequest Beat(const std::string& member, const std::string& job) {
  HeartbeatRequest r;
  r.set_member_id(member);
  r.set_job_id(job);
  return r;
}

// A heartbeat naming another member's id without its credential is
// refused: it cannot evict that member, fail its job or report for it.
TEST(CoordinatorSecurity, HeartbeatsNeedTheMembersOwnCredential) {
  ClockedCoordinator t;
  auto [ps, trainer] = JoinShardAndTrainer(*t.c);
  JobSpec spec = TrainSpec(1, 1, 10);
  spec.mutable_checkpoint()->set_dir("/ckpt");
  const std::string job = *t.c->Submit(spec);
  t.Beat(ps, job);
  ASSERT_EQ(t.Beat(trainer, job).job_id(), job);
  const int64_t incarnation = t.c->Get(job)->incarnation();

  const std::string attacker = t.Join(TRAIN);
  for (const std::string& secret :
       {std::string(), std::string("forged"), TestMemberSecrets()[attacker]}) {
    HeartbeatRequest leave = Beat(trainer, job);
    leave.set_leaving(true);
    leave.set_member_secret(secret);
    EXPECT_EQ(t.c->Heartbeat(leave).status().code(),
              StatusCode::kPermissionDenied);
    HeartbeatRequest error = Beat(trainer, job);
    error.set_incarnation(incarnation);
    error.set_error("forged by the attacker");
    error.set_member_secret(secret);
    absl::StatusOr<HeartbeatResponse> r = t.c->Heartbeat(error);
    EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
    EXPECT_TRUE(absl::StrContains(r.status().message(), "credential"))
        << r.status();
  }
  // Nothing changed: the job runs on its members.
  JobStatus st = *t.c->Get(job);
  EXPECT_EQ(st.state(), RUNNING);
  EXPECT_EQ(st.incarnation(), incarnation);
  ASSERT_EQ(st.slots_size(), 1);
  EXPECT_EQ(st.slots(0).member(), trainer);
  EXPECT_EQ(t.Beat(trainer, job).job_id(), job);
}

// A pool member reports only the item it holds: results for other jobs'
// items (a success or an error) are refused and change nothing; its own
// item's result counts.
TEST(CoordinatorSecurity, PoolResultsOnlyForTheLeaseHeld) {
  ClockedCoordinator t;
  const std::string a = TempFile("sec-a.txt", "a\n");
  const std::string b = TempFile("sec-b.txt", "b\n");
  const std::string c = TempFile("sec-c.txt", "c\n");
  const std::string job_a = *t.c->Submit(PreprocessSpec(a));
  const std::string job_b = *t.c->Submit(PreprocessSpec(b));
  const std::string job_c = *t.c->Submit(PreprocessSpec(c));
  const std::string m = t.Join(PREPROCESS_ROLE);
  absl::StatusOr<HeartbeatResponse> first =
      SignedHeartbeat(*t.c, Beat(m, ""));
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(first->assignment().has_item());
  const std::string leased = first->assignment().job_id();
  ASSERT_EQ(leased, job_a);

  HeartbeatRequest forged_success = Beat(m, job_b);
  *forged_success.add_results() = Result(0, 999);
  absl::StatusOr<HeartbeatResponse> r = SignedHeartbeat(*t.c, forged_success);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();
  HeartbeatRequest forged_error = Beat(m, job_c);
  *forged_error.add_results() = Result(0, 0, "forged by m");
  r = SignedHeartbeat(*t.c, forged_error);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();
  for (const std::string& j : {job_a, job_b, job_c}) {
    JobStatus st = *t.c->Get(j);
    EXPECT_EQ(st.state(), RUNNING) << j;
    EXPECT_EQ(st.items_done(), 0) << j;
    EXPECT_EQ(st.records_written(), 0) << j;
  }
  // Its own lease's result counts.
  HeartbeatRequest own = Beat(m, job_a);
  *own.add_results() = Result(0, 5);
  ASSERT_TRUE(SignedHeartbeat(*t.c, own).ok());
  EXPECT_EQ(t.c->Get(job_a)->state(), SUCCEEDED);
  EXPECT_EQ(t.c->Get(job_a)->records_written(), 5);
}

// A late result of a lease taken back (the member was silent past the
// timeout) is ignored, not refused: the member is not an attacker.
TEST(CoordinatorSecurity, ALateResultOfALeaseTakenBackIsIgnored) {
  ClockedCoordinator t;
  const std::string job = *t.c->Submit(PreprocessSpec(TempFile("late.txt", "x\n")));
  const std::string m = t.Join(PREPROCESS_ROLE);
  ASSERT_TRUE(SignedHeartbeat(*t.c, Beat(m, ""))->assignment().has_item());
  t.now += absl::Seconds(11);
  t.c->Tick();  // m is lost; its item is free again
  HeartbeatRequest late = Beat(m, job);
  *late.add_results() = Result(0, 7);
  ASSERT_TRUE(SignedHeartbeat(*t.c, late).ok());
  EXPECT_EQ(t.c->Get(job)->records_written(), 0);
  EXPECT_EQ(t.c->Get(job)->state(), RUNNING);
}

// A checkpoint is taken only under the job's checkpoint directory: one
// elsewhere is refused (INVALID_ARGUMENT) and the job's last checkpoint,
// which eval rounds and restores read, stays as it was.
TEST(CoordinatorSecurity, ReportedCheckpointsOnlyUnderTheJobsDirectory) {
  ClockedCoordinator t;
  auto [ps, trainer] = JoinShardAndTrainer(*t.c);
  JobSpec spec = TrainSpec(1, 1, 10);
  spec.mutable_checkpoint()->set_dir("/runs/a/ckpt");
  const std::string job = *t.c->Submit(spec);
  t.Beat(ps, job);
  t.Beat(ps, job);  // installed: the trainer gets its slot
  ASSERT_FALSE(t.Beat(trainer, job).wait());
  const int64_t inc = t.c->Get(job)->incarnation();
  for (const std::string& path :
       {std::string("/etc/hostname"), std::string("/runs/a/ckpt/../../b/m.json"),
        std::string("/runs/a/ckpt"), std::string("/runs/a/ckpt2/m.json"),
        std::string("/runs/a/ckpt/x\0/m.json", 22)}) {
    HeartbeatRequest r = Beat(trainer, job);
    r.set_incarnation(inc);
    StepReport* s = r.add_steps();
    s->set_step(0);
    s->set_version(1);
    s->set_checkpoint(path);
    s->set_checkpoint_version(1);
    absl::StatusOr<HeartbeatResponse> resp = SignedHeartbeat(*t.c, r);
    EXPECT_EQ(resp.status().code(), StatusCode::kInvalidArgument) << path;
  }
  JobStatus st = *t.c->Get(job);
  EXPECT_EQ(st.last_checkpoint(), "");
  EXPECT_EQ(st.progress().step(), 0);
  HeartbeatRequest good = Beat(trainer, job);
  good.set_incarnation(inc);
  StepReport* s = good.add_steps();
  s->set_step(0);
  s->set_version(1);
  s->set_checkpoint("/runs/a/ckpt/ckpt-1/manifest.json");
  s->set_checkpoint_version(1);
  ASSERT_TRUE(SignedHeartbeat(*t.c, good).ok());
  EXPECT_EQ(t.c->Get(job)->last_checkpoint(),
            "/runs/a/ckpt/ckpt-1/manifest.json");
}

// A registration with an address is taken only when the server there
// answers for the registrant's instance; naming a live shard's address
// evicts nothing. A process that does serve the address (a restarted
// daemon) replaces the old member at once.
TEST(CoordinatorSecurity, RegisteringAtAnAddressNeedsItsServer) {
  std::string serving;  // the instance the fake server at :7000 answers for
  ClockedCoordinator t([&](CoordinatorOptions& o) {
    o.verify_address = [&](const std::string& address,
                           const std::string& service) -> absl::Status {
      if (address == "127.0.0.1:7000" && service == "bertps.instance." + serving) {
        return absl::OkStatus();
      }
      return absl::NotFoundError("unknown service");
    };
  });
  RegisterRequest r;
  r.set_role(PS);
  r.set_address("127.0.0.1:7000");
  r.set_instance("first");
  serving = "first";
  absl::StatusOr<RegisterResponse> shard = RegisterMember(*t.c, r);
  ASSERT_TRUE(shard.ok()) << shard.status();
  const std::string trainer = t.Join(TRAIN);
  const std::string job = *t.c->Submit(TrainSpec(1, 1, 10));
  t.Beat(shard->member_id(), job);
  t.Beat(trainer, job);
  ASSERT_EQ(t.c->Get(job)->state(), RUNNING);
  const int64_t inc = t.c->Get(job)->incarnation();

  RegisterRequest forged = r;
  forged.set_protocol_version(kMemberProtocolVersion);
  forged.set_instance("attacker");
  absl::StatusOr<RegisterResponse> refused = t.c->Register(forged);
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied)
      << refused.status();
  forged.clear_instance();
  EXPECT_EQ(t.c->Register(forged).status().code(),
            StatusCode::kPermissionDenied);
  JobStatus st = *t.c->Get(job);
  EXPECT_EQ(st.incarnation(), inc);
  EXPECT_EQ(st.restarts(), 0);
  EXPECT_EQ(t.Beat(shard->member_id(), job).job_id(), job);

  // The daemon restarted at its address: the server there is the new one.
  serving = "second";
  r.set_instance("second");
  ASSERT_TRUE(RegisterMember(*t.c, r).ok());
  EXPECT_EQ(t.c->Get(job)->restarts(), 1);
}

// A worker token sees only the job of the member whose credential it
// presents; an admin sees every job.
TEST(CoordinatorSecurity, WorkerTokensSeeOnlyTheirMembersJob) {
  ClockedCoordinator t;
  auto [ps, trainer] = JoinShardAndTrainer(*t.c);
  const std::string mine = *t.c->Submit(TrainSpec(1, 1, 10));
  JobSpec other_spec = TrainSpec(1, 1, 10);
  other_spec.set_name("another team's job");
  const std::string other = *t.c->Submit(other_spec);
  t.Beat(ps, mine);
  ASSERT_EQ(t.Beat(trainer, mine).job_id(), mine);

  Caller admin;
  EXPECT_TRUE(t.c->Get(other, admin).ok());
  EXPECT_EQ(t.c->ListPageFor(admin, 0, "")->jobs_size(), 2);

  Caller worker;
  worker.admin = false;
  worker.token = "worker#0";
  EXPECT_EQ(t.c->Get(mine, worker).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(t.c->ListPageFor(worker, 0, "").status().code(),
            StatusCode::kPermissionDenied);
  worker.member_id = trainer;
  worker.member_secret = "guessed";
  EXPECT_EQ(t.c->Get(mine, worker).status().code(),
            StatusCode::kPermissionDenied);
  worker.member_secret = TestMemberSecrets()[trainer];
  EXPECT_TRUE(t.c->Get(mine, worker).ok());
  absl::StatusOr<JobStatus> denied = t.c->Get(other, worker);
  EXPECT_EQ(denied.status().code(), StatusCode::kPermissionDenied);
  // The refusal names neither the job nor anything of its spec.
  EXPECT_FALSE(absl::StrContains(denied.status().message(), "another team"));
  absl::StatusOr<ListJobsResponse> page = t.c->ListPageFor(worker, 0, "");
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->jobs_size(), 1);
  EXPECT_EQ(page->jobs(0).id(), mine);
  EXPECT_TRUE(t.c->CheckCanRead(mine, worker).ok());
  EXPECT_FALSE(t.c->CheckCanRead(other, worker).ok());
}

// Teams: a team's admin submits jobs its team owns and sees, cancels and
// watches only those; another team's job is answered as one that does not
// exist; a cluster admin sees and cancels every job; only a cluster admin
// drains members.
TEST(CoordinatorSecurity, TeamsSeeAndCancelOnlyTheirJobs) {
  ClockedCoordinator t;
  auto [ps, trainer] = JoinShardAndTrainer(*t.c);
  JobSpec vision_spec = TrainSpec(1, 1, 10);
  vision_spec.set_name("vision's job");
  const std::string vision = *t.c->Submit(vision_spec, "vision");
  const std::string speech = *t.c->Submit(TrainSpec(1, 1, 10), "speech");
  const std::string cluster = *t.c->Submit(TrainSpec(1, 1, 10));
  EXPECT_EQ(t.c->Get(vision)->owner(), "vision");
  EXPECT_EQ(t.c->Get(cluster)->owner(), "");

  Caller v;
  v.token = "admin#1";
  v.team = "vision";
  Caller root;  // a cluster admin
  EXPECT_TRUE(t.c->Get(vision, v).ok());
  absl::StatusOr<JobStatus> other = t.c->Get(speech, v);
  EXPECT_EQ(other.status().code(), StatusCode::kNotFound);
  // As for an id that does not exist: nothing tells the two apart.
  EXPECT_EQ(other.status().message(), absl::StrCat("no job ", speech));
  EXPECT_EQ(t.c->Get(cluster, v).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(t.c->CheckCanRead(speech, v).code(), StatusCode::kNotFound);
  absl::StatusOr<ListJobsResponse> page = t.c->ListPageFor(v, 0, "");
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->jobs_size(), 1);
  EXPECT_EQ(page->jobs(0).id(), vision);
  EXPECT_EQ(t.c->ListPageFor(root, 0, "")->jobs_size(), 3);

  // Cancelling another team's job is refused and changes nothing.
  EXPECT_EQ(t.c->Cancel(speech, v).code(), StatusCode::kNotFound);
  EXPECT_NE(t.c->Get(speech)->state(), CANCELLED);
  EXPECT_TRUE(t.c->Cancel(vision, v).ok());
  EXPECT_EQ(t.c->Get(vision)->state(), CANCELLED);
  EXPECT_TRUE(t.c->Cancel(speech, root).ok());

  // Draining a member (which may run any team's job) is a cluster admin's.
  absl::StatusOr<DrainMemberResponse> drained = t.c->Drain(trainer, v);
  EXPECT_EQ(drained.status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(t.c->Drain(trainer, root).ok());
  Caller worker;
  worker.admin = false;
  EXPECT_EQ(t.c->Drain(trainer, worker).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(t.c->Cancel(cluster, worker).code(), StatusCode::kPermissionDenied);
}

// Registrations are bounded per token (a burst, then a rate), and so are
// the members one token holds; dead members holding nothing are forgotten
// after reclaim_after.
TEST(CoordinatorSecurity, RegistrationsAreBoundedPerTokenAndDeadMembersReclaimed) {
  ClockedCoordinator t([](CoordinatorOptions& o) {
    o.registrations_per_s = 2;
    o.registrations_burst = 3;
    o.max_members_per_token = 5;
    o.reclaim_after = absl::Seconds(60);
  });
  Caller mallory;
  mallory.admin = false;
  mallory.token = "worker#1";
  RegisterRequest r;
  r.set_role(TRAIN);
  r.set_protocol_version(kMemberProtocolVersion);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(t.c->Register(r, mallory).ok()) << i;
  absl::StatusOr<RegisterResponse> burst = t.c->Register(r, mallory);
  EXPECT_EQ(burst.status().code(), StatusCode::kResourceExhausted);
  // Another token is not held back by this one.
  Caller other = mallory;
  other.token = "worker#0";
  EXPECT_TRUE(t.c->Register(r, other).ok());
  t.now += absl::Seconds(1);  // 2 more a second
  ASSERT_TRUE(t.c->Register(r, mallory).ok());
  ASSERT_TRUE(t.c->Register(r, mallory).ok());
  t.now += absl::Seconds(10);
  absl::StatusOr<RegisterResponse> held = t.c->Register(r, mallory);
  EXPECT_EQ(held.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(held.status().message(), "5 members"))
      << held.status();
  // Silent members die after the member timeout, and are forgotten 60 s
  // after they were last heard: the token may register again.
  t.now += absl::Seconds(61);
  t.c->Tick();
  EXPECT_TRUE(t.c->Register(r, mallory).ok());
}

}  // namespace
}  // namespace bertps

// Pipeline jobs that lose a stage: its slot goes to an idle stage daemon
// and the replica's stages are told its address (they start the step again
// with it, worker/job_member.h), with no restart; while the slot has no
// member its replica's stages are told none; with no idle stage daemon
// within the takeover time the member running the same stage of another
// replica computes it as well, until a stage daemon takes it back.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator_test_util.h"

namespace bertps {
namespace {

std::string Events(ClockedCoordinator& t, const std::string& job) {
  return JobEventsText(*t.c, job);
}

TEST(CoordinatorStages, ALostStageIsReplacedByAnIdleDaemonWithoutARestart) {
  ClockedCoordinator t;
  const std::string ps = t.Join(PS, "127.0.0.1:1");
  std::vector<std::string> stages;
  for (int k = 0; k < 4; ++k) {
    stages.push_back(t.Join(STAGE_ROLE, absl::StrCat("127.0.0.1:1", k)));
  }
  JobSpec spec = TrainSpec(1, 2, 50);  // 2 replicas
  spec.mutable_pipeline()->set_stages(2);
  spec.mutable_pipeline()->set_micro_batches(2);
  spec.mutable_checkpoint()->set_dir("ckpt");
  auto submitted = t.c->Submit(spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string id = *submitted;
  t.Beat(ps, "");
  t.Beat(ps, id);  // installed
  std::vector<std::string> by_slot(4);
  for (const auto& m : stages) {
    const Assignment a = t.Beat(m, id);
    ASSERT_EQ(a.job_id(), id);
    ASSERT_FALSE(a.wait());
    by_slot[a.index()] = m;
  }
  const int64_t incarnation = t.c->Get(id)->incarnation();
  const std::string spare = t.Join(STAGE_ROLE, "127.0.0.1:20");
  EXPECT_TRUE(t.Beat(spare, "").stop());
  // Stage 1 of replica 0 goes silent: lost after the member timeout; the
  // spare takes its slot at once.
  for (int round = 0; round < 2; ++round) {
    t.now += absl::Seconds(6);
    for (const auto& m : {ps, by_slot[0], by_slot[2], by_slot[3]}) {
      t.Beat(m, id);
    }
    t.Beat(spare, "");
  }
  Assignment a = t.Beat(spare, "");
  ASSERT_EQ(a.job_id(), id) << Events(t, id);
  EXPECT_EQ(a.index(), 1);
  EXPECT_EQ(a.incarnation(), incarnation);
  // Its replica's other stage is told the new address; the other replica
  // sees no change.
  a = t.Beat(by_slot[0], id);
  ASSERT_EQ(a.peers_size(), 2);
  EXPECT_EQ(a.peers(1), "127.0.0.1:20");
  EXPECT_EQ(a.incarnation(), incarnation);
  JobStatus st = *t.c->Get(id);
  EXPECT_EQ(st.state(), RUNNING);
  EXPECT_EQ(st.restarts(), 0);
  EXPECT_EQ(st.incarnation(), incarnation);
  std::string events = Events(t, id);
  EXPECT_NE(events.find("pipeline stage 1 of replica 0 (member " + by_slot[1] +
                        " at 127.0.0.1:1"),
            std::string::npos)
      << events;
  EXPECT_NE(events.find("its slot is free: an idle stage daemon takes it"),
            std::string::npos)
      << events;
  EXPECT_NE(events.find("pipeline stage 1 of replica 0 is member " + spare +
                        " at 127.0.0.1:20: the replica's stages start the "
                        "step again with it, no restart"),
            std::string::npos)
      << events;
  // Stage 1 of replica 1 is lost with no idle stage daemon: its replica's
  // stage is told no address for it (it waits); after the takeover time (the
  // member timeout) the member running stage 1 of replica 0 (the spare)
  // computes it as well, no restart; every stage member is told every
  // slot's address.
  for (int round = 0; round < 2; ++round) {
    t.now += absl::Seconds(6);
    for (const auto& m : {ps, by_slot[0], spare, by_slot[2]}) t.Beat(m, id);
  }
  a = t.Beat(by_slot[2], id);
  ASSERT_EQ(a.peers_size(), 2);
  EXPECT_EQ(a.peers(1), "");
  EXPECT_EQ(t.c->Get(id)->restarts(), 0);
  for (int round = 0; round < 2; ++round) {
    t.now += absl::Seconds(6);
    for (const auto& m : {ps, by_slot[0], spare, by_slot[2]}) t.Beat(m, id);
  }
  a = t.Beat(spare, id);
  EXPECT_EQ(a.index(), 1);
  ASSERT_EQ(a.also_indices_size(), 1);
  EXPECT_EQ(a.also_indices(0), 3);
  ASSERT_EQ(a.stage_addresses_size(), 4);
  EXPECT_EQ(a.stage_addresses(3), "127.0.0.1:20");
  a = t.Beat(by_slot[2], id);
  EXPECT_EQ(a.peers(1), "127.0.0.1:20");
  st = *t.c->Get(id);
  EXPECT_EQ(st.restarts(), 0);
  EXPECT_EQ(st.incarnation(), incarnation);
  events = Events(t, id);
  EXPECT_NE(events.find("pipeline stage 1 of replica 1 is taken over by member " +
                        spare + " (pipeline stage 1 of replica 0): no idle "
                        "stage daemon registered within 10s"),
            std::string::npos)
      << events;
  // A stage daemon registers: it takes the slot back.
  const std::string late = t.Join(STAGE_ROLE, "127.0.0.1:21");
  a = t.Beat(late, "");
  EXPECT_EQ(a.job_id(), id);
  EXPECT_EQ(a.index(), 3);
  EXPECT_EQ(t.Beat(spare, id).also_indices_size(), 0);
  EXPECT_EQ(t.Beat(by_slot[2], id).peers(1), "127.0.0.1:21");
  events = Events(t, id);
  EXPECT_NE(events.find("pipeline stage 1 of replica 1 is member " + late +
                        " (taken back from member " + spare),
            std::string::npos)
      << events;
  EXPECT_EQ(t.c->Get(id)->restarts(), 0);
}

// A pipeline job of 2 replicas x 2 stages on 4 stage members, every slot
// held and the shard installed.
struct Staged {
  std::string ps, id;
  std::vector<std::string> by_slot = std::vector<std::string>(4);
};
Staged StartStaged(ClockedCoordinator& t) {
  Staged r;
  r.ps = t.Join(PS, "127.0.0.1:1");
  std::vector<std::string> stages;
  for (int k = 0; k < 4; ++k) {
    stages.push_back(t.Join(STAGE_ROLE, absl::StrCat("127.0.0.1:1", k)));
  }
  JobSpec spec = TrainSpec(1, 2, 50);
  spec.mutable_pipeline()->set_stages(2);
  spec.mutable_pipeline()->set_micro_batches(2);
  r.id = *t.c->Submit(spec);
  t.Beat(r.ps, "");
  t.Beat(r.ps, r.id);
  for (const auto& m : stages) r.by_slot[t.Beat(m, r.id).index()] = m;
  return r;
}

TEST(CoordinatorStages, AStageBackFromSilenceIsToldToStopBeforeItsSlot) {
  ClockedCoordinator t;
  const Staged r = StartStaged(t);
  // Slot 3's member is silent past the member timeout: lost.
  for (int round = 0; round < 2; ++round) {
    t.now += absl::Seconds(6);
    for (int k : {0, 1, 2}) t.Beat(r.by_slot[k], r.id);
    t.Beat(r.ps, r.id);
  }
  EXPECT_EQ(t.c->Get(r.id)->slots(3).member(), "");
  // It heartbeats again (it was only stopped): its old part may still run,
  // so it is told to stop first; the heartbeat after gets the slot.
  Assignment a = t.Beat(r.by_slot[3], r.id);
  EXPECT_TRUE(a.stop() || a.job_id().empty()) << a.DebugString();
  a = t.Beat(r.by_slot[3], "");
  EXPECT_EQ(a.job_id(), r.id);
  EXPECT_EQ(a.index(), 3);
  EXPECT_EQ(t.c->Get(r.id)->restarts(), 0);
}

TEST(CoordinatorStages, AHostLostFreesEverySlotItHeld) {
  ClockedCoordinator t;
  const Staged r = StartStaged(t);
  // Slot 3 lost, no idle stage daemon: slot 1's member takes it over.
  for (int round = 0; round < 4; ++round) {
    t.now += absl::Seconds(6);
    for (int k : {0, 1, 2}) t.Beat(r.by_slot[k], r.id);
    t.Beat(r.ps, r.id);
  }
  const std::string host = r.by_slot[1];
  ASSERT_EQ(t.Beat(host, r.id).also_indices_size(), 1);
  // The host is lost too: both its slots are free (no member for stage 1
  // left), and once none is taken in time the job restarts, once.
  for (int round = 0; round < 4; ++round) {
    t.now += absl::Seconds(6);
    for (int k : {0, 2}) t.Beat(r.by_slot[k], r.id);
    t.Beat(r.ps, r.id);
  }
  const JobStatus st = *t.c->Get(r.id);
  const std::string events = Events(t, r.id);
  EXPECT_NE(events.find("pipeline stage 1 of replica 0 (member " + host),
            std::string::npos)
      << events;
  EXPECT_NE(events.find("pipeline stage 1 of replica 1 (member " + host),
            std::string::npos)
      << events;
  EXPECT_EQ(st.restarts(), 1) << events;
}

// A stage whose part is over (every step pushed) and that is lost after:
// the slot needs no member; it stays done, named by who finished it, in
// status and metrics; nothing is freed or restarted -- until another stage
// of its replica is lost before the step is applied everywhere: then it is
// needed again, and taken like a lost slot.
TEST(CoordinatorStages, AStageLostAfterItsPartIsOverIsNeededAgainOnlyWithItsReplica) {
  ClockedCoordinator t;
  const Staged r = StartStaged(t);
  ASSERT_TRUE(t.Done(r.by_slot[3], r.id));
  EXPECT_TRUE(t.c->Get(r.id)->slots(3).done());
  EXPECT_FALSE(t.c->Get(r.id)->slots(2).done());
  for (int round = 0; round < 4; ++round) {
    t.now += absl::Seconds(6);
    for (int k : {0, 1, 2}) t.Beat(r.by_slot[k], r.id);
    t.Beat(r.ps, r.id);
  }
  const JobStatus st = *t.c->Get(r.id);
  const std::string events = Events(t, r.id);
  EXPECT_EQ(st.slots(3).member(), r.by_slot[3]) << events;
  EXPECT_TRUE(st.slots(3).done());
  EXPECT_EQ(events.find("its slot is free"), std::string::npos) << events;
  EXPECT_EQ(st.restarts(), 0) << events;
  EXPECT_EQ(st.state(), RUNNING);
  // Then stage 0 of replica 1 is lost before its last push: its replica's
  // done slot, whose member is gone, is needed again (the new stage 0 needs
  // a stage 1). No idle stage daemon: replica 0's stages take both, no
  // restart.
  for (int round = 0; round < 5; ++round) {
    t.now += absl::Seconds(6);
    for (int k : {0, 1}) t.Beat(r.by_slot[k], r.id);
    t.Beat(r.ps, r.id);
  }
  const JobStatus after = *t.c->Get(r.id);
  const std::string all = Events(t, r.id);
  EXPECT_FALSE(after.slots(3).done()) << all;
  EXPECT_NE(all.find("pipeline stage 1 of replica 1 (its part was over; "
                     "member " + r.by_slot[3] + " gone) is needed again"),
            std::string::npos)
      << all;
  for (int k : {0, 1}) {
    const Assignment a = t.Beat(r.by_slot[k], r.id);
    ASSERT_EQ(a.also_indices_size(), 1) << "slot " << k << "\n" << all;
    EXPECT_EQ(a.also_indices(0), k + 2);
  }
  EXPECT_EQ(t.c->Get(r.id)->restarts(), 0) << all;
}

TEST(CoordinatorStages, AWholeReplicaLostIsTakenOverSlotBySlot) {
  ClockedCoordinator t;
  const Staged r = StartStaged(t);
  // Both stages of replica 1 go silent, no idle stage daemon: after the
  // member and takeover times each slot goes to the same stage of replica
  // 0, no restart.
  for (int round = 0; round < 4; ++round) {
    t.now += absl::Seconds(6);
    for (int k : {0, 1}) t.Beat(r.by_slot[k], r.id);
    t.Beat(r.ps, r.id);
  }
  for (int k : {0, 1}) {
    const Assignment a = t.Beat(r.by_slot[k], r.id);
    ASSERT_EQ(a.also_indices_size(), 1) << "slot " << k;
    EXPECT_EQ(a.also_indices(0), k + 2);
    ASSERT_EQ(a.stage_addresses_size(), 4);
    EXPECT_EQ(a.stage_addresses(k + 2), a.stage_addresses(k));
  }
  const JobStatus st = *t.c->Get(r.id);
  EXPECT_EQ(st.restarts(), 0) << Events(t, r.id);
  EXPECT_EQ(st.state(), RUNNING);
}

// A stage that could not reach another says so on its heartbeat: the
// coordinator probes the job's stage daemons (and its shards) at once; one
// that fails the probe is lost now, not after the member timeout, and its
// slot goes to an idle stage daemon.
TEST(CoordinatorStages, AStageThatFailsAProbeIsLostAtOnce) {
  std::vector<std::string> probed;
  std::string gone;
  ClockedCoordinator t([&](CoordinatorOptions& o) {
    o.member_timeout = absl::Seconds(60);
    o.probe = [&](const std::string& address) {
      probed.push_back(address);
      return address == gone ? absl::UnavailableError("connection refused")
                             : absl::OkStatus();
    };
  });
  const Staged r = StartStaged(t);
  const std::string spare = t.Join(STAGE_ROLE, "127.0.0.1:20");
  EXPECT_TRUE(t.Beat(spare, "").stop());
  // Slot 3 (stage 1 of replica 1) is the one gone: its own address.
  for (int k = 0; k < 4; ++k) {
    const Assignment a = t.Beat(r.by_slot[k], r.id);
    if (k == 3) gone = a.peers(1);
  }
  t.Beat(r.by_slot[2], r.id, "pipeline stage 1 of replica 1 (" + gone +
                                 ") is not answering");
  t.c->Tick();
  EXPECT_NE(std::find(probed.begin(), probed.end(), gone), probed.end());
  EXPECT_NE(std::find(probed.begin(), probed.end(), "127.0.0.1:1"),
            probed.end());  // the shard too
  const Assignment a = t.Beat(spare, "");
  EXPECT_EQ(a.job_id(), r.id);
  EXPECT_EQ(a.index(), 3);
  const std::string events = Events(t, r.id);
  EXPECT_NE(events.find("did not answer a probe (connection refused) after "
                        "member " + r.by_slot[2] + " could not reach a stage"),
            std::string::npos)
      << events;
  EXPECT_EQ(t.c->Get(r.id)->restarts(), 0);
}

}  // namespace
}  // namespace bertps

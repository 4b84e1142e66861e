// Re-replication by the coordinator: an index that lost a backup takes an
// idle shard daemon as a joining backup (told to wait for its primary's
// snapshot), its primary is told whom to bring up to date once the joiner
// installed the job, and the joiner counts as a backup (promotable) only
// once its primary reports it caught up. A daemon dropped as a backup, or
// whose join failed, is freed and not taken again for a while. A daemon of
// several slices never holds two replicas of one index.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator_test_util.h"

namespace bertps {
namespace {

// A shard's heartbeat in `job` with what its replica link reports.
Assignment ShardBeat(ClockedCoordinator& t, const std::string& m,
                     const std::string& job,
                     const std::vector<std::string>& joined = {},
                     const std::vector<std::string>& dropped = {}) {
  HeartbeatRequest r;
  r.set_member_id(m);
  r.set_job_id(job);
  r.set_incarnation(t.c->Get(job)->incarnation());
  for (const auto& a : joined) r.add_joined_backups(a);
  for (const auto& a : dropped) r.add_dropped_backups(a);
  return SignedHeartbeat(*t.c, r)->assignment();
}

std::string Events(ClockedCoordinator& t, const std::string& job) {
  return JobEventsText(*t.c, job);
}

// A job with replicas: 2 over 2 shard indices on 4 shard daemons at
// 127.0.0.1:1..4 and one trainer, every shard installed.
struct Replicated {
  std::vector<std::string> ps;            // by address 127.0.0.1:1..4
  std::vector<std::string> primary, backup;  // by index
  std::string w, id;
};
Replicated StartReplicated(ClockedCoordinator& t) {
  Replicated r;
  for (int i = 1; i <= 4; ++i) {
    r.ps.push_back(t.Join(PS, absl::StrCat("127.0.0.1:", i)));
  }
  r.w = t.Join(TRAIN);
  JobSpec spec = TrainSpec(2, 1, 50);
  spec.set_replicas(2);
  r.id = *t.c->Submit(spec);
  r.primary.assign(2, "");
  r.backup.assign(2, "");
  for (const auto& p : r.ps) {
    const Assignment a = t.Beat(p, "");
    EXPECT_EQ(a.job_id(), r.id);
    EXPECT_FALSE(a.joining());
    (a.backup() ? r.backup : r.primary)[a.index()] = p;
  }
  for (const auto& p : r.ps) t.Beat(p, r.id);  // installed
  EXPECT_FALSE(t.Beat(r.w, r.id).wait());
  return r;
}

TEST(CoordinatorReplicas, ALostBackupIsReplacedByAnIdleDaemon) {
  ClockedCoordinator t;
  const Replicated r = StartReplicated(t);
  const std::vector<std::string>& primary = r.primary;
  const std::vector<std::string>& backup = r.backup;
  const std::string& w = r.w;
  const std::string& id = r.id;
  // A spare registers: nothing needs it yet.
  const std::string spare = t.Join(PS, "127.0.0.1:5");
  EXPECT_TRUE(t.Beat(spare, "").stop());
  // Shard 1's backup goes silent: dropped; the spare joins in its place.
  for (int round = 0; round < 2; ++round) {
    t.now += absl::Seconds(6);
    for (const auto& m : {primary[0], primary[1], backup[0], w}) t.Beat(m, id);
    t.Beat(spare, "");
  }
  Assignment j = t.Beat(spare, "");
  ASSERT_EQ(j.job_id(), id) << Events(t, id);
  EXPECT_EQ(j.index(), 1);
  EXPECT_TRUE(j.backup());
  EXPECT_TRUE(j.joining());
  JobStatus st = *t.c->Get(id);
  EXPECT_EQ(st.restarts(), 0);
  ASSERT_EQ(st.shards_size(), 2);
  EXPECT_EQ(st.shards(1).backups_size(), 0);
  ASSERT_EQ(st.shards(1).joining_size(), 1);
  EXPECT_EQ(st.shards(1).joining(0), spare);
  // Not yet installed there: the primary is not told of it.
  EXPECT_EQ(ShardBeat(t, primary[1], id).joining_backups_size(), 0);
  ShardBeat(t, spare, id);  // installed, waiting for the snapshot
  Assignment pa = ShardBeat(t, primary[1], id);
  ASSERT_EQ(pa.joining_backups_size(), 1);
  EXPECT_EQ(pa.joining_backups(0), "127.0.0.1:5");
  EXPECT_EQ(pa.backups_size(), 0);
  // Joining, it is never promoted: were the primary lost now, the index
  // would restart (tested below with a caught-up joiner instead).
  // The primary reports it caught up: a backup from now on.
  pa = ShardBeat(t, primary[1], id, {"127.0.0.1:5"});
  EXPECT_EQ(pa.joining_backups_size(), 0);
  ASSERT_EQ(pa.backups_size(), 1);
  EXPECT_EQ(pa.backups(0), "127.0.0.1:5");
  st = *t.c->Get(id);
  EXPECT_EQ(st.shards(1).joining_size(), 0);
  ASSERT_EQ(st.shards(1).backups_size(), 1);
  EXPECT_EQ(st.shards(1).backups(0), spare);
  EXPECT_EQ(st.backups_added(), 1);
  EXPECT_FALSE(ShardBeat(t, spare, id).joining());
  // Shard 1's primary is lost: the caught-up joiner takes over, no restart.
  for (int round = 0; round < 2; ++round) {
    t.now += absl::Seconds(6);
    for (const auto& m : {primary[0], backup[0], spare, w}) t.Beat(m, id);
  }
  st = *t.c->Get(id);
  EXPECT_EQ(st.state(), RUNNING);
  EXPECT_EQ(st.restarts(), 0);
  EXPECT_EQ(st.failovers(), 1);
  EXPECT_EQ(st.shards(1).primary(), spare);
  EXPECT_EQ(st.ps_addresses(1), "127.0.0.1:5");
  const std::string events = Events(t, id);
  EXPECT_NE(events.find("shard 1: member " + spare +
                        " at 127.0.0.1:5 joins as a backup"),
            std::string::npos)
      << events;
  EXPECT_NE(events.find("shard 1: member " + spare +
                        " at 127.0.0.1:5 caught up with its primary"),
            std::string::npos)
      << events;
}

TEST(CoordinatorReplicas, ADroppedOrFailedDaemonWaitsBeforeItJoins) {
  ClockedCoordinator t;
  const Replicated r = StartReplicated(t);
  const std::vector<std::string>& ps = r.ps;
  const std::vector<std::string>& primary = r.primary;
  const std::vector<std::string>& backup = r.backup;
  const std::string& w = r.w;
  const std::string& id = r.id;
  // Shard 0's primary drops its backup (it stopped acknowledging): no
  // other idle daemon, and the dropped one is not taken back at once.
  const std::string b0 = backup[0];
  std::string b0_address;
  for (int i = 0; i < 4; ++i) {
    if (ps[i] == b0) b0_address = absl::StrCat("127.0.0.1:", i + 1);
  }
  ShardBeat(t, primary[0], id, {}, {b0_address});
  JobStatus st = *t.c->Get(id);
  EXPECT_EQ(st.shards(0).backups_size(), 0);
  EXPECT_EQ(st.shards(0).joining_size(), 0);
  EXPECT_TRUE(t.Beat(b0, id).stop());
  auto beat_all = [&](absl::Duration later) {
    t.now += later;
    for (const auto& m : {primary[0], primary[1], backup[1], w}) t.Beat(m, id);
  };
  beat_all(absl::Seconds(1));
  EXPECT_TRUE(t.Beat(b0, "").stop()) << "taken back at once";
  // After kJoinRetryAfter it joins again, to be brought up to date.
  beat_all(Coordinator::kJoinRetryAfter);
  Assignment j = t.Beat(b0, "");
  ASSERT_EQ(j.job_id(), id);
  EXPECT_TRUE(j.joining());
  ShardBeat(t, b0, id);
  EXPECT_EQ(ShardBeat(t, primary[0], id).joining_backups_size(), 1);
  // Its join fails (the primary reports it dropped): the daemon is freed
  // and waits again; a fresh daemon joins in its place at once.
  ShardBeat(t, primary[0], id, {}, {b0_address});
  st = *t.c->Get(id);
  EXPECT_EQ(st.shards(0).joining_size(), 0);
  EXPECT_EQ(st.backups_added(), 0);
  EXPECT_TRUE(t.Beat(b0, id).stop());
  const std::string fresh = t.Join(PS, "127.0.0.1:9");
  beat_all(absl::Seconds(1));
  EXPECT_TRUE(t.Beat(b0, "").stop());
  j = t.Beat(fresh, "");
  EXPECT_EQ(j.job_id(), id);
  EXPECT_TRUE(j.joining());
  EXPECT_EQ(t.c->Get(id)->shards(0).joining(0), fresh);
  const std::string events = Events(t, id);
  EXPECT_NE(events.find("could not be brought up to date by its primary"),
            std::string::npos)
      << events;
  EXPECT_EQ(t.c->Get(id)->restarts(), 0);
}

// A slice of a shard daemon that serves several (bertps_server --slices).
std::string JoinSlice(ClockedCoordinator& t, const std::string& address,
                      const std::string& daemon) {
  RegisterRequest r;
  r.set_role(PS);
  r.set_address(address);
  r.set_daemon(daemon);
  return RegisterMember(*t.c, r)->member_id();
}

TEST(CoordinatorReplicas, SlicesOfOneDaemonHoldNoTwoReplicasOfAnIndex) {
  bool a_gone = false;
  ClockedCoordinator t([&a_gone](CoordinatorOptions& o) {
    o.member_timeout = absl::Seconds(60);
    o.probe = [&a_gone](const std::string& address) {
      return a_gone && absl::StartsWith(address, "127.0.0.1:1")
                 ? absl::UnavailableError("connection refused")
                 : absl::OkStatus();
    };
  });
  // Daemon A serves 3 slices, daemon B 1: 4 slices, but 2 indices x 2
  // replicas need 2 daemons for each index, so B needs 2.
  const std::string a1 = JoinSlice(t, "127.0.0.1:11", "A");
  const std::string a2 = JoinSlice(t, "127.0.0.1:12", "A");
  const std::string a3 = JoinSlice(t, "127.0.0.1:13", "A");
  const std::string b1 = JoinSlice(t, "127.0.0.1:21", "B");
  const std::string w = t.Join(TRAIN);
  JobSpec spec = TrainSpec(2, 1, 50);
  spec.set_replicas(2);
  const std::string id = *t.c->Submit(spec);
  for (const auto& m : {a1, a2, a3, b1, w}) t.Beat(m, "");
  JobStatus st = *t.c->Get(id);
  EXPECT_EQ(st.state(), PENDING);
  EXPECT_NE(st.waiting().find("4 idle parameter-server daemon slices in 2 "
                              "daemon(s); 2 replicas of each of 2 shard(s) "
                              "need as many daemons per index"),
            std::string::npos)
      << st.waiting();
  const std::string b2 = JoinSlice(t, "127.0.0.1:22", "B");
  std::map<std::string, Assignment> got;
  for (const auto& m : {a1, a2, a3, b1, b2}) got[m] = t.Beat(m, "");
  st = *t.c->Get(id);
  ASSERT_EQ(st.state(), RUNNING) << st.waiting();
  ASSERT_EQ(st.shards_size(), 2);
  for (const ShardReplicas& r : st.shards()) {
    ASSERT_EQ(r.backups_size(), 1);
    ASSERT_EQ(r.backup_daemons_size(), 1);
    EXPECT_NE(r.primary_daemon(), r.backup_daemons(0)) << r.DebugString();
  }
  // The primaries spread over both daemons.
  EXPECT_NE(st.shards(0).primary_daemon(), st.shards(1).primary_daemon());
  EXPECT_TRUE(got[a3].stop()) << "a slice left idle";
  for (const auto& m : {a1, a2, b1, b2}) t.Beat(m, id);  // installed
  EXPECT_FALSE(t.Beat(w, id).wait());
  // Daemon A is killed: the worker cannot reach its primary; the probe
  // finds it gone, and its other slices with it. Its primary's index fails
  // over to B, the index whose backup it held runs on without one.
  const int lost_index = st.shards(0).primary_daemon() == "A" ? 0 : 1;
  const std::string a_primary = st.shards(lost_index).primary();
  a_gone = true;
  t.Beat(w, id, "pull: Socket closed");
  t.c->Tick();
  st = *t.c->Get(id);
  EXPECT_EQ(st.state(), RUNNING);
  EXPECT_EQ(st.restarts(), 0);
  EXPECT_EQ(st.failovers(), 1);
  EXPECT_EQ(st.shards(lost_index).primary_daemon(), "B");
  EXPECT_EQ(st.shards(0).backups_size() + st.shards(1).backups_size(), 0)
      << st.DebugString();
  std::string events = Events(t, id);
  EXPECT_NE(events.find("is part of daemon A with member " + a_primary +
                        ", which did not answer a probe"),
            std::string::npos)
      << events;
  // A new slice of daemon B may back up neither index (B holds both
  // primaries); a daemon of its own backs up the first.
  const std::string b3 = JoinSlice(t, "127.0.0.1:23", "B");
  for (const auto& m : {b1, b2, w}) t.Beat(m, id);
  EXPECT_TRUE(t.Beat(b3, "").stop());
  const std::string c = t.Join(PS, "127.0.0.1:31");
  Assignment j = t.Beat(c, "");
  EXPECT_EQ(j.job_id(), id);
  EXPECT_TRUE(j.joining());
  EXPECT_TRUE(t.Beat(b3, "").stop());
}

// 3 daemons of 2 slices hold 3 indices x 2 replicas (the backups found all
// at once: one index at a time, the first free slice of another daemon,
// would leave the last index only a slice of its own daemon).
TEST(CoordinatorReplicas, ThreeDaemonsOfTwoSlicesHoldThreeIndicesTwice) {
  ClockedCoordinator t;
  std::vector<std::string> slices;
  int port = 40;
  for (const char* d : {"A", "B", "C"}) {
    for (int k = 0; k < 2; ++k) {
      slices.push_back(JoinSlice(t, absl::StrCat("127.0.0.1:", port++), d));
    }
  }
  const std::string w = t.Join(TRAIN);
  JobSpec spec = TrainSpec(3, 1, 50);
  spec.set_replicas(2);
  const std::string id = *t.c->Submit(spec);
  for (const auto& m : slices) t.Beat(m, "");
  const JobStatus st = *t.c->Get(id);
  ASSERT_EQ(st.state(), RUNNING) << st.waiting();
  ASSERT_EQ(st.shards_size(), 3);
  for (const ShardReplicas& r : st.shards()) {
    ASSERT_EQ(r.backup_daemons_size(), 1);
    EXPECT_NE(r.primary_daemon(), r.backup_daemons(0)) << r.DebugString();
  }
}

// A daemon of 2 slices holding both primaries of a job without replicas
// goes silent: both slices are lost in one tick, and the job restarts once.
TEST(CoordinatorReplicas, SlicesLostTogetherRestartAJobOnce) {
  ClockedCoordinator t;
  const std::string a1 = JoinSlice(t, "127.0.0.1:11", "A");
  const std::string a2 = JoinSlice(t, "127.0.0.1:12", "A");
  const std::string w = t.Join(TRAIN);
  JobSpec spec = TrainSpec(2, 1, 50);
  spec.mutable_checkpoint()->set_max_restarts(5);
  const std::string id = *t.c->Submit(spec);
  for (const auto& m : {a1, a2, w}) t.Beat(m, "");
  for (const auto& m : {a1, a2, w}) t.Beat(m, id);
  ASSERT_EQ(t.c->Get(id)->state(), RUNNING);
  for (int round = 0; round < 2; ++round) {
    t.now += absl::Seconds(6);
    t.Beat(w, id);
  }
  const JobStatus st = *t.c->Get(id);
  EXPECT_EQ(st.restarts(), 1) << Events(t, id);
  EXPECT_NE(Events(t, id).find("(the same restart)"), std::string::npos)
      << Events(t, id);
}

// A failover before the last step is applied may lose a last push that was
// only staged on the lost primary: a worker whose part had ended is needed
// again. Here worker 1 ended, then it and shard 1's primary go silent
// together: the backup is promoted, worker 1's slot is no longer done and,
// its member lost, it is free; the surviving worker takes it over.
TEST(CoordinatorReplicas, AFailoverMakesAnEndedWorkerComputeAgain) {
  ClockedCoordinator t;
  std::vector<std::string> ps;
  for (int i = 1; i <= 4; ++i) {
    ps.push_back(t.Join(PS, absl::StrCat("127.0.0.1:", i)));
  }
  const std::string w0 = t.Join(TRAIN), w1 = t.Join(TRAIN);
  JobSpec spec = TrainSpec(2, 2, 50);
  spec.set_replicas(2);
  const std::string id = *t.c->Submit(spec);
  std::string primary1;
  for (const auto& p : ps) {
    const Assignment a = t.Beat(p, "");
    if (!a.backup() && a.index() == 1) primary1 = p;
  }
  for (const auto& p : ps) t.Beat(p, id);  // installed
  const int slot1 = t.Beat(w1, id).index();
  std::string other = w0;
  ASSERT_EQ(t.Beat(w0, id).index(), 1 - slot1);
  ASSERT_TRUE(t.Done(w1, id));
  EXPECT_TRUE(t.c->Get(id)->slots(slot1).done());
  for (int round = 0; round < 4; ++round) {
    t.now += absl::Seconds(6);
    for (const auto& p : ps) {
      if (p != primary1) t.Beat(p, id);
    }
    t.Beat(other, id);
  }
  const JobStatus st = *t.c->Get(id);
  const std::string events = Events(t, id);
  EXPECT_EQ(st.failovers(), 1) << events;
  EXPECT_EQ(st.restarts(), 0) << events;
  EXPECT_FALSE(st.slots(slot1).done()) << events;
  EXPECT_EQ(st.slots(slot1).member(), other) << events;  // taken over
  EXPECT_TRUE(st.slots(slot1).shared());
  const Assignment a = t.Beat(other, id);
  ASSERT_EQ(a.also_indices_size(), 1) << events;
  EXPECT_EQ(a.also_indices(0), slot1);
}

// Losing every replica of a shard restarts the job from its checkpoint:
// every slot computes again from there, so none stays done (an ended
// worker's member starts its part again with the new start); a slot whose
// member is lost after that is free, not kept as done.
TEST(CoordinatorReplicas, ARestartLeavesNoSlotDone) {
  ClockedCoordinator t;
  const std::string ps = t.Join(PS, "127.0.0.1:1");
  const std::string w0 = t.Join(TRAIN), w1 = t.Join(TRAIN);
  JobSpec spec = TrainSpec(1, 2, 50);
  spec.mutable_checkpoint()->set_dir("ckpt");
  const std::string id = *t.c->Submit(spec);
  t.Beat(ps, "");
  t.Beat(ps, id);  // installed
  const int slot1 = t.Beat(w1, id).index();
  t.Beat(w0, id);
  ASSERT_TRUE(t.Done(w1, id));
  ASSERT_TRUE(t.c->Get(id)->slots(slot1).done());
  // The only shard is lost: a restart.
  for (int round = 0; round < 2; ++round) {
    t.now += absl::Seconds(6);
    t.Beat(w0, id), t.Beat(w1, id);
  }
  JobStatus st = *t.c->Get(id);
  ASSERT_EQ(st.restarts(), 1) << Events(t, id);
  EXPECT_FALSE(st.slots(slot1).done());
  EXPECT_EQ(st.slots(slot1).member(), w1);
  // Its member lost now: the slot is free, not done.
  for (int round = 0; round < 2; ++round) {
    t.now += absl::Seconds(6);
    t.Beat(w0, id);
  }
  st = *t.c->Get(id);
  EXPECT_FALSE(st.slots(slot1).done()) << Events(t, id);
  EXPECT_NE(st.slots(slot1).member(), w1) << Events(t, id);
}

}  // namespace
}  // namespace bertps

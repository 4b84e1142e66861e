// Replication in process: a backup that applies its primary's ReplicaSteps
// holds the same bits (parameters, optimizer state, clocks, example ledger)
// at every version, serves nothing until promoted, fences a replaced
// primary by its term, and, once promoted, takes the pushes its primary had
// staged but not applied.
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/ps/shard.h"
#include "server/ps/shard_test_util.h"

namespace bertps {
namespace ps {
namespace {

struct Case {
  const char* name;
  ConsistencyMode mode;
  int workers;
  int shards;
  optim::OptimizerKind kind;
};

class BackupFollows : public ::testing::TestWithParam<Case> {};

// Primaries with one backup each run steps; every backup, promoted, holds
// the same bits as its primary, and the same as shards that never had a
// backup.
TEST_P(BackupFollows, ItsPrimaryBitForBit) {
  const Case& c = GetParam();
  constexpr int kSteps = 4;
  auto run = [&](bool replicated, std::vector<std::string>* primary_state,
                 std::vector<std::string>* backup_state) {
    LocalLink peers, backup_peers;
    std::vector<std::unique_ptr<LocalReplicas>> links;
    std::vector<std::unique_ptr<ShardCore>> primaries, backups;
    for (int s = 0; s < c.shards; ++s) {
      links.push_back(std::make_unique<LocalReplicas>());
      if (replicated) {
        ShardOptions bo = TestShardOptions(c.mode, c.workers, c.shards, s, c.kind);
        bo.backup = true;
        bo.update_threads = 1;  // any thread count gives the same bits
        auto b = ShardCore::Create(bo, &backup_peers);
        ASSERT_TRUE(b.ok()) << b.status();
        links.back()->Add(b->get());
        backups.push_back(std::move(*b));
      }
      auto p = ShardCore::Create(TestShardOptions(c.mode, c.workers, c.shards, s, c.kind),
                                 &peers, links.back().get());
      ASSERT_TRUE(p.ok()) << p.status();
      peers.Set(s, p->get());
      primaries.push_back(std::move(*p));
    }
    for (int64_t step = 0; step < kSteps; ++step) {
      // Each worker's push to every shard, the shards at once (BSP: the
      // last push of a step runs the norm exchange with the peer shards).
      for (int w = 0; w < c.workers; ++w) {
        std::vector<std::thread> th;
        std::vector<absl::Status> st(c.shards);
        for (int s = 0; s < c.shards; ++s) {
          th.emplace_back([&, s] {
            st[s] = PushTestGrad(primaries[s].get(), w, step).status();
          });
        }
        for (auto& t : th) t.join();
        for (const auto& x : st) ASSERT_TRUE(x.ok()) << x;
      }
      // A worker pushes its next step once it pulled this one's version.
      if (c.mode == BSP) {
        for (int s = 0; s < c.shards; ++s) {
          ASSERT_TRUE(WaitVersion(primaries[s].get(), step + 1).ok());
        }
      }
    }
    const int64_t version = c.mode == BSP ? kSteps : kSteps * c.workers;
    for (int s = 0; s < c.shards; ++s) {
      ASSERT_TRUE(WaitVersion(primaries[s].get(), version).ok());
      EXPECT_EQ(primaries[s]->version(), version);
      primary_state->push_back(StateOf(primaries[s].get(), version, "p"));
      if (!replicated) continue;
      EXPECT_EQ(backups[s]->version(), version);
      EXPECT_EQ(links[s]->LiveBackups(), 1);
      EXPECT_EQ(primaries[s]->Stats().steps_replicated(), version);
      ASSERT_TRUE(backups[s]->Promote(1).ok());
      backup_state->push_back(StateOf(backups[s].get(), version, "b"));
      const StatsResponse a = primaries[s]->Stats(), b = backups[s]->Stats();
      EXPECT_EQ(a.example_ledger(), b.example_ledger());
      EXPECT_EQ(std::vector<int64_t>(a.worker_clock().begin(),
                                     a.worker_clock().end()),
                std::vector<int64_t>(b.worker_clock().begin(),
                                     b.worker_clock().end()));
      EXPECT_EQ(b.term(), 1);
      EXPECT_FALSE(b.backup());
    }
  };
  std::vector<std::string> primary, backup, alone, unused;
  run(true, &primary, &backup);
  run(false, &alone, &unused);
  ASSERT_EQ(primary.size(), static_cast<size_t>(c.shards));
  for (int s = 0; s < c.shards; ++s) {
    EXPECT_FALSE(primary[s].empty());
    EXPECT_TRUE(primary[s] == backup[s]) << "shard " << s;
    EXPECT_TRUE(primary[s] == alone[s]) << "shard " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, BackupFollows,
    ::testing::Values(
        Case{"BspAdamW", BSP, 2, 1, optim::OptimizerKind::kAdamW},
        Case{"BspAdamWTwoShards", BSP, 3, 2, optim::OptimizerKind::kAdamW},
        // LAMB over 2 shards: tensors split over both exchange their
        // per-tensor totals; the backups take them from the step.
        Case{"BspLambTwoShards", BSP, 2, 2, optim::OptimizerKind::kLamb},
        Case{"AspAdamW", ASP, 2, 1, optim::OptimizerKind::kAdamW}),
    [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

struct LossCase {
  const char* name;
  ReplicaStep::Kind at;  // where primary 1 is lost in step 2
  optim::OptimizerKind kind;
};

class PrimaryLost : public ::testing::TestWithParam<LossCase> {};

// Two shards, two workers, BSP. In step 2 the primary of shard 1 is lost
// after its backup got the step's aggregate: before the norm exchange
// (STAGE: shard 0 waits for shard 1's partial sums) or after it (COMMIT:
// shard 0 applied the step already). Its backup, promoted, completes the
// step with the peer's norms; two steps later every shard holds the same
// bits as a run without the loss.
TEST_P(PrimaryLost, ItsPromotedBackupCompletesTheStep) {
  const LossCase& c = GetParam();
  constexpr int kSteps = 4, kLost = 2;
  auto run = [&](bool lose) -> std::vector<std::string> {
    LocalLink peers;
    LocalReplicas link0, link1;
    ShardOptions bo = TestShardOptions(BSP, 2, 2, 1, c.kind);
    bo.backup = true;
    auto b1 = ShardCore::Create(bo, &peers);  // its daemon's link to the peers
    EXPECT_TRUE(b1.ok());
    link1.Add(b1->get());
    auto p0 = ShardCore::Create(TestShardOptions(BSP, 2, 2, 0, c.kind), &peers, &link0);
    auto p1 = ShardCore::Create(TestShardOptions(BSP, 2, 2, 1, c.kind), &peers, &link1);
    EXPECT_TRUE(p0.ok() && p1.ok());
    peers.Set(0, p0->get());
    peers.Set(1, p1->get());
    ShardCore* serving[2] = {p0->get(), p1->get()};
    absl::Notification reached, release;
    for (int64_t step = 0; step < kSteps; ++step) {
      if (lose && step == kLost) link1.DieAt(c.at, &reached, &release);
      std::vector<std::thread> th;
      std::vector<absl::Status> st(4);
      for (int w = 0; w < 2; ++w) {
        for (int s = 0; s < 2; ++s) {
          th.emplace_back([&, w, s] {
            st[w * 2 + s] = PushTestGrad(serving[s], w, step).status();
          });
        }
      }
      if (lose && step == kLost) {
        reached.WaitForNotification();  // primary 1 is "lost" here
        peers.Set(1, b1->get());
        EXPECT_TRUE((*b1)->Promote(1).ok());
        serving[1] = b1->get();
        // The promoted backup makes version 3 itself.
        auto snap = (*b1)->AcquireSnapshot(0, kLost + 1, 0,
                                           absl::Now() + absl::Seconds(5));
        EXPECT_TRUE(snap.ok()) << snap.status();
        release.Notify();  // the old primary's call ends, refused
      }
      for (auto& t : th) t.join();
      for (int k = 0; k < 4; ++k) {
        // The push that made the lost primary's step fails with it; its
        // worker's retry to the new primary is a duplicate.
        if (lose && step == kLost && k % 2 == 1 && !st[k].ok()) {
          EXPECT_EQ(st[k].code(), absl::StatusCode::kAborted) << st[k];
          auto again = PushTestGrad(serving[1], k / 2, step);
          EXPECT_TRUE(again.ok() && again->duplicate()) << again.status();
          continue;
        }
        EXPECT_TRUE(st[k].ok()) << "push " << k << " of step " << step
                                << ": " << st[k];
      }
      for (int s = 0; s < 2; ++s) {
        EXPECT_TRUE(WaitVersion(serving[s], step + 1).ok()) << step;
      }
    }
    std::vector<std::string> out;
    for (int s = 0; s < 2; ++s) {
      EXPECT_TRUE(WaitVersion(serving[s], kSteps).ok());
      EXPECT_EQ(serving[s]->version(), kSteps);
      out.push_back(StateOf(serving[s], kSteps, absl::StrCat("lost", lose)));
    }
    return out;
  };
  const std::vector<std::string> lost = run(true), whole = run(false);
  ASSERT_EQ(lost.size(), 2u);
  for (int s = 0; s < 2; ++s) {
    EXPECT_FALSE(lost[s].empty());
    EXPECT_TRUE(lost[s] == whole[s]) << "shard " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Points, PrimaryLost,
    ::testing::Values(
        LossCase{"BeforeTheNormExchange", ReplicaStep::STAGE,
                 optim::OptimizerKind::kAdamW},
        LossCase{"AfterTheNormExchange", ReplicaStep::COMMIT,
                 optim::OptimizerKind::kAdamW},
        LossCase{"LambBeforeTheNormExchange", ReplicaStep::STAGE,
                 optim::OptimizerKind::kLamb},
        LossCase{"LambAfterTheNormExchange", ReplicaStep::COMMIT,
                 optim::OptimizerKind::kLamb}),
    [](const ::testing::TestParamInfo<LossCase>& i) { return i.param.name; });

TEST(Replica, ABackupServesNothingUntilPromoted) {
  ShardOptions o = TestShardOptions(BSP, 1, 1, 0);
  o.backup = true;
  o.term = 3;
  auto b = ShardCore::Create(o, nullptr);
  ASSERT_TRUE(b.ok());
  absl::Status st = PushTestGrad(b->get(), 0, 0).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("is a backup (term 3)"), std::string::npos) << st;
  auto snap = (*b)->AcquireSnapshot(0, 0, 0, absl::Now() + absl::Seconds(1));
  EXPECT_EQ(snap.status().code(), absl::StatusCode::kUnavailable);
  AnnounceRequest a;
  a.set_worker(0);
  EXPECT_EQ((*b)->Announce(a, absl::Now() + absl::Seconds(1)).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ((*b)->Checkpoint(::testing::TempDir(), 0,
                             absl::Now() + absl::Seconds(1))
                .status()
                .code(),
            absl::StatusCode::kUnavailable);
  // A promotion needs a higher term; then it serves.
  EXPECT_EQ((*b)->Promote(3).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*b)->Promote(4).ok());
  EXPECT_TRUE(PushTestGrad(b->get(), 0, 0).ok());
  EXPECT_EQ((*b)->version(), 1);
  EXPECT_EQ((*b)->Promote(5).code(), absl::StatusCode::kFailedPrecondition);
}

// A step of a lower term is refused (ABORTED): the primary that sent it
// was replaced, and it then applies and serves nothing. The version it
// made is never published.
TEST(Replica, AReplacedPrimaryIsFencedByTheTerm) {
  ShardOptions bo = TestShardOptions(BSP, 1, 1, 0);
  bo.backup = true;
  auto b = ShardCore::Create(bo, nullptr);
  ASSERT_TRUE(b.ok());
  LocalReplicas link;
  link.Add(b->get());
  auto p = ShardCore::Create(TestShardOptions(BSP, 1, 1, 0), nullptr, &link);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(PushTestGrad(p->get(), 0, 0).ok());
  ASSERT_TRUE(WaitVersion(p->get(), 1).ok());
  EXPECT_EQ((*b)->version(), 1);
  // The backup is promoted (term 1) while the old primary lives on. The
  // old primary takes a push (answered before its step runs), but its
  // step is refused by the backup.
  ASSERT_TRUE((*b)->Promote(1).ok());
  ASSERT_TRUE(PushTestGrad(p->get(), 0, 1).ok());
  absl::Status st = WaitVersion(p->get(), 2);
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted) << st;
  EXPECT_NE(st.message().find("at term 1: the primary of term 0 was replaced"),
            std::string::npos)
      << st;
  EXPECT_EQ((*p)->version(), 1);  // step 1 never published
  auto snap = (*p)->AcquireSnapshot(0, 2, 0, absl::Now() + absl::Seconds(1));
  EXPECT_EQ(snap.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(PushTestGrad(p->get(), 0, 2).status().code(), absl::StatusCode::kAborted);
  // The new primary went on from version 1.
  EXPECT_TRUE(PushTestGrad(b->get(), 0, 1).ok());
  EXPECT_EQ((*b)->version(), 2);
}

TEST(Replica, StepsOutOfOrderOrMalformedChangeNothing) {
  ShardOptions bo = TestShardOptions(BSP, 2, 1, 0);
  bo.backup = true;
  bo.term = 2;
  auto b = ShardCore::Create(bo, nullptr);
  ASSERT_TRUE(b.ok());
  const int64_t n = (*b)->shard_size();
  std::vector<float> g(n, 0.01f);
  ReplicaStep s;
  s.set_term(2);
  s.set_version(0);
  s.set_grad_scale(1);
  s.set_grad_sq_sum(1e-4 * n);
  s.add_workers(0);
  s.add_steps(0);
  s.add_first_examples(0);
  s.add_examples(4);
  s.set_grad_elements(n);
  const absl::Time dl = absl::Now() + absl::Seconds(5);
  auto expect = [&](ReplicaStep bad, absl::StatusCode code,
                    const std::string& text) {
    absl::StatusOr<ReplicateResponse> r = (*b)->ApplyReplicated(bad, g.data(), dl);
    EXPECT_EQ(r.status().code(), code) << r.status();
    EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status();
    EXPECT_EQ((*b)->version(), 0);
  };
  ReplicaStep x = s;
  x.set_version(1);
  expect(x, absl::StatusCode::kFailedPrecondition, "needs a catch-up");
  x = s;
  x.set_term(1);
  expect(x, absl::StatusCode::kAborted, "was replaced");
  x = s;
  x.set_grad_elements(n - 1);
  expect(x, absl::StatusCode::kInvalidArgument, "gradient elements");
  x = s;
  x.add_steps(1);
  expect(x, absl::StatusCode::kInvalidArgument, "as many");
  x = s;
  x.set_workers(0, 2);
  expect(x, absl::StatusCode::kInvalidArgument, "out of range");
  x = s;
  x.set_grad_sq_sum(std::nan(""));
  expect(x, absl::StatusCode::kInvalidArgument, "not finite");
  x = s;
  x.set_incarnation(7);
  expect(x, absl::StatusCode::kAborted, "incarnation 7");
  // Applied once; the same step again is a duplicate and changes nothing.
  auto r = (*b)->ApplyReplicated(s, g.data(), dl);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->version(), 1);
  EXPECT_FALSE(r->duplicate());
  r = (*b)->ApplyReplicated(s, g.data(), dl);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->duplicate());
  EXPECT_EQ((*b)->version(), 1);
  EXPECT_EQ((*b)->Stats().example_ledger(), "0;0-4");
  // A newer primary's term is followed from then on.
  s.set_term(5);
  s.set_version(1);
  ASSERT_TRUE((*b)->ApplyReplicated(s, g.data(), dl).ok());
  EXPECT_EQ((*b)->term(), 5);
}

// A pull of the new version waits until the backup has it.
TEST(Replica, AVersionIsServedOnlyOnceTheBackupHasIt) {
  ShardOptions bo = TestShardOptions(BSP, 1, 1, 0);
  bo.backup = true;
  auto b = ShardCore::Create(bo, nullptr);
  ASSERT_TRUE(b.ok());
  LocalReplicas link;
  link.Add(b->get());
  absl::Notification gate;
  link.SetGate(&gate);
  auto p = ShardCore::Create(TestShardOptions(BSP, 1, 1, 0), nullptr, &link);
  ASSERT_TRUE(p.ok());
  absl::Status pushed;
  std::thread t([&] { pushed = PushTestGrad(p->get(), 0, 0).status(); });
  auto early =
      (*p)->AcquireSnapshot(0, 1, 0, absl::Now() + absl::Milliseconds(300));
  EXPECT_EQ(early.status().code(), absl::StatusCode::kDeadlineExceeded)
      << early.status();
  EXPECT_EQ((*b)->version(), 0);
  gate.Notify();
  auto later = (*p)->AcquireSnapshot(0, 1, 0, absl::Now() + absl::Seconds(5));
  t.join();
  ASSERT_TRUE(pushed.ok()) << pushed;
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ((*later)->version, 1);
  EXPECT_EQ((*b)->version(), 1);
}

// The primary is lost with one push of step 1 staged (acknowledged, not
// applied). The promoted backup takes that push again from its worker and
// the other worker's: the same parameters as a run with no loss.
TEST(Replica, APromotedBackupTakesThePushesItsPrimaryHadStaged) {
  auto final_params = [](bool lose) {
    ShardOptions bo = TestShardOptions(BSP, 2, 1, 0);
    bo.backup = true;
    auto b = ShardCore::Create(bo, nullptr);
    EXPECT_TRUE(b.ok());
    LocalReplicas link;
    link.Add(b->get());
    auto p = ShardCore::Create(TestShardOptions(BSP, 2, 1, 0), nullptr, &link);
    EXPECT_TRUE(p.ok());
    for (int w = 0; w < 2; ++w) EXPECT_TRUE(PushTestGrad(p->get(), w, 0).ok());
    EXPECT_TRUE(WaitVersion(p->get(), 1).ok());
    EXPECT_TRUE(PushTestGrad(p->get(), 0, 1).ok());  // staged on the primary
    ShardCore* serving = p->get();
    if (lose) {
      EXPECT_TRUE((*b)->Promote(1).ok());
      serving = b->get();
      auto again = PushTestGrad(serving, 0, 1);  // the worker's retry
      EXPECT_TRUE(again.ok() && !again->duplicate());
      // A retry of step 0 is recognised as applied.
      auto old = PushTestGrad(serving, 1, 0);
      EXPECT_TRUE(old.ok() && old->duplicate());
    }
    EXPECT_TRUE(PushTestGrad(serving, 1, 1).ok());
    auto snap = serving->AcquireSnapshot(0, 2, 0, absl::Now() + absl::Seconds(5));
    EXPECT_TRUE(snap.ok());
    EXPECT_EQ(serving->Stats().example_ledger(), "0;0-16");
    return std::vector<float>((*snap)->params.begin(), (*snap)->params.end());
  };
  EXPECT_TRUE(final_params(true) == final_params(false));
}

// A backup that is behind is dropped; the primary goes on alone and
// publishes at once again.
TEST(Replica, ABackupBehindIsDroppedAndThePrimaryGoesOn) {
  ShardOptions bo = TestShardOptions(BSP, 1, 1, 0);
  bo.backup = true;
  auto b = ShardCore::Create(bo, nullptr);
  ASSERT_TRUE(b.ok());
  LocalReplicas link;
  auto p = ShardCore::Create(TestShardOptions(BSP, 1, 1, 0), nullptr, &link);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(PushTestGrad(p->get(), 0, 0).ok());  // no backup yet: not replicated
  link.Add(b->get());                      // one that missed step 0
  ASSERT_TRUE(PushTestGrad(p->get(), 0, 1).ok());
  ASSERT_TRUE(WaitVersion(p->get(), 2).ok());
  EXPECT_EQ((*p)->version(), 2);
  EXPECT_EQ((*b)->version(), 0);
  EXPECT_EQ(link.LiveBackups(), 0);
  ASSERT_EQ(link.dropped().size(), 1u);
  EXPECT_NE(link.dropped()[0].find("needs a catch-up"), std::string::npos);
  EXPECT_EQ((*p)->Stats().steps_replicated(), 0);
  ASSERT_TRUE(PushTestGrad(p->get(), 0, 2).ok());
  ASSERT_TRUE(WaitVersion(p->get(), 3).ok());
}

}  // namespace
}  // namespace ps
}  // namespace bertps

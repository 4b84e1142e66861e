// Re-replication in process: a backup that joins a running job takes its
// primary's snapshot (SnapshotForJoin -> InstallSnapshot), follows the
// steps applied after it, and, promoted, holds the same bits as its primary
// and as a shard that never had a backup. A bad snapshot changes nothing.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/ps/shard.h"
#include "server/ps/shard_test_util.h"

namespace bertps {
namespace ps {
namespace {

struct JoinCase {
  const char* name;
  ConsistencyMode mode;
};

class BackupJoins : public ::testing::TestWithParam<JoinCase> {};

// Two workers; the backup joins after step 3 of 6 and is promoted at the
// end: the same bits as its primary, and as a run that never replicated.
TEST_P(BackupJoins, AndFollowsItsPrimaryBitForBit) {
  const JoinCase& c = GetParam();
  constexpr int kSteps = 6, kJoinAt = 3;
  auto run = [&](bool join, std::string* primary_state,
                 std::string* backup_state) {
    LocalLink peers, backup_peers;
    LocalReplicas link;
    ShardOptions bo = TestShardOptions(c.mode, 2, 1, 0);
    bo.backup = true;
    auto b = ShardCore::Create(bo, &backup_peers);
    ASSERT_TRUE(b.ok()) << b.status();
    auto p = ShardCore::Create(TestShardOptions(c.mode, 2, 1, 0), &peers, &link);
    ASSERT_TRUE(p.ok()) << p.status();
    peers.Set(0, p->get());
    ShardCore* primary = p->get();
    ShardCore* backup = b->get();
    for (int64_t step = 0; step < kSteps; ++step) {
      if (join && step == kJoinAt) {
        int64_t begun = -1;
        auto snap = primary->SnapshotForJoin([&](int64_t v) {
          begun = v;
          link.Add(backup);  // every later step reaches it
        });
        ASSERT_TRUE(snap.ok()) << snap.status();
        const int64_t at = c.mode == BSP ? kJoinAt : kJoinAt * 2;
        EXPECT_EQ(begun, at);
        EXPECT_EQ(snap->header.version(), at);
        auto v = backup->InstallSnapshot(snap->header, snap->data.data());
        ASSERT_TRUE(v.ok()) << v.status();
        EXPECT_EQ(*v, at);
        EXPECT_EQ(backup->Stats().example_ledger(),
                  primary->Stats().example_ledger());
      }
      for (int w = 0; w < 2; ++w) {
        ASSERT_TRUE(PushTestGrad(primary, w, step).ok());
      }
      if (c.mode == BSP) {
        ASSERT_TRUE(WaitVersion(primary, step + 1).ok());
      }
    }
    const int64_t version = c.mode == BSP ? kSteps : kSteps * 2;
    ASSERT_TRUE(WaitVersion(primary, version).ok());
    *primary_state = StateOf(primary, version, "join-p");
    if (!join) return;
    EXPECT_EQ(backup->version(), version);
    ASSERT_TRUE(backup->Promote(1).ok());
    *backup_state = StateOf(backup, version, "join-b");
    EXPECT_EQ(backup->Stats().worker_clock(0), primary->Stats().worker_clock(0));
  };
  std::string primary, backup, alone, unused;
  run(true, &primary, &backup);
  run(false, &alone, &unused);
  EXPECT_FALSE(primary.empty());
  EXPECT_TRUE(primary == backup);
  EXPECT_TRUE(primary == alone);
}

INSTANTIATE_TEST_SUITE_P(Modes, BackupJoins,
                         ::testing::Values(JoinCase{"Bsp", BSP},
                                           JoinCase{"Asp", ASP}),
                         [](const ::testing::TestParamInfo<JoinCase>& i) {
                           return i.param.name;
                         });

// Snapshots that are not this backup's to take: each refused with a clear
// error, and the backup unchanged (still at version 0, able to take a good
// one afterwards).
TEST(BackupJoins, BadSnapshotsChangeNothing) {
  LocalLink peers, backup_peers;
  LocalReplicas link;
  auto p = ShardCore::Create(TestShardOptions(BSP, 2, 1, 0), &peers, &link);
  ASSERT_TRUE(p.ok());
  peers.Set(0, p->get());
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(PushTestGrad(p->get(), w, 0).ok());
  ASSERT_TRUE(WaitVersion(p->get(), 1).ok());
  auto snap = (*p)->SnapshotForJoin([](int64_t) {});
  ASSERT_TRUE(snap.ok());
  ShardOptions bo = TestShardOptions(BSP, 2, 1, 0);
  bo.backup = true;
  bo.term = 2;
  auto b = ShardCore::Create(bo, &backup_peers);
  ASSERT_TRUE(b.ok());
  const float* data = snap->data.data();
  struct Bad {
    const char* what;
    std::function<void(SnapshotHeader&)> edit;
    absl::StatusCode code;
    const char* says;
  };
  const std::vector<Bad> bad = {
      {"another incarnation", [](SnapshotHeader& h) { h.set_incarnation(7); },
       absl::StatusCode::kAborted, "incarnation"},
      {"a replaced primary's", [](SnapshotHeader& h) { h.set_term(1); },
       absl::StatusCode::kAborted, "was replaced"},
      {"a wrong size", [](SnapshotHeader& h) { h.set_params_elements(3); },
       absl::StatusCode::kInvalidArgument, "parameters"},
      {"clocks past the version",
       [](SnapshotHeader& h) { h.set_worker_clock(1, 5); },
       absl::StatusCode::kInvalidArgument, "out of range"},
      {"too few clocks", [](SnapshotHeader& h) { h.clear_worker_clock(); },
       absl::StatusCode::kInvalidArgument, "clocks"},
      {"a checksum that does not match",
       [](SnapshotHeader& h) { h.set_crc32c(h.crc32c() ^ 1); },
       absl::StatusCode::kDataLoss, "checksum"},
      {"a bad ledger",
       [](SnapshotHeader& h) { h.set_example_ledger("no;such"); },
       absl::StatusCode::kDataLoss, "malformed"},
  };
  for (const Bad& x : bad) {
    SnapshotHeader h = snap->header;
    h.set_term(2);
    x.edit(h);
    auto r = (*b)->InstallSnapshot(h, data);
    ASSERT_FALSE(r.ok()) << x.what;
    EXPECT_EQ(r.status().code(), x.code) << x.what << ": " << r.status();
    EXPECT_NE(r.status().message().find(x.says), std::string::npos)
        << x.what << ": " << r.status();
    EXPECT_EQ((*b)->version(), 0) << x.what;
  }
  // A primary takes no snapshot; a backup sends none.
  auto r = (*p)->InstallSnapshot(snap->header, data);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*b)->SnapshotForJoin([](int64_t) {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // The good one still installs.
  SnapshotHeader h = snap->header;
  h.set_term(2);
  auto ok = (*b)->InstallSnapshot(h, data);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*b)->version(), 1);
  EXPECT_EQ((*b)->term(), 2);
}

}  // namespace
}  // namespace ps
}  // namespace bertps

// Re-replication over gRPC on 127.0.0.1: a backup joins a primary that
// keeps stepping (its snapshot streamed, the steps since sent in order,
// then it acknowledges every step) and ends bit-equal to its primary; a
// join that cannot happen is reported dropped; malformed InstallSnapshot
// calls are refused and change nothing.
#include <algorithm>
#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/ps/wire.h"
#include "common/status.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/ps/server.h"
#include "server/ps/shard_test_util.h"

namespace bertps {
namespace ps {
namespace {

ShardOptions JoinOpts(bool backup) {
  ShardOptions o = TestShardOptions(BSP, 1, 1, 0);
  o.incarnation = 3;
  o.backup = backup;
  return o;
}

absl::Status Step(ShardServer* s, int64_t step) {
  RETURN_IF_ERROR(PushTestGrad(s->core(), 0, step).status());
  return WaitVersion(s->core(), step + 1);
}

// Polls `f` until it returns a non-empty list or 20 s pass.
std::vector<std::string> Await(
    const std::function<std::vector<std::string>()>& f) {
  const absl::Time end = absl::Now() + absl::Seconds(20);
  std::vector<std::string> out;
  while (out.empty() && absl::Now() < end) {
    out = f();
    if (out.empty()) absl::SleepFor(absl::Milliseconds(10));
  }
  return out;
}

TEST(ReplicaLinkTest, BackupJoinsWhileThePrimarySteps) {
  auto primary = *ShardServer::Start(JoinOpts(false), "127.0.0.1:0", {});
  auto backup = *ShardServer::Start(JoinOpts(true), "127.0.0.1:0", {});
  // The primary steps all along: from before the join until 10 steps after
  // the backup caught up (steps made while the snapshot travels are queued
  // for it and sent in order).
  std::atomic<int64_t> done{0};
  std::atomic<int64_t> stop_at{1 << 30};
  absl::Status stepping;
  std::thread steps([&] {
    for (int64_t s = 0; s < stop_at && stepping.ok(); ++s) {
      stepping = Step(primary.get(), s);
      done = s + 1;
      absl::SleepFor(absl::Milliseconds(2));  // the workers' compute
    }
  });
  while (done < 5) absl::SleepFor(absl::Milliseconds(1));
  GrpcReplicaLink& link = primary->replica_link();
  const int64_t before = done;
  link.SetBackups({}, {backup->address()}, primary->shared_core());
  const std::vector<std::string> joined =
      Await([&] { return link.TakeJoined(); });
  stop_at = done + 10;
  steps.join();
  ASSERT_TRUE(stepping.ok()) << stepping;
  const int64_t kSteps = done;
  ASSERT_EQ(joined, std::vector<std::string>{backup->address()});
  EXPECT_TRUE(link.TakeDropped().empty());
  EXPECT_EQ(link.LiveBackups(), 1);
  EXPECT_GT(kSteps, before + 10);
  // Every step after the join was acknowledged by it before publishing.
  EXPECT_EQ(backup->core()->version(), kSteps);
  EXPECT_EQ(backup->core()->Stats().example_ledger(),
            primary->core()->Stats().example_ledger());
  const std::string p = StateOf(primary->core(), kSteps, "link-p");
  ASSERT_TRUE(backup->core()->Promote(1).ok());
  const std::string b = StateOf(backup->core(), kSteps, "link-b");
  EXPECT_FALSE(p.empty());
  EXPECT_TRUE(p == b) << "the joined backup differs from its primary";
  // The coordinator's list now names it live: kept, not joined again.
  link.SetBackups({backup->address()}, {}, primary->shared_core());
  EXPECT_EQ(link.LiveBackups(), 1);
}

// replicas: 3: both backups get every step (sent to both at once) and hold
// their primary's bits.
TEST(ReplicaLinkTest, TwoBackupsFollowTheirPrimary) {
  auto b1 = *ShardServer::Start(JoinOpts(true), "127.0.0.1:0", {});
  auto b2 = *ShardServer::Start(JoinOpts(true), "127.0.0.1:0", {});
  auto primary = *ShardServer::StartIdle("127.0.0.1:0");
  ASSERT_TRUE(
      primary->Install(JoinOpts(false), {}, {b1->address(), b2->address()})
          .ok());
  constexpr int64_t kSteps = 6;
  for (int64_t s = 0; s < kSteps; ++s) ASSERT_TRUE(Step(primary.get(), s).ok());
  EXPECT_EQ(primary->core()->Stats().live_backups(), 2);
  EXPECT_EQ(primary->core()->Stats().steps_replicated(), kSteps);
  EXPECT_TRUE(primary->replica_link().TakeDropped().empty());
  const std::string p = StateOf(primary->core(), kSteps, "two-p");
  for (ShardServer* b : {b1.get(), b2.get()}) {
    EXPECT_EQ(b->core()->version(), kSteps);
    ASSERT_TRUE(b->core()->Promote(1).ok());
    EXPECT_TRUE(StateOf(b->core(), kSteps, "two-b") == p) << b->address();
  }
}

TEST(ReplicaLinkTest, AJoinThatCannotHappenIsReportedDropped) {
  auto primary = *ShardServer::Start(JoinOpts(false), "127.0.0.1:0", {});
  ASSERT_TRUE(Step(primary.get(), 0).ok());
  // Another incarnation's backup (ABORTED), and nobody listening.
  ShardOptions other = JoinOpts(true);
  other.incarnation = 4;
  auto stale = *ShardServer::Start(other, "127.0.0.1:0", {});
  auto gone = *ShardServer::StartIdle("127.0.0.1:0");
  const std::string nobody = gone->address();
  gone->Shutdown();
  gone.reset();
  GrpcReplicaLink& link = primary->replica_link();
  link.SetBackups({}, {stale->address(), nobody}, primary->shared_core());
  std::vector<std::string> dropped;
  const absl::Time end = absl::Now() + absl::Seconds(20);
  while (dropped.size() < 2 && absl::Now() < end) {
    for (std::string& d : link.TakeDropped()) dropped.push_back(d);
    absl::SleepFor(absl::Milliseconds(10));
  }
  std::sort(dropped.begin(), dropped.end());
  std::vector<std::string> want = {stale->address(), nobody};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(dropped, want);
  EXPECT_TRUE(link.TakeJoined().empty());
  EXPECT_EQ(stale->core()->version(), 0);
  // The primary goes on, with no backup.
  EXPECT_FALSE(link.Active());
  ASSERT_TRUE(Step(primary.get(), 1).ok());
}

TEST(ReplicaLinkTest, MalformedSnapshotsAreRefused) {
  auto backup = *ShardServer::Start(JoinOpts(true), "127.0.0.1:0", {});
  auto stub = ParameterServer::NewStub(grpc::CreateCustomChannel(
      backup->address(), grpc::InsecureChannelCredentials(),
      ClientChannelArguments()));
  auto call = [&](const std::vector<SnapshotChunk>& msgs,
                  const std::string& incarnation = "3") {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    ctx.AddMetadata(kIncarnationMetadata, incarnation);
    InstallSnapshotResponse resp;
    auto w = stub->InstallSnapshot(&ctx, &resp);
    for (const auto& m : msgs) {
      if (!w->Write(m)) break;
    }
    w->WritesDone();
    return w->Finish();
  };
  const int64_t n = backup->core()->shard_size();
  const int64_t state = 2 * n;  // AdamW: two slots
  SnapshotChunk head;
  SnapshotHeader* h = head.mutable_header();
  h->set_incarnation(3);
  h->set_params_elements(n);
  h->set_state_elements(state);
  h->add_worker_clock(0);
  h->add_last_step(-1);
  SnapshotChunk bytes;
  bytes.set_data(std::string(4 * (n + state) - 4, '\0'));
  SnapshotChunk more;
  more.set_data(std::string(8, '\0'));
  auto expect = [&](grpc::Status s, grpc::StatusCode code,
                    const std::string& text) {
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_NE(s.error_message().find(text), std::string::npos)
        << s.error_message();
  };
  expect(call({bytes}), grpc::StatusCode::INVALID_ARGUMENT,
         "the first message must be the header");
  expect(call({head, bytes}), grpc::StatusCode::INVALID_ARGUMENT,
         absl::StrCat("came with ", 4 * (n + state) - 4));
  expect(call({head, bytes, more}), grpc::StatusCode::INVALID_ARGUMENT,
         "more than the");
  expect(call({head, head}), grpc::StatusCode::INVALID_ARGUMENT,
         "only data follows");
  expect(call({head}, "2"), grpc::StatusCode::ABORTED, "incarnation 2");
  SnapshotChunk huge = head;
  huge.mutable_header()->set_state_elements(int64_t{1} << 40);
  expect(call({huge}), grpc::StatusCode::INVALID_ARGUMENT, "state values");
  // Whole, but its checksum is not of these bytes.
  SnapshotChunk whole;
  whole.set_data(std::string(4 * (n + state), '\0'));
  SnapshotChunk bad = head;
  bad.mutable_header()->set_crc32c(12345);
  expect(call({bad, whole}), grpc::StatusCode::DATA_LOSS, "checksum");
  EXPECT_EQ(backup->core()->version(), 0);
}

}  // namespace
}  // namespace ps
}  // namespace bertps

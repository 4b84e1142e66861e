// Asynchronous checkpoints at the shard (CheckpointRequest START / COLLECT):
// the file is byte for byte the synchronous one, steps go on while it is
// written, at most one write is in flight, and what is answered is never a
// stale or torn file.
#include <chrono>
#include <string>
#include <vector>

#include "common/io/crc32c.h"
#include "common/io/rate_limited_file_system.h"
#include "common/ps/checkpoint.h"
#include "gtest/gtest.h"
#include "server/ps/shard.h"
#include "server/ps/shard_test_util.h"

namespace bertps {
namespace ps {
namespace {

ShardOptions Opts(int workers) {
  ShardOptions o;
  o.config = Small();
  o.optimizer.learning_rate = 0.01;
  o.job_plan = PlanFor(BSP, workers, o.optimizer);
  o.wait_timeout = absl::Seconds(10);
  return o;
}

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

std::string Tmp(const std::string& name) {
  return ::testing::TempDir() + "/shard-ckpt-" + name;
}

void Steps(ShardCore* core, int64_t from, int64_t to) {
  for (int64_t s = from; s < to; ++s) {
    ASSERT_TRUE(PushConst(core, 0, s, 0.01f * (s + 1)).ok());
  }
}

// The background file equals the synchronous one of the same state, and
// the shard applies the next steps while (or after) it is written.
TEST(ShardCheckpoint, BackgroundFileIsTheSynchronousOne) {
  auto a = *ShardCore::Create(Opts(1), nullptr);
  auto b = *ShardCore::Create(Opts(1), nullptr);
  Steps(a.get(), 0, 3);
  Steps(b.get(), 0, 3);
  auto sync = a->Checkpoint(Tmp("sync"), 3, Soon());
  ASSERT_TRUE(sync.ok()) << sync.status();
  EXPECT_FALSE(sync->pending());
  auto started =
      b->Checkpoint(Tmp("async"), 3, Soon(), CheckpointRequest::START);
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ(started->example_ledger(), sync->example_ledger());
  Steps(b.get(), 3, 5);  // the write does not hold the steps back
  EXPECT_EQ(b->version(), 5);
  auto done =
      b->Checkpoint(Tmp("async"), 3, Soon(), CheckpointRequest::COLLECT);
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_FALSE(done->pending());
  EXPECT_EQ(done->crc32c(), sync->crc32c());
  EXPECT_EQ(done->bytes(), sync->bytes());
  EXPECT_EQ(ReadTestFile(done->file()), ReadTestFile(sync->file()));
  EXPECT_GE(done->write_ms(), 0);
  // Past it now: a new one of version 3 is refused, as before.
  auto late = b->Checkpoint(Tmp("late"), 3, Soon(), CheckpointRequest::START);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  // A write this shard never had: NotFound (a replaced shard's).
  auto unknown =
      b->Checkpoint(Tmp("async"), 4, Soon(), CheckpointRequest::COLLECT);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
}

// On a slow volume (a paced file system) the START answers while the file
// is still being written, the steps go on meanwhile, and the next cut waits
// for the write in flight (at most one per shard) instead of skipping it.
TEST(ShardCheckpoint, OneWriteInFlightAndTheStepsGoOn) {
  ShardOptions o = Opts(1);
  const int64_t file_bytes = 4 * 3 * ShardCore::Create(o, nullptr).value()->shard_size();
  // About 1.5 s per file: the START answers long before, even on a loaded
  // machine.
  io::RateLimitedFileSystem slow(file_bytes / 1.5);
  o.fs = &slow;
  auto core = *ShardCore::Create(o, nullptr);
  Steps(core.get(), 0, 2);
  const auto t0 = std::chrono::steady_clock::now();
  auto first = core->Checkpoint(Tmp("slow"), 2, Soon(),
                                CheckpointRequest::START);
  ASSERT_TRUE(first.ok()) << first.status();
  const double start_ms = std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - t0)
                              .count();
  EXPECT_TRUE(first->pending());
  EXPECT_LT(start_ms, 1000) << "the START waited for the write";
  Steps(core.get(), 2, 3);
  EXPECT_EQ(core->version(), 3);
  EXPECT_EQ(core->checkpoint_waits(), 0);
  auto second = core->Checkpoint(Tmp("slow"), 3, Soon(),
                                 CheckpointRequest::START);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(core->checkpoint_waits(), 1);
  // Version 2's write, durable before the second copy began, is still
  // collected after it (worker 0 may be a cut behind).
  auto f2 = core->Checkpoint(Tmp("slow"), 2, Soon(), CheckpointRequest::COLLECT);
  ASSERT_TRUE(f2.ok()) << f2.status();
  EXPECT_FALSE(f2->pending());
  EXPECT_EQ(io::Crc32c(ReadTestFile(f2->file()).data(), f2->bytes()),
            f2->crc32c());
  auto f3 = core->Checkpoint(Tmp("slow"), 3, Soon(), CheckpointRequest::COLLECT);
  ASSERT_TRUE(f3.ok()) << f3.status();
  EXPECT_FALSE(f3->pending());
  EXPECT_EQ(io::Crc32c(ReadTestFile(f3->file()).data(), f3->bytes()),
            f3->crc32c());
  EXPECT_EQ(static_cast<int64_t>(
                ReadTestFile(Tmp("slow") + "/ckpt-2/shard-0-of-1.safetensors")
                    .size()),
            f3->bytes());
}

// A worker 0 started again that asks again for the checkpoint it had
// started gets that write (not a second copy of a later state); after a
// restore, the same version is another state and is written anew.
TEST(ShardCheckpoint, AskedAgainAnswersTheSameWriteButNotAfterARestore) {
  auto core = *ShardCore::Create(Opts(1), nullptr);
  Steps(core.get(), 0, 2);
  auto first = core->Checkpoint(Tmp("again"), 2, Soon(),
                                CheckpointRequest::START);
  ASSERT_TRUE(first.ok()) << first.status();
  Steps(core.get(), 2, 4);
  auto again = core->Checkpoint(Tmp("again"), 2, Soon());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->pending());
  const std::string bytes = ReadTestFile(again->file());

  // The same version after a restore of another state (version 0 again,
  // other steps): written anew.
  Manifest m;
  m.version = 2;
  m.num_shards = 1;
  m.config_json = Small().ToJson();
  m.task = "pretrain";
  m.optimizer = core->Describe().optimizer();
  m.plan_text = core->plan().ToText();
  m.state_slots = core->Describe().state_slots();
  m.files.push_back({0, again->file(), again->crc32c(), again->bytes()});
  m.example_ledger = again->example_ledger();
  auto manifest = WriteManifest(Tmp("again"), m);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_TRUE(core->Restore(*manifest, /*new_phase=*/true).ok());
  ASSERT_EQ(core->version(), 0);
  for (int64_t s = 0; s < 2; ++s) {
    ASSERT_TRUE(PushConst(core.get(), 0, s, 0.5f).ok());
  }
  auto other = core->Checkpoint(Tmp("again"), 2, Soon());
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(ReadTestFile(other->file()), bytes);
}

}  // namespace
}  // namespace ps
}  // namespace bertps

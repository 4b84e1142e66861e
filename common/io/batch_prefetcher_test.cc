#include "common/io/batch_prefetcher.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace bertps {
namespace io {
namespace {

// A batch that says which step it was read for.
absl::Status ReadStep(int64_t step, BertBatch* out) {
  out->first_position = step;
  out->seq = 4;
  out->input_ids.assign(4, step);
  return absl::OkStatus();
}

TEST(BatchPrefetcherTest, ReadsAheadInOrderBoundedByDepth) {
  std::atomic<int64_t> highest{-1};
  BatchPrefetcher p(
      [&](int64_t step, BertBatch* out) {
        highest = std::max<int64_t>(highest, step);
        return ReadStep(step, out);
      },
      /*depth=*/3, /*first=*/10, /*end=*/100);
  // Nothing taken: it reads 3 ahead and stops there.
  for (int i = 0; i < 200 && p.batches_read() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(p.batches_read(), 3);
  EXPECT_EQ(highest.load(), 12);
  BertBatch b;
  for (int64_t step = 10; step < 20; ++step) {
    double wait = 0;
    ASSERT_TRUE(p.Take(step, &b, &wait).ok());
    EXPECT_EQ(b.first_position, step);
    EXPECT_EQ(b.input_ids[0], step);
    EXPECT_GE(wait, 0);
  }
  // At most depth steps beyond the last taken one (19).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_LE(highest.load(), 22);
  EXPECT_GE(p.taken_ready(), 1);
}

TEST(BatchPrefetcherTest, ASlowReadIsWaitedForAndTheWaitCounted) {
  BatchPrefetcher p(
      [](int64_t step, BertBatch* out) {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        return ReadStep(step, out);
      },
      2, 0, 10);
  BertBatch b;
  double wait = 0;
  ASSERT_TRUE(p.Take(0, &b, &wait).ok());
  EXPECT_GT(wait, 10);
  // Compute slower than the reads: the next batches are there.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  wait = 0;
  ASSERT_TRUE(p.Take(1, &b, &wait).ok());
  ASSERT_TRUE(p.Take(2, &b, &wait).ok());
  EXPECT_LT(wait, 10);
  EXPECT_EQ(b.first_position, 2);
}

TEST(BatchPrefetcherTest, AnErrorBelongsToItsStepAndAJumpRestarts) {
  BatchPrefetcher p(
      [](int64_t step, BertBatch* out) {
        if (step == 3) {
          return absl::DataLossError(absl::StrCat("bad record in step ", step));
        }
        return ReadStep(step, out);
      },
      4, 0, 50);
  BertBatch b;
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(p.Take(step, &b).ok()) << step;
  }
  absl::Status st = p.Take(3, &b);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(st.message(), "bad record in step 3");
  // Taken again after the error: read again (it fails again), and a jump
  // reads from the new step on.
  EXPECT_FALSE(p.Take(3, &b).ok());
  ASSERT_TRUE(p.Take(40, &b).ok());
  EXPECT_EQ(b.first_position, 40);
  ASSERT_TRUE(p.Take(41, &b).ok());
  EXPECT_EQ(b.first_position, 41);
  // Back to an earlier step: again from there; past the end: read on.
  ASSERT_TRUE(p.Take(7, &b).ok());
  EXPECT_EQ(b.first_position, 7);
  ASSERT_TRUE(p.Take(60, &b).ok());
  EXPECT_EQ(b.first_position, 60);
}

TEST(BatchPrefetcherTest, DestroyedWhileReading) {
  std::atomic<int> reads{0};
  {
    BatchPrefetcher p(
        [&](int64_t step, BertBatch* out) {
          ++reads;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          return ReadStep(step, out);
        },
        8, 0, 1000);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  EXPECT_GE(reads.load(), 1);
  EXPECT_LE(reads.load(), 3);
}

}  // namespace
}  // namespace io
}  // namespace bertps

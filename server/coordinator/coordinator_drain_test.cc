// Drains that would leave a running job short are refused unless forced
// (bertpsctl drain --force): the last train daemons of an elastic job at its
// min_workers, a shard primary without a backup. The refusal says what the
// drain would do and changes nothing; with force the drain goes ahead.
#include <string>

#include "gtest/gtest.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_test_util.h"

namespace bertps {
namespace {

TEST(CoordinatorDrain, ADrainThatLeavesTheJobShortNeedsForce) {
  ClockedCoordinator t;
  const std::string ps = t.Join(PS, "127.0.0.1:1");
  const std::string a = t.Join(TRAIN);
  const std::string b = t.Join(TRAIN);
  JobSpec spec = TrainSpec(1, 4, 100);
  spec.set_min_workers(2);
  const std::string job = *t.c->Submit(spec);
  t.Beat(ps, job);
  t.Beat(ps, job);
  t.Beat(a, job);
  t.Beat(b, job);
  ASSERT_EQ(t.c->Get(job)->state(), RUNNING);
  const Caller admin;

  // 2 daemons, min_workers 2: draining either leaves 1.
  absl::StatusOr<DrainMemberResponse> d = t.c->Drain(a, admin, /*force=*/false);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(d.status().message().find("below its min_workers 2"),
            std::string::npos)
      << d.status();
  EXPECT_NE(d.status().message().find("--force"), std::string::npos);
  EXPECT_FALSE(t.Beat(a, job).drain());  // nothing changed
  // A third daemon joins: now one may go.
  const std::string c = t.Join(TRAIN);
  t.Beat(ps, job);
  t.Beat(c, job);
  d = t.c->Drain(a, admin, /*force=*/false);
  ASSERT_TRUE(d.ok()) << d.status();
  // Accepted: it holds slot 0 alone (its slot 2 went to c), which is not
  // handed (the checkpoints' writer): told to leave at once.
  EXPECT_TRUE(t.Beat(a, job).drain());
  EXPECT_EQ(JobEventsText(*t.c, job).find("is handed from member " + a),
            std::string::npos)
      << JobEventsText(*t.c, job);
  // With a drained, b would leave c alone: refused, then forced.
  EXPECT_EQ(t.c->Drain(b, admin, false).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(t.c->Drain(b, admin, /*force=*/true).ok());

  // The job's only shard has no backup: its drain restarts the job.
  d = t.c->Drain(ps, admin, false);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(d.status().message().find("no backup"), std::string::npos);
  EXPECT_FALSE(t.Beat(ps, job).drain());
  EXPECT_TRUE(t.c->Drain(ps, admin, true).ok());
  EXPECT_EQ(t.c->Drain("m-none", admin, false).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace bertps

// The audit trail: every refusal counted by reason; log lines at most one a
// minute per caller and reason, the next one saying how many were held
// back; the Prometheus collector reads the same counts.
#include "common/audit.h"

#include "gtest/gtest.h"

namespace bertps {
namespace {

int64_t Count(const std::string& reason) {
  auto counts = AuditRefusalCounts();
  auto it = counts.find(reason);
  return it == counts.end() ? 0 : it->second;
}

TEST(AuditTest, CountsEveryRefusalLogsOncePerCallerAndReason) {
  const int64_t lines = AuditLogLines();
  for (int i = 0; i < 1000; ++i) {
    AuditRefusal("test_reason", "cert a, token worker#0", "Push refused");
  }
  EXPECT_EQ(Count("test_reason"), 1000);
  EXPECT_EQ(AuditLogLines() - lines, 1);  // a flood costs one line
  // Another caller, or another reason of the same caller: a line each.
  AuditRefusal("test_reason", "cert b", "Push refused");
  AuditRefusal("other_reason", "cert a, token worker#0", "Pull refused");
  EXPECT_EQ(AuditLogLines() - lines, 3);
  EXPECT_EQ(Count("test_reason"), 1001);
  EXPECT_EQ(Count("other_reason"), 1);
}

TEST(AuditTest, ALineAgainAfterTheInterval) {
  SetAuditLogIntervalForTest(absl::ZeroDuration());
  const int64_t lines = AuditLogLines();
  for (int i = 0; i < 5; ++i) AuditRefusal("interval", "cert c", "x");
  EXPECT_EQ(AuditLogLines() - lines, 5);
  SetAuditLogIntervalForTest(absl::Minutes(1));
}

TEST(AuditTest, ManyCallersStayBounded) {
  const int64_t lines = AuditLogLines();
  for (int i = 0; i < 10000; ++i) {
    AuditRefusal("many", "caller " + std::to_string(i), "x");
  }
  EXPECT_EQ(Count("many"), 10000);
  EXPECT_EQ(AuditLogLines() - lines, 10000);  // each caller's first line
  AuditRefusal("many", "caller 9999", "x");   // still remembered: held back
  EXPECT_EQ(AuditLogLines() - lines, 10000);
}

TEST(AuditTest, CollectorReadsTheCounts) {
  AuditRefusal("collected", "cert d", "x");
  AuditRefusal("collected", "cert d", "x");
  auto families = AuditCollectable()->Collect();
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].name, "bertps_refused_calls_total");
  bool found = false;
  for (const auto& m : families[0].metric) {
    ASSERT_EQ(m.label.size(), 1u);
    EXPECT_EQ(m.label[0].name, "reason");
    if (m.label[0].value == "collected") {
      found = true;
      EXPECT_EQ(m.counter.value, 2.0);
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace bertps

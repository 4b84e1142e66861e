#include "server/ps/shard_metrics.h"

#include <string>

#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace bertps {
namespace ps {
namespace {

std::string Scrape(prometheus::Registry& r) {
  return prometheus::TextSerializer().Serialize(r.Collect());
}

StatsResponse Stats(int64_t version, int64_t applied, int64_t bytes) {
  StatsResponse s;
  s.set_version(version);
  s.set_pushes_applied(applied);
  s.set_pushes_duplicate(1);
  s.set_bytes_in(bytes);
  s.set_last_grad_norm(0.5);
  s.set_last_learning_rate(1e-4);
  return s;
}

TEST(ShardMetrics, OneMetricPerQuantityWithJobIdAndCumulativeCounters) {
  prometheus::Registry registry;
  ShardMetrics m(registry);
  int install_a = 0, install_b = 0;
  m.Update("job-000001", &install_a, Stats(3, 6, 600));
  m.Update("job-000001", &install_a, Stats(5, 10, 1000));
  // The job starts again (a new install): its counts start again at 0, the
  // exported counters go on adding.
  m.Update("job-000001", &install_b, Stats(1, 2, 200));
  const std::string text = Scrape(registry);
  EXPECT_NE(text.find("# TYPE bertps_shard_pushes_total counter"),
            std::string::npos) << text;
  EXPECT_NE(text.find("bertps_shard_pushes_total{job_id=\"job-000001\","
                      "result=\"applied\"} 12"),
            std::string::npos) << text;
  EXPECT_NE(text.find("bertps_shard_pushes_total{job_id=\"job-000001\","
                      "result=\"duplicate\"} 2"),
            std::string::npos) << text;
  EXPECT_NE(text.find("bertps_shard_push_bytes_total{job_id=\"job-000001\"} "
                      "1200"),
            std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE bertps_shard_version gauge"), std::string::npos);
  EXPECT_NE(text.find("bertps_shard_version{job_id=\"job-000001\"} 1"),
            std::string::npos) << text;
  EXPECT_NE(text.find("bertps_shard_learning_rate{job_id=\"job-000001\"} "),
            std::string::npos) << text;
  EXPECT_EQ(text.find("job=\""), std::string::npos) << text;
}

TEST(ShardMetrics, SlicesOfOneDaemonCountApart) {
  prometheus::Registry registry;
  ShardMetrics m(registry);
  int primary = 0, backup = 0;
  // A daemon of 2 slices: the primary of one index and a backup of another,
  // both in job-000001; each install's counts are its own.
  m.Update("job-000001", &primary, Stats(4, 8, 800), "0");
  m.Update("job-000001", &backup, Stats(4, 0, 0), "1");
  m.Update("job-000001", &primary, Stats(5, 10, 1000), "0");
  m.Update("job-000001", &backup, Stats(5, 0, 0), "1");
  const std::string text = Scrape(registry);
  EXPECT_NE(text.find("bertps_shard_pushes_total{job_id=\"job-000001\","
                      "result=\"applied\",slice=\"0\"} 10"),
            std::string::npos) << text;
  EXPECT_NE(text.find("bertps_shard_pushes_total{job_id=\"job-000001\","
                      "result=\"applied\",slice=\"1\"} 0"),
            std::string::npos) << text;
  EXPECT_NE(text.find("bertps_shard_version{job_id=\"job-000001\","
                      "slice=\"1\"} 5"),
            std::string::npos) << text;
  EXPECT_EQ(text.find("bertps_shard_version{job_id=\"job-000001\"}"),
            std::string::npos) << text;
}

}  // namespace
}  // namespace ps
}  // namespace bertps

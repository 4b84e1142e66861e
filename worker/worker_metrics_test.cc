#include "worker/worker_metrics.h"

#include <string>

#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace bertps {
namespace {

TEST(WorkerMetrics, StepsCountAndTimesAreHistogramsInSeconds) {
  prometheus::Registry registry;
  WorkerMetrics m(registry);
  for (int i = 0; i < 3; ++i) {
    StepReport r;
    r.set_step(i);
    r.set_examples(8);
    r.set_loss(2.5);
    r.set_pull_ms(10);
    r.set_pull_bytes(1000);
    r.set_compute_ms(100);
    r.set_push_ms(20);
    r.set_wait_ms(5);
    r.set_input_ms(15);
    m.Observe("job-000002", r);
  }
  const std::string text =
      prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_NE(text.find("bertps_worker_steps_total{job_id=\"job-000002\"} 3"),
            std::string::npos) << text;
  EXPECT_NE(text.find("bertps_worker_examples_total{job_id=\"job-000002\"} 24"),
            std::string::npos) << text;
  EXPECT_NE(text.find("bertps_worker_pull_bytes_total{job_id=\"job-000002\"} 3000"),
            std::string::npos) << text;
  EXPECT_NE(text.find("bertps_worker_step{job_id=\"job-000002\"} 3"),
            std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE bertps_worker_step_seconds histogram"),
            std::string::npos) << text;
  EXPECT_NE(text.find("bertps_worker_step_seconds_count{job_id=\"job-000002\"} 3"),
            std::string::npos) << text;
  // 3 steps of 0.15 s (input included).
  EXPECT_NE(text.find("bertps_worker_step_seconds_sum{job_id=\"job-000002\"} 0.45"),
            std::string::npos) << text;
  EXPECT_NE(text.find("bertps_worker_input_seconds_sum{job_id=\"job-000002\"} 0.045"),
            std::string::npos) << text;
  EXPECT_NE(text.find("bertps_worker_compute_seconds_bucket{job_id=\"job-000002\",le=\"0.128\"} 3"),
            std::string::npos) << text;
  EXPECT_EQ(text.find("job=\""), std::string::npos);
}

}  // namespace
}  // namespace bertps

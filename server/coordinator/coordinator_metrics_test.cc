#include "server/coordinator/coordinator_metrics.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace bertps {
namespace {

TEST(CoordinatorMetrics, OneMetricPerQuantityLabelledByJobId) {
  prometheus::Registry registry;
  CoordinatorMetrics m(registry);
  std::vector<JobStatus> jobs(2);
  jobs[0].set_id("job-000001");
  jobs[0].set_state(SUCCEEDED);
  jobs[0].mutable_progress()->set_step(80);
  jobs[0].mutable_progress()->set_total_steps(80);
  jobs[0].mutable_progress()->set_learning_rate(2.5e-5);
  EvalMetrics* e = jobs[0].add_evals();
  e->set_step(80);
  e->mutable_stats()->set_num_labels(2);
  e->set_accuracy(0.9262);
  jobs[1].set_id("job-000002");
  jobs[1].set_state(RUNNING);
  jobs[1].mutable_progress()->set_step(3);
  // Slot 0 its own daemon's, slot 1 taken over by it, slot 2 free, slot 3
  // done (its part over).
  for (int k = 0; k < 4; ++k) {
    SlotHolder* h = jobs[1].add_slots();
    h->set_slot(k);
    if (k != 2) h->set_member("m-000004");
    h->set_shared(k == 1);
    h->set_done(k == 3);
  }
  // replicas: 2, shard 0's backup a step behind, shard 1 failed over.
  ShardReplicas* r = jobs[1].add_shards();
  r->set_shard(0);
  r->set_applied(3);
  r->add_backups("m-000002");
  r->add_backups_applied(2);
  r = jobs[1].add_shards();
  r->set_shard(1);
  r->set_applied(3);
  r->set_term(1);
  jobs[1].set_failovers(1);
  jobs[1].set_waiting("an idle train worker for slot 2");
  jobs[1].set_waiting_since_ms(1);  // long ago
  m.Update(jobs);
  m.Update(jobs);  // again: the same series, set again
  const std::string text =
      prometheus::TextSerializer().Serialize(registry.Collect());
  for (const char* want : {
           "bertps_jobs{state=\"SUCCEEDED\"} 1",
           "bertps_jobs{state=\"RUNNING\"} 1",
           "bertps_jobs{state=\"FAILED\"} 0",
           "bertps_job_step{job_id=\"job-000001\"} 80",
           "bertps_job_step{job_id=\"job-000002\"} 3",
           "bertps_job_total_steps{job_id=\"job-000001\"} 80",
           "bertps_job_learning_rate{job_id=\"job-000001\"} 2.5e-05",
           "bertps_job_eval_accuracy_ratio{job_id=\"job-000001\"} 0.9262",
           "# TYPE bertps_job_eval_step gauge",
           "bertps_job_worker_slots{holder=\"own\",job_id=\"job-000002\"} 1",
           "bertps_job_worker_slots{holder=\"taken_over\",job_id=\"job-000002\"} 1",
           "bertps_job_worker_slots{holder=\"free\",job_id=\"job-000002\"} 1",
           "bertps_job_worker_slots{holder=\"done\",job_id=\"job-000002\"} 1",
           "bertps_job_waiting_seconds{job_id=\"job-000001\"} 0",
           "bertps_job_failovers{job_id=\"job-000002\"} 1",
           "bertps_job_shard_backups{job_id=\"job-000002\",shard=\"0\"} 1",
           "bertps_job_shard_backups{job_id=\"job-000002\",shard=\"1\"} 0",
           "bertps_job_replication_lag_steps{job_id=\"job-000002\",shard=\"0\"} 1",
           "bertps_job_replication_lag_steps{job_id=\"job-000002\",shard=\"1\"} 0",
       }) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  EXPECT_EQ(text.find("job=\""), std::string::npos) << text;
  EXPECT_EQ(text.find("bertps_job_eval_mlm_loss{"), std::string::npos);
  // Waiting since 1 ms after the epoch: a large positive number of seconds.
  const size_t w = text.find("bertps_job_waiting_seconds{job_id=\"job-000002\"} ");
  ASSERT_NE(w, std::string::npos) << text;
  EXPECT_GT(std::stod(text.substr(text.find("} ", w) + 2)), 1e9);
}

}  // namespace
}  // namespace bertps

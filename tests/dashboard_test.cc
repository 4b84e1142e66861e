// deploy/grafana/bertps-dashboard.json queries only metrics that the
// coordinator, the shards and the workers export (their metrics classes fed
// with a classification job with an eval round, a pretraining one with an
// MLM eval round, shard stats and worker steps), and every panel has a query.
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "prometheus/text_serializer.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/ps/shard_metrics.h"
#include "worker/worker_metrics.h"

namespace bertps {
namespace {

std::set<std::string> Exported() {
  prometheus::Registry registry;
  CoordinatorMetrics coordinator(registry);
  std::vector<JobStatus> jobs(2);
  jobs[0].set_id("job-000001");
  jobs[0].set_state(RUNNING);
  EvalMetrics* e = jobs[0].add_evals();
  e->mutable_stats()->set_num_labels(2);
  jobs[1].set_id("job-000002");
  jobs[1].set_state(SUCCEEDED);
  jobs[1].add_evals();  // pretraining: MLM/NSP figures
  coordinator.Update(jobs);
  ps::ShardMetrics shard(registry);
  int install = 0;
  shard.Update("job-000001", &install, StatsResponse());
  WorkerMetrics worker(registry);
  worker.Observe("job-000001", StepReport());
  std::set<std::string> names;
  for (const prometheus::MetricFamily& f : registry.Collect()) {
    names.insert(f.name);
  }
  return names;
}

TEST(Dashboard, QueriesOnlyExportedMetrics) {
  std::ifstream in("deploy/grafana/bertps-dashboard.json");
  ASSERT_TRUE(in) << "no dashboard";
  const nlohmann::json d = nlohmann::json::parse(in);
  const std::set<std::string> exported = Exported();
  ASSERT_GE(exported.size(), 20u);
  const std::regex metric(R"(\bbertps_[a-z0-9_]+)");
  const std::regex histogram_part(R"(_(bucket|sum|count)$)");
  std::set<std::string> used;
  ASSERT_GE(d.at("panels").size(), 8u);
  for (const auto& panel : d.at("panels")) {
    ASSERT_FALSE(panel.at("targets").empty()) << panel.at("title");
    for (const auto& target : panel.at("targets")) {
      const std::string expr = target.at("expr").get<std::string>();
      for (std::sregex_iterator it(expr.begin(), expr.end(), metric), end;
           it != end; ++it) {
        std::string name = it->str();
        if (!exported.count(name)) {
          name = std::regex_replace(name, histogram_part, "");
        }
        used.insert(name);
        EXPECT_TRUE(exported.count(name))
            << panel.at("title") << " queries " << it->str()
            << ", which no daemon exports";
      }
    }
  }
  EXPECT_GE(used.size(), 15u);
}

}  // namespace
}  // namespace bertps

#include "server/coordinator/coordinator_metrics.h"

#include <algorithm>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace bertps {
namespace {

struct Spec {
  const char* name;
  const char* help;
};

constexpr Spec kJobGauges[] = {
    {"bertps_jobs", "Jobs by state"},
    {"bertps_job_step", "Updates the job's shards applied"},
    {"bertps_job_total_steps", "Updates in the job's plan"},
    {"bertps_job_loss", "Training loss of the job's last step"},
    {"bertps_job_learning_rate", "Learning rate the shards last applied"},
    {"bertps_job_examples_per_second", "Training throughput"},
    {"bertps_job_restarts", "Times the job was started again"},
    {"bertps_job_members", "Members holding the job's worker slots"},
    {"bertps_job_failovers",
     "Primaries of the job's shards replaced by a backup (no restart)"},
    {"bertps_job_shard_backups", "Live backups of each shard index"},
    {"bertps_job_backups_added",
     "Backups brought up to date while the job ran (re-replication)"},
    {"bertps_job_shard_backups_joining",
     "Each shard index: backups being brought up to date"},
    {"bertps_job_replication_lag_steps",
     "Each shard index: its primary's version minus its slowest backup's, "
     "as last reported"},
    {"bertps_job_worker_slots",
     "Worker slots by holder: own (a daemon of its own), taken_over (computed "
     "by a surviving worker beside its own slot), free (the job waits)"},
    {"bertps_job_waiting_seconds",
     "How long the job has waited for what JobStatus.waiting names (0: it "
     "waits for nothing)"},
    {"bertps_job_work_items", "Leased work items (preprocess, eval)"},
    {"bertps_job_work_items_done", "Leased work items done"},
    {"bertps_job_eval_step", "Step of the latest eval round"},
    {"bertps_job_eval_examples", "Examples of the latest eval round"},
    {"bertps_job_eval_accuracy_ratio", "Latest eval round: accuracy"},
    {"bertps_job_eval_macro_f1_ratio", "Latest eval round: macro-F1"},
    {"bertps_job_eval_loss", "Latest eval round: classification loss"},
    {"bertps_job_eval_mlm_accuracy_ratio", "Latest eval round: MLM accuracy"},
    {"bertps_job_eval_mlm_loss", "Latest eval round: MLM loss"},
    {"bertps_job_eval_mlm_perplexity", "Latest eval round: MLM perplexity"},
    {"bertps_job_eval_nsp_accuracy_ratio", "Latest eval round: NSP accuracy"},
};

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(prometheus::Registry& registry)
    : registry_(registry) {
  for (const Spec& s : kJobGauges) Gauge(s.name, s.help);
}

prometheus::Family<prometheus::Gauge>& CoordinatorMetrics::Gauge(
    const std::string& name, const std::string& help) {
  auto it = families_.find(name);
  if (it != families_.end()) return *it->second;
  auto& f = prometheus::BuildGauge().Name(name).Help(help).Register(registry_);
  families_[name] = &f;
  return f;
}

void CoordinatorMetrics::Update(const std::vector<JobStatus>& jobs) {
  std::map<std::string, int> by_state;
  auto set = [&](const char* name, const std::string& id, double v) {
    Gauge(name, "").Add({{"job_id", id}}).Set(v);
  };
  for (const JobStatus& j : jobs) {
    ++by_state[JobState_Name(j.state())];
    const std::string& id = j.id();
    const JobProgress& p = j.progress();
    set("bertps_job_step", id, static_cast<double>(p.step()));
    set("bertps_job_total_steps", id, static_cast<double>(p.total_steps()));
    set("bertps_job_loss", id, p.loss());
    set("bertps_job_learning_rate", id, p.learning_rate());
    set("bertps_job_examples_per_second", id, p.examples_per_sec());
    set("bertps_job_restarts", id, j.restarts());
    if (j.slots_size() > 0) set("bertps_job_members", id, j.members());
    if (j.shards_size() > 0) {
      set("bertps_job_failovers", id, j.failovers());
      set("bertps_job_backups_added", id, j.backups_added());
    }
    for (const ShardReplicas& r : j.shards()) {
      const std::string shard = std::to_string(r.shard());
      int64_t slowest = r.applied();
      for (int64_t b : r.backups_applied()) slowest = std::min(slowest, b);
      Gauge("bertps_job_shard_backups", "")
          .Add({{"job_id", id}, {"shard", shard}})
          .Set(r.backups_size());
      Gauge("bertps_job_shard_backups_joining", "")
          .Add({{"job_id", id}, {"shard", shard}})
          .Set(r.joining_size());
      Gauge("bertps_job_replication_lag_steps", "")
          .Add({{"job_id", id}, {"shard", shard}})
          .Set(static_cast<double>(r.applied() - slowest));
    }
    int slots[4] = {0, 0, 0, 0};  // own, taken over, free, done
    for (const SlotHolder& h : j.slots()) {
      ++slots[h.done() ? 3 : h.member().empty() ? 2 : h.shared() ? 1 : 0];
    }
    const char* holders[4] = {"own", "taken_over", "free", "done"};
    for (int k = 0; k < 4; ++k) {
      Gauge("bertps_job_worker_slots", "")
          .Add({{"job_id", id}, {"holder", holders[k]}})
          .Set(slots[k]);
    }
    set("bertps_job_waiting_seconds", id,
        j.waiting().empty() || j.waiting_since_ms() == 0
            ? 0.0
            : std::max(0.0, (absl::ToUnixMillis(absl::Now()) -
                             j.waiting_since_ms()) / 1000.0));
    set("bertps_job_work_items", id, j.items_total());
    set("bertps_job_work_items_done", id, j.items_done());
    if (j.evals_size() > 0) {
      const EvalMetrics& e = j.evals(j.evals_size() - 1);
      set("bertps_job_eval_step", id, static_cast<double>(e.step()));
      set("bertps_job_eval_examples", id, static_cast<double>(e.examples()));
      if (e.stats().num_labels() > 0) {
        set("bertps_job_eval_accuracy_ratio", id, e.accuracy());
        set("bertps_job_eval_macro_f1_ratio", id, e.macro_f1());
        set("bertps_job_eval_loss", id, e.loss());
      } else {
        set("bertps_job_eval_mlm_accuracy_ratio", id, e.mlm_accuracy());
        set("bertps_job_eval_mlm_loss", id, e.mlm_loss());
        set("bertps_job_eval_mlm_perplexity", id, e.mlm_perplexity());
        set("bertps_job_eval_nsp_accuracy_ratio", id, e.nsp_accuracy());
      }
    }
  }
  for (JobState s : {PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED}) {
    const std::string name = JobState_Name(s);
    Gauge("bertps_jobs", "").Add({{"state", name}}).Set(by_state[name]);
  }
}

}  // namespace bertps

#include "server/ps/shard_member.h"

#include <algorithm>

#include "common/status.h"
#include "glog/logging.h"
#include "server/coordinator/job_spec.h"

namespace bertps {
namespace ps {

absl::StatusOr<ShardOptions> ShardOptionsFromSpec(const JobSpec& spec,
                                                  int shard) {
  ShardOptions o;
  o.shard = shard;
  o.num_shards = spec.num_ps_shards();
  ASSIGN_OR_RETURN(o.config, JobModelConfig(spec));
  ASSIGN_OR_RETURN(o.optimizer, JobOptimizerConfig(spec));
  o.task = spec.task() == CLASSIFY ? BertTask::kClassify : BertTask::kPretrain;
  o.mode = spec.consistency().mode();
  // Each pipeline stage pushes as a worker of its own (replica x stage).
  o.num_workers = spec.num_workers() * std::max(1, spec.pipeline().stages());
  o.backup_workers = spec.consistency().backup_workers();
  o.staleness = spec.consistency().staleness();
  o.init_seed = spec.seed();
  o.init_weights = spec.init_weights();
  return o;
}

ShardMember::ShardMember(const std::string& coordinator, ShardServer* server)
    : member_(coordinator, PS, server->address(), server->security()),
      server_(server) {}

absl::Status ShardMember::Run(absl::Duration give_up) {
  absl::Time last_ok = absl::Now();
  std::string error;
  while (!stop_) {
    absl::StatusOr<Assignment> a = member_.Heartbeat(job_, {}, false, error);
    if (!a.ok()) {
      if (absl::Now() - last_ok > give_up) return a.status();
      LOG(WARNING) << a.status();
      absl::SleepFor(member_.interval());
      continue;
    }
    last_ok = absl::Now();
    error.clear();
    // Registered again (a restarted coordinator): a new start, even of the
    // same job (it reinstalls and restores from the job's checkpoint).
    if ((a->stop() || a->job_id() != job_ ||
         member_.member_id() != started_as_) &&
        !job_.empty()) {
      server_->Uninstall();
      LOG(INFO) << "left job " << job_;
      job_.clear();
      if (exit_when_job_ends_) return absl::OkStatus();
    }
    if (!a->stop() && !a->job_id().empty() && job_.empty()) {
      job_ = a->job_id();
      started_as_ = member_.member_id();
      absl::Status st = [&]() -> absl::Status {
        ASSIGN_OR_RETURN(ShardOptions o, ShardOptionsFromSpec(a->spec(), a->index()));
        std::vector<std::string> peers(a->ps_addresses().begin(),
                                       a->ps_addresses().end());
        RETURN_IF_ERROR(server_->Install(o, peers));
        if (!a->spec().checkpoint().restore().empty()) {
          ASSIGN_OR_RETURN(int64_t v,
                           server_->core()->Restore(a->spec().checkpoint().restore()));
          LOG(INFO) << "restored version " << v;
        }
        return absl::OkStatus();
      }();
      if (!st.ok()) {
        error = std::string(st.message());  // fails the job on the next beat
        LOG(ERROR) << "job " << job_ << ": " << st;
      } else {
        LOG(INFO) << "serving shard " << a->index() << " of job " << job_;
      }
    }
    absl::SleepFor(member_.interval());
  }
  return absl::OkStatus();
}

}  // namespace ps
}  // namespace bertps

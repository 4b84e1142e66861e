#include "server/ps/shard_member.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "glog/logging.h"
#include "common/cluster/job_plan.h"
#include "common/cluster/job_spec.h"
#include "common/cluster/path_policy.h"

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
  // Each pipeline stage pushes as a worker of its own (replica x stage).
  o.job_plan = PlanOf(spec);
  o.backup_workers = spec.consistency().backup_workers();
  o.staleness = spec.consistency().staleness();
  o.init_seed = spec.seed();
  o.init_weights = spec.init_weights();
  return o;
}

absl::Status ShardMember::FollowAssignment(const Assignment& a) {
  std::vector<std::string> peers(a.ps_addresses().begin(),
                                 a.ps_addresses().end());
  if (peers != peers_) {
    server_->SetPeers(peers);  // exchanges reach a replaced primary's successor
    peers_ = std::move(peers);
  }
  ShardCore* core = server_->core();
  if (core == nullptr) return absl::OkStatus();
  core->NewShardLayout(a.ps_layout());
  if (core->backup() && !a.backup()) {
    const int64_t term =
        a.index() < a.ps_terms_size() ? a.ps_terms(a.index()) : 0;
    RETURN_IF_ERROR(core->Promote(term));
    LOG(INFO) << "promoted to primary of shard " << a.index() << " of job "
              << job_ << " (term " << term << ", at version "
              << core->version() << ")";
  }
  std::vector<std::string> backups(a.backups().begin(), a.backups().end());
  std::vector<std::string> joining(a.joining_backups().begin(),
                                   a.joining_backups().end());
  if (!a.backup() && (backups != backups_ || joining != joining_)) {
    server_->replica_link().SetBackups(backups, joining,
                                       server_->shared_core());
    backups_ = std::move(backups);
    joining_ = std::move(joining);
  }
  return absl::OkStatus();
}

ShardMember::ShardMember(const std::string& coordinator, ShardServer* server)
    : member_(coordinator, PS, server->address(), server->security()),
      server_(server) {
  // The coordinator checks that the address this member registers with is
  // served by this process.
  server_->ServeHealthService(member_.instance_service());
}

absl::Status ShardMember::Run(absl::Duration give_up) {
  loop_.set_give_up(give_up);
  return loop_.Run();
}

void ShardMember::Drain() {
  draining_ = true;
  drain_news_ = true;
  server_->replica_link().Poke();  // the heartbeat now, not after a wait
}

void ShardMember::Fill(HeartbeatRequest* req) {
  req->set_job_id(job_);
  req->set_incarnation(incarnation_);
  req->set_draining(draining_);
  req->set_error(error_);
  if (!job_.empty()) {
    if (ShardCore* core = server_->core()) {
      const StatsResponse s = core->Stats();
      req->set_example_ledger(s.example_ledger());
      req->set_applied_version(s.version());
    }
    for (std::string& d : server_->replica_link().TakeDropped()) {
      dropped_.push_back(std::move(d));
    }
    for (const std::string& d : dropped_) req->add_dropped_backups(d);
    for (std::string& d : server_->replica_link().TakeJoined()) {
      joined_.push_back(std::move(d));
    }
    for (const std::string& d : joined_) req->add_joined_backups(d);
  }
}

MemberRun ShardMember::Running() {
  MemberRun run;
  run.set_shard(-1);
  run.set_item(-1);
  ShardCore* core = server_->core();
  if (job_.empty() || core == nullptr) return run;
  const ShardOptions& o = core->options();
  run.set_job_id(job_);
  run.set_incarnation(incarnation_);
  run.set_job_key(o.job_key);
  run.set_shard(o.shard);
  run.set_backup(core->backup());
  const StatsResponse s = core->Stats();
  run.set_term(s.term());
  run.set_applied(s.version());
  return run;
}

void ShardMember::GiveUp() {
  // No one accounts for the shard's steps now: the job restarts from its
  // checkpoint when the coordinator is back.
  server_->Uninstall();
  job_.clear();
  incarnation_ = 0;
}

void ShardMember::End(HeartbeatRequest* last) {
  // Shutting down: the coordinator starts the job again without this shard
  // now rather than after the member timeout.
  server_->Uninstall();
  last->set_job_id(job_);
  last->set_incarnation(incarnation_);
}

void ShardMember::Wait(absl::Duration interval,
                       const std::function<void(absl::Duration)>&) {
  // Sooner when the replica link has news (a backup dropped, a joiner
  // caught up): the coordinator acts on it at once.
  server_->replica_link().WaitForNews(interval);
}

bool ShardMember::Apply(const Assignment& assignment) {
  const Assignment* a = &assignment;
  dropped_.clear();
  joined_.clear();
  error_.clear();
  urgent_ = false;
  // Capabilities first: a promotion below replicates with the capability
  // that says this shard is the primary now.
  if (!a->capability_key().empty()) {
    if (absl::Status st =
            server_->capability_verifier().AddKey(a->capability_key());
        !st.ok()) {
      LOG(ERROR) << "the coordinator's capability key: " << st;
    }
    server_->capability_verifier().SetRevoked(
        std::set<std::string>(a->revoked_members().begin(),
                              a->revoked_members().end()));
  }
  if (!a->capability().empty()) server_->own_capability().Set(a->capability());
  // Another incarnation of the job (started again after a lost shard), or
  // another job: a new install, restored from the job's checkpoint. The
  // same job and incarnation after this member registered again (the
  // coordinator restarted and adopted it) keeps its install.
  const bool same_job = !a->stop() && a->job_id() == job_;
  if (!job_.empty() && (!same_job || a->incarnation() != incarnation_)) {
    server_->Uninstall();
    LOG(INFO) << "left job " << job_ << " (incarnation " << incarnation_
              << ")";
    job_.clear();
    if (exit_when_job_ends_ && !same_job) return false;
  }
  // The same install: a shard index whose primary was replaced (its
  // address), this backup promoted, this primary's backups changed.
  if (!job_.empty() && same_job && !a->wait()) {
    absl::Status st = FollowAssignment(*a);
    if (!st.ok()) {
      error_ = std::string(st.message());
      LOG(ERROR) << "job " << job_ << ": " << st;
    }
  }
  // wait: the job is starting again and a shard index has no member yet
  // (its peers are not all known); install once they are.
  if (!a->stop() && !a->job_id().empty() && !a->wait() && job_.empty()) {
    job_ = a->job_id();
    incarnation_ = a->incarnation();
      absl::Status st = [&]() -> absl::Status {
        RETURN_IF_ERROR(CheckAssignmentPaths(*a));  // links may have changed
        ASSIGN_OR_RETURN(ShardOptions o, ShardOptionsFromSpec(a->spec(), a->index()));
        o.incarnation = a->incarnation();
        o.job_id = job_;
        o.job_key = a->job_key();
        o.shard_key = a->shard_key();
        o.checkpoint_dir = a->spec().checkpoint().dir();
        o.restore_manifest = a->spec().checkpoint().restore();
        o.update_threads = update_threads_;
        o.update_nice = update_nice_;
        o.fs = fs_;
        std::vector<std::string> peers(a->ps_addresses().begin(),
                                       a->ps_addresses().end());
        o.backup = a->backup();
        if (a->index() < a->ps_terms_size()) o.term = a->ps_terms(a->index());
        peers_ = peers;
        backups_.assign(a->backups().begin(), a->backups().end());
        joining_.clear();
        RETURN_IF_ERROR(server_->Install(o, peers, backups_));
        server_->core()->NewShardLayout(a->ps_layout());
        // A backup joining a running job gets its state from its primary's
        // snapshot, not from the checkpoint.
        if (!a->joining() && !a->spec().checkpoint().restore().empty()) {
          const CheckpointSpec& c = a->spec().checkpoint();
          absl::StatusOr<int64_t> v = server_->core()->Restore(
              c.restore(), c.restore_as() == CheckpointSpec::NEW_PHASE,
              c.reset_optimizer());
          if (!v.ok()) {
            return Annotate(v.status(),
                            absl::StrCat("checkpoint.restore \"",
                                         a->spec().checkpoint().restore(),
                                         "\""));
          }
          LOG(INFO) << "restored version " << *v;
        }
        return absl::OkStatus();
      }();
      if (!st.ok()) {
        error_ = std::string(st.message());  // fails the job on the next beat
        LOG(ERROR) << "job " << job_ << ": " << st;
      } else {
        LOG(INFO) << (a->joining()  ? "joining as a backup of shard "
                      : a->backup() ? "holding a backup of shard "
                                    : "serving shard ")
                  << a->index() << " of job " << job_ << " (incarnation "
                  << incarnation_ << ")"
                  << (backups_.empty()
                          ? ""
                          : absl::StrCat(", ", backups_.size(), " backup(s)"));
        urgent_ = true;  // say it is installed at once (the job waits for it)
      }
  }
  return true;
}

}  // namespace ps
}  // namespace bertps

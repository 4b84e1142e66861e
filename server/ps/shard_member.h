// A parameter-server daemon driven by the coordinator: registers as a PS
// member with its address, and on each heartbeat installs the shard of the
// job it is assigned (or removes it when told to stop). A new incarnation of
// its job (started again after another shard was lost) is installed afresh
// and restored from the job's checkpoint. Stop() leaves: the coordinator
// starts the job again without this shard at once.
// Thread-safety: Run() from one thread; Stop() and ExitWhenJobEnds() from
// any.
#ifndef BERTPS_SERVER_PS_SHARD_MEMBER_H_
#define BERTPS_SERVER_PS_SHARD_MEMBER_H_

#include <atomic>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "common/cluster/member.h"
#include "common/cluster/member_loop.h"
#include "common/timeouts.h"
#include "server/ps/server.h"

namespace bertps {
namespace ps {

absl::StatusOr<ShardOptions> ShardOptionsFromSpec(const JobSpec& spec,
                                                  int shard);

class ShardMember : private MemberRole {
 public:
  // Dials the coordinator with the server's SecurityConfig.
  ShardMember(const std::string& coordinator, ShardServer* server);
  // Until Stop() (or the first job's end with ExitWhenJobEnds), on the one
  // member loop (MemberLoop): a coordinator away for `give_up` (0: never)
  // makes it uninstall its shard and wait for the coordinator.
  absl::Status Run(absl::Duration give_up = kCoordinatorGiveUp);
  void Stop() { loop_.Stop(); }
  // SIGTERM: leave once the coordinator says so (its heartbeats say
  // `draining`): at once, or, for the primary of an index with no backup,
  // once an idle shard daemon joined as its backup (which then takes the
  // index over, as after a failover, without a restart). Any thread.
  void Drain();
  // ShardOptions.update_threads of the jobs it installs.
  void set_update_threads(int n) { update_threads_ = n; }
  // ShardOptions.update_nice of the jobs it installs.
  void set_update_nice(int n) { update_nice_ = n; }
  // ShardOptions.fs of the jobs it installs (null: the real file system;
  // must outlive the member).
  void set_file_system(io::FileSystem* fs) { fs_ = fs; }
  // One of `slices` shard members this process serves (bertps_server
  // --slices): registers as part of `daemon` with its share of the memory.
  void set_daemon(const std::string& daemon, int slices) {
    member_.set_daemon(daemon, slices);
  }
  // Run() returns (OK) once the first job this shard served has ended, so
  // the process exits and its orchestrator starts a fresh one.
  void ExitWhenJobEnds() { exit_when_job_ends_ = true; }

 private:
  // A new assignment of the installed job and incarnation: peers' addresses,
  // a promotion, this primary's backups.
  absl::Status FollowAssignment(const Assignment& a);
  // MemberRole.
  void Fill(HeartbeatRequest* request) override;
  void Unsent(const HeartbeatRequest&) override {}  // all is read afresh
  bool Apply(const Assignment& a) override;
  MemberRun Running() override;
  void GiveUp() override;
  void End(HeartbeatRequest* last) override;
  bool Urgent() override { return urgent_ || drain_news_.exchange(false); }
  void Wait(absl::Duration interval,
            const std::function<void(absl::Duration)>& sleep) override;

  MemberClient member_;
  MemberLoop loop_{&member_, this};
  ShardServer* const server_;
  std::atomic<bool> exit_when_job_ends_{false};
  std::string job_;
  int64_t incarnation_ = 0;  // of the installed job
  int update_threads_ = 2;
  int update_nice_ = 10;
  io::FileSystem* fs_ = nullptr;
  std::string error_;        // for the next heartbeat (fails the job)
  bool urgent_ = false;      // installed: say so at once
  std::atomic<bool> draining_{false};
  std::atomic<bool> drain_news_{false};  // Drain(): a heartbeat now
  // Of the installed job: its shards' addresses and this primary's backups,
  // as last applied (a change is applied on the next heartbeat).
  std::vector<std::string> peers_;
  std::vector<std::string> backups_;
  std::vector<std::string> joining_;  // brought up to date (re-replication)
  // Backups the replica link dropped, and joining backups that caught up,
  // until a heartbeat carried them.
  std::vector<std::string> dropped_;
  std::vector<std::string> joined_;
};

}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_SERVER_PS_SHARD_MEMBER_H_

// Coordinator: the transport-free logic of bertps_coordinator.
//
// Jobs: submitted specs are validated (INVALID_ARGUMENT naming the field) and
// queued (PENDING); the first queued job starts (RUNNING) as soon as enough
// idle members have registered: num_ps_shards parameter-server members and
// num_workers train members. It ends SUCCEEDED when every worker slot reports
// done, FAILED (with a reason naming the member) when a member reports an
// error, CANCELLED on request.
//
// Incarnations: each start of a train job on its members is an incarnation
// (Assignment.incarnation); shards refuse requests of another one, so no
// worker of an earlier start can reach a later one. A parameter-server shard
// or pipeline stage that is lost (silent for member_timeout, left on
// SIGTERM, or replaced by a new process registering at its address) starts
// the job again: a new incarnation, every shard (the lost one's index given
// to an idle shard member) reinstalls and restores the newest checkpoint
// worker 0 reported, and the trainers, told to wait until every shard has
// installed it, resume at its step. At most checkpoint.max_restarts times
// (default 10); then the job FAILS naming the member.
//
// Members register with a role and send heartbeats; the answer carries their
// assignment (job, index, shard addresses, or stop). A member silent for
// longer than member_timeout is dead, and so is a shard that a train member
// could not reach and that then fails a probe (CoordinatorOptions::probe).
// A coordinator that itself stalled
// (two ticks further apart than stall_threshold: SIGSTOP, a long pause, a
// slow disk) could not hear anyone meanwhile, so silence is counted from
// when it resumed: members get a full member_timeout to be heard again.
//
// Worker slots are leases: a train worker holds slot i of a job while it
// heartbeats. When it dies the slot goes to an idle train member, which joins
// at the shards' current step. Data is deterministic per (step, slot): global
// batch t is examples [t*B*N, (t+1)*B*N) of the job's data, slot i taking its
// B, so a replaced worker reads exactly what the dead one would have, and
// each example is counted once per epoch (reports are keyed by (slot, step)).
// A slot that no idle train member takes within slot_takeover_after is
// taken over by a surviving train worker of the job (the one holding the
// fewest slots): it computes that slot too, as a second part exactly like a
// daemon of its own (Assignment.also_indices), so the job goes on, slower,
// with the same result bit for bit. The next idle train member to register
// takes the slot back. JobStatus.slots says who computes each slot.
//
// Leased work items (PREPROCESS jobs; EVAL rounds of EVAL jobs and of train
// jobs with eval data): the job's input is cut into items (file, part of
// parts); preprocess and eval members form pools and lease one item at a
// time on their heartbeat. A member that dies gives its item back (redone
// by another); the first result of an item counts, later ones are ignored,
// so each item is counted once. Items are pure functions of the job, so
// whoever does one writes the same bytes. An eval round's statistics are
// merged in item order into EvalMetrics when its last item is in. Train jobs
// with eval data get a round for each checkpoint worker 0 reports at a
// multiple of eval.every_steps, and a final round; they end after it.
//
// Thread-safety: thread-safe; WaitForEvents blocks without holding the lock.
#ifndef BERTPS_SERVER_COORDINATOR_COORDINATOR_H_
#define BERTPS_SERVER_COORDINATOR_COORDINATOR_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/capability.h"
#include "common/io/tfevents.h"
#include "common/monotonic_clock.h"
#include "common/timeouts.h"
#include "common/waitlist.h"
#include "proto/coordinator.pb.h"
#include "common/cluster/path_policy.h"
#include "common/ps/example_ledger.h"

namespace bertps {

// Who makes a call, as the gRPC adapter learns it from the channel (the
// token check's AuthContext), never from a request field.
struct Caller {
  // An admin token, or a server that checks no tokens (everyone is).
  bool admin = true;
  // Which token ("worker#0", kTokenProperty); "" when none is checked.
  std::string token;
  // An admin token's team (kTeamProperty): it submits jobs its team owns
  // and sees, watches and cancels only those (NOT_FOUND for others, as for
  // a job that does not exist); it may not drain members. Empty: a cluster
  // admin, a worker token, or no tokens checked.
  std::string team;
  // A worker-token caller of JobService: the member credential it presents
  // (call metadata kMemberMetadata / kMemberSecretMetadata). It sees only
  // the job that member is assigned.
  std::string member_id;
  std::string member_secret;
};

// Call metadata of a member's JobService calls (see Caller).
inline constexpr char kMemberMetadata[] = "bertps-member";
inline constexpr char kMemberSecretMetadata[] = "bertps-member-secret";

struct CoordinatorOptions {
  // Signs the members' capabilities (common/capability.h); null: a key made
  // at construction.
  std::shared_ptr<const CapabilitySigner> capability_signer;
  // The defaults and their relations: common/timeouts.h.
  absl::Duration member_timeout = kMemberTimeout;
  // A lost train worker's slot that no idle train daemon took for this long
  // is taken over by a surviving worker of the job (negative: member_timeout;
  // infinite: never, the job waits).
  absl::Duration slot_takeover_after = absl::Seconds(-1);
  // A member heartbeats every heartbeat_ms, or less often once the alive
  // members would send more than max_heartbeats_per_s in all (each call
  // costs the coordinator the same CPU whatever it carries); never less
  // often than a fifth of member_timeout. 0: no bound.
  int64_t heartbeat_ms = absl::ToInt64Milliseconds(kHeartbeatInterval);
  int64_t max_heartbeats_per_s = 64;
  // Loss points kept per job: at most this many, spread over the whole run
  // (JobStatus.history_stride); the full curve is in TensorBoard's files.
  size_t max_history = 5000;
  size_t max_events = 2000;  // newest events kept per job (older: dropped)
  // Counts the examples of a job's data (TFRecord records); injectable for
  // tests. Default: reads the files.
  std::function<absl::StatusOr<int64_t>(const JobSpec&)> count_examples;
  // The data's files with their sizes and records (what the workers check
  // the data against). Default, when count_examples is not given: reads the
  // files' framing, and the examples are their records' sum.
  std::function<absl::StatusOr<std::vector<DataFile>>(const JobSpec&)>
      describe_data;
  // The coordinator's clock: every timeout, liveness and lease decision is
  // measured with it; shown times (submit, start, end, events) come from it
  // too. Default: MonotonicNow (common/monotonic_clock.h), which a step of
  // the system clock does not move.
  std::function<absl::Time()> now = [] { return MonotonicNow(); };
  // Asks the member serving at `address` whether it is alive (the daemon: a
  // grpc.health.v1 check with a short deadline). When a train member reports
  // it could not reach the job's shards, each shard is probed at once and
  // one that fails is lost then, not after member_timeout. Null: no probes.
  std::function<absl::Status(const std::string& address)> probe;
  // Asks the server at `address` whether it answers SERVING for the
  // grpc.health.v1 service `service` (MemberInstanceService of a
  // registration's instance): a member registering with an address must
  // prove that the server there is its own, or it is refused. Null: every
  // address is taken as given (in-process tests).
  std::function<absl::Status(const std::string& address,
                             const std::string& service)>
      verify_address;
  // Registrations per token (Caller::token): at most this many a second on
  // average, in bursts of at most registrations_burst; and at most
  // max_members_per_token registered members at once. 0: no bound.
  double registrations_per_s = 50;
  int registrations_burst = 2000;
  int max_members_per_token = 20000;
  // A dead member holding no work is forgotten this long after it was last
  // heard (its id is then unknown: it registers again); at least
  // member_timeout.
  absl::Duration reclaim_after = absl::Minutes(5);
  // Ticks (Tick(), heartbeats, requests) further apart than this mean the
  // coordinator stalled (see above). The daemon ticks every 500 ms.
  absl::Duration stall_threshold = absl::Seconds(2);
  // Where submitted jobs may read and write (path_policy.h; empty: anywhere).
  PathRoots roots;
  // A job without job_dir gets jobs_root/<job id> (created at submit), and
  // its outputs left empty go there (ApplyJobDirDefaults). Empty: none.
  std::string jobs_root;
  // Where jobs are kept across restarts (not owned; null: memory only).
  class JobStore* store = nullptr;
  // After a restart on `store`: how long the members that run a train job
  // have to re-announce it before it starts again from its checkpoint
  // (negative: the member timeout; zero: no adoption, every running train
  // job starts again).
  absl::Duration adopt_window = absl::Seconds(-1);
};

class Coordinator {
 public:
  static constexpr int kDefaultMaxRestarts = 10;

  explicit Coordinator(CoordinatorOptions options);

  // JobService.
  // `owner`: the submitting admin's team (JobStatus.owner); "" for a
  // cluster admin.
  absl::StatusOr<std::string> Submit(JobSpec spec,
                                     const std::string& owner = "");
  absl::StatusOr<JobStatus> Get(const std::string& id) const;
  // Get, List and Watch as `caller` may see them: an admin every job; a
  // worker token only the job of the member whose credential it presents
  // (PERMISSION_DENIED otherwise, naming neither the job nor its spec).
  absl::StatusOr<JobStatus> Get(const std::string& id,
                                const Caller& caller) const;
  absl::Status CheckCanRead(const std::string& id, const Caller& caller) const
      ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<JobStatus> List() const;
  // One page of ListJobs (proto/coordinator.proto): jobs after `after` in id
  // order, at most page_size (0: 100; capped at 1000) and about max_bytes.
  // With `team`, only the jobs that team owns.
  ListJobsResponse ListPage(int page_size, const std::string& after,
                            size_t max_bytes = 2 << 20,
                            const std::string& team = "") const;
  // The page `caller` may see: every job for an admin, the job of the
  // member whose credential a worker token presents (PERMISSION_DENIED
  // without a valid one).
  absl::StatusOr<ListJobsResponse> ListPageFor(const Caller& caller,
                                               int page_size,
                                               const std::string& after) const
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Cancel(const std::string& id);
  // Cancel as `caller` may: a team's admin only its team's jobs (NOT_FOUND
  // for others).
  absl::Status Cancel(const std::string& id, const Caller& caller)
      ABSL_LOCKS_EXCLUDED(mu_);
  // JobService.DrainMember: the member is told to drain on its next
  // heartbeat and given no new work; a drained member that has left is
  // answered `already` too (NOT_FOUND for an id never drained nor known).
  absl::StatusOr<DrainMemberResponse> Drain(const std::string& member_id);
  // Drain as `caller` may: a cluster admin only (a member may run any
  // team's job), PERMISSION_DENIED for a team's admin.
  // Without `force`, a drain that would leave the member's job short (a
  // train job below min_workers, a shard primary with no backup) is
  // refused (FAILED_PRECONDITION) saying what would happen.
  absl::StatusOr<DrainMemberResponse> Drain(const std::string& member_id,
                                            const Caller& caller,
                                            bool force = true);
  // JobService.RevokeMember (cluster admins only): the member is dropped
  // as if lost, its credential forgotten (its calls are refused from now
  // on, PERMISSION_DENIED naming the revocation), and the job's shards are
  // told its capability no longer holds.
  absl::StatusOr<RevokeMemberResponse> Revoke(const std::string& member_id,
                                              const Caller& caller)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Events of job `id` after *seq (0 = from the start); waits until there is
  // one or `deadline`. Returns no events at the deadline.
  absl::StatusOr<std::vector<JobEvent>> WaitForEvents(const std::string& id,
                                                      int64_t* seq,
                                                      absl::Time deadline);
  // The same wait without a thread per watcher: `fire(true)` once job `id`
  // has events past `seq` (or is gone), or `also()` holds; fire(false) at
  // `deadline`. Every watcher waits on one thread of the coordinator (the
  // fan-out); `fire` must not block. PokeWatchers() after `also` changed.
  void WhenEvents(const std::string& id, int64_t seq, absl::Time deadline,
                  std::function<bool()> also, std::function<void(bool)> fire)
      ABSL_LOCKS_EXCLUDED(mu_);
  void PokeWatchers() { watch_->Poke(); }
  int64_t watchers() const { return watch_->waiting(); }

  // ClusterService. A registration with an address is checked with
  // options.verify_address; each heartbeat must carry the member's secret
  // (RegisterResponse.member_secret): else PERMISSION_DENIED, nothing
  // changed. Registrations are bounded per caller's token.
  absl::StatusOr<RegisterResponse> Register(const RegisterRequest& request,
                                            const Caller& caller = Caller());
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& request);

  // Expires silent members and starts queued jobs (also run on heartbeats
  // that change what it acts on, and on any heartbeat once the last tick is
  // kHeartbeatTickEvery old: a heartbeat that only reports progress costs
  // the same with 10 members or 10,000).
  void Tick();
  static constexpr absl::Duration kHeartbeatTickEvery = absl::Milliseconds(100);
  // A shard daemon dropped as a backup, or whose join failed, is not taken
  // as a joining backup again for this long.
  static constexpr absl::Duration kJoinRetryAfter = absl::Seconds(5);
  // A BSP worker that has not reported the step the others finished this
  // long after its own last report is named in the job's `waiting`.
  static constexpr absl::Duration kSlowSlotAfter = absl::Seconds(30);
  // Ticks run so far (Tick(), registrations, heartbeats, requests).
  int64_t ticks() const ABSL_LOCKS_EXCLUDED(mu_);
  // The interval members are told now (options' heartbeat_ms and
  // max_heartbeats_per_s; set by each tick from the alive members).
  int64_t heartbeat_interval_ms() const ABSL_LOCKS_EXCLUDED(mu_);

  // Loads the jobs of options.store (call once, before serving). Finished
  // and pending jobs come back as they were; a running train job is queued
  // again to resume from its newest checkpoint (checkpoint.restore; from the
  // start if it had none), since its members re-register and the shards
  // reinstall; preprocess and eval items not done are leased again.
  absl::Status Recover();
  // Writes the jobs changed since the last write to the store, outside the
  // coordinator's lock: state changes (submitted, started, restarted,
  // finished) at the next call, progress at most once a second (or at once
  // with `force`). Tick() calls it every time; every call that changed a
  // state (Submit, Cancel, Register, Heartbeat) before it answers, and
  // answers UNAVAILABLE when the store could not take it. A failed write
  // is retried, and shown (store_error, JobStatus.store_error); what it
  // held back stays unseen until it is written. Returns the store's error.
  absl::Status FlushStore(bool force = false) ABSL_LOCKS_EXCLUDED(store_mu_, mu_);
  // The store's last error ("" while writes succeed).
  std::string store_error() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Member {
    std::string id;
    Role role = ROLE_UNSPECIFIED;
    std::string address;
    absl::Time last_seen;
    bool alive = true;
    std::string job;   // assigned job, empty when idle
    int index = -1;    // shard or worker index in that job; leased item
    // Train members: worker slots taken over beside `index`, each with when
    // (ms since the epoch).
    std::map<int, int64_t> also;
    bool told = false; // the member has been sent its current assignment
    // PS members of a job with replicas > 1: a backup of shard `index`
    // (else its primary), and its version as last reported.
    bool backup = false;
    // A backup joining a running job: brought up to date by its primary
    // (a snapshot, then the steps since); promoted never, until caught up.
    bool joining = false;
    // A backup dropped or a join failed: not taken as a joining backup
    // before this (kJoinRetryAfter later).
    absl::Time no_join_before = absl::InfinitePast();
    int64_t applied = 0;
    int64_t memory_limit = 0;  // bytes it may use (0: unknown)
    std::string memory_source;
    // The process it is part of (RegisterRequest.daemon; "" for its own):
    // replicas of one shard index go to different daemons.
    std::string daemon;
    // Declared lost while it held work: given none until a heartbeat has
    // told it to stop (a member that was only silent may still run its old
    // part, which must end before it takes a slot again).
    bool needs_stop = false;
    // Its credential (RegisterResponse.member_secret) and the token it
    // registered with (Caller::token).
    std::string secret;
    std::string token;
    // The member leaves once its work is handed off (a drain): no new work.
    bool draining = false;
    // DrainMember asked it to: its assignments say drain.
    bool drain_requested = false;
    // A train member that drains: its slots were handed to the job's
    // other members (StartHandOffLocked), once.
    bool hand_off_started = false;
    // Train members: slots of `also` handed over by a member that drains
    // and not yet reported by this one (Assignment.handed_indices).
    std::set<int> handed;
    // Pool members: the lease taken back when it was declared lost (job,
    // item): a late result of it is ignored, not refused.
    std::string lost_lease_job;
    int lost_lease_index = -1;
  };
  struct Item {
    WorkItem item;
    std::string holder;  // member id while leased
    bool done = false;
    WorkResult result;
  };
  struct Round {
    std::string name;
    int64_t version = 0;
    std::string checkpoint;
    int first = 0, count = 0;  // its items: work[first, first + count)
    int done = 0;
    bool finished = false;
  };
  struct Job {
    JobStatus status;
    int64_t examples_per_epoch = 0;
    std::vector<std::string> shards;   // member ids by shard index
    // replicas > 1: each index's backups (member ids) and term (how many
    // times its primary was replaced by a backup).
    std::vector<std::vector<std::string>> backups;
    std::vector<int64_t> terms;
    // Backups joining while the job runs (member ids), by index.
    std::vector<std::vector<std::string>> joining;
    std::vector<std::string> slots;    // member ids by worker index ("" free)
    std::vector<bool> slot_done;
    // BF16 jobs: members that reported steps computed in F32 (no native
    // bf16 on their CPU); said once each, and on their slots' holders.
    std::set<std::string> fp32_members;
    // When each free slot became free (InfiniteFuture: held or done): a
    // surviving worker takes it over once no idle member took it for
    // slot_takeover_after.
    std::vector<absl::Time> slot_free_since;
    // Pipeline jobs: stage slots freed by a lost member in this incarnation
    // and not taken yet, with what happened to it; one still free after
    // slot_takeover_after restarts the job from its checkpoint.
    std::map<int, std::string> lost_stages;
    // Slots handed over by a member that drains (slot -> its id), until
    // their new holder reported a step of them: the drained member computes
    // them meanwhile and is told to leave once none is left.
    std::map<int, std::string> handing;
    // (step, slot) reported, for steps >= counted_floor; reports of older
    // steps are repeats of long-finished steps and are ignored.
    std::set<std::pair<int64_t, int>> counted;
    int64_t counted_floor = 0;
    std::map<int64_t, std::pair<double, int>> step_loss;  // step -> (sum, n)
    std::map<int, StepReport> last_report;             // by slot
    // The newest step reported by any worker, and when it first was.
    int64_t newest_step = -1;
    absl::Time newest_step_at = absl::InfinitePast();
    std::deque<JobEvent> events;  // the newest max_events
    int64_t events_dropped = 0;    // sequence number of events.front()
    double tokens_per_example = 0;
    // Shards that reported the job installed: a heartbeat naming the job
    // after they were sent it. Trainers get their slots once all are.
    std::set<std::string> ready_shards;
    std::vector<Item> work;            // leased items, in index order
    std::vector<Round> rounds;         // eval rounds
    bool training_done = false;        // all slots done (eval may remain)
    // TensorBoard events not written yet (spec.tensorboard_dir).
    std::vector<tf::Event> tb_pending;
    std::string last_checkpoint;       // newest manifest worker 0 reported
    int64_t last_checkpoint_version = 0;
    // The examples the applied updates consumed, from shard 0's heartbeats,
    // at shard 0's version ledger_version (-1: none heard yet).
    ps::ExampleLedger ledger;
    int64_t ledger_version = -1;
    // What the store last got of the job (a change of either is urgent).
    JobState stored_state = JOB_STATE_UNSPECIFIED;
    int64_t stored_incarnation = -1;
    // Acknowledged means durable: while a change of state or incarnation is
    // not in the store yet, the events from held_from on (a sequence
    // number; -1: none held) reach no watcher and GetJob/ListJobs show
    // `durable` (the status as last written). With no store nothing is held.
    int64_t held_from = -1;
    JobStatus durable;
    absl::Time last_probe = absl::InfinitePast();  // of its shards
    // Train jobs: the current incarnation's keys (Assignment.job_key,
    // shard_key), made anew at each start; never shown, stored with the job
    // (a restarted coordinator checks re-announcements with them).
    std::string job_key;
    std::string shard_key;
    // Members removed from the job in this incarnation (lost, left,
    // drained): the shards refuse their capabilities until those expire
    // (Assignment.revoked_members; one that holds a place in the job again
    // is not sent).
    std::set<std::string> revoked;
    // A membership change whose first step with the new members is not
    // applied yet (index into status.membership; -1: none).
    int membership_pending = -1;
    // After a restart of the coordinator: until when the members that run
    // the job may re-announce it (MemberRun) and be adopted, with no
    // restart (InfinitePast: not adopting).
    absl::Time adopt_until = absl::InfinitePast();
  };

  void TickLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string SlowSlotsLocked(const Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<HeartbeatResponse> HeartbeatLocked(const HeartbeatRequest& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // heartbeat_interval_ms_ for `alive` members (options' heartbeat_ms and
  // max_heartbeats_per_s, at most member_timeout / 5).
  void SetHeartbeatIntervalLocked(int64_t alive) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether m may be given work: alive and heard within kHeardIntervals
  // heartbeat intervals (at least kHeardAtLeast). A member killed a moment
  // ago is alive until member_timeout; work given to it would wait out
  // that timeout (and, for a shard, restart the job).
  bool HeardLocked(const Member& m) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether m may be given work now: heard lately and, if it was declared
  // lost while holding work, told to stop since.
  bool MayTakeWorkLocked(const Member& m) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return HeardLocked(m) && !m.needs_stop && !m.draining &&
           !m.drain_requested;
  }
  // "" or, for the waiting message, the idle members of `role` not heard
  // lately ("; 1 idle train worker not heard for 4.2 s").
  std::string UnheardLocked(Role role) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Shard 0's ledger: the counts of progress, and the check that a finished
  // job consumed each example of its plan exactly once.
  void TakeLedgerLocked(Job& job, const HeartbeatRequest& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountExamplesLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A trained job consumed exactly its plan's examples (FAILs it, naming
  // what was applied, and returns false otherwise).
  bool CheckAccountingLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets JobStatus.waiting ("" : nothing); a change is an event.
  void SetWaitingLocked(Job& job, const std::string& what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a RUNNING train job waits for: free shard indices or worker slots.
  std::string RunningWaitLocked(const Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartJobsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives free worker slots to idle trainers, moves taken-over slots to
  // idle trainers, and has a surviving worker take over a slot free for
  // slot_takeover_after.
  void FillSlotsLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The slots a trainer member holds: its own, then those taken over.
  static std::vector<int> HeldSlots(const Member& m) {
    std::vector<int> held = {m.index};
    for (const auto& [k, since] : m.also) held.push_back(k);
    return held;
  }
  // Frees every slot `m` holds in `job` (its own and those taken over).
  void FreeSlotsLocked(Job& job, Member& m, const std::string& how)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Done slots (their part over) of `replica` (-1: every slot) are needed
  // again: a replica's stage lost before its last push needs its other
  // stages; a failover may lose a last push that was only staged. They are
  // no longer done: a member still holding one starts it again itself
  // (worker/job_member.h) and says "done" again; one whose member is gone
  // is free, for another member to compute what is not applied yet.
  // Nothing once training is done.
  void ReopenDoneSlotsLocked(Job& job, int replica, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether slot k's recorded member is alive, in the job and holds k.
  bool HolderAliveLocked(const Job& job, int k) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // JobStatus.slots from job.slots and the members (after a change).
  // Records a change of the members holding `job`'s slots
  // (JobStatus.members, .membership; a TensorBoard point).
  void NoteMembershipLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateSlotHoldersLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replicas (coordinator_replicas.cc). JobStatus.shards from the members.
  void UpdateShardReplicasLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A lost primary of shard `index`: its most advanced live backup becomes
  // the primary of the next term (every member of the job is told); false
  // when it has none (the job restarts from its checkpoint instead).
  bool FailOverLocked(Job& job, int index, const Member& lost,
                      const std::string& how) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A backup gone, or dropped by its primary: no longer one of the index's.
  void DropBackupLocked(Job& job, Member& m, const std::string& how)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Re-replication: an index with fewer than replicas - 1 backups takes an
  // idle parameter-server daemon as a joining backup, brought up to date
  // by its primary while the job runs.
  void AddBackupsLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Places `shards` indices x `replicas` on the idle shard members `ps`: by
  // index, its primary then its backups, never two of one index in one
  // daemon, primaries spread over the daemons first. Empty when they do not
  // fit.
  static std::vector<std::vector<Member*>> PlaceShards(
      const std::vector<Member*>& ps, int shards, int replicas);
  // Whether member m is part of a daemon that holds a replica of shard
  // `index` of the job already (its primary, a backup, a joining backup).
  bool DaemonHoldsIndexLocked(const Job& job, int index, const Member& m) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The member's daemon: RegisterRequest.daemon, else the member itself.
  static const std::string& DaemonOf(const Member& m) {
    return m.daemon.empty() ? m.id : m.daemon;
  }
  // A joining backup of `index` caught up (its primary said so): it counts
  // as a backup from now on.
  void JoinedLocked(Job& job, int index, const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The joins of shard `index` end (their primary was replaced).
  void EndJoinsLocked(Job& job, int index, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A shard member's heartbeat in its job: its applied version, shard 0's
  // example ledger (from the primary), the backups its primary dropped.
  // Whether what a tick acts on changed.
  bool TakeShardReportLocked(Job& job, Member& m, const HeartbeatRequest& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether every primary and backup of the job reported it installed.
  bool ShardsReadyLocked(const Job& job) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The step reports of a train member's heartbeat, each for the slot it
  // names (its own by default), those of slots it does not hold dropped.
  void RecordReportsLocked(Job& job, const Member& m, const HeartbeatRequest& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The slot a train member's report or "done" is for (its index, or one
  // it took over); -1 when it holds no such slot.
  static int SlotOfLocked(const Member& m, int slot);
  // Gives free shard indices of a running job to idle shard members.
  void FillShardsLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether member m has the memory for its part of `job` (train members:
  // `parts` worker slots at once).
  bool FitsLocked(const Member& m, const Job& job, int parts = 1) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A train job none of whose registered members of a role could ever hold
  // its part is refused (RESOURCE_EXHAUSTED with the figures); with no
  // member of the role registered yet, or one whose limit is unknown, it
  // may wait.
  absl::Status CheckMemberMemoryLocked(const JobSpec& spec,
                                       const MemoryEstimate& need) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A live train worker of the job computing a slot of its own.
  static bool IsSurvivor(const Member& m, const Job& job);
  // Whether member m is a surviving train worker of the job with the
  // memory for one more slot beside what it computes.
  bool CanTakeOverLocked(const Member& m, const Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a surviving train member of the job could take a free slot
  // over beside what it computes (or none survives: nothing to say).
  bool SurvivorCanTakeOverLocked(const Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "; K idle ... daemon(s) have too little memory (...)" or "".
  std::string TooSmallLocked(const Job& job, Role role) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A member is gone (`how`: stopped answering, left, was restarted): its
  // lease, slot or shard is taken back; a lost shard or pipeline stage
  // starts its job again (RestartLocked).
  void LoseMemberLocked(Member& m, const std::string& how)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the job back to its newest checkpoint (checkpoint.restore, the
  // progress, the reports and loss history after it); returns its step.
  int64_t RewindLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a restart: the newest complete checkpoint in the job's directory,
  // where it is newer than the stored one (the store may lag it).
  void AdoptNewerCheckpointLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts a running train job again from its newest checkpoint under a
  // new incarnation (FAILED once checkpoint.max_restarts are used).
  void RestartLocked(Job& job, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishLocked(Job& job, JobState state, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EventLocked(Job& job, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's record for the store.
  JobRecord RecordLocked(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sequence number of the next event of `job`; of the first one not shown
  // yet (held_from, or the next).
  static int64_t EventsTotal(const Job& job) {
    return job.events_dropped + static_cast<int64_t>(job.events.size());
  }
  static int64_t EventsShown(const Job& job) {
    return job.held_from >= 0 ? std::min(job.held_from, EventsTotal(job))
                              : EventsTotal(job);
  }
  // The status a client may be shown: the durable one while a change is
  // held back.
  const JobStatus& ShownLocked(const Job& job) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return job.held_from >= 0 ? job.durable : job.status;
  }
  // Flushes the store when a change is waiting for it (urgent); the
  // store's error, to answer UNAVAILABLE with, otherwise OK.
  absl::Status FlushIfUrgent() ABSL_LOCKS_EXCLUDED(store_mu_, mu_);
  // The job changed: written at the next FlushStore (a state change makes it
  // urgent).
  void MarkDirtyLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::string> AddJob(JobSpec spec, const std::string& owner)
      ABSL_LOCKS_EXCLUDED(mu_);
  void RecordLocked(Job& job, int slot, const StepReport& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Steps [0, applied) are applied: progress and exact example counts.
  void AdvanceLocked(Job& job, int64_t applied)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The member's signed capability (and, for a shard, the key and the
  // revoked members) in its assignment.
  void AddCapabilityLocked(const Job& job, const Member& m, Assignment* a) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  Assignment AssignmentLocked(const Member& m) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Pool members (preprocess, eval): results in, next item out.
  void TakeResultLocked(Member& m, const std::string& job_id,
                        const WorkResult& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LeaseLocked(Member& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLocked(Member& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds an eval round over the job's eval data for a checkpoint.
  void AddRoundLocked(Job& job, const std::string& name, int64_t version,
                      const std::string& checkpoint)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishRoundLocked(Job& job, Round& round)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SUCCEEDED once training (if any) and every item are done.
  void MaybeSucceedLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t NowMs() const;

  const CoordinatorOptions options_;
  const std::string instance_;  // random, in member ids
  const std::shared_ptr<const CapabilitySigner> signer_;
  // One flush at a time, so that a job's records reach the store in order;
  // taken before mu_, never under it.
  absl::Mutex store_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  int64_t next_job_ ABSL_GUARDED_BY(mu_) = 1;
  // A new job id: "job-NNNNNN" numbered on from the store's jobs; without a
  // store "job-NNNNNN-<instance>", so ids (and the directories named after
  // them) never repeat across restarts.
  std::string NewJobIdLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t next_member_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);  // PENDING, FIFO
  // The outputs (LexicalNormal) of submissions making their directories
  // outside the lock: no other submission may take them meanwhile.
  std::multiset<std::string> outputs_being_made_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Member> members_ ABSL_GUARDED_BY(mu_);
  // Registrations per token: a token bucket each (tokens, last refill).
  struct RegistrationBucket {
    double tokens = 0;
    absl::Time at = absl::InfinitePast();
  };
  std::map<std::string, RegistrationBucket> registrations_ ABSL_GUARDED_BY(mu_);
  // A registration may proceed under `caller`'s token limits.
  absl::Status AdmitRegistrationLocked(const Caller& caller)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a restart: a running train job waits for the members that run it
  // to re-announce it (PrepareAdoptionLocked); one that does is adopted in
  // its place (AdoptLocked: same incarnation, key checked); once every shard
  // index has its primary the job goes on with no restart, and when one
  // has none by adopt_until it starts again from its checkpoint
  // (CheckAdoptionLocked, each tick).
  void PrepareAdoptionLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AdoptLocked(Member& m, const MemberRun& run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the job is still adopting after this tick's check.
  bool CheckAdoptionLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Dead members that hold nothing, silent past reclaim_after: forgotten.
  void ReclaimMembersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a pool result is for the lease `m` holds (true), for the one
  // taken back when it was lost (false, ignored); else PERMISSION_DENIED.
  absl::StatusOr<bool> CheckResultLocked(const Member& m,
                                         const std::string& job_id,
                                         const WorkResult& r) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string last_wait_ ABSL_GUARDED_BY(mu_);  // last "job waits" log line
  // The previous tick, and when the coordinator last resumed from a stall
  // (silence before it does not count).
  absl::Time last_tick_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t ticks_ ABSL_GUARDED_BY(mu_) = 0;
  // While members lost together are handled (ProbeMembers): the jobs
  // restarted so far, each restarted once.
  std::set<std::string>* batch_restarted_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t heartbeat_interval_ms_ ABSL_GUARDED_BY(mu_);
  absl::Time resumed_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Jobs to write to the store; whether one changed state; the last write.
  std::set<std::string> dirty_ ABSL_GUARDED_BY(mu_);
  // TensorBoard: a scalar (finite values only) for the job's event log, and
  // the logs, written by FlushTensorBoard outside mu_.
  void ScalarLocked(Job& job, int64_t step, const std::string& tag,
                    double value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drained members that left (the newest kDrainedKept), so that asking to
  // drain one again is answered as before.
  // FAILED_PRECONDITION when draining `member_id` leaves its running job
  // short (Drain without force).
  absl::Status CheckDrainLeavesEnough(const std::string& member_id) const
      ABSL_LOCKS_EXCLUDED(mu_);
  void RememberDrainedLocked(const Member& m, const std::string& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `m` wants to drain (SIGTERM's heartbeat, or DrainMember).
  static bool DrainWanted(const Member& m) {
    return m.draining || m.drain_requested;
  }
  // A train member that drains, of a BSP job without backup workers or
  // stages: its slots but slot 0 go to the job's other members at once (the
  // fewest held first), handed (Job.handing): it computes them until each
  // new holder reported a step of them, so none waits for a takeover and no
  // step is computed again. Once per member; slot 0 (its holder writes the
  // checkpoints: never two at once), and every slot without another member,
  // are freed when it leaves, as on any leave.
  void StartHandOffLocked(Member& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Member `holder` reported a step of slot k: a hand-off of k is over.
  void HandedLocked(Job& job, const std::string& holder, int k)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `d` is gone: its hand-offs not yet over end; each new holder that took
  // such a slot at a step boundary starts its part again (the steps before
  // it have no push of the slot now).
  void EndHandOffsLocked(Job& job, const Member& d)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `d` still computes slots it handed over, or (a shard primary
  // of an index with no backup) waits for a backup joining to take its
  // index over.
  bool HandingLocked(const Member& d) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the job's shards have, or had, backups: replicas > 1, or a
  // backup joined for a primary that drains (their assignments say so).
  static bool Replicated(const Job& job);
  static constexpr size_t kDrainedKept = 1024;
  std::map<std::string, DrainMemberResponse> drained_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> drained_order_ ABSL_GUARDED_BY(mu_);
  // Revoked members (the last kDrainedKept), answered on their calls.
  std::map<std::string, RevokeMemberResponse> revoked_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> revoked_order_ ABSL_GUARDED_BY(mu_);

  void FlushTensorBoard() ABSL_LOCKS_EXCLUDED(tb_mu_, mu_);
  absl::Mutex tb_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::map<std::string, std::unique_ptr<io::EventLog>> tb_logs_
      ABSL_GUARDED_BY(tb_mu_);
  // Jobs whose TensorBoard writes fail now (told once in the job's events,
  // and again when they write again).
  std::set<std::string> tb_failing_ ABSL_GUARDED_BY(tb_mu_);
  // Probes of a job's shards after a train member could not reach them:
  // queued under mu_ (at most one round per job a second), run by
  // ProbeMembers (from Tick) outside mu_.
  struct Probe {
    std::string job, member, address, why;
    int64_t incarnation = 0;
  };
  void QueueProbesLocked(Job& job, const Member& reporter,
                         const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ProbeMembers() ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<Probe> probes_ ABSL_GUARDED_BY(mu_);
  // Checkpoint retention (checkpoint.keep): prunes queued under mu_ after a
  // new checkpoint or a finished eval round, done by PruneCheckpoints (from
  // Tick) outside mu_.
  struct Prune {
    std::string job, dir;
    int keep = 0;
    int64_t newest = 0;            // the newest checkpoint reported
    std::set<int64_t> pinned;      // still needed: eval rounds, the restart
  };
  void QueuePruneLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PruneCheckpoints() ABSL_LOCKS_EXCLUDED(prune_mu_, mu_);
  absl::Mutex prune_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::vector<Prune> prunes_ ABSL_GUARDED_BY(mu_);
  bool urgent_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_flush_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string store_error_ ABSL_GUARDED_BY(mu_);
  // Watchers waiting for events (WhenEvents); poked by EventLocked. Last:
  // destroyed first, answering them while the rest is whole.
  std::unique_ptr<Waitlist> watch_ = std::make_unique<Waitlist>("job-watch");
};

bool IsFinal(JobState s);

// Work items over files matched by `globs`: each file cut into
// parts = max(1, ceil(shards / files)) parts (shards 0: one item per file).
// With `roots`, every match resolved and checked against them before it
// is looked at (CheckInputFile): one outside is refused, naming it.
absl::StatusOr<std::vector<WorkItem>> MakeWorkItems(
    const std::vector<std::string>& globs, int shards,
    const PathRoots& roots = {});

// Merged metrics of statistics (classification when num_labels > 0).
EvalMetrics MetricsOf(const EvalStats& stats,
                      const std::vector<std::string>& label_names);
// a += b (confusion matrices of the same size; InvalidArgument otherwise).
absl::Status AddEvalStats(const EvalStats& b, EvalStats* a);

}  // namespace bertps

#endif  // BERTPS_SERVER_COORDINATOR_COORDINATOR_H_

// Helpers of the coordinator's tests: members registered, heartbeats in a
// job, a train job's spec, and a coordinator on a fake clock.
#ifndef BERTPS_SERVER_COORDINATOR_COORDINATOR_TEST_UTIL_H_
#define BERTPS_SERVER_COORDINATOR_COORDINATOR_TEST_UTIL_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/cluster/member_instance.h"
#include "server/coordinator/coordinator.h"

namespace bertps {

// The credentials (RegisterResponse.member_secret) of the members the
// tests registered, by member id.
inline std::map<std::string, std::string>& TestMemberSecrets() {
  static auto* secrets = new std::map<std::string, std::string>();
  return *secrets;
}

// Register, keeping the member's credential for SignedHeartbeat.
inline absl::StatusOr<RegisterResponse> RegisterMember(
    Coordinator& c, RegisterRequest r, const Caller& caller = Caller()) {
  if (r.protocol_version() == 0) r.set_protocol_version(kMemberProtocolVersion);
  absl::StatusOr<RegisterResponse> resp = c.Register(r, caller);
  if (resp.ok()) TestMemberSecrets()[resp->member_id()] = resp->member_secret();
  return resp;
}

// A heartbeat carrying its member's credential (as MemberClient sends it).
inline absl::StatusOr<HeartbeatResponse> SignedHeartbeat(Coordinator& c,
                                                         HeartbeatRequest r) {
  auto it = TestMemberSecrets().find(r.member_id());
  if (it != TestMemberSecrets().end()) r.set_member_secret(it->second);
  return c.Heartbeat(r);
}

// A member of `role` registered with `c`; its id.
inline std::string JoinAs(Coordinator& c, Role role, const std::string& address = "") {
  RegisterRequest r;
  r.set_role(role);
  r.set_address(address);
  return RegisterMember(c, r)->member_id();
}

// A PRETRAIN job over data/*.tfrecord, batch 10.
inline JobSpec TrainSpec(int shards, int workers, int64_t steps) {
  JobSpec s;
  s.set_task(PRETRAIN);
  s.add_data("data/*.tfrecord");
  s.set_batch_size(10);
  s.set_steps(steps);
  s.set_num_ps_shards(shards);
  s.set_num_workers(workers);
  return s;
}

// A shard daemon and a train daemon registered with `c` (for the tests
// that build their own coordinator).
inline std::pair<std::string, std::string> JoinShardAndTrainer(Coordinator& c) {
  RegisterRequest rr;
  rr.set_role(PS);
  rr.set_address("127.0.0.1:1");
  std::string ps = RegisterMember(c, rr)->member_id();
  rr.set_role(TRAIN);
  rr.clear_address();
  return {ps, RegisterMember(c, rr)->member_id()};
}

// A heartbeat of member m in `job` (its current incarnation) with reports.
inline Assignment BeatIn(Coordinator& c, const std::string& m, const std::string& job,
                  std::vector<StepReport> steps = {}) {
  HeartbeatRequest r;
  r.set_member_id(m);
  r.set_job_id(job);
  r.set_incarnation(c.Get(job)->incarnation());
  for (auto& s : steps) *r.add_steps() = s;
  return SignedHeartbeat(c, r)->assignment();
}

// The messages of `job`'s events so far, one per line.
inline std::string JobEventsText(Coordinator& c, const std::string& job) {
  int64_t seq = 0;
  auto events = c.WaitForEvents(job, &seq, absl::InfinitePast());
  std::string all;
  if (!events.ok()) return all;
  for (const JobEvent& e : *events) {
    all += e.message();
    all += "\n";
  }
  return all;
}

// A coordinator on a fake clock for tests that need options of their own:
// `tweak` sets them over the defaults (member timeout 10 s, no stall
// detection, 100 examples per epoch).
class ClockedCoordinator {
 public:
  explicit ClockedCoordinator(
      const std::function<void(CoordinatorOptions&)>& tweak = nullptr) {
    CoordinatorOptions o;
    o.member_timeout = absl::Seconds(10);
    o.stall_threshold = absl::InfiniteDuration();
    o.now = [this] { return now; };
    o.count_examples = [](const JobSpec&) -> absl::StatusOr<int64_t> {
      return 100;
    };
    if (tweak) tweak(o);
    c = std::make_unique<Coordinator>(o);
  }
  std::string Join(Role role, const std::string& address = "") {
    return JoinAs(*c, role, address);
  }
  // A heartbeat naming the current incarnation of `job`.
  Assignment Beat(const std::string& member, const std::string& job,
                  const std::string& unreachable = "") {
    HeartbeatRequest r;
    r.set_member_id(member);
    r.set_job_id(job);
    r.set_unreachable(unreachable);
    if (!job.empty()) r.set_incarnation(c->Get(job)->incarnation());
    return SignedHeartbeat(*c, r)->assignment();
  }
  // A heartbeat saying the member's own slot's part ended.
  bool Done(const std::string& member, const std::string& job) {
    HeartbeatRequest r;
    r.set_member_id(member);
    r.set_job_id(job);
    r.set_incarnation(c->Get(job)->incarnation());
    r.set_done(true);
    return SignedHeartbeat(*c, r).ok();
  }

  absl::Time now = absl::FromUnixSeconds(1000);
  std::unique_ptr<Coordinator> c;
};

}  // namespace bertps

#endif  // BERTPS_SERVER_COORDINATOR_COORDINATOR_TEST_UTIL_H_

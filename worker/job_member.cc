#include "common/monotonic_clock.h"
#include "worker/job_member.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/cluster/job_plan.h"
#include "common/memory_limit.h"
#include "glog/logging.h"

namespace bertps {

JobMember::JobMember(const std::string& coordinator, Role role,
                     std::string address, const SecurityConfig& security,
                     Runner runner)
    : member_(coordinator, role, std::move(address), security),
      runner_(std::move(runner)) {}

JobMember::~JobMember() { StopParts(); }

bool JobMember::IsTransient(const absl::Status& st) {
  // CANCELLED here comes from the far end (this member's own stop is its
  // cancel flag, checked first): e.g. a shard daemon whose server shuts
  // down as it leaves cancels the calls it was serving.
  return st.code() == absl::StatusCode::kUnavailable ||
         st.code() == absl::StatusCode::kAborted ||
         st.code() == absl::StatusCode::kDeadlineExceeded ||
         st.code() == absl::StatusCode::kCancelled;
}

void JobMember::StopPart(int slot) {
  auto it = parts_.find(slot);
  if (it == parts_.end()) return;
  *it->second.cancel = true;
  if (it->second.thread.joinable()) it->second.thread.join();
  parts_.erase(it);
  absl::MutexLock l(&mu_);
  states_.erase(slot);
}

void JobMember::StopParts() {
  // Every part is told first, then joined: they stop together.
  for (auto& [slot, part] : parts_) *part.cancel = true;
  while (!parts_.empty()) StopPart(parts_.begin()->first);
  capability_->Unpin();
  absl::MutexLock l(&mu_);
  live_added_.clear();
}

std::vector<std::string> JobMember::PeersOf(const Assignment& a, int slot) {
  if (a.spec().pipeline().stages() <= 1 || a.stage_addresses_size() == 0) {
    return {a.peers().begin(), a.peers().end()};
  }
  // The stage addresses of the slot's replica, by stage.
  const JobPlan plan = PlanOf(a.spec());
  const int replica = plan.ReplicaOf(slot);
  std::vector<std::string> peers;
  for (int stage = 0; stage < plan.stages; ++stage) {
    const int k = plan.SlotOf(replica, stage);
    peers.push_back(k < a.stage_addresses_size() ? a.stage_addresses(k) : "");
  }
  return peers;
}

void JobMember::Start(const Assignment& assignment, int slot,
                      std::vector<int> slots) {
  if (slots.empty()) slots = {slot};
  {
    // A new start computes its slots from the shards' step.
    absl::MutexLock l(&mu_);
    for (int k : slots) live_added_.erase(k);
  }
  // A new start of a part that kept failing keeps when it began failing
  // (transient_limit counts from there until a step is reported).
  PartState fresh;
  fresh.slots = slots;
  {
    absl::MutexLock l(&mu_);
    auto it = states_.find(slot);
    if (it != states_.end()) fresh.failing_since = it->second.failing_since;
  }
  StopPart(slot);
  LOG(INFO) << assignment.job_id() << ": "
            << (slots.size() == 1
                    ? absl::StrCat("slot ", slot)
                    : absl::StrCat("slots ", absl::StrJoin(slots, ","),
                                   " (serially on one model)"))
            << " start" << (slots.size() == 1 ? "s" : "") << " (member "
            << member_.member_id() << ", incarnation "
            << assignment.incarnation() << ")";
  {
    absl::MutexLock l(&mu_);
    states_[slot] = fresh;
  }
  // The part sees an assignment of its slots alone.
  Assignment a = assignment;
  a.set_index(slot);
  a.clear_also_indices();
  for (int k : slots) {
    if (k != slot) a.add_also_indices(k);
  }
  const std::vector<std::string> peers = PeersOf(assignment, slot);
  a.clear_peers();
  for (const std::string& p : peers) a.add_peers(p);
  Part& part = parts_[slot];
  part.slots = slots;
  if (serial_ && serial_(assignment)) {
    // Its capability was pinned while it gave slots up (none now).
    capability_->Unpin();
    part.feed = std::make_shared<SlotFeed>(
        slots, [cap = capability_] { cap->Unpin(); });
  }
  part.ps_addresses.assign(a.ps_addresses().begin(), a.ps_addresses().end());
  part.peers.assign(a.peers().begin(), a.peers().end());
  std::atomic<bool>* cancel = part.cancel.get();
  try {
    StartPartThread(part, a, slot, cancel);
  } catch (const std::system_error& e) {
    // No thread (its stack could not be mapped: a tight memory limit): the
    // part fails and the job hears why, the member goes on.
    const MemoryLimit limit = DetectMemoryLimit();
    absl::MutexLock l(&mu_);
    PartState& state = states_[slot];
    state.finished = true;
    state.error = absl::StrCat(
        "cannot start the thread of slot ", slot, " (", e.what(),
        "): this process may use ", FormatBytes(limit.bytes), " (",
        limit.source, ")");
    LOG(ERROR) << a.job_id() << " slot " << slot << ": " << state.error;
  }
}

void JobMember::StartPartThread(Part& part, const Assignment& a, int slot,
                                std::atomic<bool>* cancel) {
  part.thread = std::thread([this, a, slot, cancel, feed = part.feed] {
    auto report = [this, job = a.job_id(), slot](const StepReport& r) {
      StepReport s = r;
      if (!s.has_slot()) s.set_slot(slot);  // (a part of several names it)
      if (on_report_) on_report_(job, s);
      absl::MutexLock l(&mu_);
      pending_.push_back(s);
      last_ = s;
      live_added_.erase(s.slot());
      states_[slot].failing_since = absl::InfiniteFuture();  // progress
    };
    absl::Status st = runner_(a, cancel, report, feed);
    absl::MutexLock l(&mu_);
    PartState& state = states_[slot];
    state.finished = true;
    if (st.ok()) return;
    if (*cancel) {
      state.cancelled = true;  // not done: stopped (e.g. to go on elsewhere)
      return;
    }
    const absl::Time now = MonotonicNow();
    if (st.code() == absl::StatusCode::kUnavailable && unreachable_.empty()) {
      unreachable_ = std::string(st.message());
    }
    if (IsTransient(st)) {
      if (state.failing_since == absl::InfiniteFuture()) {
        state.failing_since = now;
      }
      if (now - state.failing_since < transient_limit_) {
        state.transient = true;
        LOG(WARNING) << a.job_id() << " slot " << slot << ": " << st
                     << " (starting again)";
        return;
      }
    }
    state.error = std::string(st.message());
    LOG(ERROR) << a.job_id() << " slot " << slot << ": " << st;
  });
}

absl::Status JobMember::Run(absl::Duration give_up) {
  loop_.set_give_up(give_up);
  return loop_.Run();
}

void JobMember::Fill(HeartbeatRequest* req) {
  std::map<int, PartState> states;
  std::string unreachable;
  {
    absl::MutexLock l(&mu_);
    sent_.swap(pending_);
    pending_.clear();
    states = states_;
    unreachable.swap(unreachable_);
  }
  req->set_job_id(job_);
  req->set_incarnation(incarnation_);
  req->set_draining(draining_);
  for (const StepReport& r : sent_) *req->add_steps() = r;
  std::string error;
  for (const auto& [slot, st] : states) {
    const bool own =
        std::find(st.slots.begin(), st.slots.end(), own_) != st.slots.end();
    if (!st.error.empty() && error.empty()) {
      error = own ? st.error
                  : absl::StrCat("slot ", slot, " (taken over): ", st.error);
    }
    if (st.finished && !st.transient && !st.cancelled && st.error.empty()) {
      for (int k : st.slots) req->add_done_slots(k);
      if (own) req->set_done(true);
    }
  }
  if (!error.empty()) {
    req->set_done(false);
    req->clear_done_slots();
  }
  req->set_error(error);
  req->set_unreachable(unreachable);
}

void JobMember::Unsent(const HeartbeatRequest& sent) {
  // Kept for the next attempt (reports are idempotent).
  absl::MutexLock l(&mu_);
  pending_.insert(pending_.begin(), sent_.begin(), sent_.end());
  sent_.clear();
  if (unreachable_.empty()) unreachable_ = sent.unreachable();
}

MemberRun JobMember::Running() {
  MemberRun run;
  run.set_shard(-1);
  run.set_item(-1);
  if (job_.empty() || parts_.empty()) return run;
  run.set_job_id(job_);
  run.set_incarnation(incarnation_);
  run.set_job_key(job_key_);
  std::set<int> held;
  for (const auto& [slot, part] : parts_) {
    held.insert(part.slots.begin(), part.slots.end());
  }
  if (held.count(own_) > 0) run.add_slots(own_);
  for (int slot : held) {
    if (slot != own_) run.add_slots(slot);
  }
  absl::MutexLock l(&mu_);
  for (const auto& [slot, st] : states_) {
    if (st.finished && !st.transient && !st.cancelled && st.error.empty()) {
      for (int k : st.slots) run.add_done_slots(k);
    }
  }
  return run;
}

void JobMember::GiveUp() {
  StopParts();
  job_.clear();
  incarnation_ = 0;
  job_key_.clear();
  own_ = -1;
}

bool JobMember::Apply(const Assignment& a) {
  if (on_assignment_) on_assignment_(a);
  const bool assigned = !a.stop() && !a.job_id().empty();
  if (!job_.empty() && !(assigned && a.job_id() == job_)) {
    // Finished, failed, cancelled, or the slots went to other members.
    StopParts();
    job_.clear();
    incarnation_ = 0;
    job_key_.clear();
    own_ = -1;
    if (exit_when_job_ends_) return false;
  }
  if (assigned && job_.empty()) {
    job_ = a.job_id();
    incarnation_ = a.incarnation();
  }
  // The job started again (a new incarnation): the running parts are of
  // the old start. (A member that registered again after the coordinator
  // restarted keeps its parts when the coordinator adopted them: the same
  // job and incarnation.)
  if (!parts_.empty() && a.incarnation() != incarnation_) {
    LOG(INFO) << job_ << ": incarnation " << a.incarnation() << " replaces "
              << incarnation_;
    StopParts();
    absl::MutexLock l(&mu_);
    pending_.clear();  // steps of the old start are done again
  }
  if (assigned) {
    incarnation_ = a.incarnation();
    if (!a.job_key().empty()) job_key_ = a.job_key();
    // Before the slots are followed: a slot taken over is pushed for with
    // the capability that names it.
    previous_capability_ = capability_->Latest();
    if (!a.capability().empty()) capability_->Set(a.capability());
  }
  if (assigned && !a.wait()) FollowSlots(a);
  return true;
}

void JobMember::FollowSlots(const Assignment& a) {
  own_ = a.index();
  std::set<int> want(a.also_indices().begin(), a.also_indices().end());
  want.insert(own_);
  if (serial_ && serial_(a)) {
    // One part (keyed by the own slot) computes every slot held, serially
    // on one model. Slots taken back from it it gives up at its next step
    // boundary; any other new set starts it again with them at the shards'
    // step (a slot added is needed by the step in flight).
    const std::vector<int> slots(want.begin(), want.end());
    const std::set<int> handed(a.handed_indices().begin(),
                               a.handed_indices().end());
    auto it = parts_.find(own_);
    bool lost_hand_off = false;  // a handed slot's previous holder left
    {
      absl::MutexLock l(&mu_);
      for (int k : live_added_) {
        if (want.count(k) > 0 && handed.count(k) == 0) lost_hand_off = true;
      }
    }
    if (parts_.size() == 1 && it != parts_.end() && !lost_hand_off &&
        it->second.slots != slots && it->second.feed != nullptr) {
      Part& part = it->second;
      const std::set<int> had(part.slots.begin(), part.slots.end());
      std::set<int> added, removed;
      std::set_difference(want.begin(), want.end(), had.begin(), had.end(),
                          std::inserter(added, added.end()));
      std::set_difference(had.begin(), had.end(), want.begin(), want.end(),
                          std::inserter(removed, removed.end()));
      bool running;
      {
        absl::MutexLock l(&mu_);
        running = !states_[own_].finished;
      }
      if (running && had.count(0) == want.count(0) &&
          std::includes(handed.begin(), handed.end(), added.begin(),
                        added.end())) {
        LOG(INFO) << job_ << ": slots " << absl::StrJoin(had, ",")
                  << " become " << absl::StrJoin(slots, ",")
                  << " from the part's next step on (no restart"
                  << (added.empty() ? "" : "; handed over by a member that "
                                           "drains")
                  << ")";
        part.slots = slots;
        // The step in flight still pushes the slots given up: with the
        // capability that names them, until the part computes the new set.
        if (!removed.empty()) capability_->PinIfUnpinned(previous_capability_);
        part.feed->Set(slots);
        absl::MutexLock l(&mu_);
        states_[own_].slots = slots;
        live_added_.insert(added.begin(), added.end());
      }
    }
    if (lost_hand_off) {
      LOG(INFO) << job_ << ": a slot handed over to this member lost its "
                << "previous holder before this part computed it: the part "
                << "starts again at the shards' step";
      StopParts();
      Start(a, own_, slots);
      return;
    }
    if (parts_.size() != 1 || it == parts_.end() ||
        it->second.slots != slots) {
      std::set<int> had;
      for (const auto& [slot, part] : parts_) {
        had.insert(part.slots.begin(), part.slots.end());
      }
      for (int slot : slots) {
        if (slot != own_ && had.count(slot) == 0) {
          LOG(INFO) << job_ << ": taking over slot " << slot << " beside slot "
                    << own_ << " (serially on one model)";
        }
      }
      if (!parts_.empty()) {
        LOG(INFO) << job_ << ": slots " << absl::StrJoin(had, ",")
                  << " become " << absl::StrJoin(slots, ",")
                  << ": the part goes on with them at the shards' step";
      }
      StopParts();
      Start(a, own_, slots);
      return;
    }
    FollowPart(a, own_, slots);
    return;
  }
  // Slots given to other members: their parts stop.
  std::vector<int> gone;
  for (const auto& [slot, part] : parts_) {
    if (want.count(slot) == 0 || part.slots.size() != 1) gone.push_back(slot);
  }
  for (int slot : gone) {
    LOG(INFO) << job_ << ": slot " << slot << " went to another member";
    StopPart(slot);
  }
  for (int slot : want) {
    if (parts_.count(slot) > 0) {
      FollowPart(a, slot, {slot});
      continue;
    }
    // A stage of the slot's replica without a member (being replaced):
    // its stages wait for the new one.
    const std::vector<std::string> peers = PeersOf(a, slot);
    if (std::any_of(peers.begin(), peers.end(),
                    [](const std::string& p) { return p.empty(); })) {
      continue;
    }
    if (slot != own_) {
      LOG(INFO) << job_ << ": taking over slot " << slot << " beside slot "
                << own_;
    }
    Start(a, slot);
  }
}

void JobMember::FollowPart(const Assignment& a, int slot,
                           const std::vector<int>& slots) {
  const std::vector<std::string> peers = PeersOf(a, slot);
  const bool peers_complete =
      std::none_of(peers.begin(), peers.end(),
                   [](const std::string& p) { return p.empty(); });
  bool finished, transient, done;
  {
    absl::MutexLock l(&mu_);
    const PartState& st = states_[slot];
    finished = st.finished;
    transient = st.transient;
    // Ran to its end (a stop asked too late changes nothing).
    done = st.finished && !st.transient && !st.cancelled && st.error.empty();
  }
  Part& part = parts_.at(slot);
  // A shard's primary was replaced by its backup: a part still running is
  // told to stop (it ends at its next check, or when its call to the lost
  // primary fails), then goes on at the new address. A stage of the
  // replica replaced: the same, with its new address.
  const bool shards_moved =
      !std::equal(part.ps_addresses.begin(), part.ps_addresses.end(),
                  a.ps_addresses().begin(), a.ps_addresses().end());
  const bool peers_moved = part.peers != peers;
  const bool moved = shards_moved || peers_moved;
  if (moved && !finished) {
    if (!part.moving) {
      part.moving = true;
      *part.cancel = true;
    }
    return;
  }
  // A part that ran to its end while the shards or its replica's stages
  // moved starts again too: its last push may have been lost with a
  // primary that had only staged it, or the replica's new stage needs it
  // for a step not yet applied. It starts at the shards' step (at the last
  // one there is nothing left and it ends at once) and pushes again what
  // the shards lack (a duplicate is applied once).
  if (done && moved && peers_complete) {
    LOG(INFO) << job_ << ": slot " << slot << " had ended; it starts "
              << "again with the "
              << (peers_moved ? "replica's new stage addresses"
                              : "shards' new addresses")
              << " (its last step may not be applied)";
    Start(a, slot, slots);
    return;
  }
  if (!finished || done || !(transient || part.moving)) return;
  if (!peers_complete) return;  // wait for the replica's new stage
  if (moved || part.moving) {
    LOG(INFO) << job_ << ": slot " << slot << " goes on with the "
              << (peers_moved ? "replica's new stage addresses"
                              : "shards' new addresses");
    Start(a, slot, slots);
  } else if (part.retry_at == absl::InfiniteFuture()) {
    part.retry_at = MonotonicNow() + absl::Seconds(1);
  } else if (MonotonicNow() >= part.retry_at) {
    Start(a, slot, slots);  // rejoins at the shards' step
  }
}

void JobMember::End(HeartbeatRequest* last) {
  StopParts();
  last->set_job_id(job_);
  last->set_incarnation(incarnation_);
  absl::MutexLock l(&mu_);
  for (const StepReport& r : pending_) *last->add_steps() = r;
}

}  // namespace bertps

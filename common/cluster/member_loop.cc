#include "common/cluster/member_loop.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace bertps {

MemberLoop::MemberLoop(MemberChannel* channel, MemberRole* role,
                       MemberLoopOptions options)
    : channel_(channel), role_(role), options_(std::move(options)) {
  channel_->set_announce([this] { return role_->Running(); });
}

absl::Status MemberLoop::Run() {
  Backoff backoff(options_.retry);
  absl::Time last_ok = options_.now();
  // The member timeout the give-up was last checked against (the
  // coordinator names it at registration; common/timeouts.h CheckGiveUp).
  absl::Duration give_up_checked = absl::ZeroDuration();
  while (!stop_) {
    HeartbeatRequest req;
    role_->Fill(&req);
    absl::StatusOr<Assignment> a = channel_->Heartbeat(req);
    if (a.status().code() == absl::StatusCode::kPermissionDenied) {
      // The coordinator refuses this member's credential (an admin revoked
      // it): its work is not its own any more. It stops at once and the
      // daemon ends with the refusal (a new start registers anew).
      LOG(ERROR) << "the coordinator refuses this member: " << a.status()
                 << "; stopping its work";
      role_->GiveUp();
      return a.status();
    }
    if (!a.ok()) {
      // Nothing is lost: what it carried goes with the next one.
      role_->Unsent(req);
      const absl::Duration away = options_.now() - last_ok;
      if (!gave_up_ && options_.give_up > absl::ZeroDuration() &&
          away > options_.give_up) {
        LOG(ERROR) << "the coordinator has not answered for "
                   << absl::FormatDuration(away) << " (give-up "
                   << absl::FormatDuration(options_.give_up)
                   << "): stopping this member's work; it keeps trying and "
                      "says so once the coordinator is back ("
                   << a.status() << ")";
        role_->GiveUp();
        gave_up_ = true;
        channel_->set_gave_up(absl::StrCat(
            "stopped its work after the coordinator did not answer for ",
            absl::FormatDuration(away), " (its give-up is ",
            absl::FormatDuration(options_.give_up), ")"));
      } else if (backoff.failures() == 0 || backoff.failures() % 20 == 0) {
        LOG(WARNING) << a.status();
      }
      absl::Duration wait = backoff.Next();
      // Well inside the coordinator's member timeout: a member that comes
      // back is heard before it is declared lost.
      const absl::Duration timeout = channel_->member_timeout();
      if (timeout > absl::ZeroDuration()) wait = std::min(wait, timeout / 3);
      options_.sleep(wait);
      continue;
    }
    if (gave_up_) LOG(INFO) << "the coordinator answers again";
    if (const absl::Duration timeout = channel_->member_timeout();
        timeout > absl::ZeroDuration() && timeout != give_up_checked) {
      give_up_checked = timeout;
      absl::Status g = CheckGiveUp(options_.give_up, timeout);
      if (!g.ok()) LOG(WARNING) << g.message();
    }
    gave_up_ = false;
    backoff.Reset();
    last_ok = options_.now();
    if (a->drain()) {
      // Asked to drain (JobService.DrainMember): the work goes back to the
      // coordinator as on SIGTERM, and the daemon exits.
      LOG(INFO) << "the coordinator asks this member to drain: it stops its "
                   "work and leaves";
      stop_ = true;
      break;
    }
    if (!role_->Apply(*a)) break;
    if (stop_) break;
    if (!role_->Urgent()) role_->Wait(channel_->interval(), options_.sleep);
  }
  HeartbeatRequest last;
  role_->End(&last);
  if (stop_) {
    absl::Status st = channel_->Leave(last);
    if (!st.ok()) LOG(WARNING) << st;
  }
  return absl::OkStatus();
}

}  // namespace bertps

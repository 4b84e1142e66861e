#include "common/waitlist.h"

#include <algorithm>
#include <utility>

namespace bertps {

Waitlist::Waitlist(std::string name, absl::Duration poll)
    : name_(std::move(name)), poll_(poll), thread_([this] { Loop(); }) {}

Waitlist::~Waitlist() { Stop(); }

void Waitlist::Add(std::function<bool()> ready, absl::Time deadline,
                   std::function<void(bool)> fire) {
  {
    absl::MutexLock l(&mu_);
    if (!stopped_) {
      waiters_.push_back({std::move(ready), deadline, std::move(fire)});
      poked_ = true;
      return;
    }
  }
  const bool r = ready();
  {
    absl::MutexLock l(&mu_);
    ++fired_;
  }
  fire(r);
}

void Waitlist::Poke() {
  absl::MutexLock l(&mu_);
  poked_ = true;
}

void Waitlist::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (stop_) {
      // Another Stop() joins; this one waits until the thread ended.
      mu_.Await(absl::Condition(&stopped_));
      return;
    }
    stop_ = true;
  }
  thread_.join();
}

int64_t Waitlist::waiting() const {
  absl::MutexLock l(&mu_);
  return static_cast<int64_t>(waiters_.size()) + looking_;
}

int64_t Waitlist::fired() const {
  absl::MutexLock l(&mu_);
  return fired_;
}

int64_t Waitlist::missed_pokes() const {
  absl::MutexLock l(&mu_);
  return missed_pokes_;
}

void Waitlist::Loop() {
  for (;;) {
    std::vector<Waiter> look;
    bool poked = false;
    bool stopping = false;
    {
      absl::MutexLock l(&mu_);
      absl::Time wake = absl::Now() + poll_;
      for (const Waiter& w : waiters_) wake = std::min(wake, w.deadline);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return poked_ || stop_;
      };
      mu_.AwaitWithDeadline(absl::Condition(&woken), wake);
      poked = poked_;
      poked_ = false;
      stopping = stop_;
      look.swap(waiters_);
      looking_ = static_cast<int64_t>(look.size());
    }
    const absl::Time now = absl::Now();
    std::vector<std::pair<Waiter, bool>> fire;
    std::vector<Waiter> keep;
    int64_t missed = 0;
    for (Waiter& w : look) {
      const bool r = w.ready();
      if (r && !poked) ++missed;
      if (r || stopping || now >= w.deadline) {
        fire.emplace_back(std::move(w), r);
      } else {
        keep.push_back(std::move(w));
      }
    }
    {
      absl::MutexLock l(&mu_);
      for (Waiter& w : keep) waiters_.push_back(std::move(w));
      looking_ = 0;
      fired_ += static_cast<int64_t>(fire.size());
      // A poke that came while the conditions were read was for this change.
      if (!poked_) missed_pokes_ += missed;
    }
    for (auto& [w, r] : fire) w.fire(r);
    if (stopping) {
      absl::MutexLock l(&mu_);
      if (waiters_.empty()) {
        stopped_ = true;
        return;
      }
    }
  }
}

}  // namespace bertps

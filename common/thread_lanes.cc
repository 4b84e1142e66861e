#include "common/thread_lanes.h"

#include <pthread.h>

#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace bertps {

ThreadLanes::ThreadLanes(std::string name, int lanes)
    : name_(std::move(name)), lanes_(static_cast<size_t>(lanes < 1 ? 1 : lanes)) {}

ThreadLanes::~ThreadLanes() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock l(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const Lane& lane : lanes_) {
        if (lane.busy) return false;
      }
      return true;
    };
    mu_.Await(absl::Condition(&idle));
    stop_ = true;
    for (Lane& lane : lanes_) {
      if (lane.thread.joinable()) threads.push_back(std::move(lane.thread));
    }
    for (auto& e : extras_) threads.push_back(std::move(e->thread));
    extras_.clear();
  }
  for (std::thread& t : threads) t.join();
}

void ThreadLanes::ReapLocked() {
  for (size_t i = 0; i < extras_.size();) {
    if (extras_[i]->ended) {
      extras_[i]->thread.join();  // it has returned from its task
      extras_.erase(extras_.begin() + static_cast<long>(i));
    } else {
      ++i;
    }
  }
}

absl::Status ThreadLanes::Start() {
  absl::MutexLock l(&mu_);
  for (Lane& ln : lanes_) {
    if (ln.thread.joinable()) continue;
    const int index = static_cast<int>(&ln - lanes_.data());
    try {
      ln.thread = std::thread([this, index] { LaneLoop(index); });
    } catch (const std::system_error& e) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot start thread ", index + 1, " of ", lanes_.size(), " (",
          name_, "): ", e.what()));
    }
    ++started_;
  }
  return absl::OkStatus();
}

std::shared_ptr<absl::Notification> ThreadLanes::Run(
    int lane, std::function<void()> fn) {
  auto done = std::make_shared<absl::Notification>();
  {
    absl::MutexLock l(&mu_);
    ReapLocked();
    Lane& ln = lanes_[static_cast<size_t>(lane) % lanes_.size()];
    if (!ln.busy) {
      bool running = ln.thread.joinable();
      if (!running) {
        const int index = static_cast<int>(&ln - lanes_.data());
        try {
          ln.thread = std::thread([this, index] { LaneLoop(index); });
          ++started_;
          running = true;
        } catch (const std::system_error& e) {
          LOG_EVERY_N(ERROR, 100) << name_ << ": cannot start a thread ("
                                  << e.what() << "): the task runs on the "
                                  << "caller's thread";
        }
      }
      if (running) {
        ln.busy = true;
        ln.task = std::move(fn);
        ln.done = done;
        return done;
      }
    } else {
      auto extra = std::make_unique<Extra>();
      Extra* raw = extra.get();
      try {
        raw->thread = std::thread([this, raw, done, f = fn] {
          f();
          absl::MutexLock l(&mu_);
          raw->ended = true;
          done->Notify();
        });
        extras_.push_back(std::move(extra));
        ++started_;
        ++extra_;
        return done;
      } catch (const std::system_error& e) {
        LOG_EVERY_N(ERROR, 100) << name_ << ": cannot start a thread ("
                                << e.what() << "): the task runs on the "
                                << "caller's thread";
      }
    }
    ++inline_;
  }
  // No thread could start: the task runs here.
  fn();
  done->Notify();
  return done;
}

int64_t ThreadLanes::inline_runs() const {
  absl::MutexLock l(&mu_);
  return inline_;
}

void ThreadLanes::LaneLoop(int index) {
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  absl::MutexLock l(&mu_);
  while (true) {
    auto work = [this, index]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || lanes_[index].task != nullptr;
    };
    mu_.Await(absl::Condition(&work));
    if (lanes_[index].task == nullptr) return;  // stopped
    std::function<void()> task = std::move(lanes_[index].task);
    lanes_[index].task = nullptr;
    std::shared_ptr<absl::Notification> done = std::move(lanes_[index].done);
    mu_.Unlock();
    task();
    task = nullptr;  // its captures go before the task counts as done
    mu_.Lock();
    lanes_[index].busy = false;
    done->Notify();
  }
}

int64_t ThreadLanes::threads_started() const {
  absl::MutexLock l(&mu_);
  return started_;
}

int64_t ThreadLanes::extra_threads() const {
  absl::MutexLock l(&mu_);
  return extra_;
}

}  // namespace bertps

#include "common/serial_thread.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "glog/logging.h"

namespace bertps {

SerialThread::SerialThread(std::string name, int nice)
    : name_(std::move(name)), thread_([this, nice] { Loop(nice); }) {
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(&started_));
}

SerialThread::~SerialThread() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void SerialThread::Post(std::function<void()> fn) {
  absl::MutexLock l(&mu_);
  queue_.push_back(std::move(fn));
}

void SerialThread::Run(const std::function<void()>& fn) {
  bool done = false;
  Post([&] {
    fn();
    absl::MutexLock l(&mu_);
    done = true;
  });
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(&done));
}

int64_t SerialThread::ran() const {
  absl::MutexLock l(&mu_);
  return ran_;
}

int SerialThread::nice_at_start() const {
  absl::MutexLock l(&mu_);
  return nice_at_start_;
}

void SerialThread::Loop(int nice) {
  const id_t tid = static_cast<id_t>(gettid());
  if (nice > 0) {
    errno = 0;
    const int now = getpriority(PRIO_PROCESS, tid);  // -1 is a valid value
    if (errno != 0 || (now < 19 && setpriority(PRIO_PROCESS, tid,
                                               std::min(19, now + nice)) != 0)) {
      LOG(WARNING) << name_ << ": cannot lower the thread's priority: "
                   << std::strerror(errno);
    }
  }
  errno = 0;
  const int level = getpriority(PRIO_PROCESS, tid);
  {
    absl::MutexLock l(&mu_);
    nice_at_start_ = errno == 0 ? level : 0;
    started_ = true;
  }
  for (;;) {
    std::function<void()> fn;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopped, and nothing left to run
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    fn();
    absl::MutexLock l(&mu_);
    ++ran_;
  }
}

}  // namespace bertps

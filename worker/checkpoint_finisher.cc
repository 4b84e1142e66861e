#include "worker/checkpoint_finisher.h"

#include <utility>

#include "common/crash_point.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"

namespace bertps {

bool CheckpointFinisher::Lost(const absl::Status& st) {
  return absl::IsUnavailable(st) || absl::IsNotFound(st) ||
         absl::IsAborted(st) || absl::IsCancelled(st) ||
         absl::IsDeadlineExceeded(st);
}

int64_t CheckpointFinisher::lost() {
  absl::MutexLock l(&mu_);
  return lost_;
}

CheckpointFinisher::CheckpointFinisher(PsClient* client, std::ostream* log)
    : client_(client),
      log_(log),
      thread_(std::make_unique<SerialThread>("ckpt-finish")) {}

CheckpointFinisher::~CheckpointFinisher() { thread_.reset(); }

void CheckpointFinisher::Add(PsClient::PendingCheckpoint p) {
  {
    absl::MutexLock l(&mu_);
    ++added_;
  }
  thread_->Post([this, p = std::move(p)] {
    absl::Status failed;
    {
      absl::MutexLock l(&mu_);
      failed = error_;
    }
    // None after a failure (the part is failing with it).
    absl::StatusOr<std::string> m =
        failed.ok() ? absl::StatusOr<std::string>(std::string()) : failed;
    double write_ms = 0;
    if (failed.ok()) {
      m = client_->FinishCheckpoint(p, &write_ms, [&p] {
        CrashPoint("ckpt_manifest", p.version, 0);
      });
      if (!m.ok()) {
        LOG(WARNING) << "checkpoint " << p.version << " not completed: "
                     << m.status() << " (the previous one stays the newest)";
      } else if (log_ != nullptr) {
        nlohmann::ordered_json j;
        j["checkpoint"] = *m;
        j["version"] = p.version;
        j["copy_ms"] = p.copy_ms;
        j["write_ms"] = write_ms;
        *log_ << j.dump() << std::endl;
      }
    }
    absl::MutexLock l(&mu_);
    if (m.ok()) {
      done_.push_back(Done{*std::move(m), p.version});
    } else if (Lost(m.status())) {
      ++lost_;  // the previous checkpoint stays the newest; the next cut
                // writes the next one
    } else if (error_.ok()) {
      error_ = m.status();
    }
    ++ended_;
  });
}

absl::StatusOr<std::vector<CheckpointFinisher::Done>>
CheckpointFinisher::Take() {
  absl::MutexLock l(&mu_);
  if (!error_.ok()) return error_;
  std::vector<Done> d = std::move(done_);
  done_.clear();
  return d;
}

absl::StatusOr<std::vector<CheckpointFinisher::Done>>
CheckpointFinisher::Drain() {
  {
    absl::MutexLock l(&mu_);
    auto all = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return ended_ == added_;
    };
    mu_.Await(absl::Condition(&all));
  }
  return Take();
}

}  // namespace bertps

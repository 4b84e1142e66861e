#include "common/audit.h"

#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "glog/logging.h"
#include "prometheus/metric_type.h"

namespace bertps {
namespace {

// Callers remembered for the log's rate limit: beyond this many, the oldest
// half of the window is forgotten (a flood of distinct callers then costs a
// line each per interval at worst, never unbounded memory).
constexpr size_t kMaxRemembered = 4096;

class AuditTrail {
 public:
  void Refuse(absl::string_view reason, absl::string_view caller,
              absl::string_view what) {
    bool log = false;
    int64_t held = 0;
    {
      absl::MutexLock l(&mu_);
      ++counts_[std::string(reason)];
      const absl::Time now = absl::Now();
      std::string key = absl::StrCat(reason, "\n", caller);
      auto it = last_.find(key);
      if (it == last_.end()) {
        if (last_.size() >= kMaxRemembered) ForgetOldLocked(now);
        last_.emplace(std::move(key), Entry{now, 0});
        log = true;
      } else if (now - it->second.logged >= interval_) {
        held = it->second.held;
        it->second = Entry{now, 0};
        log = true;
      } else {
        ++it->second.held;
      }
      if (log) ++lines_;
    }
    if (log) {
      LOG(WARNING) << "refused (" << reason << ") " << caller << ": " << what
                   << (held > 0 ? absl::StrCat(" [", held,
                                               " more from this caller for "
                                               "this reason not logged]")
                                : "");
    }
  }

  std::map<std::string, int64_t> Counts() const {
    absl::MutexLock l(&mu_);
    return counts_;
  }
  int64_t Lines() const {
    absl::MutexLock l(&mu_);
    return lines_;
  }
  void SetInterval(absl::Duration d) {
    absl::MutexLock l(&mu_);
    interval_ = d;
    last_.clear();
  }

 private:
  struct Entry {
    absl::Time logged;
    int64_t held;
  };
  void ForgetOldLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = last_.begin(); it != last_.end();) {
      auto next = std::next(it);
      if (now - it->second.logged >= interval_ / 2) last_.erase(it);
      it = next;
    }
    if (last_.size() >= kMaxRemembered) last_.clear();
  }

  mutable absl::Mutex mu_;
  std::map<std::string, int64_t> counts_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Entry> last_ ABSL_GUARDED_BY(mu_);
  absl::Duration interval_ ABSL_GUARDED_BY(mu_) = absl::Minutes(1);
  int64_t lines_ ABSL_GUARDED_BY(mu_) = 0;
};

AuditTrail& Trail() {
  static AuditTrail* trail = new AuditTrail();
  return *trail;
}

class AuditCollector : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    prometheus::MetricFamily f;
    f.name = "bertps_refused_calls_total";
    f.help =
        "Calls refused for who made them or what they may do, by reason "
        "(docs/security.md, the audit trail).";
    f.type = prometheus::MetricType::Counter;
    for (const auto& [reason, n] : Trail().Counts()) {
      prometheus::ClientMetric m;
      m.label.push_back({"reason", reason});
      m.counter.value = static_cast<double>(n);
      f.metric.push_back(std::move(m));
    }
    return {std::move(f)};
  }
};

}  // namespace

void AuditRefusal(absl::string_view reason, absl::string_view caller,
                  absl::string_view what) {
  Trail().Refuse(reason, caller.empty() ? "(unknown caller)" : caller, what);
}

std::map<std::string, int64_t> AuditRefusalCounts() { return Trail().Counts(); }

int64_t AuditLogLines() { return Trail().Lines(); }

std::shared_ptr<prometheus::Collectable> AuditCollectable() {
  static const std::shared_ptr<prometheus::Collectable> c =
      std::make_shared<AuditCollector>();
  return c;
}

void SetAuditLogIntervalForTest(absl::Duration interval) {
  Trail().SetInterval(interval);
}

}  // namespace bertps

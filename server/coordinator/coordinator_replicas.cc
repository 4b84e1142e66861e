// The Coordinator's Replicas: jobs with replicas > 1 keep R - 1 backups of
// each shard index on other shard daemons. A lost primary is replaced by its
// most advanced live backup in a new term, without a restart; a lost backup
// is dropped (the index runs with fewer); an index with none left falls back
// to the restart from the newest checkpoint (docs/ps.md "Replicas").
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "server/coordinator/coordinator.h"

namespace bertps {

void Coordinator::UpdateShardReplicasLocked(Job& job) {
  auto* out = job.status.mutable_shards();
  out->Clear();
  if (job.status.spec().replicas() <= 1) return;
  for (size_t i = 0; i < job.shards.size(); ++i) {
    ShardReplicas* r = out->Add();
    r->set_shard(static_cast<int>(i));
    r->set_primary(job.shards[i]);
    r->set_term(i < job.terms.size() ? job.terms[i] : 0);
    auto p = members_.find(job.shards[i]);
    if (p != members_.end()) r->set_applied(p->second.applied);
    if (i >= job.backups.size()) continue;
    for (const std::string& id : job.backups[i]) {
      r->add_backups(id);
      auto b = members_.find(id);
      r->add_backups_applied(b == members_.end() ? 0 : b->second.applied);
    }
  }
}

bool Coordinator::TakeShardReportLocked(Job& job, Member& m,
                                        const HeartbeatRequest& r) {
  if (m.applied != r.applied_version()) {
    m.applied = r.applied_version();
    if (job.status.spec().replicas() > 1) UpdateShardReplicasLocked(job);
  }
  // The ledger of shard 0's primary (its backups hold the same).
  if (m.index == 0 && !m.backup && !r.example_ledger().empty()) {
    TakeLedgerLocked(job, r);
  }
  if (m.backup || m.index < 0 ||
      m.index >= static_cast<int>(job.backups.size())) {
    return false;
  }
  bool changed = false;
  for (const std::string& address : r.dropped_backups()) {
    Member* dropped = nullptr;
    for (const std::string& id : job.backups[m.index]) {
      auto b = members_.find(id);
      if (b != members_.end() && b->second.address == address) {
        dropped = &b->second;
        break;
      }
    }
    if (dropped == nullptr) continue;
    DropBackupLocked(job, *dropped,
                     "was dropped by its primary (it stopped acknowledging)");
    changed = true;
  }
  return changed;
}

bool Coordinator::ShardsReadyLocked(const Job& job) const {
  for (const std::string& id : job.shards) {
    if (id.empty() || job.ready_shards.count(id) == 0) return false;
  }
  for (const auto& backups : job.backups) {
    for (const std::string& id : backups) {
      if (job.ready_shards.count(id) == 0) return false;
    }
  }
  return true;
}

void Coordinator::DropBackupLocked(Job& job, Member& m,
                                   const std::string& how) {
  const int i = m.index;
  if (job.status.state() == RUNNING && i >= 0 &&
      i < static_cast<int>(job.backups.size())) {
    auto& b = job.backups[i];
    b.erase(std::remove(b.begin(), b.end(), m.id), b.end());
    EventLocked(job, absl::StrCat("backup of shard ", i, " (member ", m.id,
                                  " at ", m.address, ") ", how, "; shard ", i,
                                  " has ", b.size(), " backup",
                                  b.size() == 1 ? "" : "s", " left"));
    // Its primary is told the backups it has now.
    if (i < static_cast<int>(job.shards.size())) {
      auto p = members_.find(job.shards[i]);
      if (p != members_.end()) p->second.told = false;
    }
  }
  m.job.clear();
  m.index = -1;
  m.backup = false;
  UpdateShardReplicasLocked(job);
}

bool Coordinator::FailOverLocked(Job& job, int index, const Member& lost,
                                 const std::string& how) {
  if (index >= static_cast<int>(job.backups.size())) return false;
  // The live backup that applied the most steps (it has every version any
  // worker pulled; a backup behind was dropped by its primary).
  Member* best = nullptr;
  for (const std::string& id : job.backups[index]) {
    auto it = members_.find(id);
    if (it == members_.end() || !it->second.alive ||
        job.ready_shards.count(id) == 0) {
      continue;
    }
    if (best == nullptr || it->second.applied > best->applied) {
      best = &it->second;
    }
  }
  if (best == nullptr) return false;
  auto& b = job.backups[index];
  b.erase(std::remove(b.begin(), b.end(), best->id), b.end());
  job.terms.resize(job.shards.size(), 0);
  const int64_t term = ++job.terms[index];
  best->backup = false;
  job.shards[index] = best->id;
  job.status.set_ps_addresses(index, best->address);
  job.status.set_failovers(job.status.failovers() + 1);
  // Everyone in the job is told: the new primary its promotion, the other
  // shards their peer's address, the workers where to push and pull.
  for (auto& [id, m] : members_) {
    if (m.job == job.status.id()) m.told = false;
  }
  EventLocked(job, absl::StrCat(
                       "shard ", index, ": primary (member ", lost.id, " at ",
                       lost.address, ") ", how, "; failed over to its backup ",
                       "member ", best->id, " at ", best->address, " (term ",
                       term, ", at version ", best->applied, "; ", b.size(),
                       " backup", b.size() == 1 ? "" : "s", " left), no "
                       "restart"));
  LOG(INFO) << "job " << job.status.id() << ": shard " << index
            << " failed over to member " << best->id << " (term " << term
            << ")";
  UpdateShardReplicasLocked(job);
  return true;
}

}  // namespace bertps

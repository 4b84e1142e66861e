// The Coordinator's Replicas: jobs with replicas > 1 keep R - 1 backups of
// each shard index on other shard daemons. A lost primary is replaced by its
// most advanced live backup in a new term, without a restart; a lost backup
// is dropped (the index runs with fewer); an index with none left falls back
// to the restart from the newest checkpoint (docs/ps.md "Replicas"). No two
// replicas of one index share a daemon (bertps_server --slices).
#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "server/coordinator/coordinator.h"

namespace bertps {

std::vector<std::vector<Coordinator::Member*>> Coordinator::PlaceShards(
    const std::vector<Member*>& ps, int shards, int replicas) {
  // The members round-robin over their daemons (in order of appearance), so
  // the first `shards` (the primaries) spread over as many daemons as there
  // are.
  std::vector<std::string> order;
  std::map<std::string, std::vector<Member*>> by_daemon;
  for (Member* m : ps) {
    auto& slot = by_daemon[DaemonOf(*m)];
    if (slot.empty()) order.push_back(DaemonOf(*m));
    slot.push_back(m);
  }
  std::vector<Member*> spread;
  for (size_t k = 0; spread.size() < ps.size(); ++k) {
    for (const std::string& d : order) {
      if (k < by_daemon[d].size()) spread.push_back(by_daemon[d][k]);
    }
  }
  if (static_cast<int>(spread.size()) < shards * replicas) return {};
  std::vector<std::vector<Member*>> placed(shards);
  std::vector<bool> used(spread.size(), false);
  for (int i = 0; i < shards; ++i) {
    placed[i].push_back(spread[i]);
    used[i] = true;
  }
  // Each index's next replica: a member left whose daemon holds none of the
  // index's, chosen for all indices at once (a bipartite matching by
  // augmenting paths; candidates tried in spread order), so a placement is
  // found whenever one exists for the round.
  auto fits = [&](int i, size_t j) {
    for (const Member* r : placed[i]) {
      if (DaemonOf(*r) == DaemonOf(*spread[j])) return false;
    }
    return true;
  };
  for (int k = 1; k < replicas; ++k) {
    std::vector<int> owner(spread.size(), -1);  // index matched to member j
    std::function<bool(int, std::vector<bool>&)> augment =
        [&](int i, std::vector<bool>& seen) {
          for (size_t j = 0; j < spread.size(); ++j) {
            if (used[j] || seen[j] || !fits(i, j)) continue;
            seen[j] = true;
            if (owner[j] < 0 || augment(owner[j], seen)) {
              owner[j] = i;
              return true;
            }
          }
          return false;
        };
    for (int i = 0; i < shards; ++i) {
      std::vector<bool> seen(spread.size(), false);
      if (!augment(i, seen)) return {};
    }
    for (size_t j = 0; j < spread.size(); ++j) {
      if (owner[j] < 0) continue;
      used[j] = true;
      placed[owner[j]].push_back(spread[j]);
    }
  }
  return placed;
}

bool Coordinator::DaemonHoldsIndexLocked(const Job& job, int index,
                                         const Member& m) const {
  if (m.daemon.empty() || index < 0) return false;
  std::vector<std::string> ids;
  if (index < static_cast<int>(job.shards.size())) {
    ids.push_back(job.shards[index]);
  }
  for (const auto* list : {&job.backups, &job.joining}) {
    if (index < static_cast<int>(list->size())) {
      ids.insert(ids.end(), (*list)[index].begin(), (*list)[index].end());
    }
  }
  for (const std::string& id : ids) {
    auto it = members_.find(id);
    if (it != members_.end() && it->second.id != m.id &&
        it->second.daemon == m.daemon) {
      return true;
    }
  }
  return false;
}

bool Coordinator::Replicated(const Job& job) {
  if (job.status.spec().replicas() > 1) return true;
  for (const auto* list : {&job.backups, &job.joining}) {
    for (const auto& ids : *list) {
      if (!ids.empty()) return true;
    }
  }
  for (int64_t t : job.terms) {
    if (t > 0) return true;
  }
  return false;
}

void Coordinator::UpdateShardReplicasLocked(Job& job) {
  auto* out = job.status.mutable_shards();
  out->Clear();
  if (!Replicated(job)) return;
  for (size_t i = 0; i < job.shards.size(); ++i) {
    ShardReplicas* r = out->Add();
    r->set_shard(static_cast<int>(i));
    r->set_primary(job.shards[i]);
    r->set_term(i < job.terms.size() ? job.terms[i] : 0);
    auto p = members_.find(job.shards[i]);
    if (p != members_.end()) {
      r->set_applied(p->second.applied);
      r->set_primary_daemon(p->second.daemon);
    }
    if (i < job.joining.size()) {
      for (const std::string& id : job.joining[i]) r->add_joining(id);
    }
    if (i >= job.backups.size()) continue;
    for (const std::string& id : job.backups[i]) {
      r->add_backups(id);
      auto b = members_.find(id);
      r->add_backups_applied(b == members_.end() ? 0 : b->second.applied);
      r->add_backup_daemons(b == members_.end() ? "" : b->second.daemon);
    }
  }
}

bool Coordinator::TakeShardReportLocked(Job& job, Member& m,
                                        const HeartbeatRequest& r) {
  if (m.applied != r.applied_version()) {
    m.applied = r.applied_version();
    if (Replicated(job)) UpdateShardReplicasLocked(job);
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
  job.joining.resize(job.backups.size());
  auto find = [&](const std::vector<std::string>& ids,
                  const std::string& address) -> Member* {
    for (const std::string& id : ids) {
      auto b = members_.find(id);
      if (b != members_.end() && b->second.address == address) {
        return &b->second;
      }
    }
    return nullptr;
  };
  for (const std::string& address : r.dropped_backups()) {
    if (Member* d = find(job.backups[m.index], address)) {
      DropBackupLocked(job, *d,
                       "was dropped by its primary (it stopped acknowledging)");
      changed = true;
    } else if (Member* j = find(job.joining[m.index], address)) {
      DropBackupLocked(job, *j, "could not be brought up to date by its "
                                "primary (see the primary's log)");
      changed = true;
    }
  }
  for (const std::string& address : r.joined_backups()) {
    JoinedLocked(job, m.index, address);
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
  if (m.joining && job.status.state() == RUNNING && i >= 0 &&
      i < static_cast<int>(job.joining.size())) {
    auto& b = job.joining[i];
    b.erase(std::remove(b.begin(), b.end(), m.id), b.end());
    EventLocked(job, absl::StrCat("joining backup of shard ", i, " (member ",
                                  m.id, " at ", m.address, ") ", how));
  } else if (job.status.state() == RUNNING && i >= 0 &&
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
  m.joining = false;
  // Not taken again as a joining backup at once: the same cause (gone but
  // not yet timed out, unreachable, too slow) would fail it again; another
  // idle daemon may join meanwhile.
  m.no_join_before = options_.now() + kJoinRetryAfter;
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
  // Joins under way took their snapshot from the lost primary: they end;
  // the new primary's index takes new ones.
  EndJoinsLocked(job, index, "its primary was replaced");
  UpdateShardReplicasLocked(job);
  // A last push staged only on the lost primary is lost with it; none
  // is once the promoted backup applied every step.
  if (best->applied < job.status.progress().total_steps()) {
    ReopenDoneSlotsLocked(job, -1, absl::StrCat("shard ", index,
                                                 " failed over (a last push "
                                                 "may have been lost)"));
  }
  return true;
}

void Coordinator::EndJoinsLocked(Job& job, int index, const std::string& why) {
  if (index >= static_cast<int>(job.joining.size())) return;
  for (const std::string& id : job.joining[index]) {
    auto it = members_.find(id);
    if (it == members_.end()) continue;
    Member& m = it->second;
    EventLocked(job, absl::StrCat("member ", m.id, " at ", m.address,
                                  " stops joining shard ", index,
                                  " as a backup: ", why));
    m.job.clear();
    m.index = -1;
    m.backup = false;
    m.joining = false;
  }
  job.joining[index].clear();
}

void Coordinator::AddBackupsLocked(Job& job) {
  const JobSpec& spec = job.status.spec();
  const int replicas_want = spec.replicas() - 1;
  if (job.status.state() != RUNNING || job.training_done ||
      !ShardsReadyLocked(job)) {
    return;
  }
  const size_t shards = job.shards.size();
  job.backups.resize(shards);
  job.joining.resize(shards);
  const absl::Time now = options_.now();
  bool changed = false;
  for (size_t i = 0; i < shards; ++i) {
    auto p = members_.find(job.shards[i]);
    if (p == members_.end() || !p->second.alive) {
      continue;
    }
    // A primary that drains with no backup: one joins to take its index
    // over (it leaves once that one caught up: HandingLocked).
    const int want = std::max(replicas_want, DrainWanted(p->second) ? 1 : 0);
    while (static_cast<int>(job.backups[i].size() + job.joining[i].size()) <
           want) {
      Member* idle = nullptr;
      for (auto& [id, m] : members_) {
        if (MayTakeWorkLocked(m) && m.job.empty() && m.role == PS &&
            now >= m.no_join_before && FitsLocked(m, job) &&
            !DaemonHoldsIndexLocked(job, static_cast<int>(i), m)) {
          idle = &m;
          break;
        }
      }
      if (idle == nullptr) {
        if (changed) UpdateShardReplicasLocked(job);
        return;
      }
      idle->job = job.status.id();
      idle->index = static_cast<int>(i);
      idle->told = false;
      idle->backup = true;
      idle->joining = true;
      idle->applied = 0;
      job.joining[i].push_back(idle->id);
      changed = true;
      EventLocked(job, absl::StrCat(
                           "shard ", i, ": member ", idle->id, " at ",
                           idle->address, " joins as a backup (a snapshot "
                           "from its primary, member ", p->second.id,
                           ", then the steps since; the job goes on)",
                           replicas_want <= 0
                               ? "; the primary drains: it hands the index "
                                 "over once the backup caught up"
                               : ""));
    }
  }
  if (changed) UpdateShardReplicasLocked(job);
}

void Coordinator::JoinedLocked(Job& job, int index,
                               const std::string& address) {
  if (index < 0 || index >= static_cast<int>(job.joining.size())) return;
  auto& joining = job.joining[index];
  for (auto it = joining.begin(); it != joining.end(); ++it) {
    auto m = members_.find(*it);
    if (m == members_.end() || m->second.address != address) continue;
    Member& b = m->second;
    joining.erase(it);
    b.joining = false;
    job.backups[index].push_back(b.id);
    job.ready_shards.insert(b.id);
    job.status.set_backups_added(job.status.backups_added() + 1);
    auto p = members_.find(job.shards[index]);
    EventLocked(job, absl::StrCat(
                         "shard ", index, ": member ", b.id, " at ", address,
                         " caught up with its primary",
                         p == members_.end()
                             ? std::string()
                             : absl::StrCat(" (at version ",
                                            p->second.applied, ")"),
                         " and is a backup now; shard ", index, " has ",
                         job.backups[index].size(), " backup",
                         job.backups[index].size() == 1 ? "" : "s"));
    UpdateShardReplicasLocked(job);
    return;
  }
}

}  // namespace bertps

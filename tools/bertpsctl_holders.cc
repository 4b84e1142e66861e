// bertpsctl status: who holds what in a running job -- each shard index's
// primary and backups (jobs with replicas > 1) and each worker slot's member.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/bertpsctl_internal.h"

namespace bertps {
namespace ctl {
namespace internal {

std::vector<std::pair<std::string, std::string>> HolderRows(
    const JobStatus& s) {
  std::vector<std::pair<std::string, std::string>> rows;
  if (s.state() != RUNNING) return rows;
  if (s.shards_size() > 0) {
    // "0 m1 @ step 91, backups m3 @ 91": the primary, its term when it was
    // replaced, and how far each has applied; "m1 [daemon]" where a daemon
    // serves several slices.
    auto who = [](const std::string& id, const std::string& daemon) {
      return daemon.empty() ? id : absl::StrCat(id, " [", daemon, "]");
    };
    std::vector<std::string> shards;
    for (const ShardReplicas& r : s.shards()) {
      std::string text = absl::StrCat(
          r.shard(), " ",
          r.primary().empty() ? "none" : who(r.primary(), r.primary_daemon()),
          " @ ", r.applied(),
          r.term() > 0 ? absl::StrCat(" (term ", r.term(), ")") : "");
      std::vector<std::string> backups;
      for (int i = 0; i < r.backups_size(); ++i) {
        backups.push_back(absl::StrCat(
            who(r.backups(i),
                i < r.backup_daemons_size() ? r.backup_daemons(i) : ""),
            " @ ", i < r.backups_applied_size() ? r.backups_applied(i) : 0));
      }
      absl::StrAppend(&text, backups.empty()
                                 ? ", no backup"
                                 : absl::StrCat(", backup", backups.size() > 1 ? "s " : " ",
                                                absl::StrJoin(backups, ", ")));
      if (r.joining_size() > 0) {
        absl::StrAppend(&text, ", joining ", absl::StrJoin(r.joining(), ", "));
      }
      shards.push_back(std::move(text));
    }
    rows.push_back({"replicas", absl::StrJoin(shards, "; ")});
    if (s.failovers() > 0) {
      rows.push_back({"failovers", absl::StrCat(s.failovers(),
                                                " (primaries replaced by a "
                                                "backup, no restart)")});
    }
    if (s.backups_added() > 0) {
      rows.push_back({"re-replicated",
                      absl::StrCat(s.backups_added(),
                                   " backup(s) brought up to date while the "
                                   "job ran")});
    }
  }
  if (s.slots_size() > 0) {
    std::vector<std::string> slots;
    for (const SlotHolder& h : s.slots()) {
      if (h.done()) {  // its part is over: no member is needed
        slots.push_back(h.member().empty()
                            ? absl::StrCat(h.slot(), " done")
                            : absl::StrCat(h.slot(), " ", h.member(), " (done)"));
      } else if (h.member().empty()) {
        slots.push_back(absl::StrCat(h.slot(), " free"));
      } else if (h.shared()) {
        slots.push_back(absl::StrCat(h.slot(), " ", h.member(),
                                     " (taken over beside slot ", h.own_slot(),
                                     " since ", TimeText(h.since_ms()), ")"));
      } else {
        slots.push_back(absl::StrCat(h.slot(), " ", h.member()));
      }
    }
    rows.push_back({"workers", absl::StrJoin(slots, ", ")});
  }
  return rows;
}

}  // namespace internal
}  // namespace ctl
}  // namespace bertps

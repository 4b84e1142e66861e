// The members' capabilities (common/capability.h): what the coordinator
// signs into each assignment of a train job's member, and what it tells the
// members that check them (shards, stage daemons): its key and the revoked
// members.
#include <string>

#include "absl/time/time.h"
#include "common/capability.h"
#include "server/coordinator/coordinator.h"

namespace bertps {

void Coordinator::AddCapabilityLocked(const Job& job, const Member& m,
                                      Assignment* a) const {
  Capability cap;
  cap.set_member_id(m.id);
  cap.set_job_id(job.status.id());
  cap.set_incarnation(job.status.incarnation());
  cap.set_checkpoint_dir(job.status.spec().checkpoint().dir());
  const absl::Time now = options_.now();
  cap.set_issued_ms(absl::ToUnixMillis(now));
  cap.set_expires_ms(absl::ToUnixMillis(now + kCapabilityLifetime));
  if (m.role == PS) {
    cap.set_kind(Capability::SHARD);
    cap.set_shard_index(m.index);
    if (m.index >= 0 && m.index < static_cast<int>(job.terms.size())) {
      cap.set_shard_term(job.terms[m.index]);
    }
    cap.set_primary(!m.backup && m.index >= 0 &&
                    m.index < static_cast<int>(job.shards.size()) &&
                    job.shards[m.index] == m.id);
  } else {
    cap.set_kind(Capability::TRAINER);
    for (int k : HeldSlots(m)) cap.add_slots(k);
  }
  if (m.role == STAGE_ROLE || m.role == PS) {
    // Both serve the job's members: they check capabilities.
    a->set_capability_key(signer_->public_key());
    a->clear_revoked_members();
    for (const std::string& id : job.revoked) {
      auto it = members_.find(id);
      if (it == members_.end() || it->second.job != job.status.id()) {
        a->add_revoked_members(id);
      }
    }
  }
  a->set_capability(signer_->Sign(std::move(cap)));
}

}  // namespace bertps

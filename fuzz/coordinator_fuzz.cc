// Fuzzes the coordinator's request handling (server/coordinator/
// coordinator.h, as its gRPC service drives it): scripts of job submissions
// (fuzzed JobSpec text/JSON, or fuzzed binary JobSpecs that skip the
// parser), member registrations and heartbeats (step reports, results,
// errors, done), cancels, status reads and the passing of time, against a
// real Coordinator with a fake clock. Script format: coordinator_fuzz.h.
//
// Invariants: no crash, leak or UB; a rejected request changes no job (the
// listed job statuses are identical before and after); accepted specs are
// valid; a final job state never changes again; a job's step never exceeds
// its total steps. Data globs (and tensorboard_dir, the one path the
// coordinator writes) are confined to a scratch directory (two real
// files) so that fuzzed globs never walk the machine's file system.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "fuzz/coordinator_fuzz.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/libfuzzer.h"
#include "server/coordinator/coordinator.h"
#include "common/cluster/job_spec.h"

namespace bertps {
namespace fuzz {
namespace {

std::string* scratch_dir = nullptr;

// Removes the scratch directory when the fuzzer exits.
void RemoveScratch() {
  std::error_code ec;
  if (scratch_dir != nullptr) std::filesystem::remove_all(*scratch_dir, ec);
}

const std::string& ScratchDir() {
  static const std::string* dir = [] {
    std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string t = base + "/bertps-fuzz-coord-XXXXXX";
    if (mkdtemp(&t[0]) == nullptr) std::abort();
    std::atexit(RemoveScratch);
    for (const char* f : {"/train-0.tfrecord", "/train-1.tfrecord"}) {
      FILE* fp = std::fopen((t + f).c_str(), "w");
      if (fp == nullptr) std::abort();
      std::fclose(fp);
    }
    scratch_dir = new std::string(t);
    return scratch_dir;
  }();
  return *dir;
}

std::string Confine(const std::string& glob) {
  return ScratchDir() + "/" + glob.substr(glob.rfind('/') + 1);
}

void ConfineGlobs(JobSpec* s) {
  for (std::string& d : *s->mutable_data()) d = Confine(d);
  for (std::string& d : *s->mutable_eval()->mutable_data()) d = Confine(d);
  // The paths the coordinator writes itself (the job's directory and its
  // TensorBoard files): kept in the scratch dir, never the fuzzer's working
  // directory.
  if (!s->tensorboard_dir().empty()) s->set_tensorboard_dir(ScratchDir() + "/tb");
  if (!s->job_dir().empty()) s->set_job_dir(Confine(s->job_dir()));
}

std::string Resolve(const std::string& id, const std::vector<std::string>& ids) {
  if (id.size() > 1 || ids.empty()) return id;
  const size_t k = id.empty() ? 0 : static_cast<uint8_t>(id[0]);
  return ids[k % ids.size()];
}

std::string ListBytes(const Coordinator& c) {
  std::string out;
  for (const JobStatus& j : c.List()) out += j.SerializeAsString();
  return out;
}

}  // namespace

int RunScript(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  static const int64_t kExamples[] = {0, 1, 1000, 123457};
  const int64_t examples = kExamples[in.Byte() % 4];
  absl::Time now = absl::FromUnixSeconds(1700000000);
  CoordinatorOptions o;
  o.count_examples = [examples](const JobSpec&) -> absl::StatusOr<int64_t> {
    return examples;
  };
  o.now = [&now] { return now; };
  o.stall_threshold = absl::InfiniteDuration();  // the fake clock jumps
  Coordinator coord(o);
  std::vector<std::string> members, jobs;
  std::map<std::string, JobState> finals;

  while (auto rec = in.Next()) {
    const std::string payload(rec->payload);
    const std::string before = ListBytes(coord);
    absl::Status st;
    switch (rec->op % kCoNumOps) {
      case kCoSubmitText:
      case kCoSubmitProto: {
        JobSpec spec;
        if (rec->op % kCoNumOps == kCoSubmitText) {
          absl::StatusOr<JobSpec> parsed = ParseJobSpec(payload);
          if (!parsed.ok()) {
            BERTPS_FUZZ_CHECK(absl::IsInvalidArgument(parsed.status()), "%s",
                              parsed.status().ToString().c_str());
            continue;
          }
          spec = *parsed;
        } else if (!spec.ParseFromString(payload)) {
          continue;
        }
        ConfineGlobs(&spec);
        absl::StatusOr<std::string> id = coord.Submit(spec);
        st = id.status();
        if (id.ok()) {
          jobs.push_back(*id);
          BERTPS_FUZZ_CHECK(coord.Get(*id).ok(), "submitted job %s not found",
                            id->c_str());
          // The spec as submitted (the stored one has steps derived from
          // epochs filled in).
          ApplyJobDefaults(&spec);
          absl::Status valid = ValidateJobSpec(spec);
          BERTPS_FUZZ_CHECK(valid.ok(), "accepted an invalid spec: %s",
                            valid.ToString().c_str());
        }
        break;
      }
      case kCoRegister: {
        RegisterRequest r;
        if (!r.ParseFromString(payload)) continue;
        auto resp = coord.Register(r);
        st = resp.status();
        if (resp.ok()) members.push_back(resp->member_id());
        break;
      }
      case kCoHeartbeat: {
        HeartbeatRequest r;
        if (!r.ParseFromString(payload)) continue;
        r.set_member_id(Resolve(r.member_id(), members));
        r.set_job_id(Resolve(r.job_id(), jobs));
        st = coord.Heartbeat(r).status();
        break;
      }
      case kCoCancel:
        st = coord.Cancel(Resolve(payload, jobs));
        break;
      case kCoGet: {
        const std::string id = Resolve(payload, jobs);
        st = coord.Get(id).status();
        int64_t seq = 0;
        auto ev = coord.WaitForEvents(id, &seq, absl::InfinitePast());
        BERTPS_FUZZ_CHECK(ev.ok() || absl::IsNotFound(ev.status()), "%s",
                          ev.status().ToString().c_str());
        break;
      }
      case kCoAdvance:
        now += absl::Seconds(payload.empty() ? 1 : static_cast<uint8_t>(payload[0]));
        coord.Tick();
        break;
    }
    if (!st.ok()) {
      BERTPS_FUZZ_CHECK(ListBytes(coord) == before,
                        "rejected op %d changed the jobs: %s",
                        rec->op % kCoNumOps, st.ToString().c_str());
    }
    for (const JobStatus& j : coord.List()) {
      auto it = finals.find(j.id());
      if (it != finals.end()) {
        BERTPS_FUZZ_CHECK(j.state() == it->second,
                          "final job %s changed state %d -> %d", j.id().c_str(),
                          it->second, j.state());
      } else if (IsFinal(j.state())) {
        finals[j.id()] = j.state();
      }
      BERTPS_FUZZ_CHECK(j.progress().step() <= j.progress().total_steps() ||
                            j.progress().total_steps() == 0,
                        "job %s at step %lld of %lld", j.id().c_str(),
                        static_cast<long long>(j.progress().step()),
                        static_cast<long long>(j.progress().total_steps()));
    }
  }
  return 0;
}

}  // namespace fuzz
}  // namespace bertps

[[maybe_unused]] static const bool kQuiet = bertps::fuzz::QuietProtobuf();

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return bertps::fuzz::RunScript(data, size);
}

namespace {

[[maybe_unused]] bertps::fuzz::PayloadKind CoordKind(uint8_t op) {
  static const bertps::JobSpec spec;
  static const bertps::RegisterRequest reg;
  static const bertps::HeartbeatRequest hb;
  using namespace bertps::fuzz;  // NOLINT: the op names
  switch (op % kCoNumOps) {
    case kCoSubmitText:
      return {&spec, true};
    case kCoSubmitProto:
      return {&spec, false};
    case kCoRegister:
      return {&reg, false};
    case kCoHeartbeat:
      return {&hb, false};
    default:
      return {};
  }
}

}  // namespace

BERTPS_SCRIPT_MUTATOR(bertps::fuzz::kCoordSetupBytes, CoordKind)

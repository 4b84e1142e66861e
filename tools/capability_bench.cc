// What checking capabilities costs a shard (docs/security.md,
// "Capabilities"): the time to sign one (the coordinator, per assignment),
// to verify one the shard has not seen (an Ed25519 check, once per
// member and heartbeat) and one it has (every other call), each the median
// of --repeats runs of --n operations; then the share of a BSP step that
// checking takes at a shard: per step each worker makes 3 calls to it (pull,
// push, announce), and one capability per worker is new each heartbeat:
//   share = (3 x workers x seen + workers x new x step_s / heartbeat_s) / step
// for the step times of BERT-tiny and BERT-base given by flags (measured
// with tools/bench.sh model; docs/benchmarks.md).
//
// Prints one "key value" line per figure.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "common/capability.h"

ABSL_FLAG(int, n, 2000, "operations per timed run");
ABSL_FLAG(int, repeats, 5, "timed runs (the median is printed)");
ABSL_FLAG(double, step_ms_tiny, 96, "a BERT-tiny BSP step (ms)");
ABSL_FLAG(double, step_ms_base, 6442, "a BERT-base BSP step (ms)");
ABSL_FLAG(int, workers, 4, "workers per job");
ABSL_FLAG(double, heartbeat_s, 1, "heartbeat interval (s)");

namespace {

template <typename F>
double MedianMicros(F&& op) {
  const int n = absl::GetFlag(FLAGS_n);
  std::vector<double> runs;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    const absl::Time start = absl::Now();
    for (int i = 0; i < n; ++i) op(i);
    runs.push_back(absl::ToDoubleMicroseconds(absl::Now() - start) / n);
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

bertps::Capability Trainer(int i) {
  bertps::Capability c;
  c.set_member_id("m-" + std::to_string(i));
  c.set_job_id("job-000001");
  c.set_incarnation(1);
  c.set_kind(bertps::Capability::TRAINER);
  c.add_slots(i % 64);
  c.set_checkpoint_dir("/var/lib/bertps/out/jobs/job-000001/ckpt");
  const absl::Time now = absl::Now();
  c.set_issued_ms(absl::ToUnixMillis(now));
  c.set_expires_ms(absl::ToUnixMillis(now + bertps::kCapabilityLifetime));
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  auto signer = *bertps::CapabilitySigner::Generate();
  const int n = absl::GetFlag(FLAGS_n);
  std::vector<std::string> wires;
  for (int i = 0; i < n; ++i) wires.push_back(signer->Sign(Trainer(i)));
  const double sign_us =
      MedianMicros([&](int i) { (void)signer->Sign(Trainer(i)); });
  // New capabilities: a fresh verifier per run, so none is remembered.
  double new_us = 0;
  {
    std::vector<double> runs;
    for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
      bertps::CapabilityVerifier v;
      (void)v.AddKey(signer->public_key());
      const absl::Time start = absl::Now();
      for (int i = 0; i < n; ++i) {
        if (!v.Verify(wires[i], absl::Now()).ok()) return 1;
      }
      runs.push_back(absl::ToDoubleMicroseconds(absl::Now() - start) / n);
    }
    std::sort(runs.begin(), runs.end());
    new_us = runs[runs.size() / 2];
  }
  bertps::CapabilityVerifier v;
  (void)v.AddKey(signer->public_key());
  for (const std::string& w : wires) (void)v.Verify(w, absl::Now());
  const double seen_us = MedianMicros([&](int i) {
    if (!v.Verify(wires[i % 64], absl::Now()).ok()) std::abort();
  });
  std::printf("capability_bytes %zu\n", wires[0].size());
  std::printf("sign_us %.2f\n", sign_us);
  std::printf("verify_new_us %.2f\n", new_us);
  std::printf("verify_seen_us %.2f\n", seen_us);
  const int workers = absl::GetFlag(FLAGS_workers);
  const double hb = absl::GetFlag(FLAGS_heartbeat_s);
  for (const auto& [name, step_ms] :
       {std::pair<const char*, double>{"tiny", absl::GetFlag(FLAGS_step_ms_tiny)},
        {"base", absl::GetFlag(FLAGS_step_ms_base)}}) {
    const double per_step_us = 3.0 * workers * seen_us +
                               workers * new_us * (step_ms / 1000.0) / hb;
    std::printf("share_of_step_%s %.6f\n", name, per_step_us / (step_ms * 1000));
  }
  return 0;
}

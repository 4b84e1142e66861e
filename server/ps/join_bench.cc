// How fast a backup joins: a primary of one BERT shard (config and shards
// from the command line) and a backup in this process, over loopback gRPC;
// the backup is brought up to date with no step running (the snapshot
// alone), several times. Prints one JSON line: the snapshot's MB and the
// medians of the copy-to-caught-up time and of the rate.
//   bazel run //server/ps:join_bench -- [config] [shards] [repeats]
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "common/init.h"
#include "common/model/bert_config.h"
#include "server/ps/server.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args = bertps::InitProcess(
      argc, argv, "join_bench [config] [shards] [repeats]");
  const std::string config = args.size() > 1 ? args[1] : "mini";
  int shards = 2, repeats = 5;
  if (args.size() > 2 && !absl::SimpleAtoi(args[2], &shards)) return 2;
  if (args.size() > 3 && !absl::SimpleAtoi(args[3], &repeats)) return 2;
  absl::StatusOr<bertps::BertConfig> c = bertps::PresetBertConfig(config);
  if (!c.ok()) {
    std::fprintf(stderr, "%s\n", std::string(c.status().message()).c_str());
    return 2;
  }
  bertps::ps::ShardOptions o;
  o.config = *c;
  o.num_shards = shards;
  o.shard = 0;
  o.incarnation = 1;
  auto primary = bertps::ps::ShardServer::Start(o, "127.0.0.1:0", {});
  if (!primary.ok()) return 1;
  // The copy alone (SnapshotForJoin: under the update lock, then checksummed).
  std::vector<double> copy_ms;
  for (int r = 0; r < repeats; ++r) {
    const absl::Time t0 = absl::Now();
    auto snap = (*primary)->core()->SnapshotForJoin([](int64_t) {});
    if (!snap.ok()) return 1;
    copy_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
  }
  std::sort(copy_ms.begin(), copy_ms.end());
  std::vector<double> ms;
  double mb = 0;
  for (int r = 0; r < repeats; ++r) {
    bertps::ps::ShardOptions bo = o;
    bo.backup = true;
    auto backup = bertps::ps::ShardServer::Start(bo, "127.0.0.1:0", {});
    if (!backup.ok()) return 1;
    bertps::ps::GrpcReplicaLink& link = (*primary)->replica_link();
    const absl::Time start = absl::Now();
    link.SetBackups({}, {(*backup)->address()}, (*primary)->shared_core());
    while (link.TakeJoined().empty()) {
      if (!link.TakeDropped().empty()) return 1;
      absl::SleepFor(absl::Microseconds(200));
    }
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
    link.SetBackups({}, {});
    mb = (*primary)->core()->shard_size() * 4.0 *
         (1 + 2) / 1e6;  // parameters and Adam's two moments
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  std::printf(
      "{\"bench\": \"join\", \"config\": \"%s\", \"shards\": %d, "
      "\"snapshot_mb\": %.1f, \"join_ms_median\": %.1f, \"join_ms_min\": "
      "%.1f, \"mb_per_s\": %.0f, \"copy_ms_median\": %.1f}\n",
      config.c_str(), shards, mb, med, ms.front(), mb / (med / 1e3),
      copy_ms[copy_ms.size() / 2]);
  return 0;
}

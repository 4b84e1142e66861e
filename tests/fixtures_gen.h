// The generator of the golden fixtures under tests/fixtures/ (docs/formats.md):
// small files of every persistent format, written by this release's own
// writers from fixed inputs, so a later release can prove that it still
// reads them and that it writes the same bytes unless the format's version
// was bumped.
//
// Every input is fixed here: a tiny BERT (vocab 100, hidden 8, 2 layers),
// initial weights from an integer formula (not the seeded initialiser, whose
// values come from the C++ library's normal distribution), gradients from
// another integer formula, the optimizer, the number of steps, the job
// records, the events, and no clock, host name or absolute path reaches a
// file's bytes. The values are dyadic (exact in float), so a reader can
// recompute them by another route (tests/fixtures_test.cc does).
//
// //tests:make_fixtures (tests/make_fixtures.cc) writes them into the tree;
// tests/fixtures_test.cc writes them again into its temporary directory and
// compares.
// Thread-safety: the functions write files; call one at a time per
// directory.
#ifndef BERTPS_TESTS_FIXTURES_GEN_H_
#define BERTPS_TESTS_FIXTURES_GEN_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model/bert_config.h"
#include "common/optim/optimizer.h"

namespace bertps {
namespace fixtures {

// The fixture directories under tests/fixtures/, one per format and version.
inline constexpr char kCheckpointDir[] = "checkpoint-v2";
// Read by the tests still (its reader stays): the manifest without
// provenance.
inline constexpr char kCheckpointV1Dir[] = "checkpoint-v1";
inline constexpr char kExportDir[] = "export-v1";
inline constexpr char kJobStoreDir[] = "jobstore-v1";
inline constexpr char kEventsDir[] = "tfevents-v1";
inline constexpr char kMetricsDir[] = "metrics-v1";

// Files inside them.
inline constexpr char kJobStoreFile[] = "jobs.sqlite";
inline constexpr char kEventsFile[] = "events.out.tfevents.fixture";
inline constexpr char kMetricsFile[] = "metric_names.txt";
inline constexpr char kTagsFile[] = "tags.txt";

// The checkpoint: 2 shards, BSP with one worker, kSteps optimizer steps.
inline constexpr int kShards = 2;
inline constexpr int64_t kSteps = 3;
inline constexpr int64_t kExamplesPerStep = 4;

// The tiny model: vocab 100, hidden 8, 2 layers of 2 heads, intermediate 16,
// 16 positions; everything else BertConfig's default.
BertConfig FixtureConfig();
// BERT's AdamWeightDecay, learning rate 0.01, clip_norm 1, constant rate.
optim::OptimizerConfig FixtureOptimizer();

// Initial value of element i of the flat parameter buffer (layout order):
// ((i * 37) mod 101 - 50) / 1024.
float FixtureInit(int64_t i);
// The gradient pushed at step s (0-based) for element i:
// ((i * 7 + s * 5) mod 23 - 11) / 256. Its global norm is above 1, so
// clipping scales it.
float FixtureGrad(int64_t step, int64_t i);

// The provenance the checkpoint's manifest records: a fixed release (the
// real one would change the fixture's bytes with every release) and the
// SHA-256 of FixtureSpecText(), the fixture job's spec in text form.
inline constexpr char kFixtureRelease[] = "0.9.0";
std::string FixtureSpecText();

// The vocabulary of the export: [PAD] [UNK] [CLS] [SEP] [MASK], a..z,
// ##a..##z, then word57..word99 (100 lines).
std::string FixtureVocab();

// Writes the checkpoint root `dir` (dir/LATEST, dir/ckpt-3/manifest.json,
// dir/ckpt-3/shard-{0,1}-of-2.safetensors): two in-process ShardCores
// (server/ps) start from FixtureInit, apply kSteps BSP steps of
// FixtureGrad from one worker (each push kExamplesPerStep examples) through
// their own push, exchange and optimizer code, and checkpoint; the manifest
// is assembled as PsClient::Checkpoint assembles it and written by
// ps::WriteManifest. `scratch` holds the initial weights file (removed).
absl::Status WriteCheckpointFixture(const std::string& dir,
                                    const std::string& scratch);

// Writes the Hugging Face directory `dir` (config.json, model.safetensors,
// vocab.txt, tokenizer_config.json) of the checkpoint `manifest` through
// WriteHfModelDir, as a train job's export does. `scratch` holds the
// vocabulary file given to it (removed).
absl::Status WriteExportFixture(const std::string& manifest,
                                const std::string& dir,
                                const std::string& scratch);

// Writes the SQLite job store `path` (must not exist) through JobStore::Open
// and Put: five jobs, one in each JobState (JobStoreFixtureRecords).
absl::Status WriteJobStoreFixture(const std::string& path);
// The five records, as protobuf text (job-000001 PENDING ... job-000005
// CANCELLED), in id order.
std::string JobStoreFixtureText();

// Writes one TensorBoard event file through io::EventLog into `dir` (which
// must hold no other file) and renames it to kEventsFile (its name holds
// the time, host and process id). Events: the tags of TensorBoardTags() at
// steps 1 and 2, a START at step 1 and the tags again at step 2; wall times
// 1700000000 + step.
absl::Status WriteEventsFixture(const std::string& dir);
// The scalar tags the coordinator writes today, one per line.
std::string TensorBoardTags();

// The Prometheus metric families the daemons' metrics classes export (the
// coordinator's, a shard's and a worker's, fed with a job of each kind):
// name -> "type label,label" ("-": no label).
std::map<std::string, std::string> ExportedMetricFamilies();

// The Prometheus metric families the Grafana dashboard
// (deploy/grafana/bertps-dashboard.json, read from `dashboard`) queries,
// as the daemons' metrics classes export them: "name type label,label"
// lines, sorted by name.
absl::StatusOr<std::string> DashboardMetricNames(const std::string& dashboard);

}  // namespace fixtures
}  // namespace bertps

#endif  // BERTPS_TESTS_FIXTURES_GEN_H_

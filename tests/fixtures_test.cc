// The golden fixtures under tests/fixtures/ (docs/formats.md): files of every
// persistent format written by an earlier release. Each format is checked
// two ways:
//  - read: the current readers read the committed files, and what they find
//    is checked against values written here or recomputed here by another
//    route (the parameters and Adam moments of the checkpoint from the
//    optimizer's formulas in double precision, not from the optimizer code);
//  - written again: the generator (tests/fixtures_gen.h) writes the same
//    inputs with the current writers into the test's temporary directory,
//    and the bytes must equal the committed ones, unless the format's
//    version was bumped (then its new fixture directory is compared, and the
//    old one is only read).
// The record index is a cache, not a fixture: an index of another version
// is rebuilt (stale and corrupt ones: common/io/record_index_test.cc).
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/digest.h"
#include "common/io/crc32c.h"
#include "common/io/file_util.h"
#include "common/io/record_index.h"
#include "common/io/safetensors.h"
#include "common/io/tfrecord.h"
#include "common/model/bert_config.h"
#include "common/model/hf_export.h"
#include "common/model/params.h"
#include "common/model/weights.h"
#include "common/ps/checkpoint.h"
#include "common/ps/partition.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/coordinator.pb.h"
#include "proto/event.pb.h"
#include "common/cluster/member_instance.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/job_store.h"
#include "tests/fixtures_gen.h"

namespace bertps {
namespace {

namespace fs = std::filesystem;
using fixtures::kCheckpointDir;
using fixtures::kEventsDir;
using fixtures::kExportDir;
using fixtures::kJobStoreDir;
using fixtures::kMetricsDir;

const std::string kRoot = "tests/fixtures";

std::string Fixture(const std::string& rel) { return kRoot + "/" + rel; }

std::string ReadOrDie(const std::string& path) {
  absl::StatusOr<std::string> s = io::ReadFileToString(path);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : "";
}

// A fresh directory under the test's temporary directory.
std::string FreshDir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// What a test says when a format's bytes changed.
std::string Changed(const std::string& format, const std::string& dir) {
  const size_t v = dir.rfind("-v");
  const int n = std::stoi(dir.substr(v + 2));
  return absl::StrCat("format ", format, " changed without a version bump: ",
                      "bump its version, keep a reader of v", n,
                      ", add tests/fixtures/", dir.substr(0, v), "-v", n + 1,
                      " (docs/formats.md)");
}

// The files under `dir` (relative paths), README.md left out.
std::set<std::string> FilesUnder(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = e.path().lexically_relative(dir).string();
    if (rel != "README.md") out.insert(rel);
  }
  return out;
}

// The committed fixture directory `dir` and `again` hold the same files with
// the same bytes.
void ExpectSameBytes(const std::string& format, const std::string& dir,
                     const std::string& again) {
  const std::set<std::string> committed = FilesUnder(Fixture(dir));
  const std::set<std::string> written = FilesUnder(again);
  EXPECT_EQ(written, committed) << Changed(format, dir) << ": other files";
  for (const std::string& rel : committed) {
    if (!written.count(rel)) continue;
    const std::string a = ReadOrDie(Fixture(dir + "/" + rel));
    const std::string b = ReadOrDie(again + "/" + rel);
    if (a == b) continue;
    size_t at = 0;
    while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
    ADD_FAILURE() << Changed(format, dir) << ": " << rel << " has "
                  << b.size() << " bytes now, " << a.size()
                  << " in the fixture; the first difference is at byte "
                  << at;
  }
}

// ------------------------------------------------ the model, recomputed ----

// The tiny model's tensors in layout order, written out here (not taken from
// ParamLayout): the names and shapes a Hugging Face BERT of vocab 100,
// hidden 8, 2 layers, intermediate 16, 16 positions has.
struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
};

std::vector<Tensor> ExpectedTensors() {
  std::vector<Tensor> t = {
      {"bert.embeddings.word_embeddings.weight", {100, 8}},
      {"bert.embeddings.position_embeddings.weight", {16, 8}},
      {"bert.embeddings.token_type_embeddings.weight", {2, 8}},
      {"bert.embeddings.LayerNorm.weight", {8}},
      {"bert.embeddings.LayerNorm.bias", {8}},
  };
  for (int l = 0; l < 2; ++l) {
    const std::string p = absl::StrCat("bert.encoder.layer.", l, ".");
    for (const char* w : {"query", "key", "value"}) {
      t.push_back({p + "attention.self." + w + ".weight", {8, 8}});
    }
    for (const char* w : {"query", "key", "value"}) {
      t.push_back({p + "attention.self." + w + ".bias", {8}});
    }
    t.push_back({p + "attention.output.dense.weight", {8, 8}});
    t.push_back({p + "attention.output.dense.bias", {8}});
    t.push_back({p + "attention.output.LayerNorm.weight", {8}});
    t.push_back({p + "attention.output.LayerNorm.bias", {8}});
    t.push_back({p + "intermediate.dense.weight", {16, 8}});
    t.push_back({p + "intermediate.dense.bias", {16}});
    t.push_back({p + "output.dense.weight", {8, 16}});
    t.push_back({p + "output.dense.bias", {8}});
    t.push_back({p + "output.LayerNorm.weight", {8}});
    t.push_back({p + "output.LayerNorm.bias", {8}});
  }
  for (Tensor x : std::vector<Tensor>{
           {"bert.pooler.dense.weight", {8, 8}},
           {"bert.pooler.dense.bias", {8}},
           {"cls.predictions.transform.dense.weight", {8, 8}},
           {"cls.predictions.transform.dense.bias", {8}},
           {"cls.predictions.transform.LayerNorm.weight", {8}},
           {"cls.predictions.transform.LayerNorm.bias", {8}},
           {"cls.predictions.bias", {100}},
           {"cls.seq_relationship.weight", {2, 8}},
           {"cls.seq_relationship.bias", {2}},
       }) {
    t.push_back(x);
  }
  return t;
}

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The parameters and Adam moments after the fixture's 3 steps, in double:
// element i (flat, layout order) starts at ((37 i) mod 101 - 50) / 1024 and
// gets the gradient ((7 i + 5 s) mod 23 - 11) / 256 at step s, clipped to
// global norm 1 (g * 1 / max(norm, 1)); BERT's AdamWeightDecay (no bias
// correction) with beta1 0.9, beta2 0.999, epsilon 1e-6, weight decay 0.01
// on every tensor but LayerNorm and biases, learning rate 0.01.
struct Recomputed {
  std::map<std::string, int64_t> offset;
  std::vector<double> p, m, v;
};

const Recomputed& Model() {
  static const Recomputed* r = [] {
    auto* r = new Recomputed;
    int64_t total = 0;
    std::vector<bool> decay;
    for (const Tensor& t : ExpectedTensors()) {
      r->offset[t.name] = total;
      const bool d = !absl::StrContains(t.name, "LayerNorm") &&
                     !absl::StrContains(t.name, "bias");
      total += Elements(t.shape);
      decay.resize(total, d);
    }
    r->p.resize(total);
    r->m.assign(total, 0.0);
    r->v.assign(total, 0.0);
    for (int64_t i = 0; i < total; ++i) {
      r->p[i] = static_cast<double>((i * 37) % 101 - 50) / 1024;
    }
    for (int s = 0; s < 3; ++s) {
      std::vector<double> g(total);
      double sq = 0;
      for (int64_t i = 0; i < total; ++i) {
        g[i] = static_cast<double>((i * 7 + s * 5) % 23 - 11) / 256;
        sq += g[i] * g[i];
      }
      const double f = 1.0 / std::max(std::sqrt(sq), 1.0);
      for (int64_t i = 0; i < total; ++i) {
        const double gi = g[i] * f;
        r->m[i] = 0.9 * r->m[i] + 0.1 * gi;
        r->v[i] = 0.999 * r->v[i] + 0.001 * gi * gi;
        double u = r->m[i] / (std::sqrt(r->v[i]) + 1e-6);
        if (decay[i]) u += 0.01 * r->p[i];
        r->p[i] -= 0.01 * u;
      }
    }
    return r;
  }();
  return *r;
}

// float results of the shards against the double recomputation.
void ExpectNearModel(const std::string& what, const float* got,
                     const std::vector<double>& want, int64_t at, int64_t n,
                     double rel, double abs) {
  int bad = 0;
  for (int64_t k = 0; k < n; ++k) {
    const double w = want[at + k];
    if (std::fabs(got[k] - w) <= rel * std::fabs(w) + abs) continue;
    if (++bad <= 3) {
      ADD_FAILURE() << what << "[" << k << "] is " << got[k] << ", expected "
                    << w;
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

std::vector<float> Floats(absl::string_view raw) {
  std::vector<float> out(raw.size() / sizeof(float));
  std::memcpy(out.data(), raw.data(), out.size() * sizeof(float));
  return out;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// ----------------------------------------------------------- checkpoint ----

const std::string kCkpt = Fixture(std::string(fixtures::kCheckpointV1Dir));
const std::string kManifest = kCkpt + "/ckpt-3/manifest.json";
const std::string kCkptV2 = Fixture(std::string(kCheckpointDir));
const std::string kManifestV2 = kCkptV2 + "/ckpt-3/manifest.json";

TEST(CheckpointV1, TheManifestReadsWithEveryField) {
  // The file itself: its keys in this order, format and format_version.
  const nlohmann::ordered_json j =
      nlohmann::ordered_json::parse(ReadOrDie(kManifest));
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{
                      "format", "format_version", "version", "num_shards",
                      "task", "optimizer", "state_slots", "config", "plan",
                      "files", "example_ledger"}));
  EXPECT_EQ(j.at("format"), "bertps-checkpoint");
  EXPECT_EQ(j.at("format_version"), 1);

  absl::StatusOr<ps::Manifest> m = ps::ReadManifest(kManifest);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->version, 3);
  EXPECT_EQ(m->num_shards, 2);
  EXPECT_EQ(m->task, "pretrain");
  EXPECT_EQ(m->optimizer, "adam_weight_decay");
  EXPECT_EQ(m->state_slots, 2);
  EXPECT_EQ(m->example_ledger, "0;0-12");  // 3 pushes of 4 examples
  ASSERT_EQ(m->files.size(), 2u);
  EXPECT_EQ(m->files[0].shard, 0);
  EXPECT_EQ(m->files[0].file, "shard-0-of-2.safetensors");
  EXPECT_EQ(m->files[0].bytes, 22320);
  EXPECT_EQ(m->files[0].crc32c, 4049161208u);
  EXPECT_EQ(m->files[1].shard, 1);
  EXPECT_EQ(m->files[1].file, "shard-1-of-2.safetensors");
  EXPECT_EQ(m->files[1].bytes, 22656);
  EXPECT_EQ(m->files[1].crc32c, 1120973984u);
  absl::StatusOr<BertConfig> c = ParseBertConfig(m->config_json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->vocab_size, 100);
  EXPECT_EQ(c->hidden_size, 8);
  EXPECT_EQ(c->num_hidden_layers, 2);
  EXPECT_EQ(c->num_attention_heads, 2);
  EXPECT_EQ(c->intermediate_size, 16);
  EXPECT_EQ(c->max_position_embeddings, 16);
  // The plan: every tensor whole on one shard but the word embeddings, cut
  // into two row ranges (one per shard).
  const std::vector<std::string> plan =
      absl::StrSplit(m->plan_text, '\n', absl::SkipEmpty());
  EXPECT_EQ(plan.size(), ExpectedTensors().size() + 1);
  EXPECT_EQ(plan[0], "bert.embeddings.word_embeddings.weight 0 400 0");
  EXPECT_EQ(plan[1], "bert.embeddings.word_embeddings.weight 400 800 1");
  EXPECT_EQ(plan.back(), "cls.seq_relationship.bias 0 2 0");

  EXPECT_EQ(ReadOrDie(kCkpt + "/LATEST"), "ckpt-3\n");
  absl::StatusOr<std::string> latest = ps::LatestManifest(kCkpt);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, kManifest);
}

TEST(CheckpointV1, ShardFilesHoldTheParametersAndAdamMomentsOfThreeSteps) {
  absl::StatusOr<ps::Manifest> m = ps::ReadManifest(kManifest);
  ASSERT_TRUE(m.ok()) << m.status();
  const Recomputed& model = Model();
  std::vector<std::vector<std::string>> lines;  // name begin end shard
  for (absl::string_view l : absl::StrSplit(m->plan_text, '\n', absl::SkipEmpty())) {
    lines.push_back(absl::StrSplit(l, ' '));
  }
  int64_t covered = 0;
  for (int shard = 0; shard < 2; ++shard) {
    const std::string path =
        absl::StrCat(kCkpt, "/ckpt-3/shard-", shard, "-of-2.safetensors");
    const std::string bytes = ReadOrDie(path);
    EXPECT_EQ(io::Crc32c(bytes.data(), bytes.size()), m->files[shard].crc32c);
    absl::StatusOr<io::SafetensorsReader> r = io::SafetensorsReader::Open(path);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->metadata(),
              (std::map<std::string, std::string>{
                  {"format", "bertps-shard"},
                  {"version", "3"},
                  {"shard", absl::StrCat(shard)},
                  {"num_shards", "2"},
                  {"state_slots", "2"}}));
    size_t mine = 0;
    for (const auto& f : lines) {
      ASSERT_EQ(f.size(), 4u);
      if (f[3] != absl::StrCat(shard)) continue;
      ++mine;
      int64_t begin = 0, end = 0;
      ASSERT_TRUE(absl::SimpleAtoi(f[1], &begin) && absl::SimpleAtoi(f[2], &end));
      ASSERT_TRUE(model.offset.count(f[0])) << f[0];
      const int64_t at = model.offset.at(f[0]) + begin, n = end - begin;
      covered += n;
      struct Part {
        const char* prefix;
        const std::vector<double>* want;
        double rel, abs;
      };
      for (const Part& part : {Part{"param", &model.p, 1e-6, 1e-7},
                               Part{"state0", &model.m, 1e-5, 1e-9},
                               Part{"state1", &model.v, 1e-5, 1e-12}}) {
        const std::string name = absl::StrCat(part.prefix, "/", f[0], "/", f[1]);
        const io::TensorInfo* info = r->Find(name);
        ASSERT_NE(info, nullptr) << path << " lacks " << name;
        EXPECT_EQ(info->dtype, io::DType::kF32) << name;
        EXPECT_EQ(info->shape, std::vector<int64_t>{n}) << name;
        absl::StatusOr<absl::string_view> raw = r->RawBytes(name);
        ASSERT_TRUE(raw.ok()) << raw.status();
        const std::vector<float> got = Floats(*raw);
        ExpectNearModel(absl::StrCat(path, " ", name), got.data(), *part.want,
                        at, n, part.rel, part.abs);
      }
    }
    EXPECT_EQ(r->tensors().size(), 3 * mine) << path;
  }
  EXPECT_EQ(covered, static_cast<int64_t>(model.p.size()));

  // A few values exactly, as this release wrote them.
  absl::StatusOr<io::SafetensorsReader> s0 =
      io::SafetensorsReader::Open(kCkpt + "/ckpt-3/shard-0-of-2.safetensors");
  absl::StatusOr<io::SafetensorsReader> s1 =
      io::SafetensorsReader::Open(kCkpt + "/ckpt-3/shard-1-of-2.safetensors");
  ASSERT_TRUE(s0.ok() && s1.ok());
  auto first = [](const io::SafetensorsReader& r, const std::string& name) {
    absl::StatusOr<absl::string_view> raw = r.RawBytes(name);
    EXPECT_TRUE(raw.ok()) << name;
    return raw.ok() ? Bits(Floats(*raw)[0]) : 0u;
  };
  EXPECT_EQ(first(*s0, "param/bert.embeddings.word_embeddings.weight/0"),
            0x3d7b7c9cu);
  EXPECT_EQ(first(*s1, "state0/bert.embeddings.word_embeddings.weight/400"),
            0x3b1b461fu);
  EXPECT_EQ(first(*s1, "state1/cls.predictions.bias/0"), 0x3574c9c5u);
}

TEST(CheckpointV1, RestoresOntoOneShardAndExports) {
  const BertConfig c = fixtures::FixtureConfig();
  const ParamLayout layout = ParamLayout::ForBert(c, BertTask::kPretrain);
  absl::StatusOr<ps::PartitionPlan> plan = ps::PartitionPlan::Make(layout, 1);
  ASSERT_TRUE(plan.ok());
  const int64_t n = layout.total_size();
  ASSERT_EQ(n, static_cast<int64_t>(Model().p.size()));
  std::vector<float> params(n), state(2 * n);
  absl::StatusOr<int64_t> v =
      ps::RestoreShard(kManifest, layout, *plan, 0, 2, params.data(), state.data());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 3);
  // One shard's buffer is the whole layout in order.
  ExpectNearModel("restored params", params.data(), Model().p, 0, n, 1e-6, 1e-7);
  ExpectNearModel("restored m", state.data(), Model().m, 0, n, 1e-5, 1e-9);
  ExpectNearModel("restored v", state.data() + n, Model().v, 0, n, 1e-5, 1e-12);
  // Exported as one safetensors file: the export fixture's weights.
  const std::string out = FreshDir("ckpt-export") + "/model.safetensors";
  ASSERT_TRUE(ps::ExportCheckpoint(kManifest, out).ok());
  EXPECT_TRUE(ReadOrDie(out) ==
              ReadOrDie(Fixture(std::string(kExportDir) + "/model.safetensors")))
      << "ExportCheckpoint and the export directory's weights differ";
}

// Version 2 adds the manifest's provenance and changes nothing else: the
// shard files and LATEST are version 1's bytes, the manifest version 1's
// fields and values.
TEST(CheckpointV2, TheManifestRecordsItsProvenanceAndNothingElseChanged) {
  const nlohmann::ordered_json j =
      nlohmann::ordered_json::parse(ReadOrDie(kManifestV2));
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{
                      "format", "format_version", "version", "num_shards",
                      "task", "optimizer", "state_slots", "config", "plan",
                      "files", "example_ledger", "provenance"}));
  EXPECT_EQ(j.at("format_version"), 2);
  absl::StatusOr<ps::Manifest> m2 = ps::ReadManifest(kManifestV2);
  ASSERT_TRUE(m2.ok()) << m2.status();
  EXPECT_EQ(m2->release, "0.9.0");
  // The fixture spec's SHA-256, as sha256sum prints it.
  EXPECT_EQ(m2->spec_sha256, Sha256Hex(fixtures::FixtureSpecText()));
  EXPECT_EQ(m2->spec_sha256.size(), 64u);
  absl::StatusOr<ps::Manifest> m1 = ps::ReadManifest(kManifest);
  ASSERT_TRUE(m1.ok()) << m1.status();
  EXPECT_EQ(m1->release, "");
  EXPECT_EQ(m1->spec_sha256, "");
  EXPECT_EQ(m2->version, m1->version);
  EXPECT_EQ(m2->config_json, m1->config_json);
  EXPECT_EQ(m2->plan_text, m1->plan_text);
  EXPECT_EQ(m2->example_ledger, m1->example_ledger);
  ASSERT_EQ(m2->files.size(), m1->files.size());
  for (size_t i = 0; i < m1->files.size(); ++i) {
    EXPECT_EQ(m2->files[i].file, m1->files[i].file);
    EXPECT_EQ(m2->files[i].crc32c, m1->files[i].crc32c);
    const std::string f = "/ckpt-3/" + m1->files[i].file;
    EXPECT_TRUE(ReadOrDie(kCkptV2 + f) == ReadOrDie(kCkpt + f)) << f;
  }
  EXPECT_EQ(ReadOrDie(kCkptV2 + "/LATEST"), ReadOrDie(kCkpt + "/LATEST"));
  // A manifest of a later version is refused, naming both.
  nlohmann::ordered_json later = j;
  later["format_version"] = 3;
  const std::string dir = FreshDir("checkpoint-v3");
  std::ofstream(dir + "/manifest.json") << later.dump();
  absl::StatusOr<ps::Manifest> m3 = ps::ReadManifest(dir + "/manifest.json");
  ASSERT_FALSE(m3.ok());
  EXPECT_NE(m3.status().message().find(
                "format_version 3 is not supported (this release reads 1 to 2)"),
            std::string::npos)
      << m3.status();
}

TEST(CheckpointV2, IsWrittenAgainByteForByte) {
  const std::string dir = FreshDir("checkpoint-again");
  absl::Status st =
      fixtures::WriteCheckpointFixture(dir, FreshDir("checkpoint-scratch"));
  ASSERT_TRUE(st.ok()) << st;
  ExpectSameBytes("checkpoint (manifest.json, shard files, LATEST)",
                  kCheckpointDir, dir);
}

// --------------------------------------------------------------- export ----

const std::string kExport = Fixture(std::string(kExportDir));

TEST(ExportV1, ReadsAsAHuggingFaceModelDirectory) {
  const nlohmann::json config =
      nlohmann::json::parse(ReadOrDie(kExport + "/config.json"));
  EXPECT_EQ(config.at("model_type"), "bert");
  EXPECT_EQ(config.at("architectures"),
            nlohmann::json::array({"BertForPreTraining"}));
  EXPECT_EQ(config.at("vocab_size"), 100);
  EXPECT_EQ(config.at("hidden_size"), 8);
  EXPECT_EQ(config.at("num_hidden_layers"), 2);
  EXPECT_EQ(config.at("num_attention_heads"), 2);
  EXPECT_EQ(config.at("intermediate_size"), 16);
  EXPECT_EQ(config.at("max_position_embeddings"), 16);
  EXPECT_EQ(config.at("hidden_act"), "gelu");
  EXPECT_EQ(config.at("position_embedding_type"), "absolute");
  EXPECT_EQ(config.at("pad_token_id"), 0);
  EXPECT_EQ(config.at("torch_dtype"), "float32");
  EXPECT_EQ(config.at("layer_norm_eps"), 1e-12);
  absl::StatusOr<BertConfig> c =
      LoadBertConfig(kExport + "/config.json");  // the reader of config.json
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->vocab_size, 100);

  const nlohmann::json tok =
      nlohmann::json::parse(ReadOrDie(kExport + "/tokenizer_config.json"));
  EXPECT_EQ(tok, nlohmann::json::parse(R"({
      "tokenizer_class": "BertTokenizer", "do_lower_case": true,
      "model_max_length": 16, "unk_token": "[UNK]", "sep_token": "[SEP]",
      "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]"})"));

  const std::vector<std::string> vocab =
      absl::StrSplit(ReadOrDie(kExport + "/vocab.txt"), '\n', absl::SkipEmpty());
  ASSERT_EQ(vocab.size(), 100u);
  EXPECT_EQ(vocab[0], "[PAD]");
  EXPECT_EQ(vocab[4], "[MASK]");
  EXPECT_EQ(vocab[5], "a");
  EXPECT_EQ(vocab[31], "##a");
  EXPECT_EQ(vocab[99], "word99");
  EXPECT_TRUE(CheckHfVocabulary(kExport + "/vocab.txt", 100).ok());

  // model.safetensors: the header lists the tensors in layout order under
  // their Hugging Face names, F32, with the config as metadata.
  const std::string bytes = ReadOrDie(kExport + "/model.safetensors");
  ASSERT_GT(bytes.size(), 8u);
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = header << 8 | uint8_t(bytes[i]);
  const nlohmann::ordered_json h =
      nlohmann::ordered_json::parse(bytes.substr(8, header));
  const std::vector<Tensor> want = ExpectedTensors();
  ASSERT_EQ(h.size(), want.size() + 1);
  auto it = h.begin();
  EXPECT_EQ(it.key(), "__metadata__");
  EXPECT_EQ(it->at("format"), "pt");
  absl::StatusOr<BertConfig> meta = ParseBertConfig(it->at("config").get<std::string>());
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(meta->hidden_size, 8);
  int64_t offset = 0;
  for (const Tensor& t : want) {
    ++it;
    EXPECT_EQ(it.key(), t.name);
    EXPECT_EQ(it->at("dtype"), "F32");
    EXPECT_EQ(it->at("shape").get<std::vector<int64_t>>(), t.shape);
    const int64_t end = offset + 4 * Elements(t.shape);
    EXPECT_EQ(it->at("data_offsets"), nlohmann::ordered_json::array({offset, end}));
    offset = end;
  }
  EXPECT_EQ(bytes.size(), 8 + header + offset);

  // The weights reader fills the model with the recomputed values.
  const ParamLayout layout =
      ParamLayout::ForBert(fixtures::FixtureConfig(), BertTask::kPretrain);
  std::vector<float> params(layout.total_size());
  absl::StatusOr<WeightsReport> rep = LoadBertWeights(
      kExport + "/model.safetensors", layout, AllowMissing::kNone, params.data());
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_TRUE(rep->missing.empty());
  EXPECT_TRUE(rep->skipped.empty());
  ExpectNearModel("exported params", params.data(), Model().p, 0,
                  layout.total_size(), 1e-6, 1e-7);
}

TEST(ExportV1, IsWrittenAgainByteForByte) {
  const std::string dir = FreshDir("export-again") + "/model";
  absl::Status st = fixtures::WriteExportFixture(kManifest, dir,
                                                 FreshDir("export-scratch"));
  ASSERT_TRUE(st.ok()) << st;
  ExpectSameBytes("export (Hugging Face model directory)", kExportDir, dir);
}

// ------------------------------------------------------------ job store ----

const std::string kStore =
    Fixture(absl::StrCat(kJobStoreDir, "/", fixtures::kJobStoreFile));

// A copy of the committed store (SQLite writes beside a database it opens).
std::string StoreCopy(const std::string& name) {
  const std::string path = FreshDir(name) + "/jobs.sqlite";
  fs::copy_file(kStore, path);
  return path;
}

// What a SQLite file holds, read with SQLite itself: its schema (type, name,
// table, SQL) and every row of `jobs` (id, record bytes) in id order, and
// its user_version and journal mode.
struct StoreContent {
  std::vector<std::string> schema;
  std::vector<std::pair<std::string, std::string>> rows;
  int user_version = -1;
  std::string journal_mode;
};

StoreContent ReadStore(const std::string& path) {
  StoreContent out;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) !=
      SQLITE_OK) {
    ADD_FAILURE() << path << ": " << sqlite3_errmsg(db);
    sqlite3_close(db);
    return out;
  }
  auto each = [&](const char* sql, const std::function<void(sqlite3_stmt*)>& row) {
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, sql, -1, &st, nullptr), SQLITE_OK)
        << sql << ": " << sqlite3_errmsg(db);
    while (sqlite3_step(st) == SQLITE_ROW) row(st);
    sqlite3_finalize(st);
  };
  auto text = [](sqlite3_stmt* st, int col) {
    const unsigned char* t = sqlite3_column_text(st, col);
    return t == nullptr ? std::string("NULL")
                        : std::string(reinterpret_cast<const char*>(t));
  };
  each("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name",
       [&](sqlite3_stmt* st) {
         out.schema.push_back(absl::StrCat(text(st, 0), " | ", text(st, 1),
                                           " | ", text(st, 2), " | ",
                                           text(st, 3)));
       });
  each("SELECT id, record FROM jobs ORDER BY id", [&](sqlite3_stmt* st) {
    const char* blob = static_cast<const char*>(sqlite3_column_blob(st, 1));
    out.rows.emplace_back(text(st, 0),
                          std::string(blob, sqlite3_column_bytes(st, 1)));
  });
  each("PRAGMA user_version",
       [&](sqlite3_stmt* st) { out.user_version = sqlite3_column_int(st, 0); });
  each("PRAGMA journal_mode",
       [&](sqlite3_stmt* st) { out.journal_mode = text(st, 0); });
  sqlite3_close(db);
  return out;
}

TEST(JobStoreV1, TheSchemaIsOneTableOfRecords) {
  const StoreContent s = ReadStore(StoreCopy("store-schema"));
  EXPECT_EQ(s.schema,
            (std::vector<std::string>{
                "table | jobs | jobs | CREATE TABLE jobs (id TEXT PRIMARY KEY, "
                "record BLOB NOT NULL)",
                "index | sqlite_autoindex_jobs_1 | jobs | NULL"}));
  EXPECT_EQ(s.user_version, 0);  // no schema version in the file: v1 is implicit
  EXPECT_EQ(s.journal_mode, "wal");
  ASSERT_EQ(s.rows.size(), 5u);
  for (size_t i = 0; i < s.rows.size(); ++i) {
    EXPECT_EQ(s.rows[i].first, absl::StrCat("job-00000", i + 1));
  }
}

TEST(JobStoreV1, JobsInEveryStateLoadWithTheirSpecsAndProgress) {
  absl::StatusOr<std::unique_ptr<JobStore>> store =
      JobStore::Open(StoreCopy("store-load"));
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::vector<JobRecord>> all = (*store)->LoadAll();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 5u);
  const std::vector<JobRecord>& r = *all;
  const std::vector<JobState> states = {PENDING, RUNNING, SUCCEEDED, FAILED,
                                        CANCELLED};
  const std::vector<Task> tasks = {PRETRAIN, PREPROCESS, PRETRAIN, CLASSIFY,
                                   EVAL};
  const std::vector<std::string> names = {"pretrain-waiting",
                                          "preprocess-running", "pretrain-done",
                                          "classify-failed", "eval-cancelled"};
  const std::vector<int64_t> submitted = {1700000000000, 1700000001000,
                                          1700000003000, 1700000010000,
                                          1700000021000};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(r[i].status().id(), absl::StrCat("job-00000", i + 1));
    EXPECT_EQ(r[i].status().state(), states[i]) << i;
    EXPECT_EQ(r[i].status().spec().task(), tasks[i]) << i;
    EXPECT_EQ(r[i].status().spec().name(), names[i]) << i;
    EXPECT_EQ(r[i].status().submit_time_ms(), submitted[i]) << i;
  }
  // PENDING: a 2 x 2 pretraining job waiting for its workers.
  const JobStatus& p = r[0].status();
  EXPECT_EQ(p.spec().model(), "tiny");
  EXPECT_EQ(p.spec().batch_size(), 32);
  EXPECT_EQ(p.spec().steps(), 1000);
  EXPECT_EQ(p.spec().num_ps_shards(), 2);
  EXPECT_EQ(p.spec().num_workers(), 2);
  EXPECT_EQ(p.spec().optimizer().kind(), "adam_weight_decay");
  EXPECT_EQ(p.spec().optimizer().warmup_steps(), 100);
  EXPECT_EQ(p.spec().checkpoint().every_steps(), 100);
  EXPECT_EQ(p.spec().checkpoint().keep(), 3);
  EXPECT_EQ(p.spec().eval().every_steps(), 500);
  EXPECT_EQ(p.spec().vocab(), "/data/vocab.txt");
  EXPECT_EQ(p.waiting(), "0/2 idle train workers");
  ASSERT_EQ(p.data_files_size(), 2);
  EXPECT_EQ(p.data_files(0).records(), 2048);
  EXPECT_EQ(p.data_files(0).seq_length(), 128);
  EXPECT_EQ(p.memory().worker_bytes(), 268435456);
  EXPECT_EQ(r[0].examples_per_epoch(), 3072);
  // RUNNING: a preprocess job with one of its two items done.
  EXPECT_EQ(r[1].status().spec().preprocess().dupe_factor(), 2);
  EXPECT_TRUE(r[1].status().spec().preprocess().clean().dedup_exact());
  EXPECT_EQ(r[1].status().items_done(), 1);
  ASSERT_EQ(r[1].items_size(), 2);
  EXPECT_TRUE(r[1].items(0).done());
  EXPECT_EQ(r[1].items(0).result().records(), 640);
  EXPECT_FALSE(r[1].items(1).done());
  EXPECT_EQ(r[1].items(1).item().input(), "/data/raw/b.txt");
  // SUCCEEDED: trained, checkpointed, evaluated.
  const JobStatus& s = r[2].status();
  EXPECT_EQ(s.progress().step(), 4);
  EXPECT_EQ(s.progress().loss(), 6.5);
  EXPECT_EQ(s.progress().compute_ms(), 40.25);
  ASSERT_EQ(s.history_size(), 4);
  EXPECT_EQ(s.history(3).loss(), 6.5);
  ASSERT_EQ(s.evals_size(), 1);
  EXPECT_EQ(s.evals(0).mlm_accuracy(), 0.125);
  EXPECT_EQ(s.evals(0).stats().mlm_correct(), 8);
  EXPECT_EQ(s.ps_addresses_size(), 2);
  EXPECT_TRUE(s.slots(0).done());
  EXPECT_EQ(s.last_checkpoint_version(), 4);
  EXPECT_TRUE(r[2].training_done());
  EXPECT_EQ(r[2].last_checkpoint(),
            "/jobs/job-000003/checkpoints/ckpt-4/manifest.json");
  ASSERT_EQ(r[2].rounds_size(), 1);
  EXPECT_TRUE(r[2].rounds(0).finished());
  EXPECT_EQ(r[2].tokens_per_example(), 128);
  // FAILED: a classifier whose shard was lost too often.
  const JobStatus& f = r[3].status();
  EXPECT_TRUE(absl::StrContains(f.reason(), "max_restarts (10) is spent"));
  EXPECT_EQ(f.restarts(), 10);
  EXPECT_EQ(f.incarnation(), 11);
  EXPECT_EQ(f.spec().label_names_size(), 2);
  EXPECT_EQ(f.spec().optimizer().kind(), "adamw");
  ASSERT_EQ(f.slots_size(), 2);
  EXPECT_TRUE(f.slots(1).shared());
  EXPECT_EQ(f.slots(1).own_slot(), 0);
  // CANCELLED: an eval job with one item's statistics in.
  const JobStatus& k = r[4].status();
  EXPECT_EQ(k.reason(), "cancelled by the user");
  EXPECT_EQ(k.spec().eval_checkpoint(),
            "/jobs/job-000004/checkpoints/ckpt-30/manifest.json");
  ASSERT_EQ(r[4].items_size(), 2);
  EXPECT_EQ(r[4].items(0).result().eval().confusion_size(), 4);
  EXPECT_EQ(r[4].items(0).result().eval().cls_loss_sum(), 2.5);
  EXPECT_EQ(r[4].rounds(0).count(), 2);
}

TEST(JobStoreV1, ACoordinatorResumesFromIt) {
  absl::StatusOr<std::unique_ptr<JobStore>> store =
      JobStore::Open(StoreCopy("store-recover"));
  ASSERT_TRUE(store.ok()) << store.status();
  CoordinatorOptions o;
  o.store = store->get();
  o.now = [] { return absl::FromUnixSeconds(1700000100); };
  o.stall_threshold = absl::InfiniteDuration();
  Coordinator c(o);
  ASSERT_TRUE(c.Recover().ok());
  // Pending and finished jobs come back as they were; the running
  // preprocess job goes on (its items not done are leased again).
  const std::vector<JobState> states = {PENDING, RUNNING, SUCCEEDED, FAILED,
                                        CANCELLED};
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<JobStatus> st = c.Get(absl::StrCat("job-00000", i + 1));
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->state(), states[i]) << st->id();
  }
  EXPECT_EQ(c.Get("job-000003")->evals(0).mlm_accuracy(), 0.125);
}

TEST(JobStoreV1, IsWrittenAgainWithTheSameContent) {
  const std::string path = FreshDir("store-again") + "/jobs.sqlite";
  absl::Status st = fixtures::WriteJobStoreFixture(path);
  ASSERT_TRUE(st.ok()) << st;
  const std::string again_bytes = ReadOrDie(path);
  const StoreContent committed = ReadStore(StoreCopy("store-committed"));
  const StoreContent again = ReadStore(path);
  const std::string why = Changed("job store (SQLite schema, JobRecord rows)",
                                  kJobStoreDir);
  EXPECT_EQ(again.schema, committed.schema) << why << ": the schema";
  EXPECT_EQ(again.user_version, committed.user_version) << why;
  EXPECT_EQ(again.journal_mode, committed.journal_mode) << why;
  ASSERT_EQ(again.rows.size(), committed.rows.size()) << why;
  for (size_t i = 0; i < again.rows.size(); ++i) {
    EXPECT_EQ(again.rows[i].first, committed.rows[i].first) << why;
    EXPECT_TRUE(again.rows[i].second == committed.rows[i].second)
        << why << ": the record of " << committed.rows[i].first << " has "
        << again.rows[i].second.size() << " bytes now, "
        << committed.rows[i].second.size() << " in the fixture";
  }
  // The file's bytes also hold the SQLite library's version (header bytes
  // 96..99): with the same library they are the same bytes.
  const std::string fixture_bytes = ReadOrDie(kStore);
  if (again_bytes.size() >= 100 && fixture_bytes.size() >= 100 &&
      again_bytes.substr(96, 4) == fixture_bytes.substr(96, 4)) {
    EXPECT_TRUE(again_bytes == fixture_bytes)
        << why << ": the file differs under the same SQLite version";
  }
}

// ---------------------------------------------------------- TensorBoard ----

const std::string kEvents =
    Fixture(absl::StrCat(kEventsDir, "/", fixtures::kEventsFile));

std::vector<std::string> Tags() {
  return absl::StrSplit(ReadOrDie(Fixture(absl::StrCat(kEventsDir, "/",
                                                       fixtures::kTagsFile))),
                        '\n', absl::SkipEmpty());
}

std::vector<tf::Event> ReadEvents(const std::string& path) {
  std::vector<tf::Event> out;
  auto reader = io::TFRecordReader::Open(path);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return out;
  std::string record;
  for (;;) {
    absl::StatusOr<bool> got = (*reader)->Next(&record);
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok() || !*got) break;
    tf::Event e;
    EXPECT_TRUE(e.ParseFromString(record));
    out.push_back(e);
  }
  return out;
}

TEST(TfeventsV1, ReadsAsTensorBoardEvents) {
  const std::vector<std::string> tags = Tags();
  ASSERT_EQ(tags.size(), 16u);
  EXPECT_EQ(tags[0], "train/loss");
  const std::vector<tf::Event> ev = ReadEvents(kEvents);
  ASSERT_EQ(ev.size(), 1 + 16 + 1 + 16u);
  EXPECT_EQ(ev[0].file_version(), "brain.Event:2");
  EXPECT_EQ(ev[0].wall_time(), 1700000001.0);
  for (int k = 0; k < 16; ++k) {
    for (int step : {1, 2}) {
      const tf::Event& e = ev[step == 1 ? 1 + k : 18 + k];
      EXPECT_EQ(e.step(), step);
      EXPECT_EQ(e.wall_time(), 1700000000.0 + step);
      ASSERT_EQ(e.summary().value_size(), 1);
      EXPECT_EQ(e.summary().value(0).tag(), tags[k]);
      EXPECT_EQ(e.summary().value(0).simple_value(), 0.25f * step * (k + 1));
    }
  }
  EXPECT_EQ(ev[17].step(), 1);
  EXPECT_EQ(ev[17].session_log().status(), tf::SessionLog::START);
}

TEST(TfeventsV1, IsWrittenAgainByteForByte) {
  const std::string dir = FreshDir("tfevents-again");
  absl::Status st = fixtures::WriteEventsFixture(dir);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_TRUE(ReadOrDie(dir + "/" + fixtures::kEventsFile) == ReadOrDie(kEvents))
      << Changed("TensorBoard event file", kEventsDir);
}

// The coordinator still writes every tag the fixture lists (a renamed tag
// breaks every saved TensorBoard view and comparison across runs).
TEST(TfeventsV1, TheCoordinatorWritesEveryListedTag) {
  const std::string tb = FreshDir("tb-tags");
  const std::string data = FreshDir("tb-data");
  for (const char* f : {"ev-0.tfrecord", "ev-1.tfrecord"}) {
    ASSERT_TRUE(io::WriteFileAtomically(data + "/" + f, "x").ok());
  }
  absl::Time now = absl::FromUnixSeconds(1700000000);
  CoordinatorOptions o;
  o.now = [&now] { return now; };
  o.stall_threshold = absl::InfiniteDuration();
  o.count_examples = [](const JobSpec&) -> absl::StatusOr<int64_t> {
    return 100;
  };
  Coordinator c(o);
  std::map<std::string, std::string> secrets;  // members' credentials
  auto join = [&](Role role, const std::string& address) {
    RegisterRequest r;
    r.set_role(role);
    r.set_address(address);
    r.set_protocol_version(kMemberProtocolVersion);
    absl::StatusOr<RegisterResponse> reg = c.Register(r);
    secrets[reg->member_id()] = reg->member_secret();
    return reg->member_id();
  };
  auto beat = [&](const std::string& m, const std::string& job,
                  std::vector<StepReport> steps = {},
                  std::vector<WorkResult> results = {}) {
    HeartbeatRequest r;
    r.set_member_id(m);
    r.set_job_id(job);
    if (!job.empty()) r.set_incarnation(c.Get(job)->incarnation());
    for (auto& s : steps) *r.add_steps() = s;
    for (auto& x : results) *r.add_results() = x;
    r.set_member_secret(secrets[m]);
    absl::StatusOr<HeartbeatResponse> resp = c.Heartbeat(r);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->assignment() : Assignment();
  };
  // A train job's step with every part of its time.
  JobSpec train;
  train.set_task(PRETRAIN);
  train.add_data(data + "/*.tfrecord");
  train.set_batch_size(10);
  train.set_steps(5);
  train.set_num_ps_shards(1);
  train.set_num_workers(1);
  train.set_tensorboard_dir(tb + "/train");
  const std::string ps = join(PS, "127.0.0.1:1");
  const std::string w = join(TRAIN, "");
  absl::StatusOr<std::string> id = c.Submit(train);
  ASSERT_TRUE(id.ok()) << id.status();
  beat(ps, ""), beat(ps, *id);
  beat(w, "");
  StepReport r;
  r.set_step(0);
  r.set_examples(10);
  r.set_loss(2.5);
  r.set_learning_rate(0.001);
  r.set_version(1);
  r.set_input_ms(1);
  r.set_pull_ms(2);
  r.set_compute_ms(3);
  r.set_compute_cpu_ms(3);
  r.set_push_ms(4);
  r.set_wait_ms(5);
  now += absl::Seconds(1);
  beat(w, *id, {r});
  // Eval jobs: a classifier's and a pretrained model's statistics.
  const std::string e = join(EVAL_ROLE, "");
  for (int labels : {2, 0}) {
    JobSpec eval;
    eval.set_task(EVAL);
    eval.add_data(data + "/ev-*.tfrecord");
    eval.set_eval_checkpoint("/ckpt/ckpt-7/manifest.json");
    if (labels > 0) eval.set_num_labels(labels);
    eval.set_tensorboard_dir(absl::StrCat(tb, "/eval-", labels));
    absl::StatusOr<std::string> eid = c.Submit(eval);
    ASSERT_TRUE(eid.ok()) << eid.status();
    for (int k = 0; k < 2; ++k) {
      Assignment a = beat(e, *eid);
      ASSERT_TRUE(a.has_item()) << "eval item " << k;
      WorkResult res;
      res.set_index(a.item().index());
      res.set_version(7);
      EvalStats* s = res.mutable_eval();
      s->set_examples(4);
      if (labels > 0) {
        s->set_num_labels(2);
        for (int64_t x : {2, 0, 1, 1}) s->add_confusion(x);
        s->set_cls_loss_sum(1.0);
      } else {
        s->set_mlm_loss_sum(8);
        s->set_mlm_weight(4);
        s->set_mlm_correct(1);
        s->set_nsp_correct(2);
        s->set_nsp_loss_sum(1);
      }
      beat(e, *eid, {}, {res});
    }
    EXPECT_EQ(c.Get(*eid)->state(), SUCCEEDED) << c.Get(*eid)->reason();
  }
  c.Tick();
  std::set<std::string> written;
  for (const auto& f : fs::recursive_directory_iterator(tb)) {
    if (!f.is_regular_file()) continue;
    for (const tf::Event& ev : ReadEvents(f.path().string())) {
      for (const auto& v : ev.summary().value()) written.insert(v.tag());
    }
  }
  EXPECT_GE(written.size(), 16u);
  for (const std::string& tag : Tags()) {
    EXPECT_TRUE(written.count(tag))
        << "the coordinator no longer writes the TensorBoard tag " << tag
        << " (tests/fixtures/" << kEventsDir << "/tags.txt): a renamed tag is "
        << "a format change (docs/formats.md)";
  }
}

// -------------------------------------------------------------- metrics ----

TEST(MetricsV1, EveryListedMetricIsStillExportedAndTheDashboardListsNoOther) {
  // "name type label,label": the daemons still export each name with that
  // type and at least those labels.
  const std::map<std::string, std::string> now = fixtures::ExportedMetricFamilies();
  std::set<std::string> listed;
  for (absl::string_view line : absl::StrSplit(
           ReadOrDie(Fixture(absl::StrCat(kMetricsDir, "/", fixtures::kMetricsFile))),
           '\n', absl::SkipEmpty())) {
    const std::vector<std::string> f = absl::StrSplit(line, ' ');
    ASSERT_EQ(f.size(), 3u) << line;
    listed.insert(f[0]);
    auto it = now.find(f[0]);
    if (it == now.end()) {
      ADD_FAILURE() << "metric " << f[0] << " is no longer exported: dashboards "
                    << "query it (docs/formats.md)";
      continue;
    }
    const std::vector<std::string> g = absl::StrSplit(it->second, ' ');
    EXPECT_EQ(g[0], f[1]) << "metric " << f[0] << " changed its type";
    const std::vector<std::string> want = absl::StrSplit(f[2], ',');
    const std::vector<std::string> have = absl::StrSplit(g[1], ',');
    for (const std::string& l : want) {
      if (l == "-") continue;
      EXPECT_NE(std::find(have.begin(), have.end(), l), have.end())
          << "metric " << f[0] << " lost its label " << l;
    }
  }
  EXPECT_GE(listed.size(), 15u);
  // The shipped dashboard queries only listed metrics (a new one: add its
  // line; names are only ever added).
  absl::StatusOr<std::string> used =
      fixtures::DashboardMetricNames("deploy/grafana/bertps-dashboard.json");
  ASSERT_TRUE(used.ok()) << used.status();
  for (absl::string_view line : absl::StrSplit(*used, '\n', absl::SkipEmpty())) {
    const std::string name(line.substr(0, line.find(' ')));
    EXPECT_TRUE(listed.count(name))
        << "the dashboard queries " << name << ", which tests/fixtures/"
        << kMetricsDir << "/" << fixtures::kMetricsFile << " does not list: "
        << "add its line (" << line << ")";
  }
}

// --------------------------------------------------------- record index ----

// The record index is a cache: an index of another version (here a whole,
// checksummed one with the magic of version 1) is not read, it is rebuilt
// and replaced by one of the current version.
TEST(RecordIndex, AnIndexOfAnotherVersionIsRebuilt) {
  const std::string dir = FreshDir("record-index");
  const std::string data = dir + "/a.tfrecord";
  std::string bytes;
  for (int i = 0; i < 5; ++i) bytes += io::FrameTFRecord(absl::StrCat("record ", i));
  ASSERT_TRUE(io::WriteFileAtomically(data, bytes).ok());
  const std::string cache = dir + "/cache";
  io::IndexSource how;
  absl::StatusOr<io::RecordIndex> built = io::LoadOrBuildRecordIndex(data, cache, &how);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(how, io::IndexSource::kBuilt);
  EXPECT_EQ(built->offsets.size(), 5u);
  const std::string index_path = data + io::kRecordIndexSuffix;
  std::string index = ReadOrDie(index_path);
  ASSERT_EQ(index.substr(0, 8), "BPSIDX2\n");  // today's version: 2
  // The same index under version 1's magic, its checksum made right.
  std::string old = "BPSIDX1\n" + index.substr(8, index.size() - 12);
  const uint32_t crc = io::Crc32c(old.data(), old.size());
  for (int i = 0; i < 4; ++i) old.push_back(static_cast<char>(crc >> (8 * i)));
  {
    std::ofstream f(index_path, std::ios::binary | std::ios::trunc);
    f << old;
  }
  absl::StatusOr<io::RecordIndex> again = io::LoadOrBuildRecordIndex(data, cache, &how);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(how, io::IndexSource::kBuilt);
  EXPECT_EQ(again->offsets, built->offsets);
  EXPECT_EQ(ReadOrDie(index_path), index);  // replaced by a version 2 index
  absl::StatusOr<io::RecordIndex> loaded = io::LoadOrBuildRecordIndex(data, cache, &how);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(how, io::IndexSource::kLoaded);
}

}  // namespace
}  // namespace bertps

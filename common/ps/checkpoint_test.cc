#include "common/ps/checkpoint.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/io/safetensors.h"
#include "common/model/bert_config.h"
#include "common/model/params.h"
#include "common/io/fault_file_system.h"
#include "gtest/gtest.h"

namespace bertps {
namespace ps {
namespace {

namespace fs = std::filesystem;

// Parts: 0 = parameters, k >= 1 = state slot k - 1. G = global element index
// in the layout's flat buffer.
float Value(int part, int64_t g) {
  return static_cast<float>(part * 100000 + g) + 0.25f;  // exact in float
}

BertConfig TinyConfig(int64_t vocab = 50) {
  BertConfig c;
  c.vocab_size = vocab;
  c.hidden_size = 16;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 32;
  c.max_position_embeddings = 200;
  return c;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

// One shard's buffers as the PS holds them: (1 + slots, N), slot-major, with
// part 0 the parameters.
std::vector<float> ShardBuffer(const ParamLayout& layout,
                               const PartitionPlan& plan, int shard,
                               int slots) {
  const int64_t n = plan.shard_size(shard);
  std::vector<float> buf((1 + slots) * n);
  for (int part = 0; part <= slots; ++part) {
    for (int i : plan.shard_slices(shard)) {
      const SliceSpec& s = plan.slices()[i];
      const int64_t off = layout.tensors()[s.tensor].offset;
      for (int64_t e = s.begin; e < s.end; ++e) {
        buf[part * n + s.shard_offset + (e - s.begin)] = Value(part, off + e);
      }
    }
  }
  return buf;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(
        tmp != nullptr ? tmp : "/tmp", "/",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }

  // Writes a checkpoint of `config` with `shards` shards through `fsys`;
  // returns the manifest path, or the first error.
  absl::StatusOr<std::string> TrySave(const std::string& dir, int64_t version,
                                      int shards, int slots,
                                      const BertConfig& config, BertTask task,
                                      io::FileSystem* fsys) {
    const ParamLayout layout = ParamLayout::ForBert(config, task);
    auto plan = PartitionPlan::Make(layout, shards);
    if (!plan.ok()) return plan.status();
    Manifest m;
    m.version = version;
    m.num_shards = shards;
    m.config_json = config.ToJson();
    m.task = std::string(BertTaskName(task));
    m.optimizer = slots == 2 ? "adam_weight_decay" : "momentum";
    m.state_slots = slots;
    m.plan_text = plan->ToText();
    for (int s = 0; s < shards; ++s) {
      const std::vector<float> buf = ShardBuffer(layout, *plan, s, slots);
      ShardSnapshot snap;
      snap.shard = s;
      snap.num_shards = shards;
      snap.version = version;
      snap.plan = &*plan;
      snap.params = buf.data();
      snap.state = buf.data() + plan->shard_size(s);
      snap.state_slots = slots;
      auto f = WriteShardCheckpoint(dir, snap, fsys);
      if (!f.ok()) return f.status();
      EXPECT_EQ(f->file, absl::StrCat(dir, "/ckpt-", version, "/shard-", s,
                                      "-of-", shards, ".safetensors"));
      m.files.push_back(*f);
    }
    return WriteManifest(dir, m, fsys);
  }

  // The same through the real file system, expecting success.
  std::string Save(const std::string& dir, int64_t version, int shards,
                   int slots, const BertConfig& config,
                   BertTask task = BertTask::kPretrain) {
    auto path = TrySave(dir, version, shards, slots, config, task, nullptr);
    EXPECT_TRUE(path.ok()) << path.status();
    if (!path.ok()) return "";
    for (int s = 0; s < shards; ++s) {
      const std::string f = absl::StrCat(dir, "/ckpt-", version, "/shard-", s,
                                         "-of-", shards, ".safetensors");
      auto m = ReadManifest(*path);
      EXPECT_TRUE(m.ok()) << m.status();
      if (m.ok()) {
        EXPECT_EQ(static_cast<int64_t>(fs::file_size(f)), m->files[s].bytes);
      }
    }
    return *path;
  }

  std::string Save(int64_t version, int shards, int slots) {
    return Save(dir_, version, shards, slots, config_);
  }

  std::string ShardPath(int64_t version, int shard, int shards) {
    return absl::StrCat(dir_, "/ckpt-", version, "/shard-", shard, "-of-",
                        shards, ".safetensors");
  }

  // Restores every shard of an S-shard plan and compares with the values.
  void ExpectRestores(const std::string& manifest, int shards, int slots) {
    ExpectRestoresVersion(manifest, shards, slots, 42);
  }
  void ExpectRestoresVersion(const std::string& manifest, int shards,
                             int slots, int64_t version) {
    auto plan = PartitionPlan::Make(layout_, shards);
    ASSERT_TRUE(plan.ok());
    for (int s = 0; s < shards; ++s) {
      const int64_t n = plan->shard_size(s);
      std::vector<float> got((1 + slots) * n, -1.0f);
      auto v = RestoreShard(manifest, layout_, *plan, s, slots, got.data(),
                            slots > 0 ? got.data() + n : nullptr);
      ASSERT_TRUE(v.ok()) << v.status();
      EXPECT_EQ(*v, version);
      const std::vector<float> want = ShardBuffer(layout_, *plan, s, slots);
      ASSERT_EQ(got.size(), want.size());
      int64_t bad = 0;
      for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
      EXPECT_EQ(bad, 0) << shards << " shards, shard " << s;
    }
  }

  std::string dir_;
  BertConfig config_ = TinyConfig();
  ParamLayout layout_ = ParamLayout::ForBert(config_, BertTask::kPretrain);
};

TEST_F(CheckpointTest, PlansSplitTensorsDifferently) {
  // The round trip below is only interesting if slices cross: some tensor is
  // cut differently by the 2- and 3-shard plans.
  auto p2 = PartitionPlan::Make(layout_, 2);
  auto p3 = PartitionPlan::Make(layout_, 3);
  ASSERT_TRUE(p2.ok() && p3.ok());
  bool differ = false;
  for (size_t t = 0; t < layout_.tensors().size(); ++t) {
    differ |= p2->pieces(t) != p3->pieces(t);
  }
  EXPECT_TRUE(differ);
  EXPECT_NE(p2->ToText(), p3->ToText());
}

TEST_F(CheckpointTest, RestoresOntoThreeTwoAndOneShards) {
  const std::string manifest = Save(42, 2, 2);
  EXPECT_EQ(manifest, dir_ + "/ckpt-42/manifest.json");
  ExpectRestores(manifest, 3, 2);
  ExpectRestores(manifest, 2, 2);
  ExpectRestores(manifest, 1, 2);
}

TEST_F(CheckpointTest, RestoresWithOneAndZeroStateSlots) {
  ExpectRestores(Save(42, 3, 1), 2, 1);
  fs::remove_all(dir_);
  ExpectRestores(Save(42, 1, 0), 3, 0);
}

TEST_F(CheckpointTest, ManifestRoundTrip) {
  const std::string path = Save(42, 2, 2);
  auto m = ReadManifest(path);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->version, 42);
  EXPECT_EQ(m->num_shards, 2);
  EXPECT_EQ(m->task, "pretrain");
  EXPECT_EQ(m->optimizer, "adam_weight_decay");
  EXPECT_EQ(m->state_slots, 2);
  EXPECT_EQ(m->plan_text, PartitionPlan::Make(layout_, 2)->ToText());
  auto c = ParseBertConfig(m->config_json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ToJson(), config_.ToJson());
  ASSERT_EQ(m->files.size(), 2u);
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(m->files[s].shard, s);
    // Relative to the manifest's directory.
    EXPECT_EQ(m->files[s].file, absl::StrCat("shard-", s, "-of-2.safetensors"));
    EXPECT_EQ(m->files[s].bytes,
              static_cast<int64_t>(fs::file_size(ShardPath(42, s, 2))));
  }
  // The shard file is plain safetensors with one tensor per slice and part.
  auto r = io::SafetensorsReader::Open(ShardPath(42, 0, 2));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->metadata().at("version"), "42");
  EXPECT_EQ(r->metadata().at("shard"), "0");
  EXPECT_EQ(r->metadata().at("num_shards"), "2");
  auto plan = PartitionPlan::Make(layout_, 2);
  EXPECT_EQ(r->tensors().size(), 3 * plan->shard_slices(0).size());
  const SliceSpec& first = plan->slices()[plan->shard_slices(0)[0]];
  auto v = r->ReadF32(absl::StrCat("state1/", first.name, "/", first.begin));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)[0],
            Value(2, layout_.tensors()[first.tensor].offset + first.begin));
}

TEST_F(CheckpointTest, ExportEqualsOriginalTensors) {
  const std::string manifest = Save(42, 2, 2);
  const std::string out = dir_ + "/export.safetensors";
  ASSERT_TRUE(ExportCheckpoint(manifest, out).ok());
  auto r = io::SafetensorsReader::Open(out);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tensors().size(), layout_.tensors().size());
  for (const ParamSpec& p : layout_.tensors()) {
    const io::TensorInfo* info = r->Find(p.name);
    ASSERT_NE(info, nullptr) << p.name;
    EXPECT_EQ(info->shape, p.shape) << p.name;
    auto v = r->ReadF32(p.name);
    ASSERT_TRUE(v.ok()) << v.status();
    int64_t bad = 0;
    for (int64_t e = 0; e < p.size; ++e) {
      bad += (*v)[e] != Value(0, p.offset + e);
    }
    EXPECT_EQ(bad, 0) << p.name;
  }
  auto c = ParseBertConfig(r->metadata().at("config"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->vocab_size, 50);
  EXPECT_EQ(c->max_position_embeddings, 200);
}

TEST_F(CheckpointTest, CorruptFileIsDataLossAndWritesNothing) {
  const std::string manifest = Save(42, 2, 2);
  const std::string victim = ShardPath(42, 1, 2);
  std::string bytes = ReadAll(victim);
  bytes[bytes.size() - 5] ^= 0x01;  // a data byte
  WriteAll(victim, bytes);
  auto plan = PartitionPlan::Make(layout_, 1);
  const int64_t n = plan->shard_size(0);
  std::vector<float> params(n, -7.0f), state(2 * n, -7.0f);
  auto v =
      RestoreShard(manifest, layout_, *plan, 0, 2, params.data(), state.data());
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDataLoss) << v.status();
  EXPECT_TRUE(absl::StrContains(v.status().message(), victim)) << v.status();
  EXPECT_TRUE(absl::StrContains(v.status().message(), "CRC-32C"));
  for (float x : params) ASSERT_EQ(x, -7.0f);
  for (float x : state) ASSERT_EQ(x, -7.0f);
  auto e = ExportCheckpoint(manifest, dir_ + "/export.safetensors");
  EXPECT_EQ(e.code(), absl::StatusCode::kDataLoss) << e;
  EXPECT_FALSE(fs::exists(dir_ + "/export.safetensors"));

  // A truncated file: size mismatch, also DataLoss naming the file.
  WriteAll(victim, bytes.substr(0, bytes.size() / 2));
  v = RestoreShard(manifest, layout_, *plan, 0, 2, params.data(), state.data());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDataLoss) << v.status();
  EXPECT_TRUE(absl::StrContains(v.status().message(), victim)) << v.status();
  for (float x : params) ASSERT_EQ(x, -7.0f);
}

TEST_F(CheckpointTest, OnlyNeededFilesAreRead) {
  // Restoring onto the same 2-shard plan reads only the shard's own file:
  // corrupting shard 1 does not affect shard 0.
  const std::string manifest = Save(42, 2, 0);
  const std::string victim = ShardPath(42, 1, 2);
  std::string bytes = ReadAll(victim);
  bytes[bytes.size() - 5] ^= 0x01;
  WriteAll(victim, bytes);
  auto plan = PartitionPlan::Make(layout_, 2);
  std::vector<float> p0(plan->shard_size(0)), p1(plan->shard_size(1));
  EXPECT_TRUE(
      RestoreShard(manifest, layout_, *plan, 0, 0, p0.data(), nullptr).ok());
  EXPECT_EQ(RestoreShard(manifest, layout_, *plan, 1, 0, p1.data(), nullptr)
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(CheckpointTest, MissingFileIsNamed) {
  const std::string manifest = Save(42, 2, 2);
  const std::string victim = ShardPath(42, 0, 2);
  fs::remove(victim);
  auto plan = PartitionPlan::Make(layout_, 3);
  const int64_t n = plan->shard_size(0);
  std::vector<float> params(n, -7.0f), state(2 * n, -7.0f);
  auto v =
      RestoreShard(manifest, layout_, *plan, 0, 2, params.data(), state.data());
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound) << v.status();
  EXPECT_TRUE(absl::StrContains(v.status().message(), victim)) << v.status();
  for (float x : params) ASSERT_EQ(x, -7.0f);
  for (float x : state) ASSERT_EQ(x, -7.0f);

  // A missing manifest.
  v = RestoreShard(dir_ + "/ckpt-41/manifest.json", layout_, *plan, 0, 2,
                   params.data(), state.data());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound) << v.status();
}

TEST_F(CheckpointTest, DifferentModelIsRejected) {
  const std::string manifest = Save(42, 2, 2);
  auto check = [&](const ParamLayout& other, const std::string& tensor) {
    auto plan = PartitionPlan::Make(other, 2);
    const int64_t n = plan->shard_size(0);
    std::vector<float> params(n, -7.0f), state(2 * n, -7.0f);
    auto v =
        RestoreShard(manifest, other, *plan, 0, 2, params.data(), state.data());
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kFailedPrecondition)
        << v.status();
    EXPECT_TRUE(absl::StrContains(v.status().message(), "different model"))
        << v.status();
    EXPECT_TRUE(absl::StrContains(v.status().message(), tensor)) << v.status();
    for (float x : params) ASSERT_EQ(x, -7.0f);
  };
  // Another vocabulary: the word embeddings differ in size.
  check(ParamLayout::ForBert(TinyConfig(60), BertTask::kPretrain),
        "bert.embeddings.word_embeddings.weight");
  // Another task: the classifier is not in the checkpoint.
  check(ParamLayout::ForBert(config_, BertTask::kClassify), "cls.");
}

TEST_F(CheckpointTest, StateSlotsMismatchIsRejected) {
  const std::string manifest = Save(42, 2, 2);
  auto plan = PartitionPlan::Make(layout_, 2);
  const int64_t n = plan->shard_size(0);
  std::vector<float> params(n, -7.0f), state(2 * n, -7.0f);
  for (int slots : {0, 1}) {
    auto v = RestoreShard(manifest, layout_, *plan, 0, slots, params.data(),
                          state.data());
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kFailedPrecondition)
        << v.status();
    EXPECT_TRUE(absl::StrContains(v.status().message(), "state slots"))
        << v.status();
  }
  for (float x : params) ASSERT_EQ(x, -7.0f);
  // Bad arguments.
  EXPECT_EQ(
      RestoreShard(manifest, layout_, *plan, 2, 2, params.data(), state.data())
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RestoreShard(manifest, layout_, *plan, 0, 2, params.data(), nullptr)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CheckpointTest, LatestManifestPicksTheNewest) {
  EXPECT_EQ(LatestManifest(dir_).status().code(), absl::StatusCode::kNotFound);
  fs::create_directories(dir_);
  EXPECT_EQ(LatestManifest(dir_).status().code(), absl::StatusCode::kNotFound);
  Save(5, 2, 0);
  auto latest = LatestManifest(dir_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, dir_ + "/ckpt-5/manifest.json");
  Save(7, 2, 0);
  latest = LatestManifest(dir_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, dir_ + "/ckpt-7/manifest.json");
  EXPECT_EQ(ReadAll(dir_ + "/LATEST"), "ckpt-7\n");
  // An incomplete newer checkpoint (shard files, no manifest) is not picked,
  // even when LATEST is lost.
  fs::create_directories(dir_ + "/ckpt-9");
  WriteAll(dir_ + "/ckpt-9/shard-0-of-2.safetensors", "x");
  fs::remove(dir_ + "/LATEST");
  latest = LatestManifest(dir_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, dir_ + "/ckpt-7/manifest.json");
  // A manifest path from LatestManifest restores.
  auto plan = PartitionPlan::Make(layout_, 1);
  std::vector<float> params(plan->shard_size(0));
  auto v = RestoreShard(*latest, layout_, *plan, 0, 0, params.data(), nullptr);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 7);
}

// A full disk, a failed fsync or a crash while any file of a checkpoint is
// written (a shard file, the manifest, LATEST) leaves the previous
// checkpoint the newest valid one, and the error names the file.
TEST_F(CheckpointTest, AFailedWriteLeavesThePreviousCheckpointNewest) {
  using F = io::FaultFileSystem;
  struct Case {
    F::Fault fault;
    const char* match;
    absl::StatusCode code;
    const char* says;
  };
  const Case cases[] = {
      {F::kNoSpace, "shard-1-of-2", absl::StatusCode::kResourceExhausted,
       "No space left on device"},
      {F::kFsyncFails, "shard-0-of-2", absl::StatusCode::kDataLoss,
       "fsync"},
      {F::kCrash, "shard-1-of-2", absl::StatusCode::kAborted, "died"},
      {F::kNoSpace, "manifest.json", absl::StatusCode::kResourceExhausted,
       "No space left on device"},
      {F::kCrash, "manifest.json", absl::StatusCode::kAborted, "died"},
      {F::kFsyncFails, "LATEST", absl::StatusCode::kDataLoss, "fsync"},
      {F::kCrash, "LATEST", absl::StatusCode::kAborted, "died"},
  };
  int64_t version = 10;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.match);
    const std::string good = Save(version, 2, 2);
    ASSERT_FALSE(good.empty());
    F faulty;
    faulty.Arm(c.fault, c.match);
    auto bad = TrySave(dir_, version + 10, 2, 2, config_, BertTask::kPretrain,
                       &faulty);
    EXPECT_TRUE(faulty.hit());
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), c.code) << bad.status();
    EXPECT_NE(bad.status().message().find(c.match), std::string::npos)
        << bad.status();
    EXPECT_NE(bad.status().message().find(c.says), std::string::npos)
        << bad.status();
    auto latest = LatestManifest(dir_);
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_EQ(*latest, good);
    ExpectRestoresVersion(*latest, 2, 2, version);
    // Also when LATEST is lost: the scan skips the incomplete one (no
    // manifest, or a torn one) ...
    if (std::string(c.match) != "LATEST") {
      fs::remove(dir_ + "/LATEST");
      latest = LatestManifest(dir_);
      ASSERT_TRUE(latest.ok()) << latest.status();
      EXPECT_EQ(*latest, good);
    }
    // ... and the next checkpoint, written whole, is the newest.
    const std::string next = Save(version + 20, 2, 2);
    EXPECT_EQ(*LatestManifest(dir_), next);
    version += 30;
  }
}

// A disk that acknowledges a write and loses half of it: a shard file that
// no longer has the size it was written with is refused by WriteManifest; a
// torn manifest (LATEST names it) is skipped for the previous checkpoint.
TEST_F(CheckpointTest, ALostAcknowledgedWriteIsNeverTheNewest) {
  using F = io::FaultFileSystem;
  ASSERT_FALSE(Save(5, 2, 2).empty());
  F lying;
  lying.Arm(F::kLyingDisk, "shard-1-of-2");
  auto path = TrySave(dir_, 6, 2, 2, config_, BertTask::kPretrain, &lying);
  ASSERT_TRUE(lying.hit());
  ASSERT_FALSE(path.ok());
  EXPECT_NE(path.status().message().find("shard-1-of-2"), std::string::npos)
      << path.status();
  EXPECT_EQ(*LatestManifest(dir_), dir_ + "/ckpt-5/manifest.json");
  lying.Arm(F::kLyingDisk, "manifest.json");
  path = TrySave(dir_, 7, 2, 2, config_, BertTask::kPretrain, &lying);
  ASSERT_TRUE(lying.hit());
  ASSERT_TRUE(path.ok()) << path.status();  // the disk said so
  EXPECT_EQ(ReadAll(dir_ + "/LATEST"), "ckpt-7\n");
  EXPECT_EQ(ReadManifest(*path).status().code(), absl::StatusCode::kDataLoss);
  auto latest = LatestManifest(dir_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, dir_ + "/ckpt-5/manifest.json");
  ExpectRestoresVersion(*latest, 2, 2, 5);
}

TEST_F(CheckpointTest, BadManifestsAreRejected) {
  const std::string path = Save(42, 2, 2);
  auto m = ReadManifest(path);
  ASSERT_TRUE(m.ok()) << m.status();

  // WriteManifest validates.
  Manifest bad = *m;
  bad.files.pop_back();
  EXPECT_EQ(WriteManifest(dir_, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = *m;
  bad.files[1].shard = 0;
  EXPECT_EQ(WriteManifest(dir_, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = *m;
  bad.files[0].file = "../shard-0-of-2.safetensors";
  EXPECT_EQ(WriteManifest(dir_, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = *m;
  bad.task = "translate";
  EXPECT_EQ(WriteManifest(dir_, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = *m;
  bad.plan_text = PartitionPlan::Make(layout_, 3)->ToText();  // shard 2 of 2
  EXPECT_EQ(WriteManifest(dir_, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = *m;
  bad.files[0].bytes += 1;  // not what is on disk
  EXPECT_EQ(WriteManifest(dir_, bad).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadAll(dir_ + "/LATEST"), "ckpt-42\n");

  // ReadManifest: DataLoss naming the file and the field.
  const std::string text = ReadAll(path);
  const std::string broken = dir_ + "/broken.json";
  std::string t = text;
  t.replace(t.find("\"state_slots\""), 13, "\"slots_state\"");
  WriteAll(broken, t);
  auto r = ReadManifest(broken);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), broken)) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "state_slots"))
      << r.status();
  WriteAll(broken, text.substr(0, text.size() / 2));
  EXPECT_EQ(ReadManifest(broken).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(CheckpointTest, BadSnapshotsAreRejected) {
  auto plan = PartitionPlan::Make(layout_, 2);
  std::vector<float> buf(3 * plan->shard_size(0));
  ShardSnapshot snap;
  snap.num_shards = 2;
  snap.plan = &*plan;
  snap.params = buf.data();
  snap.state = buf.data() + plan->shard_size(0);
  snap.state_slots = 2;
  EXPECT_TRUE(WriteShardCheckpoint(dir_, snap).ok());
  ShardSnapshot bad = snap;
  bad.plan = nullptr;
  EXPECT_EQ(WriteShardCheckpoint(dir_, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = snap;
  bad.shard = 2;
  EXPECT_EQ(WriteShardCheckpoint(dir_, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = snap;
  bad.num_shards = 3;
  EXPECT_EQ(WriteShardCheckpoint(dir_, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = snap;
  bad.state = nullptr;
  EXPECT_EQ(WriteShardCheckpoint(dir_, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = snap;
  bad.state_slots = 3;
  EXPECT_EQ(WriteShardCheckpoint(dir_, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
}  // namespace bertps

#include "common/model/weights.h"

#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "common/io/safetensors.h"
#include "gtest/gtest.h"

namespace bertps {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

BertConfig Small() {
  BertConfig c;
  c.vocab_size = 11;
  c.hidden_size = 4;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.intermediate_size = 8;
  c.max_position_embeddings = 6;
  return c;
}

TEST(Weights, SaveLoadRoundTrip) {
  BertConfig c = Small();
  ParamLayout layout = ParamLayout::ForBert(c, BertTask::kPretrain);
  std::vector<float> w(layout.total_size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.001f * i;
  const std::string path = TempPath("rt.safetensors");
  ASSERT_TRUE(SaveBertWeights(path, layout, w.data(), &c).ok());
  std::vector<float> back(w.size(), -1);
  auto report = LoadBertWeights(path, layout, AllowMissing::kNone, back.data());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(back, w);
  EXPECT_EQ(report->loaded.size(), layout.tensors().size());
  auto reader = io::SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok());
  EXPECT_NE(reader->Find("bert.encoder.layer.0.attention.self.query.weight"),
            nullptr);
  EXPECT_NE(reader->metadata().at("config").find("\"hidden_size\": 4"),
            std::string::npos);
}

TEST(Weights, AcceptsOldNamesMissingPrefixAndHalfPrecision) {
  BertConfig c = Small();
  ParamLayout layout = ParamLayout::ForBert(c, BertTask::kPretrain);
  io::SafetensorsWriter writer;
  std::vector<float> w(layout.total_size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7);
  for (const ParamSpec& s : layout.tensors()) {
    std::string name = s.name;
    if (name.rfind("bert.", 0) == 0) name = name.substr(5);
    if (name.find("LayerNorm.weight") != std::string::npos) {
      name = name.substr(0, name.size() - 6) + "gamma";
    }
    writer.AddBF16FromF32(name, s.shape, w.data() + s.offset);
  }
  // The tied decoder copy is accepted and ignored.
  const ParamSpec* emb = layout.Find("bert.embeddings.word_embeddings.weight");
  writer.AddF32("cls.predictions.decoder.weight", emb->shape,
                w.data() + emb->offset);
  const std::string path = TempPath("old.safetensors");
  ASSERT_TRUE(writer.Write(path).ok());
  std::vector<float> back(w.size(), -1);
  auto report = LoadBertWeights(path, layout, AllowMissing::kNone, back.data());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(back, w);  // small integers are exact in bf16
  EXPECT_EQ(report->skipped.size(), 1u);
}

TEST(Weights, ClassifierFromPretrainCheckpoint) {
  BertConfig c = Small();
  ParamLayout pre = ParamLayout::ForBert(c, BertTask::kPretrain);
  ParamLayout cls = ParamLayout::ForBert(c, BertTask::kClassify);
  std::vector<float> w(pre.total_size(), 0.5f);
  const std::string path = TempPath("pre.safetensors");
  ASSERT_TRUE(SaveBertWeights(path, pre, w.data(), &c).ok());
  std::vector<float> back(cls.total_size(), -1);
  EXPECT_FALSE(LoadBertWeights(path, cls, AllowMissing::kNone, back.data()).ok());
  EXPECT_EQ(back[0], -1);  // nothing written on failure
  auto report = LoadBertWeights(path, cls, AllowMissing::kHeads, back.data());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->missing.size(), 2u);  // classifier.weight, classifier.bias
  EXPECT_EQ(back[cls.Offset("classifier.weight")], -1);
  EXPECT_EQ(back[0], 0.5f);
}

TEST(Weights, ShapeMismatchIsAnErrorAndWritesNothing) {
  BertConfig c = Small();
  ParamLayout layout = ParamLayout::ForBert(c, BertTask::kPretrain);
  BertConfig other = c;
  other.vocab_size = 12;
  ParamLayout wrong = ParamLayout::ForBert(other, BertTask::kPretrain);
  std::vector<float> w(wrong.total_size(), 1.0f);
  const std::string path = TempPath("wrong.safetensors");
  ASSERT_TRUE(SaveBertWeights(path, wrong, w.data(), &other).ok());
  std::vector<float> back(layout.total_size(), -1);
  auto report = LoadBertWeights(path, layout, AllowMissing::kNone, back.data());
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("word_embeddings"),
            std::string::npos)
      << report.status();
  for (float v : back) ASSERT_EQ(v, -1);
}

// A NaN or Inf anywhere (here in the last tensor written) is refused with the
// tensor's name and the element, and nothing is written.
TEST(Weights, NonFiniteValuesAreRefusedByNameAndWriteNothing) {
  BertConfig c = Small();
  ParamLayout layout = ParamLayout::ForBert(c, BertTask::kPretrain);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    std::vector<float> w(layout.total_size(), 0.25f);
    const ParamSpec* q =
        layout.Find("bert.encoder.layer.0.attention.self.query.bias");
    ASSERT_NE(q, nullptr);
    w[q->offset + 1] = bad;
    const std::string path = TempPath("nan.safetensors");
    ASSERT_TRUE(SaveBertWeights(path, layout, w.data(), &c).ok());
    std::vector<float> back(layout.total_size(), -1);
    auto report =
        LoadBertWeights(path, layout, AllowMissing::kNone, back.data());
    ASSERT_FALSE(report.ok());
    EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(report.status().message().find(
                  "attention.self.query.bias holds a non-finite value"),
              std::string::npos)
        << report.status();
    EXPECT_NE(report.status().message().find("at element 1 of 4"),
              std::string::npos)
        << report.status();
    for (float v : back) ASSERT_EQ(v, -1);
  }
}

}  // namespace
}  // namespace bertps

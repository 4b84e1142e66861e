#include "common/model/hf_export.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "common/io/file_util.h"
#include "common/model/test_util.h"
#include "common/model/weights.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace bertps {
namespace {

std::string Tmp(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(t ? t : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

// The shared tiny test config: vocab 23, max positions 10, 3 labels.
BertConfig Small() { return testing::TinyTestConfig(); }

TEST(HfExport, PathsNameFilesOrDirectories) {
  EXPECT_FALSE(IsHfModelDir("out/model.safetensors"));
  EXPECT_TRUE(IsHfModelDir("out/model"));
  EXPECT_TRUE(IsHfModelDir("out/model/"));
  EXPECT_FALSE(IsHfModelDir(""));
}

// A classifier's directory: config.json that reads back as the same model
// with its labels, the weights under their names, the vocabulary and the
// tokenizer's config.
TEST(HfExport, ClassifierDirectoryReadsBack) {
  const BertConfig c = Small();
  const ParamLayout layout = ParamLayout::ForBert(c, BertTask::kClassify);
  std::vector<float> params(layout.total_size());
  for (size_t i = 0; i < params.size(); ++i) params[i] = 0.001f * i;
  const std::string vocab = Tmp("vocab.txt");
  std::string words = "[PAD]\n[UNK]\n";
  for (int i = 2; i < 23; ++i) words += "w" + std::to_string(i) + "\n";
  ASSERT_TRUE(io::WriteFileAtomically(vocab, words).ok());
  HfExportOptions o;
  o.label_names = {"ham", "spam"};  // the third is named by its id
  o.vocab_path = vocab;
  o.do_lower_case = false;
  const std::string dir = Tmp("hf-classifier");
  ASSERT_TRUE(
      WriteHfModelDir(dir, layout, params.data(), c, BertTask::kClassify, o)
          .ok());
  auto text = io::ReadFileToString(dir + "/config.json");
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::json j = nlohmann::json::parse(*text);
  EXPECT_EQ(j["architectures"][0], "BertForSequenceClassification");
  EXPECT_EQ(j["model_type"], "bert");
  EXPECT_EQ(j["position_embedding_type"], "absolute");
  EXPECT_EQ(j["id2label"]["0"], "ham");
  EXPECT_EQ(j["id2label"]["2"], "LABEL_2");
  EXPECT_EQ(j["label2id"]["spam"], 1);
  auto back = ParseBertConfig(*text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->num_labels, 3);
  EXPECT_EQ(back->hidden_size, Small().hidden_size);
  std::vector<float> loaded(layout.total_size(), -1.f);
  auto report = LoadBertWeights(dir + "/model.safetensors", layout,
                                AllowMissing::kNone, loaded.data());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(loaded, params);
  EXPECT_EQ(*io::ReadFileToString(dir + "/vocab.txt"), words);
  const nlohmann::json t =
      nlohmann::json::parse(*io::ReadFileToString(dir + "/tokenizer_config.json"));
  EXPECT_EQ(t["tokenizer_class"], "BertTokenizer");
  EXPECT_EQ(t["do_lower_case"], false);
  EXPECT_EQ(t["model_max_length"], 10);
}

TEST(HfExport, PretrainingDirectoryWithoutVocabulary) {
  const BertConfig c = Small();
  const ParamLayout layout = ParamLayout::ForBert(c, BertTask::kPretrain);
  std::vector<float> params(layout.total_size(), 0.5f);
  const std::string dir = Tmp("hf-pretrain");
  ASSERT_TRUE(WriteHfModelDir(dir, layout, params.data(), c,
                              BertTask::kPretrain, HfExportOptions())
                  .ok());
  const nlohmann::json j =
      nlohmann::json::parse(*io::ReadFileToString(dir + "/config.json"));
  EXPECT_EQ(j["architectures"][0], "BertForPreTraining");
  EXPECT_FALSE(j.contains("id2label"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/vocab.txt"));
  // A vocabulary of another size, or a missing one, is an error naming it.
  EXPECT_TRUE(CheckHfVocabulary(dir + "/config.json", 23).message().find(
                  "entries but the model's vocab_size is 23") !=
              std::string::npos);
  HfExportOptions o;
  o.vocab_path = dir + "/no-vocab.txt";
  absl::Status st =
      WriteHfModelDir(dir, layout, params.data(), c, BertTask::kPretrain, o);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("no-vocab.txt"), std::string::npos) << st;
}

}  // namespace
}  // namespace bertps

#include "tools/bert_local.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/io/bert_example.h"
#include "common/io/tfrecord.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace bertps {
namespace {

std::string TempDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

BertConfig Small() {
  BertConfig c;
  c.vocab_size = 40;
  c.hidden_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 64;
  c.max_position_embeddings = 32;
  c.num_labels = 2;
  return c;
}

// Learnable synthetic data: every sequence repeats one token, the masked
// positions predict it; NSP label = whether the token id is even.
void WritePretrainData(const std::string& path, int n, int seq, int preds,
                       uint64_t seed) {
  std::mt19937 rng(seed);
  auto w = io::TFRecordWriter::Open(path);
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < n; ++i) {
    io::PretrainExample e;
    const int tok = 5 + rng() % 30;
    for (int j = 0; j < seq; ++j) {
      e.input_ids.push_back(j == 0 ? 1 : tok);
      e.input_mask.push_back(1);
      e.segment_ids.push_back(j < seq / 2 ? 0 : 1);
    }
    for (int k = 0; k < preds; ++k) {
      const int pos = 1 + k * 3;
      e.input_ids[pos] = 4;  // [MASK]
      e.masked_lm_positions.push_back(pos);
      e.masked_lm_ids.push_back(tok);
      e.masked_lm_weights.push_back(1.0f);
    }
    e.next_sentence_label = tok % 2;
    ASSERT_TRUE((*w)->Write(io::EncodePretrainExample(e)).ok());
  }
  ASSERT_TRUE((*w)->Close().ok());
}

std::vector<nlohmann::json> Lines(const std::string& s) {
  std::vector<nlohmann::json> out;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(BertLocal, TrainLowersLossAndEvalReadsTheResult) {
  const std::string dir = TempDir();
  WritePretrainData(dir + "/a.tfrecord", 48, 16, 3, 1);
  WritePretrainData(dir + "/b.tfrecord", 48, 16, 3, 2);
  LocalOptions o;
  o.config = Small();
  o.data = {dir + "/*.tfrecord"};
  o.out = dir + "/trained.safetensors";
  o.batch_size = 16;
  o.steps = 150;
  o.log_every = 25;
  o.optimizer.learning_rate = 3e-3;
  o.optimizer.warmup_steps = 5;
  o.optimizer.total_steps = 150;
  std::ostringstream log;
  absl::Status s = RunTrain(o, log);
  ASSERT_TRUE(s.ok()) << s;
  std::vector<nlohmann::json> lines = Lines(log.str());
  ASSERT_EQ(lines.size(), 6u);
  const double first = lines.front()["loss"], last = lines.back()["loss"];
  EXPECT_LT(last, 0.5 * first) << log.str();
  // 150 * 16 / 96 = 25 passes; the 25th wraps on the next read.
  EXPECT_EQ(lines.back()["epoch"].get<int>(), 24);
  // The per-step time split, averaged over each interval.
  for (const nlohmann::json& l : lines) {
    EXPECT_GT(l["compute_ms"].get<double>(), 0) << l;
    EXPECT_GT(l["compute_cpu_ms"].get<double>(), 0) << l;
    EXPECT_GT(l["optimizer_ms"].get<double>(), 0) << l;
    EXPECT_GE(l["read_ms"].get<double>(), 0) << l;
  }

  o.weights = o.out;
  std::ostringstream ev;
  s = RunEval(o, ev);
  ASSERT_TRUE(s.ok()) << s;
  nlohmann::json e = Lines(ev.str()).at(0);
  EXPECT_EQ(e["examples"], 96);
  EXPECT_GT(e["mlm_accuracy"].get<double>(), 0.6) << ev.str();
  EXPECT_GT(e["nsp_accuracy"].get<double>(), 0.0);
  EXPECT_NEAR(std::exp(e["mlm_loss"].get<double>()),
              e["mlm_perplexity"].get<double>(), 1e-6);
}

TEST(BertLocal, ClearErrors) {
  const std::string dir = TempDir();
  LocalOptions o;
  o.config = Small();
  o.out = dir + "/x.safetensors";
  o.data = {dir + "/nothing-*.tfrecord"};
  std::ostringstream log;
  EXPECT_FALSE(RunTrain(o, log).ok());
  // A corrupt file names the file and the offset.
  WritePretrainData(dir + "/c.tfrecord", 4, 16, 3, 3);
  {
    std::fstream f(dir + "/c.tfrecord",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(30);
    f.put('\x7f');
  }
  o.data = {dir + "/c.tfrecord"};
  o.batch_size = 4;
  o.steps = 1;
  absl::Status s = RunTrain(o, log);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("c.tfrecord"), std::string::npos) << s;
  // grad with a missing batch file.
  o.batch_file = dir + "/missing.safetensors";
  o.weights = dir + "/missing.safetensors";
  EXPECT_FALSE(RunGrad(o, log).ok());
}

}  // namespace
}  // namespace bertps

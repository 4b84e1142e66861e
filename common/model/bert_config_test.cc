#include "common/model/bert_config.h"

#include "gtest/gtest.h"

namespace bertps {
namespace {

TEST(BertConfig, ParsesHuggingFaceConfig) {
  const char* text = R"({
    "architectures": ["BertForMaskedLM"], "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 128,
    "initializer_range": 0.02, "intermediate_size": 512,
    "layer_norm_eps": 1e-12, "max_position_embeddings": 512,
    "model_type": "bert", "num_attention_heads": 2, "num_hidden_layers": 2,
    "pad_token_id": 0, "type_vocab_size": 2, "vocab_size": 30522})";
  absl::StatusOr<BertConfig> c = ParseBertConfig(text);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->hidden_size, 128);
  EXPECT_EQ(c->num_hidden_layers, 2);
  EXPECT_EQ(c->head_size(), 64);
  EXPECT_EQ(c->hidden_act, Activation::kGeluErf);
  absl::StatusOr<BertConfig> back = ParseBertConfig(c->ToJson());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->intermediate_size, 512);
}

TEST(BertConfig, ActivationNames) {
  EXPECT_EQ(ParseBertConfig(R"({"hidden_act":"gelu_new"})")->hidden_act,
            Activation::kGeluTanh);
  EXPECT_EQ(
      ParseBertConfig(R"({"hidden_act":"gelu_pytorch_tanh"})")->hidden_act,
      Activation::kGeluTanh);
  absl::Status s = ParseBertConfig(R"({"hidden_act":"relu"})").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("hidden_act"), std::string::npos);
}

TEST(BertConfig, ValidationNamesTheField) {
  absl::Status s =
      ParseBertConfig(R"({"hidden_size":100,"num_attention_heads":12})")
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("num_attention_heads"), std::string::npos) << s;
  s = ParseBertConfig(R"({"vocab_size":"big"})").status();
  EXPECT_NE(s.message().find("vocab_size"), std::string::npos) << s;
  s = ParseBertConfig(R"({"hidden_dropout_prob":1.5})").status();
  EXPECT_NE(s.message().find("hidden_dropout_prob"), std::string::npos) << s;
  EXPECT_FALSE(ParseBertConfig("not json").ok());
  EXPECT_FALSE(ParseBertConfig("[1,2]").ok());
}

TEST(BertConfig, Presets) {
  struct P {
    const char* name;
    int64_t l, h, heads, inter;
  };
  for (P p : {P{"tiny", 2, 128, 2, 512}, P{"mini", 4, 256, 4, 1024},
              P{"small", 4, 512, 8, 2048}, P{"medium", 8, 512, 8, 2048},
              P{"base", 12, 768, 12, 3072}, P{"large", 24, 1024, 16, 4096}}) {
    absl::StatusOr<BertConfig> c = PresetBertConfig(p.name);
    ASSERT_TRUE(c.ok()) << p.name;
    EXPECT_EQ(c->num_hidden_layers, p.l);
    EXPECT_EQ(c->hidden_size, p.h);
    EXPECT_EQ(c->num_attention_heads, p.heads);
    EXPECT_EQ(c->intermediate_size, p.inter);
    EXPECT_EQ(c->vocab_size, 30522);
  }
  EXPECT_FALSE(PresetBertConfig("huge").ok());
}

TEST(BertConfig, SpecialFilesAreRefused) {
  for (const char* spec : {"/dev/zero", "/dev/urandom", "/"}) {
    auto c = ResolveBertConfig(spec);
    ASSERT_FALSE(c.ok()) << spec;
    EXPECT_NE(c.status().message().find("not a regular file"),
              std::string::npos)
        << c.status();
  }
}

TEST(BertConfig, SizesAreBounded) {
  for (const char* bad : {R"({"vocab_size": 2147483647})",
                          R"({"num_hidden_layers": 1000000})",
                          R"({"hidden_size": 1048576, "num_attention_heads": 1})"}) {
    auto c = ParseBertConfig(bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.status().message().find("must be in [1, "), std::string::npos)
        << c.status();
  }
}

}  // namespace
// Another architecture, or relative position embeddings, is an error, not
// silently BERT; a classifier's id2label gives num_labels.
TEST(BertConfig, OnlyAbsoluteBertIsRead) {
  for (const char* bad : {R"({"model_type": "roberta"})",
                          R"({"model_type": "bert", "position_embedding_type": "relative_key"})",
                          R"({"model_type": 3})"}) {
    auto c = ParseBertConfig(bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.status().message().find("only"), std::string::npos)
        << c.status();
  }
  auto ok = ParseBertConfig(
      R"({"model_type": "bert", "position_embedding_type": "absolute",
          "id2label": {"0": "ham", "1": "spam", "2": "other"}})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->num_labels, 3);
}

}  // namespace bertps

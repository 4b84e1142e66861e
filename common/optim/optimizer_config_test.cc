#include "common/optim/optimizer_config.h"

#include <cmath>
#include <string>

#include "common/optim/optimizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bertps {
namespace optim {
namespace {

using ::testing::HasSubstr;

TEST(ParseOptimizerKindTest, KnownNamesRoundTrip) {
  for (OptimizerKind kind :
       {OptimizerKind::kAdamWeightDecay, OptimizerKind::kAdamW,
        OptimizerKind::kLamb, OptimizerKind::kSgd}) {
    absl::StatusOr<OptimizerKind> parsed =
        ParseOptimizerKind(OptimizerKindName(kind));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, kind);
  }
  EXPECT_EQ(*ParseOptimizerKind("adam_weight_decay"),
            OptimizerKind::kAdamWeightDecay);
  EXPECT_EQ(*ParseOptimizerKind("adamw"), OptimizerKind::kAdamW);
  EXPECT_EQ(*ParseOptimizerKind("lamb"), OptimizerKind::kLamb);
  EXPECT_EQ(*ParseOptimizerKind("sgd"), OptimizerKind::kSgd);
}

TEST(ParseOptimizerKindTest, UnknownNameIsInvalidArgument) {
  for (const char* bad : {"", "adam", "AdamW", "LAMB", "sgd "}) {
    absl::StatusOr<OptimizerKind> parsed = ParseOptimizerKind(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(parsed.status().message()),
                HasSubstr("adam_weight_decay, adamw, lamb, sgd"));
  }
}

TEST(ValidateConfigTest, DefaultsAreValid) {
  EXPECT_TRUE(ValidateConfig(OptimizerConfig()).ok());
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::kSgd;
  sgd.momentum = 0;
  sgd.clip_norm = 0;
  EXPECT_TRUE(ValidateConfig(sgd).ok());
}

// Applies `mutate` to a default config and expects InvalidArgument whose
// message names `field`.
template <typename F>
void ExpectInvalid(F mutate, const std::string& field) {
  OptimizerConfig c;
  mutate(c);
  absl::Status s = ValidateConfig(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_THAT(std::string(s.message()), HasSubstr(field));
}

TEST(ValidateConfigTest, BadFieldsAreNamed) {
  const double nan = std::nan("");
  ExpectInvalid([](OptimizerConfig& c) { c.kind = OptimizerKind(17); }, "kind");
  ExpectInvalid([](OptimizerConfig& c) { c.learning_rate = -1e-4; },
                "learning_rate");
  ExpectInvalid([&](OptimizerConfig& c) { c.learning_rate = nan; },
                "learning_rate");
  ExpectInvalid([](OptimizerConfig& c) { c.beta1 = 1.0; }, "beta1");
  ExpectInvalid([](OptimizerConfig& c) { c.beta1 = -0.1; }, "beta1");
  ExpectInvalid([](OptimizerConfig& c) { c.beta2 = 1.5; }, "beta2");
  ExpectInvalid([](OptimizerConfig& c) { c.epsilon = 0; }, "epsilon");
  ExpectInvalid([](OptimizerConfig& c) { c.weight_decay = -0.01; },
                "weight_decay");
  ExpectInvalid([](OptimizerConfig& c) { c.momentum = 1.0; }, "momentum");
  ExpectInvalid(
      [](OptimizerConfig& c) {
        c.kind = OptimizerKind::kSgd;
        c.momentum = 0;
        c.nesterov = true;
      },
      "nesterov");
  ExpectInvalid([&](OptimizerConfig& c) { c.clip_norm = nan; }, "clip_norm");
  ExpectInvalid([](OptimizerConfig& c) { c.warmup_steps = -1; },
                "warmup_steps");
  ExpectInvalid([](OptimizerConfig& c) { c.total_steps = -5; }, "total_steps");
  ExpectInvalid(
      [](OptimizerConfig& c) {
        c.warmup_steps = 200;
        c.total_steps = 100;
      },
      "warmup_steps");
}

TEST(ValidateConfigTest, ClipOffAndZeroLearningRateAreValid) {
  OptimizerConfig c;
  c.clip_norm = -1;
  c.learning_rate = 0;
  c.weight_decay = 0;
  c.warmup_steps = 100;
  c.total_steps = 100;
  EXPECT_TRUE(ValidateConfig(c).ok());
}

TEST(UsesWeightDecayTest, HuggingFaceNames) {
  EXPECT_FALSE(UsesWeightDecay(
      "bert.encoder.layer.0.attention.output.LayerNorm.weight"));
  EXPECT_FALSE(
      UsesWeightDecay("bert.encoder.layer.0.attention.output.LayerNorm.bias"));
  EXPECT_FALSE(UsesWeightDecay("bert.embeddings.LayerNorm.weight"));
  EXPECT_FALSE(
      UsesWeightDecay("bert.encoder.layer.0.attention.self.query.bias"));
  EXPECT_FALSE(UsesWeightDecay("cls.predictions.bias"));
  EXPECT_FALSE(UsesWeightDecay("cls.predictions.transform.LayerNorm.weight"));
  EXPECT_FALSE(UsesWeightDecay("bert.pooler.dense.bias"));
  EXPECT_TRUE(
      UsesWeightDecay("bert.encoder.layer.0.attention.self.query.weight"));
  EXPECT_TRUE(UsesWeightDecay("bert.embeddings.word_embeddings.weight"));
  EXPECT_TRUE(UsesWeightDecay("bert.embeddings.position_embeddings.weight"));
  EXPECT_TRUE(UsesWeightDecay("bert.encoder.layer.11.output.dense.weight"));
  EXPECT_TRUE(UsesWeightDecay("cls.seq_relationship.weight"));
  EXPECT_TRUE(UsesWeightDecay("classifier.weight"));
  EXPECT_FALSE(UsesWeightDecay("classifier.bias"));
}

TEST(UsesWeightDecayTest, OldStyleAndTensorFlowNames) {
  // Old Hugging Face checkpoints call LayerNorm parameters gamma/beta: the
  // "LayerNorm" substring is what excludes them.
  EXPECT_FALSE(UsesWeightDecay("bert.embeddings.LayerNorm.gamma"));
  EXPECT_FALSE(UsesWeightDecay("bert.encoder.layer.3.output.LayerNorm.beta"));
  EXPECT_FALSE(UsesWeightDecay("bert/encoder/layer_3/output/LayerNorm/beta"));
  EXPECT_FALSE(UsesWeightDecay("model/layer_norm/scale"));
  // BERT's re.search("bias", name): anywhere in the name, like output_bias.
  EXPECT_FALSE(UsesWeightDecay("cls/predictions/output_bias"));
  EXPECT_TRUE(UsesWeightDecay("bert/encoder/layer_3/output/dense/kernel"));
  // Case matters, as in the reference.
  EXPECT_TRUE(UsesWeightDecay("model.layernorm.weight"));
}

TEST(StateSlotsTest, PerKind) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdamWeightDecay;
  EXPECT_EQ(StateSlots(c), 2);
  c.kind = OptimizerKind::kAdamW;
  EXPECT_EQ(StateSlots(c), 2);
  c.kind = OptimizerKind::kLamb;
  EXPECT_EQ(StateSlots(c), 2);
  c.kind = OptimizerKind::kSgd;
  c.momentum = 0.9;
  EXPECT_EQ(StateSlots(c), 1);
  c.momentum = 0;
  EXPECT_EQ(StateSlots(c), 0);
}

}  // namespace
}  // namespace optim
}  // namespace bertps

#include "common/optim/tensor_optimizer.h"

#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/optim/lr_schedule.h"
#include "common/optim/slice_update.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bertps {
namespace optim {
namespace {

using ::testing::HasSubstr;

constexpr char kWeight[] = "bert.encoder.layer.0.attention.self.query.weight";
constexpr char kBias[] = "bert.encoder.layer.0.attention.self.query.bias";
constexpr char kLayerNorm[] =
    "bert.encoder.layer.0.attention.output.LayerNorm.weight";

// A tensor with its own buffers.
struct Owned {
  std::string name;
  std::vector<float> p, g, s;
};

std::vector<Owned> MakeTensors(const OptimizerConfig& c) {
  std::vector<Owned> t = {
      {kWeight, {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f}, {}, {}},
      {kBias, {0.0f, 0.1f, -0.1f}, {}, {}},
      {kLayerNorm, {1.0f, 1.0f, 0.9f}, {}, {}},
  };
  for (Owned& o : t) {
    o.g.assign(o.p.size(), 0.0f);
    o.s.assign(StateSlots(c) * o.p.size(), 0.0f);
  }
  return t;
}

std::vector<NamedTensor> Views(std::vector<Owned>* owned) {
  std::vector<NamedTensor> out;
  for (Owned& o : *owned) {
    out.push_back({o.name, o.p.data(), o.g.data(),
                   o.s.empty() ? nullptr : o.s.data(),
                   static_cast<int64_t>(o.p.size())});
  }
  return out;
}

// Gradients for step `step`, large enough that clipping at 1 applies.
void SetGrads(int step, std::vector<Owned>* owned) {
  float x = 0.3f + 0.1f * step;
  for (Owned& o : *owned) {
    for (float& g : o.g) {
      g = x;
      x = -x * 1.3f + 0.05f;
    }
  }
}

// Double-precision AdamWeightDecay over all tensors with global-norm
// clipping, written from BERT's optimization.py.
struct RefTensor {
  std::vector<double> p, m, v;
  bool decay;
};

void RefBertStep(const OptimizerConfig& c, int64_t step,
                 const std::vector<Owned>& grads_from,
                 std::vector<RefTensor>* ref) {
  double sq = 0;
  for (const Owned& o : grads_from) {
    for (float g : o.g) sq += static_cast<double>(g) * g;
  }
  const double norm = std::sqrt(sq);
  const double scale = norm > c.clip_norm ? c.clip_norm / norm : 1.0;
  double lr = c.learning_rate;
  if (step < c.warmup_steps) {
    lr = c.learning_rate * step / c.warmup_steps;
  } else if (c.total_steps > 0) {
    lr = c.learning_rate *
         (1.0 - std::min<double>(step, c.total_steps) / c.total_steps);
  }
  for (size_t t = 0; t < ref->size(); ++t) {
    RefTensor& r = (*ref)[t];
    for (size_t i = 0; i < r.p.size(); ++i) {
      const double g = grads_from[t].g[i] * scale;
      r.m[i] = c.beta1 * r.m[i] + (1 - c.beta1) * g;
      r.v[i] = c.beta2 * r.v[i] + (1 - c.beta2) * g * g;
      double u = r.m[i] / (std::sqrt(r.v[i]) + c.epsilon);
      if (r.decay) u += c.weight_decay * r.p[i];
      r.p[i] -= lr * u;
    }
  }
}

TEST(TensorOptimizerTest, BertAdamWithClippingAndScheduleMatchesReference) {
  OptimizerConfig c;  // AdamWeightDecay, clip 1.0
  c.learning_rate = 0.01;
  c.warmup_steps = 1;
  c.total_steps = 5;
  std::vector<Owned> owned = MakeTensors(c);
  std::vector<RefTensor> ref;
  for (const Owned& o : owned) {
    ref.push_back({std::vector<double>(o.p.begin(), o.p.end()),
                   std::vector<double>(o.p.size(), 0.0),
                   std::vector<double>(o.p.size(), 0.0), o.name == kWeight});
  }
  absl::StatusOr<TensorOptimizer> opt =
      TensorOptimizer::Create(c, Views(&owned));
  ASSERT_TRUE(opt.ok()) << opt.status();
  for (int64_t step = 0; step < 3; ++step) {
    SetGrads(step, &owned);
    double sq = 0;
    for (const Owned& o : owned) {
      for (float g : o.g) sq += static_cast<double>(g) * g;
    }
    ASSERT_GT(std::sqrt(sq), 1.0);  // clipping is exercised
    ASSERT_TRUE(opt->Step(step).ok());
    RefBertStep(c, step, owned, &ref);
    EXPECT_NEAR(opt->last_global_norm(), std::sqrt(sq), 1e-9);
    EXPECT_EQ(opt->last_learning_rate(), LearningRate(c, step));
    for (size_t t = 0; t < owned.size(); ++t) {
      for (size_t i = 0; i < owned[t].p.size(); ++i) {
        SCOPED_TRACE(testing::Message() << "step " << step << " "
                                        << owned[t].name << "[" << i << "]");
        EXPECT_NEAR(owned[t].p[i], ref[t].p[i], 1e-6);
        EXPECT_NEAR(owned[t].s[i], ref[t].m[i], 1e-7);
        EXPECT_NEAR(owned[t].s[owned[t].p.size() + i], ref[t].v[i], 1e-9);
      }
    }
  }
}

// Tensors larger than a part are updated in pieces on the compute threads:
// every bit as one StepSlice over each whole tensor in order.
TEST(TensorOptimizerTest, PiecesOnTwoThreadsGiveTheBitsOfOnePass) {
  struct RestoreThreads {
    int n;
    ~RestoreThreads() { omp_set_num_threads(n); }
  } restore{omp_get_max_threads()};
  omp_set_num_threads(2);
  // SGD twice: with momentum (one state slot) and without (none).
  for (const auto& [kind, momentum] :
       {std::pair{OptimizerKind::kAdamWeightDecay, 0.9},
        std::pair{OptimizerKind::kAdamW, 0.9},
        std::pair{OptimizerKind::kSgd, 0.9}, std::pair{OptimizerKind::kSgd, 0.0}}) {
    SCOPED_TRACE(testing::Message() << OptimizerKindName(kind) << " momentum "
                                    << momentum);
    OptimizerConfig c;
    c.kind = kind;
    c.learning_rate = 0.01;
    c.momentum = momentum;
    c.weight_decay = 0.01;
    std::vector<Owned> owned = {{kWeight, {}, {}, {}},
                                {kBias, {}, {}, {}},
                                {kLayerNorm, {}, {}, {}}};
    const size_t sizes[] = {150001, 70000, 5};
    for (size_t t = 0; t < owned.size(); ++t) {
      owned[t].p.resize(sizes[t]);
      for (size_t i = 0; i < sizes[t]; ++i) {
        owned[t].p[i] = std::sin(0.001 * static_cast<double>(i + 7 * t));
      }
      owned[t].g.assign(sizes[t], 0.0f);
      owned[t].s.assign(StateSlots(c) * sizes[t], 0.0f);
    }
    std::vector<Owned> ref = owned;
    absl::StatusOr<TensorOptimizer> opt =
        TensorOptimizer::Create(c, Views(&owned));
    ASSERT_TRUE(opt.ok()) << opt.status();
    for (int64_t step = 0; step < 3; ++step) {
      for (size_t t = 0; t < owned.size(); ++t) {
        for (size_t i = 0; i < sizes[t]; ++i) {
          owned[t].g[i] = static_cast<float>(
              std::cos(0.0037 * static_cast<double>(i) + step + t));
        }
        ref[t].g = owned[t].g;
      }
      ASSERT_TRUE(opt->Step(step).ok());
      double sq = 0;
      for (const Owned& o : ref) {
        sq += GradSquaredSum(o.g.data(), static_cast<int64_t>(o.g.size()));
      }
      const float scale = ClipScale(c, std::sqrt(sq));
      ASSERT_LT(scale, 1.0f);  // clipping is exercised
      for (Owned& o : ref) {
        Slice slice;
        slice.param = o.p.data();
        slice.grad = o.g.data();
        slice.state = o.s.empty() ? nullptr : o.s.data();
        slice.n = static_cast<int64_t>(o.p.size());
        slice.decay = UsesWeightDecay(o.name);
        ASSERT_TRUE(
            StepSlice(c, step, LearningRate(c, step), slice, scale).ok());
      }
      for (size_t t = 0; t < owned.size(); ++t) {
        ASSERT_EQ(0, std::memcmp(owned[t].p.data(), ref[t].p.data(),
                                 sizeof(float) * sizes[t]))
            << owned[t].name << " step " << step;
        ASSERT_EQ(owned[t].s, ref[t].s) << owned[t].name << " state, step "
                                        << step;
      }
    }
  }
}

TEST(TensorOptimizerTest, FirstWarmupStepUpdatesMomentsButNotParams) {
  OptimizerConfig c;
  c.warmup_steps = 10;
  c.total_steps = 100;
  std::vector<Owned> owned = MakeTensors(c);
  const std::vector<float> before = owned[0].p;
  absl::StatusOr<TensorOptimizer> opt =
      TensorOptimizer::Create(c, Views(&owned));
  ASSERT_TRUE(opt.ok());
  SetGrads(0, &owned);
  ASSERT_TRUE(opt->Step(0).ok());
  EXPECT_EQ(opt->last_learning_rate(), 0.0f);
  EXPECT_EQ(owned[0].p, before);   // lr 0 at step 0 (BERT)
  EXPECT_NE(owned[0].s[0], 0.0f);  // m moved
}

TEST(TensorOptimizerTest, LambEqualsTwoPhaseKernelsPerTensor) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kLamb;
  c.learning_rate = 0.01;
  std::vector<Owned> owned = MakeTensors(c);
  std::vector<Owned> manual = MakeTensors(c);
  absl::StatusOr<TensorOptimizer> opt =
      TensorOptimizer::Create(c, Views(&owned));
  ASSERT_TRUE(opt.ok());
  for (int64_t step = 0; step < 3; ++step) {
    SetGrads(step, &owned);
    SetGrads(step, &manual);
    ASSERT_TRUE(opt->Step(step).ok());
    double sq = 0;
    for (const Owned& o : manual) sq += GradSquaredSum(o.g.data(), o.g.size());
    const float scale = ClipScale(c, std::sqrt(sq));
    for (Owned& o : manual) {
      Slice s{o.p.data(), o.g.data(), o.s.data(),
              static_cast<int64_t>(o.p.size()), UsesWeightDecay(o.name)};
      std::vector<float> u(o.p.size());
      const PartialNorms norms = ComputeUpdate(c, step, s, scale, u.data());
      ApplyUpdate(c, LearningRate(c, step), s, u.data(),
                  TrustRatio(c, s.decay, norms));
    }
  }
  for (size_t t = 0; t < owned.size(); ++t) {
    EXPECT_EQ(owned[t].p, manual[t].p) << owned[t].name;
    EXPECT_EQ(owned[t].s, manual[t].s) << owned[t].name;
  }
}

// A bad gradient anywhere refuses the whole step, before any write.
void ExpectRejected(OptimizerKind kind, int bad_tensor, float bad_value) {
  OptimizerConfig c;
  c.kind = kind;
  std::vector<Owned> owned = MakeTensors(c);
  absl::StatusOr<TensorOptimizer> opt =
      TensorOptimizer::Create(c, Views(&owned));
  ASSERT_TRUE(opt.ok());
  SetGrads(0, &owned);
  ASSERT_TRUE(opt->Step(0).ok());  // nonzero state to protect
  const double norm_before = opt->last_global_norm();
  SetGrads(1, &owned);
  owned[bad_tensor].g[1] = bad_value;
  const std::vector<Owned> before = owned;
  absl::Status s = opt->Step(1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr(owned[bad_tensor].name));
  EXPECT_THAT(std::string(s.message()), HasSubstr("NaN or Inf"));
  for (size_t t = 0; t < owned.size(); ++t) {
    EXPECT_EQ(owned[t].p, before[t].p) << owned[t].name;
    EXPECT_EQ(owned[t].s, before[t].s) << owned[t].name;
  }
  EXPECT_EQ(opt->last_global_norm(), norm_before);
}

TEST(TensorOptimizerTest, NanOrInfGradientChangesNothing) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (OptimizerKind kind :
       {OptimizerKind::kAdamWeightDecay, OptimizerKind::kAdamW,
        OptimizerKind::kLamb, OptimizerKind::kSgd}) {
    SCOPED_TRACE(OptimizerKindName(kind));
    ExpectRejected(kind, 2, nan);  // the last tensor: earlier ones untouched
    ExpectRejected(kind, 0, inf);
    ExpectRejected(kind, 1, -inf);
  }
}

TEST(TensorOptimizerTest, CreateRejectsBadInput) {
  OptimizerConfig c;
  std::vector<Owned> owned = MakeTensors(c);

  OptimizerConfig bad = c;
  bad.beta2 = 1.0;
  EXPECT_EQ(TensorOptimizer::Create(bad, Views(&owned)).status().code(),
            absl::StatusCode::kInvalidArgument);

  std::vector<NamedTensor> dup = Views(&owned);
  dup[2].name = dup[0].name;
  absl::Status s = TensorOptimizer::Create(c, dup).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("duplicate"));

  std::vector<NamedTensor> unnamed = Views(&owned);
  unnamed[1].name.clear();
  EXPECT_FALSE(TensorOptimizer::Create(c, unnamed).ok());

  std::vector<NamedTensor> no_state = Views(&owned);
  no_state[1].state = nullptr;
  s = TensorOptimizer::Create(c, no_state).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr(kBias));

  std::vector<NamedTensor> negative = Views(&owned);
  negative[0].n = -1;
  EXPECT_FALSE(TensorOptimizer::Create(c, negative).ok());

  // Plain SGD keeps no state: a null state buffer is fine there.
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::kSgd;
  sgd.momentum = 0;
  EXPECT_TRUE(TensorOptimizer::Create(sgd, no_state).ok());
}

TEST(TensorOptimizerTest, NegativeStepRejected) {
  OptimizerConfig c;
  std::vector<Owned> owned = MakeTensors(c);
  absl::StatusOr<TensorOptimizer> opt =
      TensorOptimizer::Create(c, Views(&owned));
  ASSERT_TRUE(opt.ok());
  EXPECT_EQ(opt->Step(-1).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorOptimizerTest, EmptyTensorListAndEmptyTensor) {
  OptimizerConfig c;
  absl::StatusOr<TensorOptimizer> none = TensorOptimizer::Create(c, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->Step(0).ok());
  absl::StatusOr<TensorOptimizer> empty =
      TensorOptimizer::Create(c, {{"x.weight", nullptr, nullptr, nullptr, 0}});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->Step(0).ok());
}

}  // namespace
}  // namespace optim
}  // namespace bertps

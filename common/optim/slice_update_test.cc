#include "common/optim/slice_update.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/optim/lr_schedule.h"
#include "common/optim/optimizer_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bertps {
namespace optim {
namespace {

// A tiny tensor and three steps of gradients used by the reference tests.
const std::vector<float> kP0 = {0.5f, -1.0f, 2.0f, 0.0f};
const std::vector<std::vector<float>> kGrads = {
    {0.1f, -0.2f, 0.3f, 0.05f},
    {-0.05f, 0.4f, 0.1f, 0.0f},
    {0.2f, 0.2f, -0.3f, 1e-3f},
};

OptimizerConfig Config(OptimizerKind kind, double lr) {
  OptimizerConfig c;
  c.kind = kind;
  c.learning_rate = lr;
  return c;  // warmup 0, total 0: constant lr
}

// ---- Naive double-precision references, written from the formulas. ----

struct RefState {
  std::vector<double> p, m, v;  // (n) each; m doubles as SGD's buffer
  explicit RefState(const std::vector<float>& p0)
      : p(p0.begin(), p0.end()), m(p0.size(), 0.0), v(p0.size(), 0.0) {}
};

double RefLr(const OptimizerConfig& c, int64_t step) {
  if (step < c.warmup_steps) {
    return c.learning_rate * step / c.warmup_steps;
  }
  if (c.total_steps == 0) return c.learning_rate;
  const double s = std::min<double>(step, c.total_steps);
  return c.learning_rate * (1.0 - s / c.total_steps);
}

// One step of `c.kind` on the whole tensor `r` with gradient g * scale.
void RefStep(const OptimizerConfig& c, int64_t step, bool decay, double scale,
             const std::vector<float>& grad, RefState* r) {
  const size_t n = r->p.size();
  const double lr = RefLr(c, step);
  const double wd = decay ? c.weight_decay : 0.0;
  const double t = step + 1;
  std::vector<double> u(n);
  switch (c.kind) {
    case OptimizerKind::kAdamWeightDecay:
      for (size_t i = 0; i < n; ++i) {
        const double g = grad[i] * scale;
        r->m[i] = c.beta1 * r->m[i] + (1 - c.beta1) * g;
        r->v[i] = c.beta2 * r->v[i] + (1 - c.beta2) * g * g;
        r->p[i] -=
            lr * (r->m[i] / (std::sqrt(r->v[i]) + c.epsilon) + wd * r->p[i]);
      }
      break;
    case OptimizerKind::kAdamW:
      for (size_t i = 0; i < n; ++i) {
        const double g = grad[i] * scale;
        r->p[i] *= 1 - lr * wd;
        r->m[i] = c.beta1 * r->m[i] + (1 - c.beta1) * g;
        r->v[i] = c.beta2 * r->v[i] + (1 - c.beta2) * g * g;
        const double mhat = r->m[i] / (1 - std::pow(c.beta1, t));
        const double vhat = r->v[i] / (1 - std::pow(c.beta2, t));
        r->p[i] -= lr * mhat / (std::sqrt(vhat) + c.epsilon);
      }
      break;
    case OptimizerKind::kLamb: {
      double wn = 0, un = 0;
      for (size_t i = 0; i < n; ++i) {
        const double g = grad[i] * scale;
        r->m[i] = c.beta1 * r->m[i] + (1 - c.beta1) * g;
        r->v[i] = c.beta2 * r->v[i] + (1 - c.beta2) * g * g;
        const double mhat = r->m[i] / (1 - std::pow(c.beta1, t));
        const double vhat = r->v[i] / (1 - std::pow(c.beta2, t));
        u[i] = mhat / (std::sqrt(vhat) + c.epsilon) + wd * r->p[i];
        wn += r->p[i] * r->p[i];
        un += u[i] * u[i];
      }
      const bool adapt = decay || !c.lamb_skip_adaptation_without_decay;
      const double ratio =
          adapt && wn > 0 && un > 0 ? std::sqrt(wn) / std::sqrt(un) : 1.0;
      for (size_t i = 0; i < n; ++i) r->p[i] -= lr * ratio * u[i];
      break;
    }
    case OptimizerKind::kSgd:
      for (size_t i = 0; i < n; ++i) {
        const double d = grad[i] * scale + wd * r->p[i];
        double step_dir = d;
        if (c.momentum > 0) {
          r->m[i] = c.momentum * r->m[i] + d;
          step_dir = c.nesterov ? d + c.momentum * r->m[i] : r->m[i];
        }
        r->p[i] -= lr * step_dir;
      }
      break;
  }
}

// ---- The implementation under test, driven over one or more slices. ----

// One slice with its own buffers, as a parameter-server shard holds it.
struct OwnedSlice {
  std::vector<float> p, g, s;
  Slice View(bool decay) {
    Slice sl;
    sl.param = p.data();
    sl.grad = g.data();
    sl.state = s.empty() ? nullptr : s.data();
    sl.n = static_cast<int64_t>(p.size());
    sl.decay = decay;
    return sl;
  }
};

// Cuts a tensor (p0) into slices at `cuts` (0 = c0 < c1 < ... = n).
std::vector<OwnedSlice> MakeSlices(const OptimizerConfig& c,
                                   const std::vector<float>& p0,
                                   const std::vector<int64_t>& cuts) {
  std::vector<OwnedSlice> slices;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    OwnedSlice s;
    s.p.assign(p0.begin() + cuts[i], p0.begin() + cuts[i + 1]);
    s.g.assign(s.p.size(), 0.0f);
    s.s.assign(StateSlots(c) * s.p.size(), 0.0f);
    slices.push_back(std::move(s));
  }
  return slices;
}

// One two-phase step over all slices of one tensor (LAMB norms combined).
void TwoPhaseStep(const OptimizerConfig& c, int64_t step, bool decay,
                  float scale, const std::vector<float>& grad,
                  const std::vector<int64_t>& cuts,
                  std::vector<OwnedSlice>* slices) {
  std::vector<std::vector<float>> updates;
  PartialNorms total;
  for (size_t i = 0; i < slices->size(); ++i) {
    OwnedSlice& s = (*slices)[i];
    s.g.assign(grad.begin() + cuts[i], grad.begin() + cuts[i + 1]);
    updates.emplace_back(s.p.size());
    total +=
        ComputeUpdate(c, step, s.View(decay), scale, updates.back().data());
  }
  const float ratio = TrustRatio(c, decay, total);
  for (size_t i = 0; i < slices->size(); ++i) {
    ApplyUpdate(c, LearningRate(c, step), (*slices)[i].View(decay),
                updates[i].data(), ratio);
  }
}

std::vector<float> Concat(const std::vector<OwnedSlice>& slices, int part,
                          int slots) {
  // part -1: params; 0..slots-1: that state slot.
  std::vector<float> out;
  for (const OwnedSlice& s : slices) {
    if (part < 0) {
      out.insert(out.end(), s.p.begin(), s.p.end());
    } else {
      const size_t n = s.p.size();
      out.insert(out.end(), s.s.begin() + part * n,
                 s.s.begin() + (part + 1) * n);
    }
  }
  return out;
}

// Runs the three kGrads steps through the implementation (one whole slice)
// and through the reference, and compares params and state.
void ExpectMatchesReference(const OptimizerConfig& c, bool decay, float scale,
                            double tol) {
  const std::vector<int64_t> whole = {0, static_cast<int64_t>(kP0.size())};
  std::vector<OwnedSlice> impl = MakeSlices(c, kP0, whole);
  RefState ref(kP0);
  for (int64_t step = 0; step < 3; ++step) {
    TwoPhaseStep(c, step, decay, scale, kGrads[step], whole, &impl);
    RefStep(c, step, decay, scale, kGrads[step], &ref);
    for (size_t i = 0; i < kP0.size(); ++i) {
      SCOPED_TRACE(testing::Message() << "step " << step << " element " << i);
      EXPECT_NEAR(impl[0].p[i], ref.p[i], tol);
      if (StateSlots(c) >= 1) {
        EXPECT_NEAR(impl[0].s[i], ref.m[i], tol);
      }
      if (StateSlots(c) >= 2) {
        EXPECT_NEAR(impl[0].s[kP0.size() + i], ref.v[i], tol * 1e-2);
      }
    }
  }
}

std::vector<float> RandomVector(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::vector<float> out(n);
  for (float& x : out) {
    x = lo + (hi - lo) * static_cast<float>(rng() >> 8) / float(1 << 24);
  }
  return out;
}

// ---- Hand-checked first steps. ----

TEST(AdamWeightDecayTest, FirstStepByHand) {
  // m = 0.1 g, v = 0.001 g^2, u = m / (sqrt(v) + 1e-6) + 0.01 p, no bias
  // correction: |u| is about 0.1/sqrt(0.001) = 3.162 for any nonzero g.
  OptimizerConfig c = Config(OptimizerKind::kAdamWeightDecay, 0.01);
  std::vector<float> p = {0.5f, -1.0f}, g = {0.1f, -0.2f}, s(4, 0.0f), u(2);
  Slice sl{p.data(), g.data(), s.data(), 2, /*decay=*/true};
  PartialNorms norms = ComputeUpdate(c, 0, sl, 1.0f, u.data());
  EXPECT_EQ(norms.param_sq, 0);  // only LAMB computes norms
  const double u0 = 0.01 / (std::sqrt(0.001 * 0.01) + 1e-6) + 0.01 * 0.5;
  const double u1 = -0.02 / (std::sqrt(0.001 * 0.04) + 1e-6) - 0.01;
  EXPECT_NEAR(u[0], u0, 1e-5);
  EXPECT_NEAR(u[1], u1, 1e-5);
  EXPECT_NEAR(u0, 3.16127 + 0.005, 1e-5);
  ApplyUpdate(c, LearningRate(c, 0), sl, u.data(), 1.0f);
  EXPECT_NEAR(p[0], 0.5 - 0.01 * u0, 1e-7);
  EXPECT_NEAR(p[1], -1.0 - 0.01 * u1, 1e-7);
  EXPECT_NEAR(s[0], 0.01, 1e-9);   // m
  EXPECT_NEAR(s[2], 1e-5, 1e-11);  // v
}

TEST(AdamWTest, FirstStepByHand) {
  // Bias correction makes the first Adam step lr * sign(g) (up to eps);
  // decoupled decay scales p by 1 - lr * wd first.
  OptimizerConfig c = Config(OptimizerKind::kAdamW, 0.01);
  std::vector<float> p = {0.5f, -1.0f}, g = {0.1f, -0.2f}, s(4, 0.0f), u(2);
  Slice sl{p.data(), g.data(), s.data(), 2, /*decay=*/true};
  ComputeUpdate(c, 0, sl, 1.0f, u.data());
  EXPECT_NEAR(u[0], 0.1 / (0.1 + 1e-6), 1e-6);
  EXPECT_NEAR(u[1], -0.2 / (0.2 + 1e-6), 1e-6);
  ApplyUpdate(c, LearningRate(c, 0), sl, u.data(), 1.0f);
  EXPECT_NEAR(p[0], 0.5 * (1 - 1e-4) - 0.01 * 0.1 / (0.1 + 1e-6), 1e-7);
  EXPECT_NEAR(p[1], -1.0 * (1 - 1e-4) + 0.01 * 0.2 / (0.2 + 1e-6), 1e-7);
}

TEST(LambTest, FirstStepByHand) {
  // u = sign(g) (up to eps) + wd p; ratio = ||p|| / ||u||.
  OptimizerConfig c = Config(OptimizerKind::kLamb, 0.01);
  std::vector<float> p = {3.0f, -4.0f}, g = {0.1f, -0.2f}, s(4, 0.0f), u(2);
  Slice sl{p.data(), g.data(), s.data(), 2, /*decay=*/true};
  const PartialNorms norms = ComputeUpdate(c, 0, sl, 1.0f, u.data());
  const double u0 = 0.1 / (0.1 + 1e-6) + 0.03;
  const double u1 = -0.2 / (0.2 + 1e-6) - 0.04;
  EXPECT_NEAR(norms.param_sq, 25.0, 1e-12);
  EXPECT_NEAR(norms.update_sq, u0 * u0 + u1 * u1, 1e-6);
  const float ratio = TrustRatio(c, true, norms);
  const double want_ratio = 5.0 / std::sqrt(u0 * u0 + u1 * u1);
  EXPECT_NEAR(ratio, want_ratio, 1e-6);
  ApplyUpdate(c, LearningRate(c, 0), sl, u.data(), ratio);
  EXPECT_NEAR(p[0], 3.0 - 0.01 * want_ratio * u0, 1e-6);
  EXPECT_NEAR(p[1], -4.0 - 0.01 * want_ratio * u1, 1e-6);
}

// ---- Three steps against the double references. ----

TEST(AdamWeightDecayTest, ThreeStepsMatchReference) {
  OptimizerConfig c = Config(OptimizerKind::kAdamWeightDecay, 0.01);
  ExpectMatchesReference(c, /*decay=*/true, 1.0f, 1e-6);
  ExpectMatchesReference(c, /*decay=*/false, 1.0f, 1e-6);
  ExpectMatchesReference(c, /*decay=*/true, 0.25f, 1e-6);  // clipped grads
}

TEST(AdamWeightDecayTest, FollowsScheduleWithZeroFirstStep) {
  OptimizerConfig c = Config(OptimizerKind::kAdamWeightDecay, 0.01);
  c.warmup_steps = 2;
  c.total_steps = 10;  // lr: 0, 0.005, 0.008
  ExpectMatchesReference(c, /*decay=*/true, 1.0f, 1e-6);
}

TEST(AdamWTest, ThreeStepsMatchReference) {
  OptimizerConfig c = Config(OptimizerKind::kAdamW, 0.01);
  ExpectMatchesReference(c, /*decay=*/true, 1.0f, 1e-6);
  ExpectMatchesReference(c, /*decay=*/false, 1.0f, 1e-6);
  ExpectMatchesReference(c, /*decay=*/true, 0.5f, 1e-6);
  c.warmup_steps = 1;
  c.total_steps = 4;
  ExpectMatchesReference(c, /*decay=*/true, 1.0f, 1e-6);
}

TEST(LambTest, ThreeStepsMatchReference) {
  OptimizerConfig c = Config(OptimizerKind::kLamb, 0.01);
  ExpectMatchesReference(c, /*decay=*/true, 1.0f, 1e-6);
  ExpectMatchesReference(c, /*decay=*/true, 0.3f, 1e-6);
  ExpectMatchesReference(c, /*decay=*/false, 1.0f, 1e-6);  // ratio 1
  c.lamb_skip_adaptation_without_decay = false;
  ExpectMatchesReference(c, /*decay=*/false, 1.0f, 1e-6);  // paper's form
  c.weight_decay = 0.1;
  ExpectMatchesReference(c, /*decay=*/true, 1.0f, 1e-6);
}

TEST(SgdTest, ThreeStepsMatchReference) {
  OptimizerConfig c = Config(OptimizerKind::kSgd, 0.1);
  ExpectMatchesReference(c, /*decay=*/true, 1.0f, 1e-6);
  ExpectMatchesReference(c, /*decay=*/false, 0.5f, 1e-6);
  c.nesterov = true;
  ExpectMatchesReference(c, /*decay=*/true, 1.0f, 1e-6);
  c.nesterov = false;
  c.momentum = 0;
  ExpectMatchesReference(c, /*decay=*/true, 1.0f, 1e-6);
}

// ---- PyTorch 1.13 parity. The constants were produced once with
// torch.optim.AdamW / torch.optim.SGD on the same data (kP0, kGrads; float32)
// and are pinned here; the test itself does not need Python. ----

std::vector<float> RunThreeSteps(const OptimizerConfig& c, bool decay) {
  const std::vector<int64_t> whole = {0, static_cast<int64_t>(kP0.size())};
  std::vector<OwnedSlice> impl = MakeSlices(c, kP0, whole);
  for (int64_t step = 0; step < 3; ++step) {
    TwoPhaseStep(c, step, decay, 1.0f, kGrads[step], whole, &impl);
  }
  return impl[0].p;
}

void ExpectNearAll(const std::vector<float>& got,
                   const std::vector<float>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
  }
}

TEST(PyTorchParityTest, AdamW) {
  OptimizerConfig c = Config(OptimizerKind::kAdamW, 0.01);
  ExpectNearAll(RunThreeSteps(c, true),
                {0.480607957f, -0.998555124f, 1.9802084f, -0.0220037345f},
                2e-7);
  ExpectNearAll(RunThreeSteps(c, false),
                {0.480755687f, -0.998853505f, 1.98080552f, -0.0220064055f},
                2e-7);
}

TEST(PyTorchParityTest, Sgd) {
  OptimizerConfig c = Config(OptimizerKind::kSgd, 0.1);
  c.weight_decay = 0.01;
  // Same float operation order as PyTorch's kernels: bit-exact.
  ExpectNearAll(RunThreeSteps(c, true),
                {0.45963037f, -1.03623068f, 1.91861355f, -0.0136310048f}, 0);
  c.nesterov = true;
  ExpectNearAll(RunThreeSteps(c, true),
                {0.437227309f, -1.06964636f, 1.91100466f, -0.0173335429f}, 0);
  c.nesterov = false;
  c.momentum = 0;
  ExpectNearAll(RunThreeSteps(c, true),
                {0.473516464f, -1.03700292f, 1.98407602f, -0.0050900057f}, 0);
}

// ---- Slices of a tensor give the result of the whole tensor. ----

// n > the kernels' chunk size, cut unevenly, with a one-element slice.
constexpr int64_t kBigN = 5000;
const std::vector<int64_t> kWhole = {0, kBigN};
const std::vector<int64_t> kThreeSlices = {0, 1777, 1778, kBigN};

void ExpectSlicesEqualWhole(const OptimizerConfig& c, bool decay, double tol) {
  const std::vector<float> p0 = RandomVector(kBigN, 1, -0.1f, 0.1f);
  std::vector<OwnedSlice> whole = MakeSlices(c, p0, kWhole);
  std::vector<OwnedSlice> parts = MakeSlices(c, p0, kThreeSlices);
  for (int64_t step = 0; step < 3; ++step) {
    const std::vector<float> g = RandomVector(kBigN, 100 + step, -1, 1);
    const float scale = step == 1 ? 0.37f : 1.0f;
    TwoPhaseStep(c, step, decay, scale, g, kWhole, &whole);
    TwoPhaseStep(c, step, decay, scale, g, kThreeSlices, &parts);
  }
  for (int part = -1; part < StateSlots(c); ++part) {
    const std::vector<float> got = Concat(parts, part, StateSlots(c));
    const std::vector<float> want = Concat(whole, part, StateSlots(c));
    ASSERT_EQ(got.size(), want.size());
    int mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (tol == 0) {
        mismatches += got[i] != want[i];
      } else {
        mismatches += !(std::abs(got[i] - want[i]) <=
                        tol * std::max(1.0f, std::abs(want[i])));
      }
    }
    EXPECT_EQ(mismatches, 0) << "part " << part;
  }
}

TEST(SlicesTest, LambSlicesEqualWholeTensor) {
  OptimizerConfig c = Config(OptimizerKind::kLamb, 0.01);
  ExpectSlicesEqualWhole(c, /*decay=*/true, 1e-7);
  c.lamb_skip_adaptation_without_decay = false;
  ExpectSlicesEqualWhole(c, /*decay=*/false, 1e-7);
}

TEST(SlicesTest, ElementwiseKindsAreBitExact) {
  for (OptimizerKind kind : {OptimizerKind::kAdamWeightDecay,
                             OptimizerKind::kAdamW, OptimizerKind::kSgd}) {
    SCOPED_TRACE(OptimizerKindName(kind));
    OptimizerConfig c = Config(kind, 0.01);
    c.nesterov = kind == OptimizerKind::kSgd;
    ExpectSlicesEqualWhole(c, /*decay=*/true, 0);
    ExpectSlicesEqualWhole(c, /*decay=*/false, 0);
  }
}

TEST(SlicesTest, LambTrustRatioUsesWholeTensorNorms) {
  // The same slice alone would get a different ratio: the combination of
  // partials is what makes slices agree.
  OptimizerConfig c = Config(OptimizerKind::kLamb, 0.01);
  std::vector<float> p = {1, 2, 30, 40}, g = {1, -1, 1, -1}, u(4);
  std::vector<float> s2(4, 0), s3(4, 0);
  Slice a{p.data(), g.data(), s2.data(), 2, true};
  Slice b{p.data() + 2, g.data() + 2, s3.data(), 2, true};
  PartialNorms pa = ComputeUpdate(c, 0, a, 1, u.data());
  PartialNorms pb = ComputeUpdate(c, 0, b, 1, u.data() + 2);
  PartialNorms total = pa;
  total += pb;
  EXPECT_NEAR(total.param_sq, 1 + 4 + 900 + 1600, 1e-9);
  EXPECT_NE(TrustRatio(c, true, pa), TrustRatio(c, true, total));
}

// ---- The fused path. ----

TEST(StepSliceTest, EqualsTwoPhaseBitForBit) {
  for (OptimizerKind kind : {OptimizerKind::kAdamWeightDecay,
                             OptimizerKind::kAdamW, OptimizerKind::kSgd}) {
    for (bool decay : {true, false}) {
      SCOPED_TRACE(OptimizerKindName(kind));
      OptimizerConfig c = Config(kind, 0.01);
      c.warmup_steps = 1;
      c.total_steps = 10;
      const std::vector<float> p0 = RandomVector(kBigN, 7, -1, 1);
      std::vector<OwnedSlice> two = MakeSlices(c, p0, kWhole);
      std::vector<OwnedSlice> fused = MakeSlices(c, p0, kWhole);
      // Steps 0 and 1 in place, step 2 out of place (param_out): the
      // source keeps step 1's values.
      std::vector<float> out(p0.size(), -7.0f), before;
      for (int64_t step = 0; step < 3; ++step) {
        const std::vector<float> g = RandomVector(kBigN, 50 + step, -1, 1);
        TwoPhaseStep(c, step, decay, 0.5f, g, kWhole, &two);
        fused[0].g = g;
        Slice view = fused[0].View(decay);
        if (step == 2) {
          before = fused[0].p;
          view.param_out = out.data();
        }
        ASSERT_TRUE(
            StepSlice(c, step, LearningRate(c, step), view, 0.5f).ok());
      }
      EXPECT_TRUE(two[0].p == out);
      EXPECT_TRUE(two[0].s == fused[0].s);
      EXPECT_TRUE(fused[0].p == before);
      EXPECT_FALSE(before == out);
    }
  }
}

TEST(StepSliceTest, RefusesLambAndChangesNothing) {
  OptimizerConfig c = Config(OptimizerKind::kLamb, 0.01);
  std::vector<float> p = {1, 2}, g = {1, 1}, s(4, 0);
  absl::Status st =
      StepSlice(c, 0, LearningRate(c, 0),
                Slice{p.data(), g.data(), s.data(), 2, true}, 1.0f);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(p, (std::vector<float>{1, 2}));
  EXPECT_EQ(s, std::vector<float>(4, 0));
}

TEST(StepSliceTest, EmptySliceIsNoOp) {
  OptimizerConfig c = Config(OptimizerKind::kAdamW, 0.01);
  Slice empty;
  EXPECT_TRUE(StepSlice(c, 0, LearningRate(c, 0), empty, 1.0f).ok());
  float u = 0;
  PartialNorms n = ComputeUpdate(c, 0, empty, 1.0f, &u);
  EXPECT_EQ(n.param_sq, 0);
  ApplyUpdate(c, LearningRate(c, 0), empty, &u, 1.0f);
  EXPECT_EQ(GradSquaredSum(nullptr, 0), 0);
  EXPECT_TRUE(AllFinite(nullptr, 0));
}

// ---- Clipping and the helpers. ----

TEST(ClipTest, GradSquaredSumAndFiniteness) {
  std::vector<float> g = {3, -4, 0.5f};
  EXPECT_DOUBLE_EQ(GradSquaredSum(g.data(), 3), 25.25);
  EXPECT_TRUE(AllFinite(g.data(), 3));
  const std::vector<float> big = RandomVector(kBigN, 3, -1, 1);
  double want = 0;
  for (float x : big) want += static_cast<double>(x) * x;
  EXPECT_NEAR(GradSquaredSum(big.data(), kBigN), want, 1e-9);
  g[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(std::isfinite(GradSquaredSum(g.data(), 3)));
  EXPECT_FALSE(AllFinite(g.data(), 3));
  g[1] = -std::numeric_limits<float>::infinity();
  EXPECT_FALSE(std::isfinite(GradSquaredSum(g.data(), 3)));
  EXPECT_FALSE(AllFinite(g.data(), 3));
  // Large but finite values do not overflow the double accumulation.
  std::vector<float> huge(1000, 3e38f);
  EXPECT_TRUE(std::isfinite(GradSquaredSum(huge.data(), 1000)));
}

TEST(ClipTest, VectorPassesCatchEveryPositionAndIgnoreAlignment) {
  // Inf or NaN at each position of a buffer (vector body and tail).
  for (int n : {1, 15, 16, 31, 32, 33, 100}) {
    for (int at = 0; at < n; ++at) {
      for (float bad : {std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN()}) {
        std::vector<float> g(n, 0.25f);
        g[at] = bad;
        EXPECT_FALSE(AllFinite(g.data(), n)) << n << " " << at;
        EXPECT_FALSE(std::isfinite(GradSquaredSum(g.data(), n)));
      }
    }
  }
  // The same values at another address give the same bits.
  const std::vector<float> v = RandomVector(1037, 5, -3, 3);
  const double want = GradSquaredSum(v.data(), 1037);
  for (int shift = 1; shift < 8; ++shift) {
    std::vector<float> moved(1037 + shift);
    std::copy(v.begin(), v.end(), moved.begin() + shift);
    EXPECT_EQ(GradSquaredSum(moved.data() + shift, 1037), want) << shift;
    EXPECT_TRUE(AllFinite(moved.data() + shift, 1037));
  }
}

TEST(ClipTest, CopyAllFiniteCopiesEveryByteAndFindsEveryBadValue) {
  // Sources at every byte alignment, destinations at every float alignment
  // within 32 bytes, sizes around the 32-element vector body, with and
  // without streaming stores.
  for (bool stream : {false, true}) {
    for (int n : {0, 1, 7, 31, 32, 33, 64, 100, 1037}) {
      const std::vector<float> v = RandomVector(std::max(n, 1), 11, -2, 2);
      for (int src_shift = 0; src_shift < 4; ++src_shift) {
        for (int dst_shift = 0; dst_shift < 8; ++dst_shift) {
          std::vector<char> src(4 * n + 4);
          std::memcpy(src.data() + src_shift, v.data(), 4 * n);
          std::vector<float> dst(n + 8, -7.0f);
          EXPECT_TRUE(CopyAllFinite(dst.data() + dst_shift,
                                    src.data() + src_shift, n, stream));
          EXPECT_EQ(std::memcmp(dst.data() + dst_shift, v.data(), 4 * n), 0)
              << n << " " << src_shift << " " << dst_shift << " " << stream;
          EXPECT_EQ(dst[n + dst_shift], -7.0f);  // nothing past the end
        }
      }
      for (int at = 0; at < n; at += std::max(1, n / 13)) {
        for (float bad : {std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()}) {
          std::vector<float> g(v.begin(), v.begin() + n);
          g[at] = bad;
          std::vector<char> src(4 * n + 1);
          std::memcpy(src.data() + 1, g.data(), 4 * n);
          std::vector<float> dst(n + 1);
          EXPECT_FALSE(CopyAllFinite(dst.data() + 1, src.data() + 1, n, stream))
              << n << " " << at << " " << stream;
          // Copied whole all the same.
          EXPECT_EQ(std::memcmp(dst.data() + 1, g.data(), 4 * n), 0);
        }
      }
    }
  }
}

TEST(ClipTest, ClipScaleIsClipByGlobalNorm) {
  OptimizerConfig c;
  c.clip_norm = 1.0;
  EXPECT_EQ(ClipScale(c, 0.0), 1.0f);
  EXPECT_EQ(ClipScale(c, 0.5), 1.0f);
  EXPECT_EQ(ClipScale(c, 1.0), 1.0f);
  EXPECT_FLOAT_EQ(ClipScale(c, 4.0), 0.25f);
  c.clip_norm = 2.5;
  EXPECT_EQ(ClipScale(c, 2.0), 1.0f);
  EXPECT_FLOAT_EQ(ClipScale(c, 10.0), 0.25f);
  c.clip_norm = 0;  // off
  EXPECT_EQ(ClipScale(c, 1e9), 1.0f);
  c.clip_norm = -1;  // off
  EXPECT_EQ(ClipScale(c, 1e9), 1.0f);
}

TEST(TrustRatioTest, ZeroNormsAndOtherKinds) {
  OptimizerConfig c = Config(OptimizerKind::kLamb, 0.01);
  EXPECT_FLOAT_EQ(TrustRatio(c, true, {9.0, 4.0}), 1.5f);
  EXPECT_EQ(TrustRatio(c, true, {0.0, 4.0}), 1.0f);  // e.g. zero-init bias
  EXPECT_EQ(TrustRatio(c, true, {9.0, 0.0}), 1.0f);
  EXPECT_EQ(TrustRatio(c, false, {9.0, 4.0}), 1.0f);  // skips adaptation
  c.lamb_skip_adaptation_without_decay = false;
  EXPECT_FLOAT_EQ(TrustRatio(c, false, {9.0, 4.0}), 1.5f);
  c.kind = OptimizerKind::kAdamW;
  EXPECT_EQ(TrustRatio(c, true, {9.0, 4.0}), 1.0f);
  EXPECT_TRUE(NeedsTrustRatio(OptimizerKind::kLamb));
  EXPECT_FALSE(NeedsTrustRatio(OptimizerKind::kAdamWeightDecay));
}

}  // namespace
}  // namespace optim
}  // namespace bertps

#include "common/model/bert.h"

#include <algorithm>
#include <cmath>

#include "common/model/batch_view.h"
#include "common/model/test_util.h"
#include "gtest/gtest.h"

namespace bertps {
namespace {

using testing::OwnedBatch;
using testing::PerturbedParams;
using testing::RandomBatch;
using testing::TinyTestConfig;

// Central differences in double precision over every parameter tensor (a
// sample of elements of the big ones). With h = 1e-5 the truncation error is
// O(h^2) ~ 1e-10 and rounding ~ 1e-16/h ~ 1e-11, so agreement to 1e-6
// relative (of the gradient's scale) leaves a wide margin while catching any
// wrong term.
void CheckGradients(BertTask task, Activation act, bool train) {
  BertConfig c = TinyTestConfig();
  c.hidden_act = act;
  kernels::MatmulEngine mm;
  auto model = *BertModel<double>::Create(c, task, 3, 7, 2, &mm);
  PerturbedParams(model->layout(), c, 11, model->params());
  OwnedBatch batch = RandomBatch(c, 3, 7, 2, 5);
  StepOptions opt;
  opt.train = train;
  opt.seed = 3;
  opt.step = 9;
  ASSERT_TRUE(model->Step(batch.View(), opt).ok());
  std::vector<double> analytic(model->grads(),
                               model->grads() + model->num_params());
  StepOptions fwd = opt;
  fwd.backward = false;
  auto loss_at = [&]() { return model->Step(batch.View(), fwd)->loss; };
  const double h = 1e-5;
  for (const ParamSpec& p : model->layout().tensors()) {
    const int64_t stride = p.size > 40 ? p.size / 40 + 1 : 1;
    double scale = 0;
    for (int64_t i = 0; i < p.size; ++i) {
      scale = std::max(scale, std::fabs(analytic[p.offset + i]));
    }
    ASSERT_GT(scale, 0) << p.name << " has an all-zero gradient";
    for (int64_t i = 0; i < p.size; i += stride) {
      double& w = model->params()[p.offset + i];
      const double saved = w;
      w = saved + h;
      const double up = loss_at();
      w = saved - h;
      const double down = loss_at();
      w = saved;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(analytic[p.offset + i], numeric, 1e-6 * scale + 1e-9)
          << p.name << "[" << i << "]";
    }
  }
}

TEST(BertGradients, PretrainErfGelu) {
  CheckGradients(BertTask::kPretrain, Activation::kGeluErf, false);
}
TEST(BertGradients, PretrainTanhGeluWithDropout) {
  CheckGradients(BertTask::kPretrain, Activation::kGeluTanh, true);
}
TEST(BertGradients, ClassifyWithDropout) {
  CheckGradients(BertTask::kClassify, Activation::kGeluErf, true);
}

// The float model (oneDNN kernels) against the double model (naive kernels).
void CheckFloatMatchesDouble(BertTask task) {
  BertConfig c = TinyTestConfig();
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_attention_heads = 4;
  kernels::MatmulEngine mm;
  auto md = *BertModel<double>::Create(c, task, 4, 9, 3, &mm);
  auto mf = *BertModel<float>::Create(c, task, 4, 9, 3, &mm);
  InitBertParams(md->layout(), c, 21, md->params());
  for (int64_t i = 0; i < md->num_params(); ++i) {
    md->params()[i] *= 5;
    mf->params()[i] = static_cast<float>(md->params()[i]);
  }
  OwnedBatch batch = RandomBatch(c, 4, 9, 3, 8);
  StepOptions opt;
  opt.train = true;
  opt.seed = 1;
  auto rd = md->Step(batch.View(), opt);
  auto rf = mf->Step(batch.View(), opt);
  ASSERT_TRUE(rd.ok() && rf.ok());
  EXPECT_NEAR(rf->loss, rd->loss, 1e-5 * std::fabs(rd->loss));
  // The key bias has an exactly-zero gradient (softmax is shift invariant),
  // so errors are relative to the tensor's norm or, for such tensors, to a
  // thousandth of the largest tensor's norm.
  double largest = 0;
  for (const ParamSpec& p : md->layout().tensors()) {
    double n2 = 0;
    for (int64_t i = 0; i < p.size; ++i) {
      n2 += md->grads()[p.offset + i] * md->grads()[p.offset + i];
    }
    largest = std::max(largest, std::sqrt(n2));
  }
  for (const ParamSpec& p : md->layout().tensors()) {
    double num = 0, den = 1e-6 * largest * largest;
    for (int64_t i = 0; i < p.size; ++i) {
      const double a = mf->grads()[p.offset + i], b = md->grads()[p.offset + i];
      num += (a - b) * (a - b);
      den += b * b;  // plus the floor above
    }
    EXPECT_LT(std::sqrt(num / den), 1e-4) << p.name;
  }
}

TEST(BertFloat, PretrainMatchesDoubleReference) {
  CheckFloatMatchesDouble(BertTask::kPretrain);
}
TEST(BertFloat, ClassifyMatchesDoubleReference) {
  CheckFloatMatchesDouble(BertTask::kClassify);
}

TEST(BertModel, RejectsBadBatches) {
  BertConfig c = TinyTestConfig();
  kernels::MatmulEngine mm;
  auto model = *BertModel<float>::Create(c, BertTask::kPretrain, 2, 6, 2, &mm);
  OwnedBatch good = RandomBatch(c, 2, 6, 2, 1);
  StepOptions opt;
  ASSERT_TRUE(model->Step(good.View(), opt).ok());
  auto expect_bad = [&](OwnedBatch bad, const char* what) {
    absl::StatusOr<StepResult> r = model->Step(bad.View(), opt);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(what), std::string::npos)
        << r.status();
  };
  OwnedBatch b1 = good;
  b1.ids[3] = 23;
  expect_bad(b1, "input_ids");
  OwnedBatch b2 = good;
  b2.pos[1] = 6;
  expect_bad(b2, "masked_lm_positions");
  OwnedBatch b3 = good;
  b3.mlm_w[0] = std::nanf("");
  expect_bad(b3, "masked_lm_weights");
  OwnedBatch b4 = good;
  b4.nsp[1] = 2;
  expect_bad(b4, "next_sentence_labels");
  OwnedBatch b5 = good;
  b5.seg[0] = 2;
  expect_bad(b5, "segment_ids");
  OwnedBatch b6 = RandomBatch(c, 3, 6, 2, 1);
  expect_bad(b6, "capacity");
}

TEST(BertModel, DropoutDependsOnlyOnGlobalExampleIndex) {
  // Examples 2..3 of a batch of 4 computed alone (example_offset = 2) give
  // the same per-example loss contributions as inside the whole batch.
  BertConfig c = TinyTestConfig();
  c.hidden_dropout_prob = 0.3;
  c.attention_probs_dropout_prob = 0.3;
  kernels::MatmulEngine mm;
  auto model = *BertModel<double>::Create(c, BertTask::kClassify, 4, 6, 1, &mm);
  InitBertParams(model->layout(), c, 2, model->params());
  OwnedBatch all = RandomBatch(c, 4, 6, 1, 3);
  StepOptions opt;
  opt.train = true;
  opt.seed = 77;
  opt.backward = false;
  auto whole = model->Step(all.View(), opt);
  ASSERT_TRUE(whole.ok());
  OwnedBatch tail = all;
  tail.b = 2;
  for (auto* v : {&tail.ids, &tail.mask, &tail.seg}) {
    v->erase(v->begin(), v->begin() + 2 * 6);
  }
  tail.labels.erase(tail.labels.begin(), tail.labels.begin() + 2);
  opt.example_offset = 2;
  auto part = model->Step(tail.View(), opt);
  ASSERT_TRUE(part.ok());
  for (int i = 0; i < 2 * 3; ++i) {
    EXPECT_DOUBLE_EQ(part->logits[i], whole->logits[2 * 3 + i]);
  }
}

// The hooks a data-parallel worker uses: parameter groups are asked for in
// forward order before they are read (an error ends the step), and the word
// embedding's gradient is final early except for the input ids' rows.
TEST(BertModel, ParameterAndGradientHooks) {
  for (BertTask task : {BertTask::kPretrain, BertTask::kClassify}) {
    BertConfig c = TinyTestConfig();
    kernels::MatmulEngine mm;
    auto model = *BertModel<double>::Create(c, task, 3, 7, 2, &mm);
    InitBertParams(model->layout(), c, 4, model->params());
    OwnedBatch batch = RandomBatch(c, 3, 7, 2, 8);
    const int word = model->layout().Index("bert.embeddings.word_embeddings.weight");
    const int64_t h = c.hidden_size;
    StepOptions opt;
    std::vector<int> groups;
    opt.before_params = [&](int g) {
      groups.push_back(g);
      return absl::OkStatus();
    };
    std::vector<double> early;
    std::vector<int64_t> rows;
    opt.on_grads_ready_except_rows = [&](int t, const std::vector<int64_t>& r) {
      EXPECT_EQ(t, word);
      rows = r;
      const double* g = model->grads() + model->layout().tensors()[t].offset;
      early.assign(g, g + model->layout().tensors()[t].size);
    };
    ASSERT_TRUE(model->Step(batch.View(), opt).ok());
    std::vector<int> want;
    for (int g = 0; g <= ParamGroupRest(c); ++g) want.push_back(g);
    EXPECT_EQ(groups, want);
    EXPECT_EQ(rows, DistinctInputIds(batch.View()));
    ASSERT_FALSE(rows.empty());
    const double* final_g = model->grads() + model->layout().tensors()[word].offset;
    int changed = 0;
    for (int64_t r = 0; r < c.vocab_size; ++r) {
      const bool input = std::binary_search(rows.begin(), rows.end(), r);
      for (int64_t k = 0; k < h; ++k) {
        if (!input) {
          EXPECT_EQ(early[r * h + k], final_g[r * h + k]) << r;
        } else if (early[r * h + k] != final_g[r * h + k]) {
          ++changed;
        }
      }
    }
    EXPECT_GT(changed, 0);
    // A failing group ends the step with its error.
    opt.before_params = [&](int g) {
      return g == ParamGroupOfLayer(0) ? absl::UnavailableError("gone")
                                       : absl::OkStatus();
    };
    auto r = model->Step(batch.View(), opt);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  }
}

// The estimate of what Create() allocates, without allocating: the arena it
// lays out, the parameters and their gradients.
TEST(BertMemory, EstimateMatchesWhatCreateAllocates) {
  auto tiny = PresetBertConfig("tiny");
  ASSERT_TRUE(tiny.ok());
  kernels::MatmulEngine mm;
  for (BertTask task : {BertTask::kPretrain, BertTask::kClassify}) {
    auto model = BertModel<float>::Create(*tiny, task, 4, 16, 3, &mm);
    ASSERT_TRUE(model.ok()) << model.status();
    const int64_t arena = (*model)->activation_bytes();
    const int64_t est = BertModel<float>::ActivationBytes(*tiny, task, 4, 16, 3);
    EXPECT_GE(est, arena - 64);
    EXPECT_LE(est, arena + 4 * (12 + 12) + 64);
    EXPECT_EQ(BertModel<float>::MemoryBytes(*tiny, task, 4, 16, 3),
              est + 8 * (*model)->num_params());
  }
  // batch 65536 x seq 128 with 20 predictions: the MLM logits alone are
  // 65536 * 20 * 30522 floats (160 GB); nothing is allocated to say so.
  EXPECT_GT(BertModel<float>::MemoryBytes(*tiny, BertTask::kPretrain, 65536,
                                          128, 20),
            int64_t{160} << 30);
}

// Gradient accumulation: micro-batches of 2 + 2 + 1 examples, each with
// the whole batch's denominators and its examples' dropout offsets, add up
// to the gradient and loss of the 5 examples in one step (double: exact to
// rounding), with dropout on.
TEST(BertAccumulation, MicroBatchesAddUpToTheWholeBatch) {
  for (BertTask task : {BertTask::kPretrain, BertTask::kClassify}) {
    const BertConfig c = TinyTestConfig();
    kernels::MatmulEngine mm;
    auto whole = *BertModel<double>::Create(c, task, 5, 7, 2, &mm);
    auto micro = *BertModel<double>::Create(c, task, 2, 7, 2, &mm);
    PerturbedParams(whole->layout(), c, 11, whole->params());
    std::copy(whole->params(), whole->params() + whole->num_params(),
              micro->params());
    OwnedBatch batch = RandomBatch(c, 5, 7, 2, 5);
    double wsum = 0;
    for (float w : batch.mlm_w) wsum += w;
    StepOptions opt;
    opt.train = true;
    opt.seed = 3;
    opt.step = 9;
    opt.example_offset = 10;
    opt.mlm_denominator = wsum + 1e-5;
    opt.example_denominator = 5;
    auto all = whole->Step(batch.View(), opt);
    ASSERT_TRUE(all.ok()) << all.status();
    double loss = 0;
    for (int64_t first : {0, 2, 4}) {
      StepOptions m = opt;
      m.example_offset = opt.example_offset + first;
      m.accumulate = first > 0;
      auto r = micro->Step(SliceOf(batch.View(), first, first == 4 ? 1 : 2), m);
      ASSERT_TRUE(r.ok()) << r.status();
      loss += r->loss;
    }
    EXPECT_NEAR(loss, all->loss, 1e-12 * std::fabs(all->loss));
    for (int64_t i = 0; i < whole->num_params(); ++i) {
      ASSERT_NEAR(micro->grads()[i], whole->grads()[i],
                  1e-12 + 1e-10 * std::fabs(whole->grads()[i]))
          << "parameter " << i;
    }
  }
}

}  // namespace
}  // namespace bertps

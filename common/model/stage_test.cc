// A BERT cut into pipeline stages, run micro-batch by micro-batch in the
// GPipe and 1F1B orders, gives the single-process model's loss and every
// gradient (the tied word embeddings summed over the first and last stage).
#include "common/model/stage.h"

#include <cmath>
#include <map>

#include "absl/strings/match.h"
#include "common/model/pipeline_schedule.h"
#include "common/model/test_util.h"
#include "gtest/gtest.h"

namespace bertps {
namespace {

using testing::OwnedBatch;
using testing::PerturbedParams;
using testing::RandomBatch;

BertConfig FourLayers() {
  BertConfig c = testing::TinyTestConfig();
  c.num_hidden_layers = 4;
  return c;
}

BertBatchView MicroBatch(const BertBatchView& v, int m, int mb) {
  BertBatchView o = v;
  o.batch = mb;
  const int64_t first = static_cast<int64_t>(m) * mb;
  o.input_ids += first * v.seq;
  o.input_mask += first * v.seq;
  o.segment_ids += first * v.seq;
  o.masked_lm_positions += first * v.preds;
  o.masked_lm_ids += first * v.preds;
  o.masked_lm_weights += first * v.preds;
  o.next_sentence_labels += first;
  o.label_ids += first;
  return o;
}

struct PipelineRun {
  std::vector<double> grads;  // model layout
  double loss = 0;
};

// Runs every stage's schedule, one op at a time, whenever the op's input
// (the previous stage's activation or the next stage's gradient) exists.
template <typename T>
PipelineRun RunPipeline(const BertConfig& c, BertTask task,
                        const std::vector<StageSpec>& specs,
                        PipelineScheduleKind kind, int M,
                        const OwnedBatch& batch, const std::vector<T>& params,
                        const StepOptions& base) {
  kernels::MatmulEngine mm;
  const int S = static_cast<int>(specs.size());
  const int mb = static_cast<int>(batch.b) / M;
  std::vector<std::unique_ptr<BertStage<T>>> stages;
  const ParamLayout layout = ParamLayout::ForBert(c, task);
  for (int s = 0; s < S; ++s) {
    auto st = BertStage<T>::Create(c, task, specs[s], mb, batch.s, batch.p,
                                   PipelineSlots(kind, s, S, M), &mm);
    EXPECT_TRUE(st.ok()) << st.status();
    for (int t : (*st)->tensors()) {
      const ParamSpec& p = layout.tensors()[t];
      std::copy(params.begin() + p.offset, params.begin() + p.offset + p.size,
                (*st)->params() + (*st)->local_offset(t));
    }
    (*st)->ZeroGrads();
    stages.push_back(std::move(*st));
  }
  std::map<std::pair<int, int>, std::vector<T>> acts, grads;  // (stage, m)
  std::vector<std::vector<PipelineOp>> ops(S);
  std::vector<size_t> next(S, 0);
  for (int s = 0; s < S; ++s) ops[s] = MakePipelineSchedule(kind, s, S, M);
  PipelineRun run;
  const BertBatchView view = batch.View();
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < S; ++s) {
      if (next[s] == ops[s].size()) continue;
      const PipelineOp op = ops[s][next[s]];
      BertStage<T>& st = *stages[s];
      const BertBatchView v = MicroBatch(view, op.micro_batch, mb);
      StepOptions o = base;
      o.example_offset = static_cast<int64_t>(op.micro_batch) * mb;
      const int64_t n = st.boundary_size(mb, batch.s);
      if (op.forward) {
        const T* in = nullptr;
        if (s > 0) {
          auto it = acts.find({s - 1, op.micro_batch});
          if (it == acts.end()) continue;
          in = it->second.data();
        }
        auto r = st.Forward(op.slot, v, o, in);
        EXPECT_TRUE(r.ok()) << r.status();
        if (!r.ok()) return run;
        run.loss += r->loss;
        if (s + 1 < S) {
          acts[{s, op.micro_batch}].assign(st.output(op.slot),
                                           st.output(op.slot) + n);
        }
      } else {
        const T* dout = nullptr;
        if (s + 1 < S) {
          auto it = grads.find({s + 1, op.micro_batch});
          if (it == grads.end()) continue;
          dout = it->second.data();
        }
        std::vector<T> din(n);
        absl::Status bst = st.Backward(op.slot, v, o, dout, din.data());
        EXPECT_TRUE(bst.ok()) << bst;
        if (!bst.ok()) return run;
        if (s > 0) grads[{s, op.micro_batch}] = std::move(din);
      }
      ++next[s];
      progress = true;
    }
  }
  for (int s = 0; s < S; ++s) {
    EXPECT_EQ(next[s], ops[s].size()) << "stage " << s << " stalled";
  }
  run.grads.assign(layout.total_size(), 0.0);
  for (const auto& st : stages) {
    for (int t : st->tensors()) {
      const ParamSpec& p = layout.tensors()[t];
      for (int64_t i = 0; i < p.size; ++i) {
        run.grads[p.offset + i] += st->grads()[st->local_offset(t) + i];
      }
    }
  }
  return run;
}

// Double: perturbed parameters (every gradient far from zero), agreement to
// rounding. Float: BERT's initialisation on a wider model, where the only
// differences are the summation orders of micro-batch vs whole-batch products.
template <typename T>
void CheckAgainstModel(BertTask task, int S, PipelineScheduleKind kind,
                       double tol) {
  const bool is_double = sizeof(T) == sizeof(double);
  BertConfig c = FourLayers();
  if (!is_double) {
    c.vocab_size = 300;
    c.hidden_size = 32;
    c.num_attention_heads = 4;
    c.intermediate_size = 128;
    c.max_position_embeddings = 16;
  }
  const int B = 8, M = 4;
  OwnedBatch batch = RandomBatch(c, B, 7, 3, 21);
  kernels::MatmulEngine mm;
  auto model = *BertModel<T>::Create(c, task, B, 7, 3, &mm);
  std::vector<T> params(model->num_params());
  if (is_double) {
    PerturbedParams(model->layout(), c, 5, params.data());
  } else {
    InitBertParams(model->layout(), c, 5, params.data());
  }
  std::copy(params.begin(), params.end(), model->params());
  StepOptions o;
  o.train = true;  // dropout masks must match too
  o.seed = 77;
  o.step = 3;
  double wsum = 0;
  for (float w : batch.mlm_w) wsum += w;
  o.mlm_denominator = wsum + 1e-5;
  o.example_denominator = B;
  auto ref = model->Step(batch.View(), o);
  ASSERT_TRUE(ref.ok()) << ref.status();

  auto specs = SplitBertStages(c, task, S, {});
  ASSERT_TRUE(specs.ok()) << specs.status();
  PipelineRun run = RunPipeline<T>(c, task, *specs, kind, M, batch, params, o);
  EXPECT_NEAR(run.loss, ref->loss, tol * std::max(1.0, std::fabs(ref->loss)));
  // Per tensor, relative to its largest gradient; the attention key biases
  // (zero in exact arithmetic, rounding noise here) within tol of the
  // largest gradient of the model, on both sides.
  double global = 0;
  for (int64_t i = 0; i < model->num_params(); ++i) {
    global = std::max(global, std::fabs(double(model->grads()[i])));
  }
  for (const ParamSpec& p : model->layout().tensors()) {
    double scale = 0, worst = 0, pipe_max = 0;
    for (int64_t i = 0; i < p.size; ++i) {
      const double g = model->grads()[p.offset + i];
      scale = std::max(scale, std::fabs(g));
      worst = std::max(worst, std::fabs(g - run.grads[p.offset + i]));
      pipe_max = std::max(pipe_max, std::fabs(double(run.grads[p.offset + i])));
    }
    if (absl::EndsWith(p.name, "attention.self.key.bias")) {
      EXPECT_LE(std::max(scale, pipe_max), tol * global) << p.name;
      continue;
    }
    ASSERT_GT(scale, 0) << p.name;
    EXPECT_LE(worst, tol * scale)
        << p.name << " S=" << S << " " << PipelineScheduleName(kind);
  }
}

TEST(StageTest, DoubleEqualsModelEveryScheduleAndSplit) {
  for (int S : {1, 2, 3, 4}) {
    for (auto k : {PipelineScheduleKind::kGPipe,
                   PipelineScheduleKind::kOneFOneB}) {
      CheckAgainstModel<double>(BertTask::kPretrain, S, k, 1e-12);
    }
  }
  CheckAgainstModel<double>(BertTask::kClassify, 3,
                            PipelineScheduleKind::kOneFOneB, 1e-12);
}

TEST(StageTest, FloatWithin1e5OfModel) {
  for (int S : {2, 3}) {
    for (auto k : {PipelineScheduleKind::kGPipe,
                   PipelineScheduleKind::kOneFOneB}) {
      CheckAgainstModel<float>(BertTask::kPretrain, S, k, 1e-5);
    }
  }
}

TEST(StageTest, TiedWordEmbeddingsOnFirstAndLastStage) {
  const BertConfig c = FourLayers();
  const ParamLayout l = ParamLayout::ForBert(c, BertTask::kPretrain);
  auto specs = *SplitBertStages(c, BertTask::kPretrain, 3, {1, 2, 1});
  const auto first = StageTensorIndices(l, c, BertTask::kPretrain, specs[0]);
  const auto mid = StageTensorIndices(l, c, BertTask::kPretrain, specs[1]);
  const auto last = StageTensorIndices(l, c, BertTask::kPretrain, specs[2]);
  EXPECT_EQ(first.size(), 5u + 16u);
  EXPECT_EQ(mid.size(), 32u);
  EXPECT_EQ(last.front(), 0);  // word embeddings (tied decoder)
  EXPECT_EQ(mid.front(), 5 + 16);
  // Every tensor on exactly one stage except the tied one on two.
  std::vector<int> count(l.tensors().size(), 0);
  for (const auto* v : {&first, &mid, &last}) {
    for (int t : *v) ++count[t];
  }
  for (size_t t = 0; t < count.size(); ++t) {
    EXPECT_EQ(count[t], t == 0 ? 2 : 1) << l.tensors()[t].name;
  }
  const auto cls = StageTensorIndices(
      ParamLayout::ForBert(c, BertTask::kClassify), c, BertTask::kClassify,
      specs[2]);
  EXPECT_NE(cls.front(), 0);  // no tied decoder when classifying
}

TEST(StageTest, SplitBalancedAndExplicit) {
  auto mini = *PresetBertConfig("mini");
  // The MLM decoder over 30522 words costs about 1.4 layers of BERT-mini:
  // the last stage gets fewer layers.
  auto two = *SplitBertStages(mini, BertTask::kPretrain, 2, {});
  EXPECT_EQ(two[0].layer_begin, 0);
  EXPECT_EQ(two[0].layer_end, 3);
  EXPECT_EQ(two[1].layer_end, 4);
  auto four = *SplitBertStages(mini, BertTask::kPretrain, 4, {});
  for (int s = 0; s < 4; ++s) EXPECT_EQ(four[s].layer_end, s + 1);
  auto ex = *SplitBertStages(mini, BertTask::kPretrain, 2, {1, 3});
  EXPECT_EQ(ex[0].layer_end, 1);
  EXPECT_EQ(ex[1].layer_begin, 1);
  EXPECT_FALSE(SplitBertStages(mini, BertTask::kPretrain, 5, {}).ok());
  EXPECT_FALSE(SplitBertStages(mini, BertTask::kPretrain, 2, {2, 1}).ok());
  EXPECT_FALSE(SplitBertStages(mini, BertTask::kPretrain, 2, {4, 0}).ok());
  EXPECT_FALSE(SplitBertStages(mini, BertTask::kPretrain, 2, {1}).ok());
}

TEST(StageTest, SchedulesRunEveryMicroBatchOnceAndBoundSlots) {
  for (auto k : {PipelineScheduleKind::kGPipe,
                 PipelineScheduleKind::kOneFOneB}) {
    for (int S : {2, 3}) {
      for (int M : {1, 2, 4, 8}) {
        for (int s = 0; s < S; ++s) {
          const auto ops = MakePipelineSchedule(k, s, S, M);
          ASSERT_EQ(ops.size(), 2u * M);
          std::vector<int> f(M, 0), b(M, 0);
          int in_flight = 0, peak = 0;
          std::vector<int> slot_of(PipelineSlots(k, s, S, M), -1);
          for (const PipelineOp& op : ops) {
            if (op.forward) {
              EXPECT_EQ(slot_of[op.slot], -1) << "slot reused while live";
              slot_of[op.slot] = op.micro_batch;
              ++f[op.micro_batch];
              peak = std::max(peak, ++in_flight);
            } else {
              EXPECT_EQ(f[op.micro_batch], 1) << "backward before forward";
              EXPECT_EQ(slot_of[op.slot], op.micro_batch);
              slot_of[op.slot] = -1;
              ++b[op.micro_batch];
              --in_flight;
            }
          }
          for (int i = 0; i < M; ++i) EXPECT_EQ(f[i] + b[i], 2);
          EXPECT_LE(peak, PipelineSlots(k, s, S, M));
        }
      }
    }
  }
  EXPECT_EQ(PipelineSlots(PipelineScheduleKind::kOneFOneB, 0, 3, 8), 3);
  EXPECT_EQ(PipelineSlots(PipelineScheduleKind::kGPipe, 0, 3, 8), 8);
  EXPECT_DOUBLE_EQ(TheoreticalBubble(2, 4), 0.2);
  EXPECT_FALSE(ParsePipelineSchedule("zigzag").ok());
}

TEST(StageTest, BadInputIsRefused) {
  const BertConfig c = FourLayers();
  kernels::MatmulEngine mm;
  StageSpec bad{1, 2, 0, 5};
  EXPECT_FALSE(BertStage<float>::Create(c, BertTask::kPretrain, bad, 2, 7, 3,
                                        1, &mm)
                   .ok());
  auto specs = *SplitBertStages(c, BertTask::kPretrain, 2, {});
  auto st = *BertStage<float>::Create(c, BertTask::kPretrain, specs[1], 2, 7,
                                      3, 1, &mm);
  OwnedBatch batch = RandomBatch(c, 2, 7, 3, 1);
  StepOptions o;
  EXPECT_FALSE(st->Forward(0, batch.View(), o, nullptr).ok());  // no input
  EXPECT_FALSE(st->Forward(3, batch.View(), o, nullptr).ok());  // bad slot
  std::vector<float> d(st->boundary_size(2, 7));
  EXPECT_FALSE(st->Backward(0, batch.View(), o, nullptr, d.data()).ok());
}

}  // namespace
}  // namespace bertps

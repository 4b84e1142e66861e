// Training-step benchmark of the C++ BERT: forward, backward, global-norm
// clipping and BERT's AdamWeightDecay on random data with dropout on.
// Prints one JSON line with the median step time and its parts.
//
//   model_bench --config tiny --batch 32 --seq 128 --preds 20 --threads 1
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "common/init.h"
#include "common/kernels/matmul.h"
#include "common/kernels/threads.h"
#include "common/model/bert.h"
#include "common/optim/optimizer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, config, "tiny", "Preset or config.json.");
ABSL_FLAG(int, batch, 32, "Batch size.");
ABSL_FLAG(int, seq, 128, "Sequence length.");
ABSL_FLAG(int, preds, 20, "Masked positions per sequence.");
ABSL_FLAG(int, threads, 1, "Compute threads.");
ABSL_FLAG(int, steps, 10, "Timed steps.");
ABSL_FLAG(int, warmup, 2, "Untimed steps first.");
ABSL_FLAG(std::string, precision, "fp32", "fp32 or bf16 products.");

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The machine's GEMM rate in this engine's precision and threads, measured
// now: the best of 5 runs of BERT-base's FFN product (4096 x 768 x 3072,
// B transposed as the model's weights are), operand rounding included.
double MeasuredGemmGflops(bertps::kernels::MatmulEngine* mm) {
  const bertps::kernels::GemmDims d{1, 4096, 3072, 768, false, true};
  std::vector<float> a(d.m * d.k, 0.5f), b(d.n * d.k, 0.25f), c(d.m * d.n);
  mm->Run(d, a.data(), b.data(), c.data());
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    mm->Run(d, a.data(), b.data(), c.data());
    const double s = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, d.flops() / s / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  bertps::InitProcess(argc, argv, "model_bench [flags]");
  using Clock = std::chrono::steady_clock;
  const int threads = absl::GetFlag(FLAGS_threads);
  bertps::kernels::SetNumThreads(threads);
  auto config = bertps::ResolveBertConfig(absl::GetFlag(FLAGS_config));
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    return 1;
  }
  const int b = absl::GetFlag(FLAGS_batch), s = absl::GetFlag(FLAGS_seq),
            p = absl::GetFlag(FLAGS_preds);
  bertps::kernels::Precision precision;
  if (!bertps::kernels::ParsePrecision(absl::GetFlag(FLAGS_precision),
                                       &precision)) {
    std::fprintf(stderr, "--precision must be fp32 or bf16\n");
    return 2;
  }
  bertps::kernels::MatmulEngine mm(precision);
  auto model = *bertps::BertModel<float>::Create(
      *config, bertps::BertTask::kPretrain, b, s, p, &mm);
  bertps::InitBertParams(model->layout(), *config, 1, model->params());
  bertps::optim::OptimizerConfig oc;
  std::vector<float> state(2 * model->num_params());
  std::vector<bertps::optim::NamedTensor> tensors;
  for (const auto& t : model->layout().tensors()) {
    tensors.push_back({t.name, model->params() + t.offset,
                       model->grads() + t.offset, state.data() + 2 * t.offset,
                       t.size});
  }
  auto opt = *bertps::optim::TensorOptimizer::Create(oc, tensors);

  std::mt19937 rng(3);
  std::vector<int32_t> ids(b * s), mask(b * s, 1), seg(b * s), pos(b * p),
      mlm_ids(b * p), nsp(b);
  std::vector<float> w(b * p, 1.0f);
  for (int i = 0; i < b * s; ++i) {
    ids[i] = rng() % config->vocab_size;
    seg[i] = (i % s) < s / 2 ? 0 : 1;
  }
  for (int i = 0; i < b * p; ++i) {
    pos[i] = 1 + (i % p) * (s - 2) / p;
    mlm_ids[i] = rng() % config->vocab_size;
  }
  for (int i = 0; i < b; ++i) nsp[i] = i % 2;
  bertps::BertBatchView v;
  v.batch = b;
  v.seq = s;
  v.preds = p;
  v.input_ids = ids.data();
  v.input_mask = mask.data();
  v.segment_ids = seg.data();
  v.masked_lm_positions = pos.data();
  v.masked_lm_ids = mlm_ids.data();
  v.masked_lm_weights = w.data();
  v.next_sentence_labels = nsp.data();

  std::vector<double> step_ms, fwd_ms, bwd_ms, opt_ms;
  int64_t step_flops = 0;
  const int total = absl::GetFlag(FLAGS_warmup) + absl::GetFlag(FLAGS_steps);
  for (int i = 0; i < total; ++i) {
    bertps::StepOptions so;
    so.train = true;
    so.seed = 7;
    so.step = i;
    so.backward = false;
    const int64_t f0 = mm.flops();
    auto t0 = Clock::now();
    auto r1 = model->Step(v, so);  // forward only, for the split
    auto t1 = Clock::now();
    so.backward = true;
    auto t2 = Clock::now();
    auto r2 = model->Step(v, so);  // forward + backward
    auto t3 = Clock::now();
    absl::Status st = opt.Step(i);
    auto t4 = Clock::now();
    if (!r1.ok() || !r2.ok() || !st.ok()) {
      std::fprintf(stderr, "step failed\n");
      return 1;
    }
    const int64_t fwd_flops = (mm.flops() - f0) / 1;  // forward + (fwd+bwd)
    if (i >= absl::GetFlag(FLAGS_warmup)) {
      const double f = std::chrono::duration<double, std::milli>(t1 - t0).count();
      const double fb = std::chrono::duration<double, std::milli>(t3 - t2).count();
      const double o = std::chrono::duration<double, std::milli>(t4 - t3).count();
      fwd_ms.push_back(f);
      bwd_ms.push_back(fb - f);
      opt_ms.push_back(o);
      step_ms.push_back(fb + o);
    }
    (void)fwd_flops;
    // FLOPs of one training step: those of the forward+backward call.
    const int64_t f_before = mm.flops();
    (void)f_before;
  }
  // Count the FLOPs of one forward+backward precisely.
  {
    bertps::StepOptions so;
    so.train = true;
    const int64_t f0 = mm.flops();
    (void)model->Step(v, so);
    step_flops = mm.flops() - f0;
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  const double med = Median(step_ms);
  nlohmann::ordered_json j;
  j["impl"] = "bertps";
  j["config"] = absl::GetFlag(FLAGS_config);
  j["threads"] = threads;
  j["precision"] = bertps::kernels::PrecisionName(mm.precision());
  j["bf16_hardware"] = bertps::kernels::Bf16Hardware();
  j["batch"] = b;
  j["seq"] = s;
  j["preds"] = p;
  j["params"] = model->num_params();
  j["step_ms_median"] = med;
  j["step_ms_min"] = *std::min_element(step_ms.begin(), step_ms.end());
  j["step_ms_max"] = *std::max_element(step_ms.begin(), step_ms.end());
  j["forward_ms_median"] = Median(fwd_ms);
  j["backward_ms_median"] = Median(bwd_ms);
  j["optimizer_ms_median"] = Median(opt_ms);
  j["step_gflop"] = step_flops / 1e9;
  j["gflops"] = step_flops / 1e9 / (med / 1e3);
  const double gemm = MeasuredGemmGflops(&mm);
  j["gemm_gflops_measured"] = gemm;
  j["pct_of_gemm_rate"] = 100.0 * step_flops / 1e9 / (med / 1e3) / gemm;
  j["peak_rss_mb"] = ru.ru_maxrss / 1024.0;
  j["activation_mb"] = model->activation_bytes() / 1048576.0;
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

// Micro-benchmark of the product shapes of a BERT training step.
//   bazel run //common/kernels:matmul_bench -- THREADS [fp32|bf16]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/kernels/matmul.h"
#include "common/kernels/threads.h"

using bertps::kernels::GemmDims;

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  bertps::kernels::SetNumThreads(threads);
  bertps::kernels::Precision precision = bertps::kernels::Precision::kFp32;
  if (argc > 2 && !bertps::kernels::ParsePrecision(argv[2], &precision)) {
    std::fprintf(stderr, "precision must be fp32 or bf16\n");
    return 2;
  }
  bertps::kernels::MatmulEngine engine(precision);
  std::printf("precision %s (bf16 hardware: %s)\n",
              bertps::kernels::PrecisionName(engine.precision()),
              bertps::kernels::Bf16Hardware().c_str());
  struct Shape { const char* name; GemmDims d; };
  std::vector<Shape> shapes = {
      {"base qkv fwd", {1, 4096, 2304, 768, false, true}},
      {"base ffn1 fwd", {1, 4096, 3072, 768, false, true}},
      {"base ffn2 dW", {1, 768, 3072, 4096, true, false}},
      {"base ffn2 dX", {1, 4096, 3072, 768, false, false}},
      {"base scores", {384, 128, 128, 64, false, true}},
      {"base ctx", {384, 128, 64, 128, false, false}},
      {"base dscores", {384, 128, 128, 64, false, true}},
      {"base dV", {384, 128, 64, 128, true, false}},
      {"tiny decoder fwd", {1, 640, 30522, 128, false, true}},
      {"tiny decoder dE", {1, 30522, 128, 640, true, false}},
      {"tiny decoder dX", {1, 640, 128, 30522, false, false}},
      {"tiny scores", {64, 128, 128, 64, false, true}},
  };
  for (const Shape& s : shapes) {
    const GemmDims& d = s.d;
    std::vector<float> a(d.batch * d.m * d.k, 0.5f), b(d.batch * d.k * d.n, 0.25f),
        c(d.batch * d.m * d.n);
    engine.Run(d, a.data(), b.data(), c.data());
    int reps = 0;
    auto t0 = std::chrono::steady_clock::now();
    double secs = 0;
    while (secs < 0.3) {
      engine.Run(d, a.data(), b.data(), c.data());
      ++reps;
      secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    std::printf("%-18s %8.2f ms  %6.1f GFLOP/s\n", s.name, 1e3 * secs / reps,
                d.flops() * reps / secs / 1e9);
  }
  return 0;
}

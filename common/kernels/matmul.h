// Matrix products for the BERT model: every GEMM goes through oneDNN.
//
//   C (batch, M, N) = alpha * op(A) (batch, M, K) · op(B) (batch, K, N) [+ C]
//
// Row-major storage. A is stored (batch, M, K), or (batch, K, M) when
// trans_a; B is stored (batch, K, N), or (batch, N, K) when trans_b. Batches
// are contiguous. `accumulate` adds into C instead of overwriting it.
//
// MatmulNaive is the reference: plain loops in any precision (the double
// instantiation backs the finite-difference checks of the model).
//
// Precision: an engine made for kBf16 rounds A and B to bfloat16 (bf16.h;
// nearest even) and multiplies them on the CPU's bf16 units (AMX tiles or
// AVX512-BF16 dot products, through oneDNN), accumulating and writing C in
// float: the mixed precision of docs/model.md. On a CPU without native bf16
// (or with ONEDNN_MAX_CPU_ISA set below it) the engine runs fp32 and says so
// in precision(); callers report that, they never mix precisions silently.
//
// Failures: a product oneDNN cannot run (out of memory: a primitive, its
// scratchpad or sgemm's packing buffer could not be allocated, as under a
// tight address-space limit) does not abort the process: the engine keeps
// the first failure in status(), leaves C as it was, and every later
// product does nothing until ClearStatus(). Callers check status() after a
// step and before they use or send what the products made.
//
// Thread-safety: MatmulEngine is thread-safe (its primitive cache is guarded;
// bf16 operands are rounded into buffers of the calling thread); products use
// the oneDNN/OpenMP threads set by SetNumThreads (threads.h).
#ifndef BERTPS_COMMON_KERNELS_MATMUL_H_
#define BERTPS_COMMON_KERNELS_MATMUL_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace bertps {
namespace kernels {

struct GemmDims {
  int64_t batch = 1;
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false;
  bool trans_b = false;
  double flops() const { return 2.0 * batch * m * n * k; }
};

enum class Precision { kFp32, kBf16 };

const char* PrecisionName(Precision p);  // "fp32", "bf16"
// "fp32"/"float32" or "bf16"/"bfloat16" (any case) -> *out and true; false
// for anything else.
bool ParsePrecision(const std::string& name, Precision* out);

// What oneDNN's bf16 products run on here, under ONEDNN_MAX_CPU_ISA: "amx"
// (AMX-BF16 tiles), "avx512_bf16", or "none" (no native bf16: fp32 instead).
std::string Bf16Hardware();

class MatmulEngine {
 public:
  explicit MatmulEngine(Precision requested = Precision::kFp32);
  ~MatmulEngine();
  MatmulEngine(const MatmulEngine&) = delete;
  MatmulEngine& operator=(const MatmulEngine&) = delete;

  void Run(const GemmDims& d, const float* a, const float* b, float* c,
           float alpha = 1.0f, bool accumulate = false);

  // The precision products run in: the requested one, or kFp32 where the CPU
  // has no native bf16.
  Precision precision() const { return precision_; }

  // The oneDNN implementation that runs product d (e.g. "brg:avx512_core_amx"
  // or "brg:avx512_core_bf16"; "sgemm" for fp32's plain 2-D products).
  std::string KernelName(const GemmDims& d, float alpha = 1.0f,
                         bool accumulate = false);

  // Floating-point operations of every product run so far (2*M*N*K each).
  int64_t flops() const { return flops_.load(std::memory_order_relaxed); }

  // OK, or the first product that failed (RESOURCE_EXHAUSTED for oneDNN's
  // out of memory, INTERNAL otherwise), naming its shape.
  absl::Status status() const ABSL_LOCKS_EXCLUDED(mu_);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  void ClearStatus() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Impl;
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool, bool,
                         float>;
  // Null (and status() set) when oneDNN cannot make the primitive.
  Impl* GetBatched(const GemmDims& d, float alpha, bool accumulate);
  Impl* MakeBatched(const Key& key, const GemmDims& d, float alpha,
                    bool accumulate) ABSL_LOCKS_EXCLUDED(mu_);
  void Fail(const GemmDims& d, int dnnl_status, const std::string& what)
      ABSL_LOCKS_EXCLUDED(mu_);

  struct Context;
  const Precision precision_;
  std::unique_ptr<Context> ctx_;
  std::atomic<int64_t> flops_{0};
  mutable absl::Mutex mu_;
  std::map<Key, std::unique_ptr<Impl>> cache_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> failed_{false};
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

template <typename T>
void MatmulNaive(const GemmDims& d, const T* a, const T* b, T* c, T alpha = 1,
                 bool accumulate = false);

// The model is written once for float (oneDNN) and double (naive reference,
// used by gradient checks); these overloads pick the kernel.
inline void Gemm(MatmulEngine* e, const GemmDims& d, const float* a,
                 const float* b, float* c, float alpha = 1.0f,
                 bool accumulate = false) {
  e->Run(d, a, b, c, alpha, accumulate);
}
inline void Gemm(MatmulEngine*, const GemmDims& d, const double* a,
                 const double* b, double* c, double alpha = 1.0,
                 bool accumulate = false) {
  MatmulNaive<double>(d, a, b, c, alpha, accumulate);
}

}  // namespace kernels
}  // namespace bertps

#endif  // BERTPS_COMMON_KERNELS_MATMUL_H_

#include "common/kernels/matmul.h"

#include <algorithm>
#include <cctype>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/kernels/bf16.h"
#include "glog/logging.h"
#include "oneapi/dnnl/dnnl.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace bertps {
namespace kernels {

struct MatmulEngine::Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

struct MatmulEngine::Impl {
  dnnl::matmul prim;
  dnnl::memory::desc a_md, b_md, c_md;
  std::string kernel;  // the implementation oneDNN chose
};

namespace {

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;

// Plain row-major 3-D descriptor of a (batch, rows, cols) operand whose
// storage is (batch, cols, rows) when `trans`.
dnnl::memory::desc Operand(int64_t batch, int64_t rows, int64_t cols,
                           bool trans, dt type = dt::f32) {
  dims shape = {batch, rows, cols};
  dims strides = trans ? dims{rows * cols, 1, rows}
                       : dims{rows * cols, cols, 1};
  return dnnl::memory::desc(shape, type, strides);
}

bool HasIsa(dnnl::cpu_isa have, dnnl_cpu_isa_t want) {
  return (static_cast<int>(have) & want) == want;
}

// The calling thread's bf16 copies of A and B (grown, never shrunk).
uint16_t* Bf16Scratch(int which, int64_t n) {
  thread_local std::vector<uint16_t> buf[2];
  if (static_cast<int64_t>(buf[which].size()) < n) buf[which].resize(n);
  return buf[which].data();
}

}  // namespace

const char* PrecisionName(Precision p) {
  return p == Precision::kBf16 ? "bf16" : "fp32";
}

bool ParsePrecision(const std::string& name, Precision* out) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (n == "fp32" || n == "float32") {
    *out = Precision::kFp32;
    return true;
  }
  if (n == "bf16" || n == "bfloat16") {
    *out = Precision::kBf16;
    return true;
  }
  return false;
}

std::string Bf16Hardware() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  if (HasIsa(isa, dnnl_cpu_isa_avx512_core_amx)) return "amx";
  if (HasIsa(isa, dnnl_cpu_isa_avx512_core_bf16)) return "avx512_bf16";
  return "none";
}

MatmulEngine::MatmulEngine(Precision requested)
    : precision_(requested == Precision::kBf16 && Bf16Hardware() != "none"
                     ? Precision::kBf16
                     : Precision::kFp32),
      ctx_(std::make_unique<Context>()) {}
MatmulEngine::~MatmulEngine() = default;

absl::Status MatmulEngine::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

void MatmulEngine::ClearStatus() {
  absl::MutexLock lock(&mu_);
  status_ = absl::OkStatus();
  failed_.store(false, std::memory_order_release);
}

void MatmulEngine::Fail(const GemmDims& d, int dnnl_status,
                        const std::string& what) {
  const std::string msg = absl::StrCat(
      "oneDNN could not run the product ", d.batch, "x", d.m, "x", d.n, "x",
      d.k, ": ", what);
  absl::MutexLock lock(&mu_);
  if (!status_.ok()) return;  // the first failure is the one reported
  status_ = dnnl_status == dnnl_out_of_memory
                ? absl::ResourceExhaustedError(msg)
                : absl::InternalError(msg);
  failed_.store(true, std::memory_order_release);
  LOG(ERROR) << msg;
}

MatmulEngine::Impl* MatmulEngine::GetBatched(const GemmDims& d, float alpha,
                                             bool accumulate) {
  Key key{d.batch, d.m, d.n, d.k, d.trans_a, d.trans_b, accumulate, alpha};
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second.get();
  }
  try {
    return MakeBatched(key, d, alpha, accumulate);
  } catch (const dnnl::error& e) {
    Fail(d, e.status, e.what());
  } catch (const std::bad_alloc&) {
    Fail(d, dnnl_out_of_memory, "out of memory (std::bad_alloc)");
  }
  return nullptr;
}

MatmulEngine::Impl* MatmulEngine::MakeBatched(const Key& key,
                                              const GemmDims& d, float alpha,
                                              bool accumulate) {
  absl::MutexLock lock(&mu_);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second.get();
  auto impl = std::make_unique<Impl>();
  const dt in = precision_ == Precision::kBf16 ? dt::bf16 : dt::f32;
  impl->a_md = Operand(d.batch, d.m, d.k, d.trans_a, in);
  impl->b_md = Operand(d.batch, d.k, d.n, d.trans_b, in);
  impl->c_md = Operand(d.batch, d.m, d.n, false);
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  dnnl::matmul::desc desc(impl->a_md, impl->b_md, impl->c_md);
  dnnl::matmul::primitive_desc pd(desc, attr, ctx_->engine);
  impl->prim = dnnl::matmul(pd);
  impl->kernel = pd.impl_info_str();
  VLOG(1) << "matmul " << d.batch << "x" << d.m << "x" << d.n << "x" << d.k
          << (d.trans_a ? " A^T" : "") << (d.trans_b ? " B^T" : "") << " "
          << PrecisionName(precision_) << ": " << pd.impl_info_str();
  Impl* raw = impl.get();
  cache_.emplace(key, std::move(impl));
  return raw;
}

std::string MatmulEngine::KernelName(const GemmDims& d, float alpha,
                                     bool accumulate) {
  if (precision_ == Precision::kFp32 && d.batch == 1) return "sgemm";
  Impl* impl = GetBatched(d, alpha, accumulate);
  return impl != nullptr ? impl->kernel : "unavailable";
}

void MatmulEngine::Run(const GemmDims& d, const float* a, const float* b,
                       float* c, float alpha, bool accumulate) {
  if (d.m == 0 || d.n == 0) return;
  if (failed()) return;  // a step with a failed product is not used
  flops_.fetch_add(static_cast<int64_t>(d.flops()), std::memory_order_relaxed);
  try {
    if (precision_ == Precision::kBf16) {
      const int64_t na = d.batch * d.m * d.k, nb = d.batch * d.k * d.n;
      uint16_t* a16 = Bf16Scratch(0, na);
      uint16_t* b16 = Bf16Scratch(1, nb);
      FloatToBf16(a, na, a16);
      FloatToBf16(b, nb, b16);
      Impl* impl = GetBatched(d, alpha, accumulate);
      if (impl == nullptr) return;
      dnnl::memory am(impl->a_md, ctx_->engine, a16);
      dnnl::memory bm(impl->b_md, ctx_->engine, b16);
      dnnl::memory cm(impl->c_md, ctx_->engine, c);
      impl->prim.execute(ctx_->stream, {{DNNL_ARG_SRC, am},
                                        {DNNL_ARG_WEIGHTS, bm},
                                        {DNNL_ARG_DST, cm}});
      ctx_->stream.wait();
      return;
    }
    if (d.batch == 1) {
      // Row-major BLAS-style GEMM: the fastest oneDNN path for plain 2-D
      // products (handles the transposes without copies).
      dnnl_status_t st = dnnl_sgemm(
          d.trans_a ? 'T' : 'N', d.trans_b ? 'T' : 'N', d.m, d.n, d.k, alpha,
          a, d.trans_a ? d.m : d.k, b, d.trans_b ? d.k : d.n,
          accumulate ? 1.0f : 0.0f, c, d.n);
      if (st != dnnl_success) {
        Fail(d, st, st == dnnl_out_of_memory
                        ? "dnnl_sgemm: out of memory"
                        : absl::StrCat("dnnl_sgemm: status ",
                                       static_cast<int>(st)));
      }
      return;
    }
    Impl* impl = GetBatched(d, alpha, accumulate);
    if (impl == nullptr) return;
    dnnl::memory am(impl->a_md, ctx_->engine, const_cast<float*>(a));
    dnnl::memory bm(impl->b_md, ctx_->engine, const_cast<float*>(b));
    dnnl::memory cm(impl->c_md, ctx_->engine, c);
    impl->prim.execute(ctx_->stream, {{DNNL_ARG_SRC, am},
                                      {DNNL_ARG_WEIGHTS, bm},
                                      {DNNL_ARG_DST, cm}});
    ctx_->stream.wait();
  } catch (const dnnl::error& e) {
    // A scratchpad or memory object oneDNN could not allocate.
    Fail(d, e.status, e.what());
  } catch (const std::bad_alloc&) {
    // The bf16 copies of the operands.
    Fail(d, dnnl_out_of_memory, "out of memory (std::bad_alloc)");
  }
}

template <typename T>
void MatmulNaive(const GemmDims& d, const T* a, const T* b, T* c, T alpha,
                 bool accumulate) {
  for (int64_t p = 0; p < d.batch; ++p) {
    const T* ap = a + p * d.m * d.k;
    const T* bp = b + p * d.k * d.n;
    T* cp = c + p * d.m * d.n;
    for (int64_t i = 0; i < d.m; ++i) {
      for (int64_t j = 0; j < d.n; ++j) {
        T acc = 0;
        for (int64_t l = 0; l < d.k; ++l) {
          T av = d.trans_a ? ap[l * d.m + i] : ap[i * d.k + l];
          T bv = d.trans_b ? bp[j * d.k + l] : bp[l * d.n + j];
          acc += av * bv;
        }
        cp[i * d.n + j] = alpha * acc + (accumulate ? cp[i * d.n + j] : T(0));
      }
    }
  }
}

template void MatmulNaive<float>(const GemmDims&, const float*, const float*,
                                 float*, float, bool);
template void MatmulNaive<double>(const GemmDims&, const double*,
                                  const double*, double*, double, bool);

}  // namespace kernels
}  // namespace bertps

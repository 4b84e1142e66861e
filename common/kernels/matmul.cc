#include "common/kernels/matmul.h"

#include <vector>

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
};

MatmulEngine::MatmulEngine() : ctx_(std::make_unique<Context>()) {}
MatmulEngine::~MatmulEngine() = default;

namespace {

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;

// Plain row-major 3-D descriptor of a (batch, rows, cols) operand whose
// storage is (batch, cols, rows) when `trans`.
dnnl::memory::desc Operand(int64_t batch, int64_t rows, int64_t cols,
                           bool trans) {
  dims shape = {batch, rows, cols};
  dims strides = trans ? dims{rows * cols, 1, rows}
                       : dims{rows * cols, cols, 1};
  return dnnl::memory::desc(shape, dt::f32, strides);
}

}  // namespace

MatmulEngine::Impl* MatmulEngine::GetBatched(const GemmDims& d, float alpha,
                                             bool accumulate) {
  Key key{d.batch, d.m, d.n, d.k, d.trans_a, d.trans_b, accumulate, alpha};
  absl::MutexLock lock(&mu_);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second.get();
  auto impl = std::make_unique<Impl>();
  impl->a_md = Operand(d.batch, d.m, d.k, d.trans_a);
  impl->b_md = Operand(d.batch, d.k, d.n, d.trans_b);
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
  Impl* raw = impl.get();
  cache_.emplace(key, std::move(impl));
  return raw;
}

void MatmulEngine::Run(const GemmDims& d, const float* a, const float* b,
                       float* c, float alpha, bool accumulate) {
  if (d.m == 0 || d.n == 0) return;
  flops_.fetch_add(static_cast<int64_t>(d.flops()), std::memory_order_relaxed);
  if (d.batch == 1) {
    // Row-major BLAS-style GEMM: the fastest oneDNN path for plain 2-D
    // products (handles the transposes without copies).
    dnnl_status_t st = dnnl_sgemm(
        d.trans_a ? 'T' : 'N', d.trans_b ? 'T' : 'N', d.m, d.n, d.k, alpha, a,
        d.trans_a ? d.m : d.k, b, d.trans_b ? d.k : d.n,
        accumulate ? 1.0f : 0.0f, c, d.n);
    CHECK_EQ(st, dnnl_success) << "dnnl_sgemm failed";
    return;
  }
  Impl* impl = GetBatched(d, alpha, accumulate);
  dnnl::memory am(impl->a_md, ctx_->engine, const_cast<float*>(a));
  dnnl::memory bm(impl->b_md, ctx_->engine, const_cast<float*>(b));
  dnnl::memory cm(impl->c_md, ctx_->engine, c);
  impl->prim.execute(ctx_->stream, {{DNNL_ARG_SRC, am},
                                    {DNNL_ARG_WEIGHTS, bm},
                                    {DNNL_ARG_DST, cm}});
  ctx_->stream.wait();
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

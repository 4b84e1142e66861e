// Multi-head self-attention core: forward against a naive per-head reference
// (with and without dropout on the probabilities, float through oneDNN and
// double through the naive GEMM), backward against central differences,
// padding respected, dropout masks independent of batch position.
//   B batch, S sequence, NH heads, D head size, H = NH * D.
#include "common/model/attention.h"

#include <cmath>
#include <vector>

#include "common/kernels/matmul.h"
#include "common/model/dropout.h"
#include "common/model/layer_test_util.h"
#include "gtest/gtest.h"

namespace bertps {
namespace {

using testing::Cast;
using testing::CheckGradient;
using testing::Dot;
using testing::ExpectAllClose;
using testing::MaxAbs;
using testing::RandomNormal;
using testing::ToDouble;

// Owns every buffer of one forward and backward pass.
template <typename T>
struct Buffers {
  explicit Buffers(const AttentionDims& d)
      : qkvt(3 * d.b * d.nh * d.s * d.d),
        probs(d.b * d.nh * d.s * d.s),
        scratch_probs(probs.size()),
        scratch_dprobs(probs.size()),
        ctxt(d.b * d.nh * d.s * d.d),
        dctxt(ctxt.size()),
        dqkvt(qkvt.size()),
        ctx(d.b * d.s * d.h()),
        dqkv(d.b * d.s * 3 * d.h()) {}
  std::vector<T> qkvt;            // (3, B, NH, S, D)
  std::vector<T> probs;           // (B, NH, S, S)
  std::vector<T> scratch_probs;   // (B, NH, S, S)
  std::vector<T> scratch_dprobs;  // (B, NH, S, S)
  std::vector<T> ctxt;            // (B, NH, S, D)
  std::vector<T> dctxt;           // (B, NH, S, D)
  std::vector<T> dqkvt;           // (3, B, NH, S, D)
  std::vector<T> ctx;             // (B, S, H)
  std::vector<T> dqkv;            // (B, S, 3H)

  void Forward(kernels::MatmulEngine* mm, const AttentionDims& d,
               const AttentionDropout& drop, const std::vector<T>& qkv,
               const std::vector<int32_t>& mask) {
    AttentionForward(mm, d, drop, qkv.data(), mask.data(), qkvt.data(),
                     probs.data(), scratch_probs.data(), ctxt.data(),
                     ctx.data());
  }
  void Backward(kernels::MatmulEngine* mm, const AttentionDims& d,
                const AttentionDropout& drop, const std::vector<T>& dctx) {
    AttentionBackward(mm, d, drop, dctx.data(), qkvt.data(), probs.data(),
                      scratch_probs.data(), scratch_dprobs.data(), dctxt.data(),
                      dqkvt.data(), dqkv.data());
  }
};

// The dropout keep mask of the probabilities (B, NH, S, S), scaled by
// 1 / (1 - p): row (b, h, i) of example example_offset + b.
std::vector<double> ProbsDropoutScale(const AttentionDims& d,
                                      const AttentionDropout& drop) {
  std::vector<double> m(d.b * d.nh * d.s * d.s, 1.0);
  if (drop.p > 0) {
    DropoutForward(drop.key, drop.p, d.b * d.nh * d.s, d.s, d.nh * d.s,
                   drop.example_offset, m.data(), m.data());
  }
  return m;
}

struct Ref {
  std::vector<double> probs;  // (B, NH, S, S) before dropout
  std::vector<double> ctx;    // (B, S, H)
};

// Per batch and head: p = softmax(q k^T / sqrt(D) + (1 - mask) * -10000),
// ctx = (p * keep / (1 - p_drop)) v, heads side by side in ctx.
Ref NaiveAttention(const AttentionDims& d, const AttentionDropout& drop,
                   const std::vector<double>& qkv,  // (B, S, 3H)
                   const std::vector<int32_t>& mask) {
  const int64_t h = d.h();
  const std::vector<double> keep = ProbsDropoutScale(d, drop);
  auto at = [&](int64_t b, int64_t s, int part, int64_t head, int64_t k) {
    return qkv[(b * d.s + s) * 3 * h + part * h + head * d.d + k];
  };
  Ref r;
  r.probs.assign(d.b * d.nh * d.s * d.s, 0.0);
  r.ctx.assign(d.b * d.s * h, 0.0);
  for (int64_t b = 0; b < d.b; ++b) {
    for (int64_t hd = 0; hd < d.nh; ++hd) {
      for (int64_t i = 0; i < d.s; ++i) {
        std::vector<double> sc(d.s);
        double mx = -1e300;
        for (int64_t j = 0; j < d.s; ++j) {
          double dot = 0;
          for (int64_t k = 0; k < d.d; ++k) {
            dot += at(b, i, 0, hd, k) * at(b, j, 1, hd, k);
          }
          sc[j] =
              dot / std::sqrt(double(d.d)) + (1 - mask[b * d.s + j]) * -10000.0;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (double& v : sc) sum += (v = std::exp(v - mx));
        const int64_t row = ((b * d.nh + hd) * d.s + i) * d.s;
        for (int64_t j = 0; j < d.s; ++j) {
          const double p = sc[j] / sum;
          r.probs[row + j] = p;
          for (int64_t k = 0; k < d.d; ++k) {
            r.ctx[(b * d.s + i) * h + hd * d.d + k] +=
                p * keep[row + j] * at(b, j, 2, hd, k);
          }
        }
      }
    }
  }
  return r;
}

// Example 0 full, 1 with two padded tokens, 2 with one, 3 with three.
std::vector<int32_t> TestMask(const AttentionDims& d) {
  std::vector<int32_t> m(d.b * d.s, 1);
  const int64_t padded[] = {0, 2, 1, 3};
  for (int64_t b = 0; b < d.b; ++b) {
    for (int64_t j = d.s - padded[b % 4]; j < d.s; ++j) m[b * d.s + j] = 0;
  }
  return m;
}

template <typename T>
void CheckForward(const AttentionDims& d, const AttentionDropout& drop,
                  double rtol) {
  kernels::MatmulEngine mm;
  const std::vector<T> qkv = Cast<T>(RandomNormal(d.b * d.s * 3 * d.h(), 1));
  const std::vector<int32_t> mask = TestMask(d);
  Buffers<T> buf(d);
  buf.Forward(&mm, d, drop, qkv, mask);
  const Ref ref = NaiveAttention(d, drop, ToDouble(qkv), mask);
  ExpectAllClose(buf.probs.data(), ref.probs, rtol, 1e-3, "probs");
  ExpectAllClose(buf.ctx.data(), ref.ctx, rtol, 1.0, "ctx");
  if (drop.p > 0) {
    // The dropped probabilities used for ctx.
    const std::vector<double> keep = ProbsDropoutScale(d, drop);
    std::vector<double> want(ref.probs.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = ref.probs[i] * keep[i];
    ExpectAllClose(buf.scratch_probs.data(), want, rtol, 1e-3, "dropped probs");
  }
}

const AttentionDims kDims{4, 6, 3, 5};
const AttentionDims kBigDims{3, 20, 4, 16};

TEST(AttentionForward, MatchesNaiveFloat) {
  CheckForward<float>(kDims, AttentionDropout{}, 1e-5);
  CheckForward<float>(kBigDims, AttentionDropout{}, 1e-5);
}
TEST(AttentionForward, MatchesNaiveDouble) {
  CheckForward<double>(kDims, AttentionDropout{}, 1e-12);
  CheckForward<double>(kBigDims, AttentionDropout{}, 1e-12);
}
TEST(AttentionForward, MatchesNaiveWithDropoutFloat) {
  CheckForward<float>(kDims, AttentionDropout{DropoutKey{7, 3, 16}, 0.3, 0},
                      1e-5);
  CheckForward<float>(kBigDims, AttentionDropout{DropoutKey{7, 3, 20}, 0.1, 17},
                      1e-5);
}
TEST(AttentionForward, MatchesNaiveWithDropoutDouble) {
  CheckForward<double>(kDims, AttentionDropout{DropoutKey{7, 3, 16}, 0.3, 0},
                       1e-12);
  CheckForward<double>(kBigDims,
                       AttentionDropout{DropoutKey{7, 3, 20}, 0.1, 17}, 1e-12);
}

// loss = sum(dctx * ctx(qkv)); dqkv = AttentionBackward(dctx). The dropout
// mask is a fixed function of the key, so the loss is smooth.
void CheckBackwardFd(const AttentionDropout& drop) {
  kernels::MatmulEngine mm;
  const AttentionDims d{3, 4, 2, 3};
  std::vector<double> qkv = RandomNormal(d.b * d.s * 3 * d.h(), 11);
  const std::vector<int32_t> mask = TestMask(d);
  const std::vector<double> dctx = RandomNormal(d.b * d.s * d.h(), 12);
  Buffers<double> buf(d);
  buf.Forward(&mm, d, drop, qkv, mask);
  buf.Backward(&mm, d, drop, dctx);
  const std::vector<double> analytic = buf.dqkv;
  Buffers<double> fwd(d);
  auto loss = [&]() {
    fwd.Forward(&mm, d, drop, qkv, mask);
    return Dot(dctx, fwd.ctx.data());
  };
  CheckGradient("dqkv", qkv.data(), analytic.data(), qkv.size(), loss, 1e-6);
}

TEST(AttentionBackward, MatchesFiniteDifferences) {
  CheckBackwardFd(AttentionDropout{});
}
TEST(AttentionBackward, MatchesFiniteDifferencesWithDropout) {
  CheckBackwardFd(AttentionDropout{DropoutKey{5, 8, 24}, 0.4, 3});
}

// The float backward (oneDNN) against the double one (naive GEMM).
TEST(AttentionBackward, FloatMatchesDouble) {
  for (const AttentionDropout& drop :
       {AttentionDropout{}, AttentionDropout{DropoutKey{1, 2, 3}, 0.2, 9}}) {
    kernels::MatmulEngine mm;
    const AttentionDims d = kBigDims;
    const std::vector<double> qkv =
        ToDouble(Cast<float>(RandomNormal(d.b * d.s * 3 * d.h(), 21)));
    const std::vector<double> dctx =
        ToDouble(Cast<float>(RandomNormal(d.b * d.s * d.h(), 22)));
    const std::vector<int32_t> mask = TestMask(d);
    Buffers<double> bd(d);
    bd.Forward(&mm, d, drop, qkv, mask);
    bd.Backward(&mm, d, drop, dctx);
    Buffers<float> bf(d);
    bf.Forward(&mm, d, drop, Cast<float>(qkv), mask);
    bf.Backward(&mm, d, drop, Cast<float>(dctx));
    // Judged against the largest gradient: entries come out of sums of
    // products of mixed sign.
    ExpectAllClose(bf.dqkv.data(), bd.dqkv, 1e-5, MaxAbs(bd.dqkv), "dqkv");
  }
}

// Changing the key and value of padded tokens changes no output (up to
// rounding: Eigen's vectorised exp rounds differently depending on a row's
// alignment, so two buffers can differ in the last bit), and their key and
// value gradients are zero (up to exp's underflow to subnormals).
template <typename T>
void CheckPadding(const AttentionDropout& drop, double tol) {
  const double grad_tol = 1e-30;
  kernels::MatmulEngine mm;
  const AttentionDims d = kDims;
  const int64_t h = d.h();
  std::vector<T> qkv = Cast<T>(RandomNormal(d.b * d.s * 3 * h, 31));
  const std::vector<int32_t> mask = TestMask(d);
  const std::vector<T> dctx = Cast<T>(RandomNormal(d.b * d.s * h, 32));
  Buffers<T> before(d);
  before.Forward(&mm, d, drop, qkv, mask);
  before.Backward(&mm, d, drop, dctx);
  int64_t padded = 0;
  for (int64_t t = 0; t < d.b * d.s; ++t) {
    if (mask[t]) continue;
    ++padded;
    for (int64_t k = h; k < 3 * h; ++k) qkv[t * 3 * h + k] += T(5);
    for (int64_t k = h; k < 3 * h; ++k) {
      EXPECT_NEAR(before.dqkv[t * 3 * h + k], 0.0, grad_tol)
          << "token " << t << " k/v element " << k - h;
    }
  }
  ASSERT_GT(padded, 0);
  Buffers<T> after(d);
  after.Forward(&mm, d, drop, qkv, mask);
  for (size_t i = 0; i < after.ctx.size(); ++i) {
    ASSERT_NEAR(after.ctx[i], before.ctx[i], tol) << "ctx[" << i << "]";
  }
}

TEST(AttentionForward, PaddedKeysIgnored) {
  CheckPadding<float>(AttentionDropout{}, 1e-6);
  CheckPadding<double>(AttentionDropout{}, 1e-14);
  CheckPadding<float>(AttentionDropout{DropoutKey{4, 4, 4}, 0.5, 0}, 1e-6);
  CheckPadding<double>(AttentionDropout{DropoutKey{4, 4, 4}, 0.5, 0}, 1e-14);
}

// Example e computed alone (example_offset = e) gives the rows it gets in
// the whole batch: forward and backward, with dropout.
TEST(AttentionForward, DropoutIndependentOfBatchPosition) {
  kernels::MatmulEngine mm;
  const AttentionDims d = kDims;
  const int64_t h = d.h(), row3 = d.s * 3 * h, row1 = d.s * h;
  const std::vector<double> qkv = RandomNormal(d.b * row3, 41);
  const std::vector<double> dctx = RandomNormal(d.b * row1, 42);
  const std::vector<int32_t> mask = TestMask(d);
  const AttentionDropout drop{DropoutKey{99, 1, 16}, 0.3, 10};
  Buffers<double> whole(d);
  whole.Forward(&mm, d, drop, qkv, mask);
  whole.Backward(&mm, d, drop, dctx);
  const AttentionDims one{1, d.s, d.nh, d.d};
  for (int64_t e = 0; e < d.b; ++e) {
    AttentionDropout de = drop;
    de.example_offset = drop.example_offset + e;
    const std::vector<double> q(qkv.begin() + e * row3,
                                qkv.begin() + (e + 1) * row3);
    const std::vector<double> g(dctx.begin() + e * row1,
                                dctx.begin() + (e + 1) * row1);
    const std::vector<int32_t> m(mask.begin() + e * d.s,
                                 mask.begin() + (e + 1) * d.s);
    Buffers<double> part(one);
    part.Forward(&mm, one, de, q, m);
    part.Backward(&mm, one, de, g);
    ExpectAllClose(part.ctx.data(),
                   std::vector<double>(whole.ctx.begin() + e * row1,
                                       whole.ctx.begin() + (e + 1) * row1),
                   1e-14, 1.0, "ctx of example " + std::to_string(e));
    ExpectAllClose(part.dqkv.data(),
                   std::vector<double>(whole.dqkv.begin() + e * row3,
                                       whole.dqkv.begin() + (e + 1) * row3),
                   1e-14, 1.0, "dqkv of example " + std::to_string(e));
  }
  // A different example offset gives a different result.
  AttentionDropout shifted = drop;
  shifted.example_offset += 1;
  Buffers<double> other(d);
  other.Forward(&mm, d, shifted, qkv, mask);
  double diff = 0;
  for (size_t i = 0; i < other.ctx.size(); ++i) {
    diff = std::max(diff, std::fabs(other.ctx[i] - whole.ctx[i]));
  }
  EXPECT_GT(diff, 1e-3);
}

}  // namespace
}  // namespace bertps

// Dense layer y = x W^T + b with W stored [out, in]: forward against naive
// loops (float through oneDNN, double through the naive GEMM), backward
// against central differences, accumulation of dx, dW and db.
//   N rows, IN inputs, OUT outputs.
#include "common/model/linear.h"

#include <cmath>
#include <vector>

#include "common/kernels/matmul.h"
#include "common/kernels/threads.h"
#include "common/model/layer_test_util.h"
#include "gtest/gtest.h"

namespace bertps {
namespace {

using testing::Cast;
using testing::CheckGradient;
using testing::Dot;
using testing::ExpectAllClose;
using testing::RandomNormal;
using testing::ToDouble;

struct Dims {
  int64_t n, in, out;
};

// y[i][o] = sum_k x[i][k] w[o][k] + b[o]; also the scale sum_k |x||w| + |b|
// of each output, against which a float result is judged.
void NaiveForward(const std::vector<double>& x,  // (N, IN)
                  const std::vector<double>& w,  // (OUT, IN)
                  const std::vector<double>* b,  // (OUT) or null
                  const Dims& d, std::vector<double>* y,
                  std::vector<double>* scale) {
  y->assign(d.n * d.out, 0.0);
  scale->assign(d.n * d.out, 0.0);
  for (int64_t i = 0; i < d.n; ++i) {
    for (int64_t o = 0; o < d.out; ++o) {
      double acc = b ? (*b)[o] : 0.0, mag = b ? std::fabs((*b)[o]) : 0.0;
      for (int64_t k = 0; k < d.in; ++k) {
        acc += x[i * d.in + k] * w[o * d.in + k];
        mag += std::fabs(x[i * d.in + k] * w[o * d.in + k]);
      }
      (*y)[i * d.out + o] = acc;
      (*scale)[i * d.out + o] = mag;
    }
  }
}

template <typename T>
void CheckForward(const Dims& d, bool bias, double rtol) {
  kernels::MatmulEngine mm;
  const std::vector<T> x = Cast<T>(RandomNormal(d.n * d.in, 1));
  const std::vector<T> w = Cast<T>(RandomNormal(d.out * d.in, 2, 0.3));
  const std::vector<T> b = Cast<T>(RandomNormal(d.out, 3));
  std::vector<T> y(d.n * d.out, T(99));
  LinearForward(&mm, x.data(), w.data(), bias ? b.data() : nullptr, d.n, d.in,
                d.out, y.data());
  std::vector<double> want, scale;
  const std::vector<double> bd = ToDouble(b);
  NaiveForward(ToDouble(x), ToDouble(w), bias ? &bd : nullptr, d, &want,
               &scale);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(y[i], want[i], rtol * scale[i])
        << "n=" << d.n << " in=" << d.in << " out=" << d.out << " bias=" << bias
        << " i=" << i;
  }
}

const Dims kShapes[] = {{5, 7, 6}, {1, 3, 2}, {33, 64, 48}, {17, 40, 130}};

TEST(LinearForward, MatchesNaiveFloat) {
  for (const Dims& d : kShapes) {
    CheckForward<float>(d, true, 1e-5);
    CheckForward<float>(d, false, 1e-5);
  }
}
TEST(LinearForward, MatchesNaiveDouble) {
  for (const Dims& d : kShapes) {
    CheckForward<double>(d, true, 1e-13);
    CheckForward<double>(d, false, 1e-13);
  }
}

// loss = sum(dy * y); dx, dW, db from LinearBackward(dy).
TEST(LinearBackward, MatchesFiniteDifferences) {
  kernels::MatmulEngine mm;
  const Dims d{4, 6, 5};
  std::vector<double> x = RandomNormal(d.n * d.in, 11);
  std::vector<double> w = RandomNormal(d.out * d.in, 12);
  std::vector<double> b = RandomNormal(d.out, 13);
  const std::vector<double> dy = RandomNormal(d.n * d.out, 14);
  std::vector<double> y(d.n * d.out);
  auto loss = [&]() {
    LinearForward(&mm, x.data(), w.data(), b.data(), d.n, d.in, d.out,
                  y.data());
    return Dot(dy, y.data());
  };
  std::vector<double> dx(d.n * d.in, 5.0), dw(d.out * d.in, 0.0),
      db(d.out, 0.0);
  LinearBackward(&mm, dy.data(), x.data(), w.data(), d.n, d.in, d.out,
                 dx.data(), /*accumulate_dx=*/false, dw.data(), db.data());
  CheckGradient("dx", x.data(), dx.data(), x.size(), loss, 1e-6);
  CheckGradient("dW", w.data(), dw.data(), w.size(), loss, 1e-6);
  CheckGradient("db", b.data(), db.data(), b.size(), loss, 1e-6);
}

// Float (oneDNN) backward against naive loops: dx = dy W, dW = dy^T x,
// db = column sums of dy; accumulation into dx (when asked), dW and db; null
// dx and db.
template <typename T>
void CheckBackward(const Dims& d, double rtol) {
  kernels::MatmulEngine mm;
  const std::vector<T> x = Cast<T>(RandomNormal(d.n * d.in, 21));
  const std::vector<T> w = Cast<T>(RandomNormal(d.out * d.in, 22, 0.3));
  const std::vector<T> dy = Cast<T>(RandomNormal(d.n * d.out, 23));
  const std::vector<T> dx0 = Cast<T>(RandomNormal(d.n * d.in, 24));
  const std::vector<T> dw0 = Cast<T>(RandomNormal(d.out * d.in, 25));
  const std::vector<T> db0 = Cast<T>(RandomNormal(d.out, 26));
  // Naive gradients and their magnitudes.
  std::vector<double> gx(d.n * d.in, 0), sx(d.n * d.in, 0);
  std::vector<double> gw(d.out * d.in, 0), sw(d.out * d.in, 0);
  std::vector<double> gb(d.out, 0), sb(d.out, 0);
  for (int64_t i = 0; i < d.n; ++i) {
    for (int64_t o = 0; o < d.out; ++o) {
      const double g = dy[i * d.out + o];
      gb[o] += g;
      sb[o] += std::fabs(g);
      for (int64_t k = 0; k < d.in; ++k) {
        gx[i * d.in + k] += g * w[o * d.in + k];
        sx[i * d.in + k] += std::fabs(g * w[o * d.in + k]);
        gw[o * d.in + k] += g * x[i * d.in + k];
        sw[o * d.in + k] += std::fabs(g * x[i * d.in + k]);
      }
    }
  }
  auto expect = [&](const std::vector<T>& got, const std::vector<T>* init,
                    const std::vector<double>& grad,
                    const std::vector<double>& mag, const char* what) {
    for (size_t i = 0; i < grad.size(); ++i) {
      const double base = init ? double((*init)[i]) : 0.0;
      const double tol = rtol * (mag[i] + std::fabs(base));
      ASSERT_NEAR(got[i], base + grad[i], tol)
          << what << "[" << i << "] n=" << d.n << " in=" << d.in
          << " out=" << d.out;
    }
  };
  for (bool acc_dx : {false, true}) {
    std::vector<T> dx = dx0, dw = dw0, db = db0;
    LinearBackward(&mm, dy.data(), x.data(), w.data(), d.n, d.in, d.out,
                   dx.data(), acc_dx, dw.data(), db.data());
    expect(dx, acc_dx ? &dx0 : nullptr, gx, sx, acc_dx ? "dx (acc)" : "dx");
    expect(dw, &dw0, gw, sw, "dW");
    expect(db, &db0, gb, sb, "db");
  }
  // dx and db may be null: dW alone.
  std::vector<T> dw = dw0;
  LinearBackward(&mm, dy.data(), x.data(), w.data(), d.n, d.in, d.out,
                 static_cast<T*>(nullptr), false, dw.data(),
                 static_cast<T*>(nullptr));
  expect(dw, &dw0, gw, sw, "dW (no dx, db)");
  // Twice in a row: dW and db hold the sum of both.
  std::vector<T> dx(d.n * d.in), dw2(d.out * d.in, T(0)), db2(d.out, T(0));
  for (int rep = 0; rep < 2; ++rep) {
    LinearBackward(&mm, dy.data(), x.data(), w.data(), d.n, d.in, d.out,
                   dx.data(), false, dw2.data(), db2.data());
  }
  std::vector<double> gw2 = gw, sw2 = sw, gb2 = gb, sb2 = sb;
  for (double& v : gw2) v *= 2;
  for (double& v : sw2) v *= 2;
  for (double& v : gb2) v *= 2;
  for (double& v : sb2) v *= 2;
  expect(dw2, nullptr, gw2, sw2, "dW twice");
  expect(db2, nullptr, gb2, sb2, "db twice");
}

TEST(LinearBackward, MatchesNaiveAndAccumulatesFloat) {
  for (const Dims& d : kShapes) CheckBackward<float>(d, 1e-5);
}
TEST(LinearBackward, MatchesNaiveAndAccumulatesDouble) {
  for (const Dims& d : kShapes) CheckBackward<double>(d, 1e-13);
}

// The bias gradient's column sums on the compute threads, for a narrow and a
// wide matrix (the MLM head's logits are 30,522 wide): every bit as the
// serial sum of the rows in order, on 1 and 2 threads.
TEST(AddColumnSums, GivesTheSerialBitsOnAnyThreads) {
  if (kernels::AvailableCpus() < 2) GTEST_SKIP() << "needs 2 CPUs";
  const int before = kernels::NumThreads();
  // 100 columns: one run (below the parallel size); 1,000: two runs in the
  // stack accumulator; 5,000: two in heap accumulators.
  for (int64_t out : {int64_t{100}, int64_t{1000}, int64_t{5000}}) {
    const int64_t n = 131;
    const std::vector<float> dy = Cast<float>(RandomNormal(n * out, 51));
    const std::vector<float> db0 = Cast<float>(RandomNormal(out, 52));
    std::vector<float> want(db0.size());
    for (int64_t j = 0; j < out; ++j) {
      float acc = 0;
      for (int64_t r = 0; r < n; ++r) acc += dy[r * out + j];
      want[j] = db0[j] + acc;
    }
    for (int threads : {1, 2}) {
      kernels::SetNumThreads(threads);
      std::vector<float> db = db0;
      AddColumnSums(dy.data(), n, out, db.data());
      EXPECT_EQ(db, want) << out << " columns, " << threads << " threads";
    }
  }
  kernels::SetNumThreads(before);
}

}  // namespace
}  // namespace bertps

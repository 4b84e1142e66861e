// BERT input embeddings: forward against a naive gather-and-sum, backward
// against central differences for all three tables, repeated ids summed,
// gradients added to the tables' existing values.
//   B batch, S sequence, H hidden; V words, P positions, TV token types.
#include "common/model/embedding.h"

#include <cmath>
#include <vector>

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

const int64_t kB = 3, kS = 5, kH = 4, kV = 11, kP = 7, kTV = 2;

// Word ids with repeats (within a row and across rows), types of both kinds.
const std::vector<int32_t> kIds = {3, 0, 3, 10, 3,  //
                                   5, 5, 2, 0,  0,  //
                                   3, 1, 9, 5,  0};
const std::vector<int32_t> kTypes = {0, 0, 0, 1, 1,  //
                                     0, 1, 1, 1, 1,  //
                                     0, 0, 0, 0, 0};

// out[b][s][:] = word[ids[b][s]] + position[s] + token_type[types[b][s]]
std::vector<double> NaiveForward(const std::vector<double>& word,    // (V, H)
                                 const std::vector<double>& pos,     // (P, H)
                                 const std::vector<double>& type) {  // (TV, H)
  std::vector<double> out(kB * kS * kH);  // (B, S, H)
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t s = 0; s < kS; ++s) {
      const int64_t r = b * kS + s;
      for (int64_t h = 0; h < kH; ++h) {
        out[r * kH + h] =
            word[kIds[r] * kH + h] + pos[s * kH + h] + type[kTypes[r] * kH + h];
      }
    }
  }
  return out;
}

template <typename T>
void CheckForward(double rtol) {
  const std::vector<T> word = Cast<T>(RandomNormal(kV * kH, 1));
  const std::vector<T> pos = Cast<T>(RandomNormal(kP * kH, 2));
  const std::vector<T> type = Cast<T>(RandomNormal(kTV * kH, 3));
  std::vector<T> out(kB * kS * kH, T(99));
  EmbeddingForward(kIds.data(), kTypes.data(), kB, kS, kH, word.data(),
                   pos.data(), type.data(), out.data());
  ExpectAllClose(out.data(),
                 NaiveForward(ToDouble(word), ToDouble(pos), ToDouble(type)),
                 rtol, 3.0, "out");
}

TEST(EmbeddingForward, MatchesNaiveFloat) { CheckForward<float>(1e-6); }
TEST(EmbeddingForward, MatchesNaiveDouble) { CheckForward<double>(1e-15); }

// loss = sum(dout * out); the tables' gradients from EmbeddingBackward(dout).
TEST(EmbeddingBackward, MatchesFiniteDifferences) {
  std::vector<double> word = RandomNormal(kV * kH, 11);
  std::vector<double> pos = RandomNormal(kP * kH, 12);
  std::vector<double> type = RandomNormal(kTV * kH, 13);
  const std::vector<double> dout = RandomNormal(kB * kS * kH, 14);
  std::vector<double> out(kB * kS * kH);
  auto loss = [&]() {
    EmbeddingForward(kIds.data(), kTypes.data(), kB, kS, kH, word.data(),
                     pos.data(), type.data(), out.data());
    return Dot(dout, out.data());
  };
  std::vector<double> dword(kV * kH, 0.0), dpos(kP * kH, 0.0),
      dtype(kTV * kH, 0.0);
  EmbeddingBackward(dout.data(), kIds.data(), kTypes.data(), kB, kS, kH,
                    dword.data(), dpos.data(), dtype.data());
  CheckGradient("dword", word.data(), dword.data(), word.size(), loss, 1e-5);
  CheckGradient("dposition", pos.data(), dpos.data(), pos.size(), loss, 1e-5);
  CheckGradient("dtoken_type", type.data(), dtype.data(), type.size(), loss,
                1e-5);
}

// Repeated ids sum their rows; the tables start from existing values (the
// gradient is added) and unused rows (ids 4, 6..8; positions >= S) keep them.
template <typename T>
void CheckScatter(double rtol) {
  const std::vector<T> dout = Cast<T>(RandomNormal(kB * kS * kH, 21));
  const std::vector<T> word0 = Cast<T>(RandomNormal(kV * kH, 22));
  const std::vector<T> pos0 = Cast<T>(RandomNormal(kP * kH, 23));
  const std::vector<T> type0 = Cast<T>(RandomNormal(kTV * kH, 24));
  std::vector<double> want_word = ToDouble(word0), want_pos = ToDouble(pos0),
                      want_type = ToDouble(type0);
  for (int64_t r = 0; r < kB * kS; ++r) {
    for (int64_t h = 0; h < kH; ++h) {
      const double g = dout[r * kH + h];
      want_word[kIds[r] * kH + h] += g;
      want_pos[(r % kS) * kH + h] += g;
      want_type[kTypes[r] * kH + h] += g;
    }
  }
  std::vector<T> dword = word0, dpos = pos0, dtype = type0;
  EmbeddingBackward(dout.data(), kIds.data(), kTypes.data(), kB, kS, kH,
                    dword.data(), dpos.data(), dtype.data());
  ExpectAllClose(dword.data(), want_word, rtol, 3.0, "dword");
  ExpectAllClose(dpos.data(), want_pos, rtol, 3.0, "dposition");
  ExpectAllClose(dtype.data(), want_type, rtol, 3.0, "dtoken_type");
  for (int32_t unused : {4, 6, 7, 8}) {
    for (int64_t h = 0; h < kH; ++h) {
      EXPECT_EQ(dword[unused * kH + h], word0[unused * kH + h]) << unused;
    }
  }
  for (int64_t p = kS; p < kP; ++p) {
    for (int64_t h = 0; h < kH; ++h) {
      EXPECT_EQ(dpos[p * kH + h], pos0[p * kH + h]) << p;
    }
  }
  // Id 3 appears four times: its row is the sum of those four dout rows.
  for (int64_t h = 0; h < kH; ++h) {
    const double sum = double(dout[0 * kH + h]) + dout[2 * kH + h] +
                       dout[4 * kH + h] + dout[10 * kH + h];
    EXPECT_NEAR(dword[3 * kH + h], word0[3 * kH + h] + sum, rtol * 10);
  }
}

TEST(EmbeddingBackward, ScatterAddsAndSumsRepeatsFloat) {
  CheckScatter<float>(1e-6);
}
TEST(EmbeddingBackward, ScatterAddsAndSumsRepeatsDouble) {
  CheckScatter<double>(1e-14);
}

// Word ids (v words, each used many times) and token types (tv) of `rows`
// positions, for the large batches below.
void LargeBatchIds(int64_t rows, int64_t v, int64_t tv,
                   std::vector<int32_t>* ids, std::vector<int32_t>* types) {
  ids->resize(rows);
  types->resize(rows);
  for (int64_t r = 0; r < rows; ++r) {
    (*ids)[r] = static_cast<int32_t>((r * 37 + 11) % v);
    (*types)[r] = static_cast<int32_t>((r / 7) % tv);
  }
}

// A bigger batch takes the parallel forward path; it agrees with the naive
// gather row by row.
TEST(EmbeddingForward, LargeBatchMatchesNaive) {
  const int64_t b = 40, s = 64, h = 32, v = 100, p = 64, tv = 2;
  std::vector<int32_t> ids, types;
  LargeBatchIds(b * s, v, tv, &ids, &types);
  const std::vector<float> word = Cast<float>(RandomNormal(v * h, 31));
  const std::vector<float> pos = Cast<float>(RandomNormal(p * h, 32));
  const std::vector<float> type = Cast<float>(RandomNormal(tv * h, 33));
  std::vector<float> out(b * s * h);
  EmbeddingForward(ids.data(), types.data(), b, s, h, word.data(), pos.data(),
                   type.data(), out.data());
  std::vector<double> want(b * s * h);
  for (int64_t r = 0; r < b * s; ++r) {
    for (int64_t k = 0; k < h; ++k) {
      want[r * h + k] = double(word[ids[r] * h + k]) + pos[(r % s) * h + k] +
                        type[types[r] * h + k];
    }
  }
  ExpectAllClose(out.data(), want, 1e-6, 3.0, "out");
}

// The backward of a large batch runs on the compute threads, split over the
// hidden columns (here 40: not a whole number of cache lines per thread):
// every bit as the serial scatter-add, rows in order, on 1 and 2 threads.
TEST(EmbeddingBackward, LargeBatchGivesTheSerialBitsOnAnyThreads) {
  if (kernels::AvailableCpus() < 2) GTEST_SKIP() << "needs 2 CPUs";
  const int before = kernels::NumThreads();
  const int64_t b = 40, s = 64, h = 40, v = 100, p = 64, tv = 2;
  std::vector<int32_t> ids, types;
  LargeBatchIds(b * s, v, tv, &ids, &types);
  const std::vector<float> dout = Cast<float>(RandomNormal(b * s * h, 41));
  const std::vector<float> word0 = Cast<float>(RandomNormal(v * h, 42));
  const std::vector<float> pos0 = Cast<float>(RandomNormal(p * h, 43));
  const std::vector<float> type0 = Cast<float>(RandomNormal(tv * h, 44));
  std::vector<float> want_word = word0, want_pos = pos0, want_type = type0;
  for (int64_t r = 0; r < b * s; ++r) {
    for (int64_t k = 0; k < h; ++k) {
      const float g = dout[r * h + k];
      want_word[ids[r] * h + k] += g;
      want_pos[(r % s) * h + k] += g;
      want_type[types[r] * h + k] += g;
    }
  }
  for (int threads : {1, 2}) {
    kernels::SetNumThreads(threads);
    std::vector<float> dword = word0, dpos = pos0, dtype = type0;
    EmbeddingBackward(dout.data(), ids.data(), types.data(), b, s, h,
                      dword.data(), dpos.data(), dtype.data());
    EXPECT_EQ(dword, want_word) << threads << " threads";
    EXPECT_EQ(dpos, want_pos) << threads << " threads";
    EXPECT_EQ(dtype, want_type) << threads << " threads";
  }
  kernels::SetNumThreads(before);
}

}  // namespace
}  // namespace bertps

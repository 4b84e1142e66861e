#include "common/ps/chunk_ref.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/io/half.h"
#include "gtest/gtest.h"

namespace bertps {
namespace ps {
namespace {

// A chunk whose payload `bytes` lies in pieces cut at `cuts` (increasing
// byte offsets).
ChunkRef Pieces(const std::string& bytes, const std::vector<size_t>& cuts) {
  ChunkRef c;
  size_t at = 0;
  for (size_t cut : cuts) {
    c.data.push_back(absl::string_view(bytes).substr(at, cut - at));
    at = cut;
  }
  c.data.push_back(absl::string_view(bytes).substr(at));
  c.data_bytes = bytes.size();
  return c;
}

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), 4 * v.size());
}

TEST(ChunkRefTest, ReadFiniteCopiesAcrossPiecesCutAnywhere) {
  std::vector<float> v(203);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5f * i - 17.25f;
  const std::string bytes = Bytes(v);
  for (bool stream : {false, true}) {
    // Two cuts at every pair of byte offsets in the first 40 bytes, one
    // inside a value, and one far in; b == a leaves an empty piece.
    for (size_t a = 1; a < 40; ++a) {
      for (size_t b : {a, a + 1, a + 3, a + 4, size_t{417}, size_t{800}}) {
        const ChunkRef c = Pieces(bytes, {a, b});
        ChunkRef::Reader r(c);
        std::vector<float> out(v.size(), -1.0f);
        // In two reads: the second starts inside a piece.
        ASSERT_TRUE(r.ReadFinite(out.data(), 5, stream));
        ASSERT_TRUE(r.ReadFinite(out.data() + 5, v.size() - 5, stream));
        ASSERT_EQ(std::memcmp(out.data(), v.data(), bytes.size()), 0)
            << a << " " << b << " " << stream;
      }
    }
  }
}

// bf16 values widened exactly, through pieces cut inside a value, in reads
// longer than the reader's block.
TEST(ChunkRefTest, ReadBf16WidensAcrossPiecesCutAnywhere) {
  std::vector<uint16_t> h(5000);
  std::vector<float> want(h.size());
  for (size_t i = 0; i < h.size(); ++i) {
    want[i] = io::Bf16ToF32(io::F32ToBf16(0.37f * i - 911.0f));
    h[i] = io::F32ToBf16(want[i]);
  }
  const std::string bytes(reinterpret_cast<const char*>(h.data()),
                          2 * h.size());
  for (size_t a : {size_t{1}, size_t{2}, size_t{3}, size_t{4097}}) {
    for (size_t b : {a, a + 1, size_t{4099}, size_t{9001}}) {
      if (b < a) continue;
      const ChunkRef c = Pieces(bytes, {a, b});
      ChunkRef::Reader r(c);
      std::vector<float> out(h.size(), -1.0f);
      r.ReadBf16(out.data(), 3);
      r.ReadBf16(out.data() + 3, static_cast<int64_t>(h.size()) - 3);
      ASSERT_EQ(out, want) << a << " " << b;
    }
  }
}

TEST(ChunkRefTest, ReadFiniteFindsABadValueSplitBetweenPieces) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    for (size_t at : {size_t{0}, size_t{9}, size_t{40}, size_t{99}}) {
      std::vector<float> v(100, 1.5f);
      v[at] = bad;
      const std::string bytes = Bytes(v);
      // The bad value whole in a piece, and split 1/3, 2/2, 3/1 between two.
      for (size_t split = 0; split < 4; ++split) {
        const size_t cut = 4 * at + split;
        const ChunkRef c = cut == 0 ? Pieces(bytes, {}) : Pieces(bytes, {cut});
        ChunkRef::Reader r(c);
        std::vector<float> out(v.size());
        EXPECT_FALSE(r.ReadFinite(out.data(), v.size(), /*stream=*/false))
            << at << " " << split;
        EXPECT_EQ(std::memcmp(out.data(), v.data(), bytes.size()), 0);
      }
      // Spread over three pieces: 1 + 2 + 1 bytes.
      const ChunkRef c = Pieces(bytes, {4 * at + 1, 4 * at + 3});
      ChunkRef::Reader r(c);
      std::vector<float> out(v.size());
      EXPECT_FALSE(r.ReadFinite(out.data(), v.size(), /*stream=*/true)) << at;
      EXPECT_EQ(std::memcmp(out.data(), v.data(), bytes.size()), 0);
    }
  }
}

}  // namespace
}  // namespace ps
}  // namespace bertps

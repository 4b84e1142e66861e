#include "common/tiled_buffer.h"

#include <cstdio>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace bertps {
namespace {

// The process's proportional set size: each page counted once however many
// times it is mapped (RSS counts a page once per mapping).
int64_t PssBytes() {
  FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
  if (f == nullptr) return -1;
  char line[256];
  int64_t kb = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    long long v = 0;
    if (std::sscanf(line, "Pss: %lld kB", &v) == 1) {
      kb = v;
      break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}

TEST(TiledBufferTest, ElementsOneTileApartAreTheSameMemory) {
  auto b = TiledBuffer::Create(1000000, 64 << 10);
  ASSERT_TRUE(b.ok()) << b.status();
  const int64_t tile = b->tile_elements();
  EXPECT_EQ(tile, (64 << 10) / 4);
  b->data()[5] = 3.5f;
  EXPECT_EQ(b->data()[5 + tile], 3.5f);
  EXPECT_EQ(b->data()[5 + 40 * tile], 3.5f);
  b->data()[7 + 10 * tile] = -2.0f;
  EXPECT_EQ(b->data()[7], -2.0f);
  // The last element is addressable (the length is not a tile multiple).
  b->data()[b->size() - 1] = 1.0f;
  EXPECT_EQ(b->data()[(b->size() - 1) % tile], 1.0f);
  // A copy across tile boundaries reads what it would from a real array
  // filled with the tile's pattern.
  for (int64_t i = 0; i < tile; ++i) b->data()[i] = static_cast<float>(i % 977);
  std::vector<float> out(3 * tile + 17);
  std::memcpy(out.data(), b->data() + tile / 2, out.size() * sizeof(float));
  for (size_t k = 0; k < out.size(); ++k) {
    ASSERT_EQ(out[k], static_cast<float>(((tile / 2 + k) % tile) % 977)) << k;
  }
}

TEST(TiledBufferTest, AGigabyteWrittenWholeHoldsOneTile) {
  const int64_t before = PssBytes();
  constexpr int64_t kElements = int64_t{1} << 28;  // 1 GiB of floats
  auto b = TiledBuffer::Create(kElements);
  ASSERT_TRUE(b.ok()) << b.status();
  std::vector<float> chunk(1 << 20, 0.25f);
  for (int64_t off = 0; off < kElements; off += chunk.size()) {
    std::memcpy(b->data() + off, chunk.data(), chunk.size() * sizeof(float));
  }
  EXPECT_EQ(b->data()[kElements - 1], 0.25f);
  const int64_t after = PssBytes();
  EXPECT_LT(after - before, int64_t{64} << 20) << before << " -> " << after;
  TiledBuffer moved = std::move(*b);
  EXPECT_EQ(moved.size(), kElements);
  EXPECT_EQ(b->data(), nullptr);
}

TEST(TiledBufferTest, BadSizeIsRefused) {
  EXPECT_EQ(TiledBuffer::Create(-1).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto empty = TiledBuffer::Create(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size(), 0);
}

}  // namespace
}  // namespace bertps

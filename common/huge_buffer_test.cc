#include "common/huge_buffer.h"

#include <cstdint>
#include <utility>

#include "gtest/gtest.h"

namespace bertps {
namespace {

// Any size holds what is written (2 MiB-aligned); empty holds nothing;
// moved, the storage goes with it.
TEST(HugeBuffer, HoldsWhatIsWrittenAndMoves) {
  HugeBuffer empty;
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.data(), nullptr);
  for (size_t n : {size_t{1}, size_t{1000}, size_t{3} << 20}) {
    HugeBuffer b(n);
    ASSERT_EQ(b.size(), n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (2 << 20), 0u);
    for (size_t i = 0; i < n; ++i) b.data()[i] = static_cast<float>(i % 977);
    HugeBuffer moved = std::move(b);
    EXPECT_EQ(moved.size(), n);
    for (size_t i = 0; i < n; i += 7) {
      ASSERT_EQ(moved.data()[i], static_cast<float>(i % 977)) << i;
    }
  }
}

}  // namespace
}  // namespace bertps

#include "common/io/crc32c.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace bertps {
namespace io {
namespace {

using internal::Crc32cExtendHardware;
using internal::Crc32cExtendPortable;
using internal::Crc32cHardwareAvailable;

uint32_t Portable(const std::string& s) {
  return Crc32cExtendPortable(0, s.data(), s.size());
}

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c("", 0), 0u);
  EXPECT_EQ(Crc32c("a", 1), 0xC1D04330u);
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  const std::string ones(32, '\xff');
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::string inc(32, '\0'), dec(32, '\0');
  for (int i = 0; i < 32; ++i) {
    inc[i] = static_cast<char>(i);
    dec[i] = static_cast<char>(31 - i);
  }
  EXPECT_EQ(Crc32c(inc.data(), inc.size()), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(dec.data(), dec.size()), 0x113FDB5Cu);
  // The same vectors through the table implementation.
  EXPECT_EQ(Portable("123456789"), 0xE3069283u);
  EXPECT_EQ(Portable(zeros), 0x8A9136AAu);
  EXPECT_EQ(Portable(ones), 0x62A8AB43u);
  EXPECT_EQ(Portable(inc), 0x46DD794Eu);
  EXPECT_EQ(Portable(dec), 0x113FDB5Cu);
}

TEST(Crc32cTest, ExtendEqualsWhole) {
  const std::string s = "hello, parameter server world";
  const uint32_t whole = Crc32c(s.data(), s.size());
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    const uint32_t head = Crc32c(s.data(), cut);
    EXPECT_EQ(Crc32cExtend(head, s.data() + cut, s.size() - cut), whole) << cut;
  }
}

TEST(Crc32cTest, HardwareMatchesTableOnRandomData) {
  if (!Crc32cHardwareAvailable()) GTEST_SKIP() << "no SSE4.2 on this CPU";
  std::mt19937_64 rng(42);
  std::vector<uint8_t> buf(70000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (int trial = 0; trial < 500; ++trial) {
    const size_t off = rng() % 64;
    const size_t len = trial < 100 ? trial : rng() % (buf.size() - off);
    const uint32_t seed = static_cast<uint32_t>(rng());
    ASSERT_EQ(Crc32cExtendHardware(seed, buf.data() + off, len),
              Crc32cExtendPortable(seed, buf.data() + off, len))
        << "off=" << off << " len=" << len;
  }
}

TEST(Crc32cTest, MaskRoundTripAndKnownValue) {
  std::mt19937 rng(7);
  for (int i = 0; i < 1000; ++i) {
    const uint32_t c = rng();
    EXPECT_EQ(UnmaskCrc(MaskCrc(c)), c);
    EXPECT_NE(MaskCrc(c), c);
  }
  // Rotate right by 15 then add the constant, computed by hand.
  EXPECT_EQ(MaskCrc(0x00008000u), 0x00000001u + 0xa282ead8u);
  EXPECT_EQ(MaskCrc(0x00000001u), 0x00020000u + 0xa282ead8u);
}

}  // namespace
}  // namespace io
}  // namespace bertps

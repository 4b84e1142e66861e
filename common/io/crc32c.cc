#include "common/io/crc32c.h"

#include <nmmintrin.h>

#include <array>
#include <cstring>

namespace bertps {
namespace io {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // Reflected Castagnoli polynomial.

// kTables[k][b]: CRC contribution of byte b followed by k zero bytes.
struct Tables {
  uint32_t t[8][256];
};

constexpr Tables MakeTables() {
  Tables tables{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int i = 0; i < 8; ++i) crc = (crc >> 1) ^ ((crc & 1) ? kPoly : 0);
    tables.t[0][b] = crc;
  }
  for (uint32_t b = 0; b < 256; ++b) {
    for (int k = 1; k < 8; ++k) {
      const uint32_t prev = tables.t[k - 1][b];
      tables.t[k][b] = (prev >> 8) ^ tables.t[0][prev & 0xff];
    }
  }
  return tables;
}

constexpr Tables kTables = MakeTables();

inline uint64_t LoadLe64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;  // x86-64 is little-endian.
}

using ExtendFn = uint32_t (*)(uint32_t, const void*, size_t);

ExtendFn ChooseImpl() {
  return internal::Crc32cHardwareAvailable() ? &internal::Crc32cExtendHardware
                                             : &internal::Crc32cExtendPortable;
}

}  // namespace

namespace internal {

bool Crc32cHardwareAvailable() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("sse4.2");
#else
  return false;
#endif
}

uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {
    const uint64_t v = LoadLe64(p) ^ c;
    c = kTables.t[7][v & 0xff] ^ kTables.t[6][(v >> 8) & 0xff] ^
        kTables.t[5][(v >> 16) & 0xff] ^ kTables.t[4][(v >> 24) & 0xff] ^
        kTables.t[3][(v >> 32) & 0xff] ^ kTables.t[2][(v >> 40) & 0xff] ^
        kTables.t[1][(v >> 48) & 0xff] ^ kTables.t[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ kTables.t[0][(c ^ *p++) & 0xff];
  return ~c;
}

__attribute__((target("sse4.2"))) uint32_t Crc32cExtendHardware(
    uint32_t crc, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint64_t c = static_cast<uint32_t>(~crc);
  while (n >= 8) {
    c = _mm_crc32_u64(c, LoadLe64(p));
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

}  // namespace internal

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  static const ExtendFn impl = ChooseImpl();
  return impl(crc, data, n);
}

}  // namespace io
}  // namespace bertps

// CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78), as used
// by TFRecord framing, plus TFRecord's CRC masking.
//
// The hardware path (SSE4.2 crc32 instruction) is chosen once at run time
// when the CPU supports it; otherwise a slicing-by-8 table is used. Both give
// identical results.
//
// Thread-safety: all functions are pure and thread-safe.
#ifndef BERTPS_COMMON_IO_CRC32C_H_
#define BERTPS_COMMON_IO_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace bertps {
namespace io {

// Returns the CRC-32C of `crc`'s message followed by data[0, n).
// `crc` is a finished CRC (Crc32c of the prefix); Crc32cExtend(0, d, n) ==
// Crc32c(d, n).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

// Returns the CRC-32C of data[0, n).
inline uint32_t Crc32c(const void* data, size_t n) {
  return Crc32cExtend(0, data, n);
}

// TFRecord stores masked CRCs: rotate right by 15 bits, add 0xa282ead8.
// (Computing the CRC of a string that contains embedded CRCs is then safe.)
inline uint32_t MaskCrc(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// Inverse of MaskCrc.
inline uint32_t UnmaskCrc(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

namespace internal {
// The two implementations, exposed for tests and benchmarks.
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n);
// Requires Crc32cHardwareAvailable().
uint32_t Crc32cExtendHardware(uint32_t crc, const void* data, size_t n);
bool Crc32cHardwareAvailable();
}  // namespace internal

}  // namespace io
}  // namespace bertps

#endif  // BERTPS_COMMON_IO_CRC32C_H_

// The TFRecord framing's sizes and little-endian fields (internal to the
// TFRecord readers and writers).
#ifndef BERTPS_COMMON_IO_TFRECORD_FRAMING_H_
#define BERTPS_COMMON_IO_TFRECORD_FRAMING_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace bertps {
namespace io {
namespace framing {

inline constexpr size_t kHeaderSize = 12;  // u64 length + u32 masked CRC.
inline constexpr size_t kFooterSize = 4;   // u32 masked CRC of the data.

inline void PutLe32(char* p, uint32_t v) { std::memcpy(p, &v, 4); }
inline void PutLe64(char* p, uint64_t v) { std::memcpy(p, &v, 8); }
inline uint32_t GetLe32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t GetLe64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace framing
}  // namespace io
}  // namespace bertps

#endif  // BERTPS_COMMON_IO_TFRECORD_FRAMING_H_

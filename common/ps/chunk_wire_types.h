// Protobuf's wire types, for the two halves of the chunk codec
// (chunk_codec.cc writes, chunk_parse.cc reads). Private to
// //common/ps:chunk_codec.
#ifndef BERTPS_COMMON_PS_CHUNK_WIRE_TYPES_H_
#define BERTPS_COMMON_PS_CHUNK_WIRE_TYPES_H_

namespace bertps {
namespace ps {
namespace wire_types {

inline constexpr int kVarint = 0;
inline constexpr int kFixed64 = 1;
inline constexpr int kLen = 2;
inline constexpr int kStartGroup = 3;
inline constexpr int kEndGroup = 4;
inline constexpr int kFixed32 = 5;

}  // namespace wire_types
}  // namespace ps
}  // namespace bertps

#endif  // BERTPS_COMMON_PS_CHUNK_WIRE_TYPES_H_

// Helpers shared by the fuzz targets in fuzz/.
//
// Script format of the structured targets (fuzz_ps_shard, fuzz_coordinator):
//   byte 0..k   target-specific setup bytes (see each target)
//   then records: u8 op | u16 little-endian length | `length` payload bytes
// A record cut short at the end of the input is dropped. Payloads are
// serialized protobuf requests (or spec text), so every record is one RPC.
// ScriptWriter builds the same format (seed generation, tests).
//
// Thread-safety: none needed (one input at a time). Ownership: a FuzzInput
// views bytes it does not own.
#ifndef BERTPS_FUZZ_FUZZ_INPUT_H_
#define BERTPS_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace bertps {
namespace fuzz {

struct Record {
  uint8_t op = 0;
  absl::string_view payload;
};

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size)
      : data_(reinterpret_cast<const char*>(data)), size_(size) {}

  size_t remaining() const { return size_ - pos_; }
  // A setup byte; 0 once the input is used up.
  uint8_t Byte() { return pos_ < size_ ? static_cast<uint8_t>(data_[pos_++]) : 0; }
  // The next complete record, or nothing at the end of the input.
  std::optional<Record> Next() {
    if (remaining() < 3) return std::nullopt;
    Record r;
    r.op = static_cast<uint8_t>(data_[pos_]);
    const size_t len = static_cast<uint8_t>(data_[pos_ + 1]) |
                       (static_cast<size_t>(static_cast<uint8_t>(data_[pos_ + 2])) << 8);
    if (remaining() - 3 < len) return std::nullopt;
    r.payload = absl::string_view(data_ + pos_ + 3, len);
    pos_ += 3 + len;
    return r;
  }

 private:
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Builds inputs in the script format.
class ScriptWriter {
 public:
  ScriptWriter& Setup(uint8_t b) {
    out_.push_back(static_cast<char>(b));
    return *this;
  }
  // Payloads longer than 65535 bytes are a programming error.
  ScriptWriter& Add(uint8_t op, absl::string_view payload) {
    if (payload.size() > 0xffff) std::abort();
    out_.push_back(static_cast<char>(op));
    out_.push_back(static_cast<char>(payload.size() & 0xff));
    out_.push_back(static_cast<char>(payload.size() >> 8));
    out_.append(payload.data(), payload.size());
    return *this;
  }
  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
};

// Reports a broken invariant and aborts (libFuzzer saves the input).
#define BERTPS_FUZZ_CHECK(cond, ...)                                 \
  do {                                                               \
    if (!(cond)) {                                                   \
      std::fprintf(stderr, "fuzz invariant failed: %s: ", #cond);    \
      std::fprintf(stderr, __VA_ARGS__);                             \
      std::fprintf(stderr, "\n");                                    \
      std::abort();                                                  \
    }                                                                \
  } while (0)

// The repo's data/ directory: $BERTPS_DATA_DIR, else "data" (the fuzz
// binaries run from the workspace root, see tools/fuzz.sh).
inline std::string DataDir() {
  const char* d = std::getenv("BERTPS_DATA_DIR");
  return d != nullptr ? d : "data";
}

}  // namespace fuzz
}  // namespace bertps

#endif  // BERTPS_FUZZ_FUZZ_INPUT_H_

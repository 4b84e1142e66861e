// Structured mutation of fuzz scripts (fuzz_input.h): instead of flipping
// bytes of a serialized request, parse a record's payload as its request
// message, change one field through protobuf reflection (a boundary or random
// number, NaN/Inf, a mutated string, an added/removed repeated element) and
// serialize it again, so most mutants are well-formed requests that reach
// the handlers' validation rather than the protobuf parser. Records are also
// duplicated, dropped and swapped (request order matters to the handlers).
//
// The fuzz targets call MutateScript from LLVMFuzzerCustomMutator half of the
// time; the other half is libFuzzer's own byte mutation.
//
// Thread-safety: pure functions of their arguments.
#ifndef BERTPS_FUZZ_PROTO_MUTATOR_H_
#define BERTPS_FUZZ_PROTO_MUTATOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>

#include "google/protobuf/message.h"
#include "google/protobuf/stubs/logging.h"

namespace bertps {
namespace fuzz {

// Mutates raw bytes in place (libFuzzer's LLVMFuzzerMutate when fuzzing).
using BytesMutator = std::function<void(std::string*)>;

// What a record's payload holds, by op code.
struct PayloadKind {
  const google::protobuf::Message* prototype = nullptr;  // null: raw bytes
  bool text_format = false;  // payload is protobuf text format
};

// Changes one field (recursing into set sub-messages) of *m.
void MutateMessage(google::protobuf::Message* m, std::mt19937_64& rng,
                   const BytesMutator& mutate_bytes);

// Mutates the script in data[0, size) (setup_bytes leading bytes, then
// records); returns the new size (<= max_size), or 0 when the input is not a
// script this can mutate (the caller then mutates bytes).
size_t MutateScript(uint8_t* data, size_t size, size_t max_size,
                    unsigned int seed, size_t setup_bytes,
                    const std::function<PayloadKind(uint8_t op)>& kind_of,
                    const BytesMutator& mutate_bytes);

// Silences protobuf's log lines about malformed inputs (every other input
// has some); call once before fuzzing.
inline bool QuietProtobuf() {
  google::protobuf::SetLogHandler(nullptr);
  return true;
}

}  // namespace fuzz
}  // namespace bertps

#endif  // BERTPS_FUZZ_PROTO_MUTATOR_H_

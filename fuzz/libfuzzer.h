// Glue between the fuzz targets and libFuzzer. With --config=fuzz
// (BERTPS_FUZZING defined) BERTPS_SCRIPT_MUTATOR(setup_bytes, kind_of)
// defines LLVMFuzzerCustomMutator: half of the mutations are structured
// (proto_mutator.h), half libFuzzer's byte mutations. In the normal build
// the targets link replay_main.cc instead and the macro expands to nothing.
#ifndef BERTPS_FUZZ_LIBFUZZER_H_
#define BERTPS_FUZZ_LIBFUZZER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/proto_mutator.h"

#ifdef BERTPS_FUZZING
extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size,
                                   size_t max_size);

namespace bertps {
namespace fuzz {
inline void LibFuzzerMutateBytes(std::string* s) {
  const size_t n = s->size();
  s->resize(2 * n + 16);
  s->resize(LLVMFuzzerMutate(reinterpret_cast<uint8_t*>(&(*s)[0]), n,
                             s->size()));
}
}  // namespace fuzz
}  // namespace bertps

#define BERTPS_SCRIPT_MUTATOR(setup_bytes, kind_of)                          \
  extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size,      \
                                            size_t max_size,                 \
                                            unsigned int seed) {             \
    if (seed % 2 == 0) {                                                     \
      const size_t n = ::bertps::fuzz::MutateScript(                         \
          data, size, max_size, seed, (setup_bytes), (kind_of),              \
          ::bertps::fuzz::LibFuzzerMutateBytes);                             \
      if (n > 0) return n;                                                   \
    }                                                                        \
    return LLVMFuzzerMutate(data, size, max_size);                           \
  }
#else
#define BERTPS_SCRIPT_MUTATOR(setup_bytes, kind_of)
#endif

#endif  // BERTPS_FUZZ_LIBFUZZER_H_

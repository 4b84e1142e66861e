// BERT input embeddings: word + position + token type, summed.
//   out[b, s, :] = word[ids[b,s]] + position[s] + token_type[types[b,s]]
// Backward scatters dout into the three tables (accumulated; serial, so the
// sum order is deterministic). Ids must already be validated.
// Thread-safety: pure functions.
#ifndef BERTPS_COMMON_MODEL_EMBEDDING_H_
#define BERTPS_COMMON_MODEL_EMBEDDING_H_

#include <cstdint>

namespace bertps {

template <typename T>
void EmbeddingForward(const int32_t* ids,    // (B, S)
                      const int32_t* types,  // (B, S)
                      int64_t b, int64_t s, int64_t h,
                      const T* word,        // (V, H)
                      const T* position,    // (P, H)
                      const T* token_type,  // (TV, H)
                      T* out);              // (B, S, H)

template <typename T>
void EmbeddingBackward(const T* dout,  // (B, S, H)
                       const int32_t* ids, const int32_t* types, int64_t b,
                       int64_t s, int64_t h,
                       T* dword,         // (V, H) accumulated
                       T* dposition,     // (P, H) accumulated
                       T* dtoken_type);  // (TV, H) accumulated

}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_EMBEDDING_H_

// Element-wise activations, forward and backward side by side.
//   GELU (erf form, Hugging Face "gelu"; tanh form, BERT's original / "gelu_new")
//   tanh (the pooler)
// Backward functions write dx (may alias dy).
// Thread-safety: pure functions over caller buffers.
#ifndef BERTPS_COMMON_MODEL_ACTIVATIONS_H_
#define BERTPS_COMMON_MODEL_ACTIVATIONS_H_

#include <cstdint>

#include "common/model/bert_config.h"

namespace bertps {

template <typename T>
void GeluForward(Activation kind, const T* x, int64_t n, T* y);
template <typename T>
void GeluBackward(Activation kind, const T* dy, const T* x, int64_t n, T* dx);

template <typename T>
void TanhForward(const T* x, int64_t n, T* y);
// Uses the forward output y: dx = dy * (1 - y^2).
template <typename T>
void TanhBackward(const T* dy, const T* y, int64_t n, T* dx);

}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_ACTIVATIONS_H_

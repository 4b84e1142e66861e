// Dense (fully connected) layer with Hugging Face weight layout [out, in]:
//   y (N, OUT) = x (N, IN) · W^T + b
// Backward: dx = dy · W (overwritten, or added when accumulate_dx),
// dW += dy^T · x, db += column sums of dy.
// Thread-safety: pure functions; products run on the MatmulEngine's threads.
#ifndef BERTPS_COMMON_MODEL_LINEAR_H_
#define BERTPS_COMMON_MODEL_LINEAR_H_

#include <cstdint>

#include "common/kernels/matmul.h"

namespace bertps {

template <typename T>
void LinearForward(kernels::MatmulEngine* mm, const T* x,  // (N, IN)
                   const T* w,                             // (OUT, IN)
                   const T* b,                             // (OUT) or null
                   int64_t n, int64_t in, int64_t out,
                   T* y);  // (N, OUT)

template <typename T>
void LinearBackward(kernels::MatmulEngine* mm, const T* dy,  // (N, OUT)
                    const T* x,                              // (N, IN)
                    const T* w,                              // (OUT, IN)
                    int64_t n, int64_t in, int64_t out,
                    T* dx,  // (N, IN) or null
                    bool accumulate_dx,
                    T* dw,   // (OUT, IN) accumulated
                    T* db);  // (OUT) accumulated, or null

// db (OUT) += the column sums of dy (N, OUT), on the compute threads, each
// column summed over the rows in order: the same bits on any thread count.
template <typename T>
void AddColumnSums(const T* dy, int64_t n, int64_t out, T* db);

}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_LINEAR_H_

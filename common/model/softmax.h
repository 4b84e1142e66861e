// Softmax kernels, forward and backward side by side:
//  - the attention softmax over the last axis with BERT's additive padding
//    mask, (1 - mask) * -10000;
//  - softmax cross-entropy over class logits, fused with its gradient.
// Thread-safety: pure functions over caller buffers; rows run in parallel.
#ifndef BERTPS_COMMON_MODEL_SOFTMAX_H_
#define BERTPS_COMMON_MODEL_SOFTMAX_H_

#include <cstdint>
#include <limits>

namespace bertps {

// scores (B, NH, S, S) in place -> probabilities. mask (B, S): 1 = token,
// 0 = padding; key position j of batch b gets (1 - mask[b][j]) * -10000.
template <typename T>
void MaskedSoftmaxForward(const int32_t* mask, int64_t b, int64_t nh,
                          int64_t s, T* scores);

// Given probabilities p and dp (rows, C), writes dscores (may alias dp):
//   ds = p * (dp - sum_j dp_j p_j)
template <typename T>
void SoftmaxBackward(const T* p, int64_t rows, int64_t c, const T* dp, T* ds);

struct XentResult {
  double weighted_nll = 0;  // sum over rows of weight * -log p(label)
  double weight = 0;        // sum of weights
  int64_t correct = 0;      // rows (weight > 0) whose argmax is the label

  // The statistics of more rows (e.g. another micro-batch's).
  void Add(const XentResult& o) {
    weighted_nll += o.weighted_nll;
    weight += o.weight;
    correct += o.correct;
  }
};

// logits (N, C), plus bias (C) when not null (fused: the caller's product
// need not add it); labels (N) in [0, C); weights (N) or nullptr for all ones.
// The logits buffer is consumed. When `grad_scale` != 0 it is overwritten by
// the gradient of the logits
//   (softmax - onehot(label)) * weight * grad_scale,
// i.e. grad_scale = 1 / denominator of the loss. When `argmax` (N) is given,
// the first maximum of each row is written there and counted in `correct`.
template <typename T>
XentResult SoftmaxCrossEntropy(T* logits, const T* bias,
                               const int32_t* labels, const T* weights,
                               int64_t n, int64_t c, double grad_scale,
                               int32_t* argmax);

// The online softmax of one row seen a tile at a time, tiles in order (the
// MLM head's, heads.h): the running maximum, the sum of exp(x - max) and the
// first maximum's column (a NaN counts as larger than every number, as in
// SoftmaxCrossEntropy). After every tile of a row, max, sum and argmax are
// those of the whole row.
template <typename T>
struct OnlineSoftmaxRow {
  T max = -std::numeric_limits<T>::infinity();
  T sum = 0;
  int64_t argmax = 0;
};

// Adds the tile x[0, n) holding columns [j0, j0 + n) of the row.
template <typename T>
void OnlineSoftmaxAdd(const T* x, int64_t n, int64_t j0,
                      OnlineSoftmaxRow<T>* row);

// x[i] = exp(x[i] - m) * k, i < n. The softmaxes' exponentials of floats run
// on kernels/vecmath.h (AVX-512 or AVX2, chosen at run time); of doubles
// (the reference), on Eigen's.
template <typename T>
void ExpShiftedScaled(T* x, int64_t n, T m, T k);

}  // namespace bertps

#endif  // BERTPS_COMMON_MODEL_SOFTMAX_H_

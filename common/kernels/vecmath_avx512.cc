// vecmath.h's AVX-512 build (copts in BUILD). Eigen is renamed here: every
// symbol this file defines is in a namespace no other file uses.
#define Eigen bertps_vecmath_avx512_eigen
#define BERTPS_VECMATH_NS avx512
#include "common/kernels/vecmath_impl.h"

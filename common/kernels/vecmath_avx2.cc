// vecmath.h's baseline build (the project's -march, AVX2 and FMA).
#define BERTPS_VECMATH_NS avx2
#include "common/kernels/vecmath_impl.h"

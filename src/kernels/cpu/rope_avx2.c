/* rope.inc built for AVX2 + FMA + F16C. */
#define AMP_KPATH avx2
#include "kernels/cpu/rope.inc"

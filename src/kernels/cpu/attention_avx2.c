/* attention.inc built for AVX2 + FMA + F16C (exp on vmath_avx2.h). */
#define AMP_KPATH avx2
#define AMP_KPATH_AVX2 1
#include "kernels/cpu/attention.inc"

/* attention.inc built for AVX-512 (exp on vmath_avx512.h). */
#define AMP_KPATH avx512
#define AMP_KPATH_AVX512 1
#include "kernels/cpu/attention.inc"

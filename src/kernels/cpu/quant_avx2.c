/* quant.inc built for AVX2 + FMA + F16C. */
#define AMP_KPATH avx2
#define AMP_KPATH_AVX2 1
#include "kernels/cpu/quant.inc"

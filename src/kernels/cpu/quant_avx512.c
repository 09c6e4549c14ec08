/* quant.inc built for AVX-512 (F/BW/VL/DQ). */
#define AMP_KPATH avx512
#define AMP_KPATH_AVX512 1
#include "kernels/cpu/quant.inc"

/* The f32 elementwise tile loops built for AVX2 + FMA + F16C (see
 * elementwise_path.inc). */
#define EW_PATH avx2
#include "kernels/cpu/elementwise_path.inc"

/* The f32 elementwise tile loops built for AVX2 + FMA + F16C: every op has
 * the auto-vectorised build of the tile loops (elementwise_path.inc, here
 * amp_ew_tile_f32_avx2_c); the math-bound ops run on the hand-written loops
 * of elementwise_simd.inc (shared with elementwise_avx512.c) around
 * vmath_avx2.h, the last n % 8 elements through the tile loop (the same
 * values). */
#define EW_PATH avx2_c
#define EW_PATH_STATIC
#include "kernels/cpu/elementwise_path.inc"
#undef EW_PATH

#include "kernels/cpu/vmath_avx2.h"

#define EW_SIMD_FN amp_ew_tile_f32_avx2
#define EW_SIMD_C amp_ew_tile_f32_avx2_c
#define EW_TAIL1(F) (void)0
#define EW_TAIL2(F) (void)0
#include "kernels/cpu/elementwise_simd.inc"

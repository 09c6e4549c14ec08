/* 2-D pooling kernels on f32 planes (NCHW: N*C independent planes of H x W).
 * Window of output (oh, ow): rows oh*sh - ph + i*dh (i < kh), columns
 * likewise; positions outside the input are padding. */
#ifndef AMP_KERNELS_CPU_POOL_H
#define AMP_KERNELS_CPU_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/base.h"

typedef struct {
    int64_t H, W, OH, OW;
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
} amp_pool_geom;

/* y = max over each window; idx = flat h*W + w of the max (the first one;
 * a NaN wins, as in PyTorch). A window with no input position (possible
 * only when dilation steps over the input) gives -inf and index -1. */
void amp_max_pool2d_f32(const float *x, float *y, int64_t *idx, int64_t planes, const amp_pool_geom *g);
/* dx = 0, then dx[idx] += dy per plane (idx -1 skipped). */
void amp_max_pool2d_backward_f32(const float *dy, const int64_t *idx, float *dx, int64_t planes, const amp_pool_geom *g);
/* The same for a 2 x 2 window, stride 2, no padding or dilation, every
 * window inside the input (floor mode, or sizes where ceil mode adds none:
 * amp_max_pool2d_k2_ok), contiguous planes of dtype dt (f32, f16, bf16) read
 * and written as stored: y gets the max rounded to dt (exact), idx (may be
 * NULL) as above, slot (may be NULL) the window position of the max, 0..3
 * row-major (idx = (2oh + slot/2) * W + 2ow + slot%2). AVX-512 only (call it
 * when amp_cpu_active() >= AMP_CPU_AVX512); returns false, doing nothing,
 * for any other geometry. */
bool amp_max_pool2d_k2_ok(const amp_pool_geom *g);
bool amp_max_pool2d_k2_avx512(const void *x, amp_dtype dt, void *y, int64_t *idx, uint8_t *slot, int64_t planes,
                              const amp_pool_geom *g);
/* The disjoint backward from slots instead of flat indices (2 x 2, stride 2);
 * the AVX-512 version (f16/bf16 dy; false otherwise) gives the same bits.
 * amp_max_pool2d_backward_k2slot (backend_cpu_pool.c) runs the AVX-512 one
 * on the AVX-512 paths where it applies, else the plain loops (_scalar,
 * pool_scalar.c). */
void amp_max_pool2d_backward_k2slot(const void *dy, amp_dtype dt, const uint8_t *slot, void *dx, int64_t planes,
                                    const amp_pool_geom *g);
void amp_max_pool2d_backward_k2slot_scalar(const void *dy, amp_dtype dt, const uint8_t *slot, void *dx, int64_t planes,
                                           const amp_pool_geom *g);
bool amp_max_pool2d_backward_k2slot_avx512(const void *dy, amp_dtype dt, const uint8_t *slot, void *dx, int64_t planes,
                                           const amp_pool_geom *g);
/* Backward for windows that never overlap (kh <= sh, kw <= sw, no
 * dilation): every input position takes at most one dy, so dx (dtype dt,
 * dy's) = 0 + dy at idx, in dt without a wider accumulator: the bits of
 * amp_max_pool2d_backward_f32 rounded to dt (-0 becomes +0; NaN quiet). */
void amp_max_pool2d_backward_disjoint(const void *dy, amp_dtype dt, const int64_t *idx, void *dx, int64_t planes,
                                      const amp_pool_geom *g);
/* Average over each window (no dilation). Divisor as PyTorch: the window
 * clipped to the padded input when count_include_pad, else the window
 * clipped to the input. */
void amp_avg_pool2d_f32(const float *x, float *y, int64_t planes, const amp_pool_geom *g, bool count_include_pad);
void amp_avg_pool2d_backward_f32(const float *dy, float *dx, int64_t planes, const amp_pool_geom *g,
                                 bool count_include_pad);
/* Adaptive average: output (oh, ow) averages rows [floor(oh*H/OH),
 * ceil((oh+1)*H/OH)) and the same for columns. */
void amp_adaptive_avg_pool2d_f32(const float *x, float *y, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                 int64_t OW);
void amp_adaptive_avg_pool2d_backward_f32(const float *dy, float *dx, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                          int64_t OW);

#endif

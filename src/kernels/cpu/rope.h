/* Internal: rotary position embedding kernels. The angle table is one
 * function (the same bits on every path); the rotation is one source
 * (rope.inc) built once per CPU path (scalar, AVX2, AVX-512), each giving
 * the same bits: every output is (double)x0 * c -/+ (double)x1 * s with
 * c, s f32 (so the products are exact and the sum rounds once in double),
 * rounded to f32 and then, for a half y, once to its dtype. */
#ifndef AMP_KERNELS_CPU_ROPE_H
#define AMP_KERNELS_CPU_ROPE_H

#include <stdbool.h>

#include "amp/base.h"

/* cs[t * D + 2i] = cos, cs[t * D + 2i + 1] = sin of the angle of pair i at
 * position pos0 + t (t < T, i < D/2), layout an amp_rope_layout:
 *   interleaved (llama.cpp's ggml-cpu rope, "normal" mode): s = powf(theta,
 *     -2/D); angle_0 = (float)pos, angle_{i+1} = angle_i * s in f32;
 *   halves (Hugging Face's Llama): inv_freq_i = 1.0f / powf(theta, (2i)/D
 *     in f32), angle = (float)pos * inv_freq_i in f32.
 * cos and sin of the f32 angle computed in double, rounded to f32. */
void amp_k_rope_table(int64_t T, int64_t D, int64_t pos0, double theta, int layout, float *cs);

/* y [B, H, T, D] contiguous of ydt = x rotated, x of xdt (f32, f16, bf16)
 * with element strides sx[0..2] for B, H, T and 1 for D; pairs (2i, 2i+1)
 * (interleaved) or (i, i + D/2) (halves); inverse: by -angle. */
void amp_k_rope(const void *x, amp_dtype xdt, const int64_t *shape, const int64_t *sx, const float *cs, int layout,
                bool inverse, void *y, amp_dtype ydt);

typedef struct {
    void (*rope)(const void *x, amp_dtype xdt, const int64_t *shape, const int64_t *sx, const float *cs, int layout,
                 bool inverse, void *y, amp_dtype ydt);
} amp_rope_kernels;
extern const amp_rope_kernels amp_rope_kernels_scalar, amp_rope_kernels_avx2, amp_rope_kernels_avx512;

#endif

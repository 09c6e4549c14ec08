/* Internal: the quantized linear's kernels (llama.cpp's scheme).
 *
 * Activations. Each row of x (K values, K % 32 == 0) is quantized into
 * blocks of 32 (amp_qact, structure of arrays): d = amax / 127 (f32),
 * q = x / d rounded to nearest even (x * (1 / d), as ggml), sum = the
 * block's integer sum of q, s = d * sum. A row with a non-finite value gets
 * d = s = NaN (its outputs are NaN). The per-row arrays d, s, sum are padded
 * to a multiple of 4 blocks with zeros. Every path gives the same bits.
 *
 * Products. Output y[m, n] = sum over blocks b of
 *   (dw_b * dx_b) * isum_b              [+ mw_b * sx_b for q4_1]
 * isum_b the exact integer dot product of the block's weights (q8_0: q;
 * q4_0: q - 8; q4_1: q, 0..15) with x's q. The f32 arithmetic is fixed
 * (the same on every path, whatever the tiling or thread count, so a row's
 * result does not depend on how many rows x has): four accumulators, block b
 * into acc[b % 4] in block order,
 *   acc[j] = fma(dw_b * dx_b, (float)isum_b, acc[j]);   q4_1: then acc[j] = fma(mw_b, sx_b, acc[j])
 * (the blocks past nb, up to a multiple of 4, add fma(0, 0, .)), then
 *   y = (acc[0] + acc[2]) + (acc[1] + acc[3]).
 * So every path's result is bitwise the scalar path's, and within
 * (nb + 3) * 2^-24 * sum |term| of the exact sum of the terms
 * (tests/test_quant.c checks both).
 *
 * One source (quant.inc) is built once per CPU path: plain C (scalar), AVX2
 * (vpmaddubsw / vpmaddwd), AVX-512 (the same on 256-bit vectors, 32
 * registers), and AVX-512 with VNNI (vpdpbusd) where cpuid has
 * AVX512_VNNI. */
#ifndef AMP_KERNELS_CPU_QUANT_H
#define AMP_KERNELS_CPU_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/base.h"
#include "numeric/quant_impl.h"

/* M rows of quantized activations: row m's values qs + m * nbp * 32, its
 * block scales d/s/sum + m * nbp (nbp = nb rounded up to 4; the blocks past
 * nb are zeros). */
typedef struct {
    int64_t M, K, nb, nbp;
    int8_t *qs;
    float *d, *s;
    int32_t *sum;
} amp_qact;

typedef struct {
    const char *name; /* the kernel set: "scalar", "avx2", "avx512", "avx512vnni" */
    /* one row of K values into qs [nbp * 32], d / s / sum [nbp] (zero-padded) */
    void (*quantize_x)(const float *x, int64_t K, int8_t *qs, float *d, float *s, int32_t *sum);
    /* y[m * ldy + r] = weight row r (w + r * row_bytes: K / 32 blocks of t, q8_0, q4_0 or q4_1) . activation
     * row m, for r in [0, nr), m in [0, x->M) */
    void (*gemm)(amp_qtype t, const void *w, size_t row_bytes, int64_t nr, const amp_qact *x, float *y, int64_t ldy);
} amp_quant_kernels;
extern const amp_quant_kernels amp_quant_kernels_scalar, amp_quant_kernels_avx2, amp_quant_kernels_avx512,
    amp_quant_kernels_avx512vnni;

/* The active path's kernels: AVX-512 with VNNI where the CPU has it, unless
 * AMP_QUANT_VNNI=0 (environment, read once) keeps it off. */
const amp_quant_kernels *amp_k_quant(void);
/* The kernels of one path (NULL if this CPU lacks it); vnni selects the VNNI
 * build of the AVX-512 path (NULL without AVX512_VNNI, or for other paths). */
const amp_quant_kernels *amp_k_quant_path(amp_cpu_path p, bool vnni);
/* Turns the VNNI build on (where the CPU has it) or off for this process
 * (`amp bench quant` compares them). */
void amp_k_quant_set_vnni(bool on);

#endif

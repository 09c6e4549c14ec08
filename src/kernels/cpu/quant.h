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
 * result does not depend on how many rows x has): eight accumulators, block
 * b of group g = b / 4 into acc[g % 2][amp_qact_slot(b) % 4] (blocks 4g,
 * 4g + 2, 4g + 1, 4g + 3 to lanes 0..3; even and odd groups apart: two
 * chains of fused multiply-adds) in block order,
 *   a = fma(dw_b * dx_b, (float)isum_b, a);   q4_1: then a = fma(mw_b, sx_b, a)
 * (the blocks past nb, up to a multiple of 4, add fma(0, 0, .)), then with
 * s[j] = acc[0][j] + acc[1][j]:  y = (s[0] + s[2]) + (s[1] + s[3]).
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

/* M rows of quantized activations. Row m: its values at qs + m * nbp * 32
 * (nbp = nb rounded up to 4; the blocks past nb are zeros), its block scales
 * d, s and sums at + m * nbp. The values of block b are in block order
 * (plain), or, for q4 weights, paired: blocks 2p and 2p + 1 share 64 bytes,
 * values 0-15 of 2p, values 0-15 of 2p + 1, values 16-31 of 2p, values
 * 16-31 of 2p + 1 (the order of a q4 pair's low and high nibbles). d, s and
 * sum of block b are at slot amp_qact_slot(b): within each group of 4 the
 * lane order 0, 2, 1, 3 of the kernels' reduction. */
typedef struct {
    int64_t M, K, nb, nbp;
    bool paired;
    int8_t *qs;
    float *d, *s;
    int32_t *sum;
} amp_qact;
static inline int64_t amp_qact_slot(int64_t b) { return (b & ~(int64_t)3) | ((b & 1) << 1) | ((b & 2) >> 1); }
/* the byte of value j (0..31) of block b in a row */
static inline int64_t amp_qact_at(bool paired, int64_t b, int j) {
    if (!paired) return b * 32 + j;
    return (b >> 1) * 64 + (j >= 16 ? 32 : 0) + (b & 1) * 16 + (j & 15);
}

typedef struct {
    const char *name; /* the kernel set: "scalar", "avx2", "avx512", "avx512vnni" */
    /* one row of K values into qs [nbp * 32] (plain or paired), d / s / sum [nbp] (zero-padded) */
    void (*quantize_x)(const float *x, int64_t K, bool paired, int8_t *qs, float *d, float *s, int32_t *sum);
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

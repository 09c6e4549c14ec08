/* Internal: the quantized linear's kernels (llama.cpp's scheme). The
 * activations x are quantized row by row into 8-bit blocks of 32
 * (amp_block_q8_1f: d = amax / 127, q = x / d rounded to nearest even,
 * s = d * sum(q); every path the same bits), then each output is
 *   y = sum over blocks b of  (dw_b * dx_b) * isum_b  [+ mw_b * sx_b for q4_1]
 * with isum_b the exact integer dot product of the block's weights (q8_0: q;
 * q4_0: q - 8; q4_1: q) with the activation's q, and the block terms added
 * in f32. The integer sums are exact on every path; the paths differ only
 * in the order of the f32 additions of the block terms (the scalar path adds
 * them in block order), so each result is within (nb + 1) * 2^-24 * sum |term|
 * of the exact sum of the terms (tests/test_quant.c checks that bound).
 *
 * One source (quant.inc) is built once per CPU path; quant_avx512.c uses
 * AVX512-VNNI (vpdpbusd) where cpuid has it. */
#ifndef AMP_KERNELS_CPU_QUANT_H
#define AMP_KERNELS_CPU_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "numeric/quant_impl.h"

typedef struct {
    const char *name; /* the kernel set: "scalar", "avx2", "avx512", "avx512vnni" */
    /* k values (k % 32 == 0) into k / 32 activation blocks */
    void (*quantize_x)(const float *x, int64_t k, amp_block_q8_1f *xq);
    /* y[m * ldy + r] = weight row r (w + r * row_bytes, nb blocks of t: q8_0, q4_0 or q4_1) · activation row m
     * (xq + m * nb), for r in [0, nr), m in [0, M) */
    void (*gemv)(amp_qtype t, const void *w, size_t row_bytes, int64_t nr, const amp_block_q8_1f *xq, int64_t M,
                 int64_t nb, float *y, int64_t ldy);
} amp_quant_kernels;
extern const amp_quant_kernels amp_quant_kernels_scalar, amp_quant_kernels_avx2, amp_quant_kernels_avx512;

/* The active path's kernels (AMP_QUANT_VNNI=0 in the environment keeps the
 * AVX-512 path off VNNI, for tests and benchmarks). */
const amp_quant_kernels *amp_k_quant(void);
/* The kernels of one path (NULL if this CPU lacks it); vnni selects the VNNI
 * variant of the AVX-512 path (NULL without AVX512_VNNI). */
const amp_quant_kernels *amp_k_quant_path(amp_cpu_path p, bool vnni);

#endif

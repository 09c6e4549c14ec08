/* Internal: the quantized-weight family: llama.cpp's block formats
 * (numeric/quant_impl.h) quantized from and dequantized to float tensors,
 * the weight-only quantized linear (activations quantized to 8-bit blocks,
 * integer dot products, f32 accumulation) and its input gradient, and the
 * quantized embedding gather. Quantized matrices live in host memory: a
 * device backend without this family refuses by name. Contract:
 * kernels/backend.h's. */
#ifndef AMP_KERNELS_FAMILY_QUANT_H
#define AMP_KERNELS_FAMILY_QUANT_H

#include <stdint.h>

#include "amp/quant.h"
#include "amp/tensor.h"

#define AMP_QUANT_ENTRIES(X, a) \
    X(a, quantize) X(a, dequantize) X(a, qlinear) X(a, qlinear_backward_x) X(a, qembedding)

typedef struct amp_quant_family {
    /* w [rows, cols] (f32, f16 or bf16, finite: the caller checked) into
     * rows * cols / 32 blocks of t (q8_0, q4_0, q4_1) at blocks: ggml's
     * reference rounding */
    amp_status (*quantize)(const char *fn, const amp_tensor *w, amp_qtype t, void *blocks);
    /* out [rows, cols] (new, f32/f16/bf16) = the values of q */
    amp_status (*dequantize)(const char *fn, const amp_qtensor *q, amp_tensor *out);
    /* out [M, N] (new, f32/f16/bf16) = x [M, K] · deq(w)ᵀ (+ b [N]): x's
     * rows quantized to 8-bit blocks, integer block sums, f32 accumulation */
    amp_status (*qlinear)(const char *fn, const amp_tensor *x, const amp_qtensor *w, const amp_tensor *b,
                          amp_tensor *out);
    /* gx (new f32 of shape [..., K] (ndim, shape), M rows) = g [M, N] · deq(w) */
    amp_status (*qlinear_backward_x)(const char *fn, const amp_tensor *g, const amp_qtensor *w, int ndim,
                                     const int64_t *shape, amp_tensor **gx);
    /* out [cnt, cols] (new, f32/f16/bf16) = the rows idx (checked) of w */
    amp_status (*qembedding)(const char *fn, const amp_qtensor *w, const amp_tensor *idx, amp_tensor *out);
} amp_quant_family;

#endif

/* Internal: fused scaled dot-product attention (flash-attention style) on
 * the CPU.
 *
 *   out[b] = dropout(softmax(scale * Q[b] K[b]^T + bias[b], causal mask)) V[b]
 *
 * for nb batch items (batch * heads) with Q [L, E], K [S, E], V [S, Ev].
 * The L x S score matrix of a head is never stored: a query tile of
 * AMP_ATT_BR rows walks the key tiles of AMP_ATT_BC columns, keeping its
 * running row max m and sum l (the online softmax, in f32) and an f32
 * output accumulator; at the end out = acc / l and the row's logsumexp
 * m + log(l) is saved. The backward recomputes each score tile from Q, K and
 * the saved logsumexp (P = exp(s - lse)), FlashAttention-2's way, with
 * D = rowsum(dO * O). Working memory is a few tiles per thread plus O(L)
 * per head; nothing grows as L * S.
 *
 * The products Q K^T, P V, P^T dO, dO V^T, dS K and dS^T Q go through
 * amp_gemm (the library's one GEMM entry point: its AVX-512 / AVX2 micro-
 * kernels, half operands widened while packing, f32 sums); the row
 * operations between them (scale, mask, max, exp, sums, rescaling) are
 * attention.inc, built once per CPU path like the other kernel families.
 * Threads: the forward splits (batch item, query tile) pairs, the backward
 * batch items; each output element is computed in the same order whatever
 * the split, so results do not depend on the thread count. */
#ifndef AMP_KERNELS_CPU_ATTENTION_H
#define AMP_KERNELS_CPU_ATTENTION_H

#include "amp/base.h"

#define AMP_ATT_BR 64 /* query rows per tile */
#define AMP_ATT_BC 64 /* key columns per tile */

/* One operand: batch item b's row r, column c is element
 * boff[b] + r * ld + c of p (columns contiguous). */
typedef struct {
    const void *p;
    amp_dtype dt; /* f32, f16 or bf16 (bias: f32) */
    const int64_t *boff;
    int64_t ld;
} amp_k_att_in;

typedef struct {
    int64_t nb, L, S, E, Ev;
    float scale;
    bool causal;       /* key j is visible from query i iff j <= i (top-left aligned, as torch) */
    const amp_k_att_in *bias; /* additive f32 [L, S] per batch item, or NULL */
    /* dropout on the attention weights: element (b, i, j) is kept when
     * amp_ew_dropout_keep's Philox word for offset + (b * L + i) * S + j is
     * >= thresh (amp_dropout's mask on an [nb, L, S] tensor), kept values
     * scaled by 1 / (1 - p). p == 0: none. */
    double dropout_p;
    uint64_t seed, offset, thresh;
    /* matmul precision for the products with f32 operands (the op's thread's
     * amp_matmul_precision_get(): the tiles run on OpenMP workers, which do
     * not see that thread's override); bf16 x bf16 products (Q.K^T of bf16
     * tensors) take the bf16 dot-product path on avx512bf16 whatever it is */
    amp_matmul_precision precision;
} amp_k_att_args;

/* out: contiguous [nb, L, Ev] of odt (f32/f16/bf16, rounded once);
 * lse: [nb, L] f32 row logsumexp (scaled scores). */
amp_status amp_k_attention_forward(const amp_k_att_args *a, const amp_k_att_in *q, const amp_k_att_in *k,
                                   const amp_k_att_in *v, void *out, amp_dtype odt, float *lse);
/* o: the forward output (contiguous [nb, L, Ev] of odt); dout contiguous
 * f32 [nb, L, Ev]; dq [nb, L, E], dk [nb, S, E], dv [nb, S, Ev] contiguous
 * f32, written whole. */
amp_status amp_k_attention_backward(const amp_k_att_args *a, const amp_k_att_in *q, const amp_k_att_in *k,
                                    const amp_k_att_in *v, const void *o, amp_dtype odt, const float *dout,
                                    const float *lse, float *dq, float *dk, float *dv);

/* The per-path row operations (attention.inc). */
typedef struct {
    /* One score row s[0:n] of a forward tile: s = s * scale + bias (bias may
     * be NULL), columns >= lim set to -inf; then with the running max *m and
     * sum *l: m' = max(*m, max s), s = exp(s - m'), *l = *l * exp(*m - m') +
     * sum s; returns exp(*m - m') (the factor for the accumulator row) and
     * stores m' in *m. */
    float (*fwd_row)(float *s, int64_t n, int64_t lim, float scale, const float *bias, float *m, float *l);
    /* p[0:n] = exp(s * scale + bias - lse) for columns < lim, 0 beyond. */
    void (*bwd_p_row)(float *s, int64_t n, int64_t lim, float scale, const float *bias, float lse);
    /* y[0:n] *= f */
    void (*scale_row)(float *y, int64_t n, float f);
    /* sum x[i] * y[i] over 16 lanes, y of dtype ydt */
    float (*dot_row)(const float *x, const void *y, amp_dtype ydt, int64_t n);
} amp_att_kernels;
extern const amp_att_kernels amp_att_kernels_scalar, amp_att_kernels_avx2, amp_att_kernels_avx512;

#endif

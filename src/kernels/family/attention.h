/* Internal: the fused attention family. Contract: kernels/backend.h's. */
#ifndef AMP_KERNELS_FAMILY_ATTENTION_H
#define AMP_KERNELS_FAMILY_ATTENTION_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/ops.h"
#include "amp/tensor.h"

/* Scaled dot-product attention over nb = batch * heads items: q [nb, L, E],
 * k [nb, S, E], v [nb, S, Ev] described by the tensors (any batch strides;
 * columns contiguous or the backend copies). */
typedef struct {
    int64_t nb, L, S, E, Ev;
    float scale;
    bool causal;        /* key j visible from query i iff j <= i (top-left aligned) */
    double dropout_p;   /* on the weights: element (b, i, j) kept when the Philox word for offset + (b L + i) S + j >= thresh */
    uint64_t seed, offset, thresh;
    amp_matmul_precision precision;
    /* grouped-query attention: query heads per key/value head (0 or 1: none).
     * q's batch item (..., h) (h its last batch dim, the heads) reads k's and
     * v's item (..., h / group); dk, dv (gin[1], gin[2]) have k's and v's
     * shapes, each the sum over its group's query heads. */
    int64_t group;
} amp_att_args;

#define AMP_ATTENTION_ENTRIES(X, a) X(a, attention) X(a, attention_backward)

typedef struct amp_attention_family {
    /* out [.., L, Ev] (q's dtype), lse f32 [nb * L]; bias an additive f32
     * mask broadcastable to [.., L, S] or NULL (its last two dims full,
     * columns contiguous). The backward recomputes the weights from lse; g
     * is d out (any float dtype and strides); gin[0..2] get dq, dk, dv: new
     * f32 tensors of q's, k's, v's shapes, all three computed. */
    amp_status (*attention)(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                            const amp_tensor *v, const amp_tensor *bias, amp_tensor *out, amp_tensor *lse);
    amp_status (*attention_backward)(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                                     const amp_tensor *v, const amp_tensor *bias, const amp_tensor *out,
                                     const amp_tensor *lse, const amp_tensor *g, amp_tensor **gin);
} amp_attention_family;

#endif

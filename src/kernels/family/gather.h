/* Internal: the gather/index family: embedding rows, flat gathers (index
 * ops) and their scatter-add backwards, and masked fills. Contract:
 * kernels/backend.h's. */
#ifndef AMP_KERNELS_FAMILY_GATHER_H
#define AMP_KERNELS_FAMILY_GATHER_H

#include <stdint.h>

#include "amp/tensor.h"

#define AMP_GATHER_ENTRIES(X, a) \
    X(a, embedding) X(a, embedding_backward) X(a, gather_flat) X(a, gather_flat_backward) X(a, mask_fill)

typedef struct amp_gather_family {
    /* rows of weight [V, D] by ids; the backward scatter-adds (f32 sums, or
     * in weight's dtype tile by tile where the CPU does) */
    amp_status (*embedding)(const char *fn, const amp_tensor *weight, const amp_tensor *idx, amp_tensor *out);
    amp_status (*embedding_backward)(const char *fn, const amp_tensor *idx, const amp_tensor *g, int64_t V, int64_t D,
                                     amp_dtype wdtype, amp_tensor **gw);
    /* out[e] = x[src[e]] with src the flat (row-major) source positions (i64,
     * on this device); backward: gx (f32, zeros, xshape) scatter-added */
    amp_status (*gather_flat)(const char *fn, const amp_tensor *x, const amp_tensor *src, amp_tensor *out);
    amp_status (*gather_flat_backward)(const char *fn, const amp_tensor *src, const amp_tensor *g, int ndim,
                                       const int64_t *xshape, amp_tensor **gx);
    /* out = x where kept, else fill: kind 0 tril / 1 triu (diagonal), kind 2
     * masked_fill (mask u8 broadcast to x: nonzero = fill with value) */
    amp_status (*mask_fill)(const char *fn, const amp_tensor *x, int kind, int64_t diagonal, const amp_tensor *mask,
                            double value, amp_tensor *out);
} amp_gather_family;

#endif

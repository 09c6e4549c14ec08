/* Internal: the pooling family: 2-D max and average pooling and their
 * backwards. Contract: kernels/backend.h's. */
#ifndef AMP_KERNELS_FAMILY_POOL_H
#define AMP_KERNELS_FAMILY_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/tensor.h"

/* 2-D pooling over planes (N*C) of H x W. Window of output (oh, ow): rows
 * oh*sh - ph + i*dh (i < kh), columns likewise; positions outside the input
 * are padding. Adaptive windows: rows [floor(oh*H/OH), ceil((oh+1)*H/OH)). */
typedef struct {
    int64_t planes, H, W, OH, OW;
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    bool include_pad;   /* avg_pool2d's count_include_pad */
    bool adaptive;      /* adaptive_avg_pool2d (kh..dw unused) */
    bool keep_slots;    /* max_pool2d without requested indices: the backend may keep a compact form (its *idx) */
} amp_pool_args;

#define AMP_POOL_ENTRIES(X, a) \
    X(a, max_pool2d) X(a, max_pool2d_backward) X(a, avg_pool2d) X(a, avg_pool2d_backward)

/* y (x's dtype) the caller made; gx new, xshape (f32 or g's dtype).
 * max_pool2d's idx: NULL when neither the indices nor a backward are
 * wanted; *idx the caller's i64 tensor (y's shape) for the flat indices
 * h * W + w when it asked for them; else (*idx NULL, a->keep_slots) the
 * backend makes in *idx what its max_pool2d_backward reads (the CPU's
 * 2 x 2 path: one-byte window slots; otherwise the i64 indices) */
typedef struct amp_pool_family {
    amp_status (*max_pool2d)(const char *fn, const amp_pool_args *a, const amp_tensor *x, amp_tensor *y,
                             amp_tensor **idx);
    amp_status (*max_pool2d_backward)(const char *fn, const amp_pool_args *a, const amp_tensor *idx,
                                      const amp_tensor *g, int ndim, const int64_t *xshape, amp_tensor **gx);
    amp_status (*avg_pool2d)(const char *fn, const amp_pool_args *a, const amp_tensor *x, amp_tensor *y);
    amp_status (*avg_pool2d_backward)(const char *fn, const amp_pool_args *a, const amp_tensor *g, int ndim,
                                      const int64_t *xshape, amp_tensor **gx);
} amp_pool_family;

#endif

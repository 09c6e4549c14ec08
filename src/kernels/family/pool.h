/* Internal: the pooling family: 2-D max and average pooling and their
 * backwards. Contract: kernels/backend.h's. */
#ifndef AMP_KERNELS_FAMILY_POOL_H
#define AMP_KERNELS_FAMILY_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/tensor.h"

/* 2-D pooling over planes (N*C) of H x W; windows as kernels/cpu/pool.h. */
typedef struct {
    int64_t planes, H, W, OH, OW;
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    bool include_pad;   /* avg_pool2d's count_include_pad */
    bool adaptive;      /* adaptive_avg_pool2d (kh..dw unused) */
    bool keep_slots;    /* max_pool2d without requested indices: the backend may keep a compact form */
} amp_pool_args;

#define AMP_POOL_ENTRIES(X, a) \
    X(a, max_pool2d) X(a, max_pool2d_backward) X(a, avg_pool2d) X(a, avg_pool2d_backward)

typedef struct amp_pool_family {
    amp_status (*max_pool2d)(const char *fn, const amp_pool_args *a, const amp_tensor *x, amp_tensor *y,
                             amp_tensor *idx);
    amp_status (*max_pool2d_backward)(const char *fn, const amp_pool_args *a, const amp_tensor *idx,
                                      const amp_tensor *g, int ndim, const int64_t *xshape, amp_tensor **gx);
    amp_status (*avg_pool2d)(const char *fn, const amp_pool_args *a, const amp_tensor *x, amp_tensor *y);
    amp_status (*avg_pool2d_backward)(const char *fn, const amp_pool_args *a, const amp_tensor *g, int ndim,
                                      const int64_t *xshape, amp_tensor **gx);
} amp_pool_family;

#endif

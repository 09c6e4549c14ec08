/* Internal: the convolution family (NCHW; conv1d is H = 1). Contract:
 * kernels/backend.h's. */
#ifndef AMP_KERNELS_FAMILY_CONV_H
#define AMP_KERNELS_FAMILY_CONV_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/ops.h"
#include "amp/tensor.h"

/* Per group g, Og = O/G outputs from Cg = C/G inputs; C and O count all
 * channels. Output (oh, ow) reads input rows oh*sh - ph + i*dh (i < kh),
 * columns likewise (0 outside). precision: the matmul precision the
 * products use (read by the op when it calls). */
typedef struct {
    int64_t N, C, O, G;
    int64_t H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW;
    amp_matmul_precision precision;
} amp_conv_args;

#define AMP_CONV_ENTRIES(X, a) X(a, conv) X(a, conv_backward)

typedef struct amp_conv_family {
    /* out [N, O, OH, OW] (the caller's shape; bias added); gin = dx, dw, db where
     * need[i] (new f32 tensors, dx in x's dtype where the backend rounds it itself) */
    amp_status (*conv)(const char *fn, const amp_conv_args *a, const amp_tensor *x, const amp_tensor *w,
                       const amp_tensor *b, amp_tensor *out);
    amp_status (*conv_backward)(const char *fn, const amp_conv_args *a, const amp_tensor *x, const amp_tensor *w,
                                const amp_tensor *g, const bool *need, amp_tensor **gin);
} amp_conv_family;

#endif

/* Internal: the rotary-position-embedding family (amp_rope and its
 * backward, the inverse rotation). Contract: kernels/backend.h's. */
#ifndef AMP_KERNELS_FAMILY_ROPE_H
#define AMP_KERNELS_FAMILY_ROPE_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/tensor.h"

/* x [B, H, T, D] (D even) at positions pos0 .. pos0+T-1; layout an
 * amp_rope_layout (amp/ops.h: which pairs rotate, and how the angles are
 * computed); inverse: the rotation by -angle (the backward). */
typedef struct {
    int64_t pos0;
    double theta;
    int layout;
    bool inverse;
} amp_rope_args;

#define AMP_ROPE_ENTRIES(X, a) X(a, rope)

typedef struct amp_rope_family {
    /* y (a new contiguous tensor of x's shape, of x's dtype or f32) = x
     * rotated; x of any strides */
    amp_status (*rope)(const char *fn, const amp_rope_args *a, const amp_tensor *x, amp_tensor *y);
} amp_rope_family;

#endif

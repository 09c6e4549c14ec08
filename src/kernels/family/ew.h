/* Internal: the elementwise family. One entry runs any op of the catalogue
 * (kernels/ew_ops.h: the op enum, its parameters and the operand
 * descriptor) over a broadcast shape into a contiguous output. Contract:
 * kernels/backend.h's. */
#ifndef AMP_KERNELS_FAMILY_EW_H
#define AMP_KERNELS_FAMILY_EW_H

#include "kernels/ew_ops.h"

#define AMP_EW_ENTRIES(X, a) X(a, ew)

typedef struct amp_ew_family {
    /* out (contiguous, out_dtype, shape[0..ndim)) = op(in[0..nin)); each
     * operand any strides (0 to broadcast), data on the backend's device */
    amp_status (*ew)(const char *fn, amp_ew_op op, const amp_ew_params *p, int ndim, const int64_t *shape, void *out,
                     amp_dtype out_dtype, int nin, const amp_ew_operand *in);
} amp_ew_family;

#endif

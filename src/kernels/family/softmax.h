/* Internal: the softmax family: softmax / log_softmax over one dim and the
 * backward from the forward's output. Contract: kernels/backend.h's. */
#ifndef AMP_KERNELS_FAMILY_SOFTMAX_H
#define AMP_KERNELS_FAMILY_SOFTMAX_H

#include <stdbool.h>

#include "amp/tensor.h"

#define AMP_SOFTMAX_ENTRIES(X, a) X(a, softmax) X(a, softmax_backward)

typedef struct amp_softmax_family {
    /* y (x's shape) = softmax (log: log_softmax) of x over dim */
    amp_status (*softmax)(const char *fn, const amp_tensor *x, int dim, bool log, amp_tensor *y);
    amp_status (*softmax_backward)(const char *fn, const amp_tensor *y, const amp_tensor *g, int dim, bool log,
                                   amp_tensor **gx);
} amp_softmax_family;

#endif

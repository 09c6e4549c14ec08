/* Internal: the reduction family: sums (and means) over dims, their
 * backward and broadcasting's backward, products, cumulative sums, max and
 * p-norms over dims. Outputs the caller passes are new contiguous tensors of
 * x's dtype unless an entry says otherwise. Contract: kernels/backend.h's. */
#ifndef AMP_KERNELS_FAMILY_REDUCE_H
#define AMP_KERNELS_FAMILY_REDUCE_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/tensor.h"

#define AMP_REDUCE_ENTRIES(X, a) \
    X(a, sum) X(a, sum_backward) X(a, sum_to_shape) X(a, prod) X(a, prod_backward) X(a, cumsum) X(a, max) \
    X(a, max_backward) X(a, norm) X(a, norm_backward)

typedef struct amp_reduce_family {
    /* sum (or mean) over the dims with red[d] set: out has x's dims without
     * (or, keepdim, with size-1) the reduced ones */
    amp_status (*sum)(const char *fn, const amp_tensor *x, const bool *red, bool mean, amp_tensor *out);
    /* gx (new f32, shape xshape) = g broadcast back over the reduced dims, times scale */
    amp_status (*sum_backward)(const char *fn, const amp_tensor *g, const bool *red, float scale, int ndim,
                               const int64_t *xshape, amp_tensor **gx);
    /* a gradient summed down to shape (broadcasting's backward; g's dtype;
     * sums in double). Unlike the other entries' results, *out is made as
     * the engine's temporaries always were (amp__mem_current(WORKSPACE),
     * registered in the current scope outside the engine): a custom
     * function's backward may return it. The engine calls it through
     * amp__sum_to_shape (autograd/node.h), which also copies equal shapes. */
    amp_status (*sum_to_shape)(const char *fn, const amp_tensor *g, int ndim, const int64_t *shape, amp_tensor **out);
    amp_status (*prod)(const char *fn, const amp_tensor *x, int dim, amp_tensor *out);
    amp_status (*prod_backward)(const char *fn, const amp_tensor *x, const amp_tensor *g, int dim, amp_tensor **gx);
    /* cumsum over dim into out (f32 out allowed: the backward's reverse sum) */
    amp_status (*cumsum)(const char *fn, const amp_tensor *x, int dim, bool reverse, amp_tensor *out);
    /* max over dim: values (x's dtype) and first indices (i64) */
    amp_status (*max)(const char *fn, const amp_tensor *x, int dim, amp_tensor *out, amp_tensor *idx);
    amp_status (*max_backward)(const char *fn, const amp_tensor *idx, const amp_tensor *g, int dim, int ndim,
                               const int64_t *xshape, amp_tensor **gx);
    amp_status (*norm)(const char *fn, const amp_tensor *x, double p, const bool *red, amp_tensor *out);
    amp_status (*norm_backward)(const char *fn, const amp_tensor *x, const amp_tensor *nrm, const amp_tensor *g,
                                double p, const bool *red, amp_tensor **gx);
} amp_reduce_family;

#endif

/* Internal helpers for code that computes on contiguous f32 buffers (reductions,
 * softmax, normalisation, embedding, losses): output buffers that are the
 * tensor's own memory when it is f32 and a workspace buffer rounded once into
 * it otherwise, f32 gradient tensors for backward, and the (outer, len, inner)
 * split of a tensor around one dim. */
#ifndef AMP_TENSOR_F32_UTIL_H
#define AMP_TENSOR_F32_UTIL_H

#include <string.h>

#include "tensor/tensor_impl.h"

/* Where to write numel(out) f32 values: out's memory if it is f32 (it is
 * always contiguous when new), else workspace. NULL on allocation failure. */
static inline float *amp__f32_out_begin(amp_tensor *out) {
    if (out->dtype == AMP_F32) return (float *)amp__data(out);
    return (float *)amp__ws_alloc((size_t)amp_tensor_numel(out) * sizeof(float));
}
/* Rounds the values into out (once) and frees the workspace. */
static inline void amp__f32_out_end(amp_tensor *out, float *buf) {
    if (out->dtype == AMP_F32 || !buf) return;
    amp__from_f32(out, buf);
    amp__ws_free(buf, (size_t)amp_tensor_numel(out) * sizeof(float));
}

/* A new f32 tensor for backward results or saved statistics (unscoped, so
 * it can be saved by a node and released without a scope owning it). */
static inline amp_tensor *amp__f32_tensor(const char *fn, int ndim, const int64_t *shape, amp_mem_category fallback) {
    return amp__tensor_new(fn, AMP_F32, ndim, shape, amp__mem_current(fallback), AMP_NEW_UNSCOPED);
}
/* A zero-filled f32 gradient of the given shape (workspace). */
static inline amp_tensor *amp__f32_grad(int ndim, const int64_t *shape, bool zero) {
    amp_tensor *t = amp__f32_tensor("amp_backward", ndim, shape, AMP_MEM_WORKSPACE);
    if (t && zero) memset(amp__data(t), 0, (size_t)amp_tensor_numel(t) * sizeof(float));
    return t;
}

/* A shape of ndim dims seen as (outer, len, inner) around dim d (0 dims is
 * one element). */
static inline void amp__split_shape(int ndim, const int64_t *shape, int d, int64_t *outer, int64_t *len,
                                    int64_t *inner) {
    int64_t o = 1, n = 1, in = 1;
    for (int i = 0; i < ndim; i++) {
        if (i < d) o *= shape[i];
        else if (i == d) n = shape[i];
        else in *= shape[i];
    }
    *outer = o;
    *len = n;
    *inner = in;
}
/* x seen as (outer, len, inner) around dim d (a 0-d tensor is one element). */
static inline void amp__split_dim(const amp_tensor *x, int d, int64_t *outer, int64_t *len, int64_t *inner) {
    amp__split_shape(x->ndim, x->shape, d, outer, len, inner);
}

/* How many elements of x a reduction over the dims with red[i] set folds
 * into each output. */
static inline int64_t amp__reduced_count(const amp_tensor *x, const bool *red) {
    int64_t c = 1;
    for (int i = 0; i < x->ndim; i++)
        if (red[i]) c *= x->shape[i];
    return c;
}

/* Normalise a dim argument; a 0-d tensor accepts 0 and -1 (as torch). */
static inline amp_status amp__norm_dim0(const char *fn, int dim, const amp_tensor *x, int *out) {
    if (x->ndim == 0) {
        if (dim == 0 || dim == -1) {
            *out = 0;
            return AMP_OK;
        }
        return amp_error(AMP_ERR_ARG, "%s: dim %d is out of range for a 0-d tensor (expected 0 or -1)", fn, dim);
    }
    return amp__norm_dim(fn, dim, x->ndim, out);
}

#endif

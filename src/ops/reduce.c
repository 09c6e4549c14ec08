/* Reductions: sum, mean, prod, cumsum, max (values + indices), norm.
 *
 * Inputs f32, f16 or bf16; the output has the input's dtype (as torch: a sum
 * of halves is a half) but every sum accumulates in f32 blocks added in double
 * and is rounded once. Each op is checks + autocast + one call per forward
 * and backward into its device's backend (kernels/backend.h; the CPU's:
 * kernels/cpu/backend_cpu_reduce.c) + the graph node. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "amp/numeric.h"
#include "kernels/backend.h"
#include "ops/op_util.h"
#include "tensor/f32_util.h"

/* ---- dims ------------------------------------------------------------------------ */
/* red[i] = dim i is reduced. ndims 0 = all dims. */
static amp_status parse_dims(const char *fn, const amp_tensor *x, const int *dims, int ndims, bool *red) {
    memset(red, 0, sizeof(bool) * AMP_MAX_DIMS);
    if (ndims < 0) return amp_error(AMP_ERR_ARG, "%s: ndims %d is negative", fn, ndims);
    if (ndims > 0 && !dims) return amp_error(AMP_ERR_ARG, "%s: dims is NULL with ndims %d", fn, ndims);
    if (ndims == 0) {
        for (int i = 0; i < x->ndim; i++) red[i] = true;
        return AMP_OK;
    }
    if (ndims > AMP_MAX_DIMS) return amp_error(AMP_ERR_ARG, "%s: ndims %d is more than %d", fn, ndims, AMP_MAX_DIMS);
    bool seen[AMP_MAX_DIMS] = {0};
    for (int k = 0; k < ndims; k++) {
        int d;
        if (amp__norm_dim0(fn, dims[k], x, &d) != AMP_OK) return amp_last_status();
        if (seen[d]) return amp_error(AMP_ERR_ARG, "%s: dim %d appears more than once in dims", fn, dims[k]);
        seen[d] = true;
        if (x->ndim > 0) red[d] = true;
    }
    return AMP_OK;
}

static int out_shape(const amp_tensor *x, const bool *red, bool keepdim, int64_t *shape) {
    int nd = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (!red[i]) shape[nd++] = x->shape[i];
        else if (keepdim) shape[nd++] = 1;
    }
    return nd;
}

/* ---- sum / mean ------------------------------------------------------------------ */
/* The reduced dims and the op's parameter: sum/mean's scale, norm's p. */
typedef struct {
    bool red[AMP_MAX_DIMS];
    float scale;
    double p;
} red_ctx;

static amp_status sum_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    red_ctx *c = n->ctx;
    const amp_backend *be = amp__backend_of("amp_backward", gout[0]);
    if (!be) return amp_last_status();
    return AMP_KCALL(be, reduce, sum_backward, "amp_backward", gout[0], c->red, c->scale, n->inputs[0].ndim, n->inputs[0].shape,
                       &gin[0]);
}

/* create_graph: g reshaped with the reduced dims as 1, expanded (and scaled) */
static amp_status sum_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    red_ctx *c = n->ctx;
    const amp_edge *e = &n->inputs[0];
    int64_t kshape[AMP_MAX_DIMS];
    for (int i = 0; i < e->ndim; i++) kshape[i] = c->red[i] ? 1 : e->shape[i];
    amp_tensor *g = amp_expand(amp_reshape(gout[0], e->ndim, kshape), e->ndim, e->shape);
    if (g && c->scale != 1.0f) g = amp_mul_scalar(g, c->scale);
    gin[0] = g;
    return g ? AMP_OK : amp_last_status();
}

static amp_status norm_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin);

/* sum, mean (mean: scaled by 1/count) or, for AMP_OP_NORM, the p-norm of x
 * over the dims red marks, after the checks. */
static amp_tensor *reduce_dims(const char *fn, amp_op_id op, amp_tensor *x, const bool *red, bool keepdim, bool mean,
                               double p) {
    amp_tensor *in[1];
    int mask;
    const amp_backend *be = amp__op_begin1(fn, op, &x, in, &mask);
    if (mask < 0) return NULL;
    const bool norm = op == AMP_OP_NORM;
    int64_t shape[AMP_MAX_DIMS];
    int nd = out_shape(x, red, keepdim, shape);
    red_ctx c = {.scale = mean ? (float)(1.0 / (double)amp__reduced_count(x, red)) : 1.0f, .p = p};
    memcpy(c.red, red, sizeof c.red);
    amp_tensor *out = be ? amp__empty_out_on(fn, amp__dev(x), x->dtype, nd, shape) : NULL;
    if (out) {
        amp_status st = norm ? AMP_KCALL(be, reduce, norm, fn, x, p, red, out) : AMP_KCALL(be, reduce, sum, fn, x, red, mean, out);
        if (st != AMP_OK) {
            amp_tensor_free(out);
            out = NULL;
        }
    }
    amp_node_spec spec = {.backward = sum_backward, .backward_diff = sum_backward_diff, .ctx = &c, .ctx_size = sizeof c};
    if (norm) spec = (amp_node_spec){.backward = norm_backward, .ctx = &c, .ctx_size = sizeof c, .nsave = 2, .save = {x, out}};
    return amp__op_end(fn, out != NULL, out, in, 1, mask, &spec, NULL, 0);
}

static amp_tensor *sum_mean(const char *fn, amp_op_id op, amp_tensor *x, const int *dims, int ndims, bool keepdim,
                            bool mean) {
    if (!amp__check_float(fn, x, "x")) return NULL;
    bool red[AMP_MAX_DIMS];
    if (parse_dims(fn, x, dims, ndims, red) != AMP_OK) return NULL;
    return reduce_dims(fn, op, x, red, keepdim, mean, 0);
}

amp_tensor *amp_sum(amp_tensor *x, const int *dims, int ndims, bool keepdim) {
    return sum_mean("amp_sum", AMP_OP_SUM, x, dims, ndims, keepdim, false);
}

amp_tensor *amp_mean(amp_tensor *x, const int *dims, int ndims, bool keepdim) {
    return sum_mean("amp_mean", AMP_OP_MEAN, x, dims, ndims, keepdim, true);
}

/* ---- single-dim ops: prod, cumsum, max ---------------------------------------------- */
typedef struct {
    int dim;
} dim_ctx;

/* Shape of x with dim d removed (or kept as 1). */
static int dim_out_shape(const amp_tensor *x, int d, bool keepdim, int64_t *shape) {
    int nd = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (i != d) shape[nd++] = x->shape[i];
        else if (keepdim) shape[nd++] = 1;
    }
    return nd;
}

static amp_status prod_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    dim_ctx *c = n->ctx;
    const amp_backend *be = amp__backend_of("amp_backward", gout[0]);
    if (!be) return amp_last_status();
    return AMP_KCALL(be, reduce, prod_backward, "amp_backward", n->saved[0], gout[0], c->dim, &gin[0]);
}

amp_tensor *amp_prod(amp_tensor *x, int dim, bool keepdim) {
    static const char *fn = "amp_prod";
    amp_tensor *in[1];
    int d, mask;
    const amp_backend *be = amp__op_begin_dim(fn, AMP_OP_PROD, &x, dim, &d, in, &mask);
    if (mask < 0) return NULL;
    int64_t shape[AMP_MAX_DIMS];
    int nd = dim_out_shape(x, d, keepdim, shape);
    amp_tensor *out = be ? amp__empty_out_on(fn, amp__dev(x), x->dtype, nd, shape) : NULL;
    if (out && AMP_KCALL(be, reduce, prod, fn, x, d, out) != AMP_OK) {
        amp_tensor_free(out);
        out = NULL;
    }
    amp_node_spec spec = {.backward = prod_backward, .ctx = &(dim_ctx){d}, .ctx_size = sizeof(dim_ctx), .nsave = 1, .save = {x}};
    return amp__op_end(fn, out != NULL, out, in, 1, mask, &spec, NULL, 0);
}

/* the reverse cumulative sum of g (f32), through the backend */
static amp_status cumsum_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    dim_ctx *c = n->ctx;
    const amp_tensor *g = gout[0];
    const amp_backend *be = amp__backend_of("amp_backward", g);
    if (!be) return amp_last_status();
    amp_tensor *gx = amp__tensor_new_on("amp_backward", amp__dev(g), AMP_F32, g->ndim, g->shape,
                                        amp__mem_current(AMP_MEM_WORKSPACE), AMP_NEW_UNSCOPED);
    if (!gx) return amp_last_status();
    amp_status st = AMP_KCALL(be, reduce, cumsum, "amp_backward", g, c->dim, true, gx);
    return amp__grad_result(st, gx, &gin[0]);
}

amp_tensor *amp_cumsum(amp_tensor *x, int dim) {
    static const char *fn = "amp_cumsum";
    amp_tensor *in[1];
    int d, mask;
    const amp_backend *be = amp__op_begin_dim(fn, AMP_OP_CUMSUM, &x, dim, &d, in, &mask);
    if (mask < 0) return NULL;
    amp_tensor *out = be ? amp__empty_out_on(fn, amp__dev(x), x->dtype, x->ndim, x->shape) : NULL;
    if (out && AMP_KCALL(be, reduce, cumsum, fn, x, d, false, out) != AMP_OK) {
        amp_tensor_free(out);
        out = NULL;
    }
    amp_node_spec spec = {.backward = cumsum_backward, .ctx = &(dim_ctx){d}, .ctx_size = sizeof(dim_ctx)};
    return amp__op_end(fn, out != NULL, out, in, 1, mask, &spec, NULL, 0);
}

static amp_status max_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    dim_ctx *c = n->ctx;
    amp_edge *e = &n->inputs[0];
    const amp_backend *be = amp__backend_of("amp_backward", gout[0]);
    if (!be) return amp_last_status();
    return AMP_KCALL(be, reduce, max_backward, "amp_backward", n->saved[0], gout[0], c->dim, e->ndim, e->shape, &gin[0]);
}

amp_tensor *amp_max(amp_tensor *x, int dim, bool keepdim, amp_tensor **indices) {
    static const char *fn = "amp_max";
    if (indices) *indices = NULL;
    if (!amp__check_float(fn, x, "x")) return NULL;
    int d;
    if (amp__norm_dim0(fn, dim, x, &d) != AMP_OK) return NULL;
    int64_t outer, len, inner;
    amp__split_dim(x, d, &outer, &len, &inner);
    if (len == 0) {
        char b[AMP_SHAPE_BUF];
        return amp_error_null(AMP_ERR_SHAPE, "%s: cannot take the max over dim %d of size 0 (x has shape %s)", fn, dim,
                              amp__shape_fmt(x->ndim, x->shape, b, sizeof b));
    }
    amp_tensor *in[1];
    int mask;
    const amp_backend *be = amp__op_begin1(fn, AMP_OP_MAX, &x, in, &mask);
    if (mask < 0) return NULL;
    int64_t shape[AMP_MAX_DIMS];
    int nd = dim_out_shape(x, d, keepdim, shape);
    amp_tensor *out = be ? amp__empty_out_on(fn, amp__dev(x), x->dtype, nd, shape) : NULL;
    amp_tensor *idx = out ? amp__tensor_new_on(fn, amp__dev(x), AMP_I64, nd, shape, amp__mem_current(AMP_MEM_ACTIVATION),
                                               AMP_NEW_UNSCOPED)
                          : NULL;
    if (!idx || AMP_KCALL(be, reduce, max, fn, x, d, out, idx) != AMP_OK) {
        amp__release(idx);
        amp_tensor_free(out);
        out = NULL;
        goto done;
    }
    amp_node_spec spec = {.backward = max_backward, .ctx = &(dim_ctx){d}, .ctx_size = sizeof(dim_ctx), .nsave = 1, .save = {idx}};
    if (amp__node_record(fn, out, in, 1, &spec) != AMP_OK) {
        amp__release(idx);
        amp_tensor_free(out);
        out = NULL;
        goto done;
    }
    if (indices) {
        amp__scope_register(idx); /* the caller's reference */
        *indices = idx;
    } else {
        amp__release(idx);
    }
done:
    amp__autocast_done(in, 1, mask);
    return out;
}

/* ---- norm ---------------------------------------------------------------------------- */
static amp_status norm_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    red_ctx *c = n->ctx;
    const amp_backend *be = amp__backend_of("amp_backward", gout[0]);
    if (!be) return amp_last_status();
    return AMP_KCALL(be, reduce, norm_backward, "amp_backward", n->saved[0], n->saved[1], gout[0], c->p, c->red, &gin[0]);
}

amp_tensor *amp_norm(amp_tensor *x, double p, const int *dims, int ndims, bool keepdim) {
    static const char *fn = "amp_norm";
    if (!amp__check_float(fn, x, "x")) return NULL;
    if (isnan(p)) return amp_error_null(AMP_ERR_ARG, "%s: p is NaN", fn);
    bool red[AMP_MAX_DIMS];
    if (parse_dims(fn, x, dims, ndims, red) != AMP_OK) return NULL;
    if (isinf(p) && amp__reduced_count(x, red) == 0) {
        char b[AMP_SHAPE_BUF];
        return amp_error_null(AMP_ERR_SHAPE, "%s: the %s-norm of zero elements is undefined (x has shape %s)", fn,
                              p > 0 ? "inf" : "-inf", amp__shape_fmt(x->ndim, x->shape, b, sizeof b));
    }
    return reduce_dims(fn, AMP_OP_NORM, x, red, keepdim, false, p);
}

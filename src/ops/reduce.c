/* Reductions: sum, mean, prod, cumsum, max (values + indices), norm.
 *
 * Inputs f32, f16 or bf16; the output has the input's dtype (as torch: a sum
 * of halves is a half) but every sum accumulates in f32 blocks added in double
 * (src/kernels/cpu/reduce.c) and is rounded once. Multi-dim reductions merge
 * adjacent dims and reduce one (outer, len, inner) block at a time. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "amp/numeric.h"
#include "kernels/cpu/reduce.h"
#include "ops/f32_util.h"

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

static int64_t reduced_count(const amp_tensor *x, const bool *red) {
    int64_t c = 1;
    for (int i = 0; i < x->ndim; i++)
        if (red[i]) c *= x->shape[i];
    return c;
}

/* Reduce the contiguous values x (shape of t) over red[]: SUM or MAX. x is
 * f32, or f16/bf16 for SUM (xdt; widened block by block by the kernel).
 * Returns a workspace buffer of numel(kept) floats (free with nbytes_out). */
enum { RED_SUM, RED_MAX };
static float *reduce_multi_dt(const void *x, amp_dtype xdt, int ndim, const int64_t *shape, const bool *red, int op,
                              size_t *nbytes_out) {
    int64_t sz[AMP_MAX_DIMS];
    bool rd[AMP_MAX_DIMS];
    int nd = 0;
    int64_t n = 1, kept = 1;
    for (int i = 0; i < ndim; i++) {
        n *= shape[i];
        if (!red[i]) kept *= shape[i];
        if (shape[i] == 1) continue;
        if (nd > 0 && rd[nd - 1] == red[i]) {
            sz[nd - 1] *= shape[i];
        } else {
            sz[nd] = shape[i];
            rd[nd] = red[i];
            nd++;
        }
    }
    const void *cur = x;
    amp_dtype cur_dt = xdt;
    float *owned = NULL;
    size_t owned_bytes = 0;
    for (;;) {
        int k = -1;
        for (int i = nd - 1; i >= 0; i--)
            if (rd[i]) {
                k = i;
                break;
            }
        if (k < 0) break;
        int64_t outer = 1, inner = 1;
        for (int i = 0; i < k; i++) outer *= sz[i];
        for (int i = k + 1; i < nd; i++) inner *= sz[i];
        size_t nb = (size_t)(outer * inner) * sizeof(float);
        float *o = amp__ws_alloc(nb);
        if (!o) {
            amp__ws_free(owned, owned_bytes);
            return NULL;
        }
        if (op == RED_SUM) amp_k_sum_dim_any(cur, cur_dt, outer, sz[k], inner, o);
        else amp_k_max_dim(cur, outer, sz[k], inner, o, NULL);
        amp__ws_free(owned, owned_bytes);
        cur = owned = o;
        cur_dt = AMP_F32;
        owned_bytes = nb;
        /* drop group k; merge its kept neighbours */
        if (k > 0 && k + 1 < nd) {
            sz[k - 1] *= sz[k + 1];
            for (int i = k; i + 2 < nd; i++) {
                sz[i] = sz[i + 2];
                rd[i] = rd[i + 2];
            }
            nd -= 2;
        } else {
            for (int i = k; i + 1 < nd; i++) {
                sz[i] = sz[i + 1];
                rd[i] = rd[i + 1];
            }
            nd -= 1;
        }
    }
    if (!owned) { /* nothing reduced (or all reduced dims have size 1) */
        owned_bytes = (size_t)kept * sizeof(float);
        owned = amp__ws_alloc(owned_bytes);
        if (!owned) return NULL;
        if (xdt == AMP_F32) memcpy(owned, x, (size_t)n * sizeof(float));
        else amp_convert(owned, AMP_F32, x, xdt, (size_t)n, 0);
    }
    *nbytes_out = owned_bytes;
    return owned;
}

static float *reduce_multi(const float *x, int ndim, const int64_t *shape, const bool *red, int op, size_t *nbytes_out) {
    return reduce_multi_dt(x, AMP_F32, ndim, shape, red, op, nbytes_out);
}

/* Strides (in elements of the contiguous keepdim-shaped reduced result) that
 * broadcast it back over x's shape: 0 on reduced dims. */
static void back_strides(int ndim, const int64_t *xshape, const bool *red, int64_t *st) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        if (red[i]) {
            st[i] = 0;
        } else {
            st[i] = s;
            s *= xshape[i];
        }
    }
}

/* The reduced-shape f32 tensor t, broadcast to x's shape times scale, into a
 * new f32 tensor of x's shape. */
static amp_tensor *broadcast_back(const amp_tensor *g, int ndim, const int64_t *xshape, const bool *red, float scale) {
    amp_tensor *gx = amp__f32_grad(ndim, xshape, false);
    if (!gx) return NULL;
    bool owned;
    const float *pg = amp__f32_view(g, &owned);
    if (!pg) {
        amp__release(gx);
        return NULL;
    }
    int64_t st[AMP_MAX_DIMS];
    back_strides(ndim, xshape, red, st);
    amp_k_broadcast(pg, st, ndim, xshape, scale, amp__data(gx));
    amp__f32_done(g, pg, owned);
    return gx;
}

/* ---- sum / mean ------------------------------------------------------------------ */
typedef struct {
    bool red[AMP_MAX_DIMS];
    float scale;
} red_ctx;

static amp_status sum_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    red_ctx *c = n->ctx;
    gin[0] = broadcast_back(gout[0], n->inputs[0].ndim, n->inputs[0].shape, c->red, c->scale);
    return gin[0] ? AMP_OK : amp_last_status();
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

static amp_tensor *sum_mean(const char *fn, amp_op_id op, amp_tensor *x, const int *dims, int ndims, bool keepdim,
                            bool mean) {
    if (!amp__check_float(fn, x, "x")) return NULL;
    bool red[AMP_MAX_DIMS];
    if (parse_dims(fn, x, dims, ndims, red) != AMP_OK) return NULL;
    amp_tensor *in[1] = {x};
    int mask = amp__autocast(op, in, 1);
    if (mask < 0) return NULL;
    x = in[0];
    amp_tensor *out = NULL;
    int64_t shape[AMP_MAX_DIMS];
    int nd = out_shape(x, red, keepdim, shape);
    int64_t cnt = reduced_count(x, red);
    float scale = mean ? (float)(1.0 / (double)cnt) : 1.0f;
    size_t nb;
    float *r;
    if (amp_tensor_is_contiguous(x) && (x->dtype == AMP_F16 || x->dtype == AMP_BF16)) {
        /* halves straight from x's memory, widened block by block */
        r = reduce_multi_dt(amp__data(x), x->dtype, x->ndim, x->shape, red, RED_SUM, &nb);
    } else {
        bool owned;
        const float *px = amp__f32_view(x, &owned);
        if (!px) goto done;
        r = reduce_multi(px, x->ndim, x->shape, red, RED_SUM, &nb);
        amp__f32_done(x, px, owned);
    }
    if (!r) goto done;
    out = amp__empty_out(fn, x->dtype, nd, shape);
    if (out) {
        int64_t on = amp_tensor_numel(out);
        if (mean)
            for (int64_t i = 0; i < on; i++) r[i] = cnt ? (float)((double)r[i] / (double)cnt) : NAN;
        amp__from_f32(out, r);
    }
    amp__ws_free(r, nb);
    if (out && amp__needs_grad(1, in)) {
        amp_node *node = amp__node_new(fn, sum_backward, 1, in, sizeof(red_ctx));
        if (!node) {
            amp_tensor_free(out);
            out = NULL;
            goto done;
        }
        red_ctx *c = node->ctx;
        node->backward_diff = sum_backward_diff;
        memcpy(c->red, red, sizeof red);
        c->scale = scale;
        amp__node_attach(node, out);
    }
done:
    amp__autocast_done(in, 1, mask);
    return out;
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
    const amp_tensor *x = n->saved[0];
    int64_t outer, len, inner;
    amp__split_dim(x, c->dim, &outer, &len, &inner);
    amp_tensor *gx = amp__f32_grad(x->ndim, x->shape, false);
    if (!gx) return amp_last_status();
    bool ox, og;
    const float *px = amp__f32_view(x, &ox);
    const float *pg = px ? amp__f32_view(gout[0], &og) : NULL;
    if (!px || !pg) {
        if (px) amp__f32_done(x, px, ox);
        amp__release(gx);
        return amp_last_status();
    }
    amp_k_prod_backward(px, pg, outer, len, inner, amp__data(gx));
    amp__f32_done(x, px, ox);
    amp__f32_done(gout[0], pg, og);
    gin[0] = gx;
    return AMP_OK;
}

amp_tensor *amp_prod(amp_tensor *x, int dim, bool keepdim) {
    static const char *fn = "amp_prod";
    if (!amp__check_float(fn, x, "x")) return NULL;
    int d;
    if (amp__norm_dim0(fn, dim, x, &d) != AMP_OK) return NULL;
    amp_tensor *in[1] = {x};
    int mask = amp__autocast(AMP_OP_PROD, in, 1);
    if (mask < 0) return NULL;
    x = in[0];
    int64_t shape[AMP_MAX_DIMS], outer, len, inner;
    int nd = dim_out_shape(x, d, keepdim, shape);
    amp__split_dim(x, d, &outer, &len, &inner);
    amp_tensor *out = amp__empty_out(fn, x->dtype, nd, shape);
    if (!out) goto done;
    bool owned;
    const float *px = amp__f32_view(x, &owned);
    float *po = px ? amp__f32_out_begin(out) : NULL;
    if (!px || !po) {
        if (px) amp__f32_done(x, px, owned);
        amp_tensor_free(out);
        out = NULL;
        goto done;
    }
    amp_k_prod_dim(px, outer, len, inner, po);
    amp__f32_out_end(out, po);
    amp__f32_done(x, px, owned);
    if (amp__needs_grad(1, in)) {
        amp_node *node = amp__node_new(fn, prod_backward, 1, in, sizeof(dim_ctx));
        if (!node) {
            amp_tensor_free(out);
            out = NULL;
            goto done;
        }
        amp__node_save(node, x);
        ((dim_ctx *)node->ctx)->dim = d;
        amp__node_attach(node, out);
    }
done:
    amp__autocast_done(in, 1, mask);
    return out;
}

static amp_status cumsum_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    dim_ctx *c = n->ctx;
    const amp_tensor *g = gout[0];
    int64_t outer, len, inner;
    amp__split_dim(g, c->dim, &outer, &len, &inner);
    amp_tensor *gx = amp__f32_grad(g->ndim, g->shape, false);
    if (!gx) return amp_last_status();
    bool og;
    const float *pg = amp__f32_view(g, &og);
    if (!pg) {
        amp__release(gx);
        return amp_last_status();
    }
    amp_k_cumsum(pg, outer, len, inner, amp__data(gx), true);
    amp__f32_done(g, pg, og);
    gin[0] = gx;
    return AMP_OK;
}

amp_tensor *amp_cumsum(amp_tensor *x, int dim) {
    static const char *fn = "amp_cumsum";
    if (!amp__check_float(fn, x, "x")) return NULL;
    int d;
    if (amp__norm_dim0(fn, dim, x, &d) != AMP_OK) return NULL;
    amp_tensor *in[1] = {x};
    int mask = amp__autocast(AMP_OP_CUMSUM, in, 1);
    if (mask < 0) return NULL;
    x = in[0];
    int64_t outer, len, inner;
    amp__split_dim(x, d, &outer, &len, &inner);
    amp_tensor *out = amp__empty_out(fn, x->dtype, x->ndim, x->shape);
    if (!out) goto done;
    bool owned;
    const float *px = amp__f32_view(x, &owned);
    float *po = px ? amp__f32_out_begin(out) : NULL;
    if (!px || !po) {
        if (px) amp__f32_done(x, px, owned);
        amp_tensor_free(out);
        out = NULL;
        goto done;
    }
    amp_k_cumsum(px, outer, len, inner, po, false);
    amp__f32_out_end(out, po);
    amp__f32_done(x, px, owned);
    if (amp__needs_grad(1, in)) {
        amp_node *node = amp__node_new(fn, cumsum_backward, 1, in, sizeof(dim_ctx));
        if (!node) {
            amp_tensor_free(out);
            out = NULL;
            goto done;
        }
        ((dim_ctx *)node->ctx)->dim = d;
        amp__node_attach(node, out);
    }
done:
    amp__autocast_done(in, 1, mask);
    return out;
}

static amp_status max_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    dim_ctx *c = n->ctx;
    amp_edge *e = &n->inputs[0];
    const amp_tensor *idx = n->saved[0];
    amp_tensor xs = {0}; /* only shape is used */
    xs.ndim = e->ndim;
    memcpy(xs.shape, e->shape, sizeof xs.shape);
    int64_t outer, len, inner;
    amp__split_dim(&xs, c->dim, &outer, &len, &inner);
    amp_tensor *gx = amp__f32_grad(e->ndim, e->shape, true);
    if (!gx) return amp_last_status();
    bool og;
    const float *pg = amp__f32_view(gout[0], &og);
    if (!pg) {
        amp__release(gx);
        return amp_last_status();
    }
    const int64_t *pi = amp__data(idx);
    float *q = amp__data(gx);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) q[(o * len + pi[o * inner + i]) * inner + i] += pg[o * inner + i];
    amp__f32_done(gout[0], pg, og);
    gin[0] = gx;
    return AMP_OK;
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
    amp_tensor *in[1] = {x};
    int mask = amp__autocast(AMP_OP_MAX, in, 1);
    if (mask < 0) return NULL;
    x = in[0];
    int64_t shape[AMP_MAX_DIMS];
    int nd = dim_out_shape(x, d, keepdim, shape);
    amp_tensor *out = amp__empty_out(fn, x->dtype, nd, shape);
    amp_tensor *idx = out ? amp__tensor_new(fn, AMP_I64, nd, shape, amp__mem_current(AMP_MEM_ACTIVATION), AMP_NEW_UNSCOPED)
                          : NULL;
    bool owned = false;
    const float *px = idx ? amp__f32_view(x, &owned) : NULL;
    float *po = px ? amp__f32_out_begin(out) : NULL;
    if (!po) {
        if (px) amp__f32_done(x, px, owned);
        amp__release(idx);
        amp_tensor_free(out);
        out = NULL;
        goto done;
    }
    amp_k_max_dim(px, outer, len, inner, po, amp__data(idx));
    amp__f32_out_end(out, po);
    amp__f32_done(x, px, owned);
    if (amp__needs_grad(1, in)) {
        amp_node *node = amp__node_new(fn, max_backward, 1, in, sizeof(dim_ctx));
        if (!node) {
            amp__release(idx);
            amp_tensor_free(out);
            out = NULL;
            goto done;
        }
        amp__node_save(node, idx);
        ((dim_ctx *)node->ctx)->dim = d;
        amp__node_attach(node, out);
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
typedef struct {
    bool red[AMP_MAX_DIMS];
    double p;
} norm_ctx;

static amp_status norm_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    norm_ctx *c = n->ctx;
    const amp_tensor *x = n->saved[0], *nrm = n->saved[1];
    double p = c->p;
    amp_status st = AMP_OK;
    if (p == 0) { /* piecewise constant */
        gin[0] = amp__f32_grad(x->ndim, x->shape, true);
        return gin[0] ? AMP_OK : amp_last_status();
    }
    amp_tensor *gx = broadcast_back(gout[0], x->ndim, x->shape, c->red, 1.0f);
    amp_tensor *nb = gx ? broadcast_back(nrm, x->ndim, x->shape, c->red, 1.0f) : NULL;
    bool ox = false;
    const float *px = nb ? amp__f32_view(x, &ox) : NULL;
    if (!px) {
        amp__release(gx);
        amp__release(nb);
        return amp_last_status();
    }
    float *q = amp__data(gx);
    const float *pn = amp__data(nb);
    int64_t N = amp_tensor_numel(x);
    if (p == 2) {
        for (int64_t i = 0; i < N; i++) q[i] = pn[i] == 0 ? 0.0f : q[i] * px[i] / pn[i];
    } else if (p == 1) {
        for (int64_t i = 0; i < N; i++) q[i] = px[i] > 0 ? q[i] : px[i] < 0 ? -q[i] : 0.0f;
    } else if (isinf(p)) {
        /* the gradient is shared evenly by the elements attaining the norm */
        float *m = amp__ws_alloc((size_t)N * sizeof(float));
        if (!m) {
            st = amp_last_status();
            goto out;
        }
        for (int64_t i = 0; i < N; i++) m[i] = (fabsf(px[i]) == pn[i] || isnan(px[i])) ? 1.0f : 0.0f;
        size_t cb;
        float *cnt = reduce_multi(m, x->ndim, x->shape, c->red, RED_SUM, &cb);
        float *pc = cnt ? amp__ws_alloc((size_t)N * sizeof(float)) : NULL;
        if (!pc) {
            amp__ws_free(cnt, cb);
            amp__ws_free(m, (size_t)N * sizeof(float));
            st = amp_last_status();
            goto out;
        }
        int64_t bst[AMP_MAX_DIMS];
        back_strides(x->ndim, x->shape, c->red, bst);
        amp_k_broadcast(cnt, bst, x->ndim, x->shape, 1.0f, pc);
        amp__ws_free(cnt, cb);
        for (int64_t i = 0; i < N; i++) {
            float s = px[i] > 0 ? 1.0f : px[i] < 0 ? -1.0f : 0.0f;
            q[i] = m[i] != 0 ? s * q[i] / pc[i] : 0.0f;
        }
        amp__ws_free(pc, (size_t)N * sizeof(float));
        amp__ws_free(m, (size_t)N * sizeof(float));
    } else {
        for (int64_t i = 0; i < N; i++) {
            if (pn[i] == 0 || px[i] == 0) { /* torch: 0 (not 0 * inf) at x = 0 for any p */
                q[i] = 0;
                continue;
            }
            double a = fabs((double)px[i]);
            double s = px[i] > 0 ? 1.0 : px[i] < 0 ? -1.0 : 0.0;
            q[i] = (float)(s * pow(a, p - 1) * q[i] / pow(pn[i], p - 1));
        }
    }
out:
    amp__f32_done(x, px, ox);
    amp__release(nb);
    if (st != AMP_OK) {
        amp__release(gx);
        return st;
    }
    gin[0] = gx;
    return AMP_OK;
}

amp_tensor *amp_norm(amp_tensor *x, double p, const int *dims, int ndims, bool keepdim) {
    static const char *fn = "amp_norm";
    if (!amp__check_float(fn, x, "x")) return NULL;
    if (isnan(p)) return amp_error_null(AMP_ERR_ARG, "%s: p is NaN", fn);
    bool red[AMP_MAX_DIMS];
    if (parse_dims(fn, x, dims, ndims, red) != AMP_OK) return NULL;
    if (isinf(p) && reduced_count(x, red) == 0) {
        char b[AMP_SHAPE_BUF];
        return amp_error_null(AMP_ERR_SHAPE, "%s: the %s-norm of zero elements is undefined (x has shape %s)", fn,
                              p > 0 ? "inf" : "-inf", amp__shape_fmt(x->ndim, x->shape, b, sizeof b));
    }
    amp_tensor *in[1] = {x};
    int mask = amp__autocast(AMP_OP_NORM, in, 1);
    if (mask < 0) return NULL;
    x = in[0];
    amp_tensor *out = NULL;
    int64_t shape[AMP_MAX_DIMS];
    int nd = out_shape(x, red, keepdim, shape);
    int64_t N = amp_tensor_numel(x);
    float *y = amp__to_f32(x);
    if (!y) goto done;
    int op = RED_SUM;
    if (p == 2) {
        for (int64_t i = 0; i < N; i++) y[i] *= y[i];
    } else if (p == 1) {
        for (int64_t i = 0; i < N; i++) y[i] = fabsf(y[i]);
    } else if (p == 0) {
        for (int64_t i = 0; i < N; i++) y[i] = y[i] != 0 ? 1.0f : 0.0f;
    } else if (isinf(p)) {
        op = RED_MAX;
        for (int64_t i = 0; i < N; i++) y[i] = p > 0 ? fabsf(y[i]) : -fabsf(y[i]);
    } else {
        for (int64_t i = 0; i < N; i++) y[i] = (float)pow(fabs((double)y[i]), p);
    }
    size_t nb;
    float *r = reduce_multi(y, x->ndim, x->shape, red, op, &nb);
    amp__ws_free(y, (size_t)N * sizeof(float));
    if (!r) goto done;
    out = amp__empty_out(fn, x->dtype, nd, shape);
    if (out) {
        int64_t on = amp_tensor_numel(out);
        for (int64_t i = 0; i < on; i++) {
            if (p == 2) r[i] = sqrtf(r[i]);
            else if (isinf(p) && p < 0) r[i] = -r[i];
            else if (p != 1 && p != 0 && !isinf(p)) r[i] = (float)pow((double)r[i], 1.0 / p);
        }
        amp__from_f32(out, r);
    }
    amp__ws_free(r, nb);
    if (out && amp__needs_grad(1, in)) {
        amp_node *node = amp__node_new(fn, norm_backward, 1, in, sizeof(norm_ctx));
        if (!node) {
            amp_tensor_free(out);
            out = NULL;
            goto done;
        }
        amp__node_save(node, x);
        amp__node_save(node, out);
        norm_ctx *c = node->ctx;
        memcpy(c->red, red, sizeof red);
        c->p = p;
        amp__node_attach(node, out);
    }
done:
    amp__autocast_done(in, 1, mask);
    return out;
}

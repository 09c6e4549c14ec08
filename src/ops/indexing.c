/* Integer indexing and triangular masks, as torch:
 *   index_select(x, dim, index[n])      out.shape[dim] = n, out[.., i, ..] = x[.., index[i], ..]
 *   gather(x, dim, index)               out = index-shaped, out[p] = x[p with p[dim] = index[p]]
 *   tril / triu(x, diagonal)            zero above / below the diagonal of the last two dims
 *   masked_fill(x, mask, value)         value where mask (u8, broadcast to x) is nonzero
 * Values are copied in x's dtype (no conversion). Backward: index_select and
 * gather scatter-add the upstream gradient into an f32 zero tensor of x's
 * shape (repeated indices accumulate, as torch's index_add / scatter_add),
 * tril/triu mask the gradient the same way, masked_fill zeroes it where the
 * mask is set. */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "ops/f32_util.h"

static int64_t idx_at(const amp_tensor *idx, int64_t flat) {
    const void *p = amp__elem_ptr(idx, flat);
    return idx->dtype == AMP_I64 ? *(const int64_t *)p : (int64_t) * (const int32_t *)p;
}

/* multi-index of flat element e of shape (row-major) */
static void unflat(int64_t e, int nd, const int64_t *shape, int64_t *ix) {
    for (int d = nd - 1; d >= 0; d--) {
        ix[d] = shape[d] ? e % shape[d] : 0;
        e = shape[d] ? e / shape[d] : 0;
    }
}

static int64_t flat_of(int nd, const int64_t *shape, const int64_t *ix) {
    int64_t f = 0;
    for (int d = 0; d < nd; d++) f = f * shape[d] + ix[d];
    return f;
}

/* The logical (row-major) flat position in x of each output element:
 * src[e] for e < numel(out). */
typedef struct {
    int dim;
    int64_t n;      /* output elements */
    int64_t *src;   /* owned (malloc) */
} gidx_ctx;

static void gidx_free(void *p) { free(((gidx_ctx *)p)->src); }

static amp_status gidx_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    gidx_ctx *c = n->ctx;
    amp_edge *e = &n->inputs[0];
    amp_tensor *gx = amp__f32_grad(e->ndim, e->shape, true);
    if (!gx) return amp_last_status();
    bool og = false;
    const float *pg = amp__f32_view(gout[0], &og);
    if (!pg) {
        amp__release(gx);
        return amp_last_status();
    }
    float *q = amp__data(gx);
    for (int64_t i = 0; i < c->n; i++) q[c->src[i]] += pg[i];
    amp__f32_done(gout[0], pg, og);
    gin[0] = gx;
    return AMP_OK;
}

/* out[e] = x[src[e]] in x's dtype, and the graph node. Takes src. */
static amp_tensor *gather_out(const char *fn, amp_op_id op, amp_tensor *x, int nd, const int64_t *oshape,
                              int64_t *src, int64_t n) {
    amp_tensor *in[1] = {x};
    int mask = amp__autocast(op, in, 1);
    if (mask < 0) {
        free(src);
        return NULL;
    }
    x = in[0];
    amp_tensor *out = amp__empty_out(fn, x->dtype, nd, oshape);
    if (!out) goto fail;
    size_t es = amp_dtype_size(x->dtype);
    char *dst = amp__data(out);
    for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * es, amp__elem_ptr(x, src[i]), es);
    if (amp__needs_grad(1, in)) {
        amp_node *node = amp__node_new(fn, gidx_backward, 1, in, sizeof(gidx_ctx));
        if (!node) goto fail;
        *(gidx_ctx *)node->ctx = (gidx_ctx){0, n, src};
        node->ctx_free = gidx_free;
        src = NULL;
        amp__node_attach(node, out);
    }
    free(src);
    amp__autocast_done(in, 1, mask);
    return out;
fail:
    free(src);
    amp_tensor_free(out);
    amp__autocast_done(in, 1, mask);
    return NULL;
}

static int64_t *src_alloc(const char *fn, int64_t n) {
    int64_t *s = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!s) amp_error(AMP_ERR_NOMEM, "%s: out of memory for %lld indices", fn, (long long)n);
    return s;
}

amp_tensor *amp_index_select(amp_tensor *x, int dim, amp_tensor *index) {
    static const char *fn = "amp_index_select";
    if (!amp__arg(fn, x, "x") || !amp__arg(fn, index, "index")) return NULL;
    if (!amp__check_float64ok(fn, x, "x") || !amp__check_index(fn, index, "index")) return NULL;
    if (index->ndim > 1)
        return amp_error_null(AMP_ERR_SHAPE, "%s: index must be 0-d or 1-d, got %d dims", fn, index->ndim);
    int d;
    if (amp__norm_dim0(fn, dim, x, &d) != AMP_OK) return NULL;
    int nd = x->ndim ? x->ndim : 1;
    int64_t xs[AMP_MAX_DIMS], os[AMP_MAX_DIMS], ni = amp_tensor_numel(index);
    if (x->ndim == 0) xs[0] = 1;
    else memcpy(xs, x->shape, sizeof(int64_t) * (size_t)nd);
    for (int64_t i = 0; i < ni; i++) {
        int64_t v = idx_at(index, i);
        if (v < 0 || v >= xs[d])
            return amp_error_null(AMP_ERR_RANGE, "%s: index %lld (element %lld of index) is out of range for dim %d "
                                                 "of size %lld", fn, (long long)v, (long long)i, d, (long long)xs[d]);
    }
    memcpy(os, xs, sizeof os);
    os[d] = ni;
    amp_ck ck = AMP_CK(fn, "result size"); /* numel(x) / size(dim) * numel(index) may exceed int64 */
    int64_t n = amp_ck_numel(&ck, nd, os);
    if (!ck.ok) return NULL;
    int64_t *src = src_alloc(fn, n);
    if (!src) return NULL;
    int64_t ix[AMP_MAX_DIMS];
    for (int64_t e = 0; e < n; e++) {
        unflat(e, nd, os, ix);
        ix[d] = idx_at(index, ix[d]);
        src[e] = flat_of(nd, xs, ix);
    }
    /* a 0-d x with a 0-d index stays 0-d; otherwise index's length along dim */
    int ond = (x->ndim == 0 && index->ndim == 0) ? 0 : nd;
    return gather_out(fn, AMP_OP_INDEX_SELECT, x, ond, os, src, n);
}

amp_tensor *amp_gather(amp_tensor *x, int dim, amp_tensor *index) {
    static const char *fn = "amp_gather";
    if (!amp__arg(fn, x, "x") || !amp__arg(fn, index, "index")) return NULL;
    if (!amp__check_float64ok(fn, x, "x") || !amp__check_index(fn, index, "index")) return NULL;
    int d;
    if (amp__norm_dim0(fn, dim, x, &d) != AMP_OK) return NULL;
    char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
    if (index->ndim != x->ndim)
        return amp_error_null(AMP_ERR_SHAPE, "%s: index %s must have as many dims as x %s", fn,
                              amp__shape_fmt(index->ndim, index->shape, a, sizeof a),
                              amp__shape_fmt(x->ndim, x->shape, b, sizeof b));
    for (int i = 0; i < x->ndim; i++)
        if (i != d && index->shape[i] > x->shape[i])
            return amp_error_null(AMP_ERR_SHAPE, "%s: index %s is larger than x %s in dim %d (only dim %d may be)", fn,
                                  amp__shape_fmt(index->ndim, index->shape, a, sizeof a),
                                  amp__shape_fmt(x->ndim, x->shape, b, sizeof b), i, d);
    int nd = x->ndim ? x->ndim : 1;
    int64_t xs[AMP_MAX_DIMS], os[AMP_MAX_DIMS];
    if (x->ndim == 0) xs[0] = os[0] = 1;
    else {
        memcpy(xs, x->shape, sizeof(int64_t) * (size_t)nd);
        memcpy(os, index->shape, sizeof(int64_t) * (size_t)nd);
    }
    int64_t n = amp_tensor_numel(index);
    int64_t *src = src_alloc(fn, n);
    if (!src) return NULL;
    int64_t ix[AMP_MAX_DIMS];
    for (int64_t e = 0; e < n; e++) {
        int64_t v = idx_at(index, e);
        if (v < 0 || v >= xs[d]) {
            free(src);
            return amp_error_null(AMP_ERR_RANGE, "%s: index %lld (element %lld of index) is out of range for dim %d "
                                                 "of size %lld", fn, (long long)v, (long long)e, d, (long long)xs[d]);
        }
        unflat(e, nd, os, ix);
        ix[d] = v;
        src[e] = flat_of(nd, xs, ix);
    }
    return gather_out(fn, AMP_OP_GATHER, x, x->ndim, os, src, n);
}

/* ---- masks: tril, triu, masked_fill --------------------------------------------------------------- */
typedef struct {
    int64_t diagonal;
    int kind; /* 0 tril, 1 triu, 2 masked_fill */
} tri_ctx;

/* keep element e of shape (last two dims rows x cols)? */
static inline bool tri_keep(const tri_ctx *c, int64_t e, int64_t rows, int64_t cols) {
    int64_t j = e % cols, i = (e / cols) % rows;
    return c->kind == 0 ? j - i <= c->diagonal : j - i >= c->diagonal;
}

/* mask broadcast to x's shape, as flags (malloc'd numel bytes) */
static unsigned char *mask_flags(const char *fn, const amp_tensor *mask, int nd, const int64_t *shape) {
    int64_t n = amp__numel(nd, shape);
    unsigned char *f = malloc((size_t)(n ? n : 1));
    if (!f) {
        amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        return NULL;
    }
    amp_tensor src = *mask;
    src.ndim = nd;
    memcpy(src.shape, shape, sizeof(int64_t) * (size_t)nd);
    amp__broadcast_strides(mask, nd, shape, src.stride);
    for (int64_t e = 0; e < n; e++) f[e] = *(const uint8_t *)amp__elem_ptr(&src, e) != 0;
    return f;
}

typedef struct {
    tri_ctx t;
    unsigned char *flags; /* masked_fill: owned */
} mask_ctx;

static void mask_ctx_free(void *p) { free(((mask_ctx *)p)->flags); }

static amp_status mask_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    mask_ctx *c = n->ctx;
    amp_edge *e = &n->inputs[0];
    amp_tensor *gx = amp__f32_grad(e->ndim, e->shape, false);
    if (!gx) return amp_last_status();
    bool og = false;
    const float *pg = amp__f32_view(gout[0], &og);
    if (!pg) {
        amp__release(gx);
        return amp_last_status();
    }
    float *q = amp__data(gx);
    int64_t cnt = amp__numel(e->ndim, e->shape);
    int64_t rows = e->ndim >= 2 ? e->shape[e->ndim - 2] : 1, cols = e->ndim >= 1 ? e->shape[e->ndim - 1] : 1;
    for (int64_t i = 0; i < cnt; i++) {
        bool keep = c->t.kind == 2 ? !c->flags[i] : tri_keep(&c->t, i, rows, cols);
        q[i] = keep ? pg[i] : 0.0f;
    }
    amp__f32_done(gout[0], pg, og);
    gin[0] = gx;
    return AMP_OK;
}

static amp_tensor *mask_op(const char *fn, amp_op_id op, amp_tensor *x, tri_ctx tc, unsigned char *flags, double value) {
    amp_tensor *in[1] = {x};
    int mask = amp__autocast(op, in, 1);
    if (mask < 0) {
        free(flags);
        return NULL;
    }
    x = in[0];
    amp_tensor *out = amp__empty_out(fn, x->dtype, x->ndim, x->shape);
    if (!out) goto fail;
    {
        int64_t cnt = amp_tensor_numel(x);
        int64_t rows = x->ndim >= 2 ? x->shape[x->ndim - 2] : 1, cols = x->ndim >= 1 ? x->shape[x->ndim - 1] : 1;
        size_t es = amp_dtype_size(x->dtype);
        char zero[8], fill[8];
        amp__store(zero, x->dtype, 0.0);
        amp__store(fill, x->dtype, value);
        char *dst = amp__data(out);
        for (int64_t i = 0; i < cnt; i++) {
            bool keep = tc.kind == 2 ? !flags[i] : tri_keep(&tc, i, rows, cols);
            memcpy(dst + (size_t)i * es, keep ? amp__elem_ptr(x, i) : tc.kind == 2 ? fill : zero, es);
        }
    }
    if (amp__needs_grad(1, in)) {
        amp_node *node = amp__node_new(fn, mask_backward, 1, in, sizeof(mask_ctx));
        if (!node) goto fail;
        *(mask_ctx *)node->ctx = (mask_ctx){tc, flags};
        node->ctx_free = mask_ctx_free;
        flags = NULL;
        amp__node_attach(node, out);
    }
    free(flags);
    amp__autocast_done(in, 1, mask);
    return out;
fail:
    free(flags);
    amp_tensor_free(out);
    amp__autocast_done(in, 1, mask);
    return NULL;
}

static amp_tensor *tri(const char *fn, amp_op_id op, amp_tensor *x, int64_t diagonal, int kind) {
    if (!amp__arg(fn, x, "x") || !amp__check_float64ok(fn, x, "x")) return NULL;
    if (x->ndim < 2) return amp_error_null(AMP_ERR_SHAPE, "%s: x must have at least 2 dims, got %d", fn, x->ndim);
    return mask_op(fn, op, x, (tri_ctx){diagonal, kind}, NULL, 0.0);
}

amp_tensor *amp_tril(amp_tensor *x, int64_t diagonal) { return tri("amp_tril", AMP_OP_TRIL, x, diagonal, 0); }
amp_tensor *amp_triu(amp_tensor *x, int64_t diagonal) { return tri("amp_triu", AMP_OP_TRIU, x, diagonal, 1); }

amp_tensor *amp_masked_fill(amp_tensor *x, amp_tensor *mask, double value) {
    static const char *fn = "amp_masked_fill";
    if (!amp__arg(fn, x, "x") || !amp__arg(fn, mask, "mask")) return NULL;
    if (amp__cpu_only(fn, x, "x") != AMP_OK || amp__cpu_only(fn, mask, "mask") != AMP_OK) return NULL;
    if (!amp__check_float64ok(fn, x, "x")) return NULL;
    if (mask->dtype != AMP_U8)
        return amp_error_null(AMP_ERR_DTYPE, "%s: mask has dtype %s; expected u8 (nonzero = fill)", fn,
                              amp_dtype_name(mask->dtype));
    int nd;
    int64_t bs[AMP_MAX_DIMS];
    if (amp__broadcast_shapes(fn, x, mask, &nd, bs) != AMP_OK) return NULL;
    if (nd != x->ndim || memcmp(bs, x->shape, sizeof(int64_t) * (size_t)nd) != 0) {
        char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
        return amp_error_null(AMP_ERR_SHAPE, "%s: mask %s must broadcast to x %s", fn,
                              amp__shape_fmt(mask->ndim, mask->shape, a, sizeof a),
                              amp__shape_fmt(x->ndim, x->shape, b, sizeof b));
    }
    unsigned char *f = mask_flags(fn, mask, x->ndim, x->shape);
    if (!f) return NULL;
    return mask_op(fn, AMP_OP_MASKED_FILL, x, (tri_ctx){0, 2}, f, value);
}

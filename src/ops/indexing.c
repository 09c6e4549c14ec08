/* Integer indexing and triangular masks, as torch:
 *   index_select(x, dim, index[n])      out.shape[dim] = n, out[.., i, ..] = x[.., index[i], ..]
 *   gather(x, dim, index)               out = index-shaped, out[p] = x[p with p[dim] = index[p]]
 *   tril / triu(x, diagonal)            zero above / below the diagonal of the last two dims
 *   masked_fill(x, mask, value)         value where mask (u8, broadcast to x) is nonzero
 * Values are copied in x's dtype (no conversion). Backward: index_select and
 * gather scatter-add the upstream gradient into an f32 zero tensor of x's
 * shape (repeated indices accumulate, as torch's index_add / scatter_add),
 * tril/triu mask the gradient the same way, masked_fill zeroes it where the
 * mask is set. Each computes through the backend of its tensors' device
 * (gather_flat and mask_fill, forward and backward); index_select and
 * gather read a device index back to the host to check it and make the
 * source positions (one synchronisation; the GPT does not use them). */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "kernels/backend.h"
#include "ops/op_util.h"
#include "tensor/f32_util.h"

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

/* The logical (row-major) flat position in x of each output element,
 * src[e] for e < numel(out), as an i64 tensor on x's device (kept by the
 * node for the backward). */
typedef struct {
    amp_tensor *src;
} gidx_ctx;

static void gidx_free(void *p) { amp__release(((gidx_ctx *)p)->src); }

static amp_status gidx_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    gidx_ctx *c = n->ctx;
    amp_edge *e = &n->inputs[0];
    const amp_backend *be = amp__backend_of(n->name, c->src);
    if (!be) return amp_last_status();
    return AMP_KCALL(be, gather, gather_flat_backward, n->name, c->src, gout[0], e->ndim, e->shape, &gin[0]);
}

/* The host array src (n positions) as an i64 tensor on device d (unscoped). */
static amp_tensor *src_tensor(const char *fn, amp_device d, const int64_t *src, int64_t n) {
    amp_tensor *t = amp__tensor_new_on(fn, d, AMP_I64, 1, &n, amp__mem_current(AMP_MEM_WORKSPACE), AMP_NEW_UNSCOPED);
    if (!t || n == 0) return t;
    const amp_backend *be = amp__backend(fn, d);
    amp_status st = be ? be->dev->from_host(amp__data(t), src, (size_t)n * sizeof(int64_t)) : amp_last_status();
    if (st != AMP_OK) {
        amp__release(t);
        return NULL;
    }
    return t;
}

/* out[e] = x[src[e]] in x's dtype (the backend's gather_flat), and the
 * graph node. Takes src (host, malloc'd). */
static amp_tensor *gather_out(const char *fn, amp_op_id op, amp_tensor *x, int nd, const int64_t *oshape,
                              int64_t *src, int64_t n) {
    amp_tensor *in[1] = {x};
    amp_device dev;
    int mask = amp__autocast_dev(op, in, 1, &dev);
    if (mask < 0) {
        free(src);
        return NULL;
    }
    x = in[0];
    amp_tensor *out = NULL, *st = NULL;
    const amp_backend *be = amp__backend(fn, dev);
    if (!be) goto fail;
    st = src_tensor(fn, dev, src, n);
    free(src);
    src = NULL;
    if (!st) goto fail;
    out = amp__empty_out_on(fn, dev, x->dtype, nd, oshape);
    if (!out) goto fail;
    if (n > 0 && AMP_KCALL(be, gather, gather_flat, fn, x, st, out) != AMP_OK) goto fail;
    if (amp__needs_grad(1, in)) {
        amp_node_spec spec = {.backward = gidx_backward, .ctx = &(gidx_ctx){st}, .ctx_size = sizeof(gidx_ctx),
                              .ctx_free = gidx_free};
        if (amp__node_record(fn, out, in, 1, &spec) != AMP_OK) goto fail;
        st = NULL; /* the node's */
    }
    return amp__op_end(fn, true, out, in, 1, mask, NULL, &st, 1);
fail:
    free(src);
    return amp__op_end(fn, false, out, in, 1, mask, NULL, &st, 1);
}

/* The index values on the host: index itself on the CPU, else a copy (a
 * device index is read back: one synchronisation; *tmp to release). */
static const amp_tensor *host_index(const char *fn, amp_tensor *x, amp_tensor *index, amp_tensor **tmp) {
    *tmp = NULL;
    const amp_tensor *both[2] = {x, index};
    static const char *const names[2] = {"x", "index"};
    amp_device dev;
    if (amp__same_device(fn, both, names, 2, &dev) != AMP_OK) return NULL;
    if (dev == AMP_DEVICE_CPU) return index;
    if (!amp__backend(fn, dev)) return NULL;
    *tmp = amp__tensor_new(fn, index->dtype, index->ndim, index->shape, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
    if (*tmp && amp__copy_convert(*tmp, index) != AMP_OK) {
        amp__release(*tmp);
        *tmp = NULL;
    }
    return *tmp;
}

typedef amp_tensor *(*index_impl)(const char *fn, amp_tensor *x, int d, const amp_tensor *index);

/* impl(fn, x, d, the index values on the host) */
static amp_tensor *with_host_index(const char *fn, amp_tensor *x, int d, amp_tensor *index, index_impl impl) {
    amp_tensor *hidx = NULL;
    const amp_tensor *hi = host_index(fn, x, index, &hidx);
    if (!hi) return NULL;
    amp_tensor *r = impl(fn, x, d, hi);
    amp__release(hidx);
    return r;
}

static int64_t *src_alloc(const char *fn, int64_t n) {
    int64_t *s = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!s) amp_error(AMP_ERR_NOMEM, "%s: out of memory for %lld indices", fn, (long long)n);
    return s;
}

static amp_tensor *index_select_impl(const char *fn, amp_tensor *x, int d, const amp_tensor *index);

amp_tensor *amp_index_select(amp_tensor *x, int dim, amp_tensor *index) {
    static const char *fn = "amp_index_select";
    if (!amp__arg(fn, x, "x") || !amp__arg(fn, index, "index")) return NULL;
    if (!amp__check_float64ok(fn, x, "x") || !amp__check_index_dev(fn, index, "index")) return NULL;
    if (index->ndim > 1)
        return amp_error_null(AMP_ERR_SHAPE, "%s: index must be 0-d or 1-d, got %d dims", fn, index->ndim);
    int d;
    if (amp__norm_dim0(fn, dim, x, &d) != AMP_OK) return NULL;
    return with_host_index(fn, x, d, index, index_select_impl);
}

static amp_tensor *index_select_impl(const char *fn, amp_tensor *x, int d, const amp_tensor *index) {
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

static amp_tensor *gather_impl(const char *fn, amp_tensor *x, int d, const amp_tensor *index);

amp_tensor *amp_gather(amp_tensor *x, int dim, amp_tensor *index) {
    static const char *fn = "amp_gather";
    if (!amp__arg(fn, x, "x") || !amp__arg(fn, index, "index")) return NULL;
    if (!amp__check_float64ok(fn, x, "x") || !amp__check_index_dev(fn, index, "index")) return NULL;
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
    return with_host_index(fn, x, d, index, gather_impl);
}

static amp_tensor *gather_impl(const char *fn, amp_tensor *x, int d, const amp_tensor *index) {
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
/* The backend's mask_fill computes forward (x kept or filled) and backward
 * (the gradient kept or zeroed the same way). masked_fill's node keeps a
 * contiguous u8 copy of the mask broadcast to x (later changes to the mask
 * do not change the gradient, as before). */
typedef struct {
    int64_t diagonal;
    int kind; /* 0 tril, 1 triu, 2 masked_fill */
    amp_tensor *mask; /* kind 2: owned */
} mask_ctx;

static void mask_ctx_free(void *p) { amp__release(((mask_ctx *)p)->mask); }

static amp_status mask_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    mask_ctx *c = n->ctx;
    amp_edge *e = &n->inputs[0];
    amp_device dev = amp__dev(gout[0]);
    const amp_backend *be = amp__backend(n->name, dev);
    if (!be) return amp_last_status();
    amp_tensor *gx =
        amp__tensor_new_on("amp_backward", dev, AMP_F32, e->ndim, e->shape, amp__mem_current(AMP_MEM_WORKSPACE), AMP_NEW_UNSCOPED);
    if (!gx) return amp_last_status();
    amp_status st = amp_tensor_numel(gx) ? AMP_KCALL(be, gather, mask_fill, n->name, gout[0], c->kind, c->diagonal, c->mask, 0.0, gx)
                                         : AMP_OK;
    return amp__grad_result(st, gx, &gin[0]);
}

/* mask (kind 2): u8 on x's device, already known to broadcast to x */
static amp_tensor *mask_op(const char *fn, amp_op_id op, amp_tensor *x, int kind, int64_t diagonal, amp_tensor *mask,
                           double value) {
    amp_tensor *in[1] = {x};
    amp_device dev;
    int am = amp__autocast_dev(op, in, 1, &dev);
    if (am < 0) return NULL;
    x = in[0];
    amp_tensor *out = NULL, *mview = NULL, *mcopy = NULL;
    const amp_backend *be = amp__backend(fn, dev);
    if (!be) goto fail;
    if (kind == 2) { /* the mask seen at x's shape (0 strides where it broadcasts) */
        int64_t bst[AMP_MAX_DIMS];
        amp__broadcast_strides(mask, x->ndim, x->shape, bst);
        if (!(mview = amp__view(mask, x->ndim, x->shape, bst, mask->offset))) goto fail;
    }
    out = amp__empty_out_on(fn, dev, x->dtype, x->ndim, x->shape);
    if (!out) goto fail;
    if (amp_tensor_numel(out) && AMP_KCALL(be, gather, mask_fill, fn, x, kind, diagonal, mview, value, out) != AMP_OK) goto fail;
    if (amp__needs_grad(1, in)) {
        if (kind == 2) {
            mcopy = amp__tensor_new_on(fn, dev, AMP_U8, x->ndim, x->shape, amp__mem_current(AMP_MEM_WORKSPACE),
                                       AMP_NEW_UNSCOPED);
            if (!mcopy || amp__copy_convert(mcopy, mview) != AMP_OK) goto fail;
        }
        amp_node_spec spec = {.backward = mask_backward, .ctx = &(mask_ctx){diagonal, kind, mcopy},
                              .ctx_size = sizeof(mask_ctx), .ctx_free = mask_ctx_free};
        if (amp__node_record(fn, out, in, 1, &spec) != AMP_OK) goto fail;
        mcopy = NULL; /* the node's */
    }
    amp_tensor_free(mview);
    amp__autocast_done(in, 1, am);
    return out;
fail:
    amp_tensor_free(mview);
    amp__release(mcopy);
    amp_tensor_free(out);
    amp__autocast_done(in, 1, am);
    return NULL;
}

static amp_tensor *tri(const char *fn, amp_op_id op, amp_tensor *x, int64_t diagonal, int kind) {
    if (!amp__arg(fn, x, "x") || !amp__check_float64ok(fn, x, "x")) return NULL;
    if (x->ndim < 2) return amp_error_null(AMP_ERR_SHAPE, "%s: x must have at least 2 dims, got %d", fn, x->ndim);
    return mask_op(fn, op, x, kind, diagonal, NULL, 0.0);
}

amp_tensor *amp_tril(amp_tensor *x, int64_t diagonal) { return tri("amp_tril", AMP_OP_TRIL, x, diagonal, 0); }
amp_tensor *amp_triu(amp_tensor *x, int64_t diagonal) { return tri("amp_triu", AMP_OP_TRIU, x, diagonal, 1); }

amp_tensor *amp_masked_fill(amp_tensor *x, amp_tensor *mask, double value) {
    static const char *fn = "amp_masked_fill";
    if (!amp__arg(fn, x, "x") || !amp__arg(fn, mask, "mask")) return NULL;
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
    const amp_tensor *both[2] = {x, mask};
    static const char *const names[2] = {"x", "mask"};
    if (amp__same_device(fn, both, names, 2, NULL) != AMP_OK) return NULL;
    return mask_op(fn, AMP_OP_MASKED_FILL, x, 2, 0, mask, value);
}

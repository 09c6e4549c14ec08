/* Casts, views and shape ops: to, contiguous, clone, reshape, flatten,
 * transpose, permute, slice, expand, squeeze, unsqueeze, cat, stack. */
#include <string.h>

#include "ops/op_util.h"

/* ---- helpers ------------------------------------------------------------------- */
/* A contiguous copy of x (no autograd), dtype dt, on x's device (its
 * backend's copy converts). */
static amp_tensor *copy_as(const char *fn, const amp_tensor *x, amp_dtype dt) {
    amp_tensor *out = amp__empty_out_on(fn, amp__dev(x), dt, x->ndim, x->shape);
    if (!out) return NULL;
    if (amp__copy_convert(out, x) != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

/* Zero-filled contiguous tensor on device d (slice's gradients). */
static amp_tensor *zeros_on(amp_device d, amp_dtype dt, int ndim, const int64_t *shape, amp_mem_category c) {
    amp_tensor *z = amp__tensor_new_on("amp_backward", d, dt, ndim, shape, c, 0);
    if (!z) return NULL;
    if (d == AMP_DEVICE_CPU) {
        memset(z->storage->data, 0, z->storage->nbytes);
    } else if (amp_tensor_fill_(z, 0.0) != AMP_OK) {
        amp__release(z);
        return NULL;
    }
    return z;
}

/* Reshape without autograd: a view when x is contiguous, else a copy. */
static amp_tensor *reshape_raw(const char *fn, const amp_tensor *x, int ndim, const int64_t *shape) {
    int64_t st[AMP_MAX_DIMS];
    amp__contig_strides(ndim, shape, st);
    if (amp_tensor_is_contiguous(x)) return amp__view(x, ndim, shape, st, x->offset);
    amp_tensor *c = copy_as(fn, x, x->dtype);
    if (!c) return NULL;
    amp_tensor *v = amp__view(c, ndim, shape, st, c->offset);
    amp_tensor_free(c);
    return v;
}

static amp_backward_fn diff_of(amp_backward_fn bw);

static amp_tensor *finish(amp_tensor *out, amp_tensor *x, const char *fn, amp_backward_fn bw, size_t ctx_size,
                          void **ctx) {
    if (ctx) *ctx = NULL;
    if (!out) return NULL;
    if (amp__needs_grad(1, &x)) {
        amp_node *n = amp__node_new(fn, bw, 1, &x, ctx_size);
        if (!n) {
            amp_tensor_free(out);
            return NULL;
        }
        n->backward_diff = diff_of(bw);
        if (ctx) *ctx = n->ctx;
        amp__node_attach(n, out);
    }
    return out;
}

/* ---- to / contiguous / clone ------------------------------------------------------ */
static amp_status identity_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    AMP_UNUSED(n);
    gin[0] = amp__alias(gout[0]); /* the engine casts to the input's dtype */
    return gin[0] ? AMP_OK : amp_last_status();
}

amp_tensor *amp_to(amp_tensor *x, amp_dtype dt) {
    static const char *fn = "amp_to";
    if (!amp__arg(fn, x, "x")) return NULL;
    if (!amp_dtype_valid(dt)) return amp_error_null(AMP_ERR_DTYPE, "%s: dtype %d is not valid", fn, (int)dt);
    if (x->requires_grad && amp_grad_enabled() && !amp_dtype_is_float(dt))
        return amp_error_null(AMP_ERR_DTYPE, "%s: cannot cast a tensor that requires grad to %s", fn, amp_dtype_name(dt));
    amp_tensor *out = dt == x->dtype ? amp__view(x, x->ndim, x->shape, x->stride, x->offset) : copy_as(fn, x, dt);
    return finish(out, x, fn, identity_backward, 0, NULL);
}

amp_tensor *amp_contiguous(amp_tensor *x) {
    static const char *fn = "amp_contiguous";
    if (!amp__arg(fn, x, "x")) return NULL;
    amp_tensor *out = amp_tensor_is_contiguous(x) ? amp__view(x, x->ndim, x->shape, x->stride, x->offset)
                                                  : copy_as(fn, x, x->dtype);
    return finish(out, x, fn, identity_backward, 0, NULL);
}

amp_tensor *amp_clone(amp_tensor *x) {
    static const char *fn = "amp_clone";
    if (!amp__arg(fn, x, "x")) return NULL;
    return finish(copy_as(fn, x, x->dtype), x, fn, identity_backward, 0, NULL);
}

/* ---- reshape family ------------------------------------------------------------------ */
static amp_status reshape_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    gin[0] = reshape_raw("amp_backward", gout[0], n->inputs[0].ndim, n->inputs[0].shape);
    return gin[0] ? AMP_OK : amp_last_status();
}

amp_tensor *amp__reshape_view(const char *fn, amp_tensor *x, int ndim, const int64_t *shape) {
    if (!amp__arg(fn, x, "x")) return NULL;
    if (ndim < 0 || ndim > AMP_MAX_DIMS) return amp_error_null(AMP_ERR_ARG, "%s: ndim %d is outside [0, 8]", fn, ndim);
    if (ndim > 0 && !shape) return amp_error_null(AMP_ERR_ARG, "%s: shape is NULL", fn);
    int64_t s[AMP_MAX_DIMS];
    int infer = -1;
    int64_t known = 1, n = amp_tensor_numel(x);
    amp_ck ck = AMP_CK(fn, "shape");
    for (int i = 0; i < ndim; i++) {
        s[i] = shape[i];
        if (s[i] == -1) {
            if (infer >= 0) return amp_error_null(AMP_ERR_ARG, "%s: only one dimension can be -1", fn);
            infer = i;
        } else if (s[i] < 0) {
            return amp_error_null(AMP_ERR_ARG, "%s: size %lld of dim %d is negative", fn, (long long)s[i], i);
        } else {
            known = amp_ck_mul(&ck, known, s[i]); /* 4 * (2^62 + 6) must not wrap to 24 */
        }
    }
    if (!ck.ok) return NULL;
    if (infer >= 0) {
        if (known == 0 || n % known != 0) goto bad;
        s[infer] = n / known;
    } else if (known != n) {
        goto bad;
    }
    /* an empty tensor's other sizes obey the creation bound too ([0, 2^62] of f32 does not) */
    if (amp__check_extent(fn, "shape", ndim, s, x->dtype) != AMP_OK) return NULL;
    return finish(reshape_raw(fn, x, ndim, s), x, fn, reshape_backward, 0, NULL);
bad:;
    char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
    return amp_error_null(AMP_ERR_SHAPE, "%s: cannot reshape %s (%lld elements) to %s", fn,
                          amp__shape_fmt(x->ndim, x->shape, a, sizeof a), (long long)n, amp__shape_fmt(ndim, shape, b, sizeof b));
}

amp_tensor *amp_reshape(amp_tensor *x, int ndim, const int64_t *shape) {
    return amp__reshape_view("amp_reshape", x, ndim, shape);
}

amp_tensor *amp_flatten(amp_tensor *x, int start_dim, int end_dim) {
    static const char *fn = "amp_flatten";
    if (!amp__arg(fn, x, "x")) return NULL;
    if (x->ndim == 0) return amp__reshape_view(fn, x, 1, AMP_SHAPE(1));
    int s, e;
    if (amp__norm_dim(fn, start_dim, x->ndim, &s) || amp__norm_dim(fn, end_dim, x->ndim, &e)) return NULL;
    if (s > e) return amp_error_null(AMP_ERR_ARG, "%s: start_dim %d comes after end_dim %d", fn, start_dim, end_dim);
    int64_t shape[AMP_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < s; i++) shape[nd++] = x->shape[i];
    amp_ck ck = AMP_CK(fn, "shape");
    int64_t m = amp_ck_numel(&ck, e - s + 1, x->shape + s); /* sizes of one tensor: cannot fail */
    shape[nd++] = m;
    for (int i = e + 1; i < x->ndim; i++) shape[nd++] = x->shape[i];
    return amp__reshape_view(fn, x, nd, shape);
}

amp_tensor *amp_squeeze(amp_tensor *x, int dim) {
    static const char *fn = "amp_squeeze";
    if (!amp__arg(fn, x, "x")) return NULL;
    if (x->ndim == 0) return amp__reshape_view(fn, x, 0, NULL);
    int d;
    if (amp__norm_dim(fn, dim, x->ndim, &d)) return NULL;
    int64_t shape[AMP_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < x->ndim; i++)
        if (i != d || x->shape[i] != 1) shape[nd++] = x->shape[i];
    return amp__reshape_view(fn, x, nd, shape);
}

amp_tensor *amp_unsqueeze(amp_tensor *x, int dim) {
    static const char *fn = "amp_unsqueeze";
    if (!amp__arg(fn, x, "x")) return NULL;
    if (x->ndim >= AMP_MAX_DIMS) return amp_error_null(AMP_ERR_SHAPE, "%s: x already has %d dims", fn, AMP_MAX_DIMS);
    int d;
    if (amp__norm_dim(fn, dim, x->ndim + 1, &d)) return NULL;
    int64_t shape[AMP_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i <= x->ndim; i++) {
        if (i == d) shape[nd++] = 1;
        if (i < x->ndim) shape[nd++] = x->shape[i];
    }
    return amp__reshape_view(fn, x, nd, shape);
}

/* ---- transpose / permute ----------------------------------------------------------------- */
typedef struct {
    int perm[AMP_MAX_DIMS];
} perm_ctx;

static amp_tensor *permute_raw(const amp_tensor *x, const int *perm) {
    int64_t shape[AMP_MAX_DIMS], stride[AMP_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) {
        shape[i] = x->shape[perm[i]];
        stride[i] = x->stride[perm[i]];
    }
    return amp__view(x, x->ndim, shape, stride, x->offset);
}

/* gout[0] permuted back: a view (backward), or with its history (create_graph) */
static amp_status permute_back(amp_node *n, amp_tensor *const *gout, amp_tensor **gin, bool diff) {
    perm_ctx *c = n->ctx;
    int inv[AMP_MAX_DIMS];
    for (int i = 0; i < gout[0]->ndim; i++) inv[c->perm[i]] = i;
    gin[0] = diff ? amp_permute(gout[0], inv) : permute_raw(gout[0], inv);
    return gin[0] ? AMP_OK : amp_last_status();
}

static amp_status permute_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    return permute_back(n, gout, gin, false);
}

amp_tensor *amp_permute(amp_tensor *x, const int *dims) {
    static const char *fn = "amp_permute";
    if (!amp__arg(fn, x, "x")) return NULL;
    if (x->ndim > 0 && !dims) return amp_error_null(AMP_ERR_ARG, "%s: dims is NULL", fn);
    int perm[AMP_MAX_DIMS], seen[AMP_MAX_DIMS] = {0};
    for (int i = 0; i < x->ndim; i++) {
        if (amp__norm_dim(fn, dims[i], x->ndim, &perm[i])) return NULL;
        if (seen[perm[i]]++) return amp_error_null(AMP_ERR_ARG, "%s: dim %d appears twice in dims", fn, dims[i]);
    }
    void *ctx;
    amp_tensor *out = finish(permute_raw(x, perm), x, fn, permute_backward, sizeof(perm_ctx), &ctx);
    if (out && ctx) memcpy(((perm_ctx *)ctx)->perm, perm, sizeof perm);
    return out;
}

amp_tensor *amp_transpose(amp_tensor *x, int dim0, int dim1) {
    static const char *fn = "amp_transpose";
    if (!amp__arg(fn, x, "x")) return NULL;
    if (x->ndim == 0) return amp_permute(x, NULL);
    int a, b;
    if (amp__norm_dim(fn, dim0, x->ndim, &a) || amp__norm_dim(fn, dim1, x->ndim, &b)) return NULL;
    int perm[AMP_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) perm[i] = i;
    perm[a] = b;
    perm[b] = a;
    void *ctx;
    amp_tensor *out = finish(permute_raw(x, perm), x, "amp_transpose", permute_backward, sizeof(perm_ctx), &ctx);
    if (out && ctx) memcpy(((perm_ctx *)ctx)->perm, perm, sizeof perm);
    return out;
}

/* ---- slice --------------------------------------------------------------------------------- */
typedef struct {
    int dim;
    int64_t start, step;
} slice_ctx;

static amp_status slice_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    slice_ctx *c = n->ctx;
    amp_edge *e = &n->inputs[0];
    amp_tensor *g = zeros_on(amp__dev(gout[0]), gout[0]->dtype, e->ndim, e->shape, AMP_MEM_WORKSPACE);
    if (!g) return amp_last_status();
    int64_t shape[AMP_MAX_DIMS], stride[AMP_MAX_DIMS];
    amp_ck ck = AMP_CK("amp_backward", "slice");
    for (int i = 0; i < g->ndim; i++) {
        shape[i] = gout[0]->shape[i];
        stride[i] = g->stride[i];
        /* a dim of one element never moves by its stride (a step near 2^63 would overflow it) */
        if (i == c->dim && shape[i] > 1) stride[i] = amp_ck_mul(&ck, g->stride[i], c->step);
    }
    int64_t off = amp_ck_mul(&ck, c->start, g->stride[c->dim]);
    if (!ck.ok) {
        amp__release(g);
        return amp_last_status();
    }
    amp_tensor *win = amp__view(g, g->ndim, shape, stride, off);
    amp_status st = win ? amp__copy_convert(win, gout[0]) : amp_last_status();
    amp__release(win);
    return amp__grad_result(st, g, &gin[0]);
}

amp_tensor *amp_slice(amp_tensor *x, int dim, int64_t start, int64_t end, int64_t step) {
    static const char *fn = "amp_slice";
    if (!amp__arg(fn, x, "x")) return NULL;
    int d;
    if (amp__norm_dim(fn, dim, x->ndim, &d)) return NULL;
    if (step < 1) return amp_error_null(AMP_ERR_ARG, "%s: step %lld must be >= 1", fn, (long long)step);
    int64_t size = x->shape[d];
    if (start < 0) start += size;
    if (end < 0) end += size;
    if (start < 0) start = 0;
    if (start > size) start = size;
    if (end > size) end = size;
    if (end < start) end = start;
    int64_t shape[AMP_MAX_DIMS], stride[AMP_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    memcpy(stride, x->stride, sizeof stride);
    /* ceil((end - start) / step) without end - start + step - 1, which wraps for a step near 2^63 */
    int64_t len = end - start; /* 0 <= len <= size */
    shape[d] = len == 0 ? 0 : (len - 1) / step + 1;
    amp_ck ck = AMP_CK(fn, "step");
    if (shape[d] > 1) stride[d] = amp_ck_mul(&ck, x->stride[d], step); /* a dim of one element keeps its stride */
    int64_t off = amp_ck_add(&ck, x->offset, amp_ck_mul(&ck, start, x->stride[d]));
    if (!ck.ok) return NULL;
    void *ctx;
    amp_tensor *out = finish(amp__view(x, x->ndim, shape, stride, off), x, fn, slice_backward, sizeof(slice_ctx), &ctx);
    if (out && ctx) *(slice_ctx *)ctx = (slice_ctx){d, start, step};
    return out;
}

/* ---- expand -------------------------------------------------------------------------------------- */
static amp_status expand_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    gin[0] = amp__sum_to_shape(gout[0], n->inputs[0].ndim, n->inputs[0].shape);
    return gin[0] ? AMP_OK : amp_last_status();
}

amp_tensor *amp_expand(amp_tensor *x, int ndim, const int64_t *shape) {
    static const char *fn = "amp_expand";
    if (!amp__arg(fn, x, "x")) return NULL;
    if (ndim < x->ndim || ndim > AMP_MAX_DIMS || (ndim > 0 && !shape))
        return amp_error_null(AMP_ERR_ARG, "%s: cannot expand a %d-d tensor to %d dims", fn, x->ndim, ndim);
    int64_t s[AMP_MAX_DIMS], st[AMP_MAX_DIMS];
    int off = ndim - x->ndim;
    for (int i = 0; i < ndim; i++) {
        int xi = i - off;
        int64_t xs = xi >= 0 ? x->shape[xi] : 1;
        s[i] = shape[i] == -1 ? xs : shape[i];
        if (shape[i] == -1 && xi < 0)
            return amp_error_null(AMP_ERR_ARG, "%s: -1 is not allowed for a new leading dim %d", fn, i);
        if (xs != s[i] && xs != 1) {
            char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
            return amp_error_null(AMP_ERR_SHAPE, "%s: cannot expand %s to %s (dim %d: %lld to %lld)", fn,
                                  amp__shape_fmt(x->ndim, x->shape, a, sizeof a), amp__shape_fmt(ndim, shape, b, sizeof b), i,
                                  (long long)xs, (long long)s[i]);
        }
        if (s[i] < 0) return amp_error_null(AMP_ERR_ARG, "%s: size %lld is negative", fn, (long long)s[i]);
        st[i] = (xi >= 0 && xs == s[i]) ? x->stride[xi] : 0;
    }
    /* a view obeys the creation bound too: its element count times the
     * element size fits (2^62), so nothing computed from it can wrap */
    if (amp__check_extent(fn, "shape", ndim, s, x->dtype) != AMP_OK) return NULL;
    return finish(amp__view(x, ndim, s, st, x->offset), x, fn, expand_backward, 0, NULL);
}

/* ---- slice's gradient as an op (double backward) ----------------------------------------------
 * g placed into zeros of the input's shape at the slice's window; its own
 * gradient is the slice again. */
typedef struct {
    slice_ctx s;
    int64_t end;
} embed_ctx;

static amp_status embed_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const embed_ctx *c = n->ctx;
    const amp_tensor *g = gout[0];
    int64_t shape[AMP_MAX_DIMS], stride[AMP_MAX_DIMS];
    memcpy(shape, n->inputs[0].shape, sizeof shape);
    memcpy(stride, g->stride, sizeof stride);
    stride[c->s.dim] = g->stride[c->s.dim] * c->s.step;
    amp_tensor *win = amp__view(g, n->inputs[0].ndim, shape, stride, g->offset + c->s.start * g->stride[c->s.dim]);
    if (!win) return amp_last_status();
    gin[0] = copy_as("amp_backward", win, g->dtype);
    amp__release(win);
    return gin[0] ? AMP_OK : amp_last_status();
}

static amp_status embed_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const embed_ctx *c = n->ctx;
    gin[0] = amp_slice(gout[0], c->s.dim, c->s.start, c->end, c->s.step);
    return gin[0] ? AMP_OK : amp_last_status();
}

static amp_status slice_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const slice_ctx *c = n->ctx;
    const amp_edge *in = &n->inputs[0];
    amp_tensor *g = gout[0];
    /* runs as user code (scoped): zeros of the input's shape, g copied into the window */
    amp_tensor *z = zeros_on(amp__dev(g), g->dtype, in->ndim, in->shape, amp__mem_current(AMP_MEM_ACTIVATION));
    if (!z) return amp_last_status();
    int64_t shape[AMP_MAX_DIMS], stride[AMP_MAX_DIMS];
    for (int i = 0; i < z->ndim; i++) {
        shape[i] = g->shape[i];
        stride[i] = z->stride[i] * (i == c->dim ? c->step : 1);
    }
    amp_tensor *win = amp__view(z, z->ndim, shape, stride, c->start * z->stride[c->dim]);
    amp_status st = win ? amp__copy_convert(win, g) : amp_last_status();
    amp_tensor_free(win);
    if (st != AMP_OK) return st;
    if (amp__needs_grad(1, &g)) {
        amp_node *e = amp__node_new("amp_slice_backward", embed_backward, 1, &g, sizeof(embed_ctx));
        if (!e) return amp_last_status();
        embed_ctx *ec = e->ctx;
        ec->s = *c;
        ec->end = c->start + (g->shape[c->dim] - 1) * c->step + 1;
        e->backward_diff = embed_backward_diff;
        amp__node_attach(e, z);
    }
    gin[0] = z;
    return AMP_OK;
}

/* ---- differentiable backwards of the views (create_graph) ---------------------------------- */
static amp_status identity_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    AMP_UNUSED(n);
    gin[0] = gout[0]; /* the engine casts to the input's dtype */
    return AMP_OK;
}

static amp_status reshape_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    gin[0] = amp_reshape(gout[0], n->inputs[0].ndim, n->inputs[0].shape);
    return gin[0] ? AMP_OK : amp_last_status();
}

static amp_status permute_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    return permute_back(n, gout, gin, true);
}

static amp_status expand_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    gin[0] = amp__sum_to_diff(gout[0], n->inputs[0].ndim, n->inputs[0].shape);
    return gin[0] ? AMP_OK : amp_last_status();
}

static amp_backward_fn diff_of(amp_backward_fn bw) {
    if (bw == identity_backward) return identity_backward_diff;
    if (bw == reshape_backward) return reshape_backward_diff;
    if (bw == permute_backward) return permute_backward_diff;
    if (bw == slice_backward) return slice_backward_diff;
    if (bw == expand_backward) return expand_backward_diff;
    return NULL;
}

/* ---- cat / stack ------------------------------------------------------------------------------------ */
typedef struct {
    int dim;
    bool stack;
} cat_ctx;

static amp_status cat_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    cat_ctx *c = n->ctx;
    const amp_tensor *g = gout[0];
    int64_t pos = 0;
    for (int i = 0; i < n->n_inputs; i++) {
        amp_edge *e = &n->inputs[i];
        int64_t len = c->stack ? 1 : e->shape[c->dim];
        if (e->needs_grad) {
            int64_t shape[AMP_MAX_DIMS], stride[AMP_MAX_DIMS];
            memcpy(shape, g->shape, sizeof shape);
            memcpy(stride, g->stride, sizeof stride);
            shape[c->dim] = len;
            amp_tensor *v = amp__view(g, g->ndim, shape, stride, g->offset + pos * g->stride[c->dim]);
            if (!v) return amp_last_status();
            if (c->stack) {
                gin[i] = reshape_raw("amp_backward", v, e->ndim, e->shape);
                amp__release(v);
                if (!gin[i]) return amp_last_status();
            } else {
                gin[i] = v;
            }
        }
        pos += len;
    }
    return AMP_OK;
}

static amp_status cat_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    cat_ctx *c = n->ctx;
    int64_t pos = 0;
    for (int i = 0; i < n->n_inputs; i++) {
        amp_edge *e = &n->inputs[i];
        int64_t len = c->stack ? 1 : e->shape[c->dim];
        if (e->needs_grad) {
            gin[i] = amp_slice(gout[0], c->dim, pos, pos + len, 1);
            if (gin[i] && c->stack) gin[i] = amp_reshape(gin[i], e->ndim, e->shape);
            if (!gin[i]) return amp_last_status();
        }
        pos += len;
    }
    return AMP_OK;
}

static amp_tensor *cat_impl(const char *fn, amp_tensor *const *xs_in, int n, int dim, bool stack) {
    if (n <= 0) return amp_error_null(AMP_ERR_ARG, "%s: need at least one tensor, got %d", fn, n);
    if (!xs_in) return amp_error_null(AMP_ERR_ARG, "%s: xs is NULL", fn);
    if (n > 30) return amp_error_null(AMP_ERR_ARG, "%s: at most 30 tensors per call, got %d", fn, n);
    amp_tensor *xs[30];
    for (int i = 0; i < n; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "xs[%d]", i);
        if (!amp__arg(fn, xs_in[i], nm)) return NULL;
        xs[i] = xs_in[i];
    }
    amp_device dev;
    int mask = amp__autocast_dev(stack ? AMP_OP_STACK : AMP_OP_CAT, xs, n, &dev);
    if (mask < 0) return NULL;
    amp_tensor *out = NULL;
    const amp_tensor *x0 = xs[0];
    int ond = stack ? x0->ndim + 1 : x0->ndim;
    int d;
    if (ond > AMP_MAX_DIMS) {
        amp_error(AMP_ERR_SHAPE, "%s: result would have more than %d dims", fn, AMP_MAX_DIMS);
        goto done;
    }
    if (ond == 0) {
        amp_error(AMP_ERR_SHAPE, "%s: zero-d tensors cannot be concatenated", fn);
        goto done;
    }
    if (amp__norm_dim(fn, dim, ond, &d)) goto done;
    amp_dtype dt = x0->dtype;
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const amp_tensor *x = xs[i];
        bool ok = x->ndim == x0->ndim;
        for (int j = 0; ok && j < x->ndim; j++)
            if (j != d || stack) ok = x->shape[j] == x0->shape[j];
        if (!ok) {
            char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
            amp_error(AMP_ERR_SHAPE, "%s: xs[%d] has shape %s, which does not match xs[0]'s %s%s", fn, i,
                      amp__shape_fmt(x->ndim, x->shape, a, sizeof a), amp__shape_fmt(x0->ndim, x0->shape, b, sizeof b),
                      stack ? "" : " outside the cat dim");
            goto done;
        }
        dt = amp__promote(dt, x->dtype);
        amp_ck ck = AMP_CK(fn, "total size along dim");
        total = amp_ck_add(&ck, total, stack ? 1 : x->shape[d]);
        if (!ck.ok) goto done;
    }
    int64_t shape[AMP_MAX_DIMS];
    for (int j = 0, k = 0; j < ond; j++) {
        if (j == d) {
            shape[j] = total;
            if (!stack) k++;
        } else {
            shape[j] = x0->shape[k++];
        }
    }
    out = amp__empty_out_on(fn, dev, dt, ond, shape);
    if (!out) goto done;
    int64_t pos = 0;
    for (int i = 0; i < n; i++) {
        int64_t vs[AMP_MAX_DIMS], vst[AMP_MAX_DIMS];
        memcpy(vs, out->shape, sizeof vs);
        memcpy(vst, out->stride, sizeof vst);
        int64_t len = stack ? 1 : xs[i]->shape[d];
        vs[d] = len;
        amp_tensor *win = amp__view(out, ond, vs, vst, pos * out->stride[d]);
        amp_tensor src = *xs[i];
        if (stack) { /* view x with a unit dim at d */
            src.ndim = ond;
            for (int j = 0, k = 0; j < ond; j++) {
                if (j == d) {
                    src.shape[j] = 1;
                    src.stride[j] = 0;
                } else {
                    src.shape[j] = xs[i]->shape[k];
                    src.stride[j] = xs[i]->stride[k];
                    k++;
                }
            }
        }
        amp_status st = win ? amp__copy_convert(win, &src) : amp_last_status();
        amp_tensor_free(win);
        if (st != AMP_OK) {
            amp_tensor_free(out);
            out = NULL;
            goto done;
        }
        pos += len;
    }
done:
    return amp__op_end(fn, out != NULL, out, xs, n, mask,
                       &(amp_node_spec){.backward = cat_backward, .backward_diff = cat_backward_diff,
                                        .ctx = &(cat_ctx){d, stack}, .ctx_size = sizeof(cat_ctx)}, NULL, 0);
}

amp_tensor *amp_cat(amp_tensor *const *xs, int n, int dim) { return cat_impl("amp_cat", xs, n, dim, false); }
amp_tensor *amp_stack(amp_tensor *const *xs, int n, int dim) { return cat_impl("amp_stack", xs, n, dim, true); }

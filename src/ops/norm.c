/* Normalisation: layer_norm, batch_norm, group_norm.
 *
 * Statistics are always computed in f32 (sums in double) from the widened
 * input; affine parameters and running statistics are read as f32 whatever
 * their dtype; the output has x's dtype, rounded once. The backward works
 * from the saved input and the saved per-row / per-channel mean and 1/std. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/norm.h"
#include "ops/f32_util.h"

/* ---- helpers ---------------------------------------------------------------------------- */
/* An optional float parameter with exactly the given shape. */
static bool check_param(const char *fn, const amp_tensor *t, const char *name, int ndim, const int64_t *shape,
                        const char *what) {
    if (!t) return true;
    if (!amp__check_float(fn, t, name)) return false;
    if (t->ndim != ndim || memcmp(t->shape, shape, sizeof(int64_t) * (size_t)ndim) != 0) {
        char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
        amp_error(AMP_ERR_SHAPE, "%s: %s has shape %s; expected %s (%s)", fn, name, amp__shape_fmt(t->ndim, t->shape, a, sizeof a),
                  amp__shape_fmt(ndim, shape, b, sizeof b), what);
        return false;
    }
    return true;
}

/* f32 views of up to n optional tensors; on failure releases what it took. */
typedef struct {
    const float *p[4];
    bool owned[4];
    const amp_tensor *t[4];
    int n;
} views;

static bool views_get(views *v, int n, const amp_tensor *const *ts) {
    memset(v, 0, sizeof *v);
    v->n = n;
    for (int i = 0; i < n; i++) {
        v->t[i] = ts[i];
        if (!ts[i]) continue;
        v->p[i] = amp__f32_view(ts[i], &v->owned[i]);
        if (!v->p[i]) {
            for (int j = 0; j < i; j++)
                if (v->p[j]) amp__f32_done(v->t[j], v->p[j], v->owned[j]);
            memset(v, 0, sizeof *v);
            return false;
        }
    }
    return true;
}

static void views_done(views *v) {
    for (int i = 0; i < v->n; i++)
        if (v->p[i]) amp__f32_done(v->t[i], v->p[i], v->owned[i]);
    memset(v, 0, sizeof *v);
}

/* Write n f32 values into t (any strides, any float dtype), rounding. */
static amp_status write_f32(amp_tensor *t, float *src) {
    amp_tensor tmp;
    memset(&tmp, 0, sizeof tmp);
    amp_storage st;
    memset(&st, 0, sizeof st);
    st.data = src;
    tmp.dtype = AMP_F32;
    tmp.storage = &st;
    tmp.ndim = t->ndim;
    memcpy(tmp.shape, t->shape, sizeof tmp.shape);
    amp__contig_strides(t->ndim, tmp.shape, tmp.stride);
    return amp__copy_convert(t, &tmp);
}

/* Gradient tensors for the inputs that need them: gin[i] is a new f32
 * tensor of input i's shape (zero-filled) or NULL. Returns false on failure. */
static bool alloc_grads(amp_node *n, amp_tensor **gin, int count) {
    for (int i = 0; i < count; i++) {
        if (!n->inputs[i].needs_grad) continue;
        gin[i] = amp__f32_grad(n->inputs[i].ndim, n->inputs[i].shape, false);
        if (!gin[i]) {
            for (int j = 0; j < i; j++) {
                amp__release(gin[j]);
                gin[j] = NULL;
            }
            return false;
        }
    }
    return true;
}

static float *gdata(amp_tensor *t) { return t ? (float *)amp__data(t) : NULL; }

/* ---- layer_norm --------------------------------------------------------------------------- */
typedef struct {
    int64_t M, D;
    int k;      /* normalized dims */
    double eps; /* for the differentiable backward, which recomputes the statistics */
} ln_ctx;

/* through the backend of the saved tensors' device */
static amp_status layer_norm_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    static const char *fn = "amp_layer_norm";
    ln_ctx *c = n->ctx;
    const amp_tensor *x = n->saved[0], *w = n->saved[1], *mean = n->saved[2], *rstd = n->saved[3];
    const amp_backend *be = amp__backend_of(fn, x);
    if (!be) return amp_last_status();
    bool need[3] = {n->inputs[0].needs_grad, n->inputs[1].needs_grad, n->inputs[2].needs_grad};
    amp_norm_args a;
    memset(&a, 0, sizeof a);
    a.M = c->M, a.D = c->D, a.k = c->k, a.eps = c->eps;
    return AMP_BE_CALL(be, layer_norm_backward, fn, &a, x, w, mean, rstd, gout[0], need, gin);
}

/* create_graph: the statistics recomputed from x with ops, then the usual
 * formulas, so every term (rstd's dependence on x included) is differentiable. */
static amp_status layer_norm_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const ln_ctx *c = n->ctx;
    const amp_edge *ex = &n->inputs[0];
    int k = c->k, lead = ex->ndim - k, dims[AMP_MAX_DIMS], ldims[AMP_MAX_DIMS];
    for (int i = 0; i < k; i++) dims[i] = lead + i;
    for (int i = 0; i < lead; i++) ldims[i] = i;
    amp_tensor *x = amp__saved_input(n, 0), *g = gout[0];
    if (!x) return amp_last_status();
    if (x->dtype != AMP_F32) x = amp_to(x, AMP_F32);
    if (g->dtype != AMP_F32) g = amp_to(g, AMP_F32);
    amp_tensor *xc = amp_sub(x, amp_mean(x, dims, k, true));
    amp_tensor *rstd = amp_rsqrt(amp_add_scalar(amp_mean(amp_mul(xc, xc), dims, k, true), c->eps));
    amp_tensor *xhat = amp_mul(xc, rstd);
    amp_tensor *dxhat = n->inputs[1].tensor ? amp_mul(g, amp__saved_input(n, 1)) : g;
    if (n->inputs[0].needs_grad) {
        amp_tensor *t = amp_sub(amp_sub(dxhat, amp_mean(dxhat, dims, k, true)),
                                amp_mul(xhat, amp_mean(amp_mul(dxhat, xhat), dims, k, true)));
        if (!(gin[0] = amp_mul(rstd, t))) return amp_last_status();
    }
    if (n->inputs[1].needs_grad) {
        amp_tensor *t = amp_mul(g, xhat);
        if (!(gin[1] = lead ? amp_sum(t, ldims, lead, false) : t)) return amp_last_status();
    }
    if (n->inputs[2].needs_grad && !(gin[2] = lead ? amp_sum(g, ldims, lead, false) : g)) return amp_last_status();
    return AMP_OK;
}

amp_tensor *amp_layer_norm(amp_tensor *x, int normalized_ndim, amp_tensor *weight, amp_tensor *bias, double eps) {
    static const char *fn = "amp_layer_norm";
    if (!amp__check_float(fn, x, "x")) return NULL;
    if (normalized_ndim < 1 || normalized_ndim > x->ndim) {
        char b[AMP_SHAPE_BUF];
        return amp_error_null(AMP_ERR_ARG, "%s: normalized_ndim %d must be in [1, %d] for x of shape %s", fn,
                              normalized_ndim, x->ndim, amp__shape_fmt(x->ndim, x->shape, b, sizeof b));
    }
    if (!(eps >= 0)) return amp_error_null(AMP_ERR_ARG, "%s: eps %g must be >= 0", fn, eps);
    int k = normalized_ndim, lead = x->ndim - k;
    const int64_t *nshape = x->shape + lead;
    char what[AMP_SHAPE_BUF + 40], nb[AMP_SHAPE_BUF];
    snprintf(what, sizeof what, "the normalized shape %s", amp__shape_fmt(k, nshape, nb, sizeof nb));
    if (!check_param(fn, weight, "weight", k, nshape, what) || !check_param(fn, bias, "bias", k, nshape, what)) return NULL;
    amp_tensor *in[3] = {x, weight, bias};
    amp_device dev;
    int mask = amp__autocast_dev(AMP_OP_LAYER_NORM, in, 3, &dev);
    if (mask < 0) return NULL;
    x = in[0];
    int64_t M = amp__numel(lead, x->shape), D = amp__numel(k, x->shape + lead);
    const amp_backend *be = amp__backend(fn, dev);
    amp_tensor *out = be ? amp__empty_out_on(fn, dev, x->dtype, x->ndim, x->shape) : NULL;
    amp_tensor *mean = out ? amp__tensor_new_on(fn, dev, AMP_F32, 1, &M, amp__mem_current(AMP_MEM_ACTIVATION), AMP_NEW_UNSCOPED) : NULL;
    amp_tensor *rstd = mean ? amp__tensor_new_on(fn, dev, AMP_F32, 1, &M, amp__mem_current(AMP_MEM_ACTIVATION), AMP_NEW_UNSCOPED) : NULL;
    if (!rstd) goto fail;
    amp_norm_args na;
    memset(&na, 0, sizeof na);
    na.M = M, na.D = D, na.k = k, na.eps = eps;
    if (AMP_BE_CALL(be, layer_norm, fn, &na, x, in[1], in[2], out, mean, rstd) != AMP_OK) goto fail;
    if (amp__needs_grad(3, in)) {
        amp_node *node = amp__node_new(fn, layer_norm_backward, 3, in, sizeof(ln_ctx));
        if (!node) goto fail;
        amp__node_save(node, x);
        amp__node_save(node, in[1]);
        amp__node_save(node, mean);
        amp__node_save(node, rstd);
        *(ln_ctx *)node->ctx = (ln_ctx){M, D, k, eps};
        node->backward_diff = layer_norm_backward_diff;
        amp__node_attach(node, out);
    }
    amp__release(mean);
    amp__release(rstd);
    amp__autocast_done(in, 3, mask);
    return out;
fail:
    amp__release(mean);
    amp__release(rstd);
    amp_tensor_free(out);
    amp__autocast_done(in, 3, mask);
    return NULL;
}

/* ---- batch_norm ------------------------------------------------------------------------------ */
typedef struct {
    int64_t N, C, L;
    bool training;
} bn_ctx;

static bool f32_or_half(amp_dtype dt) { return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16; }

static amp_status batch_norm_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    bn_ctx *c = n->ctx;
    const amp_tensor *x = n->saved[0], *w = n->saved[1], *mean = n->saved[2], *rstd = n->saved[3];
    const amp_tensor *gy = gout[0];
    if (c->L <= AMP_K_NORM_ROW_MAX && amp_tensor_is_contiguous(x) && amp_tensor_is_contiguous(gy) &&
        f32_or_half(x->dtype) && f32_or_half(gy->dtype) && (x->dtype != AMP_F32 || gy->dtype != AMP_F32) &&
        (!w || (w->dtype == AMP_F32 && amp_tensor_is_contiguous(w)))) {
        /* half x or dy read as stored, rows widened in the kernels, and a half
         * x's gradient written in its dtype (what the engine's cast of the f32
         * gradient would give): no f32 copies of the activations */
        size_t nb = (size_t)(c->C ? c->C : 1) * sizeof(double);
        double *sg = amp__ws_alloc(nb), *sgx = amp__ws_alloc(nb);
        amp_tensor *gx = NULL;
        if (sg && sgx && n->inputs[0].needs_grad)
            gx = amp__tensor_new("amp_backward", x->dtype, x->ndim, x->shape, amp__mem_current(AMP_MEM_WORKSPACE), 0);
        if (!sg || !sgx || (n->inputs[0].needs_grad && !gx) || !alloc_grads(n, gin, 3)) {
            amp__release(gx);
            amp__ws_free(sg, nb);
            amp__ws_free(sgx, nb);
            return amp_last_status();
        }
        if (gx) {
            amp__release(gin[0]);
            gin[0] = gx;
        }
        const float *pm = amp__data(mean), *pr = amp__data(rstd);
        amp_k_channel_grad_sums(amp__data(x), x->dtype, amp__data(gy), gy->dtype, c->N, c->C, c->L, pm, pr, sg, sgx);
        if (gx)
            amp_k_batch_norm_backward_x(amp__data(x), x->dtype, amp__data(gy), gy->dtype, c->N, c->C, c->L, pm, pr,
                                        w ? (const float *)amp__data(w) : NULL, sg, sgx, c->training, amp__data(gx),
                                        gx->dtype);
        for (int64_t ch = 0; ch < c->C; ch++) {
            if (gin[1]) gdata(gin[1])[ch] = (float)sgx[ch];
            if (gin[2]) gdata(gin[2])[ch] = (float)sg[ch];
        }
        amp__ws_free(sg, nb);
        amp__ws_free(sgx, nb);
        return AMP_OK;
    }
    views v;
    const amp_tensor *ts[3] = {x, w, gout[0]};
    if (!views_get(&v, 3, ts)) return amp_last_status();
    size_t nb = (size_t)(c->C ? c->C : 1) * sizeof(double);
    double *sg = amp__ws_alloc(nb), *sgx = amp__ws_alloc(nb);
    if (!sg || !sgx || !alloc_grads(n, gin, 3)) {
        amp__ws_free(sg, nb);
        amp__ws_free(sgx, nb);
        views_done(&v);
        return amp_last_status();
    }
    const float *pm = amp__data(mean), *pr = amp__data(rstd);
    amp_k_channel_grad_sums(v.p[0], AMP_F32, v.p[2], AMP_F32, c->N, c->C, c->L, pm, pr, sg, sgx);
    if (gin[0])
        amp_k_batch_norm_backward_x(v.p[0], AMP_F32, v.p[2], AMP_F32, c->N, c->C, c->L, pm, pr, v.p[1], sg, sgx,
                                    c->training, amp__data(gin[0]), AMP_F32);
    for (int64_t ch = 0; ch < c->C; ch++) {
        if (gin[1]) gdata(gin[1])[ch] = (float)sgx[ch];
        if (gin[2]) gdata(gin[2])[ch] = (float)sg[ch];
    }
    amp__ws_free(sg, nb);
    amp__ws_free(sgx, nb);
    views_done(&v);
    return AMP_OK;
}

amp_tensor *amp_batch_norm(amp_tensor *x, amp_tensor *running_mean, amp_tensor *running_var, amp_tensor *weight,
                           amp_tensor *bias, bool training, double momentum, double eps) {
    static const char *fn = "amp_batch_norm";
    if (!amp__check_float(fn, x, "x")) return NULL;
    if (!amp__check_ndim(fn, x, "x", 2, AMP_MAX_DIMS)) return NULL;
    if (!(eps >= 0)) return amp_error_null(AMP_ERR_ARG, "%s: eps %g must be >= 0", fn, eps);
    if (!isfinite(momentum)) return amp_error_null(AMP_ERR_ARG, "%s: momentum %g is not finite", fn, momentum);
    int64_t N = x->shape[0], C = x->shape[1], L = amp__numel(x->ndim - 2, x->shape + 2);
    char what[AMP_SHAPE_BUF + 40], xb[AMP_SHAPE_BUF];
    snprintf(what, sizeof what, "one value per channel of x %s", amp__shape_fmt(x->ndim, x->shape, xb, sizeof xb));
    int64_t cs[1] = {C};
    if (!check_param(fn, weight, "weight", 1, cs, what) || !check_param(fn, bias, "bias", 1, cs, what) ||
        !check_param(fn, running_mean, "running_mean", 1, cs, what) ||
        !check_param(fn, running_var, "running_var", 1, cs, what))
        return NULL;
    if (!running_mean != !running_var)
        return amp_error_null(AMP_ERR_ARG, "%s: running_mean and running_var must be given together (one is NULL)", fn);
    if (!training && !running_mean)
        return amp_error_null(AMP_ERR_ARG, "%s: running_mean and running_var are required in eval mode (training = false)",
                              fn);
    if (training && N * L <= 1)
        return amp_error_null(AMP_ERR_SHAPE, "%s: expected more than 1 value per channel when training, got x of shape %s",
                              fn, xb);
    amp_tensor *in[3] = {x, weight, bias};
    int mask = amp__autocast(AMP_OP_BATCH_NORM, in, 3);
    if (mask < 0) return NULL;
    x = in[0];
    int64_t cdim[1] = {C};
    amp_tensor *out = amp__empty_out(fn, x->dtype, x->ndim, x->shape);
    amp_tensor *mean = out ? amp__f32_tensor(fn, 1, cdim, AMP_MEM_ACTIVATION) : NULL;
    amp_tensor *rstd = mean ? amp__f32_tensor(fn, 1, cdim, AMP_MEM_ACTIVATION) : NULL;
    size_t cb = (size_t)(C ? C : 1) * sizeof(float);
    float *scale = rstd ? amp__ws_alloc(cb) : NULL, *shift = scale ? amp__ws_alloc(cb) : NULL;
    float *var = shift ? amp__ws_alloc(cb) : NULL;
    views v;
    /* x straight from its memory when contiguous f32/f16/bf16 (halves are
     * widened in blocks by the kernels); else an f32 copy */
    bool direct = amp_tensor_is_contiguous(x) && (x->dtype == AMP_F32 || x->dtype == AMP_F16 || x->dtype == AMP_BF16);
    const amp_tensor *ts[4] = {direct ? NULL : x, in[1], in[2], NULL};
    const void *px = direct ? amp__data(x) : NULL;
    amp_dtype pxdt = direct ? x->dtype : AMP_F32;
    bool have_views = false;
    if (!var || !views_get(&v, 3, ts)) goto fail;
    have_views = true;
    if (!direct) px = v.p[0];
    views rs;
    const amp_tensor *rts[2] = {running_mean, running_var};
    if (!views_get(&rs, 2, rts)) goto fail;
    float *pm = amp__data(mean), *pr = amp__data(rstd);
    /* training: statistics and normalisation in one kernel (one visit per
     * channel when there are enough channels); eval: the running statistics */
    if (!training) {
        for (int64_t c = 0; c < C; c++) {
            pm[c] = rs.p[0][c];
            pr[c] = (float)(1.0 / sqrt((double)rs.p[1][c] + eps));
            scale[c] = pr[c] * (v.p[1] ? v.p[1][c] : 1.0f);
            shift[c] = v.p[2] ? v.p[2][c] : 0.0f;
        }
    }
    if (direct) {
        if (training)
            amp_k_channel_norm(px, pxdt, N, C, L, eps, v.p[1], v.p[2], pm, var, pr, amp__data(out), out->dtype);
        else
            amp_k_channel_affine(px, pxdt, N, C, L, pm, scale, shift, amp__data(out), out->dtype);
    } else {
        float *po = amp__f32_out_begin(out);
        if (!po) {
            views_done(&rs);
            goto fail;
        }
        if (training)
            amp_k_channel_norm(px, AMP_F32, N, C, L, eps, v.p[1], v.p[2], pm, var, pr, po, AMP_F32);
        else
            amp_k_channel_affine(px, AMP_F32, N, C, L, pm, scale, shift, po, AMP_F32);
        amp__f32_out_end(out, po);
    }
    /* running statistics, in place: running = (1 - m) * running + m * batch
     * statistic, with the unbiased variance (as torch) */
    if (training && running_mean) {
        double cnt = (double)N * (double)L;
        float *nm = scale, *nv = shift; /* reuse the scratch */
        bool finite = true;
        for (int64_t c = 0; c < C; c++) {
            nm[c] = (float)((1.0 - momentum) * rs.p[0][c] + momentum * (double)pm[c]);
            nv[c] = (float)((1.0 - momentum) * rs.p[1][c] + momentum * (double)var[c] * cnt / (cnt - 1.0));
            finite &= isfinite(nm[c]) && isfinite(nv[c]);
        }
        views_done(&rs);
        /* a batch whose statistics are not finite (an inf in x, or a variance
         * beyond f32) leaves the running statistics as they were: amp never
         * stores them (torch does, and every later eval forward is NaN) */
        if (finite) {
            amp_tensor_will_modify(running_mean); /* counted, and undone if the step is skipped */
            amp_tensor_will_modify(running_var);
            if (write_f32(running_mean, nm) != AMP_OK || write_f32(running_var, nv) != AMP_OK) goto fail;
        }
    } else {
        views_done(&rs);
    }
    views_done(&v);
    have_views = false;
    if (amp__needs_grad(3, in)) {
        amp_node *node = amp__node_new(fn, batch_norm_backward, 3, in, sizeof(bn_ctx));
        if (!node) goto fail;
        amp__node_save(node, x);
        amp__node_save(node, in[1]);
        amp__node_save(node, mean);
        amp__node_save(node, rstd);
        *(bn_ctx *)node->ctx = (bn_ctx){N, C, L, training};
        amp__node_attach(node, out);
    }
    amp__ws_free(scale, cb);
    amp__ws_free(shift, cb);
    amp__ws_free(var, cb);
    amp__release(mean);
    amp__release(rstd);
    amp__autocast_done(in, 3, mask);
    return out;
fail:
    if (have_views) views_done(&v);
    amp__ws_free(scale, cb);
    amp__ws_free(shift, cb);
    amp__ws_free(var, cb);
    amp__release(mean);
    amp__release(rstd);
    amp_tensor_free(out);
    amp__autocast_done(in, 3, mask);
    return NULL;
}

/* ---- group_norm --------------------------------------------------------------------------- */
typedef struct {
    int64_t N, C, L, G;
} gn_ctx;

static amp_status group_norm_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    gn_ctx *c = n->ctx;
    const amp_tensor *x = n->saved[0], *w = n->saved[1], *mean = n->saved[2], *rstd = n->saved[3];
    views v;
    const amp_tensor *ts[3] = {x, w, gout[0]};
    if (!views_get(&v, 3, ts)) return amp_last_status();
    if (!alloc_grads(n, gin, 3)) {
        views_done(&v);
        return amp_last_status();
    }
    amp_k_group_norm_backward(v.p[0], v.p[2], v.p[1], amp__data(mean), amp__data(rstd), c->N, c->C, c->L, c->G,
                              gdata(gin[0]), gdata(gin[1]), gdata(gin[2]));
    views_done(&v);
    return AMP_OK;
}

amp_tensor *amp_group_norm(amp_tensor *x, int64_t groups, amp_tensor *weight, amp_tensor *bias, double eps) {
    static const char *fn = "amp_group_norm";
    if (!amp__check_float(fn, x, "x")) return NULL;
    if (!amp__check_ndim(fn, x, "x", 2, AMP_MAX_DIMS)) return NULL;
    if (!(eps >= 0)) return amp_error_null(AMP_ERR_ARG, "%s: eps %g must be >= 0", fn, eps);
    int64_t N = x->shape[0], C = x->shape[1], L = amp__numel(x->ndim - 2, x->shape + 2);
    char xb[AMP_SHAPE_BUF];
    amp__shape_fmt(x->ndim, x->shape, xb, sizeof xb);
    if (groups <= 0 || C % groups != 0)
        return amp_error_null(AMP_ERR_ARG, "%s: groups %lld must be positive and divide the %lld channels of x %s", fn,
                              (long long)groups, (long long)C, xb);
    char what[AMP_SHAPE_BUF + 40];
    snprintf(what, sizeof what, "one value per channel of x %s", xb);
    int64_t cs[1] = {C};
    if (!check_param(fn, weight, "weight", 1, cs, what) || !check_param(fn, bias, "bias", 1, cs, what)) return NULL;
    amp_tensor *in[3] = {x, weight, bias};
    int mask = amp__autocast(AMP_OP_GROUP_NORM, in, 3);
    if (mask < 0) return NULL;
    x = in[0];
    int64_t ng = N * groups;
    amp_tensor *out = amp__empty_out(fn, x->dtype, x->ndim, x->shape);
    amp_tensor *mean = out ? amp__f32_tensor(fn, 1, &ng, AMP_MEM_ACTIVATION) : NULL;
    amp_tensor *rstd = mean ? amp__f32_tensor(fn, 1, &ng, AMP_MEM_ACTIVATION) : NULL;
    views v;
    const amp_tensor *ts[3] = {x, in[1], in[2]};
    float *po = NULL;
    if (!rstd || !views_get(&v, 3, ts)) goto fail;
    po = amp__f32_out_begin(out);
    if (!po) {
        views_done(&v);
        goto fail;
    }
    amp_k_group_norm(v.p[0], v.p[1], v.p[2], N, C, L, groups, eps, po, amp__data(mean), amp__data(rstd));
    amp__f32_out_end(out, po);
    views_done(&v);
    if (amp__needs_grad(3, in)) {
        amp_node *node = amp__node_new(fn, group_norm_backward, 3, in, sizeof(gn_ctx));
        if (!node) goto fail;
        amp__node_save(node, x);
        amp__node_save(node, in[1]);
        amp__node_save(node, mean);
        amp__node_save(node, rstd);
        *(gn_ctx *)node->ctx = (gn_ctx){N, C, L, groups};
        amp__node_attach(node, out);
    }
    amp__release(mean);
    amp__release(rstd);
    amp__autocast_done(in, 3, mask);
    return out;
fail:
    amp__release(mean);
    amp__release(rstd);
    amp_tensor_free(out);
    amp__autocast_done(in, 3, mask);
    return NULL;
}

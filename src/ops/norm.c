/* Normalisation: layer_norm, rms_norm, batch_norm, group_norm.
 *
 * Statistics are always computed in f32 (sums in double) from the widened
 * input; affine parameters and running statistics are read as f32 whatever
 * their dtype; the output has x's dtype, rounded once. The backward works
 * from the saved input and the saved per-row / per-channel mean and 1/std. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/backend.h"
#include "ops/op_util.h"
#include "tensor/f32_util.h"

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

/* out (x's shape and dtype) and the statistics the backward reads, mean and
 * rstd (n f32 values each); false (with the error) when one cannot be made. */
static bool norm_outputs(const char *fn, amp_device dev, const amp_tensor *x, int64_t n, amp_tensor **out,
                         amp_tensor **mean, amp_tensor **rstd) {
    *out = amp__empty_out_on(fn, dev, x->dtype, x->ndim, x->shape);
    *mean = *out ? amp__tensor_new_on(fn, dev, AMP_F32, 1, &n, amp__mem_current(AMP_MEM_ACTIVATION), AMP_NEW_UNSCOPED) : NULL;
    *rstd = *mean ? amp__tensor_new_on(fn, dev, AMP_F32, 1, &n, amp__mem_current(AMP_MEM_ACTIVATION), AMP_NEW_UNSCOPED) : NULL;
    return *rstd != NULL;
}

/* Every norm's node: its forward's arguments (the kernel's amp_norm_args,
 * kept whole) and which norm, so that one backward serves the three. */
typedef enum { NORM_LAYER, NORM_BATCH, NORM_GROUP, NORM_RMS } norm_kind;
typedef struct {
    amp_norm_args a;
    norm_kind kind;
} norm_ctx;

/* through the backend of the saved tensors' device: x, weight, mean (NULL
 * for rms_norm), rstd */
static amp_status norm_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    bool need[3] = {n->inputs[0].needs_grad, n->inputs[1].needs_grad, n->inputs[2].needs_grad};
    const norm_ctx *c = n->ctx;
    amp_tensor *const *s = n->saved;
    const amp_backend *be = amp__backend_of(n->name, s[0]);
    if (!be) return amp_last_status();
    switch (c->kind) {
    case NORM_LAYER: return AMP_KCALL(be, norm, layer_norm_backward, n->name, &c->a, s[0], s[1], s[2], s[3], gout[0], need, gin);
    case NORM_BATCH: return AMP_KCALL(be, norm, batch_norm_backward, n->name, &c->a, s[0], s[1], s[2], s[3], gout[0], need, gin);
    case NORM_RMS: return AMP_KCALL(be, norm, rms_norm_backward, n->name, &c->a, s[0], s[1], s[3], gout[0], need, gin);
    default: return AMP_KCALL(be, norm, group_norm_backward, n->name, &c->a, s[0], s[1], s[2], s[3], gout[0], need, gin);
    }
}

/* The end of every norm's forward (amp__op_end): the node when a gradient is
 * needed (in = {x, weight, bias}; it saves x, weight, mean and rstd), the
 * statistics released (the node holds its own), the casts undone; out freed
 * unless ok. */
static amp_tensor *norm_end(const char *fn, bool ok, amp_tensor **in, int mask, amp_tensor *out, amp_tensor *mean,
                            amp_tensor *rstd, const amp_norm_args *a, norm_kind kind, amp_backward_fn bw_diff) {
    norm_ctx c = {*a, kind};
    amp_node_spec spec = {.backward = norm_backward, .backward_diff = bw_diff, .ctx = &c, .ctx_size = sizeof c, .nsave = 4,
                          .save = {in[0], in[1], mean, rstd}};
    amp_tensor *tmp[2] = {mean, rstd};
    return amp__op_end(fn, ok, out, in, 3, mask, &spec, tmp, 2);
}

/* ---- layer_norm, rms_norm ------------------------------------------------------------------ */
/* create_graph: the statistics recomputed from x with ops, then the usual
 * formulas, so every term (rstd's dependence on x included) is
 * differentiable. rms_norm's are layer_norm's without the centring (the
 * mean taken as 0, and no mean(dxhat) term). */
static amp_status rows_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin, bool rms) {
    const amp_norm_args *c = &((const norm_ctx *)n->ctx)->a;
    const amp_edge *ex = &n->inputs[0];
    int k = c->k, lead = ex->ndim - k, dims[AMP_MAX_DIMS], ldims[AMP_MAX_DIMS];
    for (int i = 0; i < k; i++) dims[i] = lead + i;
    for (int i = 0; i < lead; i++) ldims[i] = i;
    amp_tensor *x = amp__saved_input(n, 0), *g = gout[0];
    if (!x) return amp_last_status();
    if (x->dtype != AMP_F32) x = amp_to(x, AMP_F32);
    if (g->dtype != AMP_F32) g = amp_to(g, AMP_F32);
    amp_tensor *xc = rms ? x : amp_sub(x, amp_mean(x, dims, k, true));
    amp_tensor *rstd = amp_rsqrt(amp_add_scalar(amp_mean(amp_mul(xc, xc), dims, k, true), c->eps));
    amp_tensor *xhat = amp_mul(xc, rstd);
    amp_tensor *dxhat = n->inputs[1].tensor ? amp_mul(g, amp__saved_input(n, 1)) : g;
    if (n->inputs[0].needs_grad) {
        amp_tensor *t = amp_mul(xhat, amp_mean(amp_mul(dxhat, xhat), dims, k, true));
        t = rms ? amp_sub(dxhat, t) : amp_sub(amp_sub(dxhat, amp_mean(dxhat, dims, k, true)), t);
        if (!(gin[0] = amp_mul(rstd, t))) return amp_last_status();
    }
    if (n->inputs[1].needs_grad) {
        amp_tensor *t = amp_mul(g, xhat);
        if (!(gin[1] = lead ? amp_sum(t, ldims, lead, false) : t)) return amp_last_status();
    }
    if (!rms && n->inputs[2].needs_grad && !(gin[2] = lead ? amp_sum(g, ldims, lead, false) : g)) return amp_last_status();
    return AMP_OK;
}

static amp_status layer_norm_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    return rows_backward_diff(n, gout, gin, false);
}

static amp_status rms_norm_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    return rows_backward_diff(n, gout, gin, true);
}

/* layer_norm's and rms_norm's checks: normalized_ndim in [1, x's ndim], and
 * weight (and bias) of the normalized shape */
static bool rows_check(const char *fn, const amp_tensor *x, int normalized_ndim, const amp_tensor *weight,
                       const amp_tensor *bias) {
    if (!amp__check_float(fn, x, "x")) return false;
    if (normalized_ndim < 1 || normalized_ndim > x->ndim) {
        char b[AMP_SHAPE_BUF];
        amp_error(AMP_ERR_ARG, "%s: normalized_ndim %d must be in [1, %d] for x of shape %s", fn, normalized_ndim,
                  x->ndim, amp__shape_fmt(x->ndim, x->shape, b, sizeof b));
        return false;
    }
    int k = normalized_ndim;
    const int64_t *nshape = x->shape + x->ndim - k;
    char what[AMP_SHAPE_BUF + 40], nb[AMP_SHAPE_BUF];
    snprintf(what, sizeof what, "the normalized shape %s", amp__shape_fmt(k, nshape, nb, sizeof nb));
    return check_param(fn, weight, "weight", k, nshape, what) && check_param(fn, bias, "bias", k, nshape, what);
}

amp_tensor *amp_layer_norm(amp_tensor *x, int normalized_ndim, amp_tensor *weight, amp_tensor *bias, double eps) {
    static const char *fn = "amp_layer_norm";
    if (!rows_check(fn, x, normalized_ndim, weight, bias)) return NULL;
    if (!(eps >= 0)) return amp_error_null(AMP_ERR_ARG, "%s: eps %g must be >= 0", fn, eps);
    int k = normalized_ndim, lead = x->ndim - k;
    amp_tensor *in[3] = {x, weight, bias};
    amp_device dev;
    int mask = amp__autocast_dev(AMP_OP_LAYER_NORM, in, 3, &dev);
    if (mask < 0) return NULL;
    x = in[0];
    int64_t M = amp__numel(lead, x->shape), D = amp__numel(k, x->shape + lead);
    amp_norm_args na = {.M = M, .D = D, .k = k, .eps = eps};
    const amp_backend *be = amp__backend(fn, dev);
    amp_tensor *out = NULL, *mean = NULL, *rstd = NULL;
    bool ok = be && norm_outputs(fn, dev, x, M, &out, &mean, &rstd) &&
              AMP_KCALL(be, norm, layer_norm, fn, &na, x, in[1], in[2], out, mean, rstd) == AMP_OK;
    return norm_end(fn, ok, in, mask, out, mean, rstd, &na, NORM_LAYER, layer_norm_backward_diff);
}

/* torch.nn.functional.rms_norm; eps < 0 or NaN: torch's default, the
 * machine epsilon of the dtype it computes in (after autocast) */
amp_tensor *amp_rms_norm(amp_tensor *x, int normalized_ndim, amp_tensor *weight, double eps) {
    static const char *fn = "amp_rms_norm";
    if (!rows_check(fn, x, normalized_ndim, weight, NULL)) return NULL;
    int k = normalized_ndim, lead = x->ndim - k;
    amp_tensor *in[3] = {x, weight, NULL};
    amp_device dev;
    int mask = amp__autocast_dev(AMP_OP_RMS_NORM, in, 3, &dev);
    if (mask < 0) return NULL;
    x = in[0];
    if (!(eps >= 0))
        eps = x->dtype == AMP_F16 ? 0x1p-10 : x->dtype == AMP_BF16 ? 0x1p-7 : 0x1p-23;
    int64_t M = amp__numel(lead, x->shape), D = amp__numel(k, x->shape + lead);
    amp_norm_args na = {.M = M, .D = D, .k = k, .eps = eps};
    const amp_backend *be = amp__backend(fn, dev);
    amp_tensor *out = NULL, *mean = NULL, *rstd = NULL;
    bool ok = be && norm_outputs(fn, dev, x, M, &out, &mean, &rstd) &&
              AMP_KCALL(be, norm, rms_norm, fn, &na, x, in[1], out, rstd) == AMP_OK;
    amp__release(mean); /* norm_outputs' mean: rms_norm has none */
    return norm_end(fn, ok, in, mask, out, NULL, rstd, &na, NORM_RMS, rms_norm_backward_diff);
}

/* ---- batch_norm ------------------------------------------------------------------------------ */
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
    /* one device for all (the running statistics are updated there) */
    const amp_tensor *all[5] = {x, weight, bias, running_mean, running_var};
    const char *names[5] = {"x", "weight", "bias", "running_mean", "running_var"};
    if (amp__same_device(fn, all, names, 5, NULL) != AMP_OK) return NULL;
    amp_tensor *in[3] = {x, weight, bias};
    amp_device dev;
    int mask = amp__autocast_dev(AMP_OP_BATCH_NORM, in, 3, &dev);
    if (mask < 0) return NULL;
    x = in[0];
    amp_norm_args na = {.N = N, .C = C, .L = L, .eps = eps, .training = training, .momentum = momentum};
    const amp_backend *be = amp__backend(fn, dev);
    amp_tensor *out = NULL, *mean = NULL, *rstd = NULL;
    bool ok = be && norm_outputs(fn, dev, x, C, &out, &mean, &rstd) &&
              AMP_KCALL(be, norm, batch_norm, fn, &na, x, in[1], in[2], running_mean, running_var, out, mean, rstd) == AMP_OK;
    return norm_end(fn, ok, in, mask, out, mean, rstd, &na, NORM_BATCH, NULL);
}

/* ---- group_norm --------------------------------------------------------------------------- */
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
    amp_device dev;
    int mask = amp__autocast_dev(AMP_OP_GROUP_NORM, in, 3, &dev);
    if (mask < 0) return NULL;
    x = in[0];
    int64_t ng = N * groups;
    amp_norm_args na = {.N = N, .C = C, .L = L, .G = groups, .eps = eps};
    const amp_backend *be = amp__backend(fn, dev);
    amp_tensor *out = NULL, *mean = NULL, *rstd = NULL;
    bool ok = be && norm_outputs(fn, dev, x, ng, &out, &mean, &rstd) &&
              AMP_KCALL(be, norm, group_norm, fn, &na, x, in[1], in[2], out, mean, rstd) == AMP_OK;
    return norm_end(fn, ok, in, mask, out, mean, rstd, &na, NORM_GROUP, NULL);
}

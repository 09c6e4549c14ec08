/* max_pool2d, avg_pool2d, adaptive_avg_pool2d on [N,C,H,W] or [C,H,W].
 * Checks, output sizes (PyTorch's formulas, ceil_mode included) and autograd
 * here; the forward and the backward are one call each into the backend of
 * x's device (kernels/backend.h: max_pool2d, avg_pool2d and their
 * backwards; the CPU's: kernels/cpu/backend_cpu_pool.c). The geometry,
 * amp_pool_args, is also the node's context. */
#include <string.h>

#include "kernels/backend.h"
#include "ops/op_util.h"

static char *xshape(const amp_tensor *x, char *b) { return amp__shape_fmt(x->ndim, x->shape, b, AMP_SHAPE_BUF); }

/* floor division for a possibly negative numerator (b > 0), without the
 * -a + b - 1 that wraps for b near 2^63 */
static int64_t div_floor(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* PyTorch's pooling_output_shape, in checked arithmetic: a kernel of
 * INT64_MAX or a padding of 2^62 is an error naming the argument (it used to
 * wrap into a plausible size, or a size no loop finishes). */
static int64_t pool_out(const char *fn, int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil_mode,
                        bool *ok) {
    amp_ck cp = AMP_CK(fn, "padding"), ck = AMP_CK(fn, "kernel size with dilation");
    int64_t padded = amp_ck_add(&cp, in, amp_ck_mul(&cp, 2, pad));
    int64_t ext = amp_ck_add(&ck, amp_ck_mul(&ck, dil, k - 1), 1);
    if (!cp.ok || !ck.ok) {
        *ok = false;
        return 0;
    }
    /* no tensor has 2^62 elements along a dim: larger extents only serve to
     * wrap the window arithmetic of the kernels */
    if (padded > AMP_MAX_BYTES || ext > AMP_MAX_BYTES) {
        amp_error(AMP_ERR_ARG, "%s: %s %lld is too large (the padded input and the dilated kernel must stay below 2^62)", fn,
                  padded > AMP_MAX_BYTES ? "padded input size" : "dilated kernel size", (long long)(padded > AMP_MAX_BYTES ? padded : ext));
        *ok = false;
        return 0;
    }
    int64_t num = padded - ext; /* both in [0, 2^62]: no overflow */
    /* torch's floor((num + stride - 1) / stride) is ceil(num / stride), without the sum that wraps for a huge stride */
    int64_t o = (ceil_mode ? -div_floor(-num, stride) : div_floor(num, stride)) + 1;
    /* the last window must start inside the input or left padding */
    if (ceil_mode && o > 1 && (o - 1) >= (in + pad - 1) / stride + 1) o--;
    return o;
}

/* x: 3-d or 4-d float with non-empty H, W. */
static bool check_input(const char *fn, const amp_tensor *x) {
    if (!amp__arg(fn, x, "x") || !amp__check_float(fn, x, "x")) return false;
    char b[AMP_SHAPE_BUF];
    if (x->ndim != 3 && x->ndim != 4) {
        amp_error(AMP_ERR_SHAPE, "%s: x must be 3-d [C,H,W] or 4-d [N,C,H,W], got shape %s", fn, xshape(x, b));
        return false;
    }
    for (int i = x->ndim - 3; i < x->ndim; i++)
        if (x->shape[i] == 0) {
            amp_error(AMP_ERR_SHAPE, "%s: x %s: the non-batch dimensions must not be empty", fn, xshape(x, b));
            return false;
        }
    return true;
}

static bool pool_geom(const char *fn, const amp_tensor *x, const amp_pool_params *p, bool max_pool, amp_pool_args *g) {
    char b[AMP_SHAPE_BUF];
    if (!p) {
        amp_error(AMP_ERR_ARG, "%s: p is NULL (the kernel size is required)", fn);
        return false;
    }
    memset(g, 0, sizeof *g);
    int64_t k[2], s[2], pd[2], d[2];
    for (int i = 0; i < 2; i++) {
        k[i] = p->kernel[i];
        s[i] = p->stride[i] == 0 ? k[i] : p->stride[i];
        pd[i] = p->padding[i];
        d[i] = p->dilation[i] == 0 ? 1 : p->dilation[i];
        if (k[i] < 1) {
            amp_error(AMP_ERR_ARG, "%s: kernel %lldx%lld must be positive", fn, (long long)p->kernel[0], (long long)p->kernel[1]);
            return false;
        }
        if (s[i] < 1) {
            amp_error(AMP_ERR_ARG, "%s: stride %lldx%lld must be positive (0 means the kernel size)", fn,
                      (long long)p->stride[0], (long long)p->stride[1]);
            return false;
        }
        if (d[i] < 1) {
            amp_error(AMP_ERR_ARG, "%s: dilation %lldx%lld must be positive", fn, (long long)p->dilation[0],
                      (long long)p->dilation[1]);
            return false;
        }
        if (!max_pool && d[i] != 1) {
            amp_error(AMP_ERR_ARG, "%s: dilation %lldx%lld is not supported (max pool only)", fn, (long long)p->dilation[0],
                      (long long)p->dilation[1]);
            return false;
        }
        if (pd[i] < 0 || pd[i] > k[i] / 2) {
            amp_error(AMP_ERR_ARG, "%s: padding %lldx%lld must be between 0 and half the kernel size %lldx%lld", fn,
                      (long long)p->padding[0], (long long)p->padding[1], (long long)p->kernel[0], (long long)p->kernel[1]);
            return false;
        }
        if (k[i] == 1) d[i] = 1; /* a one-wide window does not move by its dilation */
    }
    g->H = x->shape[x->ndim - 2], g->W = x->shape[x->ndim - 1];
    g->kh = k[0], g->kw = k[1], g->sh = s[0], g->sw = s[1];
    g->ph = pd[0], g->pw = pd[1], g->dh = d[0], g->dw = d[1];
    bool ok = true;
    g->OH = pool_out(fn, g->H, k[0], pd[0], s[0], d[0], p->ceil_mode, &ok);
    if (ok) g->OW = pool_out(fn, g->W, k[1], pd[1], s[1], d[1], p->ceil_mode, &ok);
    if (!ok) return false;
    if (g->OH < 1 || g->OW < 1) {
        amp_error(AMP_ERR_SHAPE, "%s: x %s with kernel %lldx%lld, padding %lldx%lld, dilation %lldx%lld gives an empty "
                                 "output (%lldx%lld)",
                  fn, xshape(x, b), (long long)k[0], (long long)k[1], (long long)pd[0], (long long)pd[1], (long long)d[0],
                  (long long)d[1], (long long)g->OH, (long long)g->OW);
        return false;
    }
    g->planes = amp_tensor_numel(x) / (g->H * g->W);
    g->include_pad = !p->exclude_pad;
    return true;
}

static amp_tensor *new_out(const char *fn, const amp_tensor *x, amp_dtype dt, int64_t OH, int64_t OW) {
    int64_t shape[4];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 2] = OH;
    shape[x->ndim - 1] = OW;
    return amp__empty_out_on(fn, amp__dev(x), dt, x->ndim, shape);
}

/* ---- max pool ------------------------------------------------------------------------- */
static amp_status max_pool_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const amp_pool_args *a = n->ctx;
    const amp_edge *e = &n->inputs[0];
    const amp_backend *be = amp__backend_of("amp_backward", gout[0]);
    if (!be) return amp_last_status();
    return AMP_KCALL(be, pool, max_pool2d_backward, "amp_backward", a, n->saved[0], gout[0], e->ndim, e->shape, &gin[0]);
}

amp_tensor *amp_max_pool2d(amp_tensor *x, const amp_pool_params *p, amp_tensor **indices) {
    static const char *fn = "amp_max_pool2d";
    if (indices) *indices = NULL;
    if (!check_input(fn, x)) return NULL;
    amp_pool_args a;
    if (!pool_geom(fn, x, p, true, &a)) return NULL;
    amp_tensor *in[1];
    int mask;
    const amp_backend *be = amp__op_begin1(fn, AMP_OP_MAX_POOL2D, &x, in, &mask);
    if (mask < 0) return NULL;
    const bool grad = amp__needs_grad(1, in);
    /* the caller's indices (i64, flat per plane), or what the backward needs
     * in the backend's own form (a->keep_slots), or nothing */
    a.keep_slots = !indices;
    amp_tensor *out = be ? new_out(fn, x, x->dtype, a.OH, a.OW) : NULL;
    amp_tensor *idx = NULL;
    if (!out || (indices && !(idx = new_out(fn, x, AMP_I64, a.OH, a.OW)))) goto fail;
    if (AMP_KCALL(be, pool, max_pool2d, fn, &a, x, out, indices || grad ? &idx : NULL) != AMP_OK) goto fail;
    if (grad) {
        amp_node_spec spec = {.backward = max_pool_backward, .ctx = &a, .ctx_size = sizeof a, .nsave = 1, .save = {idx}};
        if (amp__node_record(fn, out, in, 1, &spec) != AMP_OK) goto fail;
    }
    if (indices)
        *indices = idx;
    else
        amp__release(idx); /* the backend's record, now the node's */
    amp__autocast_done(in, 1, mask);
    return out;
fail:
    amp_tensor_free(out);
    if (indices) amp_tensor_free(idx);
    else amp__release(idx);
    amp__autocast_done(in, 1, mask);
    return NULL;
}

/* ---- average pools (a.adaptive: adaptive_avg_pool2d) ------------------------------------- */
static amp_status avg_pool_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const amp_pool_args *a = n->ctx;
    const amp_edge *e = &n->inputs[0];
    const amp_backend *be = amp__backend_of("amp_backward", gout[0]);
    if (!be) return amp_last_status();
    return AMP_KCALL(be, pool, avg_pool2d_backward, "amp_backward", a, gout[0], e->ndim, e->shape, &gin[0]);
}

static amp_tensor *avg_impl(const char *fn, amp_op_id op, amp_tensor *x, const amp_pool_args *a) {
    amp_tensor *in[1];
    int mask;
    const amp_backend *be = amp__op_begin1(fn, op, &x, in, &mask);
    if (mask < 0) return NULL;
    amp_tensor *out = be ? new_out(fn, x, x->dtype, a->OH, a->OW) : NULL;
    if (!out || AMP_KCALL(be, pool, avg_pool2d, fn, a, x, out) != AMP_OK) goto fail;
    if (amp__needs_grad(1, in)) {
        amp_node_spec spec = {.backward = avg_pool_backward, .ctx = a, .ctx_size = sizeof *a};
        if (amp__node_record(fn, out, in, 1, &spec) != AMP_OK) goto fail;
    }
    return amp__op_end(fn, true, out, in, 1, mask, NULL, NULL, 0);
fail:
    return amp__op_end(fn, false, out, in, 1, mask, NULL, NULL, 0);
}

amp_tensor *amp_avg_pool2d(amp_tensor *x, const amp_pool_params *p) {
    static const char *fn = "amp_avg_pool2d";
    if (!check_input(fn, x)) return NULL;
    amp_pool_args a;
    if (!pool_geom(fn, x, p, false, &a)) return NULL;
    return avg_impl(fn, AMP_OP_AVG_POOL2D, x, &a);
}

amp_tensor *amp_adaptive_avg_pool2d(amp_tensor *x, int64_t out_h, int64_t out_w) {
    static const char *fn = "amp_adaptive_avg_pool2d";
    if (!check_input(fn, x)) return NULL;
    if (out_h < 1 || out_w < 1)
        return amp_error_null(AMP_ERR_ARG, "%s: output size %lldx%lld must be positive", fn, (long long)out_h,
                              (long long)out_w);
    amp_pool_args a;
    memset(&a, 0, sizeof a);
    a.adaptive = true;
    a.H = x->shape[x->ndim - 2];
    a.W = x->shape[x->ndim - 1];
    a.OH = out_h;
    a.OW = out_w;
    a.planes = amp_tensor_numel(x) / (a.H * a.W);
    return avg_impl(fn, AMP_OP_ADAPTIVE_AVG_POOL2D, x, &a);
}

/* max_pool2d, avg_pool2d, adaptive_avg_pool2d on [N,C,H,W] or [C,H,W].
 * Checks, output sizes (PyTorch's formulas, ceil_mode included) and autograd
 * here; the loops are in kernels/cpu/pool.c (f32; half inputs are widened
 * and the result rounded once). */
#include <string.h>

#include "kernels/cpu/pool.h"
#include "ops/op_util.h"

typedef struct {
    amp_pool_geom g;
    int64_t planes;
    bool include_pad;
} pool_ctx;

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

static bool pool_geom(const char *fn, const amp_tensor *x, const amp_pool_params *p, bool max_pool, pool_ctx *c) {
    char b[AMP_SHAPE_BUF];
    if (!p) {
        amp_error(AMP_ERR_ARG, "%s: p is NULL (the kernel size is required)", fn);
        return false;
    }
    amp_pool_geom *g = &c->g;
    memset(c, 0, sizeof *c);
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
    c->planes = amp_tensor_numel(x) / (g->H * g->W);
    c->include_pad = !p->exclude_pad;
    return true;
}

static amp_tensor *new_out(const char *fn, const amp_tensor *x, amp_dtype dt, int64_t OH, int64_t OW) {
    int64_t shape[4];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 2] = OH;
    shape[x->ndim - 1] = OW;
    return amp__empty_out(fn, dt, x->ndim, shape);
}

/* f32 output buffer: out's own data when out is f32, else scratch. */
static float *out_f32(amp_tensor *out) {
    if (out->dtype == AMP_F32) return amp__data(out);
    return amp__ws_alloc((size_t)amp_tensor_numel(out) * sizeof(float));
}

static void out_done(amp_tensor *out, float *y) {
    if (out->dtype == AMP_F32) return;
    amp__from_f32(out, y);
    amp__ws_free(y, (size_t)amp_tensor_numel(out) * sizeof(float));
}

/* gradient buffer with the input's shape (f32) */
static amp_tensor *grad_like(const amp_edge *e) {
    return amp__tensor_new("amp_backward", AMP_F32, e->ndim, e->shape, amp__mem_current(AMP_MEM_WORKSPACE), 0);
}

/* ---- max pool ------------------------------------------------------------------------- */
/* windows that never overlap: each input position gets at most one dy */
static bool disjoint(const amp_pool_geom *g) { return g->dh == 1 && g->dw == 1 && g->kh <= g->sh && g->kw <= g->sw; }

static amp_status max_pool_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const pool_ctx *c = n->ctx;
    const amp_tensor *idx = n->saved[0];
    const amp_tensor *gy = gout[0];
    if (disjoint(&c->g) && amp_tensor_is_contiguous(gy) &&
        (gy->dtype == AMP_F32 || gy->dtype == AMP_F16 || gy->dtype == AMP_BF16)) {
        /* the gradient in dy's dtype, written once (no f32 buffer, no cast after) */
        const amp_edge *e = &n->inputs[0];
        amp_tensor *dx = amp__tensor_new("amp_backward", gy->dtype, e->ndim, e->shape, amp__mem_current(AMP_MEM_WORKSPACE), 0);
        if (!dx) return amp_last_status();
        if (idx->dtype == AMP_U8) /* the 2 x 2 path's window slots */
            amp_max_pool2d_backward_k2slot(amp__data(gy), gy->dtype, amp__data(idx), amp__data(dx), c->planes, &c->g);
        else
            amp_max_pool2d_backward_disjoint(amp__data(gy), gy->dtype, amp__data(idx), amp__data(dx), c->planes, &c->g);
        gin[0] = dx;
        return AMP_OK;
    }
    amp_tensor *dx = grad_like(&n->inputs[0]);
    if (!dx) return amp_last_status();
    bool owned;
    const float *dy = amp__f32_view(gout[0], &owned);
    if (!dy) {
        amp__release(dx);
        return amp_last_status();
    }
    amp_max_pool2d_backward_f32(dy, amp__data(idx), amp__data(dx), c->planes, &c->g);
    amp__f32_done(gout[0], dy, owned);
    gin[0] = dx;
    return AMP_OK;
}

amp_tensor *amp_max_pool2d(amp_tensor *x, const amp_pool_params *p, amp_tensor **indices) {
    static const char *fn = "amp_max_pool2d";
    if (indices) *indices = NULL;
    if (!check_input(fn, x)) return NULL;
    pool_ctx c;
    if (!pool_geom(fn, x, p, true, &c)) return NULL;
    amp_tensor *in[1] = {x};
    int mask = amp__autocast(AMP_OP_MAX_POOL2D, in, 1);
    if (mask < 0) return NULL;
    x = in[0];
    /* The 2 x 2 / stride 2 path in the tensor's dtype (AVX-512). Unless the
     * caller asks for the indices, it keeps only what the backward needs: the
     * window position of each max in one byte (none without autograd),
     * instead of an 8-byte flat index. */
    const bool k2 = amp_cpu_active() >= AMP_CPU_AVX512 && amp_tensor_is_contiguous(x) && amp_max_pool2d_k2_ok(&c.g) &&
                    (x->dtype == AMP_F32 || x->dtype == AMP_F16 || x->dtype == AMP_BF16);
    const bool grad = amp__needs_grad(1, in);
    amp_tensor *out = new_out(fn, x, x->dtype, c.g.OH, c.g.OW);
    amp_tensor *idx = NULL;
    if (!k2 || indices) idx = new_out(fn, x, AMP_I64, c.g.OH, c.g.OW);
    else if (grad) idx = new_out(fn, x, AMP_U8, c.g.OH, c.g.OW);
    bool owned = false;
    const float *xf = NULL;
    float *y = NULL;
    if (!out || ((!k2 || indices || grad) && !idx)) goto fail;
    if (k2) {
        const bool slots = idx && idx->dtype == AMP_U8;
        amp_max_pool2d_k2_avx512(amp__data(x), x->dtype, amp__data(out), idx && !slots ? amp__data(idx) : NULL,
                                 slots ? amp__data(idx) : NULL, c.planes, &c.g);
    } else {
        xf = amp__f32_view(x, &owned);
        if (!xf || !(y = out_f32(out))) goto fail;
        amp_max_pool2d_f32(xf, y, amp__data(idx), c.planes, &c.g);
        out_done(out, y);
        amp__f32_done(x, xf, owned);
    }
    if (grad) {
        amp_node *nd = amp__node_new(fn, max_pool_backward, 1, in, sizeof(pool_ctx));
        if (!nd) {
            xf = NULL, y = NULL;
            goto fail;
        }
        amp__node_save(nd, idx);
        *(pool_ctx *)nd->ctx = c;
        amp__node_attach(nd, out);
    }
    if (indices)
        *indices = idx;
    else
        amp_tensor_free(idx);
    amp__autocast_done(in, 1, mask);
    return out;
fail:
    if (xf) amp__f32_done(x, xf, owned);
    if (y && out->dtype != AMP_F32) amp__ws_free(y, (size_t)amp_tensor_numel(out) * sizeof(float));
    amp_tensor_free(out);
    amp_tensor_free(idx);
    amp__autocast_done(in, 1, mask);
    return NULL;
}

/* ---- average pools -------------------------------------------------------------------- */
typedef struct {
    pool_ctx p;
    bool adaptive;
} avg_ctx;

static amp_status avg_pool_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const avg_ctx *c = n->ctx;
    amp_tensor *dx = grad_like(&n->inputs[0]);
    if (!dx) return amp_last_status();
    bool owned;
    const float *dy = amp__f32_view(gout[0], &owned);
    if (!dy) {
        amp__release(dx);
        return amp_last_status();
    }
    const amp_pool_geom *g = &c->p.g;
    if (c->adaptive)
        amp_adaptive_avg_pool2d_backward_f32(dy, amp__data(dx), c->p.planes, g->H, g->W, g->OH, g->OW);
    else
        amp_avg_pool2d_backward_f32(dy, amp__data(dx), c->p.planes, g, c->p.include_pad);
    amp__f32_done(gout[0], dy, owned);
    gin[0] = dx;
    return AMP_OK;
}

static amp_tensor *avg_impl(const char *fn, amp_op_id op, amp_tensor *x, avg_ctx *c) {
    amp_tensor *in[1] = {x};
    int mask = amp__autocast(op, in, 1);
    if (mask < 0) return NULL;
    x = in[0];
    const amp_pool_geom *g = &c->p.g;
    amp_tensor *out = new_out(fn, x, x->dtype, g->OH, g->OW);
    if (!out) goto done;
    bool owned;
    const float *xf = amp__f32_view(x, &owned);
    float *y = xf ? out_f32(out) : NULL;
    if (!y) {
        if (xf) amp__f32_done(x, xf, owned);
        goto fail;
    }
    if (c->adaptive)
        amp_adaptive_avg_pool2d_f32(xf, y, c->p.planes, g->H, g->W, g->OH, g->OW);
    else
        amp_avg_pool2d_f32(xf, y, c->p.planes, g, c->p.include_pad);
    out_done(out, y);
    amp__f32_done(x, xf, owned);
    if (amp__needs_grad(1, in)) {
        amp_node *nd = amp__node_new(fn, avg_pool_backward, 1, in, sizeof(avg_ctx));
        if (!nd) goto fail;
        *(avg_ctx *)nd->ctx = *c;
        amp__node_attach(nd, out);
    }
    goto done;
fail:
    amp_tensor_free(out);
    out = NULL;
done:
    amp__autocast_done(in, 1, mask);
    return out;
}

amp_tensor *amp_avg_pool2d(amp_tensor *x, const amp_pool_params *p) {
    static const char *fn = "amp_avg_pool2d";
    if (!check_input(fn, x)) return NULL;
    avg_ctx c;
    memset(&c, 0, sizeof c);
    if (!pool_geom(fn, x, p, false, &c.p)) return NULL;
    return avg_impl(fn, AMP_OP_AVG_POOL2D, x, &c);
}

amp_tensor *amp_adaptive_avg_pool2d(amp_tensor *x, int64_t out_h, int64_t out_w) {
    static const char *fn = "amp_adaptive_avg_pool2d";
    if (!check_input(fn, x)) return NULL;
    if (out_h < 1 || out_w < 1)
        return amp_error_null(AMP_ERR_ARG, "%s: output size %lldx%lld must be positive", fn, (long long)out_h,
                              (long long)out_w);
    avg_ctx c;
    memset(&c, 0, sizeof c);
    c.adaptive = true;
    c.p.g.H = x->shape[x->ndim - 2];
    c.p.g.W = x->shape[x->ndim - 1];
    c.p.g.OH = out_h;
    c.p.g.OW = out_w;
    c.p.planes = amp_tensor_numel(x) / (c.p.g.H * c.p.g.W);
    return avg_impl(fn, AMP_OP_ADAPTIVE_AVG_POOL2D, x, &c);
}

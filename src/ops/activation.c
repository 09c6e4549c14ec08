/* Activations: gelu (erf and tanh forms), softplus, prelu, swiglu, dropout (relu,
 * silu, sigmoid and tanh come from kernels/ew_ops.h's AMP_EW_UNARY_API rows,
 * generated in elementwise.c). Kernels: src/kernels/cpu/elementwise.c; helpers:
 * ops/elementwise.h. f32, f16, bf16 and f64 inputs. */
#include "ops/elementwise.h"

#include <math.h>
#include <string.h>

amp_tensor *amp_gelu(amp_tensor *x, amp_gelu_approx approx) {
    static const char *fn = "amp_gelu";
    if (approx != AMP_GELU_ERF && approx != AMP_GELU_TANH)
        return amp_error_null(AMP_ERR_ARG, "%s: approx %d is not AMP_GELU_ERF (0) or AMP_GELU_TANH (1)", fn, (int)approx);
    bool t = approx == AMP_GELU_TANH;
    return amp__ew_unary(fn, AMP_OP_GELU, x, true, t ? AMP_EW_GELU_TANH : AMP_EW_GELU_ERF, NULL,
                         t ? AMP_EW_G_GELU_TANH : AMP_EW_G_GELU_ERF, NULL, AMP_EW_SAVE_INPUT);
}

amp_tensor *amp_softplus(amp_tensor *x, double beta, double threshold) {
    static const char *fn = "amp_softplus";
    if (!amp__arg(fn, x, "x")) return NULL;
    if (!(beta != 0) || isnan(beta) || isinf(beta))
        return amp_error_null(AMP_ERR_ARG, "%s: beta = %g must be finite and non-zero", fn, beta);
    if (isnan(threshold)) return amp_error_null(AMP_ERR_ARG, "%s: threshold is NaN", fn);
    amp_ew_params p = {.s0 = beta, .s1 = threshold};
    return amp__ew_unary(fn, AMP_OP_SOFTPLUS, x, true, AMP_EW_SOFTPLUS, &p, AMP_EW_G_SOFTPLUS, &p, AMP_EW_SAVE_INPUT);
}

/* ---- swiglu --------------------------------------------------------------------------------- */
/* silu(gate) * up in one pass (the catalogue's SWIGLU row): f32 (f64)
 * arithmetic, rounded once; gate and up broadcast and promote as torch's
 * F.silu(gate) * up would (silu and mul are in no autocast list). */
static amp_status swiglu_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const amp_tensor *g = gout[0], *gate = n->saved[0], *up = n->saved[1];
    if (n->inputs[0].needs_grad &&
        !(gin[0] = amp__ew_grad(n, 0, AMP_EW_G_SWIGLU_GATE, NULL, 3, (const amp_tensor *[]){g, gate, up})))
        return amp_last_status();
    if (n->inputs[1].needs_grad && !(gin[1] = amp__ew_grad(n, 1, AMP_EW_G_SWIGLU_UP, NULL, 2, (const amp_tensor *[]){g, gate})))
        return amp_last_status();
    return AMP_OK;
}

/* create_graph: silu'(gate) = s (1 + gate (1 - s)), s = sigmoid(gate), with ops */
static amp_status swiglu_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    amp_tensor *g = gout[0], *gate = amp__saved_input(n, 0), *up = amp__saved_input(n, 1);
    for (int i = 0; i < 2; i++) {
        const amp_edge *e = &n->inputs[i];
        if (!e->needs_grad) continue;
        amp_tensor *t;
        if (i == 0) {
            amp_tensor *sg = amp_sigmoid(gate);
            amp_tensor *d = amp_mul(sg, amp_add_scalar(amp_mul(gate, amp_rsub_scalar(sg, 1.0)), 1.0));
            t = amp_mul(amp_mul(g, up), d);
        } else {
            t = amp_mul(g, amp_silu(gate));
        }
        if (!(gin[i] = amp__sum_to_diff(t, e->ndim, e->shape))) return amp_last_status();
    }
    return AMP_OK;
}

amp_tensor *amp_swiglu(amp_tensor *gate, amp_tensor *up) {
    static const char *fn = "amp_swiglu";
    if (!amp__arg(fn, gate, "gate") || !amp__arg(fn, up, "up")) return NULL;
    if (!amp__check_float64ok(fn, gate, "gate") || !amp__check_float64ok(fn, up, "up")) return NULL;
    amp_tensor *in[2] = {gate, up};
    int mask = amp__autocast_dev(AMP_OP_SWIGLU, in, 2, NULL);
    if (mask < 0) return NULL;
    amp_tensor *out = NULL;
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    if (amp__broadcast_shapes(fn, in[0], in[1], &ndim, shape) == AMP_OK)
        out = amp__ew_apply(fn, AMP_EW_SWIGLU, NULL, amp__ew_result_type(in, 2), 2, (const amp_tensor *const *)in, ndim,
                            shape);
    amp_node_spec spec = {.backward = swiglu_backward, .backward_diff = swiglu_backward_diff, .nsave = 2,
                          .save = {in[0], in[1]}};
    return amp__op_end(fn, out != NULL, out, in, 2, mask, &spec, NULL, 0);
}

/* ---- prelu ------------------------------------------------------------------------------------ */
/* weight viewed at x's rank: [1,C,1,...] (C > 1 weights) or all ones. */
static void weight_view(const amp_tensor *w, int xndim, const int64_t *xshape, amp_tensor *v) {
    *v = *w;
    v->ndim = xndim;
    int64_t wn = amp_tensor_numel(w);
    for (int d = 0; d < xndim; d++) {
        v->shape[d] = 1;
        v->stride[d] = 0;
    }
    if (wn > 1) {
        v->shape[1] = xshape[1];
        v->stride[1] = w->stride[0];
    }
}

static amp_status prelu_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const amp_tensor *g = gout[0], *x = n->saved[0], *w = n->saved[1];
    amp_tensor wv;
    weight_view(w, x->ndim, x->shape, &wv);
    if (n->inputs[0].needs_grad) {
        gin[0] = amp__ew_grad(n, 0, AMP_EW_G_PRELU_X, NULL, 3, (const amp_tensor *[]){g, x, &wv});
        if (!gin[0]) return amp_last_status();
    }
    if (n->inputs[1].needs_grad) {
        /* sum over everything but the channel dim, then back to w's shape */
        bool f64 = g->dtype == AMP_F64 || x->dtype == AMP_F64;
        amp_tensor *full = amp__ew_apply("amp_backward", AMP_EW_G_PRELU_W, NULL, f64 ? AMP_F64 : AMP_F32, 2,
                                         (const amp_tensor *[]){g, x}, g->ndim, g->shape);
        if (!full) return amp_last_status();
        amp_tensor *s = amp__sum_to_shape(full, wv.ndim, wv.shape);
        amp__release(full);
        if (!s) return amp_last_status();
        int64_t st[AMP_MAX_DIMS];
        amp__contig_strides(w->ndim, w->shape, st);
        gin[1] = amp__view(s, w->ndim, w->shape, st, s->offset);
        amp__release(s);
        if (!gin[1]) return amp_last_status();
    }
    return AMP_OK;
}

amp_tensor *amp_prelu(amp_tensor *x, amp_tensor *weight) {
    static const char *fn = "amp_prelu";
    if (!amp__arg(fn, x, "x") || !amp__arg(fn, weight, "weight")) return NULL;
    if (!amp__check_float64ok(fn, x, "x") || !amp__check_float64ok(fn, weight, "weight")) return NULL;
    char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
    if (weight->ndim > 1)
        return amp_error_null(AMP_ERR_SHAPE, "%s: weight must be 0-d or 1-d, got shape %s", fn,
                              amp__shape_fmt(weight->ndim, weight->shape, a, sizeof a));
    int64_t wn = amp_tensor_numel(weight);
    int64_t channels = x->ndim >= 2 ? x->shape[1] : 1;
    if (wn != 1 && wn != channels)
        return amp_error_null(AMP_ERR_SHAPE,
                              "%s: weight %s has %lld elements; expected 1 or the %lld channels (dim 1) of x %s", fn,
                              amp__shape_fmt(weight->ndim, weight->shape, a, sizeof a), (long long)wn,
                              (long long)channels, amp__shape_fmt(x->ndim, x->shape, b, sizeof b));
    amp_tensor *in[2] = {x, weight};
    int mask = amp__autocast_dev(AMP_OP_PRELU, in, 2, NULL);
    if (mask < 0) return NULL;
    amp_tensor wv;
    weight_view(in[1], in[0]->ndim, in[0]->shape, &wv);
    amp_dtype dt = amp__ew_result_type(in, 2);
    amp_tensor *out = amp__ew_apply(fn, AMP_EW_PRELU, NULL, dt, 2, (const amp_tensor *[]){in[0], &wv}, in[0]->ndim,
                                    in[0]->shape);
    if (out && amp__needs_grad(2, in)) {
        amp_node *n = amp__node_new(fn, prelu_backward, 2, in, 0);
        if (!n) {
            amp_tensor_free(out);
            out = NULL;
        } else {
            amp__node_save(n, in[0]);
            amp__node_save(n, in[1]);
            amp__node_attach(n, out);
        }
    }
    amp__autocast_done(in, 2, mask);
    return out;
}

/* ---- dropout ---------------------------------------------------------------------------------- */
amp_tensor *amp_dropout(amp_tensor *x, double p, bool training, amp_generator *g) {
    static const char *fn = "amp_dropout";
    if (!amp__arg(fn, x, "x") || !amp__check_float64ok(fn, x, "x")) return NULL;
    if (!(p >= 0.0 && p <= 1.0)) return amp_error_null(AMP_ERR_ARG, "%s: p = %g is outside [0, 1]", fn, p);
    if (!training || p == 0.0) {
        amp_tensor *in[1] = {x};
        int mask = amp__autocast_dev(AMP_OP_DROPOUT, in, 1, NULL);
        if (mask < 0) return NULL;
        amp_tensor *out = amp__ew_identity(fn, in[0]);
        amp__autocast_done(in, 1, mask);
        return out;
    }
    if (p == 1.0) { /* torch: input * 0 */
        amp_ew_params z = {.s0 = 0.0};
        return amp__ew_unary(fn, AMP_OP_DROPOUT, x, true, AMP_EW_MUL_S, &z, AMP_EW_MUL_S, &z, AMP_EW_SAVE_NONE);
    }
    if (!g) g = amp_default_generator();
    /* the mask is a function of (seed, offset + i): the backward regenerates
     * it instead of saving it, and no thread count changes it */
    amp_ew_params q = {.s0 = 1.0 - p, .seed = g->seed, .offset = amp__gen_reserve(g, (uint64_t)amp_tensor_numel(x))};
    q.thresh = (uint64_t)ceil(p * 4294967296.0);
    return amp__ew_unary(fn, AMP_OP_DROPOUT, x, true, AMP_EW_DROPOUT, &q, AMP_EW_G_DROPOUT, &q, AMP_EW_SAVE_NONE);
}

/* ---- gelu's derivative as an op (double backward) ------------------------------------------ */
/* f''(x): erf form phi(x) (2 - x^2); tanh form (1 - t^2) (u' - x t u'^2 + x u''/2) with
 * u = c (x + k x^3), t = tanh(u). */
static double gelu_d2(double x, bool tanh_form) {
    if (!tanh_form) return exp(-0.5 * x * x) / sqrt(2.0 * M_PI) * (2.0 - x * x);
    const double c = sqrt(2.0 / M_PI), k = 0.044715;
    double u = c * (x + k * x * x * x), t = tanh(u), du = c * (1.0 + 3.0 * k * x * x), d2u = 6.0 * c * k * x;
    return (1.0 - t * t) * (du - x * t * du * du + 0.5 * x * d2u);
}

static amp_status gelu_deriv_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const amp_tensor *x = n->saved[0], *g = gout[0];
    bool tanh_form = *(bool *)n->ctx;
    /* host arithmetic on the values (gelu's third derivative is rare) */
    if (amp__cpu_only("amp_backward (create_graph)", x, "gelu's saved input") != AMP_OK ||
        amp__cpu_only("amp_backward (create_graph)", g, "the gradient") != AMP_OK)
        return amp_last_status();
    amp_dtype dt = x->dtype == AMP_F64 ? AMP_F64 : AMP_F32;
    amp_tensor *out = amp__tensor_new("amp_backward", dt, x->ndim, x->shape, amp__mem_current(AMP_MEM_WORKSPACE), 0);
    if (!out) return amp_last_status();
    int64_t cnt = amp_tensor_numel(x);
    size_t es = amp_dtype_size(dt);
    for (int64_t i = 0; i < cnt; i++) {
        double v = amp__load(amp__elem_ptr(g, i), g->dtype) * gelu_d2(amp__load(amp__elem_ptr(x, i), x->dtype), tanh_form);
        amp__store((char *)amp__data(out) + (size_t)i * es, dt, v);
    }
    gin[0] = out;
    return AMP_OK;
}

amp_tensor *amp__gelu_deriv(amp_tensor *x, bool tanh_form) {
    static const char *fn = "amp_gelu_backward";
    if (!x) return NULL;
    amp_dtype dt = x->dtype == AMP_F64 ? AMP_F64 : AMP_F32;
    amp_tensor *ones = amp_tensor_full_on(amp__dev(x), dt, x->ndim, x->shape, 1.0);
    if (!ones) return NULL;
    const amp_tensor *ops[2] = {ones, x};
    amp_tensor *out = amp__ew_apply(fn, tanh_form ? AMP_EW_G_GELU_TANH : AMP_EW_G_GELU_ERF, NULL, dt, 2, ops, x->ndim, x->shape);
    amp_tensor_free(ones);
    if (out && amp__needs_grad(1, &x)) {
        amp_node *n = amp__node_new(fn, gelu_deriv_backward, 1, &x, sizeof(bool));
        if (!n) {
            amp_tensor_free(out);
            return NULL;
        }
        *(bool *)n->ctx = tanh_form;
        amp__node_save(n, x);
        amp__node_attach(n, out);
    }
    return out;
}

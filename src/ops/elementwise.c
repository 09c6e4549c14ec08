/* Elementwise math: add, sub, mul, div (broadcasting, type promotion), the
 * scalar forms, pow, neg, clamp, addcmul, addcdiv; the one-operand ops
 * without parameters (exp, log, ..., relu, sigmoid, tanh, silu) generated
 * from kernels/ew_ops.h's AMP_EW_UNARY_API rows; and the helpers
 * activation.c shares (ops/elementwise.h). Kernels: src/kernels/cpu/elementwise.c. */
#include "ops/elementwise.h"

#include <math.h>
#include <string.h>

#include "amp/numeric.h"
#include "kernels/backend.h"

/* ---- shared helpers ------------------------------------------------------------------ */
amp_tensor *amp__ew_apply(const char *fn, amp_ew_op op, const amp_ew_params *p, amp_dtype out_dt, int nin,
                          const amp_tensor *const *in, int ndim, const int64_t *shape) {
    /* the inputs' device computes (ops checked that they share one; this
     * keeps a device pointer from ever reaching another device's kernel) */
    amp_device dev = AMP_DEVICE_CPU;
    if (nin > 0 && amp__same_device(fn, in, NULL, nin, &dev) != AMP_OK) return NULL;
    const amp_backend *be = amp__backend(fn, dev);
    if (!be) return NULL;
    amp_tensor *out = amp__empty_out_on(fn, dev, out_dt, ndim, shape);
    if (!out) return NULL;
    amp_ew_operand opd[AMP_EW_MAX_IN];
    for (int k = 0; k < nin; k++) {
        opd[k].data = amp__data(in[k]);
        opd[k].dtype = in[k]->dtype;
        amp__broadcast_strides(in[k], ndim, shape, opd[k].stride);
    }
    amp_status st = AMP_KCALL(be, ew, ew, fn, op, p, ndim, shape, amp__data(out), out_dt, nin, opd);
    if (st != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

static bool same_shape_as(const amp_tensor *g, int ndim, const int64_t *shape) {
    return g->ndim == ndim && memcmp(g->shape, shape, sizeof(int64_t) * (size_t)ndim) == 0;
}

amp_tensor *amp__ew_grad(const amp_node *n, int i, amp_ew_op op, const amp_ew_params *p, int nin,
                         const amp_tensor *const *ops) {
    const amp_edge *e = &n->inputs[i];
    const amp_tensor *g = ops[0];
    if (same_shape_as(g, e->ndim, e->shape))
        return amp__ew_apply("amp_backward", op, p, e->dtype, nin, ops, g->ndim, g->shape);
    bool f64 = e->dtype == AMP_F64;
    for (int k = 0; k < nin; k++) f64 = f64 || ops[k]->dtype == AMP_F64;
    amp_tensor *full = amp__ew_apply("amp_backward", op, p, f64 ? AMP_F64 : AMP_F32, nin, ops, g->ndim, g->shape);
    if (!full) return NULL;
    amp_tensor *r = amp__sum_to_shape(full, e->ndim, e->shape);
    amp__release(full);
    return r;
}

amp_tensor *amp__ew_pass(const amp_node *n, int i, const amp_tensor *g) {
    const amp_edge *e = &n->inputs[i];
    if (same_shape_as(g, e->ndim, e->shape)) return amp__alias(g);
    return amp__sum_to_shape(g, e->ndim, e->shape);
}

static amp_status done(amp_tensor *t) { return t ? AMP_OK : amp_last_status(); }

/* torch's result type: zero-dim tensors do not promote tensors with dims
 * (f16[4] * f32 scalar tensor -> f16); among the dimensioned ones (or among
 * zero-dim ones when all are) ordinary promotion (f16 with bf16 -> f32). */
amp_dtype amp__ew_result_type(amp_tensor *const *in, int n) {
    amp_dtype dims = AMP_DTYPE_COUNT, zero = AMP_DTYPE_COUNT;
    for (int k = 0; k < n; k++) {
        amp_dtype *acc = in[k]->ndim > 0 ? &dims : &zero;
        *acc = *acc == AMP_DTYPE_COUNT ? in[k]->dtype : amp__promote(*acc, in[k]->dtype);
    }
    return dims != AMP_DTYPE_COUNT ? dims : zero;
}

/* ---- one-input ops ------------------------------------------------------------------------ */
typedef struct {
    amp_ew_op grad_op;
    amp_ew_params gp;
    amp_ew_save save;
} unary_ctx;

static amp_status unary_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    unary_ctx *c = n->ctx;
    if (c->save == AMP_EW_SAVE_NONE && c->grad_op == AMP_EW_COPY) {
        gin[0] = amp__ew_pass(n, 0, gout[0]);
    } else {
        const amp_tensor *ops[2] = {gout[0], n->saved[0]};
        gin[0] = amp__ew_grad(n, 0, c->grad_op, &c->gp, c->save == AMP_EW_SAVE_NONE ? 1 : 2, ops);
    }
    return done(gin[0]);
}

/* Differentiable backward (create_graph): the same gradients written with
 * public ops, so they can be differentiated again. Where the derivative is
 * piecewise constant (relu, abs, clamp, dropout) it enters as a constant. */
static amp_tensor *ones_like(const amp_tensor *t) {
    return amp_tensor_full_on(amp__dev(t), t->dtype == AMP_F64 ? AMP_F64 : AMP_F32, t->ndim, t->shape, 1.0);
}

/* grad_op(1, saved): the derivative itself, as a constant */
static amp_tensor *const_grad(amp_node *n, const amp_tensor *g) {
    unary_ctx *c = n->ctx;
    amp_tensor *ones = ones_like(g);
    if (!ones) return NULL;
    const amp_tensor *ops[2] = {ones, n->saved[0]};
    int nin = c->save == AMP_EW_SAVE_NONE ? 1 : 2;
    return amp__ew_apply("amp_backward", c->grad_op, &c->gp, ones->dtype, nin, ops, g->ndim, g->shape);
}

static double softplus_linear(double x, const void *arg) {
    const amp_ew_params *p = arg;
    return x * p->s0 > p->s1 ? 1.0 : 0.0; /* torch: x itself above the threshold */
}

static amp_status unary_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    unary_ctx *c = n->ctx;
    amp_tensor *g = gout[0], *r = NULL;
    double s = c->gp.s0;
    switch (c->grad_op) {
    case AMP_EW_COPY: r = g; break;
    case AMP_EW_MUL_S: r = amp_mul_scalar(g, s); break;
    case AMP_EW_DIV_S: r = amp_div_scalar(g, s); break;
    case AMP_EW_G_MUL_OUT: r = amp_mul(g, amp__saved_output(n, 0)); break; /* exp: y */
    case AMP_EW_G_DIV: r = amp_div(g, amp__saved_input(n, 0)); break;      /* log: 1/x */
    case AMP_EW_G_LOG1P: r = amp_div(g, amp_add_scalar(amp__saved_input(n, 0), 1.0)); break;
    case AMP_EW_G_SQRT: r = amp_div(g, amp_mul_scalar(amp__saved_output(n, 0), 2.0)); break;
    case AMP_EW_G_RSQRT: r = amp_mul(g, amp_mul_scalar(amp_pow(amp__saved_output(n, 0), 3.0), -0.5)); break;
    case AMP_EW_G_RECIP: {
        amp_tensor *y = amp__saved_output(n, 0);
        r = amp_neg(amp_mul(g, amp_mul(y, y)));
        break;
    }
    case AMP_EW_G_POW_S: r = amp_mul(g, amp_mul_scalar(amp_pow(amp__saved_input(n, 0), s - 1.0), s)); break;
    case AMP_EW_G_SIGMOID: {
        amp_tensor *y = amp__saved_output(n, 0);
        r = amp_mul(g, amp_mul(y, amp_rsub_scalar(y, 1.0)));
        break;
    }
    case AMP_EW_G_TANH: {
        amp_tensor *y = amp__saved_output(n, 0);
        r = amp_mul(g, amp_rsub_scalar(amp_mul(y, y), 1.0));
        break;
    }
    case AMP_EW_G_SILU: { /* s (1 + x (1 - s)) */
        amp_tensor *x = amp__saved_input(n, 0), *sg = amp_sigmoid(x);
        r = amp_mul(g, amp_mul(sg, amp_add_scalar(amp_mul(x, amp_rsub_scalar(sg, 1.0)), 1.0)));
        break;
    }
    case AMP_EW_G_SOFTPLUS: { /* sigmoid(beta x), 1 above the threshold */
        amp_tensor *x = amp__saved_input(n, 0), *m = amp__const_map(n->saved[0], softplus_linear, &c->gp);
        amp_tensor *sg = amp_sigmoid(amp_mul_scalar(x, c->gp.s0));
        r = amp_mul(g, amp_add(amp_mul(sg, amp_rsub_scalar(m, 1.0)), m));
        break;
    }
    case AMP_EW_G_GELU_ERF:
    case AMP_EW_G_GELU_TANH:
        r = amp_mul(g, amp__gelu_deriv(amp__saved_input(n, 0), c->grad_op == AMP_EW_G_GELU_TANH));
        break;
    case AMP_EW_G_RELU:
    case AMP_EW_G_ABS:
    case AMP_EW_G_CLAMP:
    case AMP_EW_G_DROPOUT: r = amp_mul(g, const_grad(n, g)); break;
    default:
        return amp_error(AMP_ERR_UNSUPPORTED, "%s: create_graph: %s has no double backward in amp", n->name, n->name);
    }
    gin[0] = r;
    return r ? AMP_OK : amp_last_status();
}

static bool check_x(const char *fn, const amp_tensor *x, const char *name, bool allow_f64) {
    return allow_f64 ? amp__check_float64ok(fn, x, name) : amp__check_float(fn, x, name);
}

amp_tensor *amp__ew_unary(const char *fn, amp_op_id id, amp_tensor *x, bool allow_f64, amp_ew_op op,
                          const amp_ew_params *p, amp_ew_op grad_op, const amp_ew_params *gp, amp_ew_save save) {
    if (!amp__arg(fn, x, "x") || !check_x(fn, x, "x", allow_f64)) return NULL;
    amp_tensor *in[1] = {x};
    int mask = amp__autocast_dev(id, in, 1, NULL);
    if (mask < 0) return NULL;
    amp_tensor *out = amp__ew_apply(fn, op, p, in[0]->dtype, 1, (const amp_tensor *const *)in, in[0]->ndim, in[0]->shape);
    unary_ctx c = {.grad_op = grad_op, .save = save};
    if (gp) c.gp = *gp;
    amp_node_spec spec = {.backward = unary_backward, .backward_diff = unary_backward_diff, .ctx = &c, .ctx_size = sizeof c,
                          .nsave = save != AMP_EW_SAVE_NONE, .save = {save == AMP_EW_SAVE_INPUT ? in[0] : out}};
    return amp__op_end(fn, out != NULL, out, in, 1, mask, &spec, NULL, 0);
}

static amp_status identity_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    gin[0] = amp__ew_pass(n, 0, gout[0]);
    return done(gin[0]);
}

static amp_status identity_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    AMP_UNUSED(n);
    gin[0] = gout[0];
    return AMP_OK;
}

amp_tensor *amp__ew_identity(const char *fn, amp_tensor *x) {
    amp_tensor *out = amp__view(x, x->ndim, x->shape, x->stride, x->offset);
    if (out && amp__needs_grad(1, &x)) {
        amp_node *n = amp__node_new(fn, identity_backward, 1, &x, 0);
        if (!n) {
            amp_tensor_free(out);
            return NULL;
        }
        n->backward_diff = identity_backward_diff;
        amp__node_attach(n, out);
    }
    return out;
}

#define P1(a) (&(amp_ew_params){.s0 = (a)})

/* amp_exp, amp_log, ...: one definition per row of kernels/ew_ops.h's
 * AMP_EW_UNARY_API */
#define EW_UNARY_API_DEF_(fn, id, autocast_id, grad, save)                                                   \
    amp_tensor *amp_##fn(amp_tensor *x) {                                                                     \
        return amp__ew_unary("amp_" #fn, AMP_OP_##autocast_id, x, true, AMP_EW_##id, NULL, AMP_EW_##grad, NULL, \
                             AMP_EW_SAVE_##save);                                                              \
    }
AMP_EW_UNARY_API(EW_UNARY_API_DEF_)
#undef EW_UNARY_API_DEF_

const amp_ew_unary_api amp__ew_unary_api[] = {
#define EW_UNARY_API_ROW_(fn, id, autocast_id, grad, save) \
    {"amp_" #fn, amp_##fn, AMP_EW_##id, AMP_EW_##grad, AMP_EW_SAVE_##save},
    AMP_EW_UNARY_API(EW_UNARY_API_ROW_)
#undef EW_UNARY_API_ROW_
};
const int amp__ew_unary_api_count = (int)(sizeof amp__ew_unary_api / sizeof amp__ew_unary_api[0]);

amp_tensor *amp_neg(amp_tensor *x) {
    return amp__ew_unary("amp_neg", AMP_OP_NEG, x, true, AMP_EW_NEG, NULL, AMP_EW_MUL_S, P1(-1.0), AMP_EW_SAVE_NONE);
}

/* Scalars never promote: the result keeps a's dtype; the scalar enters the
 * f32 (f64) computation rounded to it, as torch's opmath. */
amp_tensor *amp_add_scalar(amp_tensor *a, double s) {
    return amp__ew_unary("amp_add_scalar", AMP_OP_ADD, a, true, AMP_EW_ADD_S, P1(s), AMP_EW_COPY, NULL, AMP_EW_SAVE_NONE);
}
amp_tensor *amp_sub_scalar(amp_tensor *a, double s) {
    /* x + (-s) == x - s exactly in IEEE arithmetic */
    return amp__ew_unary("amp_sub_scalar", AMP_OP_SUB, a, true, AMP_EW_ADD_S, P1(-s), AMP_EW_COPY, NULL, AMP_EW_SAVE_NONE);
}
amp_tensor *amp_rsub_scalar(amp_tensor *a, double s) {
    return amp__ew_unary("amp_rsub_scalar", AMP_OP_SUB, a, true, AMP_EW_RSUB_S, P1(s), AMP_EW_MUL_S, P1(-1.0),
                         AMP_EW_SAVE_NONE);
}
amp_tensor *amp_mul_scalar(amp_tensor *a, double s) {
    return amp__ew_unary("amp_mul_scalar", AMP_OP_MUL, a, true, AMP_EW_MUL_S, P1(s), AMP_EW_MUL_S, P1(s), AMP_EW_SAVE_NONE);
}
amp_tensor *amp_div_scalar(amp_tensor *a, double s) {
    return amp__ew_unary("amp_div_scalar", AMP_OP_DIV, a, true, AMP_EW_DIV_S, P1(s), AMP_EW_DIV_S, P1(s), AMP_EW_SAVE_NONE);
}
amp_tensor *amp_pow(amp_tensor *a, double exponent) {
    return amp__ew_unary("amp_pow", AMP_OP_POW, a, true, AMP_EW_POW_S, P1(exponent), AMP_EW_G_POW_S, P1(exponent),
                         AMP_EW_SAVE_INPUT);
}

/* A bound as torch sees it: converted to x's dtype (half bounds round). */
static double bound_in(double v, amp_dtype dt) {
    if (isnan(v) || isinf(v)) return v;
    switch (dt) {
    case AMP_F32: return (double)(float)v;
    case AMP_F16: return amp_f16_to_f32(amp_f64_to_f16(v));
    case AMP_BF16: return amp_bf16_to_f32(amp_f64_to_bf16(v));
    default: return v;
    }
}

amp_tensor *amp_clamp(amp_tensor *x, double lo, double hi) {
    static const char *fn = "amp_clamp";
    if (!amp__arg(fn, x, "x") || !amp__check_float64ok(fn, x, "x")) return NULL;
    /* torch: min(max(x, lo), hi); lo > hi gives hi everywhere; a NaN bound
     * gives NaN everywhere; the gradient is 1 where lo <= x <= hi. */
    amp_ew_params p = {.s0 = bound_in(lo, x->dtype), .s1 = bound_in(hi, x->dtype)};
    amp_ew_op op = (isnan(lo) || isnan(hi)) ? AMP_EW_NAN_FILL : AMP_EW_CLAMP;
    return amp__ew_unary(fn, AMP_OP_CLAMP, x, true, op, &p, AMP_EW_G_CLAMP, &p, AMP_EW_SAVE_INPUT);
}

/* ---- two-input ops ------------------------------------------------------------------------------ */
typedef enum { BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV, BIN_POW } bin_kind;

typedef struct {
    bin_kind kind;
} bin_ctx;

static amp_status binary_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    bin_kind k = ((bin_ctx *)n->ctx)->kind;
    const amp_tensor *g = gout[0], *a = n->saved[0], *b = n->saved[1];
    for (int i = 0; i < 2; i++) {
        if (!n->inputs[i].needs_grad) continue;
        switch (k) {
        case BIN_ADD: gin[i] = amp__ew_pass(n, i, g); break;
        case BIN_SUB:
            gin[i] = i == 0 ? amp__ew_pass(n, i, g)
                            : amp__ew_grad(n, i, AMP_EW_MUL_S, P1(-1.0), 1, (const amp_tensor *[]){g});
            break;
        case BIN_MUL: gin[i] = amp__ew_grad(n, i, AMP_EW_G_MUL_OUT, NULL, 2, (const amp_tensor *[]){g, i == 0 ? b : a}); break;
        case BIN_DIV:
            gin[i] = i == 0 ? amp__ew_grad(n, i, AMP_EW_G_DIV, NULL, 2, (const amp_tensor *[]){g, b})
                            : amp__ew_grad(n, i, AMP_EW_G_DIV_B, NULL, 3, (const amp_tensor *[]){g, a, b});
            break;
        case BIN_POW:
            gin[i] = amp__ew_grad(n, i, i == 0 ? AMP_EW_G_POW_A : AMP_EW_G_POW_B, NULL, 3, (const amp_tensor *[]){g, a, b});
            break;
        }
        if (!gin[i]) return amp_last_status();
    }
    return AMP_OK;
}

static amp_status binary_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    bin_kind k = ((bin_ctx *)n->ctx)->kind;
    amp_tensor *g = gout[0];
    for (int i = 0; i < 2; i++) {
        const amp_edge *e = &n->inputs[i];
        if (!e->needs_grad) continue;
        amp_tensor *t = NULL;
        switch (k) {
        case BIN_ADD: t = g; break;
        case BIN_SUB: t = i == 0 ? g : amp_neg(g); break;
        case BIN_MUL: t = amp_mul(g, amp__saved_input(n, 1 - i)); break;
        case BIN_DIV: {
            amp_tensor *b = amp__saved_input(n, 1);
            t = i == 0 ? amp_div(g, b) : amp_neg(amp_div(amp_mul(g, amp__saved_input(n, 0)), amp_mul(b, b)));
            break;
        }
        case BIN_POW: {
            amp_tensor *a = amp__saved_input(n, 0), *b = amp__saved_input(n, 1);
            t = i == 0 ? amp_mul(g, amp_mul(b, amp_pow_tensor(a, amp_sub_scalar(b, 1.0))))
                       : amp_mul(g, amp_mul(amp_pow_tensor(a, b), amp_log(a)));
            break;
        }
        }
        gin[i] = amp__sum_to_diff(t, e->ndim, e->shape);
        if (!gin[i]) return amp_last_status();
    }
    return AMP_OK;
}

static amp_tensor *binary(const char *fn, amp_op_id id, bin_kind kind, amp_ew_op op, amp_tensor *a, amp_tensor *b) {
    if (!amp__arg(fn, a, "a") || !amp__arg(fn, b, "b")) return NULL;
    if (!amp__check_float64ok(fn, a, "a") || !amp__check_float64ok(fn, b, "b")) return NULL;
    amp_tensor *in[2] = {a, b};
    int mask = amp__autocast_dev(id, in, 2, NULL);
    if (mask < 0) return NULL;
    amp_tensor *out = NULL;
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    if (amp__broadcast_shapes(fn, in[0], in[1], &ndim, shape) == AMP_OK) {
        amp_dtype dt = amp__ew_result_type(in, 2);
        out = amp__ew_apply(fn, op, NULL, dt, 2, (const amp_tensor *const *)in, ndim, shape);
    }
    /* add/sub need only shapes (kept by the node's edges) */
    bool save = kind != BIN_ADD && kind != BIN_SUB;
    bin_ctx c = {kind};
    amp_node_spec spec = {.backward = binary_backward, .backward_diff = binary_backward_diff, .ctx = &c, .ctx_size = sizeof c,
                          .nsave = 2, .save = {save ? in[0] : NULL, save ? in[1] : NULL}};
    return amp__op_end(fn, out != NULL, out, in, 2, mask, &spec, NULL, 0);
}

amp_tensor *amp_add(amp_tensor *a, amp_tensor *b) { return binary("amp_add", AMP_OP_ADD, BIN_ADD, AMP_EW_ADD, a, b); }
amp_tensor *amp_sub(amp_tensor *a, amp_tensor *b) { return binary("amp_sub", AMP_OP_SUB, BIN_SUB, AMP_EW_SUB, a, b); }
amp_tensor *amp_mul(amp_tensor *a, amp_tensor *b) { return binary("amp_mul", AMP_OP_MUL, BIN_MUL, AMP_EW_MUL, a, b); }
amp_tensor *amp_div(amp_tensor *a, amp_tensor *b) { return binary("amp_div", AMP_OP_DIV, BIN_DIV, AMP_EW_DIV, a, b); }
amp_tensor *amp_pow_tensor(amp_tensor *a, amp_tensor *b) {
    return binary("amp_pow_tensor", AMP_OP_POW, BIN_POW, AMP_EW_POW, a, b);
}

/* ---- addcmul / addcdiv ------------------------------------------------------------------------------ */
typedef struct {
    bool div;
    double value;
} addc_ctx;

static amp_status addc_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    addc_ctx *c = n->ctx;
    const amp_tensor *g = gout[0], *t1 = n->saved[0], *t2 = n->saved[1];
    amp_ew_params p = {.s0 = c->value};
    for (int i = 0; i < 3; i++) {
        if (!n->inputs[i].needs_grad) continue;
        if (i == 0)
            gin[i] = amp__ew_pass(n, i, g);
        else if (!c->div)
            gin[i] = amp__ew_grad(n, i, AMP_EW_G_SCALED_MUL, &p, 2, (const amp_tensor *[]){g, i == 1 ? t2 : t1});
        else if (i == 1)
            gin[i] = amp__ew_grad(n, i, AMP_EW_G_SCALED_DIV, &p, 2, (const amp_tensor *[]){g, t2});
        else
            gin[i] = amp__ew_grad(n, i, AMP_EW_G_ADDCDIV_T2, &p, 3, (const amp_tensor *[]){g, t1, t2});
        if (!gin[i]) return amp_last_status();
    }
    return AMP_OK;
}

static amp_status addc_backward_diff(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    addc_ctx *c = n->ctx;
    amp_tensor *g = gout[0];
    for (int i = 0; i < 3; i++) {
        const amp_edge *e = &n->inputs[i];
        if (!e->needs_grad) continue;
        amp_tensor *t;
        if (i == 0) t = g;
        else if (!c->div) t = amp_mul_scalar(amp_mul(g, amp__saved_input(n, i == 1 ? 2 : 1)), c->value);
        else if (i == 1) t = amp_mul_scalar(amp_div(g, amp__saved_input(n, 2)), c->value);
        else {
            amp_tensor *t2 = amp__saved_input(n, 2);
            t = amp_mul_scalar(amp_div(amp_mul(g, amp__saved_input(n, 1)), amp_mul(t2, t2)), -c->value);
        }
        gin[i] = amp__sum_to_diff(t, e->ndim, e->shape);
        if (!gin[i]) return amp_last_status();
    }
    return AMP_OK;
}

static amp_tensor *addc(const char *fn, amp_op_id id, bool div, amp_tensor *input, amp_tensor *t1, amp_tensor *t2,
                        double value) {
    if (!amp__arg(fn, input, "input") || !amp__arg(fn, t1, "tensor1") || !amp__arg(fn, t2, "tensor2")) return NULL;
    if (!amp__check_float64ok(fn, input, "input") || !amp__check_float64ok(fn, t1, "tensor1") ||
        !amp__check_float64ok(fn, t2, "tensor2"))
        return NULL;
    amp_tensor *in[3] = {input, t1, t2};
    int mask = amp__autocast_dev(id, in, 3, NULL);
    if (mask < 0) return NULL;
    amp_tensor *out = NULL;
    /* broadcast all three: (input, t1) first, then that shape with t2 */
    amp_tensor s01;
    memset(&s01, 0, sizeof s01);
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    if (amp__broadcast_shapes(fn, in[0], in[1], &s01.ndim, s01.shape) == AMP_OK &&
        amp__broadcast_shapes(fn, &s01, in[2], &ndim, shape) == AMP_OK) {
        amp_dtype dt = amp__ew_result_type(in, 3);
        amp_ew_params p = {.s0 = value};
        out = amp__ew_apply(fn, div ? AMP_EW_ADDCDIV : AMP_EW_ADDCMUL, &p, dt, 3, (const amp_tensor *const *)in, ndim, shape);
    }
    if (out && amp__needs_grad(3, in)) {
        amp_node *n = amp__node_new(fn, addc_backward, 3, in, sizeof(addc_ctx));
        if (!n) {
            amp_tensor_free(out);
            out = NULL;
        } else {
            *(addc_ctx *)n->ctx = (addc_ctx){div, value};
            n->backward_diff = addc_backward_diff;
            amp__node_save(n, in[1]);
            amp__node_save(n, in[2]);
            amp__node_attach(n, out);
        }
    }
    amp__autocast_done(in, 3, mask);
    return out;
}

amp_tensor *amp_addcmul(amp_tensor *input, amp_tensor *t1, amp_tensor *t2, double value) {
    return addc("amp_addcmul", AMP_OP_ADDCMUL, false, input, t1, t2, value);
}
amp_tensor *amp_addcdiv(amp_tensor *input, amp_tensor *t1, amp_tensor *t2, double value) {
    return addc("amp_addcdiv", AMP_OP_ADDCDIV, true, input, t1, t2, value);
}

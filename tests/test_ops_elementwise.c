/* Elementwise math ops: add, sub, mul, div (broadcasting, promotion), the
 * scalar forms, pow, pow_tensor, exp, log, log1p, sqrt, rsqrt, reciprocal,
 * neg, abs, clamp, addcmul, addcdiv.
 *
 * Forward against float64 loops written here, backward against central
 * differences of those loops (tc_gradcheck), PyTorch golden data
 * (tools/golden/gen_elementwise.py), PyTorch edge-case semantics, the tiled
 * kernel iterator against its element-at-a-time reference, and bad input.
 *
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path (the
 * kernels have a build per path; every one must pass the same checks). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/ew_scalar.h"
#include "op_check.h"
#include "ops/elementwise.h"

/* ---- the ops under test, with float64 references ------------------------------------------ */
enum {
    OP_EXP, OP_LOG, OP_LOG1P, OP_SQRT, OP_RSQRT, OP_RECIP, OP_NEG, OP_ABS, OP_CLAMP, OP_POW,
    OP_ADD_S, OP_SUB_S, OP_RSUB_S, OP_MUL_S, OP_DIV_S,
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_POW_T, OP_ADDCMUL, OP_ADDCDIV, OP_COUNT
};
static const char *const op_name[OP_COUNT] = {
    "exp", "log", "log1p", "sqrt", "rsqrt", "reciprocal", "neg", "abs", "clamp", "pow",
    "add_scalar", "sub_scalar", "rsub_scalar", "mul_scalar", "div_scalar",
    "add", "sub", "mul", "div", "pow_tensor", "addcmul", "addcdiv"};

static int arity(int op) { return op >= OP_ADDCMUL ? 3 : op >= OP_ADD ? 2 : 1; }

/* input domains */
enum { D_NORMAL, D_POS, D_LOG1P, D_AWAY, D_EXPO };

static int domain(int op, int k) {
    switch (op) {
    case OP_LOG:
    case OP_SQRT:
    case OP_RSQRT: return D_POS;
    case OP_LOG1P: return D_LOG1P;
    case OP_RECIP: return D_AWAY;
    case OP_POW: return D_POS;
    case OP_DIV: return k == 1 ? D_AWAY : D_NORMAL;
    case OP_POW_T: return k == 0 ? D_POS : D_EXPO;
    case OP_ADDCDIV: return k == 2 ? D_AWAY : D_NORMAL;
    default: return D_NORMAL;
    }
}

static double sref(int op, const double *v, const double *prm) {
    double x = v[0];
    switch (op) {
    case OP_EXP: return exp(x);
    case OP_LOG: return log(x);
    case OP_LOG1P: return log1p(x);
    case OP_SQRT: return sqrt(x);
    case OP_RSQRT: return 1.0 / sqrt(x);
    case OP_RECIP: return 1.0 / x;
    case OP_NEG: return -x;
    case OP_ABS: return fabs(x);
    case OP_CLAMP: return x < prm[0] ? prm[0] : x > prm[1] ? prm[1] : x;
    case OP_POW: return pow(x, prm[0]);
    case OP_ADD_S: return x + prm[0];
    case OP_SUB_S: return x - prm[0];
    case OP_RSUB_S: return prm[0] - x;
    case OP_MUL_S: return x * prm[0];
    case OP_DIV_S: return x / prm[0];
    case OP_ADD: return x + v[1];
    case OP_SUB: return x - v[1];
    case OP_MUL: return x * v[1];
    case OP_DIV: return x / v[1];
    case OP_POW_T: return pow(x, v[1]);
    case OP_ADDCMUL: return x + prm[0] * v[1] * v[2];
    case OP_ADDCDIV: return x + prm[0] * v[1] / v[2];
    }
    return NAN;
}

static amp_tensor *call(int op, amp_tensor *const *in, const double *prm) {
    switch (op) {
    case OP_EXP: return amp_exp(in[0]);
    case OP_LOG: return amp_log(in[0]);
    case OP_LOG1P: return amp_log1p(in[0]);
    case OP_SQRT: return amp_sqrt(in[0]);
    case OP_RSQRT: return amp_rsqrt(in[0]);
    case OP_RECIP: return amp_reciprocal(in[0]);
    case OP_NEG: return amp_neg(in[0]);
    case OP_ABS: return amp_abs(in[0]);
    case OP_CLAMP: return amp_clamp(in[0], prm[0], prm[1]);
    case OP_POW: return amp_pow(in[0], prm[0]);
    case OP_ADD_S: return amp_add_scalar(in[0], prm[0]);
    case OP_SUB_S: return amp_sub_scalar(in[0], prm[0]);
    case OP_RSUB_S: return amp_rsub_scalar(in[0], prm[0]);
    case OP_MUL_S: return amp_mul_scalar(in[0], prm[0]);
    case OP_DIV_S: return amp_div_scalar(in[0], prm[0]);
    case OP_ADD: return amp_add(in[0], in[1]);
    case OP_SUB: return amp_sub(in[0], in[1]);
    case OP_MUL: return amp_mul(in[0], in[1]);
    case OP_DIV: return amp_div(in[0], in[1]);
    case OP_POW_T: return amp_pow_tensor(in[0], in[1]);
    case OP_ADDCMUL: return amp_addcmul(in[0], in[1], in[2], prm[0]);
    case OP_ADDCDIV: return amp_addcdiv(in[0], in[1], in[2], prm[0]);
    }
    return NULL;
}

static amp_tensor *rand_in(test_rng *r, amp_dtype dt, int ndim, const int64_t *shape, int dom) {
    int64_t n = tc_numel(ndim, shape);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        switch (dom) {
        case D_POS: v[i] = test_rng_range(r, 0.2, 3.0); break;
        case D_LOG1P: v[i] = test_rng_range(r, -0.6, 3.0); break;
        case D_AWAY: v[i] = test_rng_range(r, 0.5, 2.0) * (test_rng_uniform(r) < 0.5 ? -1 : 1); break;
        case D_EXPO: v[i] = test_rng_range(r, -1.5, 2.5); break;
        default: v[i] = test_rng_normal(r); break;
        }
    }
    amp_tensor *t = tc_from_values(dt, ndim, shape, v);
    free(v);
    return t;
}

/* Flat index into an input of (ndim, shape) broadcast to the output. */
static int64_t bcast_index(int64_t o, int ond, const int64_t *oshape, int ndim, const int64_t *shape) {
    int64_t idx = 0, mul = 1;
    for (int d = ond - 1; d >= 0; d--) {
        int64_t c = o % oshape[d];
        o /= oshape[d];
        int k = d - (ond - ndim);
        if (k < 0) continue;
        if (shape[k] != 1) idx += c * mul;
        mul *= shape[k];
    }
    return idx;
}

typedef struct {
    int op;
    double prm[2];
    int nin;
    int ndim[3];
    int64_t shape[3][AMP_MAX_DIMS];
    int ond;
    int64_t oshape[AMP_MAX_DIMS];
} rctx;

static void ref_fn(const double *const *inputs, double *out, void *vc) {
    rctx *c = vc;
    int64_t on = tc_numel(c->ond, c->oshape);
    for (int64_t o = 0; o < on; o++) {
        double v[3];
        for (int k = 0; k < c->nin; k++) v[k] = inputs[k][bcast_index(o, c->ond, c->oshape, c->ndim[k], c->shape[k])];
        out[o] = sref(c->op, v, c->prm);
    }
}

static rctx make_ctx(int op, const double *prm, amp_tensor *const *in, const amp_tensor *out) {
    rctx c;
    memset(&c, 0, sizeof c);
    c.op = op;
    if (prm) memcpy(c.prm, prm, sizeof c.prm);
    c.nin = arity(op);
    for (int k = 0; k < c.nin; k++) {
        c.ndim[k] = amp_tensor_ndim(in[k]);
        memcpy(c.shape[k], amp_tensor_shape(in[k]), sizeof(int64_t) * (size_t)c.ndim[k]);
    }
    c.ond = amp_tensor_ndim(out);
    memcpy(c.oshape, amp_tensor_shape(out), sizeof(int64_t) * (size_t)c.ond);
    return c;
}

/* Forward values of out against the reference evaluated on in's values. */
static void check_forward(int op, const double *prm, amp_tensor *const *in, const amp_tensor *out, double rtol,
                          double atol, const char *what) {
    rctx c = make_ctx(op, prm, in, out);
    double *vals[3] = {0};
    for (int k = 0; k < c.nin; k++) vals[k] = tc_values(in[k]);
    int64_t on = amp_tensor_numel(out);
    double *want = malloc(sizeof(double) * (size_t)(on ? on : 1));
    ref_fn((const double *const *)vals, want, &c);
    tc_assert_tensor(out, want, rtol, atol, what);
    free(want);
    for (int k = 0; k < c.nin; k++) free(vals[k]);
}

static double fwd_atol(amp_dtype dt) { return dt == AMP_F64 ? 1e-13 : 1e-6; }
/* Gradient tolerances: one rounding of the gradient (and of a saved output)
 * for halves; central differences for f32/f64. */
static double grad_rtol(amp_dtype dt) {
    return dt == AMP_F64 ? 1e-6 : dt == AMP_F32 ? 1e-4 : dt == AMP_F16 ? 4e-3 : 2.5e-2;
}
static double grad_atol(amp_dtype dt) {
    return dt == AMP_F64 ? 1e-8 : dt == AMP_F32 ? 1e-5 : dt == AMP_F16 ? 2e-3 : 1.5e-2;
}

static const amp_dtype DTS[] = {AMP_F32, AMP_F16, AMP_BF16, AMP_F64};

/* Runs op on fresh inputs of the given dtypes/shapes: output dtype, shape,
 * forward values and gradients of every input. */
static void run_case(int op, const double *prm_in, const amp_dtype *dts, const int *ndims,
                     const int64_t (*shapes)[AMP_MAX_DIMS], amp_dtype want_dt, uint64_t seed) {
    test_rng r = {seed};
    int nin = arity(op);
    amp_tensor *in[3] = {0};
    for (int k = 0; k < nin; k++) {
        in[k] = rand_in(&r, dts[k], ndims[k], shapes[k], domain(op, k));
        amp_tensor_set_requires_grad(in[k], true);
    }
    double prm[2] = {prm_in ? prm_in[0] : 0, prm_in ? prm_in[1] : 0};
    if (op == OP_CLAMP) { /* torch compares with the bounds in x's dtype */
        prm[0] = tc_round_to(dts[0], prm[0]);
        prm[1] = tc_round_to(dts[0], prm[1]);
    }
    char what[160];
    snprintf(what, sizeof what, "%s(%s%s%s%s%s)", op_name[op], amp_dtype_name(dts[0]), nin > 1 ? "," : "",
             nin > 1 ? amp_dtype_name(dts[1]) : "", nin > 2 ? "," : "", nin > 2 ? amp_dtype_name(dts[2]) : "");
    amp_tensor *out = call(op, in, prm);
    if (!out) fail_msg("%s failed: %s", what, amp_last_error());
    if (amp_tensor_dtype(out) != want_dt)
        fail_msg("%s: output dtype %s, expected %s", what, amp_dtype_name(amp_tensor_dtype(out)), amp_dtype_name(want_dt));
    check_forward(op, prm, in, out, tc_rtol(want_dt, 1.0), fwd_atol(want_dt), what);
    rctx c = make_ctx(op, prm, in, out);
    /* gradient tolerance: the coarsest dtype involved */
    amp_dtype gdt = want_dt;
    for (int k = 0; k < nin; k++)
        if (dts[k] == AMP_BF16 || (dts[k] == AMP_F16 && gdt != AMP_BF16)) gdt = dts[k];
    tc_gradcheck(out, in, nin, ref_fn, &c, grad_rtol(gdt), grad_atol(gdt), what);
    amp_tensor_free(out);
    for (int k = 0; k < nin; k++) amp_tensor_free(in[k]);
}

/* ---- forward and backward, every op x dtype ------------------------------------------------------- */
static void t_unary_ops(void **state) {
    (void)state;
    static const struct {
        int op;
        double prm[2];
    } cases[] = {
        {OP_EXP, {0}},          {OP_LOG, {0}},           {OP_LOG1P, {0}},      {OP_SQRT, {0}},
        {OP_RSQRT, {0}},        {OP_RECIP, {0}},         {OP_NEG, {0}},        {OP_ABS, {0}},
        {OP_CLAMP, {-0.5, 0.7}}, {OP_CLAMP, {-INFINITY, 0.3}}, {OP_CLAMP, {-0.2, INFINITY}},
        {OP_POW, {2.5}},        {OP_POW, {2.0}},         {OP_POW, {3.0}},      {OP_POW, {0.5}},
        {OP_POW, {-0.5}},       {OP_POW, {-1.0}},        {OP_POW, {-2.0}},     {OP_POW, {-1.7}},
        {OP_POW, {1.0}},        {OP_ADD_S, {2.5}},       {OP_SUB_S, {1.25}},   {OP_RSUB_S, {3.0}},
        {OP_MUL_S, {-1.5}},     {OP_DIV_S, {3.0}},       {OP_DIV_S, {-0.7}},
    };
    const int64_t shapes[1][AMP_MAX_DIMS] = {{3, 5, 4}};
    const int nd[1] = {3};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (size_t d = 0; d < 4; d++) run_case(cases[i].op, cases[i].prm, &DTS[d], nd, shapes, DTS[d], 100 + i * 7 + d);
}

static void t_binary_ops(void **state) {
    (void)state;
    /* [2,1,3] with [4,1] -> [2,4,3]; dtype pairs and their promoted result */
    static const amp_dtype pairs[][3] = {
        {AMP_F32, AMP_F32, AMP_F32},  {AMP_F16, AMP_F16, AMP_F16}, {AMP_BF16, AMP_BF16, AMP_BF16},
        {AMP_F64, AMP_F64, AMP_F64},  {AMP_F16, AMP_F32, AMP_F32}, {AMP_F32, AMP_BF16, AMP_F32},
        {AMP_F16, AMP_BF16, AMP_F32}, {AMP_BF16, AMP_F16, AMP_F32}, {AMP_F64, AMP_F16, AMP_F64},
        {AMP_F32, AMP_F64, AMP_F64},
    };
    const int64_t shapes[2][AMP_MAX_DIMS] = {{2, 1, 3}, {4, 1}};
    const int nd[2] = {3, 2};
    for (int op = OP_ADD; op <= OP_POW_T; op++)
        for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++)
            run_case(op, NULL, pairs[p], nd, shapes, pairs[p][2], 500 + (uint64_t)op * 31 + p);
}

static void t_addcmul_addcdiv(void **state) {
    (void)state;
    /* input [4,1], tensor1 [2,1,3], tensor2 [3] -> [2,4,3] */
    const int64_t shapes[3][AMP_MAX_DIMS] = {{4, 1}, {2, 1, 3}, {3}};
    const int nd[3] = {2, 3, 1};
    static const amp_dtype trip[][4] = {
        {AMP_F32, AMP_F32, AMP_F32, AMP_F32}, {AMP_F16, AMP_F16, AMP_F16, AMP_F16},
        {AMP_BF16, AMP_BF16, AMP_BF16, AMP_BF16}, {AMP_F64, AMP_F64, AMP_F64, AMP_F64},
        {AMP_F32, AMP_F16, AMP_F16, AMP_F32}, {AMP_F16, AMP_BF16, AMP_F16, AMP_F32},
    };
    const double prm[2] = {0.5, 0};
    const double prm2[2] = {-2.0, 0};
    for (int op = OP_ADDCMUL; op <= OP_ADDCDIV; op++)
        for (size_t t = 0; t < sizeof trip / sizeof trip[0]; t++) {
            run_case(op, prm, trip[t], nd, shapes, trip[t][3], 900 + (uint64_t)op * 17 + t);
            run_case(op, prm2, trip[t], nd, shapes, trip[t][3], 950 + (uint64_t)op * 17 + t);
        }
    /* the same shapes the other way round, and all equal */
    const int64_t s2[3][AMP_MAX_DIMS] = {{2, 4, 3}, {3}, {4, 1}};
    const int nd2[3] = {3, 1, 2};
    run_case(OP_ADDCMUL, prm, trip[0], nd2, s2, AMP_F32, 991);
    run_case(OP_ADDCDIV, prm, trip[1], nd2, s2, AMP_F16, 992);
}

/* Broadcasting shapes, including 0-d, leading dims and the [N,C] + [C] bias. */
static void t_broadcast_shapes(void **state) {
    (void)state;
    static const struct {
        int nd[2];
        int64_t s[2][AMP_MAX_DIMS];
        int ond;
        int64_t os[AMP_MAX_DIMS];
    } cases[] = {
        {{3, 2}, {{2, 1, 3}, {4, 1}}, 3, {2, 4, 3}},
        {{2, 1}, {{64, 33}, {33}}, 2, {64, 33}},
        {{2, 1}, {{16, 9}, {9}}, 2, {16, 9}},
        {{1, 2}, {{33}, {64, 33}}, 2, {64, 33}},
        {{0, 2}, {{0}, {3, 4}}, 2, {3, 4}},
        {{2, 0}, {{3, 4}, {0}}, 2, {3, 4}},
        {{2, 2}, {{5, 1}, {1, 7}}, 2, {5, 7}},
        {{4, 1}, {{2, 3, 1, 5}, {1}}, 4, {2, 3, 1, 5}},
        {{3, 3}, {{1, 4, 1}, {3, 1, 6}}, 3, {3, 4, 6}},
        {{2, 2}, {{300, 130}, {300, 1}}, 2, {300, 130}},
        {{2, 1}, {{200, 257}, {257}}, 2, {200, 257}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int op = OP_ADD; op <= OP_DIV; op++) {
            for (int d = 0; d < 3; d++) {
                test_rng r = {7000 + i * 13 + (uint64_t)op * 3 + (uint64_t)d};
                amp_dtype dt = DTS[d];
                amp_tensor *in[2];
                for (int k = 0; k < 2; k++) in[k] = rand_in(&r, dt, cases[i].nd[k], cases[i].s[k], domain(op, k));
                amp_tensor *out = call(op, in, NULL);
                char what[96];
                snprintf(what, sizeof what, "%s case %zu %s", op_name[op], i, amp_dtype_name(dt));
                tc_assert_shape(out, cases[i].ond, cases[i].os, what);
                check_forward(op, NULL, in, out, tc_rtol(dt, 1.0), 1e-6, what);
                amp_tensor_free(out);
                /* gradients on the small cases */
                if (tc_numel(cases[i].ond, cases[i].os) <= 600 && d == 0) {
                    for (int k = 0; k < 2; k++) amp_tensor_set_requires_grad(in[k], true);
                    out = call(op, in, NULL);
                    rctx c = make_ctx(op, NULL, in, out);
                    tc_gradcheck(out, in, 2, ref_fn, &c, 1e-4, 1e-5, what);
                    amp_tensor_free(out);
                }
                for (int k = 0; k < 2; k++) amp_tensor_free(in[k]);
            }
        }
    }
}

/* ---- non-contiguous inputs ------------------------------------------------------------------------------- */
static void assert_same_values(const amp_tensor *a, const amp_tensor *b, const char *what) {
    if (!a || !b) fail_msg("%s: NULL (%s)", what, amp_last_error());
    if (amp_tensor_dtype(a) != amp_tensor_dtype(b)) fail_msg("%s: dtypes differ", what);
    int64_t n = amp_tensor_numel(a);
    if (n != amp_tensor_numel(b)) fail_msg("%s: sizes differ", what);
    double *va = tc_values(a), *vb = tc_values(b);
    for (int64_t i = 0; i < n; i++)
        if (!(va[i] == vb[i] || (isnan(va[i]) && isnan(vb[i]))))
            fail_msg("%s: element %lld: %.9g vs %.9g", what, (long long)i, va[i], vb[i]);
    test_free_all(va, vb);
}

static void t_noncontiguous(void **state) {
    (void)state;
    for (int d = 0; d < 4; d++) {
        amp_dtype dt = DTS[d];
        test_rng r = {4242 + (uint64_t)d};
        /* a: transpose of [7,40] -> [40,7]; b: every other column of [40,14] */
        amp_tensor *a0 = rand_in(&r, dt, 2, AMP_SHAPE(7, 40), D_POS);
        amp_tensor *b0 = rand_in(&r, dt, 2, AMP_SHAPE(40, 14), D_AWAY);
        amp_tensor *c0 = rand_in(&r, dt, 2, AMP_SHAPE(3, 7), D_AWAY);
        amp_tensor *a = amp_transpose(a0, 0, 1), *b = amp_slice(b0, 1, 0, 14, 2);
        amp_tensor *c = amp_slice(c0, 0, 1, 2, 1); /* [1,7], offset */
        assert_true(!amp_tensor_is_contiguous(a) && !amp_tensor_is_contiguous(b));
        amp_tensor *ac = amp_contiguous(a), *bc = amp_contiguous(b), *cc = amp_contiguous(c);
        for (int op = 0; op < OP_COUNT; op++) {
            double prm[2] = {op == OP_CLAMP ? 0.5 : 1.5, 2.0};
            amp_tensor *nc_in[3] = {a, b, c}, *c_in[3] = {ac, bc, cc};
            amp_tensor *x = call(op, nc_in, prm), *y = call(op, c_in, prm);
            char what[96];
            snprintf(what, sizeof what, "%s on strided %s inputs", op_name[op], amp_dtype_name(dt));
            assert_same_values(x, y, what);
            check_forward(op, prm, nc_in, x, tc_rtol(dt, 1.0), fwd_atol(dt), what);
            test_free_tensors(x, y);
        }
        test_free_tensors(ac, bc, cc);
        /* gradients flow back through the views to the storage-owning leaves */
        test_free_tensors(a, b, c);
        amp_tensor_set_requires_grad(a0, true);
        amp_tensor_set_requires_grad(b0, true);
        a = amp_transpose(a0, 0, 1);
        b = amp_slice(b0, 1, 0, 14, 2);
        amp_tensor *p = amp_mul(a, b);
        amp_tensor *ones = amp_tensor_ones(amp_tensor_dtype(p), 2, AMP_SHAPE(40, 7));
        assert_int_equal(amp_backward_ex(p, ones, false), AMP_OK);
        double *va = tc_values(a0), *vb = tc_values(b0), *ga = tc_values(amp_tensor_grad(a0)), *gb = tc_values(amp_tensor_grad(b0));
        for (int i = 0; i < 7; i++)
            for (int j = 0; j < 40; j++) {
                /* a0[i][j] multiplies b0[j][2i] */
                assert_close(ga[i * 40 + j], vb[j * 14 + 2 * i], tc_rtol(dt, 1), 0, "d(a*b)/da through transpose");
                assert_close(gb[j * 14 + 2 * i], va[i * 40 + j], tc_rtol(dt, 1), 0, "d(a*b)/db through slice");
                assert_true(gb[j * 14 + 2 * i + 1] == 0.0);
            }
        test_free_all(va, vb, ga, gb);
        test_free_tensors(ones, p, a, b, a0, b0, c0);
    }
}

/* ---- autograd details ---------------------------------------------------------------------------------------------- */
static void t_same_tensor_twice(void **state) {
    (void)state;
    for (int d = 0; d < 3; d++) {
        amp_dtype dt = DTS[d];
        test_rng r = {99 + (uint64_t)d};
        amp_tensor *x = rand_in(&r, dt, 2, AMP_SHAPE(3, 4), D_AWAY);
        amp_tensor_set_requires_grad(x, true);
        double *vx = tc_values(x);
        for (int op = OP_ADD; op <= OP_DIV; op++) {
            amp_tensor *y = call(op, (amp_tensor *[]){x, x}, NULL);
            amp_tensor *g = amp_tensor_ones(dt, 2, AMP_SHAPE(3, 4));
            assert_int_equal(amp_backward_ex(y, g, false), AMP_OK);
            double *gx = tc_values(amp_tensor_grad(x));
            for (int i = 0; i < 12; i++) {
                double want = op == OP_ADD ? 2 : op == OP_MUL ? 2 * vx[i] : 0; /* x-x, x/x are constant */
                assert_close(gx[i], want, tc_rtol(dt, 1), 1e-7, op_name[op]);
            }
            free(gx);
            amp_tensor_set_grad(x, NULL);
            test_free_tensors(g, y);
        }
        /* x*x*x through two nodes and an accumulation across two backwards */
        amp_tensor *x2 = amp_mul(x, x), *x3 = amp_mul(x2, x);
        amp_tensor *g = amp_tensor_ones(dt, 2, AMP_SHAPE(3, 4));
        assert_int_equal(amp_backward_ex(x3, g, true), AMP_OK);
        assert_int_equal(amp_backward_ex(x3, g, false), AMP_OK);
        double *gx = tc_values(amp_tensor_grad(x));
        for (int i = 0; i < 12; i++) assert_close(gx[i], 6 * vx[i] * vx[i], tc_rtol(dt, 3), 1e-6, "2 * d(x^3)/dx");
        test_free_all(gx, vx);
        test_free_tensors(g, x3, x2, x);
    }
}

/* ---- dtypes: promotion, scalars never promote ------------------------------------------------------------------------ */
static void t_dtypes(void **state) {
    (void)state;
    test_rng r = {5};
    static const amp_dtype fl[] = {AMP_F32, AMP_F16, AMP_BF16, AMP_F64};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            amp_tensor *a = rand_in(&r, fl[i], 1, AMP_SHAPE(5), D_NORMAL), *b = rand_in(&r, fl[j], 1, AMP_SHAPE(5), D_AWAY);
            amp_dtype want = fl[i] == fl[j] ? fl[i]
                             : (fl[i] == AMP_F64 || fl[j] == AMP_F64) ? AMP_F64
                                                                      : AMP_F32; /* f16+bf16 -> f32 too */
            amp_tensor *pa = amp_abs(a); /* a positive base for pow */
            for (int op = OP_ADD; op <= OP_POW_T; op++) {
                amp_tensor *y = call(op, (amp_tensor *[]){op == OP_POW_T ? pa : a, b}, NULL);
                assert_non_null(y);
                if (amp_tensor_dtype(y) != want)
                    fail_msg("%s(%s, %s) gave %s, expected %s", op_name[op], amp_dtype_name(fl[i]), amp_dtype_name(fl[j]),
                             amp_dtype_name(amp_tensor_dtype(y)), amp_dtype_name(want));
                amp_tensor_free(y);
            }
            test_free_tensors(pa, a, b);
        }
    /* torch's result type with zero-dim tensors (checked against torch 1.13):
     * f16[4]*f32[] -> f16, f16[4]*f64[] -> f16, f32[4]*f64[] -> f32,
     * f16[]*f32[3] -> f32, f16[]*bf16[] -> f32, f16[]*bf16[2] -> bf16 */
    static const struct {
        amp_dtype a, b;
        int nda, ndb;
        amp_dtype want;
    } zd[] = {
        {AMP_F16, AMP_F32, 1, 0, AMP_F16},  {AMP_F16, AMP_F64, 1, 0, AMP_F16}, {AMP_F32, AMP_F64, 1, 0, AMP_F32},
        {AMP_F16, AMP_F32, 0, 1, AMP_F32},  {AMP_F16, AMP_BF16, 0, 0, AMP_F32}, {AMP_F16, AMP_BF16, 0, 1, AMP_BF16},
        {AMP_F64, AMP_BF16, 0, 2, AMP_BF16},
    };
    for (size_t i = 0; i < sizeof zd / sizeof zd[0]; i++) {
        amp_tensor *a = amp_tensor_full(zd[i].a, zd[i].nda, AMP_SHAPE(3, 3), 1.5);
        amp_tensor *b = amp_tensor_full(zd[i].b, zd[i].ndb, AMP_SHAPE(3, 3), 0.1);
        for (int op = OP_ADD; op <= OP_POW_T; op++) {
            amp_tensor *y = call(op, (amp_tensor *[]){a, b}, NULL);
            if (amp_tensor_dtype(y) != zd[i].want)
                fail_msg("%s(%s%s, %s%s) gave %s, expected %s", op_name[op], amp_dtype_name(zd[i].a), zd[i].nda ? "[..]" : "[]",
                         amp_dtype_name(zd[i].b), zd[i].ndb ? "[..]" : "[]", amp_dtype_name(amp_tensor_dtype(y)),
                         amp_dtype_name(zd[i].want));
            /* the zero-dim operand enters unrounded: f16(1.5 * 0.1) from f32/f64 0.1 */
            if (op == OP_MUL && zd[i].nda == 1 && zd[i].ndb == 0) {
                double want = tc_round_to(zd[i].want, 1.5f * (float)tc_round_to(zd[i].b, 0.1));
                amp_tensor *y0 = amp_slice(y, 0, 0, 1, 1);
                assert_true(amp_tensor_item(y0) == want);
                amp_tensor_free(y0);
            }
            amp_tensor_free(y);
        }
        amp_tensor *y = amp_addcmul(a, b, b, 1.0);
        assert_int_equal(amp_tensor_dtype(y), zd[i].want);
        test_free_tensors(y, a, b);
    }
    /* scalars keep the tensor's dtype and enter the computation rounded to f32 */
    for (int i = 0; i < 4; i++) {
        amp_tensor *x = rand_in(&r, fl[i], 1, AMP_SHAPE(64), D_NORMAL);
        double *vx = tc_values(x);
        for (int op = OP_ADD_S; op <= OP_DIV_S; op++) {
            double prm[2] = {2.5, 0};
            amp_tensor *y = call(op, &x, prm);
            assert_int_equal(amp_tensor_dtype(y), fl[i]);
            double *vy = tc_values(y);
            for (int k = 0; k < 64; k++) {
                /* exactly the op in f32 (f64) rounded once to the dtype */
                double want;
                if (fl[i] == AMP_F64) {
                    want = sref(op, &vx[k], prm);
                } else {
                    float xf = (float)vx[k], s = 2.5f;
                    float w = op == OP_ADD_S ? xf + s : op == OP_SUB_S ? xf - s : op == OP_RSUB_S ? s - xf
                            : op == OP_MUL_S ? xf * s : xf / s;
                    want = tc_round_to(fl[i], w);
                }
                if (vy[k] != want) fail_msg("%s(%s) element %d: %.9g, expected %.9g", op_name[op], amp_dtype_name(fl[i]), k, vy[k], want);
            }
            free(vy);
            amp_tensor_free(y);
        }
        free(vx);
        amp_tensor_free(x);
    }
    /* f64 is computed in double: exp of an f64 tensor to 1e-15 */
    amp_tensor *x = rand_in(&r, AMP_F64, 1, AMP_SHAPE(50), D_NORMAL);
    amp_tensor *y = amp_exp(x);
    check_forward(OP_EXP, NULL, &x, y, 1e-15, 0, "exp f64 precision");
    amp_tensor_free(y);
    y = amp_div(x, x);
    double *v = tc_values(y);
    for (int i = 0; i < 50; i++) assert_true(v[i] == 1.0);
    free(v);
    test_free_tensors(y, x);
}

/* ---- PyTorch semantics at the edges ------------------------------------------------------------------------ */
static double item_of(amp_tensor *t) {
    double v = amp_tensor_item(t);
    amp_tensor_free(t);
    return v;
}

static void t_edge_cases(void **state) {
    (void)state;
    /* empty tensors broadcast and differentiate to empty gradients */
    amp_tensor *e = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(0, 3)), *b = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(3));
    amp_tensor_set_requires_grad(e, true);
    amp_tensor_set_requires_grad(b, true);
    for (int op = OP_ADD; op <= OP_POW_T; op++) {
        amp_tensor *y = call(op, (amp_tensor *[]){e, b}, NULL);
        tc_assert_shape(y, 2, AMP_SHAPE(0, 3), op_name[op]);
        amp_tensor *g = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(0, 3));
        assert_int_equal(amp_backward_ex(y, g, false), AMP_OK);
        tc_assert_shape(amp_tensor_grad(e), 2, AMP_SHAPE(0, 3), "empty grad");
        double *gb = tc_values(amp_tensor_grad(b));
        for (int i = 0; i < 3; i++) assert_true(gb[i] == 0.0);
        free(gb);
        amp_tensor_set_grad(e, NULL);
        amp_tensor_set_grad(b, NULL);
        test_free_tensors(g, y);
    }
    for (int op = 0; op < OP_ADD; op++) {
        double prm[2] = {2.0, 3.0};
        amp_tensor *y = call(op, &e, prm);
        tc_assert_shape(y, 2, AMP_SHAPE(0, 3), op_name[op]);
        amp_tensor_free(y);
    }
    amp_tensor *e2 = amp_tensor_zeros(AMP_F16, 2, AMP_SHAPE(2, 0));
    tc_assert_fails(amp_add(e, e2), "amp_add"); /* [0,3] and [2,0] do not broadcast */
    test_free_tensors(e2, e, b);

    /* 0-d tensors */
    amp_tensor *s = amp_tensor_full(AMP_F32, 0, NULL, 2.0), *v = amp_tensor_full(AMP_F16, 1, AMP_SHAPE(4), 3.0);
    amp_tensor *y = amp_mul(s, v);
    tc_assert_shape(y, 1, AMP_SHAPE(4), "0-d * [4]");
    assert_int_equal(amp_tensor_dtype(y), AMP_F16); /* torch: a 0-d tensor does not promote a [4] one */
    amp_tensor_free(y);
    y = amp_exp(s);
    assert_int_equal(amp_tensor_ndim(y), 0);
    assert_close(amp_tensor_item(y), exp(2.0), 1e-6, 0, "exp of a 0-d tensor");
    test_free_tensors(y, v, s);

    /* clamp: lo > hi gives hi; NaN bound gives NaN; NaN input stays NaN;
     * infinite bounds; gradient 1 on [lo, hi] inclusive */
    double xs[6] = {-2.0, -0.5, 0.0, 0.7, 3.0, NAN};
    amp_tensor *x = amp_tensor_from_data((float[]){-2.0f, -0.5f, 0.0f, 0.7f, 3.0f, NAN}, AMP_F32, 1, AMP_SHAPE(6));
    amp_tensor_set_requires_grad(x, true);
    y = amp_clamp(x, 1.0, -1.0);
    double *vy = tc_values(y);
    for (int i = 0; i < 5; i++) assert_true(vy[i] == -1.0);
    assert_true(isnan(vy[5]));
    free(vy);
    amp_tensor_free(y);
    y = amp_clamp(x, NAN, 1.0);
    vy = tc_values(y);
    for (int i = 0; i < 6; i++) assert_true(isnan(vy[i]));
    free(vy);
    amp_tensor_free(y);
    y = amp_clamp(x, -INFINITY, INFINITY);
    vy = tc_values(y);
    for (int i = 0; i < 5; i++) assert_true(vy[i] == (double)(float)xs[i]);
    free(vy);
    amp_tensor_free(y);
    y = amp_clamp(x, -0.5, 0.7);
    amp_tensor *ones = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(6));
    assert_int_equal(amp_backward_ex(y, ones, false), AMP_OK);
    double *gx = tc_values(amp_tensor_grad(x));
    const double want_g[6] = {0, 1, 1, 1, 0, 0}; /* inclusive at both bounds, 0 for NaN */
    for (int i = 0; i < 6; i++)
        if (gx[i] != want_g[i]) fail_msg("clamp grad at %g: %g, expected %g", xs[i], gx[i], want_g[i]);
    free(gx);
    amp_tensor_set_grad(x, NULL);
    amp_tensor_free(y);
    /* abs: gradient 0 at 0 (sign), relu-like kinks as torch */
    y = amp_abs(x);
    assert_int_equal(amp_backward_ex(y, ones, false), AMP_OK);
    gx = tc_values(amp_tensor_grad(x));
    assert_true(gx[0] == -1 && gx[1] == -1 && gx[2] == 0 && gx[3] == 1 && gx[4] == 1);
    free(gx);
    amp_tensor_set_grad(x, NULL);
    test_free_tensors(y, ones, x);

    /* pow: exponent 0 gives ones and a zero gradient; 0 ** 2.5 has gradient 0 */
    x = amp_tensor_from_data((float[]){0.0f, 2.0f, -3.0f}, AMP_F32, 1, AMP_SHAPE(3));
    amp_tensor_set_requires_grad(x, true);
    ones = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(3));
    y = amp_pow(x, 0.0);
    vy = tc_values(y);
    assert_true(vy[0] == 1 && vy[1] == 1 && vy[2] == 1);
    free(vy);
    assert_int_equal(amp_backward_ex(y, ones, false), AMP_OK);
    gx = tc_values(amp_tensor_grad(x));
    assert_true(gx[0] == 0 && gx[1] == 0 && gx[2] == 0);
    free(gx);
    amp_tensor_set_grad(x, NULL);
    amp_tensor_free(y);
    y = amp_pow(x, 2.5);
    vy = tc_values(y);
    assert_true(vy[0] == 0 && isnan(vy[2]));
    free(vy);
    assert_int_equal(amp_backward_ex(y, ones, false), AMP_OK);
    gx = tc_values(amp_tensor_grad(x));
    assert_true(gx[0] == 0);
    assert_close(gx[1], 2.5 * pow(2.0, 1.5), 1e-6, 0, "d(x^2.5)/dx at 2");
    free(gx);
    amp_tensor_set_grad(x, NULL);
    amp_tensor_free(y);
    /* pow_tensor: d/db where a == 0 and b >= 0 is 0 (torch masks log(0)) */
    amp_tensor *bb = amp_tensor_from_data((float[]){2.0f, 0.5f, 2.0f}, AMP_F32, 1, AMP_SHAPE(3));
    amp_tensor_set_requires_grad(bb, true);
    y = amp_pow_tensor(x, bb);
    assert_int_equal(amp_backward_ex(y, ones, false), AMP_OK);
    gx = tc_values(amp_tensor_grad(x));
    double *gb = tc_values(amp_tensor_grad(bb));
    assert_true(gx[0] == 0 && gb[0] == 0);
    assert_close(gb[1], sqrt(2.0) * log(2.0), 1e-6, 0, "d(a^b)/db");
    assert_close(gx[2], -6.0, 1e-6, 0, "d(a^b)/da at a=-3, b=2");
    assert_true(isnan(gb[2])); /* log(-3) */
    test_free_all(gx, gb);
    test_free_tensors(y, bb, ones, x);

    /* IEEE results: division by zero, log(0), log(-1), sqrt(-1), rsqrt(0) */
    amp_tensor *z = amp_tensor_zeros(AMP_F32, 0, NULL), *m1 = amp_tensor_full(AMP_F16, 0, NULL, -1.0);
    amp_tensor *one = amp_tensor_ones(AMP_BF16, 0, NULL);
    assert_true(isinf(item_of(amp_div(one, z))) && item_of(amp_div(one, z)) > 0);
    assert_true(isnan(item_of(amp_div(z, z))));
    assert_true(isinf(item_of(amp_log(z))) && item_of(amp_log(z)) < 0);
    assert_true(isnan(item_of(amp_log(m1))));
    assert_true(isnan(item_of(amp_sqrt(m1))));
    assert_true(isinf(item_of(amp_rsqrt(z))));
    assert_true(isinf(item_of(amp_reciprocal(z))));
    assert_true(isinf(item_of(amp_div_scalar(one, 0.0))));
    assert_true(isinf(item_of(amp_log1p(m1))));
    /* overflow rounds to inf in the narrow output */
    amp_tensor *big = amp_tensor_full(AMP_F16, 0, NULL, 60000.0);
    assert_true(isinf(item_of(amp_add(big, big))));
    assert_true(isinf(item_of(amp_mul_scalar(big, 2.0))));
    test_free_tensors(big, z, m1, one);
}

/* exp in f32 is amp's own vectorisable polynomial: within 2 ulp of the
 * correctly rounded value over the whole range, inf/0/NaN at the ends. */
static void t_exp_accuracy(void **state) {
    (void)state;
    const int64_t n = 200001;
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(-104.0 + 193.0 * (double)i / (double)(n - 1));
    amp_tensor *t = amp_tensor_from_data(x, AMP_F32, 1, &n);
    amp_tensor *y = amp_exp(t);
    double *v = tc_values(y);
    for (int64_t i = 0; i < n; i++) {
        double want = exp((double)x[i]);
        if (want > 3.4028234663852886e38) {
            if (!isinf(v[i])) fail_msg("exp(%.9g) = %g, expected inf", x[i], v[i]);
            continue;
        }
        float wf = (float)want;
        double ulp = wf == 0 ? 1.401298464e-45 : nextafterf(wf, INFINITY) - wf;
        if (ulp < 1.401298464e-45) ulp = 1.401298464e-45;
        if (fabs(v[i] - want) > 2 * ulp) fail_msg("exp(%.9g) = %.9g, expected %.9g (%.2f ulp)", x[i], v[i], want, fabs(v[i] - want) / ulp);
    }
    free(v);
    test_free_tensors(y, t);
    free(x);
    const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-30f, -1e-30f, 88.7f, 89.0f, 1000.0f, -1000.0f};
    amp_tensor *s = amp_tensor_from_data(sp, AMP_F32, 1, AMP_SHAPE(11));
    y = amp_exp(s);
    v = tc_values(y);
    assert_true(v[0] == 1 && v[1] == 1 && isinf(v[2]) && v[3] == 0 && isnan(v[4]) && v[5] == 1 && v[6] == 1);
    assert_close(v[7], exp((double)88.7f), 2.5e-7, 0, "exp(88.7)");
    assert_true(isinf(v[8]) && isinf(v[9]) && v[10] == 0);
    free(v);
    test_free_tensors(y, s);
}

/* ---- golden data from PyTorch ------------------------------------------------------------------------------------- */
static const struct golden_ew {
    const char *name;
    int op;
    double prm[2];
} golden_ops[] = {
    {"exp", OP_EXP, {0}},
    {"log", OP_LOG, {0}},
    {"log1p", OP_LOG1P, {0}},
    {"sqrt", OP_SQRT, {0}},
    {"rsqrt", OP_RSQRT, {0}},
    {"reciprocal", OP_RECIP, {0}},
    {"neg", OP_NEG, {0}},
    {"abs", OP_ABS, {0}},
    {"clamp", OP_CLAMP, {-0.5, 0.7}},
    {"clamp_min", OP_CLAMP, {-0.3, INFINITY}},
    {"pow_2.5", OP_POW, {2.5}},
    {"pow_3", OP_POW, {3.0}},
    {"pow_-1.5", OP_POW, {-1.5}},
    {"add_scalar", OP_ADD_S, {2.5}},
    {"sub_scalar", OP_SUB_S, {1.25}},
    {"rsub_scalar", OP_RSUB_S, {3.0}},
    {"mul_scalar", OP_MUL_S, {-1.5}},
    {"div_scalar", OP_DIV_S, {3.0}},
    {"add", OP_ADD, {0}},
    {"sub", OP_SUB, {0}},
    {"mul", OP_MUL, {0}},
    {"div", OP_DIV, {0}},
    {"pow_tensor", OP_POW_T, {0}},
    {"addcmul", OP_ADDCMUL, {0.5}},
    {"addcdiv", OP_ADDCDIV, {0.5}},
};

static amp_tensor *golden_call(const char *case_name, amp_tensor **in, amp_tensor **idx, void *ctx) {
    (void)case_name, (void)idx;
    const struct golden_ew *g = ctx;
    return call(g->op, in, g->prm);
}

static void t_golden(void **state) {
    (void)state;
    golden_file *gf = golden_open("golden_elementwise.bin");
    static const char *dts[] = {"f32", "f16", "bf16"};
    int checked = 0;
    for (size_t i = 0; i < sizeof golden_ops / sizeof golden_ops[0]; i++) {
        for (int d = 0; d < 3; d++) {
            char name[96];
            snprintf(name, sizeof name, "%s.%s", golden_ops[i].name, dts[d]);
            const golden_op_case c = {"y", "gy", arity(golden_ops[i].op), golden_call, (void *)&golden_ops[i],
                                      golden_tol_rounded};
            golden_replay(gf, name, &c);
            checked++;
        }
    }
    assert_int_equal(checked, 3 * (int)(sizeof golden_ops / sizeof golden_ops[0]));
    golden_close(gf);
}

/* ---- the kernel iterator against its element-at-a-time reference -------------------------------------------- */
static size_t dt_size(amp_dtype dt) { return amp_dtype_size(dt); }

static void fill_random(void *buf, amp_dtype dt, int64_t n, test_rng *r, int dom) {
    for (int64_t i = 0; i < n; i++) {
        double v = dom == D_POS ? test_rng_range(r, 0.2, 3.0) : dom == D_AWAY ? test_rng_range(r, 0.5, 2.0) * (i & 1 ? -1 : 1)
                                                                               : 2 * test_rng_normal(r);
        switch (dt) {
        case AMP_F32: ((float *)buf)[i] = (float)v; break;
        case AMP_F16: ((uint16_t *)buf)[i] = amp_f64_to_f16(v); break;
        case AMP_BF16: ((uint16_t *)buf)[i] = amp_f64_to_bf16(v); break;
        default: ((double *)buf)[i] = v; break;
        }
    }
}

static bool same_bits_or_nan(const void *a, const void *b, amp_dtype dt, int64_t i) {
    size_t es = dt_size(dt);
    if (memcmp((const char *)a + i * es, (const char *)b + i * es, es) == 0) return true;
    double x, y;
    amp_tensor *ta = amp_tensor_borrow((char *)a + i * es, dt, 0, NULL), *tb = amp_tensor_borrow((char *)b + i * es, dt, 0, NULL);
    x = amp_tensor_item(ta);
    y = amp_tensor_item(tb);
    test_free_tensors(ta, tb);
    return isnan(x) && isnan(y);
}

static void t_iterator_vs_reference(void **state) {
    (void)state;
    static const amp_ew_op ops[] = {AMP_EW_ADD, AMP_EW_MUL, AMP_EW_DIV, AMP_EW_SUB, AMP_EW_EXP, AMP_EW_COPY,
                                    AMP_EW_ADDCMUL, AMP_EW_ADDCDIV, AMP_EW_GELU_TANH, AMP_EW_G_DIV_B, AMP_EW_CLAMP,
                                    AMP_EW_POW, AMP_EW_PRELU, AMP_EW_G_ABS, AMP_EW_DROPOUT, AMP_EW_SOFTPLUS};
    static const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16, AMP_F64};
    test_rng r = {31337};
    for (int trial = 0; trial < 300; trial++) {
        amp_ew_op op = ops[trial % (int)(sizeof ops / sizeof ops[0])];
        int nin = amp_ew_arity(op);
        int ndim = 1 + (int)(test_rng_u32(&r) % 4);
        int64_t shape[AMP_MAX_DIMS];
        for (int d = 0; d < ndim; d++) shape[d] = 1 + (int64_t)(test_rng_u32(&r) % 6);
        if (trial % 5 == 0) shape[ndim - 1] = 700 + (int64_t)(test_rng_u32(&r) % 700); /* rows longer than a tile */
        if (trial % 7 == 0) shape[0] = 300 + (int64_t)(test_rng_u32(&r) % 50);        /* many short rows */
        int64_t n = tc_numel(ndim, shape);
        amp_ew_operand in[AMP_EW_MAX_IN];
        void *bufs[AMP_EW_MAX_IN] = {0};
        for (int k = 0; k < nin; k++) {
            amp_dtype dt = dts[test_rng_u32(&r) % 4];
            /* a random dim order and padding; some dims broadcast (stride 0) */
            int perm[AMP_MAX_DIMS];
            for (int d = 0; d < ndim; d++) perm[d] = d;
            for (int d = ndim - 1; d > 0; d--) {
                int j = (int)(test_rng_u32(&r) % (uint32_t)(d + 1)), t = perm[d];
                perm[d] = perm[j];
                perm[j] = t;
            }
            int64_t stride = 1;
            int kind = (int)(test_rng_u32(&r) % 3); /* 0 contiguous, 1 permuted/padded, 2 with broadcast */
            for (int j = ndim - 1; j >= 0; j--) {
                int d = kind == 0 ? j : perm[j];
                bool bc = kind == 2 && test_rng_u32(&r) % 2;
                in[k].stride[d] = bc ? 0 : stride;
                if (!bc) stride *= shape[d] + (kind == 1 ? (int64_t)(test_rng_u32(&r) % 2) : 0);
            }
            bufs[k] = malloc((size_t)stride * dt_size(dt));
            fill_random(bufs[k], dt, stride, &r, (op == AMP_EW_DIV || op == AMP_EW_ADDCDIV || op == AMP_EW_G_DIV_B) && k >= 1 ? D_AWAY
                                                 : op == AMP_EW_POW && k == 0 ? D_POS : D_NORMAL);
            in[k].data = bufs[k];
            in[k].dtype = dt;
        }
        amp_dtype odt = dts[test_rng_u32(&r) % 4];
        amp_ew_params p = {.s0 = 0.7, .s1 = 1.3, .seed = 77, .offset = 5, .thresh = 1u << 31};
        if (op == AMP_EW_CLAMP) p.s0 = -0.4;
        void *o1 = malloc((size_t)n * dt_size(odt)), *o2 = malloc((size_t)n * dt_size(odt));
        amp_ew_run(op, &p, ndim, shape, o1, odt, nin, in);
        amp_ew_run_ref(op, &p, ndim, shape, o2, odt, nin, in);
        for (int64_t i = 0; i < n; i++)
            if (!same_bits_or_nan(o1, o2, odt, i))
                fail_msg("trial %d: %s to %s, ndim %d: element %lld differs from the reference", trial, amp_ew_name(op),
                         amp_dtype_name(odt), ndim, (long long)i);
        test_free_all(o1, o2);
        for (int k = 0; k < nin; k++) free(bufs[k]);
    }
}

/* Big tensors take the OpenMP path; results must not depend on the thread count. */
static void t_large_and_threads(void **state) {
    (void)state;
    test_rng r = {2024};
    amp_tensor *a = rand_in(&r, AMP_F32, 2, AMP_SHAPE(300, 257), D_NORMAL);
    amp_tensor *b = rand_in(&r, AMP_F16, 1, AMP_SHAPE(257), D_AWAY);
    amp_tensor *c = rand_in(&r, AMP_BF16, 2, AMP_SHAPE(300, 1), D_AWAY);
    int saved = amp_get_num_threads();
    amp_tensor *res[2][5];
    for (int t = 0; t < 2; t++) {
        amp_set_num_threads(t == 0 ? 1 : 4);
        res[t][0] = amp_add(a, b);
        res[t][1] = amp_exp(a);
        res[t][2] = amp_addcdiv(a, b, c, 0.25);
        res[t][3] = amp_mul(c, b);
        amp_tensor *h = amp_to(a, AMP_F16);
        res[t][4] = amp_pow(h, 3.0);
        amp_tensor_free(h);
    }
    amp_set_num_threads(saved);
    for (int i = 0; i < 5; i++) assert_same_values(res[0][i], res[1][i], "1 thread vs 4 threads");
    amp_tensor *abc[3] = {a, b, c};
    check_forward(OP_ADD, NULL, abc, res[0][0], 1e-5, 1e-6, "large add");
    check_forward(OP_EXP, NULL, abc, res[0][1], 1e-5, 0, "large exp");
    double prm[2] = {0.25, 0};
    check_forward(OP_ADDCDIV, prm, abc, res[0][2], 1e-5, 1e-6, "large addcdiv");
    amp_tensor *cb[2] = {c, b};
    check_forward(OP_MUL, NULL, cb, res[0][3], 1e-5, 0, "large mul");
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 5; i++) amp_tensor_free(res[t][i]);
    test_free_tensors(a, b, c);
}

/* ---- memory: backward frees its temporaries ----------------------------------------------------------------------- */
static void t_no_workspace_left(void **state) {
    (void)state;
    test_rng r = {8};
    amp_tensor *a = rand_in(&r, AMP_F16, 2, AMP_SHAPE(16, 8), D_POS), *b = rand_in(&r, AMP_F32, 1, AMP_SHAPE(8), D_AWAY);
    amp_tensor_set_requires_grad(a, true);
    amp_tensor_set_requires_grad(b, true);
    amp_mem_stats s0 = amp_memory_stats();
    for (int it = 0; it < 3; it++) {
        amp_scope *sc = amp_scope_begin();
        amp_tensor *y = amp_div(amp_mul(amp_exp(a), b), amp_add_scalar(amp_abs(b), 1.0));
        y = amp_addcmul(y, a, amp_sqrt(a), 0.5);
        y = amp_pow_tensor(amp_clamp(y, 0.01, 10.0), b);
        amp_tensor *g = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(16, 8));
        assert_int_equal(amp_backward_ex(y, g, false), AMP_OK);
        amp_scope_end(sc);
    }
    amp_mem_stats s1 = amp_memory_stats();
    assert_int_equal(s1.live[AMP_MEM_WORKSPACE], s0.live[AMP_MEM_WORKSPACE]);
    assert_int_equal(s1.live[AMP_MEM_ACTIVATION], s0.live[AMP_MEM_ACTIVATION]);
    assert_non_null(amp_tensor_grad(a));
    assert_non_null(amp_tensor_grad(b));
    assert_int_equal(amp_tensor_dtype(amp_tensor_grad(a)), AMP_F16);
    test_free_tensors(a, b);
}

/* ---- autocast hook ------------------------------------------------------------------------------------------------ */
/* ---- the ops generated from the catalogue ---------------------------------------------------
 * Every row of kernels/ew_ops.h's AMP_EW_UNARY_API, with no code here per
 * op (a new row is checked as soon as it is added): the forward in f32,
 * bf16 and f64 against its row's formula evaluated in float64 (libm), and
 * the gradient (the row named as its gradient, through autograd) against
 * central differences of that float64 formula. Inputs in [0.5, 2], inside
 * every such op's domain. */
typedef struct {
    amp_ew_op op;
    int64_t n;
} row_ref_ctx;

static void row_ref(const double *const *in, double *out, void *ctx) {
    const row_ref_ctx *c = ctx;
    for (int64_t i = 0; i < c->n; i++) out[i] = amp_ew_elem_f64((int)c->op, 0.0, 0.0, in[0][i], 0.0, 0.0, 0);
}

static void t_unary_api_rows(void **state) {
    (void)state;
    if (amp__ew_unary_api_count < 1) fail_msg("no AMP_EW_UNARY_API rows");
    const int64_t shape[2] = {3, 37};
    const amp_dtype dts[3] = {AMP_F64, AMP_F32, AMP_BF16};
    for (int r = 0; r < amp__ew_unary_api_count; r++) {
        const amp_ew_unary_api *a = &amp__ew_unary_api[r];
        if (amp_ew_arity(a->op) != 1) fail_msg("%s: row %s has arity %d", a->name, amp_ew_name(a->op), amp_ew_arity(a->op));
        if (amp_ew_arity(a->grad_op) != 2) fail_msg("%s: gradient row %s has arity %d", a->name, amp_ew_name(a->grad_op),
                                                    amp_ew_arity(a->grad_op));
        for (int d = 0; d < 3; d++) {
            test_rng rng = {0x5eed + (uint64_t)r};
            amp_tensor *x = tc_uniform(&rng, dts[d], 2, shape, 0.5, 2.0);
            amp_tensor_set_requires_grad(x, true);
            double *xv = tc_values(x);
            row_ref_ctx c = {a->op, 3 * 37};
            double want[3 * 37];
            row_ref((const double *const[]){xv}, want, &c);
            amp_tensor *out = a->fn(x);
            char what[96];
            snprintf(what, sizeof what, "%s %s", a->name, amp_dtype_name(dts[d]));
            if (!out) fail_msg("%s: %s", what, amp_last_error());
            if (amp_tensor_dtype(out) != dts[d]) fail_msg("%s: output dtype %s", what, amp_dtype_name(amp_tensor_dtype(out)));
            tc_assert_tensor(out, want, tc_rtol(dts[d], 2.0), 1e-30, what);
            if (dts[d] == AMP_F64) tc_gradcheck(out, &x, 1, row_ref, &c, 1e-6, 1e-9, what);
            amp_tensor_free(out);
            amp_tensor_free(x);
            free(xv);
        }
    }
}

static void t_autocast(void **state) {
    (void)state;
    test_rng r = {12};
    amp_tensor *h = rand_in(&r, AMP_F16, 1, AMP_SHAPE(6), D_POS), *f = rand_in(&r, AMP_F32, 1, AMP_SHAPE(6), D_POS);
    assert_int_equal(amp_autocast_enter(AMP_F16), AMP_OK);
    amp_tensor *y = amp_exp(h); /* fp32 list */
    assert_int_equal(amp_tensor_dtype(y), AMP_F32);
    amp_tensor_free(y);
    y = amp_pow(h, 2.0); /* fp32 list */
    assert_int_equal(amp_tensor_dtype(y), AMP_F32);
    amp_tensor_free(y);
    y = amp_add(h, f); /* no cast: ordinary promotion */
    assert_int_equal(amp_tensor_dtype(y), AMP_F32);
    amp_tensor_free(y);
    y = amp_sqrt(h); /* no cast */
    assert_int_equal(amp_tensor_dtype(y), AMP_F16);
    amp_tensor_free(y);
    y = amp_addcmul(h, h, f, 1.0); /* promote: widest input */
    assert_int_equal(amp_tensor_dtype(y), AMP_F32);
    amp_tensor_free(y);
    amp_autocast_exit();
    test_free_tensors(h, f);
}

/* ---- bad input: every op, NULL / wrong dtype / mismatched shapes ------------------------------------------------------ */
static void t_bad_input(void **state) {
    (void)state;
    amp_tensor *x = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(2, 3));
    amp_tensor *i64 = amp_tensor_zeros(AMP_I64, 2, AMP_SHAPE(2, 3));
    amp_tensor *f8 = amp_tensor_zeros(AMP_F8E4M3, 2, AMP_SHAPE(2, 3));
    amp_tensor *m = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(4, 5)); /* does not broadcast with [2,3] */
    amp_tensor *m1 = amp_tensor_ones(AMP_F16, 1, AMP_SHAPE(2));    /* nor does [2] */
    for (int op = 0; op < OP_COUNT; op++) {
        char needle[64];
        snprintf(needle, sizeof needle, "amp_%s", op_name[op]);
        double prm[2] = {1.0, 2.0};
        int nin = arity(op);
        for (int k = 0; k < nin; k++) {
            amp_tensor *in[3] = {x, x, x};
            in[k] = NULL;
            tc_assert_fails(call(op, in, prm), needle);
            in[k] = i64;
            tc_assert_fails(call(op, in, prm), needle);
            in[k] = f8;
            tc_assert_fails(call(op, in, prm), needle);
            if (nin > 1) {
                in[k] = m;
                tc_assert_fails(call(op, in, prm), needle);
                in[k] = m1;
                tc_assert_fails(call(op, in, prm), "broadcast");
            }
        }
    }
    /* the dtype message names the argument and the dtype */
    assert_null(amp_add(x, i64));
    assert_non_null(strstr(amp_last_error(), "b has dtype i64"));
    amp_clear_error();
    assert_null(amp_mul(x, m));
    assert_non_null(strstr(amp_last_error(), "[2,3] and [4,5]"));
    amp_clear_error();
    /* a NULL input from an earlier failure: the chain reports it */
    tc_assert_fails(amp_exp(amp_add(x, m)), "amp_exp");
    test_free_tensors(x, i64, f8, m, m1);
}

AMP_TEST_MAIN(t_unary_ops, t_binary_ops, t_addcmul_addcdiv, t_broadcast_shapes, t_noncontiguous, t_same_tensor_twice,
              t_dtypes, t_edge_cases, t_exp_accuracy, t_golden, t_iterator_vs_reference, t_large_and_threads,
              t_no_workspace_left, t_unary_api_rows, t_autocast, t_bad_input)

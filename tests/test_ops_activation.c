/* Activations: relu, gelu (erf and tanh), silu, sigmoid, tanh, softplus,
 * prelu, dropout.
 *
 * Forward against float64 loops written here, backward against central
 * differences of those loops (tc_gradcheck), PyTorch golden data
 * (tools/golden/gen_elementwise.py), edge cases, dropout's statistics and
 * reproducibility, and bad input.
 *
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path (the
 * kernels have a build per path; every one must pass the same checks). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "kernels/cpu/elementwise.h"
#include "numeric/philox.h"
#include "op_check.h"

enum { A_RELU, A_GELU, A_GELU_T, A_SILU, A_SIGMOID, A_TANH, A_SOFTPLUS, A_PRELU, A_COUNT };
static const char *const act_name[A_COUNT] = {"relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "softplus", "prelu"};

static double sref(int op, double x, const double *prm) {
    switch (op) {
    case A_RELU: return x > 0 ? x : 0;
    case A_GELU: return 0.5 * x * erfc(-x / sqrt(2.0));
    case A_GELU_T: /* 0.5 x (1 + tanh u), written as x / (1 + exp(-2u)) to stay accurate for x << 0 */
        return x / (1 + exp(-2 * sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case A_SILU: return x / (1 + exp(-x));
    case A_SIGMOID: return 1 / (1 + exp(-x));
    case A_TANH: return tanh(x);
    case A_SOFTPLUS: return x * prm[0] > prm[1] ? x : log1p(exp(prm[0] * x)) / prm[0];
    case A_PRELU: return x > 0 ? x : prm[0] * x; /* prm[0]: the channel's weight */
    }
    return NAN;
}

static amp_tensor *call(int op, amp_tensor *x, amp_tensor *w, const double *prm) {
    switch (op) {
    case A_RELU: return amp_relu(x);
    case A_GELU: return amp_gelu(x, AMP_GELU_ERF);
    case A_GELU_T: return amp_gelu(x, AMP_GELU_TANH);
    case A_SILU: return amp_silu(x);
    case A_SIGMOID: return amp_sigmoid(x);
    case A_TANH: return amp_tanh(x);
    case A_SOFTPLUS: return amp_softplus(x, prm[0], prm[1]);
    case A_PRELU: return amp_prelu(x, w);
    }
    return NULL;
}

typedef struct {
    int op;
    double prm[2];
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    int64_t wn; /* prelu weight elements (1 or C) */
} actx;

static void ref_fn(const double *const *in, double *out, void *vc) {
    actx *c = vc;
    int64_t n = tc_numel(c->ndim, c->shape);
    int64_t inner = 1;
    for (int d = 2; d < c->ndim; d++) inner *= c->shape[d];
    for (int64_t i = 0; i < n; i++) {
        double prm[2] = {c->prm[0], c->prm[1]};
        if (c->op == A_PRELU) prm[0] = in[1][c->wn == 1 ? 0 : (i / inner) % c->shape[1]];
        out[i] = sref(c->op, in[0][i], prm);
    }
}

static actx make_ctx(int op, const double *prm, const amp_tensor *x, const amp_tensor *w) {
    actx c;
    memset(&c, 0, sizeof c);
    c.op = op;
    if (prm) memcpy(c.prm, prm, sizeof c.prm);
    c.ndim = amp_tensor_ndim(x);
    memcpy(c.shape, amp_tensor_shape(x), sizeof(int64_t) * (size_t)c.ndim);
    c.wn = w ? amp_tensor_numel(w) : 0;
    return c;
}

static void check_forward(int op, const double *prm, amp_tensor *x, amp_tensor *w, const amp_tensor *out, double rtol,
                          double atol, const char *what) {
    actx c = make_ctx(op, prm, x, w);
    double *vals[2] = {tc_values(x), w ? tc_values(w) : NULL};
    int64_t n = amp_tensor_numel(out);
    double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
    ref_fn((const double *const *)vals, want, &c);
    tc_assert_tensor(out, want, rtol, atol, what);
    test_free_all(want, vals[0], vals[1]);
}

static double grad_rtol(amp_dtype dt) {
    return dt == AMP_F64 ? 1e-6 : dt == AMP_F32 ? 1e-4 : dt == AMP_F16 ? 4e-3 : 2.5e-2;
}
static double grad_atol(amp_dtype dt) {
    return dt == AMP_F64 ? 1e-8 : dt == AMP_F32 ? 1e-5 : dt == AMP_F16 ? 2e-3 : 1.5e-2;
}

static const amp_dtype DTS[] = {AMP_F32, AMP_F16, AMP_BF16, AMP_F64};

/* ---- forward and backward, every activation x dtype ------------------------------------------------------ */
static void t_activations(void **state) {
    (void)state;
    static const struct {
        int op;
        double prm[2];
        double scale; /* of the normal inputs */
    } cases[] = {
        {A_RELU, {0}, 1.0},          {A_GELU, {0}, 2.0},          {A_GELU_T, {0}, 2.0},
        {A_SILU, {0}, 2.0},          {A_SIGMOID, {0}, 2.0},       {A_TANH, {0}, 1.5},
        {A_SOFTPLUS, {1, 20}, 3.0},  {A_SOFTPLUS, {2, 5}, 2.0},   {A_SOFTPLUS, {0.5, 1}, 3.0},
        {A_SOFTPLUS, {-1.5, 4}, 2.0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int d = 0; d < 4; d++) {
            amp_dtype dt = DTS[d];
            test_rng r = {300 + i * 11 + (uint64_t)d};
            amp_tensor *x = tc_randn(&r, dt, 3, AMP_SHAPE(3, 4, 5), cases[i].scale);
            amp_tensor_set_requires_grad(x, true);
            char what[96];
            snprintf(what, sizeof what, "%s(%g,%g) %s", act_name[cases[i].op], cases[i].prm[0], cases[i].prm[1],
                     amp_dtype_name(dt));
            amp_tensor *y = call(cases[i].op, x, NULL, cases[i].prm);
            if (!y) fail_msg("%s: %s", what, amp_last_error());
            assert_int_equal(amp_tensor_dtype(y), dt);
            tc_assert_shape(y, 3, AMP_SHAPE(3, 4, 5), what);
            check_forward(cases[i].op, cases[i].prm, x, NULL, y, tc_rtol(dt, 1.0), dt == AMP_F64 ? 1e-14 : 1e-6, what);
            actx c = make_ctx(cases[i].op, cases[i].prm, x, NULL);
            tc_gradcheck(y, &x, 1, ref_fn, &c, grad_rtol(dt), grad_atol(dt), what);
            test_free_tensors(y, x);
        }
    }
}

static void t_prelu(void **state) {
    (void)state;
    /* weight [C] on dim 1, weight [1], 0-d weight; 2-d, 4-d, 1-d and 0-d inputs; mixed dtypes promote */
    static const struct {
        int xnd;
        int64_t xs[4];
        int wnd;
        int64_t ws;
    } cases[] = {
        {2, {6, 4}, 1, 4}, {4, {2, 3, 4, 5}, 1, 3}, {4, {2, 3, 4, 5}, 1, 1}, {3, {2, 3, 4}, 0, 1}, {1, {7}, 1, 1},
        {0, {0}, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int d = 0; d < 4; d++) {
            for (int wd = 0; wd < 2; wd++) {
                amp_dtype dt = DTS[d], wdt = wd ? AMP_F32 : dt;
                /* torch's result type: a 0-d side does not promote the other */
                amp_dtype want = dt == wdt                              ? dt
                                 : cases[i].xnd > 0 && cases[i].wnd == 0 ? dt
                                 : cases[i].xnd == 0 && cases[i].wnd > 0 ? wdt
                                 : dt == AMP_F64                         ? AMP_F64
                                                                         : AMP_F32;
                test_rng r = {600 + i * 13 + (uint64_t)d * 3 + (uint64_t)wd};
                amp_tensor *x = tc_randn(&r, dt, cases[i].xnd, cases[i].xs, 1.0);
                amp_tensor *w = tc_uniform(&r, wdt, cases[i].wnd, &cases[i].ws, -0.5, 0.5);
                amp_tensor_set_requires_grad(x, true);
                amp_tensor_set_requires_grad(w, true);
                char what[96];
                snprintf(what, sizeof what, "prelu case %zu x %s w %s", i, amp_dtype_name(dt), amp_dtype_name(wdt));
                amp_tensor *y = amp_prelu(x, w);
                if (!y) fail_msg("%s: %s", what, amp_last_error());
                assert_int_equal(amp_tensor_dtype(y), want);
                tc_assert_shape(y, cases[i].xnd, cases[i].xs, what);
                check_forward(A_PRELU, NULL, x, w, y, tc_rtol(want, 1.0), 1e-7, what);
                actx c = make_ctx(A_PRELU, NULL, x, w);
                amp_dtype gdt = dt == AMP_F64 ? AMP_F64 : dt;
                /* the weight's gradient sums many products: a looser bound for halves */
                tc_gradcheck(y, (amp_tensor *[]){x, w}, 2, ref_fn, &c, grad_rtol(gdt), 2 * grad_atol(gdt), what);
                test_free_tensors(y, x, w);
            }
        }
    }
}

/* ---- golden data from PyTorch ------------------------------------------------------------------------ */
static const struct golden_act {
    const char *name;
    int op;
    double prm[2];
} golden_ops[] = {
    {"relu", A_RELU, {0}},          {"sigmoid", A_SIGMOID, {0}},          {"tanh", A_TANH, {0}},
    {"silu", A_SILU, {0}},          {"gelu_erf", A_GELU, {0}},            {"gelu_tanh", A_GELU_T, {0}},
    {"softplus", A_SOFTPLUS, {1, 20}}, {"softplus_b2_t5", A_SOFTPLUS, {2, 5}}, {"prelu_c", A_PRELU, {0}},
    {"prelu_1", A_PRELU, {0}},
};

static amp_tensor *golden_call(const char *case_name, amp_tensor **in, amp_tensor **idx, void *ctx) {
    (void)case_name, (void)idx;
    const struct golden_act *g = ctx;
    return call(g->op, in[0], in[1], g->prm);
}

static void t_golden(void **state) {
    (void)state;
    static const char *dts[] = {"f32", "f16", "bf16"};
    golden_file *gf = golden_open("golden_elementwise.bin");
    for (size_t i = 0; i < sizeof golden_ops / sizeof golden_ops[0]; i++) {
        for (int d = 0; d < 3; d++) {
            char name[96];
            snprintf(name, sizeof name, "%s.%s", golden_ops[i].name, dts[d]);
            const golden_op_case c = {"y", "gy", golden_ops[i].op == A_PRELU ? 2 : 1, golden_call, (void *)&golden_ops[i],
                                      golden_tol_rounded};
            golden_replay(gf, name, &c);
        }
    }
    golden_close(gf);
}

/* ---- edge cases ------------------------------------------------------------------------------------------------- */
static void t_edge_cases(void **state) {
    (void)state;
    const float xs[] = {-1e30f, -100.0f, -30.0f, -0.0f, 0.0f, 1e-30f, 30.0f, 100.0f, 1e30f, INFINITY, -INFINITY, NAN};
    const int n = (int)(sizeof xs / sizeof xs[0]);
    amp_tensor *x = amp_tensor_from_data(xs, AMP_F32, 1, AMP_SHAPE(n));
    amp_tensor_set_requires_grad(x, true);
    /* no NaN from finite or infinite inputs; NaN stays NaN (torch) */
    for (int op = A_RELU; op <= A_SOFTPLUS; op++) {
        const double prm[2] = {1, 20};
        amp_tensor *y = call(op, x, NULL, prm);
        double *v = tc_values(y);
        for (int i = 0; i < n - 1; i++) {
            double want = sref(op, (double)xs[i], prm);
            if (isnan(v[i]) && !isnan(want)) fail_msg("%s(%g) is NaN, expected %g", act_name[op], xs[i], want);
            if (!isnan(want) && !isinf(want)) assert_close(v[i], (float)want, 1e-6, 1e-37, act_name[op]);
            if (isinf(want)) assert_true(v[i] == want);
        }
        if (!isnan(v[n - 1])) fail_msg("%s(NaN) = %g, expected NaN", act_name[op], v[n - 1]);
        free(v);
        amp_tensor_free(y);
    }
    /* softplus is accurate far below 0 (not rounded to 0) and exactly x above the threshold */
    amp_tensor *y = amp_softplus(x, 1.0, 20.0);
    double *v = tc_values(y);
    assert_close(v[2], exp(-30.0), 1e-6, 0, "softplus(-30)");
    assert_true(v[6] == 30.0 && v[7] == 100.0);
    free(v);
    amp_tensor_free(y);
    /* below a large threshold: log1p(exp(100)) computed without overflowing */
    y = amp_softplus(x, 1.0, 1000.0);
    v = tc_values(y);
    assert_true(v[6] == 30.0f && v[7] == 100.0f && v[3] == (float)log(2.0));
    free(v);
    amp_tensor_free(y);
    /* relu and its gradient at 0 (0, as torch) */
    y = amp_relu(x);
    amp_tensor *g = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(n));
    assert_int_equal(amp_backward_ex(y, g, false), AMP_OK);
    v = tc_values(amp_tensor_grad(x));
    for (int i = 0; i < n - 1; i++) assert_true(v[i] == (xs[i] > 0 ? 1.0 : 0.0));
    free(v);
    amp_tensor_set_grad(x, NULL);
    amp_tensor_free(y);
    /* gradients stay finite at the extremes */
    for (int op = A_GELU; op <= A_SOFTPLUS; op++) {
        const double prm[2] = {1, 20};
        y = call(op, x, NULL, prm);
        assert_int_equal(amp_backward_ex(y, g, false), AMP_OK);
        v = tc_values(amp_tensor_grad(x));
        for (int i = 1; i < 8; i++) /* finite inputs of moderate size */
            if (!isfinite(v[i])) fail_msg("d %s / dx at %g is %g", act_name[op], xs[i], v[i]);
        free(v);
        amp_tensor_set_grad(x, NULL);
        amp_tensor_free(y);
    }
    test_free_tensors(g, x);

    /* empty tensors */
    amp_tensor *e = amp_tensor_zeros(AMP_BF16, 3, AMP_SHAPE(2, 0, 3));
    for (int op = A_RELU; op <= A_SOFTPLUS; op++) {
        const double prm[2] = {1, 20};
        y = call(op, e, NULL, prm);
        tc_assert_shape(y, 3, AMP_SHAPE(2, 0, 3), act_name[op]);
        amp_tensor_free(y);
    }
    amp_tensor *w0 = amp_tensor_ones(AMP_BF16, 1, AMP_SHAPE(1));
    y = amp_prelu(e, w0);
    tc_assert_shape(y, 3, AMP_SHAPE(2, 0, 3), "prelu empty");
    amp_tensor_free(y);
    y = amp_dropout(e, 0.5, true, NULL);
    tc_assert_shape(y, 3, AMP_SHAPE(2, 0, 3), "dropout empty");
    test_free_tensors(y, w0, e);

    /* strided input: same values as the contiguous copy */
    test_rng r = {77};
    amp_tensor *a = tc_randn(&r, AMP_F16, 2, AMP_SHAPE(9, 40), 2.0);
    amp_tensor *t = amp_transpose(a, 0, 1), *tc = amp_contiguous(t);
    for (int op = A_RELU; op <= A_SOFTPLUS; op++) {
        const double prm[2] = {1.5, 3};
        amp_tensor *y1 = call(op, t, NULL, prm), *y2 = call(op, tc, NULL, prm);
        double *v1 = tc_values(y1), *v2 = tc_values(y2);
        for (int i = 0; i < 360; i++)
            if (v1[i] != v2[i]) fail_msg("%s on a transposed view: element %d %g vs %g", act_name[op], i, v1[i], v2[i]);
        test_free_all(v1, v2);
        test_free_tensors(y1, y2);
    }
    amp_tensor *wc = tc_uniform(&r, AMP_F16, 1, AMP_SHAPE(9), 0.1, 0.3); /* t is [40,9]: 9 channels */
    amp_tensor *p1 = amp_prelu(t, wc), *p2 = amp_prelu(tc, wc);
    check_forward(A_PRELU, NULL, tc, wc, p1, 1e-3, 0, "prelu on a transposed view");
    check_forward(A_PRELU, NULL, tc, wc, p2, 1e-3, 0, "prelu contiguous");
    test_free_tensors(p1, p2, wc, t, tc, a);
}

/* sigmoid, silu, tanh and gelu in f32 use amp's own vectorisable exp, tanh
 * and normal CDF: relative accuracy over a dense sweep, tails included. */
static void t_f32_accuracy_sweep(void **state) {
    (void)state;
    const int64_t n = 100001;
    float *xs = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) xs[i] = (float)(-12.0 + 24.0 * (double)i / (double)(n - 1));
    amp_tensor *x = amp_tensor_from_data(xs, AMP_F32, 1, &n);
    static const int ops[] = {A_SIGMOID, A_SILU, A_GELU, A_GELU_T, A_SOFTPLUS, A_TANH};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        const double prm[2] = {1, 20};
        amp_tensor *y = call(ops[k], x, NULL, prm);
        double *v = tc_values(y);
        for (int64_t i = 0; i < n; i++) {
            double want = sref(ops[k], (double)xs[i], prm);
            /* ~8 ulp; in the tails gelu_tanh's f32 exponent argument (of
             * size 0.07 |x|^3) carries its own rounding, as in any f32 code */
            double ax = fabs(xs[i]), rtol = 1e-6 + 3e-8 * ax * ax * ax;
            if (!(fabs(v[i] - want) <= rtol * fabs(want) + 1e-38))
                fail_msg("%s(%.9g) = %.9g, expected %.9g (rel %.2g)", act_name[ops[k]], xs[i], v[i], want,
                         fabs(v[i] - want) / fabs(want));
        }
        free(v);
        amp_tensor_free(y);
    }
    amp_tensor_free(x);
    free(xs);
}

/* ---- dropout ------------------------------------------------------------------------------------------------------ */
static void t_dropout_statistics(void **state) {
    (void)state;
    const int64_t n = 100000;
    static const double ps[] = {0.1, 0.3, 0.5, 0.9};
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
        for (int d = 0; d < 3; d++) {
            amp_dtype dt = DTS[d];
            double p = ps[k];
            test_rng r = {11 + k * 5 + (uint64_t)d};
            amp_tensor *x = tc_uniform(&r, dt, 1, &n, 0.5, 2.0);
            amp_generator g = amp_generator_make(1234 + k);
            amp_tensor *y = amp_dropout(x, p, true, &g);
            assert_non_null(y);
            assert_int_equal(amp_tensor_dtype(y), dt);
            assert_int_equal(g.offset, (uint64_t)n); /* the generator advanced by numel */
            double *vx = tc_values(x), *vy = tc_values(y);
            int64_t zeros = 0;
            float keep = (float)(1.0 - p);
            for (int64_t i = 0; i < n; i++) {
                if (vy[i] == 0.0) {
                    zeros++;
                } else {
                    double want = tc_round_to(dt, (float)vx[i] / keep); /* exactly x / (1-p), rounded once */
                    if (vy[i] != want)
                        fail_msg("dropout p=%g %s: kept element %lld is %.9g, expected %.9g", p, amp_dtype_name(dt),
                                 (long long)i, vy[i], want);
                }
            }
            double frac = (double)zeros / (double)n, se = sqrt(p * (1 - p) / (double)n);
            if (fabs(frac - p) > 4 * se)
                fail_msg("dropout p=%g %s: %.5f zeroed, more than 4 standard errors (%.5f) from p", p, amp_dtype_name(dt),
                         frac, se);
            test_free_all(vx, vy);
            test_free_tensors(y, x);
        }
    }
}

static void t_dropout_reproducible(void **state) {
    (void)state;
    const int64_t n = 70000; /* > the parallel threshold */
    amp_tensor *x = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(n / 100, 100));
    int saved = amp_get_num_threads();
    amp_tensor *y[4];
    amp_generator g1 = amp_generator_make(42), g2 = amp_generator_make(42), g3 = amp_generator_make(43);
    amp_set_num_threads(1);
    y[0] = amp_dropout(x, 0.4, true, &g1);
    amp_set_num_threads(4);
    y[1] = amp_dropout(x, 0.4, true, &g2); /* same seed, other thread count */
    y[2] = amp_dropout(x, 0.4, true, &g3); /* other seed */
    y[3] = amp_dropout(x, 0.4, true, &g1); /* same generator, next call */
    amp_set_num_threads(saved);
    double *v[4];
    for (int i = 0; i < 4; i++) v[i] = tc_values(y[i]);
    int64_t diff_seed = 0, diff_next = 0;
    for (int64_t i = 0; i < n; i++) {
        if (v[0][i] != v[1][i]) fail_msg("same seed, other thread count: element %lld differs", (long long)i);
        diff_seed += (v[0][i] == 0) != (v[2][i] == 0);
        diff_next += (v[0][i] == 0) != (v[3][i] == 0);
    }
    /* independent masks disagree on 2p(1-p) = 48% of the elements */
    assert_true(diff_seed > n * 4 / 10 && diff_seed < n * 56 / 100);
    assert_true(diff_next > n * 4 / 10 && diff_next < n * 56 / 100);
    for (int i = 0; i < 4; i++) {
        free(v[i]);
        amp_tensor_free(y[i]);
    }
    /* the default generator: amp_manual_seed makes it reproducible */
    amp_manual_seed(7);
    amp_tensor *a = amp_dropout(x, 0.5, true, NULL);
    assert_int_equal(amp_default_generator()->offset, (uint64_t)n);
    amp_manual_seed(7);
    amp_tensor *b = amp_dropout(x, 0.5, true, NULL);
    double *va = tc_values(a), *vb = tc_values(b);
    assert_memory_equal(va, vb, sizeof(double) * (size_t)n);
    test_free_all(va, vb);
    test_free_tensors(a, b);
    /* the mask follows the logical (row-major) index, also for a strided input */
    amp_tensor *xt = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(100, n / 100));
    amp_tensor *t = amp_transpose(xt, 0, 1);
    amp_generator h1 = amp_generator_make(5), h2 = amp_generator_make(5);
    a = amp_dropout(t, 0.3, true, &h1);
    b = amp_dropout(x, 0.3, true, &h2);
    va = tc_values(a);
    vb = tc_values(b);
    assert_memory_equal(va, vb, sizeof(double) * (size_t)n);
    test_free_all(va, vb);
    test_free_tensors(a, b, t, xt, x);
}

/* The mask is Philox4x32-10 (numeric/philox.h) on stream 1: element i of a
 * call at generator offset o is kept when word (o + i) % 4 of block
 * (o + i) / 4 is >= ceil(p * 2^32). */
static void t_dropout_mask_is_philox(void **state) {
    (void)state;
    static const double ps[] = {0.05, 0.5, 0.77};
    for (int k = 0; k < 3; k++) {
        const int64_t n = 3001;
        amp_tensor *x = amp_tensor_ones(AMP_F32, 1, &n);
        amp_generator g = amp_generator_make(0x1234567890abcdefull + (uint64_t)k);
        g.offset = 7 + 13 * (uint64_t)k; /* not a multiple of 4 */
        uint64_t off = g.offset;
        amp_tensor *y = amp_dropout(x, ps[k], true, &g);
        double *v = tc_values(y);
        uint64_t thresh = (uint64_t)ceil(ps[k] * 4294967296.0);
        for (int64_t i = 0; i < n; i++) {
            uint64_t c = off + (uint64_t)i;
            amp_philox_u32x4 r = amp_philox4x32(g.seed, c >> 2, 1);
            bool keep = r.v[c & 3] >= thresh;
            assert_int_equal(amp_ew_dropout_bits(g.seed, c), r.v[c & 3]);
            if (keep != (v[i] != 0)) fail_msg("p=%g: element %lld: mask differs from Philox", ps[k], (long long)i);
        }
        free(v);
        test_free_tensors(y, x);
    }
}

static void t_dropout_backward_and_modes(void **state) {
    (void)state;
    const int64_t n = 5000;
    for (int d = 0; d < 4; d++) {
        amp_dtype dt = DTS[d];
        test_rng r = {91 + (uint64_t)d};
        amp_tensor *x = tc_randn(&r, dt, 1, &n, 1.0);
        amp_tensor_set_requires_grad(x, true);
        amp_generator g = amp_generator_make(99), g2 = amp_generator_make(99);
        amp_tensor *y = amp_dropout(x, 0.25, true, &g);
        amp_tensor *ones = amp_tensor_ones(dt, 1, &n);
        amp_tensor *mask = amp_dropout(ones, 0.25, true, &g2); /* the same seed: the same mask */
        amp_tensor *up = tc_randn(&r, dt, 1, &n, 1.0);
        assert_int_equal(amp_backward_ex(y, up, false), AMP_OK);
        double *vx = tc_values(x), *vy = tc_values(y), *vg = tc_values(amp_tensor_grad(x)), *vu = tc_values(up);
        double *vm = tc_values(mask);
        float keep = 0.75f;
        for (int64_t i = 0; i < n; i++) {
            bool kept = vm[i] != 0;
            if (kept != (vy[i] != 0) && vx[i] != 0) fail_msg("dropout %s: mask differs between calls with one seed", amp_dtype_name(dt));
            double want = kept ? tc_round_to(dt, dt == AMP_F64 ? vu[i] / 0.75 : (float)vu[i] / keep) : 0.0;
            if (vg[i] != want)
                fail_msg("dropout %s backward: element %lld: %g, expected %g (same mask as the forward)", amp_dtype_name(dt),
                         (long long)i, vg[i], want);
        }
        test_free_all(vx, vy, vg, vu, vm);
        test_free_tensors(mask, ones, up, y);
        amp_tensor_set_grad(x, NULL);

        /* eval mode and p = 0: the identity, a view, still differentiable */
        for (int mode = 0; mode < 2; mode++) {
            amp_generator g0 = amp_generator_make(1);
            y = mode == 0 ? amp_dropout(x, 0.5, false, &g0) : amp_dropout(x, 0.0, true, &g0);
            assert_non_null(y);
            assert_ptr_equal(amp_tensor_data(y), amp_tensor_data(x));
            assert_int_equal(g0.offset, 0);
            assert_true(amp_tensor_requires_grad(y));
            up = amp_tensor_full(dt, 1, &n, 3.0);
            assert_int_equal(amp_backward_ex(y, up, false), AMP_OK);
            vg = tc_values(amp_tensor_grad(x));
            for (int64_t i = 0; i < n; i++) assert_true(vg[i] == 3.0);
            free(vg);
            amp_tensor_set_grad(x, NULL);
            test_free_tensors(up, y);
        }
        /* p = 1: zeros and a zero gradient */
        y = amp_dropout(x, 1.0, true, NULL);
        up = amp_tensor_ones(dt, 1, &n);
        assert_int_equal(amp_backward_ex(y, up, false), AMP_OK);
        vy = tc_values(y);
        vg = tc_values(amp_tensor_grad(x));
        for (int64_t i = 0; i < n; i++) assert_true(vy[i] == 0 && vg[i] == 0);
        test_free_all(vy, vg);
        amp_tensor_set_grad(x, NULL);
        test_free_tensors(up, y, x);
    }
    /* torch multiplies by the mask: a dropped inf becomes NaN, a kept one stays inf */
    amp_tensor *inf = amp_tensor_full(AMP_F32, 1, AMP_SHAPE(64), INFINITY);
    amp_tensor *y = amp_dropout(inf, 0.5, true, NULL);
    double *v = tc_values(y);
    int nan = 0, infs = 0;
    for (int i = 0; i < 64; i++) {
        nan += isnan(v[i]);
        infs += isinf(v[i]);
    }
    assert_true(nan > 0 && infs > 0 && nan + infs == 64);
    free(v);
    test_free_tensors(y, inf);

    /* dropout saves nothing for backward: the mask is regenerated */
    amp_tensor *x = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(4096));
    amp_tensor_set_requires_grad(x, true);
    amp_mem_stats s0 = amp_memory_stats();
    y = amp_dropout(x, 0.5, true, NULL);
    amp_mem_stats s1 = amp_memory_stats();
    assert_int_equal(s1.live[AMP_MEM_ACTIVATION] - s0.live[AMP_MEM_ACTIVATION], 4096 * sizeof(float));
    assert_int_equal(s1.live[AMP_MEM_WORKSPACE], s0.live[AMP_MEM_WORKSPACE]);
    test_free_tensors(y, x);
}

/* ---- autocast hook -------------------------------------------------------------------------------------------------- */
static void t_autocast(void **state) {
    (void)state;
    test_rng r = {3};
    amp_tensor *x = tc_randn(&r, AMP_F32, 2, AMP_SHAPE(2, 3), 1.0), *w = tc_uniform(&r, AMP_F32, 1, AMP_SHAPE(3), 0, 1);
    amp_tensor *h = tc_randn(&r, AMP_F16, 2, AMP_SHAPE(2, 3), 1.0);
    assert_int_equal(amp_autocast_enter(AMP_BF16), AMP_OK);
    amp_tensor *y = amp_prelu(x, w); /* lower-precision list */
    assert_int_equal(amp_tensor_dtype(y), AMP_BF16);
    amp_tensor_free(y);
    y = amp_softplus(h, 1, 20); /* fp32 list */
    assert_int_equal(amp_tensor_dtype(y), AMP_F32);
    amp_tensor_free(y);
    y = amp_gelu(h, AMP_GELU_ERF); /* no cast */
    assert_int_equal(amp_tensor_dtype(y), AMP_F16);
    amp_tensor_free(y);
    amp_autocast_exit();
    test_free_tensors(x, w, h);
}

/* ---- bad input ---------------------------------------------------------------------------------------------------------- */
static void t_bad_input(void **state) {
    (void)state;
    amp_tensor *x = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(2, 3));
    amp_tensor *i64 = amp_tensor_zeros(AMP_I64, 2, AMP_SHAPE(2, 3));
    amp_tensor *u8 = amp_tensor_zeros(AMP_U8, 2, AMP_SHAPE(2, 3));
    const double prm[2] = {1, 20};
    for (int op = A_RELU; op <= A_SOFTPLUS; op++) {
        char needle[32];
        snprintf(needle, sizeof needle, "amp_%s", op == A_GELU_T ? "gelu" : act_name[op]);
        tc_assert_fails(call(op, NULL, NULL, prm), needle);
        tc_assert_fails(call(op, i64, NULL, prm), needle);
        tc_assert_fails(call(op, u8, NULL, prm), needle);
    }
    tc_assert_fails(amp_gelu(x, (amp_gelu_approx)7), "amp_gelu");
    tc_assert_fails(amp_softplus(x, 0.0, 20), "amp_softplus");
    tc_assert_fails(amp_softplus(x, NAN, 20), "amp_softplus");
    tc_assert_fails(amp_softplus(x, 1.0, NAN), "amp_softplus");
    /* prelu: NULL, dtype, weight rank, weight size */
    amp_tensor *w3 = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(3)), *w4 = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(4));
    amp_tensor *w2d = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(3, 1)), *wi = amp_tensor_ones(AMP_I32, 1, AMP_SHAPE(3));
    amp_tensor *x1 = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(3));
    amp_tensor *w1 = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(1));
    tc_assert_fails(amp_prelu(NULL, w3), "amp_prelu");
    tc_assert_fails(amp_prelu(x, NULL), "amp_prelu");
    tc_assert_fails(amp_prelu(i64, w3), "amp_prelu");
    tc_assert_fails(amp_prelu(x, wi), "amp_prelu");
    tc_assert_fails(amp_prelu(x, w2d), "amp_prelu"); /* wrong rank */
    assert_null(amp_prelu(x, w4));                  /* 4 weights, 3 channels */
    assert_non_null(strstr(amp_last_error(), "amp_prelu: weight [4] has 4 elements; expected 1 or the 3 channels"));
    amp_clear_error();
    tc_assert_fails(amp_prelu(x1, w3), "amp_prelu"); /* a 1-d input has one channel */
    amp_tensor *ok = amp_prelu(x1, w1);
    assert_non_null(ok);
    amp_tensor_free(ok);
    /* dropout: NULL, dtype, p outside [0, 1] */
    tc_assert_fails(amp_dropout(NULL, 0.5, true, NULL), "amp_dropout");
    tc_assert_fails(amp_dropout(i64, 0.5, true, NULL), "amp_dropout");
    tc_assert_fails(amp_dropout(u8, 0.5, false, NULL), "amp_dropout");
    tc_assert_fails(amp_dropout(x, -0.1, true, NULL), "amp_dropout");
    tc_assert_fails(amp_dropout(x, 1.5, true, NULL), "amp_dropout");
    tc_assert_fails(amp_dropout(x, NAN, false, NULL), "amp_dropout");
    test_free_tensors(w3, w4, w2d, wi, x1, w1, x, i64, u8);
}

AMP_TEST_MAIN(t_activations, t_prelu, t_golden, t_edge_cases, t_f32_accuracy_sweep, t_dropout_statistics,
              t_dropout_reproducible, t_dropout_mask_is_philox, t_dropout_backward_and_modes, t_autocast, t_bad_input)

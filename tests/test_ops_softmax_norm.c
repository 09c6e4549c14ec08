/* softmax, log_softmax, layer_norm, batch_norm, group_norm, embedding. Each ×
 * f32/f16/bf16: forward against float64 reference loops written here,
 * backward against central differences of them, PyTorch golden data
 * (tools/golden/gen_reduce_norm_loss.py), extreme softmax inputs, batch-norm
 * running statistics over two training steps and eval mode, embedding index
 * checks, and a bad-input walk.
 *
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path (the
 * kernels have a build per path; every one must pass the same checks). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "op_check.h"

static const amp_dtype DTS[3] = {AMP_F32, AMP_F16, AMP_BF16};

static double gtol(amp_dtype dt, double f32, double half_factor) { return dt == AMP_F32 ? f32 : tc_rtol(dt, half_factor); }

/* ---- softmax ------------------------------------------------------------------------------- */
typedef struct {
    int64_t outer, len, inner;
    bool log;
} sm_ctx;

static void sm_ref(const double *const *in, double *out, void *vc) {
    const sm_ctx *c = vc;
    const double *x = in[0];
    for (int64_t o = 0; o < c->outer; o++)
        for (int64_t i = 0; i < c->inner; i++) {
            double m = -INFINITY, s = 0;
            for (int64_t l = 0; l < c->len; l++) m = fmax(m, x[(o * c->len + l) * c->inner + i]);
            for (int64_t l = 0; l < c->len; l++) s += exp(x[(o * c->len + l) * c->inner + i] - m);
            for (int64_t l = 0; l < c->len; l++) {
                int64_t k = (o * c->len + l) * c->inner + i;
                out[k] = c->log ? x[k] - m - log(s) : exp(x[k] - m) / s;
            }
        }
}

static void t_softmax(void **state) {
    (void)state;
    test_rng r = {101};
    const int64_t s[3] = {3, 5, 4};
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        for (int dim = -1; dim < 3; dim++) {
            for (int lg = 0; lg < 2; lg++) {
                amp_tensor *x = tc_randn_grad(&r, dt, 3, s, 2.0, true);
                amp_tensor *y = lg ? amp_log_softmax(x, dim) : amp_softmax(x, dim);
                assert_non_null(y);
                assert_int_equal(amp_tensor_dtype(y), dt);
                tc_assert_shape(y, 3, s, "softmax shape");
                int d = (dim + 3) % 3;
                sm_ctx c = {1, s[d], 1, lg};
                for (int i = 0; i < d; i++) c.outer *= s[i];
                for (int i = d + 1; i < 3; i++) c.inner *= s[i];
                double *xv = tc_values(x), want[60];
                const double *ins[1] = {xv};
                sm_ref(ins, want, &c);
                char what[64];
                snprintf(what, sizeof what, "%s %s dim %d", lg ? "log_softmax" : "softmax", amp_dtype_name(dt), dim);
                tc_assert_tensor(y, want, tc_rtol(dt, 1), dt == AMP_F32 ? 1e-6 : tc_rtol(dt, 0.5), what);
                free(xv);
                amp_tensor *xs[1] = {x};
                tc_gradcheck(y, xs, 1, sm_ref, &c, gtol(dt, 1e-4, 10), gtol(dt, 1e-6, 5), what);
                test_free_tensors(y, x);
            }
        }
    }
    /* 0-d: softmax 1, log_softmax 0 */
    amp_tensor *sc = amp_tensor_full(AMP_F32, 0, NULL, 3.0);
    amp_tensor *a = amp_softmax(sc, 0), *b = amp_log_softmax(sc, -1);
    assert_true(amp_tensor_item(a) == 1.0 && amp_tensor_item(b) == 0.0);
    test_free_tensors(a, b, sc);
    /* empty */
    amp_tensor *e = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(0, 4));
    amp_tensor *se = amp_softmax(e, 1);
    tc_assert_shape(se, 2, AMP_SHAPE(0, 4), "softmax of empty");
    test_free_tensors(se, e);
}

/* Max subtraction: 1000 / -1000 neither overflow nor underflow to NaN. */
static void t_softmax_extreme(void **state) {
    (void)state;
    double v[8] = {1000, -1000, 0, 999, -1000, -1000, -999, -1000.5};
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        amp_tensor *x = tc_from_values(dt, 2, AMP_SHAPE(2, 4), v);
        double *xv = tc_values(x), want[8], lwant[8];
        sm_ctx c = {2, 4, 1, false}, cl = {2, 4, 1, true};
        const double *ins[1] = {xv};
        sm_ref(ins, want, &c);
        sm_ref(ins, lwant, &cl);
        amp_tensor *y = amp_softmax(x, 1), *ly = amp_log_softmax(x, 1);
        double *yv = tc_values(y), *lyv = tc_values(ly);
        for (int i = 0; i < 8; i++) assert_true(isfinite(yv[i]) && isfinite(lyv[i]));
        tc_assert_tensor(y, want, tc_rtol(dt, 1), 1e-30, "softmax of +-1000");
        tc_assert_tensor(ly, lwant, tc_rtol(dt, 1), 1e-6, "log_softmax of +-1000");
        assert_true(yv[1] == 0.0); /* exp(-2000) underflows to exactly 0 */
        test_free_all(yv, lyv, xv);
        test_free_tensors(y, ly, x);
    }
    /* softmax along a strided dim with huge values */
    double w[6] = {1e4, -1e4, 0, 1e4, 2e4, -3e4};
    amp_tensor *x = tc_from_values(AMP_F32, 2, AMP_SHAPE(2, 3), w);
    amp_tensor *y = amp_softmax(x, 0);
    double want[6] = {0.5, 0, 1, 0.5, 1, 0};
    tc_assert_tensor(y, want, 1e-6, 0, "softmax dim 0 of +-1e4");
    amp_tensor_free(y);
    /* a row of -inf gives NaN (as torch) */
    double ninf[3] = {-INFINITY, -INFINITY, -INFINITY};
    amp_tensor *xn = tc_from_values(AMP_F32, 1, AMP_SHAPE(3), ninf);
    amp_tensor *yn = amp_softmax(xn, 0);
    double *ynv = tc_values(yn);
    assert_true(isnan(ynv[0]));
    free(ynv);
    test_free_tensors(yn, xn);
    /* under autocast softmax is on the fp32 list: f16 in, f32 out */
    amp_tensor *xh = tc_from_values(AMP_F16, 2, AMP_SHAPE(2, 4), v);
    amp_autocast_enter(AMP_F16);
    amp_tensor *yh = amp_softmax(xh, -1);
    amp_autocast_exit();
    assert_int_equal(amp_tensor_dtype(yh), AMP_F32);
    test_free_tensors(yh, xh, x);
}

/* ---- layer_norm --------------------------------------------------------------------------------- */
typedef struct {
    int64_t M, D;
    double eps;
    bool w, b;
} ln_ctx;

static void ln_ref(const double *const *in, double *out, void *vc) {
    const ln_ctx *c = vc;
    const double *x = in[0], *w = c->w ? in[1] : NULL, *b = c->b ? in[2] : NULL;
    for (int64_t m = 0; m < c->M; m++) {
        double mu = 0, var = 0;
        for (int64_t d = 0; d < c->D; d++) mu += x[m * c->D + d];
        mu /= (double)c->D;
        for (int64_t d = 0; d < c->D; d++) var += (x[m * c->D + d] - mu) * (x[m * c->D + d] - mu);
        var /= (double)c->D;
        double rs = 1 / sqrt(var + c->eps);
        for (int64_t d = 0; d < c->D; d++) {
            double y = (x[m * c->D + d] - mu) * rs;
            if (w) y *= w[d];
            if (b) y += b[d];
            out[m * c->D + d] = y;
        }
    }
}

static void t_layer_norm(void **state) {
    (void)state;
    test_rng r = {202};
    struct {
        int nd;
        int64_t s[3];
        int k;
        bool w, b;
    } cases[] = {
        {2, {4, 6}, 1, true, true},  {3, {2, 3, 4}, 2, false, false}, {3, {2, 3, 4}, 1, true, false},
        {3, {2, 3, 4}, 3, false, true}, {1, {7}, 1, true, true},
    };
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            int nd = cases[ci].nd, k = cases[ci].k;
            const int64_t *s = cases[ci].s;
            amp_tensor *x = tc_randn_grad(&r, dt, nd, s, 2.0, true);
            /* shift the mean so the statistics matter */
            amp_tensor *w = cases[ci].w ? tc_randn_grad(&r, dt, k, s + nd - k, 1.0, true) : NULL;
            amp_tensor *b = cases[ci].b ? tc_randn_grad(&r, dt, k, s + nd - k, 1.0, true) : NULL;
            double eps = ci == 1 ? 1e-3 : 1e-5;
            amp_tensor *y = amp_layer_norm(x, k, w, b, eps);
            assert_non_null(y);
            assert_int_equal(amp_tensor_dtype(y), dt);
            ln_ctx c = {1, 1, eps, w != NULL, b != NULL};
            for (int i = 0; i < nd - k; i++) c.M *= s[i];
            for (int i = nd - k; i < nd; i++) c.D *= s[i];
            double *xv = tc_values(x), *wv = w ? tc_values(w) : NULL, *bv = b ? tc_values(b) : NULL;
            double *want = malloc(sizeof(double) * (size_t)(c.M * c.D));
            const double *ins[3] = {xv, wv, bv};
            ln_ref(ins, want, &c);
            char what[64];
            snprintf(what, sizeof what, "layer_norm %s case %zu", amp_dtype_name(dt), ci);
            tc_assert_tensor(y, want, tc_rtol(dt, 1), dt == AMP_F32 ? 1e-5 : tc_rtol(dt, 2), what);
            amp_tensor *xs[3] = {x, w, b};
            tc_gradcheck(y, xs, 3, ln_ref, &c, gtol(dt, 1e-3, 20), gtol(dt, 1e-5, 10), what);
            test_free_all(want, xv, wv, bv);
            test_free_tensors(y, x, w, b);
        }
    }
    /* a half x with f32 affine parameters: output in x's dtype */
    amp_tensor *x = tc_randn_grad(&r, AMP_BF16, 2, AMP_SHAPE(3, 5), 1.0, false);
    amp_tensor *w = tc_randn_grad(&r, AMP_F32, 1, AMP_SHAPE(5), 1.0, false);
    amp_tensor *y = amp_layer_norm(x, 1, w, NULL, 1e-5);
    assert_int_equal(amp_tensor_dtype(y), AMP_BF16);
    test_free_tensors(y, w, x);
}

/* ---- batch_norm ------------------------------------------------------------------------------- */
typedef struct {
    int64_t N, C, L;
    double eps;
    bool training, w, b;
    double rm[8], rv[8]; /* running statistics used in eval mode */
} bn_ctx;

static void bn_stats(const bn_ctx *c, const double *x, double *mean, double *var) {
    for (int64_t ch = 0; ch < c->C; ch++) {
        double s = 0, s2 = 0, n = (double)(c->N * c->L);
        for (int64_t i = 0; i < c->N; i++)
            for (int64_t l = 0; l < c->L; l++) s += x[(i * c->C + ch) * c->L + l];
        mean[ch] = s / n;
        for (int64_t i = 0; i < c->N; i++)
            for (int64_t l = 0; l < c->L; l++) {
                double d = x[(i * c->C + ch) * c->L + l] - mean[ch];
                s2 += d * d;
            }
        var[ch] = s2 / n;
    }
}

static void bn_ref(const double *const *in, double *out, void *vc) {
    const bn_ctx *c = vc;
    const double *x = in[0], *w = c->w ? in[1] : NULL, *b = c->b ? in[2] : NULL;
    double mean[8], var[8];
    if (c->training) bn_stats(c, x, mean, var);
    else
        for (int64_t ch = 0; ch < c->C; ch++) {
            mean[ch] = c->rm[ch];
            var[ch] = c->rv[ch];
        }
    for (int64_t i = 0; i < c->N; i++)
        for (int64_t ch = 0; ch < c->C; ch++)
            for (int64_t l = 0; l < c->L; l++) {
                int64_t k = (i * c->C + ch) * c->L + l;
                double y = (x[k] - mean[ch]) / sqrt(var[ch] + c->eps);
                if (w) y *= w[ch];
                if (b) y += b[ch];
                out[k] = y;
            }
}

static void t_batch_norm(void **state) {
    (void)state;
    test_rng r = {303};
    struct {
        int nd;
        int64_t s[4];
        bool w, b;
    } cases[] = {
        {2, {5, 3}, true, true}, {3, {4, 3, 5}, true, false}, {4, {2, 3, 2, 2}, false, true}, {3, {3, 2, 1}, false, false},
    };
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            for (int tr = 0; tr < 2; tr++) {
                int nd = cases[ci].nd;
                const int64_t *s = cases[ci].s;
                int64_t C = s[1], L = 1;
                for (int i = 2; i < nd; i++) L *= s[i];
                amp_tensor *x = tc_randn_grad(&r, dt, nd, s, 1.5, true);
                /* affine parameters and running statistics are f32 */
                amp_tensor *w = cases[ci].w ? tc_randn_grad(&r, AMP_F32, 1, &C, 1.0, true) : NULL;
                amp_tensor *b = cases[ci].b ? tc_randn_grad(&r, AMP_F32, 1, &C, 1.0, true) : NULL;
                amp_tensor *rm = tc_randn(&r, AMP_F32, 1, &C, 0.3);
                amp_tensor *rv = tc_uniform(&r, AMP_F32, 1, &C, 0.5, 1.5);
                bn_ctx c = {s[0], C, L, 1e-5, tr == 1, w != NULL, b != NULL, {0}, {0}};
                double *rmv = tc_values(rm), *rvv = tc_values(rv);
                memcpy(c.rm, rmv, sizeof(double) * (size_t)C);
                memcpy(c.rv, rvv, sizeof(double) * (size_t)C);
                amp_tensor *y = amp_batch_norm(x, rm, rv, w, b, tr == 1, 0.1, 1e-5);
                assert_non_null(y);
                assert_int_equal(amp_tensor_dtype(y), dt);
                double *xv = tc_values(x), *wv = w ? tc_values(w) : NULL, *bv = b ? tc_values(b) : NULL;
                int64_t n = s[0] * C * L;
                double *want = malloc(sizeof(double) * (size_t)n);
                const double *ins[3] = {xv, wv, bv};
                bn_ref(ins, want, &c);
                char what[80];
                snprintf(what, sizeof what, "batch_norm %s case %zu %s", amp_dtype_name(dt), ci, tr ? "train" : "eval");
                tc_assert_tensor(y, want, tc_rtol(dt, 1), dt == AMP_F32 ? 1e-5 : tc_rtol(dt, 2), what);
                /* running statistics: updated in training (unbiased variance), untouched in eval */
                double mean[8], var[8], nm[8], nv[8];
                bn_stats(&c, xv, mean, var);
                for (int64_t ch = 0; ch < C; ch++) {
                    double cnt = (double)(s[0] * L);
                    nm[ch] = tr ? 0.9 * rmv[ch] + 0.1 * mean[ch] : rmv[ch];
                    nv[ch] = tr ? 0.9 * rvv[ch] + 0.1 * var[ch] * cnt / (cnt - 1) : rvv[ch];
                }
                tc_assert_tensor(rm, nm, 1e-6, 1e-7, "running_mean");
                tc_assert_tensor(rv, nv, 1e-6, 1e-7, "running_var");
                amp_tensor *xs[3] = {x, w, b};
                tc_gradcheck(y, xs, 3, bn_ref, &c, gtol(dt, 1e-3, 20), gtol(dt, 1e-5, 10), what);
                assert_null(amp_tensor_grad(rm));
                assert_false(amp_tensor_requires_grad(rm));
                test_free_all(want, xv, wv, bv, rmv, rvv);
                test_free_tensors(y, x, w, b, rm, rv);
            }
        }
    }
}

/* Two training steps then eval, against a double reference of torch's
 * update rule (running = (1 - m) * running + m * stat, unbiased variance). */
static void t_batch_norm_running(void **state) {
    (void)state;
    test_rng r = {404};
    const int64_t s[3] = {6, 4, 3}, C = 4;
    const double m = 0.25;
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        amp_tensor *rm = amp_tensor_zeros(AMP_F32, 1, &C), *rv = amp_tensor_ones(AMP_F32, 1, &C);
        double em[4] = {0, 0, 0, 0}, ev[4] = {1, 1, 1, 1};
        bn_ctx c = {6, 4, 3, 1e-5, true, false, false, {0}, {0}};
        for (int step = 0; step < 2; step++) {
            amp_tensor *x = tc_randn_grad(&r, dt, 3, s, 2.0 + step, false);
            amp_tensor *y = amp_batch_norm(x, rm, rv, NULL, NULL, true, m, 1e-5);
            assert_non_null(y);
            double *xv = tc_values(x), mean[8], var[8];
            bn_stats(&c, xv, mean, var);
            for (int ch = 0; ch < 4; ch++) {
                em[ch] = (1 - m) * em[ch] + m * mean[ch];
                ev[ch] = (1 - m) * ev[ch] + m * var[ch] * 18.0 / 17.0;
            }
            tc_assert_tensor(rm, em, 1e-6, 1e-7, "running_mean after a step");
            tc_assert_tensor(rv, ev, 1e-6, 1e-7, "running_var after a step");
            free(xv);
            test_free_tensors(y, x);
        }
        /* eval uses the running statistics and leaves them alone */
        amp_tensor *x = tc_randn_grad(&r, dt, 3, s, 1.0, false);
        amp_tensor *y = amp_batch_norm(x, rm, rv, NULL, NULL, false, m, 1e-5);
        c.training = false;
        memcpy(c.rm, em, sizeof em);
        memcpy(c.rv, ev, sizeof ev);
        double *xv = tc_values(x), want[72];
        const double *ins[3] = {xv, NULL, NULL};
        bn_ref(ins, want, &c);
        tc_assert_tensor(y, want, tc_rtol(dt, 1), dt == AMP_F32 ? 1e-5 : tc_rtol(dt, 2), "eval batch_norm");
        tc_assert_tensor(rm, em, 1e-6, 1e-7, "running_mean unchanged by eval");
        tc_assert_tensor(rv, ev, 1e-6, 1e-7, "running_var unchanged by eval");
        free(xv);
        test_free_tensors(y, x, rm, rv);
    }
    /* issue 12 item 4: non-finite batch statistics are never stored: an
       inf in x, or finite f32 values whose variance overflows (1e30^2) */
    for (int k = 0; k < 2; k++) {
        amp_tensor *rm = amp_tensor_zeros(AMP_F32, 1, &C), *rv = amp_tensor_ones(AMP_F32, 1, &C);
        amp_tensor *xb = tc_randn_grad(&r, AMP_F32, 3, s, 1.0, false);
        amp_tensor_set(xb, AMP_SHAPE(2, 1, 1), k == 0 ? INFINITY : 1e30);
        amp_tensor *yb = amp_batch_norm(xb, rm, rv, NULL, NULL, true, m, 1e-5);
        assert_non_null(yb);
        for (int64_t ch = 0; ch < C; ch++) {
            double mv = amp_tensor_get(rm, &ch), vv = amp_tensor_get(rv, &ch);
            if (!isfinite(mv) || !isfinite(vv))
                fail_msg("%s: channel %lld running_mean %g running_var %g", k == 0 ? "inf in x" : "x = 1e30", (long long)ch, mv, vv);
        }
        test_free_tensors(yb, xb, rm, rv);
    }
    /* training without running statistics is allowed (batch statistics only) */
    amp_tensor *x = tc_randn_grad(&r, AMP_F32, 2, AMP_SHAPE(4, 2), 1.0, false);
    amp_tensor *y = amp_batch_norm(x, NULL, NULL, NULL, NULL, true, 0.1, 1e-5);
    assert_non_null(y);
    test_free_tensors(y, x);
}

/* ---- group_norm ---------------------------------------------------------------------------------- */
typedef struct {
    int64_t N, C, L, G;
    double eps;
    bool w, b;
} gn_ctx;

static void gn_ref(const double *const *in, double *out, void *vc) {
    const gn_ctx *c = vc;
    const double *x = in[0], *w = c->w ? in[1] : NULL, *b = c->b ? in[2] : NULL;
    int64_t cg = c->C / c->G, K = cg * c->L;
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t g = 0; g < c->G; g++) {
            const double *p = x + (n * c->C + g * cg) * c->L;
            double mu = 0, var = 0;
            for (int64_t k = 0; k < K; k++) mu += p[k];
            mu /= (double)K;
            for (int64_t k = 0; k < K; k++) var += (p[k] - mu) * (p[k] - mu);
            var /= (double)K;
            for (int64_t k = 0; k < K; k++) {
                int64_t ch = g * cg + k / c->L;
                double y = (p[k] - mu) / sqrt(var + c->eps);
                if (w) y *= w[ch];
                if (b) y += b[ch];
                out[(n * c->C + g * cg) * c->L + k] = y;
            }
        }
}


/* batch_norm's backward on a half x or dy (rows read as stored, a half x's
 * gradient written in its dtype) gives the bits of the f32 computation on
 * the widened tensors, with the x gradient rounded once: f16 and bf16, with
 * and without weight, training and eval, N x C x L shapes including rows at
 * AMP_K_NORM_ROW_MAX and a longer one (the f32 route). */
static void t_batch_norm_half_backward(void **state) {
    (void)state;
    test_rng r = {0xb0a};
    static const int64_t shapes[][3] = {{8, 5, 49}, {2, 3, 2048}, {3, 2, 2100}, {64, 16, 1}};
    for (int d = 0; d < 2; d++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int mode = 0; mode < 4; mode++) {
                amp_scope *sc = amp_scope_begin();
                const amp_dtype dt = d ? AMP_BF16 : AMP_F16;
                const bool training = mode & 1, affine = mode & 2;
                const int64_t N = shapes[si][0], C = shapes[si][1], L = shapes[si][2];
                const int64_t sh[3] = {N, C, L};
                amp_tensor *x32 = amp_tensor_empty(AMP_F32, 3, sh), *g32 = amp_tensor_empty(AMP_F32, 3, sh);
                float *px = amp_tensor_data(x32), *pg = amp_tensor_data(g32);
                for (int64_t i = 0; i < N * C * L; i++) {
                    px[i] = (float)test_rng_normal(&r) * 2.0f + 0.5f;
                    pg[i] = (float)test_rng_normal(&r);
                }
                amp_tensor *xh = amp_to(x32, dt), *gh = amp_to(g32, dt);
                amp_tensor *xa = amp_to(xh, AMP_F32), *ga = amp_to(gh, AMP_F32); /* the widened values */
                amp_tensor *xs[2] = {amp_clone(xh), amp_clone(xa)};
                amp_tensor *ws[2] = {NULL, NULL}, *bs[2] = {NULL, NULL};
                for (int k = 0; k < 2; k++) {
                    assert_int_equal(amp_tensor_set_requires_grad(xs[k], true), AMP_OK);
                    if (affine) {
                        ws[k] = amp_tensor_uniform(AMP_F32, 1, &C, 0.5, 1.5, NULL);
                        bs[k] = amp_tensor_uniform(AMP_F32, 1, &C, -0.5, 0.5, NULL);
                        if (k) {
                            memcpy(amp_tensor_data(ws[1]), amp_tensor_data(ws[0]), sizeof(float) * (size_t)C);
                            memcpy(amp_tensor_data(bs[1]), amp_tensor_data(bs[0]), sizeof(float) * (size_t)C);
                        }
                        amp_tensor_set_requires_grad(ws[k], true);
                        amp_tensor_set_requires_grad(bs[k], true);
                    }
                }
                amp_tensor *rm[2], *rv[2];
                for (int k = 0; k < 2; k++) {
                    rm[k] = amp_tensor_zeros(AMP_F32, 1, &C);
                    rv[k] = amp_tensor_ones(AMP_F32, 1, &C);
                }
                amp_tensor *y0 = amp_batch_norm(xs[0], rm[0], rv[0], ws[0], bs[0], training, 0.1, 1e-5);
                amp_tensor *y1 = amp_batch_norm(xs[1], rm[1], rv[1], ws[1], bs[1], training, 0.1, 1e-5);
                assert_non_null(y0);
                assert_non_null(y1);
                assert_int_equal(amp_backward_ex(y0, amp_tensor_dtype(y0) == dt ? gh : ga, false), AMP_OK);
                assert_int_equal(amp_backward_ex(y1, ga, false), AMP_OK);
                /* dx: the f32 route's gradient rounded to dt */
                amp_tensor *want = amp_to(amp_tensor_grad(xs[1]), dt);
                const amp_tensor *got = amp_tensor_grad(xs[0]);
                assert_int_equal(amp_tensor_dtype(got), dt);
                if (memcmp(amp_tensor_data(got), amp_tensor_data(want), (size_t)(N * C * L) * 2) != 0)
                    fail_msg("batch_norm half backward %s N%lld C%lld L%lld mode %d: dx differs from the f32 route",
                             amp_dtype_name(dt), (long long)N, (long long)C, (long long)L, mode);
                if (affine) {
                    assert_memory_equal(amp_tensor_data(amp_tensor_grad(ws[0])), amp_tensor_data(amp_tensor_grad(ws[1])),
                                        sizeof(float) * (size_t)C);
                    assert_memory_equal(amp_tensor_data(amp_tensor_grad(bs[0])), amp_tensor_data(amp_tensor_grad(bs[1])),
                                        sizeof(float) * (size_t)C);
                }
                amp_scope_end(sc);
            }
}

static void t_group_norm(void **state) {
    (void)state;
    test_rng r = {505};
    struct {
        int nd;
        int64_t s[4];
        int64_t G;
        bool w, b;
    } cases[] = {
        {3, {2, 6, 3}, 3, true, true}, {3, {2, 6, 3}, 1, false, true}, {3, {2, 6, 3}, 6, true, false},
        {2, {3, 4}, 2, true, true},    {4, {1, 4, 2, 2}, 2, false, false},
    };
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            int nd = cases[ci].nd;
            const int64_t *s = cases[ci].s;
            int64_t C = s[1], L = 1;
            for (int i = 2; i < nd; i++) L *= s[i];
            amp_tensor *x = tc_randn_grad(&r, dt, nd, s, 2.0, true);
            amp_tensor *w = cases[ci].w ? tc_randn_grad(&r, dt, 1, &C, 1.0, true) : NULL;
            amp_tensor *b = cases[ci].b ? tc_randn_grad(&r, dt, 1, &C, 1.0, true) : NULL;
            amp_tensor *y = amp_group_norm(x, cases[ci].G, w, b, 1e-5);
            assert_non_null(y);
            assert_int_equal(amp_tensor_dtype(y), dt);
            gn_ctx c = {s[0], C, L, cases[ci].G, 1e-5, w != NULL, b != NULL};
            double *xv = tc_values(x), *wv = w ? tc_values(w) : NULL, *bv = b ? tc_values(b) : NULL;
            double want[64];
            const double *ins[3] = {xv, wv, bv};
            gn_ref(ins, want, &c);
            char what[64];
            snprintf(what, sizeof what, "group_norm %s case %zu", amp_dtype_name(dt), ci);
            tc_assert_tensor(y, want, tc_rtol(dt, 1), dt == AMP_F32 ? 1e-5 : tc_rtol(dt, 2), what);
            amp_tensor *xs[3] = {x, w, b};
            tc_gradcheck(y, xs, 3, gn_ref, &c, gtol(dt, 1e-3, 20), gtol(dt, 1e-5, 10), what);
            test_free_all(xv, wv, bv);
            test_free_tensors(y, x, w, b);
        }
    }
}

/* ---- embedding ------------------------------------------------------------------------------------ */
typedef struct {
    int64_t V, D, n;
    const int64_t *idx;
} emb_ctx;

static void emb_ref(const double *const *in, double *out, void *vc) {
    const emb_ctx *c = vc;
    for (int64_t i = 0; i < c->n; i++)
        for (int64_t d = 0; d < c->D; d++) out[i * c->D + d] = in[0][c->idx[i] * c->D + d];
}

static void t_embedding(void **state) {
    (void)state;
    test_rng r = {606};
    const int64_t ws[2] = {7, 3};
    const int64_t idx[6] = {1, 6, 1, 0, 1, 3}; /* repeats: gradients accumulate */
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        for (int it = 0; it < 2; it++) {
            amp_dtype idt = it ? AMP_I32 : AMP_I64;
            amp_tensor *w = tc_randn_grad(&r, dt, 2, ws, 1.0, true);
            amp_tensor *ii = amp_tensor_empty(idt, 2, AMP_SHAPE(2, 3));
            for (int k = 0; k < 6; k++) amp_tensor_set(ii, (int64_t[]){k / 3, k % 3}, (double)idx[k]);
            amp_tensor *y = amp_embedding(w, ii);
            tc_assert_shape(y, 3, AMP_SHAPE(2, 3, 3), "embedding shape");
            assert_int_equal(amp_tensor_dtype(y), dt);
            emb_ctx c = {7, 3, 6, idx};
            double *wv = tc_values(w), want[18];
            const double *ins[1] = {wv};
            emb_ref(ins, want, &c);
            tc_assert_tensor(y, want, 0, 0, "embedding rows (exact)");
            amp_tensor *xs[1] = {w};
            tc_gradcheck(y, xs, 1, emb_ref, &c, gtol(dt, 1e-6, 2), gtol(dt, 1e-6, 2), "embedding grad");
            free(wv);
            test_free_tensors(y, ii, w);
        }
    }
    /* 0-d index -> [D]; empty index -> [0, D]; a transposed weight */
    amp_tensor *w = tc_randn_grad(&r, AMP_F32, 2, AMP_SHAPE(3, 5), 1.0, false);
    amp_tensor *wt = amp_transpose(w, 0, 1); /* [5,3] non-contiguous */
    amp_tensor *i0 = amp_tensor_full(AMP_I64, 0, NULL, 4);
    amp_tensor *y0 = amp_embedding(wt, i0);
    tc_assert_shape(y0, 1, AMP_SHAPE(3), "embedding of a 0-d index");
    double *wv = tc_values(w);
    double want[3] = {wv[4], wv[9], wv[14]};
    tc_assert_tensor(y0, want, 0, 0, "embedding of a transposed weight");
    amp_tensor *ie = amp_tensor_empty(AMP_I32, 1, AMP_SHAPE(0));
    amp_tensor *ye = amp_embedding(w, ie);
    tc_assert_shape(ye, 2, AMP_SHAPE(0, 5), "embedding of no indices");
    /* out of range: clear errors */
    amp_tensor *bad = amp_tensor_full(AMP_I64, 1, AMP_SHAPE(2), 3);
    tc_assert_fails(amp_embedding(w, bad), "amp_embedding: index 3 (element 0 of indices) is out of range");
    amp_tensor_set(bad, (int64_t[]){0}, 1);
    amp_tensor_set(bad, (int64_t[]){1}, -1);
    tc_assert_fails(amp_embedding(w, bad), "amp_embedding: index -1 (element 1");
    free(wv);
    test_free_tensors(bad, ye, ie, y0, i0, wt, w);
}

/* ---- PyTorch golden data ------------------------------------------------------------------------ */
static amp_tensor *grec(golden_file *g, const char *name, bool rg) {
    amp_tensor *t = golden_tensor(g, name);
    if (rg) amp_tensor_set_requires_grad(t, true);
    return t;
}

static void gsm(golden_file *g, const char *cs, const char *xn, int dim, bool log) {
    amp_tensor *x = grec(g, xn, true);
    amp_tensor *y = log ? amp_log_softmax(x, dim) : amp_softmax(x, dim);
    golden_assert_out_gx(g, cs, y, x, 1e-5, 1e-6);
    test_free_tensors(y, x);
}

static void t_golden(void **state) {
    (void)state;
    golden_file *g = golden_open("golden_reduce_norm_loss.bin");
    gsm(g, "softmax", "softmax/x", 1, false);
    gsm(g, "log_softmax0", "softmax/x", 0, true);
    gsm(g, "softmax3", "softmax3/x", 1, false);
    gsm(g, "log_softmax3", "softmax3/x", -1, true);
    {
        amp_tensor *x = grec(g, "softmax/x", false);
        amp_tensor *xb = amp_to(x, AMP_BF16);
        amp_tensor *y = amp_softmax(xb, 1);
        assert_int_equal(amp_tensor_dtype(y), AMP_BF16);
        golden_assert(g, "softmax_bf16/out", y, 8e-3, 1e-6); /* one bf16 rounding */
        test_free_tensors(y, xb, x);
    }
    /* layer norm */
    {
        amp_tensor *x = grec(g, "layer_norm/x", true), *w = grec(g, "layer_norm/w", true), *b = grec(g, "layer_norm/b", true);
        amp_tensor *y = amp_layer_norm(x, 1, w, b, 1e-5);
        golden_assert(g, "layer_norm/out", y, 1e-5, 1e-5);
        golden_backward(g, "layer_norm", y);
        golden_assert(g, "layer_norm/gx", amp_tensor_grad(x), 1e-4, 1e-5);
        golden_assert(g, "layer_norm/gw", amp_tensor_grad(w), 1e-5, 1e-5);
        golden_assert(g, "layer_norm/gb", amp_tensor_grad(b), 1e-5, 1e-5);
        amp_tensor_free(y);
        amp_tensor *xb = amp_to(x, AMP_BF16), *wb = amp_to(w, AMP_BF16), *bb = amp_to(b, AMP_BF16);
        amp_tensor *yb = amp_layer_norm(xb, 1, wb, bb, 1e-5);
        assert_int_equal(amp_tensor_dtype(yb), AMP_BF16);
        golden_assert(g, "layer_norm_bf16/out", yb, 2e-2, 2e-2); /* torch rounds intermediates to bf16 too */
        test_free_tensors(yb, xb, wb, bb, x, w, b);
        x = grec(g, "layer_norm2/x", true);
        y = amp_layer_norm(x, 2, NULL, NULL, 1e-3);
        golden_assert(g, "layer_norm2/out", y, 1e-5, 1e-5);
        golden_backward(g, "layer_norm2", y);
        golden_assert(g, "layer_norm2/gx", amp_tensor_grad(x), 1e-4, 1e-5);
        test_free_tensors(y, x);
    }
    /* batch norm: training (with the running-stat update), eval, 1-d */
    for (int ev = 0; ev < 2; ev++) {
        const char *cs = ev ? "batch_norm_eval" : "batch_norm";
        amp_tensor *x = grec(g, "batch_norm/x", true), *w = grec(g, "batch_norm/w", true), *b = grec(g, "batch_norm/b", true);
        amp_tensor *rm = grec(g, "batch_norm/rm", false), *rv = grec(g, "batch_norm/rv", false);
        amp_tensor *y = amp_batch_norm(x, rm, rv, w, b, !ev, 0.1, 1e-5);
        char nm[96];
        snprintf(nm, sizeof nm, "%s/out", cs);
        golden_assert(g, nm, y, 1e-5, 1e-5);
        if (!ev) {
            golden_assert(g, "batch_norm/rm_after", rm, 1e-6, 1e-7);
            golden_assert(g, "batch_norm/rv_after", rv, 1e-6, 1e-7);
        }
        golden_backward(g, cs, y);
        snprintf(nm, sizeof nm, "%s/gx", cs);
        golden_assert(g, nm, amp_tensor_grad(x), 1e-4, 1e-5);
        snprintf(nm, sizeof nm, "%s/gw", cs);
        golden_assert(g, nm, amp_tensor_grad(w), 1e-5, 1e-5);
        snprintf(nm, sizeof nm, "%s/gb", cs);
        golden_assert(g, nm, amp_tensor_grad(b), 1e-5, 1e-5);
        test_free_tensors(y, x, w, b, rm, rv);
    }
    {
        amp_tensor *x = grec(g, "batch_norm1d/x", true);
        amp_tensor *rm = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(3)), *rv = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(3));
        amp_tensor *y = amp_batch_norm(x, rm, rv, NULL, NULL, true, 0.3, 1e-5);
        golden_assert(g, "batch_norm1d/out", y, 1e-5, 1e-5);
        golden_assert(g, "batch_norm1d/rm_after", rm, 1e-6, 1e-7);
        golden_assert(g, "batch_norm1d/rv_after", rv, 1e-6, 1e-7);
        golden_backward(g, "batch_norm1d", y);
        golden_assert(g, "batch_norm1d/gx", amp_tensor_grad(x), 1e-4, 1e-5);
        test_free_tensors(y, x, rm, rv);
    }
    /* group norm */
    {
        amp_tensor *x = grec(g, "group_norm/x", true), *w = grec(g, "group_norm/w", true), *b = grec(g, "group_norm/b", true);
        amp_tensor *y = amp_group_norm(x, 3, w, b, 1e-5);
        golden_assert(g, "group_norm/out", y, 1e-5, 1e-5);
        golden_backward(g, "group_norm", y);
        golden_assert(g, "group_norm/gx", amp_tensor_grad(x), 1e-4, 1e-5);
        golden_assert(g, "group_norm/gw", amp_tensor_grad(w), 1e-5, 1e-5);
        golden_assert(g, "group_norm/gb", amp_tensor_grad(b), 1e-5, 1e-5);
        test_free_tensors(y, x, w, b);
    }
    /* embedding */
    {
        amp_tensor *w = grec(g, "embedding/w", true), *ii = grec(g, "embedding/idx", false);
        amp_tensor *y = amp_embedding(w, ii);
        golden_assert(g, "embedding/out", y, 0, 0);
        golden_backward(g, "embedding", y);
        golden_assert(g, "embedding/gw", amp_tensor_grad(w), 1e-6, 1e-7);
        test_free_tensors(y, w, ii);
    }
    golden_close(g);
}

/* ---- bad input ------------------------------------------------------------------------------------ */
static void t_bad_inputs(void **state) {
    (void)state;
    amp_tensor *x = amp_tensor_ones(AMP_F32, 3, AMP_SHAPE(2, 3, 4));
    amp_tensor *xi = amp_tensor_ones(AMP_I64, 3, AMP_SHAPE(2, 3, 4));
    amp_tensor *x1 = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(3));
    amp_tensor *w3 = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(3)), *w4 = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(4));
    amp_tensor *w5 = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(5)), *wi = amp_tensor_ones(AMP_I32, 1, AMP_SHAPE(4));
    amp_tensor *emb = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(5, 2)), *ids = amp_tensor_zeros(AMP_I64, 1, AMP_SHAPE(3));
    amp_tensor *fids = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(3));
    /* softmax / log_softmax */
    tc_assert_fails(amp_softmax(NULL, 0), "amp_softmax");
    tc_assert_fails(amp_log_softmax(NULL, 0), "amp_log_softmax");
    tc_assert_fails(amp_softmax(xi, 0), "amp_softmax: x has dtype i64");
    tc_assert_fails(amp_log_softmax(xi, 0), "amp_log_softmax: x has dtype i64");
    tc_assert_fails(amp_softmax(x, 3), "amp_softmax: dim 3 is out of range for a 3-d tensor");
    tc_assert_fails(amp_log_softmax(x, -4), "amp_log_softmax: dim -4");
    /* layer_norm */
    tc_assert_fails(amp_layer_norm(NULL, 1, NULL, NULL, 1e-5), "amp_layer_norm");
    tc_assert_fails(amp_layer_norm(xi, 1, NULL, NULL, 1e-5), "amp_layer_norm: x has dtype i64");
    tc_assert_fails(amp_layer_norm(x, 4, NULL, NULL, 1e-5), "amp_layer_norm: normalized_ndim 4 must be in [1, 3]");
    tc_assert_fails(amp_layer_norm(x, 0, NULL, NULL, 1e-5), "amp_layer_norm: normalized_ndim 0");
    tc_assert_fails(amp_layer_norm(x, 1, w3, NULL, 1e-5), "amp_layer_norm: weight has shape [3]; expected [4]");
    tc_assert_fails(amp_layer_norm(x, 1, NULL, w5, 1e-5), "amp_layer_norm: bias has shape [5]");
    tc_assert_fails(amp_layer_norm(x, 1, wi, NULL, 1e-5), "amp_layer_norm: weight has dtype i32");
    tc_assert_fails(amp_layer_norm(x, 1, NULL, NULL, -1), "amp_layer_norm: eps");
    /* batch_norm */
    tc_assert_fails(amp_batch_norm(NULL, NULL, NULL, NULL, NULL, true, 0.1, 1e-5), "amp_batch_norm");
    tc_assert_fails(amp_batch_norm(xi, NULL, NULL, NULL, NULL, true, 0.1, 1e-5), "amp_batch_norm: x has dtype i64");
    tc_assert_fails(amp_batch_norm(x1, NULL, NULL, NULL, NULL, true, 0.1, 1e-5), "amp_batch_norm: x must have 2 to 8 dims");
    tc_assert_fails(amp_batch_norm(x, NULL, NULL, w4, NULL, true, 0.1, 1e-5), "amp_batch_norm: weight has shape [4]; expected [3]");
    tc_assert_fails(amp_batch_norm(x, w4, w3, NULL, NULL, true, 0.1, 1e-5), "amp_batch_norm: running_mean has shape [4]");
    tc_assert_fails(amp_batch_norm(x, w3, NULL, NULL, NULL, true, 0.1, 1e-5), "amp_batch_norm: running_mean and running_var");
    tc_assert_fails(amp_batch_norm(x, NULL, NULL, NULL, NULL, false, 0.1, 1e-5), "amp_batch_norm: running_mean and running_var are required in eval");
    tc_assert_fails(amp_batch_norm(x, NULL, NULL, NULL, wi, true, 0.1, 1e-5), "amp_batch_norm: bias has dtype i32");
    amp_tensor *one = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(1, 3));
    tc_assert_fails(amp_batch_norm(one, NULL, NULL, NULL, NULL, true, 0.1, 1e-5), "amp_batch_norm: expected more than 1 value per channel");
    amp_tensor_free(one);
    /* group_norm */
    tc_assert_fails(amp_group_norm(NULL, 1, NULL, NULL, 1e-5), "amp_group_norm");
    tc_assert_fails(amp_group_norm(xi, 1, NULL, NULL, 1e-5), "amp_group_norm: x has dtype i64");
    tc_assert_fails(amp_group_norm(x1, 1, NULL, NULL, 1e-5), "amp_group_norm: x must have 2 to 8 dims");
    tc_assert_fails(amp_group_norm(x, 2, NULL, NULL, 1e-5), "amp_group_norm: groups 2 must be positive and divide the 3 channels");
    tc_assert_fails(amp_group_norm(x, 0, NULL, NULL, 1e-5), "amp_group_norm: groups 0");
    tc_assert_fails(amp_group_norm(x, 3, w4, NULL, 1e-5), "amp_group_norm: weight has shape [4]; expected [3]");
    /* embedding */
    tc_assert_fails(amp_embedding(NULL, ids), "amp_embedding: weight is NULL");
    tc_assert_fails(amp_embedding(emb, NULL), "amp_embedding: indices is NULL");
    tc_assert_fails(amp_embedding(emb, fids), "amp_embedding: indices has dtype f32; expected i64 or i32");
    tc_assert_fails(amp_embedding(xi, ids), "amp_embedding: weight has dtype i64");
    tc_assert_fails(amp_embedding(x, ids), "amp_embedding: weight must be 2-d, got shape [2,3,4]");
    amp_tensor *t8 = amp_tensor_zeros(AMP_I64, 8, AMP_SHAPE(1, 1, 1, 1, 1, 1, 1, 1));
    tc_assert_fails(amp_embedding(emb, t8), "amp_embedding: indices have 8 dims");
    amp_tensor_free(t8);
    amp_tensor *arr[] = {x, xi, x1, w3, w4, w5, wi, emb, ids, fids};
    for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++) amp_tensor_free(arr[i]);
}

AMP_TEST_MAIN(t_softmax, t_softmax_extreme, t_layer_norm, t_batch_norm, t_batch_norm_running,
              t_batch_norm_half_backward, t_group_norm, t_embedding, t_golden, t_bad_inputs)

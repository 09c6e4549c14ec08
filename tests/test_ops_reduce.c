/* Reductions: sum, mean, prod, cumsum, max, norm. Each × f32/f16/bf16:
 * forward against float64 reference loops written here, backward against
 * central differences of them, PyTorch golden data
 * (tools/golden/gen_reduce_norm_loss.py), torch's edge cases (empty tensors,
 * keepdim, negative dims, 0-d tensors, ties, NaN), large half sums that naive
 * half accumulation would get badly wrong, and a bad-input walk.
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

/* ---- float64 references ---------------------------------------------------------------- */
enum { K_SUM, K_MEAN, K_NORM, K_PROD, K_CUMSUM, K_MAX };

typedef struct {
    int kind;
    int nd;
    int64_t shape[8];
    bool red[8]; /* multi-dim reductions */
    int dim;     /* single-dim ops */
    double p;
} rctx;

/* flat input index -> flat index in the (keepdim) reduced output */
static int64_t red_index(const rctx *c, int64_t flat) {
    int64_t idx[8];
    for (int i = c->nd - 1; i >= 0; i--) {
        idx[i] = flat % c->shape[i];
        flat /= c->shape[i];
    }
    int64_t o = 0;
    for (int i = 0; i < c->nd; i++)
        if (!c->red[i]) o = o * c->shape[i] + idx[i];
    return o;
}

static int64_t red_out_numel(const rctx *c) {
    int64_t n = 1;
    for (int i = 0; i < c->nd; i++)
        if (!c->red[i]) n *= c->shape[i];
    return n;
}

static void split(const rctx *c, int64_t *outer, int64_t *len, int64_t *inner) {
    *outer = *len = *inner = 1;
    for (int i = 0; i < c->nd; i++) {
        if (i < c->dim) *outer *= c->shape[i];
        else if (i == c->dim) *len = c->shape[i];
        else *inner *= c->shape[i];
    }
}

static void ref(const double *const *in, double *out, void *vc) {
    const rctx *c = vc;
    const double *x = in[0];
    int64_t n = tc_numel(c->nd, c->shape);
    if (c->kind <= K_NORM) {
        int64_t on = red_out_numel(c);
        double cnt = (double)n / (double)(on ? on : 1);
        bool inf = isinf(c->p);
        for (int64_t k = 0; k < on; k++) out[k] = inf ? -INFINITY : 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t k = red_index(c, i);
            if (c->kind != K_NORM) out[k] += x[i];
            else if (inf) out[k] = fmax(out[k], c->p > 0 ? fabs(x[i]) : -fabs(x[i]));
            else if (c->p == 0) out[k] += x[i] != 0;
            else out[k] += pow(fabs(x[i]), c->p);
        }
        for (int64_t k = 0; k < on; k++) {
            if (c->kind == K_MEAN) out[k] /= cnt;
            if (c->kind == K_NORM) {
                if (inf) out[k] = c->p > 0 ? out[k] : -out[k];
                else if (c->p != 0) out[k] = pow(out[k], 1.0 / c->p);
            }
        }
        return;
    }
    int64_t outer, len, inner;
    split(c, &outer, &len, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double acc = c->kind == K_PROD ? 1 : c->kind == K_MAX ? -INFINITY : 0;
            for (int64_t l = 0; l < len; l++) {
                double v = x[(o * len + l) * inner + i];
                if (c->kind == K_PROD) acc *= v;
                else if (c->kind == K_MAX) acc = v > acc ? v : acc;
                else {
                    acc += v;
                    out[(o * len + l) * inner + i] = acc;
                }
            }
            if (c->kind != K_CUMSUM) out[o * inner + i] = acc;
        }
}

/* Compare out with ref; tolerance scaled by the sum of |terms| for sums. */
static void check_fwd(const amp_tensor *out, amp_tensor *x, rctx *c, double rtol, double atol, const char *what) {
    double *xv = tc_values(x);
    int64_t on = amp_tensor_numel(out);
    double *want = calloc((size_t)(tc_numel(c->nd, c->shape) + 1), sizeof(double));
    const double *ins[1] = {xv};
    ref(ins, want, c);
    tc_assert_tensor(out, want, rtol, atol, what);
    (void)on;
    test_free_all(want, xv);
}

static double gtol(amp_dtype dt, double f32) { return dt == AMP_F32 ? f32 : tc_rtol(dt, 6); }

/* ---- sum / mean --------------------------------------------------------------------------- */
typedef struct {
    int dims[3];
    int ndims;
    bool keepdim;
} dimcase;

static void t_sum_mean(void **state) {
    (void)state;
    test_rng r = {11};
    const int64_t s[3] = {3, 4, 5};
    const dimcase cases[] = {
        {{0, 2}, 2, false}, {{1}, 1, true}, {{-1}, 1, false}, {{0}, 0, false}, {{0}, 0, true}, {{2, 0, 1}, 3, false},
        {{-2, 2}, 2, true},
    };
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            const dimcase *dc = &cases[ci];
            for (int kind = K_SUM; kind <= K_MEAN; kind++) {
                amp_tensor *x = tc_randn_grad(&r, dt, 3, s, 1.0, true);
                amp_tensor *out = kind == K_SUM ? amp_sum(x, dc->ndims ? dc->dims : NULL, dc->ndims, dc->keepdim)
                                                : amp_mean(x, dc->ndims ? dc->dims : NULL, dc->ndims, dc->keepdim);
                assert_non_null(out);
                assert_int_equal(amp_tensor_dtype(out), dt);
                rctx c = {kind, 3, {3, 4, 5}, {0}, 0, 0};
                for (int k = 0; k < dc->ndims; k++) c.red[(dc->dims[k] + 3) % 3] = true;
                if (dc->ndims == 0) c.red[0] = c.red[1] = c.red[2] = true;
                int64_t es[3];
                int end = 0;
                for (int i = 0; i < 3; i++)
                    if (!c.red[i]) es[end++] = s[i];
                    else if (dc->keepdim) es[end++] = 1;
                tc_assert_shape(out, end, es, "sum/mean shape");
                char what[96];
                snprintf(what, sizeof what, "%s %s case %zu", kind == K_SUM ? "sum" : "mean", amp_dtype_name(dt), ci);
                check_fwd(out, x, &c, tc_rtol(dt, 1), dt == AMP_F32 ? 1e-5 : tc_rtol(dt, 4), what);
                amp_tensor *ins[1] = {x};
                tc_gradcheck(out, ins, 1, ref, &c, gtol(dt, 1e-4), gtol(dt, 1e-5), what);
                test_free_tensors(out, x);
            }
        }
    }
}

static void t_sum_edges(void **state) {
    (void)state;
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        /* empty: sum over the empty dim gives zeros, mean gives NaN (0/0) */
        amp_tensor *e = amp_tensor_zeros(dt, 2, AMP_SHAPE(0, 3));
        int d0[1] = {0}, d1[1] = {1};
        amp_tensor *s0 = amp_sum(e, d0, 1, false);
        tc_assert_shape(s0, 1, AMP_SHAPE(3), "sum of [0,3] over dim 0");
        double z[3] = {0, 0, 0}, nan3[3] = {NAN, NAN, NAN};
        tc_assert_tensor(s0, z, 0, 0, "sum of empty");
        amp_tensor *m0 = amp_mean(e, d0, 1, true);
        tc_assert_shape(m0, 2, AMP_SHAPE(1, 3), "mean keepdim");
        tc_assert_tensor(m0, nan3, 0, 0, "mean of empty is NaN");
        amp_tensor *s1 = amp_sum(e, d1, 1, false);
        tc_assert_shape(s1, 1, AMP_SHAPE(0), "sum of [0,3] over dim 1");
        amp_tensor *sa = amp_sum(e, NULL, 0, false);
        tc_assert_shape(sa, 0, NULL, "sum of everything is 0-d");
        assert_true(amp_tensor_item(sa) == 0.0);
        amp_tensor *ma = amp_mean(e, NULL, 0, false);
        assert_true(isnan(amp_tensor_item(ma)));
        test_free_tensors(s0, m0, s1, sa, ma, e);

        /* 0-d: dim 0 and -1 are accepted; the value is kept */
        amp_tensor *sc = amp_tensor_full(dt, 0, NULL, 2.5);
        int dm1[1] = {-1};
        amp_tensor *ss = amp_sum(sc, dm1, 1, true);
        tc_assert_shape(ss, 0, NULL, "sum of 0-d");
        assert_true(amp_tensor_item(ss) == 2.5);
        amp_tensor *ms = amp_mean(sc, NULL, 0, false);
        assert_true(amp_tensor_item(ms) == 2.5);
        test_free_tensors(ss, ms, sc);

        /* a non-contiguous input (transposed view), reduced over a size-1 dim too */
        test_rng r = {5 + (uint64_t)di};
        amp_tensor *x = tc_randn_grad(&r, dt, 3, AMP_SHAPE(4, 1, 6), 1.0, false);
        amp_tensor *xt = amp_transpose(x, 0, 2); /* [6,1,4] */
        int dd[2] = {1, 2};
        amp_tensor *st = amp_sum(xt, dd, 2, false);
        tc_assert_shape(st, 1, AMP_SHAPE(6), "sum of transposed");
        double *xv = tc_values(x), want[6];
        for (int j = 0; j < 6; j++) {
            want[j] = 0;
            for (int i = 0; i < 4; i++) want[j] += xv[i * 6 + j];
        }
        tc_assert_tensor(st, want, tc_rtol(dt, 1), tc_rtol(dt, 2), "sum of transposed");
        int one[1] = {1};
        amp_tensor *s1d = amp_sum(x, one, 1, false); /* only a size-1 dim: a copy */
        tc_assert_shape(s1d, 2, AMP_SHAPE(4, 6), "sum over a size-1 dim");
        tc_assert_tensor(s1d, xv, 0, 0, "sum over a size-1 dim is exact");
        free(xv);
        test_free_tensors(s1d, st, xt, x);
    }
}

/* 2^20 half values: naive f16 accumulation stalls near 256 (the ulp there
 * exceeds the addends); amp accumulates in f32 blocks added in double. */
static void t_sum_large(void **state) {
    (void)state;
    const int64_t n = (int64_t)1 << 20;
    double *v = malloc(sizeof(double) * (size_t)n);
    test_rng r = {77};
    for (int di = 1; di < 3; di++) {
        amp_dtype dt = DTS[di];
        double hi = dt == AMP_F16 ? 0.1 : 1.0; /* keep the f16 total below 65504 */
        for (int64_t i = 0; i < n; i++) v[i] = test_rng_range(&r, 0, hi);
        amp_tensor *x = tc_from_values(dt, 1, &n, v);
        double *xv = tc_values(x), want = 0, part = 0;
        for (int64_t i = 0; i < n; i++) want += xv[i];
        /* what accumulating in the half type itself would give (first 10^5) */
        amp_tensor *acc = amp_tensor_zeros(dt, 0, NULL);
        for (int64_t i = 0; i < 100000; i++) {
            part += xv[i];
            amp_tensor_set(acc, NULL, amp_tensor_item(acc) + xv[i]);
        }
        double naive = amp_tensor_item(acc);
        amp_tensor_free(acc);
        assert_true(fabs(naive - part) > 0.5 * part); /* the naive sum is badly wrong */
        amp_tensor *s = amp_sum(x, NULL, 0, false);
        assert_int_equal(amp_tensor_dtype(s), dt);
        assert_close(amp_tensor_item(s), want, tc_rtol(dt, 1), 0, "large half sum");
        amp_tensor *m = amp_mean(x, NULL, 0, false);
        assert_close(amp_tensor_item(m), want / (double)n, tc_rtol(dt, 1), 0, "large half mean");
        /* under autocast sum is on the fp32 list: f32 output, f32 accuracy */
        amp_autocast_enter(dt);
        amp_tensor *s32 = amp_sum(x, NULL, 0, false);
        amp_autocast_exit();
        assert_int_equal(amp_tensor_dtype(s32), AMP_F32);
        assert_close(amp_tensor_item(s32), want, 2e-7, 0, "large half sum, autocast f32");
        /* the same values as [2^14, 64] summed over dim 0 (a strided reduction) */
        amp_tensor *x2 = amp_reshape(x, 2, AMP_SHAPE((int64_t)1 << 14, 64));
        int d0[1] = {0};
        amp_tensor *c = amp_sum(x2, d0, 1, false);
        double w64[64] = {0};
        for (int64_t i = 0; i < n; i++) w64[i % 64] += xv[i];
        tc_assert_tensor(c, w64, tc_rtol(dt, 1), 0, "large column sums");
        free(xv);
        test_free_tensors(c, x2, s32, m, s, x);
    }
    /* f32: 3M values in [0, 1): relative error at f32 level */
    const int64_t n3 = 3 * ((int64_t)1 << 20);
    float *f = malloc(sizeof(float) * (size_t)n3);
    double want = 0;
    for (int64_t i = 0; i < n3; i++) {
        f[i] = (float)test_rng_uniform(&r);
        want += f[i];
    }
    amp_tensor *x = amp_tensor_borrow(f, AMP_F32, 1, &n3);
    amp_tensor *s = amp_sum(x, NULL, 0, false);
    assert_close(amp_tensor_item(s), want, 2e-7, 0, "large f32 sum");
    /* the result does not depend on the number of threads (bitwise) */
    int nt = amp_get_num_threads();
    amp_tensor *xr = amp_reshape(x, 2, AMP_SHAPE(3072, 1024));
    int d0[1] = {0};
    amp_tensor *c1 = amp_sum(xr, d0, 1, false);
    for (int threads = 1; threads <= 3; threads += 2) {
        amp_set_num_threads(threads);
        amp_tensor *s2 = amp_sum(x, NULL, 0, false), *c2 = amp_sum(xr, d0, 1, false);
        assert_true(amp_tensor_item(s2) == amp_tensor_item(s));
        double *a = tc_values(c1), *b = tc_values(c2);
        assert_memory_equal(a, b, 1024 * sizeof(double));
        test_free_all(a, b);
        test_free_tensors(s2, c2);
    }
    amp_set_num_threads(nt);
    test_free_tensors(c1, xr, s, x);
    test_free_all(f, v);
}

/* ---- prod / cumsum / max ---------------------------------------------------------------- */
static void t_prod(void **state) {
    (void)state;
    test_rng r = {21};
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        const int64_t s[3] = {3, 5, 4};
        for (int dim = -3; dim < 3; dim++) {
            double v[60];
            for (int i = 0; i < 60; i++) v[i] = test_rng_range(&r, 0.5, 1.5) * (i % 3 ? 1 : -1);
            /* zeros: a line with one zero and a line with two (dim-independent
             * positions chosen so some lines hit both cases) */
            v[7] = 0;
            v[27] = 0;
            v[31] = 0;
            v[35] = 0;
            amp_tensor *x = tc_from_values(dt, 3, s, v);
            amp_tensor_set_requires_grad(x, true);
            bool keep = dim % 2 == 0;
            amp_tensor *out = amp_prod(x, dim, keep);
            assert_non_null(out);
            rctx c = {K_PROD, 3, {3, 5, 4}, {0}, (dim + 3) % 3, 0};
            char what[64];
            snprintf(what, sizeof what, "prod %s dim %d", amp_dtype_name(dt), dim);
            check_fwd(out, x, &c, tc_rtol(dt, 1), 1e-7, what);
            amp_tensor *ins[1] = {x};
            tc_gradcheck(out, ins, 1, ref, &c, gtol(dt, 1e-4), gtol(dt, 1e-6), what);
            test_free_tensors(out, x);
        }
    }
    /* torch: the product over an empty dim is 1 */
    amp_tensor *e = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(3, 0));
    amp_tensor *p = amp_prod(e, 1, false);
    double ones[3] = {1, 1, 1};
    tc_assert_tensor(p, ones, 0, 0, "prod over an empty dim");
    test_free_tensors(p, e);
}

static void t_cumsum(void **state) {
    (void)state;
    test_rng r = {31};
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        const int64_t s[3] = {3, 6, 4};
        for (int dim = -1; dim < 3; dim++) {
            amp_tensor *x = tc_randn_grad(&r, dt, 3, s, 1.0, true);
            amp_tensor *out = amp_cumsum(x, dim);
            tc_assert_shape(out, 3, s, "cumsum shape");
            assert_int_equal(amp_tensor_dtype(out), dt);
            rctx c = {K_CUMSUM, 3, {3, 6, 4}, {0}, (dim + 3) % 3, 0};
            char what[64];
            snprintf(what, sizeof what, "cumsum %s dim %d", amp_dtype_name(dt), dim);
            check_fwd(out, x, &c, tc_rtol(dt, 1), dt == AMP_F32 ? 1e-6 : tc_rtol(dt, 4), what);
            amp_tensor *ins[1] = {x};
            tc_gradcheck(out, ins, 1, ref, &c, gtol(dt, 1e-4), gtol(dt, 1e-5), what);
            test_free_tensors(out, x);
        }
    }
    amp_tensor *e = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(0, 3));
    amp_tensor *c = amp_cumsum(e, 0);
    tc_assert_shape(c, 2, AMP_SHAPE(0, 3), "cumsum of empty");
    test_free_tensors(c, e);
}

static void t_max(void **state) {
    (void)state;
    test_rng r = {41};
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        const int64_t s[3] = {3, 5, 4};
        for (int dim = -3; dim < 3; dim++) {
            amp_tensor *x = tc_randn_grad(&r, dt, 3, s, 1.0, true);
            amp_tensor *idx = NULL;
            bool keep = dim < 0;
            amp_tensor *out = amp_max(x, dim, keep, &idx);
            assert_non_null(out);
            assert_non_null(idx);
            assert_int_equal(amp_tensor_dtype(idx), AMP_I64);
            assert_int_equal(amp_tensor_ndim(idx), amp_tensor_ndim(out));
            rctx c = {K_MAX, 3, {3, 5, 4}, {0}, (dim + 3) % 3, 0};
            char what[64];
            snprintf(what, sizeof what, "max %s dim %d", amp_dtype_name(dt), dim);
            check_fwd(out, x, &c, 0, 0, what); /* exact */
            /* the index points at the value */
            double *xv = tc_values(x), *iv = tc_values(idx), *ov = tc_values(out);
            int64_t outer, len, inner;
            split(&c, &outer, &len, &inner);
            for (int64_t o = 0; o < outer; o++)
                for (int64_t i = 0; i < inner; i++)
                    assert_true(xv[(o * len + (int64_t)iv[o * inner + i]) * inner + i] == ov[o * inner + i]);
            test_free_all(xv, iv, ov);
            amp_tensor *ins[1] = {x};
            tc_gradcheck(out, ins, 1, ref, &c, gtol(dt, 1e-4), gtol(dt, 1e-6), what);
            test_free_tensors(idx, out, x);
        }
        /* ties: the first occurrence wins, and gets the whole gradient */
        double tv[8] = {1, 3, 3, 2, -1, -1, -1, -2};
        amp_tensor *t = tc_from_values(dt, 2, AMP_SHAPE(2, 4), tv);
        amp_tensor_set_requires_grad(t, true);
        amp_tensor *ti = NULL;
        amp_tensor *tm = amp_max(t, 1, false, &ti);
        double wi[2] = {1, 0}, wv[2] = {3, -1};
        tc_assert_tensor(ti, wi, 0, 0, "max ties: first index");
        tc_assert_tensor(tm, wv, 0, 0, "max ties: values");
        amp_tensor *sm = amp_sum(tm, NULL, 0, false);
        assert_int_equal(amp_backward(sm), AMP_OK);
        double wg[8] = {0, 1, 0, 0, 1, 0, 0, 0};
        tc_assert_tensor(amp_tensor_grad(t), wg, 0, 0, "max ties: gradient to the first argmax");
        test_free_tensors(sm, tm, ti, t);
        /* NaN propagates (the first NaN is the max) */
        double nv[4] = {1, NAN, 5, NAN};
        amp_tensor *nt = tc_from_values(dt, 1, AMP_SHAPE(4), nv);
        amp_tensor *ni = NULL;
        amp_tensor *nm = amp_max(nt, 0, false, &ni);
        assert_true(isnan(amp_tensor_item(nm)));
        assert_true(amp_tensor_item(ni) == 1);
        test_free_tensors(nm, ni, nt);
    }
    /* indices may be NULL; 0-d input */
    amp_tensor *sc = amp_tensor_full(AMP_F32, 0, NULL, -4);
    amp_tensor *si = NULL;
    amp_tensor *sm = amp_max(sc, -1, false, &si);
    assert_true(amp_tensor_item(sm) == -4 && amp_tensor_item(si) == 0);
    amp_tensor *sm2 = amp_max(sc, 0, true, NULL);
    assert_true(amp_tensor_item(sm2) == -4);
    test_free_tensors(sm, sm2, si, sc);
}

/* ---- norm ---------------------------------------------------------------------------------- */
static void t_norm(void **state) {
    (void)state;
    test_rng r = {51};
    const double ps[] = {2, 1, 3, 0.5, INFINITY, -INFINITY, 0};
    const dimcase cases[] = {{{1}, 1, false}, {{0}, 0, false}, {{-1, 0}, 2, true}};
    const int64_t s[3] = {3, 4, 5};
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++) {
            for (size_t ci = 0; ci < 3; ci++) {
                const dimcase *dc = &cases[ci];
                amp_tensor *x = tc_randn_grad(&r, dt, 3, s, 1.0, true);
                amp_tensor *out = amp_norm(x, ps[pi], dc->ndims ? dc->dims : NULL, dc->ndims, dc->keepdim);
                assert_non_null(out);
                assert_int_equal(amp_tensor_dtype(out), dt);
                rctx c = {K_NORM, 3, {3, 4, 5}, {0}, 0, ps[pi]};
                for (int k = 0; k < dc->ndims; k++) c.red[(dc->dims[k] + 3) % 3] = true;
                if (dc->ndims == 0) c.red[0] = c.red[1] = c.red[2] = true;
                char what[64];
                snprintf(what, sizeof what, "norm p=%g %s case %zu", ps[pi], amp_dtype_name(dt), ci);
                check_fwd(out, x, &c, tc_rtol(dt, 1.5), 1e-6, what);
                amp_tensor *ins[1] = {x};
                tc_gradcheck(out, ins, 1, ref, &c, gtol(dt, 1e-3), gtol(dt, 1e-5), what);
                test_free_tensors(out, x);
            }
        }
    }
    /* the gradient of the 2-norm at 0 is 0 (torch), not NaN */
    amp_tensor *z = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(2, 3));
    amp_tensor_set_requires_grad(z, true);
    int d1[1] = {1};
    amp_tensor *n = amp_norm(z, 2, d1, 1, false);
    amp_tensor *sn = amp_sum(n, NULL, 0, false);
    assert_int_equal(amp_backward(sn), AMP_OK);
    double zero6[6] = {0};
    tc_assert_tensor(amp_tensor_grad(z), zero6, 0, 0, "grad of the 2-norm at 0");
    test_free_tensors(sn, n, z);
    /* p < 1: the gradient at a zero element is 0 (torch), not 0 * inf */
    double hv[3] = {0, 0, 1};
    amp_tensor *h = tc_from_values(AMP_F32, 1, AMP_SHAPE(3), hv);
    amp_tensor_set_requires_grad(h, true);
    amp_tensor *hn = amp_norm(h, 0.5, NULL, 0, false);
    assert_int_equal(amp_backward(hn), AMP_OK);
    double hg[3] = {0, 0, 1};
    tc_assert_tensor(amp_tensor_grad(h), hg, 1e-6, 0, "grad of the 0.5-norm at 0");
    test_free_tensors(hn, h);
    /* norm of an empty tensor is 0; inf-norm of nothing is an error */
    amp_tensor *e = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(0));
    amp_tensor *ne = amp_norm(e, 2, NULL, 0, false);
    assert_true(amp_tensor_item(ne) == 0);
    amp_tensor_free(ne);
    tc_assert_fails(amp_norm(e, INFINITY, NULL, 0, false), "amp_norm");
    amp_tensor_free(e);
}

/* ---- PyTorch golden data ------------------------------------------------------------------ */
/* Backward of out with the golden upstream "<case>/r" (or 1 for scalars). */
typedef amp_tensor *(*unary_fn)(amp_tensor *x, void *ctx);

static void golden_unary(golden_file *g, const char *cs, const char *xname, unary_fn f, void *ctx) {
    amp_tensor *x = golden_tensor(g, xname);
    amp_tensor_set_requires_grad(x, true);
    amp_tensor *out = f(x, ctx);
    golden_assert_out_gx(g, cs, out, x, 1e-5, 1e-6);
    test_free_tensors(out, x);
}

static amp_tensor *g_sum02(amp_tensor *x, void *c) { (void)c; return amp_sum(x, (int[]){0, 2}, 2, false); }
static amp_tensor *g_sumall(amp_tensor *x, void *c) { (void)c; return amp_sum(x, NULL, 0, false); }
static amp_tensor *g_mean1k(amp_tensor *x, void *c) { (void)c; return amp_mean(x, (int[]){1}, 1, true); }
static amp_tensor *g_meanneg(amp_tensor *x, void *c) { (void)c; return amp_mean(x, (int[]){-1, 0}, 2, false); }
static amp_tensor *g_prod(amp_tensor *x, void *c) { (void)c; return amp_prod(x, 1, false); }
static amp_tensor *g_prod0k(amp_tensor *x, void *c) { (void)c; return amp_prod(x, 0, true); }
static amp_tensor *g_cumsum(amp_tensor *x, void *c) { (void)c; return amp_cumsum(x, 1); }
static amp_tensor *g_max(amp_tensor *x, void *c) { (void)c; return amp_max(x, 1, false, NULL); }
static amp_tensor *g_max0(amp_tensor *x, void *c) { (void)c; return amp_max(x, 0, true, NULL); }
static amp_tensor *g_norm2(amp_tensor *x, void *c) { (void)c; return amp_norm(x, 2, (int[]){1}, 1, false); }
static amp_tensor *g_norm1(amp_tensor *x, void *c) { (void)c; return amp_norm(x, 1, NULL, 0, false); }
static amp_tensor *g_norm3(amp_tensor *x, void *c) { (void)c; return amp_norm(x, 3, (int[]){0}, 1, false); }
static amp_tensor *g_norminf(amp_tensor *x, void *c) { (void)c; return amp_norm(x, INFINITY, (int[]){1}, 1, true); }
static amp_tensor *g_norm2all(amp_tensor *x, void *c) { (void)c; return amp_norm(x, 2, NULL, 0, false); }

static void t_golden(void **state) {
    (void)state;
    golden_file *g = golden_open("golden_reduce_norm_loss.bin");
    golden_unary(g, "sum02", "sum02/x", g_sum02, NULL);
    golden_unary(g, "sumall", "sum02/x", g_sumall, NULL);
    golden_unary(g, "mean1k", "sum02/x", g_mean1k, NULL);
    golden_unary(g, "meanneg", "sum02/x", g_meanneg, NULL);
    golden_unary(g, "prod", "prod/x", g_prod, NULL);
    golden_unary(g, "prod0k", "prod/x", g_prod0k, NULL);
    golden_unary(g, "cumsum", "cumsum/x", g_cumsum, NULL);
    golden_unary(g, "max", "max/x", g_max, NULL);
    golden_unary(g, "max0", "max/x", g_max0, NULL);
    golden_unary(g, "norm2", "norm/x", g_norm2, NULL);
    golden_unary(g, "norm1", "norm/x", g_norm1, NULL);
    golden_unary(g, "norm3", "norm/x", g_norm3, NULL);
    golden_unary(g, "norminf", "norm/x", g_norminf, NULL);
    golden_unary(g, "norm2all", "norm/x", g_norm2all, NULL);
    /* max indices (ties in the data: first occurrence, as torch) */
    amp_tensor *x = golden_tensor(g, "max/x");
    amp_tensor *i1 = NULL, *i0 = NULL;
    amp_tensor *m1 = amp_max(x, 1, false, &i1), *m0 = amp_max(x, 0, true, &i0);
    golden_assert(g, "max/idx", i1, 0, 0);
    golden_assert(g, "max0/idx", i0, 0, 0);
    test_free_tensors(m1, m0, i1, i0, x);
    golden_close(g);
}

/* ---- bad input ------------------------------------------------------------------------------ */
static void t_bad_inputs(void **state) {
    (void)state;
    amp_tensor *x = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(3, 4));
    amp_tensor *xi = amp_tensor_ones(AMP_I64, 2, AMP_SHAPE(3, 4));
    amp_tensor *idx = NULL;
    int d5[1] = {5}, dup[2] = {1, -1}, dm3[1] = {-3};
    /* NULL */
    tc_assert_fails(amp_sum(NULL, NULL, 0, false), "amp_sum");
    tc_assert_fails(amp_mean(NULL, NULL, 0, false), "amp_mean");
    tc_assert_fails(amp_prod(NULL, 0, false), "amp_prod");
    tc_assert_fails(amp_cumsum(NULL, 0), "amp_cumsum");
    tc_assert_fails(amp_max(NULL, 0, false, &idx), "amp_max");
    assert_null(idx);
    tc_assert_fails(amp_norm(NULL, 2, NULL, 0, false), "amp_norm");
    /* wrong dtype */
    tc_assert_fails(amp_sum(xi, NULL, 0, false), "amp_sum: x has dtype i64");
    tc_assert_fails(amp_mean(xi, NULL, 0, false), "amp_mean: x has dtype i64");
    tc_assert_fails(amp_prod(xi, 0, false), "amp_prod: x has dtype i64");
    tc_assert_fails(amp_cumsum(xi, 0), "amp_cumsum: x has dtype i64");
    tc_assert_fails(amp_max(xi, 0, false, NULL), "amp_max: x has dtype i64");
    tc_assert_fails(amp_norm(xi, 2, NULL, 0, false), "amp_norm: x has dtype i64");
    /* dims out of range (the tensor's rank) */
    tc_assert_fails(amp_sum(x, d5, 1, false), "amp_sum: dim 5 is out of range for a 2-d tensor");
    tc_assert_fails(amp_mean(x, dm3, 1, false), "amp_mean: dim -3");
    tc_assert_fails(amp_prod(x, 2, false), "amp_prod: dim 2");
    tc_assert_fails(amp_cumsum(x, -3), "amp_cumsum: dim -3");
    tc_assert_fails(amp_max(x, 7, false, NULL), "amp_max: dim 7");
    tc_assert_fails(amp_norm(x, 2, d5, 1, false), "amp_norm: dim 5");
    /* malformed dim lists */
    tc_assert_fails(amp_sum(x, dup, 2, false), "amp_sum: dim -1 appears more than once");
    tc_assert_fails(amp_mean(x, NULL, 1, false), "amp_mean: dims is NULL");
    tc_assert_fails(amp_norm(x, 2, dup, -1, false), "amp_norm: ndims -1");
    tc_assert_fails(amp_norm(x, NAN, NULL, 0, false), "amp_norm: p is NaN");
    /* max over an empty dim */
    amp_tensor *e = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(3, 0));
    tc_assert_fails(amp_max(e, 1, false, &idx), "amp_max");
    assert_null(idx);
    amp_tensor_free(e);
    /* a failed input propagates: the message keeps the first error */
    tc_assert_fails(amp_sum(amp_prod(xi, 0, false), NULL, 0, false), "amp_prod");
    test_free_tensors(x, xi);
}

AMP_TEST_MAIN(t_sum_mean, t_sum_edges, t_sum_large, t_prod, t_cumsum, t_max, t_norm, t_golden, t_bad_inputs)

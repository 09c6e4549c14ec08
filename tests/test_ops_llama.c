/* The ops the Llama and BERT models need: amp_rms_norm, amp_rope and
 * amp_swiglu (grouped-query attention: test_ops_attention.c). Each × f32/f16/bf16: forward against float64 reference loops
 * written here, backward against central differences of them, and a
 * bad-input walk.
 *
 * RoPE's angles: the reference here computes them twice, independently of
 * amp's code: exactly (float64, pos * theta^(-2i/D)) and as each layout's
 * source does in f32 (llama.cpp's ggml-cpu rope for the interleaved layout:
 * theta_scale = powf(theta, -2/D), the angle multiplied by it pair after
 * pair; Hugging Face's Llama for the halves: inv_freq = 1 / theta^(2i/D) in
 * f32, times the position in f32). amp must match the second to rounding
 * (cos/sin rounded to f32, the rotation rounded once) and the first within
 * the bound the f32 angles allow, which at position 5000 is far looser than
 * the rounding: so the test shows which convention amp follows.
 *
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path (the
 * kernels have a build per path; every one must pass the same checks). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_check.h"

static const amp_dtype DTS[3] = {AMP_F32, AMP_F16, AMP_BF16};

static double gtol(amp_dtype dt, double f32, double half_factor) { return dt == AMP_F32 ? f32 : tc_rtol(dt, half_factor); }

/* ---- rms_norm ------------------------------------------------------------------------------ */
typedef struct {
    int64_t M, D;
    double eps;
    bool w;
} rms_ctx;

static void rms_ref(const double *const *in, double *out, void *vc) {
    const rms_ctx *c = vc;
    const double *x = in[0], *w = c->w ? in[1] : NULL;
    for (int64_t m = 0; m < c->M; m++) {
        double ss = 0;
        for (int64_t d = 0; d < c->D; d++) ss += x[m * c->D + d] * x[m * c->D + d];
        double rs = 1 / sqrt(ss / (double)c->D + c->eps);
        for (int64_t d = 0; d < c->D; d++) out[m * c->D + d] = x[m * c->D + d] * rs * (w ? w[d] : 1.0);
    }
}

static void t_rms_norm(void **state) {
    (void)state;
    test_rng r = {2501};
    struct {
        int nd;
        int64_t s[3];
        int k;
        bool w;
        double eps;
    } cases[] = {
        {2, {4, 6}, 1, true, 1e-5}, {3, {2, 3, 4}, 2, false, 1e-6}, {3, {2, 3, 4}, 1, true, 1e-3},
        {1, {7}, 1, true, 1e-5},    {2, {3, 40}, 1, true, 1e-5},    {3, {2, 2, 33}, 1, false, 0},
    };
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            int nd = cases[ci].nd, k = cases[ci].k;
            const int64_t *s = cases[ci].s;
            amp_tensor *x = tc_randn_grad(&r, dt, nd, s, 2.0, true);
            amp_tensor *w = cases[ci].w ? tc_randn_grad(&r, dt, k, s + nd - k, 1.0, true) : NULL;
            amp_tensor *y = amp_rms_norm(x, k, w, cases[ci].eps);
            assert_non_null(y);
            assert_int_equal(amp_tensor_dtype(y), dt);
            tc_assert_shape(y, nd, s, "rms_norm shape");
            rms_ctx c = {1, 1, cases[ci].eps, w != NULL};
            for (int i = 0; i < nd - k; i++) c.M *= s[i];
            for (int i = nd - k; i < nd; i++) c.D *= s[i];
            double *xv = tc_values(x), *wv = w ? tc_values(w) : NULL;
            double *want = malloc(sizeof(double) * (size_t)(c.M * c.D));
            const double *ins[2] = {xv, wv};
            rms_ref(ins, want, &c);
            char what[64];
            snprintf(what, sizeof what, "rms_norm %s case %zu", amp_dtype_name(dt), ci);
            /* f32: statistics in f32 from double sums; half: the f32 result rounded once */
            tc_assert_tensor(y, want, dt == AMP_F32 ? 1e-6 : tc_rtol(dt, 0.5), dt == AMP_F32 ? 1e-6 : tc_rtol(dt, 0.5),
                             what);
            amp_tensor *xs[2] = {x, w};
            tc_gradcheck(y, xs, 2, rms_ref, &c, gtol(dt, 1e-3, 20), gtol(dt, 1e-5, 10), what);
            test_free_all(want, xv, wv);
            test_free_tensors(y, x, w);
        }
    }
}

/* A row longer than the kernels' 2048-element blocks, a strided x (staged),
 * a half x with an f32 weight (output in x's dtype), the default eps of
 * each dtype (torch: finfo(dtype).eps), and create_graph through the op. */
static void t_rms_norm_more(void **state) {
    (void)state;
    amp_scope *test_scope = amp_scope_begin();
    test_rng r = {2502};
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        const int64_t s[2] = {3, 5000};
        amp_tensor *x = tc_randn_grad(&r, dt, 2, s, 3.0, false), *w = tc_randn_grad(&r, AMP_F32, 1, s + 1, 1.0, false);
        amp_tensor *y = amp_rms_norm(x, 1, w, 1e-6);
        assert_non_null(y);
        assert_int_equal(amp_tensor_dtype(y), dt);
        rms_ctx c = {3, 5000, 1e-6, true};
        double *xv = tc_values(x), *wv = tc_values(w), *want = malloc(sizeof(double) * 15000);
        const double *ins[2] = {xv, wv};
        rms_ref(ins, want, &c);
        tc_assert_tensor(y, want, dt == AMP_F32 ? 1e-6 : tc_rtol(dt, 0.5), dt == AMP_F32 ? 1e-6 : tc_rtol(dt, 0.5),
                         "rms_norm long rows");
        /* default eps: NaN and any negative value give torch's, float's epsilon for f32, f16 and bf16 alike
         * (torch upcasts half inputs and takes the epsilon of the f32 it computes in) */
        double feps = 0x1p-23;
        amp_tensor *x1 = tc_randn_grad(&r, dt, 2, AMP_SHAPE(2, 4), 0.01, false);
        amp_tensor *yd = amp_rms_norm(x1, 1, NULL, NAN), *yn = amp_rms_norm(x1, 1, NULL, -1), *ye = amp_rms_norm(x1, 1, NULL, feps);
        double *a = tc_values(yd), *b = tc_values(yn), *e = tc_values(ye);
        for (int i = 0; i < 8; i++) assert_true(a[i] == e[i] && b[i] == e[i]);
        test_free_all(a, b, e, want, xv, wv);
        test_free_tensors(yd, yn, ye, x1, y, x, w);
    }
    /* strided x: the transpose of [5, 4] normalised over its rows of 5 */
    amp_tensor *x0 = tc_randn_grad(&r, AMP_F32, 2, AMP_SHAPE(5, 4), 1.0, true);
    amp_tensor *xt = amp_transpose(x0, 0, 1), *xc = amp_contiguous(xt);
    amp_tensor *y1 = amp_rms_norm(xt, 1, NULL, 1e-5), *y2 = amp_rms_norm(xc, 1, NULL, 1e-5);
    double *v1 = tc_values(y1), *v2 = tc_values(y2);
    for (int i = 0; i < 20; i++) assert_true(v1[i] == v2[i]);
    test_free_all(v1, v2);
    /* create_graph: the first gradient gx of sum(rms_norm(x) * c) as a graph, then d sum(gx * z)/dx against
     * central differences of the float64 first gradient */
    amp_tensor *xg = tc_randn_grad(&r, AMP_F32, 2, AMP_SHAPE(2, 3), 1.0, true);
    amp_tensor *cg = tc_randn_grad(&r, AMP_F32, 2, AMP_SHAPE(2, 3), 1.0, false);
    amp_tensor *zg = tc_randn_grad(&r, AMP_F32, 2, AMP_SHAPE(2, 3), 1.0, false);
    amp_tensor *yg = amp_rms_norm(xg, 1, NULL, 1e-3);
    amp_tensor *lg = amp_sum(amp_mul(yg, cg), NULL, 0, false);
    amp_tensor *grads[1] = {NULL};
    assert_int_equal(amp_grad(&lg, 1, NULL, &xg, 1, grads, true, false), AMP_OK);
    amp_tensor *l2 = amp_sum(amp_mul(grads[0], zg), NULL, 0, false);
    assert_int_equal(amp_backward(l2), AMP_OK);
    double *xv = tc_values(xg), *cv = tc_values(cg), *zv = tc_values(zg), *h2 = tc_values(amp_tensor_grad(xg));
    for (int k = 0; k < 6; k++) {
        double fd[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            double xx[6], tot = 0;
            memcpy(xx, xv, sizeof xx);
            xx[k] += sgn ? -1e-5 : 1e-5;
            for (int m = 0; m < 2; m++) { /* gx = r (c - xhat mean(c xhat)) */
                double ss = 0, dot = 0;
                for (int d = 0; d < 3; d++) ss += xx[m * 3 + d] * xx[m * 3 + d];
                double rs = 1 / sqrt(ss / 3 + 1e-3);
                for (int d = 0; d < 3; d++) dot += cv[m * 3 + d] * xx[m * 3 + d] * rs;
                for (int d = 0; d < 3; d++) tot += rs * (cv[m * 3 + d] - xx[m * 3 + d] * rs * dot / 3) * zv[m * 3 + d];
            }
            fd[sgn] = tot;
        }
        double want = (fd[0] - fd[1]) / 2e-5;
        if (!(fabs(h2[k] - want) <= 1e-3 * fabs(want) + 1e-4))
            fail_msg("rms_norm create_graph: second-order gradient %d: amp %.7g, float64 differences %.7g", k, h2[k], want);
    }
    test_free_all(xv, cv, zv, h2);
    test_free_tensors(grads[0], l2, lg, yg, zg, cg, xg, y1, y2, xc, xt, x0);
    amp_scope_end(test_scope); /* frees what the checks above made (LeakSanitizer) */
}

/* ---- rope ---------------------------------------------------------------------------------- */
typedef struct {
    int64_t B, H, T, D, pos0;
    double theta;
    int layout;
    bool model; /* angles as the layout's f32 source computes them (else exact) */
} rope_ctx;

/* the angle of pair i at position p */
static double rope_angle(const rope_ctx *c, int64_t p, int64_t i) {
    if (!c->model) return (double)p * pow(c->theta, -2.0 * (double)i / (double)c->D);
    if (c->layout == AMP_ROPE_HALVES) { /* Hugging Face: inv_freq in f32, pos * inv_freq in f32 */
        float inv = 1.0f / powf((float)c->theta, (float)(2 * i) / (float)c->D);
        return (double)((float)p * inv);
    }
    float s = powf((float)c->theta, -2.0f / (float)c->D), a = (float)p; /* llama.cpp: repeated f32 products */
    for (int64_t k = 0; k < i; k++) a *= s;
    return (double)a;
}

static void rope_ref(const double *const *in, double *out, void *vc) {
    const rope_ctx *c = vc;
    const double *x = in[0];
    const int64_t n = c->D / 2;
    for (int64_t r = 0; r < c->B * c->H * c->T; r++) {
        int64_t t = r % c->T;
        const double *p = x + r * c->D;
        double *q = out + r * c->D;
        for (int64_t i = 0; i < n; i++) {
            double a = rope_angle(c, c->pos0 + t, i), cs = cos(a), sn = sin(a);
            int64_t j0 = c->layout == AMP_ROPE_HALVES ? i : 2 * i, j1 = c->layout == AMP_ROPE_HALVES ? i + n : 2 * i + 1;
            q[j0] = p[j0] * cs - p[j1] * sn;
            q[j1] = p[j0] * sn + p[j1] * cs;
        }
    }
}

/* |amp - exact| <= (angle error + 4 ulp) * (|x0| + |x1|): the f32 angle of
 * pair i is off by at most (i + 2) ulps of the angle (the powf and each
 * product round once), bounded here by (i + 2) 2^-23 |angle| + 2^-24 */
static void assert_rope_exact(const amp_tensor *y, const double *x, const rope_ctx *c, const char *what) {
    rope_ctx e = *c;
    e.model = false;
    int64_t n = c->B * c->H * c->T * c->D;
    double *want = malloc(sizeof(double) * (size_t)n), *got = tc_values(y);
    const double *ins[1] = {x};
    rope_ref(ins, want, &e);
    double ulp = amp_tensor_dtype(y) == AMP_F32 ? 0x1p-24 : amp_tensor_dtype(y) == AMP_F16 ? 0x1p-11 : 0x1p-8;
    for (int64_t r = 0; r < n / c->D; r++)
        for (int64_t i = 0; i < c->D / 2; i++) {
            int64_t t = r % c->T, hv = c->layout == AMP_ROPE_HALVES;
            int64_t j0 = hv ? i : 2 * i, j1 = hv ? i + c->D / 2 : 2 * i + 1;
            double a = rope_angle(&e, c->pos0 + t, i);
            double mag = fabs(x[r * c->D + j0]) + fabs(x[r * c->D + j1]);
            double bound = ((double)(i + 2) * 0x1p-23 * a + 0x1p-24 + 4 * 0x1p-24) * mag;
            for (int k = 0; k < 2; k++) {
                int64_t j = r * c->D + (k ? j1 : j0);
                double b = bound + ulp * fabs(want[j]);
                if (!(fabs(got[j] - want[j]) <= b))
                    fail_msg("%s: element %lld: amp %.9g, exact-angle reference %.9g, bound %.3g", what, (long long)j,
                             got[j], want[j], b);
            }
        }
    test_free_all(want, got);
}

static void t_rope(void **state) {
    (void)state;
    test_rng r = {2503};
    struct {
        int64_t s[4], pos0;
        double theta;
    } cases[] = {
        {{1, 2, 3, 8}, 0, 10000.0}, {{2, 3, 4, 64}, 7, 100000.0}, {{1, 1, 5, 2}, 1, 10000.0}, {{2, 1, 1, 16}, 41, 500000.0},
    };
    for (int lay = 0; lay < 2; lay++)
        for (int di = 0; di < 3; di++) {
            amp_dtype dt = DTS[di];
            for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
                const int64_t *s = cases[ci].s;
                amp_tensor *x = tc_randn_grad(&r, dt, 4, s, 1.5, true);
                amp_tensor *y = amp_rope(x, cases[ci].pos0, cases[ci].theta, (amp_rope_layout)lay);
                assert_non_null(y);
                assert_int_equal(amp_tensor_dtype(y), dt);
                tc_assert_shape(y, 4, s, "rope shape");
                rope_ctx c = {s[0], s[1], s[2], s[3], cases[ci].pos0, cases[ci].theta, lay, true};
                int64_t n = s[0] * s[1] * s[2] * s[3];
                double *xv = tc_values(x), *want = malloc(sizeof(double) * (size_t)n);
                const double *ins[1] = {xv};
                rope_ref(ins, want, &c);
                char what[80];
                snprintf(what, sizeof what, "rope %s %s case %zu", lay ? "halves" : "interleaved", amp_dtype_name(dt), ci);
                /* the layout's own angles: cos/sin rounded to f32 (2^-24 each), the result rounded once */
                tc_assert_tensor(y, want, dt == AMP_F32 ? 4e-7 : tc_rtol(dt, 0.5), dt == AMP_F32 ? 4e-7 : tc_rtol(dt, 0.5),
                                 what);
                assert_rope_exact(y, xv, &c, what);
                amp_tensor *xs[1] = {x};
                tc_gradcheck(y, xs, 1, rope_ref, &c, gtol(dt, 1e-4, 10), gtol(dt, 1e-6, 5), what);
                test_free_all(want, xv);
                test_free_tensors(y, x);
            }
        }
}

/* Far positions: at 5000 the f32 angle differs from the exact one by up to
 * ~1e-3 rad, so amp agreeing with the layout's f32 convention to 1e-6 while
 * the two conventions differ by ~1e-4 shows which one it follows. Also: a
 * strided x (a [B, T, H, D] tensor transposed, as attention's q/k are) gives
 * the bits of its contiguous copy, and rope then its inverse (the backward's
 * rotation, through the gradient) restores x. */
static void t_rope_conventions(void **state) {
    (void)state;
    amp_scope *test_scope = amp_scope_begin();
    test_rng r = {2504};
    for (int lay = 0; lay < 2; lay++) {
        const int64_t s[4] = {1, 2, 6, 64};
        amp_tensor *x = tc_randn_grad(&r, AMP_F32, 4, s, 1.0, false);
        amp_tensor *y = amp_rope(x, 5000, 10000.0, (amp_rope_layout)lay);
        rope_ctx c = {1, 2, 6, 64, 5000, 10000.0, lay, true};
        double *xv = tc_values(x), *m = malloc(sizeof(double) * 768), *e = malloc(sizeof(double) * 768);
        const double *ins[1] = {xv};
        rope_ref(ins, m, &c);
        c.model = false;
        rope_ref(ins, e, &c);
        c.model = true;
        tc_assert_tensor(y, m, 1e-6, 1e-6, lay ? "rope halves at 5000 (Hugging Face's f32 angles)" : "rope interleaved at 5000 (llama.cpp's f32 angles)");
        double dmax = 0;
        for (int i = 0; i < 768; i++) dmax = fmax(dmax, fabs(m[i] - e[i]));
        assert_true(dmax > 1e-4); /* the conventions differ here: the check above tells them apart */
        assert_rope_exact(y, xv, &c, "rope at 5000 vs exact angles");
        test_free_all(m, e, xv);
        test_free_tensors(y, x);
    }
    for (int di = 0; di < 3; di++) {
        amp_tensor *xb = tc_randn_grad(&r, DTS[di], 4, AMP_SHAPE(2, 5, 3, 8), 1.0, true); /* [B, T, H, D] */
        amp_tensor *xt = amp_transpose(xb, 1, 2), *xc = amp_contiguous(xt);
        amp_tensor *y1 = amp_rope(xt, 3, 10000.0, AMP_ROPE_HALVES), *y2 = amp_rope(xc, 3, 10000.0, AMP_ROPE_HALVES);
        double *v1 = tc_values(y1), *v2 = tc_values(y2);
        for (int i = 0; i < 240; i++) assert_true(v1[i] == v2[i]);
        test_free_all(v1, v2);
        test_free_tensors(y1, y2, xc, xt, xb);
    }
    /* the gradient of sum(rope(x) * g) is the inverse rotation of g: with g = rope(z), that is z */
    for (int lay = 0; lay < 2; lay++) {
        amp_tensor *x = tc_randn_grad(&r, AMP_F32, 4, AMP_SHAPE(1, 2, 4, 16), 1.0, true);
        amp_tensor *z = tc_randn_grad(&r, AMP_F32, 4, AMP_SHAPE(1, 2, 4, 16), 1.0, false);
        amp_tensor *gz = amp_rope(z, 11, 10000.0, (amp_rope_layout)lay), *y = amp_rope(x, 11, 10000.0, (amp_rope_layout)lay);
        amp_tensor *l = amp_sum(amp_mul(y, gz), NULL, 0, false);
        assert_int_equal(amp_backward(l), AMP_OK);
        double *gv = tc_values(amp_tensor_grad(x)), *zv = tc_values(z);
        tc_assert_close_n(gv, zv, 128, 1e-6, 1e-6, "rope backward = inverse rotation");
        test_free_all(gv, zv);
        test_free_tensors(l, y, gz, z, x);
    }
    amp_scope_end(test_scope); /* frees what the checks above made (LeakSanitizer) */
}

/* ---- swiglu -------------------------------------------------------------------------------- */
typedef struct {
    int64_t n, nup; /* up broadcast along the leading dim when nup < n */
} sw_ctx;

static void sw_ref(const double *const *in, double *out, void *vc) {
    const sw_ctx *c = vc;
    for (int64_t i = 0; i < c->n; i++) {
        double g = in[0][i], u = in[1][i % c->nup];
        out[i] = g / (1 + exp(-g)) * u;
    }
}

static void t_swiglu(void **state) {
    (void)state;
    amp_scope *test_scope = amp_scope_begin();
    test_rng r = {2506};
    const amp_dtype dts[4] = {AMP_F32, AMP_F16, AMP_BF16, AMP_F64};
    for (int di = 0; di < 4; di++) {
        amp_dtype dt = dts[di];
        for (int bc = 0; bc < 2; bc++) {
            const int64_t sg[2] = {5, 37}, su[2] = {bc ? 1 : 5, 37};
            amp_tensor *gate = tc_randn_grad(&r, dt, 2, sg, 3.0, true), *up = tc_randn_grad(&r, dt, 2, su, 1.0, true);
            amp_tensor *y = amp_swiglu(gate, up);
            assert_non_null(y);
            assert_int_equal(amp_tensor_dtype(y), dt);
            tc_assert_shape(y, 2, sg, "swiglu shape");
            sw_ctx c = {5 * 37, bc ? 37 : 5 * 37};
            double *gv = tc_values(gate), *uv = tc_values(up), want[5 * 37];
            const double *ins[2] = {gv, uv};
            sw_ref(ins, want, &c);
            char what[64];
            snprintf(what, sizeof what, "swiglu %s%s", amp_dtype_name(dt), bc ? " (up broadcast)" : "");
            /* fused: one rounding of a result computed in f32 (f64) */
            double tol = dt == AMP_F64 ? 1e-14 : dt == AMP_F32 ? 1e-6 : tc_rtol(dt, 0.5);
            tc_assert_tensor(y, want, tol, tol, what);
            amp_tensor *xs[2] = {gate, up};
            tc_gradcheck(y, xs, 2, sw_ref, &c, dt == AMP_F64 ? 1e-6 : gtol(dt, 1e-3, 10), dt == AMP_F64 ? 1e-8 : gtol(dt, 1e-5, 5),
                         what);
            test_free_all(gv, uv);
            test_free_tensors(y, gate, up);
        }
    }
    /* mixed dtypes promote (f16 with bf16 -> f32), as silu(gate) * up in torch */
    amp_tensor *a = tc_randn_grad(&r, AMP_F16, 1, AMP_SHAPE(8), 1.0, false), *b = tc_randn_grad(&r, AMP_BF16, 1, AMP_SHAPE(8), 1.0, false);
    amp_tensor *y = amp_swiglu(a, b);
    assert_int_equal(amp_tensor_dtype(y), AMP_F32);
    test_free_tensors(y, a, b);
    /* create_graph: d/dgate of sum(dL/dgate * z) against central differences of the float64 first gradient */
    amp_tensor *g1 = tc_randn_grad(&r, AMP_F32, 1, AMP_SHAPE(6), 2.0, true), *u1 = tc_randn_grad(&r, AMP_F32, 1, AMP_SHAPE(6), 1.0, true);
    amp_tensor *z1 = tc_randn_grad(&r, AMP_F32, 1, AMP_SHAPE(6), 1.0, false);
    amp_tensor *l1 = amp_sum(amp_swiglu(g1, u1), NULL, 0, false), *grads[1] = {NULL};
    assert_int_equal(amp_grad(&l1, 1, NULL, &g1, 1, grads, true, false), AMP_OK);
    amp_tensor *l2 = amp_sum(amp_mul(grads[0], z1), NULL, 0, false);
    assert_int_equal(amp_backward(l2), AMP_OK);
    double *gv = tc_values(g1), *uv = tc_values(u1), *zv = tc_values(z1), *h2 = tc_values(amp_tensor_grad(g1));
    double *hu = tc_values(amp_tensor_grad(u1));
    for (int k = 0; k < 6; k++) { /* first gradient wrt gate: u * silu'(g); its derivatives wrt g and u */
        double fd[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            double x = gv[k] + (sgn ? -1e-6 : 1e-6), s = 1 / (1 + exp(-x));
            fd[sgn] = uv[k] * s * (1 + x * (1 - s)) * zv[k];
        }
        double want = (fd[0] - fd[1]) / 2e-6, s = 1 / (1 + exp(-gv[k]));
        assert_true(fabs(h2[k] - want) <= 1e-5 * fabs(want) + 1e-6);
        assert_true(fabs(hu[k] - s * (1 + gv[k] * (1 - s)) * zv[k]) <= 1e-6);
    }
    test_free_all(gv, uv, zv, h2, hu);
    test_free_tensors(grads[0], l2, l1, z1, u1, g1);
    amp_scope_end(test_scope); /* frees what the checks above made (LeakSanitizer) */
}

static void t_bad_inputs(void **state) {
    (void)state;
    amp_tensor *x = amp_tensor_zeros(AMP_F32, 3, AMP_SHAPE(2, 3, 4)), *xi = amp_tensor_zeros(AMP_I64, 2, AMP_SHAPE(2, 4));
    amp_tensor *w3 = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(3)), *wi = amp_tensor_zeros(AMP_I32, 1, AMP_SHAPE(4));
    tc_assert_fails(amp_rms_norm(NULL, 1, NULL, 1e-5), "amp_rms_norm");
    tc_assert_fails(amp_rms_norm(xi, 1, NULL, 1e-5), "amp_rms_norm: x has dtype i64");
    tc_assert_fails(amp_rms_norm(x, 4, NULL, 1e-5), "amp_rms_norm: normalized_ndim 4 must be in [1, 3]");
    tc_assert_fails(amp_rms_norm(x, 0, NULL, 1e-5), "amp_rms_norm: normalized_ndim 0");
    tc_assert_fails(amp_rms_norm(x, 1, w3, 1e-5), "amp_rms_norm: weight has shape [3]; expected [4]");
    tc_assert_fails(amp_rms_norm(x, 1, wi, 1e-5), "amp_rms_norm: weight has dtype i32");
    amp_tensor *x4 = amp_tensor_zeros(AMP_F32, 4, AMP_SHAPE(1, 2, 3, 4)), *x5 = amp_tensor_zeros(AMP_F32, 4, AMP_SHAPE(1, 2, 3, 5));
    amp_tensor *xi4 = amp_tensor_zeros(AMP_I32, 4, AMP_SHAPE(1, 2, 3, 4));
    tc_assert_fails(amp_rope(NULL, 0, 1e4, AMP_ROPE_HALVES), "amp_rope");
    tc_assert_fails(amp_rope(xi4, 0, 1e4, AMP_ROPE_HALVES), "amp_rope: x has dtype i32");
    tc_assert_fails(amp_rope(x, 0, 1e4, AMP_ROPE_HALVES), "amp_rope: x has shape [2,3,4]; expected 4 dims [B, H, T, D]");
    tc_assert_fails(amp_rope(x5, 0, 1e4, AMP_ROPE_HALVES), "amp_rope: x has shape [1,2,3,5]; its last dim D = 5 must be even");
    tc_assert_fails(amp_rope(x4, 0, 1e4, (amp_rope_layout)2), "amp_rope: layout 2 is not");
    tc_assert_fails(amp_rope(x4, 0, 0.0, AMP_ROPE_HALVES), "amp_rope: theta 0 must be positive");
    tc_assert_fails(amp_rope(x4, 0, NAN, AMP_ROPE_HALVES), "amp_rope: theta nan");
    tc_assert_fails(amp_rope(x4, 0, 1e300, AMP_ROPE_HALVES), "amp_rope: theta 1e+300 must be positive and finite in f32");
    tc_assert_fails(amp_rope(x4, -1, 1e4, AMP_ROPE_HALVES), "amp_rope: positions -1");
    tc_assert_fails(amp_rope(x4, (int64_t)1 << 24, 1e4, AMP_ROPE_HALVES), "must lie in [0, 2^24]");
    amp_tensor *g3 = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(3));
    tc_assert_fails(amp_swiglu(NULL, x4), "amp_swiglu: gate is NULL");
    tc_assert_fails(amp_swiglu(x4, NULL), "amp_swiglu: up is NULL");
    tc_assert_fails(amp_swiglu(xi4, x4), "amp_swiglu: gate has dtype i32");
    tc_assert_fails(amp_swiglu(x4, xi4), "amp_swiglu: up has dtype i32");
    tc_assert_fails(amp_swiglu(x4, g3), "amp_swiglu: shapes [1,2,3,4] and [3] do not broadcast");
    test_free_tensors(x, xi, w3, wi, x4, x5, xi4, g3);
}

AMP_TEST_MAIN(t_rms_norm, t_rms_norm_more, t_rope, t_rope_conventions, t_swiglu, t_bad_inputs)

/* conv2d, conv1d, max_pool2d, avg_pool2d, adaptive_avg_pool2d.
 * Each × f32/f16/bf16: forward against float64 reference loops written here,
 * backward against central differences of them, PyTorch golden data
 * (tools/golden/gen_matmul_conv.py), PyTorch's edge cases (ceil_mode windows
 * hanging off the end, count_include_pad, dilation, groups, unbatched input,
 * empty batch), and a bad-input walk.
 * AMP_TEST_PER_CPU_PATH: the GEMM behind conv runs per CPU path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/numeric.h"
#include "golden.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/pool.h"
#include "op_check.h"

static const amp_dtype DTS[3] = {AMP_F32, AMP_F16, AMP_BF16};

static amp_tensor *mk(test_rng *r, amp_dtype dt, int nd, const int64_t *s, bool rg) {
    return tc_uniform_grad(r, dt, nd, s, -1.0, 1.0, rg);
}

/* ---- conv reference ------------------------------------------------------------------ */
typedef struct {
    int64_t N, C, H, W, O, kh, kw, sh, sw, ph, pw, dh, dw, G, OH, OW;
    bool bias;
    double *mag;
} cref;

static void conv_ref(const double *const *in, double *out, void *vc) {
    const cref *c = vc;
    const double *x = in[0], *w = in[1], *b = c->bias ? in[2] : NULL;
    int64_t Cg = c->C / c->G, Og = c->O / c->G;
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t o = 0; o < c->O; o++)
            for (int64_t oh = 0; oh < c->OH; oh++)
                for (int64_t ow = 0; ow < c->OW; ow++) {
                    double s = b ? b[o] : 0.0, mg = b ? fabs(b[o]) : 0.0;
                    int64_t g = o / Og;
                    for (int64_t ci = 0; ci < Cg; ci++)
                        for (int64_t i = 0; i < c->kh; i++)
                            for (int64_t j = 0; j < c->kw; j++) {
                                int64_t h = oh * c->sh - c->ph + i * c->dh, ww = ow * c->sw - c->pw + j * c->dw;
                                if (h < 0 || h >= c->H || ww < 0 || ww >= c->W) continue;
                                double t = x[((n * c->C + g * Cg + ci) * c->H + h) * c->W + ww] *
                                           w[((o * Cg + ci) * c->kh + i) * c->kw + j];
                                s += t;
                                mg += fabs(t);
                            }
                    int64_t f = ((n * c->O + o) * c->OH + oh) * c->OW + ow;
                    out[f] = s;
                    if (c->mag) c->mag[f] = mg;
                }
}

static void check_out(const amp_tensor *out, const double *want, const double *mag, const char *what) {
    if (!out) fail_msg("%s: NULL (%s)", what, amp_last_error());
    double *got = tc_values(out);
    int64_t n = amp_tensor_numel(out);
    double rt = tc_rtol(amp_tensor_dtype(out), 1.0);
    for (int64_t i = 0; i < n; i++) {
        double tol = rt * fabs(want[i]) + 4e-6 * (mag ? mag[i] : fabs(want[i])) + 1e-30;
        if (!(fabs(got[i] - want[i]) <= tol))
            fail_msg("%s: element %lld: got %.9g, expected %.9g (tol %.3g)", what, (long long)i, got[i], want[i], tol);
    }
    free(got);
}

static double grad_rtol(amp_dtype dt) { return dt == AMP_F32 ? 1e-4 : tc_rtol(dt, 2.0); }
static double grad_atol(amp_dtype dt) { return dt == AMP_F32 ? 2e-5 : (dt == AMP_F16 ? 4e-3 : 3e-2); }

typedef struct {
    int64_t N, C, H, W, O, kh, kw;
    amp_conv_params p;
    bool bias, unbatched;
} conv_case;

static void run_conv(test_rng *r, const conv_case *cc, amp_dtype dt, bool one_d, bool grad, bool transpose_x,
                     const char *what) {
    amp_scope *s = amp_scope_begin();
    cref c = {.N = cc->N, .C = cc->C, .H = cc->H, .W = cc->W, .O = cc->O, .kh = cc->kh, .kw = cc->kw, .bias = cc->bias};
    const amp_conv_params *p = &cc->p;
    int64_t G = p->groups ? p->groups : 1;
    c.G = G;
    if (one_d) {
        c.sh = 1, c.ph = 0, c.dh = 1;
        c.sw = p->stride[0] ? p->stride[0] : 1, c.pw = p->padding[0], c.dw = p->dilation[0] ? p->dilation[0] : 1;
    } else {
        c.sh = p->stride[0] ? p->stride[0] : 1, c.sw = p->stride[1] ? p->stride[1] : 1;
        c.ph = p->padding[0], c.pw = p->padding[1];
        c.dh = p->dilation[0] ? p->dilation[0] : 1, c.dw = p->dilation[1] ? p->dilation[1] : 1;
    }
    c.OH = (c.H + 2 * c.ph - c.dh * (c.kh - 1) - 1) / c.sh + 1;
    c.OW = (c.W + 2 * c.pw - c.dw * (c.kw - 1) - 1) / c.sw + 1;
    int64_t xs[4], ws[4], os[4];
    int xnd = 0, wnd = 0, ond = 0;
    if (!cc->unbatched) xs[xnd++] = cc->N, os[ond++] = cc->N;
    xs[xnd++] = cc->C;
    os[ond++] = cc->O;
    if (!one_d) xs[xnd++] = cc->H, os[ond++] = c.OH;
    xs[xnd++] = cc->W;
    os[ond++] = c.OW;
    ws[wnd++] = cc->O;
    ws[wnd++] = cc->C / G;
    if (!one_d) ws[wnd++] = cc->kh;
    ws[wnd++] = cc->kw;
    amp_tensor *x, *xt = NULL;
    if (transpose_x) { /* the same values through a non-contiguous view */
        int64_t ts[4];
        memcpy(ts, xs, sizeof ts);
        ts[xnd - 1] = xs[xnd - 2], ts[xnd - 2] = xs[xnd - 1];
        xt = mk(r, dt, xnd, ts, true);
        x = amp_transpose(xt, -1, -2);
        assert_false(amp_tensor_is_contiguous(x));
    } else {
        x = mk(r, dt, xnd, xs, true);
    }
    amp_tensor *w = mk(r, dt, wnd, ws, true);
    amp_tensor *b = cc->bias ? mk(r, dt, 1, &cc->O, true) : NULL;
    amp_tensor *out = one_d ? amp_conv1d(x, w, b, p) : amp_conv2d(x, w, b, p);
    tc_assert_shape(out, ond, os, what);
    assert_int_equal(amp_tensor_dtype(out), dt);
    assert_string_equal(amp_tensor_grad_fn_name(out), one_d ? "amp_conv1d" : "amp_conv2d");
    amp_tensor *ins[3] = {x, w, b};
    int n = b ? 3 : 2;
    double *vals[3] = {0};
    for (int i = 0; i < n; i++) vals[i] = tc_values(ins[i]);
    int64_t on = amp_tensor_numel(out);
    double *want = calloc((size_t)(on ? on : 1), sizeof(double)), *mag = calloc((size_t)(on ? on : 1), sizeof(double));
    c.mag = mag;
    conv_ref((const double *const *)vals, want, &c);
    c.mag = NULL;
    check_out(out, want, mag, what);
    if (grad && !transpose_x) tc_gradcheck(out, ins, n, conv_ref, &c, grad_rtol(dt), grad_atol(dt), what);
    if (grad && transpose_x) {
        /* dx through the transposed view equals dx of a contiguous leaf holding
         * the same values (whose gradient tc_gradcheck verifies) */
        amp_tensor *xl = amp_detach(amp_contiguous(x));
        amp_tensor_set_requires_grad(xl, true);
        amp_tensor *ins2[3] = {xl, w, b};
        amp_tensor *out2 = amp_conv2d(xl, w, b, p);
        amp_tensor *g = mk(r, dt, ond, os, false);
        assert_int_equal(amp_backward_ex(out, g, false), AMP_OK);
        assert_int_equal(amp_backward_ex(out2, g, true), AMP_OK);
        double *g1 = tc_values(amp_transpose(amp_tensor_grad(xt), -1, -2)), *g2 = tc_values(amp_tensor_grad(xl));
        tc_assert_close_n(g1, g2, amp_tensor_numel(xl), tc_rtol(dt, 1.0), 1e-6, "dx through a transposed view");
        free(g1), free(g2);
        amp_tensor_set_grad(w, NULL);
        if (b) amp_tensor_set_grad(b, NULL);
        tc_gradcheck(out2, ins2, n, conv_ref, &c, grad_rtol(dt), grad_atol(dt), what);
    }
    for (int i = 0; i < n; i++) free(vals[i]);
    test_free_all(want, mag);
    amp_scope_end(s);
}

static const conv_case CONV2D_CASES[] = {
    {2, 3, 5, 6, 4, 3, 3, {{0, 0}, {1, 1}, {0, 0}, 0}, true, false},   /* same padding */
    {2, 3, 7, 6, 4, 3, 2, {{2, 1}, {1, 0}, {1, 2}, 0}, false, false},  /* stride, dilation */
    {1, 4, 5, 5, 6, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 2}, true, false},   /* groups 2 */
    {2, 3, 6, 6, 3, 3, 3, {{2, 2}, {1, 1}, {0, 0}, 3}, false, false},  /* depthwise */
    {2, 3, 4, 5, 5, 1, 1, {{0, 0}, {0, 0}, {0, 0}, 0}, true, false},   /* 1x1: x is the column matrix */
    {2, 3, 5, 5, 2, 1, 1, {{2, 2}, {0, 0}, {0, 0}, 0}, true, false},   /* 1x1 with stride */
    {1, 3, 6, 5, 2, 3, 3, {{2, 2}, {2, 2}, {0, 0}, 0}, true, true},    /* unbatched [C,H,W] */
    {1, 2, 3, 3, 2, 3, 3, {{0, 0}, {0, 0}, {0, 0}, 0}, true, false},   /* kernel = image */
    {3, 2, 4, 3, 3, 2, 2, {{1, 2}, {0, 1}, {2, 1}, 0}, true, false},   /* odd sizes */
};

static void t_conv2d(void **state) {
    (void)state;
    test_rng r = {21};
    for (int d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof CONV2D_CASES / sizeof *CONV2D_CASES; i++) {
            char what[64];
            snprintf(what, sizeof what, "conv2d case %zu %s", i, amp_dtype_name(DTS[d]));
            run_conv(&r, &CONV2D_CASES[i], DTS[d], false, true, false, what);
        }
}

static void t_conv2d_views_blocks(void **state) {
    (void)state;
    test_rng r = {22};
    /* a transposed (non-contiguous) input */
    for (int d = 0; d < 3; d++) run_conv(&r, &CONV2D_CASES[1], DTS[d], false, true, true, "conv2d transposed x");
    /* blocks of one image (column buffer limit) give the same results */
    size_t old = amp__conv_set_block_bytes(1);
    for (int d = 0; d < 3; d++) {
        run_conv(&r, &CONV2D_CASES[0], DTS[d], false, true, false, "conv2d one image per block");
        run_conv(&r, &CONV2D_CASES[8], DTS[d], false, true, false, "conv2d one image per block (odd)");
    }
    amp__conv_set_block_bytes(old);
    /* empty batch: [0,3,5,5] -> [0,4,5,5] */
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = amp_tensor_zeros(AMP_F32, 4, AMP_SHAPE(0, 3, 5, 5)), *w = mk(&r, AMP_F32, 4, AMP_SHAPE(4, 3, 3, 3), true);
    amp_conv_params p = {{0, 0}, {1, 1}, {0, 0}, 0};
    amp_tensor *o = amp_conv2d(x, w, NULL, &p);
    tc_assert_shape(o, 4, AMP_SHAPE(0, 4, 5, 5), "empty batch");
    assert_int_equal(amp_backward_ex(o, amp_tensor_zeros(AMP_F32, 4, AMP_SHAPE(0, 4, 5, 5)), false), AMP_OK);
    double *gw = tc_values(amp_tensor_grad(w));
    for (int i = 0; i < 4 * 27; i++) assert_true(gw[i] == 0.0);
    free(gw);
    /* NULL params are torch's defaults (stride 1, no padding) */
    amp_tensor *x2 = mk(&r, AMP_F32, 4, AMP_SHAPE(1, 3, 5, 5), false);
    amp_tensor *o1 = amp_conv2d(x2, w, NULL, NULL);
    amp_conv_params zero = {{0, 0}, {0, 0}, {0, 0}, 0};
    amp_tensor *o2 = amp_conv2d(x2, w, NULL, &zero);
    tc_assert_shape(o1, 4, AMP_SHAPE(1, 4, 3, 3), "default params");
    double *v1 = tc_values(o1), *v2 = tc_values(o2);
    for (int i = 0; i < 36; i++) assert_true(v1[i] == v2[i]);
    free(v1), free(v2);
    amp_scope_end(s);
}

/* im2col / col2im against their plain reference loops */
static void t_im2col_reference(void **state) {
    (void)state;
    const amp_conv_geom gs[] = {
        {3, 7, 6, 3, 2, 2, 1, 1, 0, 1, 2, 0, 0},
        {2, 5, 9, 2, 3, 1, 3, 1, 1, 2, 1, 0, 0},
        {1, 4, 4, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0},
        /* stride 1 along the width (the AVX-512 kernels): 3x3 "same" on 28
         * and 14 wide, widths past one vector (16 f32, 32 bf16), padding 2,
         * a 1 x 5 kernel wider than the pad, row stride and dilation 2 */
        {2, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0},
        {3, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0},
        {2, 6, 40, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0},
        {1, 5, 70, 5, 5, 1, 1, 2, 2, 1, 1, 0, 0},
        {2, 7, 9, 1, 5, 1, 1, 0, 1, 1, 1, 0, 0},
        {2, 9, 17, 3, 2, 2, 1, 1, 0, 2, 1, 0, 0},
        {2, 9, 12, 3, 3, 1, 1, 2, 1, 2, 1, 0, 0},
    };
    for (size_t t = 0; t < sizeof gs / sizeof *gs; t++) {
        amp_conv_geom g = gs[t];
        g.OH = (g.H + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
        g.OW = (g.W + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
        int64_t xn = g.C * g.H * g.W, cn = g.C * g.kh * g.kw * g.OH * g.OW;
        float *x = malloc(sizeof(float) * (size_t)xn), *c1 = malloc(sizeof(float) * (size_t)cn),
              *c2 = malloc(sizeof(float) * (size_t)cn);
        uint16_t *h = malloc(2 * (size_t)xn), *h1 = malloc(2 * (size_t)cn), *h2 = malloc(2 * (size_t)cn);
        for (int64_t i = 0; i < xn; i++) x[i] = (float)(i + 1), h[i] = (uint16_t)(i + 1);
        int64_t S = g.OH * g.OW;
        amp_im2col(x, c1, S, &g, 4);
        amp_im2col_reference(x, c2, S, &g, 4);
        assert_memory_equal(c1, c2, sizeof(float) * (size_t)cn);
        amp_im2col(h, h1, S, &g, 2);
        amp_im2col_reference(h, h2, S, &g, 2);
        assert_memory_equal(h1, h2, 2 * (size_t)cn);
        /* two images side by side (row stride 2S): the second's rows at +S */
        float *w1 = calloc(2 * (size_t)cn, sizeof(float)), *w2 = calloc(2 * (size_t)cn, sizeof(float));
        amp_im2col(x, w1 + S, 2 * S, &g, 4);
        amp_im2col_reference(x, w2 + S, 2 * S, &g, 4);
        assert_memory_equal(w1, w2, 2 * sizeof(float) * (size_t)cn);
        for (int64_t rr = 0; rr < cn / S; rr++) assert_memory_equal(w1 + rr * 2 * S + S, c2 + rr * S, sizeof(float) * (size_t)S);
        free(w1), free(w2);
        /* col2im sums in a fixed order: values that round differently in another order */
        for (int64_t i = 0; i < cn; i++) c1[i] = (float)(((i * 7) % 13) - 6) * (1.0f + (float)(i % 5) * 0x1p-20f) * ldexpf(1.0f, (int)(i % 9) * 3 - 12);
        float *d1 = calloc((size_t)xn, sizeof(float)), *d2 = calloc((size_t)xn, sizeof(float));
        amp_col2im_f32(c1, d1, &g);
        amp_col2im_reference_f32(c1, d2, &g);
        assert_memory_equal(d1, d2, sizeof(float) * (size_t)xn);
        free(x), free(c1), free(c2), free(h), free(h1), free(h2), free(d1), free(d2);
    }
}

static void t_conv1d(void **state) {
    (void)state;
    test_rng r = {23};
    const conv_case cases[] = {
        {2, 3, 1, 10, 4, 1, 3, {{2, 0}, {1, 0}, {2, 0}, 0}, true, false},
        {1, 3, 1, 8, 2, 1, 2, {{0, 0}, {0, 0}, {0, 0}, 0}, true, true}, /* unbatched [C,L] */
        {2, 6, 1, 7, 3, 1, 3, {{1, 0}, {2, 0}, {1, 0}, 3}, false, false},
        {2, 4, 1, 5, 3, 1, 1, {{0, 0}, {0, 0}, {0, 0}, 0}, true, false},
    };
    for (int d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            char what[64];
            snprintf(what, sizeof what, "conv1d case %zu %s", i, amp_dtype_name(DTS[d]));
            run_conv(&r, &cases[i], DTS[d], true, true, false, what);
        }
}

/* ---- pooling references ---------------------------------------------------------------------- */
typedef struct {
    int64_t P, H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw;
    bool ceil, include_pad;
    int kind; /* 0 max, 1 avg, 2 adaptive */
    int64_t *argmax;
    double *mag; /* optional: mean |x| over the window (error scale) */
} pref;

static int64_t ref_out(int64_t in, int64_t k, int64_t p, int64_t s, int64_t d, bool ceil_mode) {
    double span = (double)(in + 2 * p - d * (k - 1) - 1) / (double)s;
    int64_t o = (int64_t)(ceil_mode ? ceil(span) : floor(span)) + 1;
    if (ceil_mode && (o - 1) * s >= in + p) o--; /* the last window must start inside the input or left padding */
    return o;
}

static void pool_ref(const double *const *in, double *out, void *vc) {
    const pref *c = vc;
    const double *x = in[0];
    for (int64_t p = 0; p < c->P; p++)
        for (int64_t oh = 0; oh < c->OH; oh++)
            for (int64_t ow = 0; ow < c->OW; ow++) {
                int64_t f = (p * c->OH + oh) * c->OW + ow;
                if (c->kind == 0) {
                    double m = -INFINITY;
                    int64_t am = -1;
                    for (int64_t i = 0; i < c->kh; i++)
                        for (int64_t j = 0; j < c->kw; j++) {
                            int64_t h = oh * c->sh - c->ph + i * c->dh, w = ow * c->sw - c->pw + j * c->dw;
                            if (h < 0 || h >= c->H || w < 0 || w >= c->W) continue;
                            double v = x[(p * c->H + h) * c->W + w];
                            if (am < 0 || v > m || (isnan(v) && !isnan(m))) m = v, am = h * c->W + w;
                        }
                    out[f] = m;
                    if (c->argmax) c->argmax[f] = am;
                    if (c->mag) c->mag[f] = fabs(m);
                } else if (c->kind == 1) {
                    double s = 0, sa = 0;
                    int64_t cnt_in = 0, cnt_pad = 0;
                    for (int64_t i = 0; i < c->kh; i++)
                        for (int64_t j = 0; j < c->kw; j++) {
                            int64_t h = oh * c->sh - c->ph + i, w = ow * c->sw - c->pw + j;
                            /* positions inside the padded input count for count_include_pad */
                            if (h < c->H + c->ph && w < c->W + c->pw) cnt_pad++;
                            if (h < 0 || h >= c->H || w < 0 || w >= c->W) continue;
                            s += x[(p * c->H + h) * c->W + w];
                            sa += fabs(x[(p * c->H + h) * c->W + w]);
                            cnt_in++;
                        }
                    out[f] = s / (double)(c->include_pad ? cnt_pad : cnt_in);
                    if (c->mag) c->mag[f] = sa / (double)(c->include_pad ? cnt_pad : cnt_in);
                } else {
                    int64_t h0 = (int64_t)floor((double)(oh * c->H) / c->OH), h1 = (int64_t)ceil((double)((oh + 1) * c->H) / c->OH);
                    int64_t w0 = (int64_t)floor((double)(ow * c->W) / c->OW), w1 = (int64_t)ceil((double)((ow + 1) * c->W) / c->OW);
                    double s = 0, sa = 0;
                    for (int64_t h = h0; h < h1; h++)
                        for (int64_t w = w0; w < w1; w++) {
                            s += x[(p * c->H + h) * c->W + w];
                            sa += fabs(x[(p * c->H + h) * c->W + w]);
                        }
                    out[f] = s / (double)((h1 - h0) * (w1 - w0));
                    if (c->mag) c->mag[f] = sa / (double)((h1 - h0) * (w1 - w0));
                }
            }
}

/* Distinct values exactly representable in bf16 (k/64, |k| <= 256), shuffled:
 * no ties, so the max is differentiable. */
static amp_tensor *distinct(test_rng *r, amp_dtype dt, int nd, const int64_t *s) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= s[i];
    assert_true(n <= 512);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = (double)(i - n / 2) / 64.0;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(test_rng_u64(r) % (uint64_t)(i + 1));
        double t = v[i];
        v[i] = v[j], v[j] = t;
    }
    amp_tensor *t = tc_from_values(dt, nd, s, v);
    free(v);
    assert_int_equal(amp_tensor_set_requires_grad(t, true), AMP_OK);
    return t;
}

typedef struct {
    int nd;
    int64_t xs[4];
    amp_pool_params p;
} pool_case;

static void run_pool(test_rng *r, const pool_case *pc, int kind, amp_dtype dt, const char *what) {
    amp_scope *s = amp_scope_begin();
    const amp_pool_params *p = &pc->p;
    pref c = {.kind = kind};
    c.H = pc->xs[pc->nd - 2], c.W = pc->xs[pc->nd - 1];
    c.P = 1;
    for (int i = 0; i < pc->nd - 2; i++) c.P *= pc->xs[i];
    c.kh = p->kernel[0], c.kw = p->kernel[1];
    c.sh = p->stride[0] ? p->stride[0] : c.kh, c.sw = p->stride[1] ? p->stride[1] : c.kw;
    c.ph = p->padding[0], c.pw = p->padding[1];
    c.dh = p->dilation[0] ? p->dilation[0] : 1, c.dw = p->dilation[1] ? p->dilation[1] : 1;
    c.ceil = p->ceil_mode, c.include_pad = !p->exclude_pad;
    c.OH = ref_out(c.H, c.kh, c.ph, c.sh, c.dh, c.ceil);
    c.OW = ref_out(c.W, c.kw, c.pw, c.sw, c.dw, c.ceil);
    amp_tensor *x = kind == 0 ? distinct(r, dt, pc->nd, pc->xs) : mk(r, dt, pc->nd, pc->xs, true);
    amp_tensor *idx = NULL;
    amp_tensor *out = kind == 0 ? amp_max_pool2d(x, p, &idx) : amp_avg_pool2d(x, p);
    int64_t os[4];
    memcpy(os, pc->xs, sizeof os);
    os[pc->nd - 2] = c.OH, os[pc->nd - 1] = c.OW;
    tc_assert_shape(out, pc->nd, os, what);
    assert_int_equal(amp_tensor_dtype(out), dt);
    double *xv = tc_values(x);
    int64_t on = amp_tensor_numel(out);
    double *want = malloc(sizeof(double) * (size_t)on);
    int64_t *am = malloc(sizeof(int64_t) * (size_t)on);
    double *mag = malloc(sizeof(double) * (size_t)on);
    c.argmax = am;
    c.mag = mag;
    pool_ref((const double *const *)&xv, want, &c);
    c.argmax = NULL;
    c.mag = NULL;
    check_out(out, want, mag, what);
    free(mag);
    if (kind == 0) {
        tc_assert_shape(idx, pc->nd, os, "indices shape");
        assert_int_equal(amp_tensor_dtype(idx), AMP_I64);
        double *iv = tc_values(idx);
        for (int64_t i = 0; i < on; i++)
            if (iv[i] != (double)am[i]) fail_msg("%s: index %lld: got %g, expected %lld", what, (long long)i, iv[i], (long long)am[i]);
        free(iv);
    }
    amp_tensor *ins[1] = {x};
    tc_gradcheck(out, ins, 1, pool_ref, &c, grad_rtol(dt), grad_atol(dt), what);
    free(xv), free(want), free(am);
    amp_scope_end(s);
}

#define PP(k0, k1, s0, s1, p0, p1, d0, d1, ceil, excl) {{k0, k1}, {s0, s1}, {p0, p1}, {d0, d1}, ceil, excl}

static void t_max_pool2d(void **state) {
    (void)state;
    test_rng r = {24};
    const pool_case cases[] = {
        {4, {2, 3, 7, 8}, PP(3, 2, 2, 2, 1, 1, 0, 0, false, false)},
        {4, {1, 2, 9, 10}, PP(3, 3, 2, 2, 1, 1, 2, 2, true, false)}, /* dilation + ceil */
        {4, {1, 2, 6, 6}, PP(2, 2, 0, 0, 0, 0, 0, 0, false, false)}, /* stride defaults to kernel */
        {3, {2, 5, 5}, PP(3, 3, 1, 1, 1, 1, 0, 0, false, false)},    /* unbatched, overlapping */
        {4, {1, 1, 5, 5}, PP(2, 2, 2, 2, 0, 0, 0, 0, true, false)},  /* ceil: last window hangs off */
        {4, {1, 2, 5, 7}, PP(3, 2, 2, 3, 1, 0, 1, 2, true, false)},
    };
    for (int d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            char what[64];
            snprintf(what, sizeof what, "max_pool2d case %zu %s", i, amp_dtype_name(DTS[d]));
            run_pool(&r, &cases[i], 0, DTS[d], what);
        }
    amp_scope *s = amp_scope_begin();
    /* a NaN wins its window and its index is reported */
    amp_tensor *x = amp_tensor_zeros(AMP_F32, 4, AMP_SHAPE(1, 1, 2, 4));
    amp_tensor_set(x, AMP_SHAPE(0, 0, 1, 0), NAN);
    amp_tensor_set(x, AMP_SHAPE(0, 0, 0, 3), 5.0);
    amp_tensor *idx = NULL;
    amp_pool_params p = PP(2, 2, 0, 0, 0, 0, 0, 0, false, false);
    amp_tensor *o = amp_max_pool2d(x, &p, &idx);
    assert_true(isnan(amp_tensor_get(o, AMP_SHAPE(0, 0, 0, 0))));
    assert_true(amp_tensor_get(o, AMP_SHAPE(0, 0, 0, 1)) == 5.0);
    assert_true(amp_tensor_get(idx, AMP_SHAPE(0, 0, 0, 0)) == 4.0);
    assert_true(amp_tensor_get(idx, AMP_SHAPE(0, 0, 0, 1)) == 3.0);
    /* ties go to the first position; an empty batch gives an empty output */
    amp_tensor *ones = amp_tensor_ones(AMP_BF16, 4, AMP_SHAPE(1, 1, 2, 2));
    o = amp_max_pool2d(ones, &p, &idx);
    assert_true(amp_tensor_item(idx) == 0.0);
    o = amp_max_pool2d(amp_tensor_zeros(AMP_F16, 4, AMP_SHAPE(0, 2, 4, 4)), &p, NULL);
    tc_assert_shape(o, 4, AMP_SHAPE(0, 2, 2, 2), "empty batch");
    amp_scope_end(s);
}


/* The 2 x 2 / stride 2 max pool in the tensor's own dtype (AVX-512) and its
 * disjoint-window backward give the bits of the general f32 loops on the
 * widened input, rounded: values with NaNs (quiet and signalling), infinities,
 * signed zeros and ties, widths that leave vector tails, many planes (the
 * threaded split), on every path (on paths without AVX-512 this compares the
 * general loop with itself). */
static uint16_t half_bits(amp_dtype dt, float v) { return dt == AMP_F16 ? amp_f32_to_f16(v) : amp_f32_to_bf16(v); }
static float half_val(amp_dtype dt, uint16_t h) { return dt == AMP_F16 ? amp_f16_to_f32(h) : amp_bf16_to_f32(h); }

static void t_max_pool2d_k2_bits(void **state) {
    (void)state;
    test_rng r = {2424};
    static const int64_t shapes[][4] = {{2, 3, 28, 28}, {1, 2, 5, 7}, {3, 1, 2, 2}, {1, 4, 9, 70}, {128, 8, 14, 14},
                                        {1, 1, 3, 33}};
    for (int d = 0; d < 3; d++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            amp_scope *sc = amp_scope_begin();
            const amp_dtype dt = DTS[d];
            const int64_t *sh = shapes[si];
            const int64_t n = sh[0] * sh[1] * sh[2] * sh[3];
            amp_tensor *x = amp_tensor_empty(dt, 4, sh);
            void *xd = amp_tensor_data(x);
            for (int64_t i = 0; i < n; i++) {
                const uint32_t u = test_rng_u32(&r) % 40;
                float v = (float)((int)(test_rng_u32(&r) % 7) - 3); /* small integers: many ties */
                if (u == 0) v = NAN;
                if (u == 1) v = -INFINITY;
                if (u == 2) v = INFINITY;
                if (u == 3) v = -0.0f;
                if (dt == AMP_F32) {
                    ((float *)xd)[i] = v;
                    if (u == 4) ((uint32_t *)xd)[i] = 0x7f800001u | (test_rng_u32(&r) & 0x80000000u); /* sNaN */
                } else {
                    ((uint16_t *)xd)[i] = half_bits(dt, v);
                    if (u == 4) ((uint16_t *)xd)[i] = dt == AMP_BF16 ? 0x7f81 : 0x7c01; /* sNaN */
                }
            }
            /* x2: the same values; pooled without asking for the indices, the
             * op keeps one-byte window slots for its backward */
            amp_tensor *x2 = amp_tensor_empty(dt, 4, sh);
            memcpy(amp_tensor_data(x2), xd, (size_t)n * amp_dtype_size(dt));
            assert_int_equal(amp_tensor_set_requires_grad(x, true), AMP_OK);
            assert_int_equal(amp_tensor_set_requires_grad(x2, true), AMP_OK);
            amp_pool_params p = PP(2, 2, 0, 0, 0, 0, 0, 0, false, false);
            amp_tensor *idx = NULL;
            amp_tensor *y = amp_max_pool2d(x, &p, &idx);
            amp_tensor *y2 = amp_max_pool2d(x2, &p, NULL);
            assert_non_null(y);
            assert_non_null(y2);
            assert_memory_equal(amp_tensor_data(y), amp_tensor_data(y2), (size_t)amp_tensor_numel(y) * amp_dtype_size(dt));
            /* the general loop on the widened input */
            const int64_t planes = sh[0] * sh[1], OH = sh[2] / 2, OW = sh[3] / 2, S = OH * OW;
            amp_pool_geom g = {.H = sh[2], .W = sh[3], .OH = OH, .OW = OW, .kh = 2, .kw = 2, .sh = 2, .sw = 2, .dh = 1,
                               .dw = 1};
            float *xf = malloc(sizeof(float) * (size_t)n), *yf = malloc(sizeof(float) * (size_t)(planes * S));
            int64_t *ii = malloc(sizeof(int64_t) * (size_t)(planes * S));
            for (int64_t i = 0; i < n; i++)
                xf[i] = dt == AMP_F32 ? ((float *)xd)[i] : half_val(dt, ((uint16_t *)xd)[i]);
            amp_max_pool2d_f32(xf, yf, ii, planes, &g);
            const void *yd = amp_tensor_data(y);
            const int64_t *id = amp_tensor_data(idx);
            for (int64_t i = 0; i < planes * S; i++) {
                bool ok;
                if (dt == AMP_F32) {
                    float a = ((const float *)yd)[i], b = yf[i];
                    ok = memcmp(&a, &b, 4) == 0 || (isnan(a) && isnan(b) && ((const uint32_t *)yd)[i] == (0x00400000u | *(uint32_t *)&yf[i]));
                } else {
                    ok = ((const uint16_t *)yd)[i] == half_bits(dt, yf[i]);
                }
                if (!ok || id[i] != ii[i])
                    fail_msg("max_pool2d 2x2 %s shape %zu: output %lld differs from the general loop (index %lld vs %lld)",
                             amp_dtype_name(dt), si, (long long)i, (long long)id[i], (long long)ii[i]);
            }
            /* backward: dy with signed zeros and a NaN, against the general scatter rounded to dt */
            amp_tensor *gy = amp_tensor_empty(dt, 4, AMP_SHAPE(sh[0], sh[1], OH, OW));
            float *gf = malloc(sizeof(float) * (size_t)(planes * S)), *dxf = malloc(sizeof(float) * (size_t)n);
            for (int64_t i = 0; i < planes * S; i++) {
                float v = (float)test_rng_normal(&r);
                if (i % 17 == 0) v = -0.0f;
                if (i % 53 == 0) v = NAN;
                if (dt == AMP_F32) ((float *)amp_tensor_data(gy))[i] = v;
                else ((uint16_t *)amp_tensor_data(gy))[i] = half_bits(dt, v);
                gf[i] = dt == AMP_F32 ? v : half_val(dt, half_bits(dt, v));
            }
            assert_int_equal(amp_backward_ex(y, gy, false), AMP_OK);
            assert_int_equal(amp_backward_ex(y2, gy, false), AMP_OK);
            amp_max_pool2d_backward_f32(gf, ii, dxf, planes, &g);
            const amp_tensor *gx = amp_tensor_grad(x), *gx2 = amp_tensor_grad(x2);
            assert_int_equal(amp_tensor_dtype(gx), dt);
            assert_memory_equal(amp_tensor_data(gx), amp_tensor_data(gx2), (size_t)n * amp_dtype_size(dt));
            for (int64_t i = 0; i < n; i++) {
                bool ok;
                if (dt == AMP_F32) {
                    float a = ((const float *)amp_tensor_data(gx))[i];
                    ok = memcmp(&a, &dxf[i], 4) == 0 || (isnan(a) && isnan(dxf[i]));
                } else {
                    ok = ((const uint16_t *)amp_tensor_data(gx))[i] == half_bits(dt, dxf[i]);
                }
                if (!ok) fail_msg("max_pool2d 2x2 backward %s shape %zu: dx %lld differs", amp_dtype_name(dt), si, (long long)i);
            }
            free(xf), free(yf), free(ii), free(gf), free(dxf);
            amp_scope_end(sc);
        }
}

static void t_avg_pool2d(void **state) {
    (void)state;
    test_rng r = {25};
    const pool_case cases[] = {
        {4, {2, 2, 6, 7}, PP(3, 3, 2, 2, 1, 1, 0, 0, true, false)},  /* ceil, count_include_pad */
        {4, {2, 2, 6, 7}, PP(3, 3, 2, 2, 1, 1, 0, 0, true, true)},   /* ceil, exclude pad */
        {3, {3, 5, 5}, PP(2, 2, 0, 0, 0, 0, 0, 0, false, false)},    /* defaults, unbatched */
        {4, {1, 2, 5, 6}, PP(2, 3, 1, 2, 1, 1, 0, 0, false, true)},
        {4, {1, 1, 5, 5}, PP(2, 2, 2, 2, 0, 0, 0, 0, true, false)},  /* hanging window: divisor 1 */
        {4, {1, 1, 4, 4}, PP(3, 3, 2, 2, 1, 1, 0, 0, true, false)},
    };
    for (int d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            char what[64];
            snprintf(what, sizeof what, "avg_pool2d case %zu %s", i, amp_dtype_name(DTS[d]));
            run_pool(&r, &cases[i], 1, DTS[d], what);
        }
    /* exact values: the hanging window of a 5x5 ones image (k2 s2 ceil) averages
     * one element -> 1, and with padding 1 and count_include_pad the corner is 1/4 */
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = amp_tensor_ones(AMP_F32, 4, AMP_SHAPE(1, 1, 5, 5));
    amp_pool_params p = PP(2, 2, 2, 2, 0, 0, 0, 0, true, false);
    amp_tensor *o = amp_avg_pool2d(x, &p);
    tc_assert_shape(o, 4, AMP_SHAPE(1, 1, 3, 3), "hanging");
    assert_true(amp_tensor_get(o, AMP_SHAPE(0, 0, 2, 2)) == 1.0);
    amp_pool_params p2 = PP(2, 2, 2, 2, 1, 1, 0, 0, false, false);
    o = amp_avg_pool2d(x, &p2);
    assert_true(amp_tensor_get(o, AMP_SHAPE(0, 0, 0, 0)) == 0.25);
    p2.exclude_pad = true;
    o = amp_avg_pool2d(x, &p2);
    assert_true(amp_tensor_get(o, AMP_SHAPE(0, 0, 0, 0)) == 1.0);
    amp_scope_end(s);
}

static void t_adaptive_avg_pool2d(void **state) {
    (void)state;
    test_rng r = {26};
    const struct {
        int nd;
        int64_t xs[4], oh, ow;
    } cases[] = {
        {4, {2, 3, 7, 9}, 3, 4}, {4, {1, 2, 3, 3}, 5, 4}, {3, {2, 4, 4}, 1, 1}, {4, {1, 2, 6, 4}, 2, 2}, {4, {1, 1, 5, 7}, 5, 7},
    };
    for (int d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            amp_scope *s = amp_scope_begin();
            char what[64];
            snprintf(what, sizeof what, "adaptive case %zu %s", i, amp_dtype_name(DTS[d]));
            int nd = cases[i].nd;
            amp_tensor *x = mk(&r, DTS[d], nd, cases[i].xs, true);
            amp_tensor *o = amp_adaptive_avg_pool2d(x, cases[i].oh, cases[i].ow);
            int64_t os[4];
            memcpy(os, cases[i].xs, sizeof os);
            os[nd - 2] = cases[i].oh, os[nd - 1] = cases[i].ow;
            tc_assert_shape(o, nd, os, what);
            pref c = {.kind = 2, .H = cases[i].xs[nd - 2], .W = cases[i].xs[nd - 1], .OH = cases[i].oh, .OW = cases[i].ow};
            c.P = amp_tensor_numel(x) / (c.H * c.W);
            double *xv = tc_values(x), *want = malloc(sizeof(double) * (size_t)amp_tensor_numel(o));
            double *mag = malloc(sizeof(double) * (size_t)amp_tensor_numel(o));
            c.mag = mag;
            pool_ref((const double *const *)&xv, want, &c);
            c.mag = NULL;
            check_out(o, want, mag, what);
            free(mag);
            amp_tensor *ins[1] = {x};
            tc_gradcheck(o, ins, 1, pool_ref, &c, grad_rtol(DTS[d]), grad_atol(DTS[d]), what);
            free(xv), free(want);
            amp_scope_end(s);
        }
    /* output size = input size is the identity */
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = mk(&r, AMP_F32, 4, AMP_SHAPE(1, 2, 3, 4), false);
    amp_tensor *o = amp_adaptive_avg_pool2d(x, 3, 4);
    double *a = tc_values(x), *b = tc_values(o);
    for (int i = 0; i < 24; i++) assert_true(a[i] == b[i]);
    free(a), free(b);
    amp_scope_end(s);
}

/* ---- golden ---------------------------------------------------------------------------------------- */
static amp_tensor *gold_call(const char *full, amp_tensor **in, amp_tensor **idx, void *ctx) {
    (void)ctx;
    const char *name = strncmp(full, "bf16_", 5) ? full : full + 5; /* same call, bf16 data */
    if (!strcmp(name, "conv2d")) return amp_conv2d(in[0], in[1], in[2], &(amp_conv_params){{2, 1}, {1, 0}, {1, 2}, 1});
    if (!strcmp(name, "conv2d_groups")) return amp_conv2d(in[0], in[1], NULL, &(amp_conv_params){{1, 1}, {1, 1}, {1, 1}, 2});
    if (!strcmp(name, "conv2d_1x1")) return amp_conv2d(in[0], in[1], in[2], NULL);
    if (!strcmp(name, "conv2d_unbatched")) return amp_conv2d(in[0], in[1], in[2], &(amp_conv_params){{2, 2}, {2, 2}, {0, 0}, 0});
    if (!strcmp(name, "conv1d")) return amp_conv1d(in[0], in[1], in[2], &(amp_conv_params){{2, 0}, {1, 0}, {2, 0}, 0});
    if (!strcmp(name, "max_pool")) return amp_max_pool2d(in[0], &(amp_pool_params)PP(3, 2, 2, 2, 1, 1, 0, 0, false, false), idx);
    if (!strcmp(name, "max_pool_ceil_dil"))
        return amp_max_pool2d(in[0], &(amp_pool_params)PP(3, 3, 2, 2, 1, 1, 2, 2, true, false), idx);
    if (!strcmp(name, "avg_pool_ceil")) return amp_avg_pool2d(in[0], &(amp_pool_params)PP(3, 3, 2, 2, 1, 1, 0, 0, true, false));
    if (!strcmp(name, "avg_pool_ceil_excl"))
        return amp_avg_pool2d(in[0], &(amp_pool_params)PP(3, 3, 2, 2, 1, 1, 0, 0, true, true));
    if (!strcmp(name, "avg_pool_default")) return amp_avg_pool2d(in[0], &(amp_pool_params)PP(2, 2, 0, 0, 0, 0, 0, 0, false, false));
    if (!strcmp(name, "adaptive")) return amp_adaptive_avg_pool2d(in[0], 3, 4);
    if (!strcmp(name, "adaptive_up")) return amp_adaptive_avg_pool2d(in[0], 5, 4);
    fail_msg("golden: unknown case %s", name);
    return NULL;
}

static void t_golden(void **state) {
    (void)state;
    static const char *names[] = {"conv2d",   "conv2d_groups",     "conv2d_1x1",    "conv2d_unbatched",
                                  "conv1d",   "max_pool",          "max_pool_ceil_dil", "avg_pool_ceil",
                                  "avg_pool_ceil_excl", "avg_pool_default", "adaptive", "adaptive_up", "bf16_conv2d", "bf16_conv1d", "bf16_max_pool", "bf16_avg_pool_ceil", "bf16_adaptive"};
    const golden_op_case c = {"out", "gout", 0, gold_call, NULL, golden_tol_bf16_ulp};
    golden_replay_all("golden_matmul_conv.bin", names, sizeof names / sizeof *names, &c);
}

/* ---- bad input ---------------------------------------------------------------------------------------- */
static void t_bad_inputs(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = amp_tensor_ones(AMP_F32, 4, AMP_SHAPE(1, 3, 5, 5)), *w = amp_tensor_ones(AMP_F32, 4, AMP_SHAPE(4, 3, 3, 3));
    amp_tensor *b = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(4)), *b5 = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(5));
    amp_tensor *xi = amp_tensor_zeros(AMP_I64, 4, AMP_SHAPE(1, 3, 5, 5)), *x2 = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(5, 5));
    amp_tensor *w3 = amp_tensor_ones(AMP_F32, 3, AMP_SHAPE(4, 3, 3)), *w2c = amp_tensor_ones(AMP_F32, 4, AMP_SHAPE(4, 2, 3, 3));
    amp_tensor *wbig = amp_tensor_ones(AMP_F32, 4, AMP_SHAPE(4, 3, 7, 7));
    amp_conv_params neg = {{-1, 1}, {0, 0}, {0, 0}, 0}, g2 = {{0, 0}, {0, 0}, {0, 0}, 2}, gneg = {{0, 0}, {0, 0}, {0, 0}, -1};
    /* conv2d */
    tc_assert_fails(amp_conv2d(NULL, w, b, NULL), "amp_conv2d");
    tc_assert_fails(amp_conv2d(x, NULL, b, NULL), "amp_conv2d");
    tc_assert_fails(amp_conv2d(xi, w, b, NULL), "amp_conv2d: x has dtype i64");
    tc_assert_fails(amp_conv2d(x, w, amp_tensor_zeros(AMP_I32, 1, AMP_SHAPE(4)), NULL), "amp_conv2d");
    tc_assert_fails(amp_conv2d(x2, w, b, NULL), "amp_conv2d: x must be 3-d");
    tc_assert_fails(amp_conv2d(x, w3, b, NULL), "amp_conv2d: w must be 4-d");
    tc_assert_fails(amp_conv2d(x, w2c, b, NULL), "amp_conv2d: x [1,3,5,5] has 3 channels");
    tc_assert_fails(amp_conv2d(x, w, b5, NULL), "amp_conv2d: b has shape [5]");
    tc_assert_fails(amp_conv2d(x, wbig, NULL, NULL), "amp_conv2d");
    tc_assert_fails(amp_conv2d(x, w, b, &neg), "amp_conv2d");
    tc_assert_fails(amp_conv2d(x, w, b, &g2), "amp_conv2d: groups 2");
    tc_assert_fails(amp_conv2d(x, w, b, &gneg), "amp_conv2d");
    /* conv1d */
    amp_tensor *x1 = amp_tensor_ones(AMP_F32, 3, AMP_SHAPE(2, 3, 6));
    tc_assert_fails(amp_conv1d(NULL, w3, NULL, NULL), "amp_conv1d");
    tc_assert_fails(amp_conv1d(x1, NULL, NULL, NULL), "amp_conv1d");
    tc_assert_fails(amp_conv1d(amp_tensor_zeros(AMP_I32, 3, AMP_SHAPE(2, 3, 6)), w3, NULL, NULL), "amp_conv1d");
    tc_assert_fails(amp_conv1d(x, w3, NULL, NULL), "amp_conv1d: x must be 2-d");
    tc_assert_fails(amp_conv1d(x1, w, NULL, NULL), "amp_conv1d: w must be 3-d");
    tc_assert_fails(amp_conv1d(x1, amp_tensor_ones(AMP_F32, 3, AMP_SHAPE(4, 2, 3)), NULL, NULL), "amp_conv1d");
    tc_assert_fails(amp_conv1d(x1, amp_tensor_ones(AMP_F32, 3, AMP_SHAPE(4, 3, 9)), NULL, NULL), "amp_conv1d");
    tc_assert_fails(amp_conv1d(x1, w3, b5, NULL), "amp_conv1d");
    /* pools */
    amp_pool_params p = PP(2, 2, 0, 0, 0, 0, 0, 0, false, false);
    amp_pool_params k0 = PP(0, 2, 0, 0, 0, 0, 0, 0, false, false), pad = PP(2, 2, 0, 0, 2, 0, 0, 0, false, false);
    amp_pool_params big = PP(7, 7, 0, 0, 0, 0, 0, 0, false, false), dil = PP(2, 2, 0, 0, 0, 0, 2, 2, false, false);
    amp_pool_params nst = PP(2, 2, -1, 1, 0, 0, 0, 0, false, false);
    amp_tensor *xe = amp_tensor_ones(AMP_F32, 4, AMP_SHAPE(1, 3, 0, 5));
    amp_tensor *idx = (amp_tensor *)1;
    tc_assert_fails(amp_max_pool2d(NULL, &p, &idx), "amp_max_pool2d");
    assert_null(idx);
    tc_assert_fails(amp_max_pool2d(x, NULL, NULL), "amp_max_pool2d: p is NULL");
    tc_assert_fails(amp_max_pool2d(xi, &p, NULL), "amp_max_pool2d: x has dtype i64");
    tc_assert_fails(amp_max_pool2d(x2, &p, NULL), "amp_max_pool2d: x must be 3-d");
    tc_assert_fails(amp_max_pool2d(x, &k0, NULL), "amp_max_pool2d: kernel");
    tc_assert_fails(amp_max_pool2d(x, &pad, NULL), "amp_max_pool2d: padding");
    tc_assert_fails(amp_max_pool2d(x, &big, NULL), "amp_max_pool2d");
    tc_assert_fails(amp_max_pool2d(x, &nst, NULL), "amp_max_pool2d: stride");
    tc_assert_fails(amp_max_pool2d(xe, &p, NULL), "amp_max_pool2d");
    tc_assert_fails(amp_avg_pool2d(NULL, &p), "amp_avg_pool2d");
    tc_assert_fails(amp_avg_pool2d(x, NULL), "amp_avg_pool2d");
    tc_assert_fails(amp_avg_pool2d(xi, &p), "amp_avg_pool2d");
    tc_assert_fails(amp_avg_pool2d(x2, &p), "amp_avg_pool2d");
    tc_assert_fails(amp_avg_pool2d(x, &pad), "amp_avg_pool2d");
    tc_assert_fails(amp_avg_pool2d(x, &big), "amp_avg_pool2d");
    tc_assert_fails(amp_avg_pool2d(x, &dil), "amp_avg_pool2d: dilation");
    tc_assert_fails(amp_avg_pool2d(xe, &p), "amp_avg_pool2d");
    tc_assert_fails(amp_adaptive_avg_pool2d(NULL, 2, 2), "amp_adaptive_avg_pool2d");
    tc_assert_fails(amp_adaptive_avg_pool2d(xi, 2, 2), "amp_adaptive_avg_pool2d");
    tc_assert_fails(amp_adaptive_avg_pool2d(x2, 2, 2), "amp_adaptive_avg_pool2d: x must be 3-d");
    tc_assert_fails(amp_adaptive_avg_pool2d(x, 0, 2), "amp_adaptive_avg_pool2d: output size");
    tc_assert_fails(amp_adaptive_avg_pool2d(xe, 2, 2), "amp_adaptive_avg_pool2d");
    amp_scope_end(s);
}

static void leak_body(test_rng *r) {
    amp_tensor *x = mk(r, AMP_F32, 4, AMP_SHAPE(2, 3, 8, 8), true), *w = mk(r, AMP_F16, 4, AMP_SHAPE(4, 3, 3, 3), true);
    amp_tensor *b = mk(r, AMP_F32, 1, AMP_SHAPE(4), true);
    amp_conv_params cp = {{1, 1}, {1, 1}, {0, 0}, 0};
    amp_tensor *y = amp_conv2d(x, w, b, &cp);
    amp_pool_params pp = PP(2, 2, 0, 0, 0, 0, 0, 0, false, false);
    amp_tensor *z = amp_max_pool2d(y, &pp, NULL);
    amp_tensor *q = amp_avg_pool2d(z, &pp);
    amp_tensor *a = amp_adaptive_avg_pool2d(q, 1, 1);
    amp_tensor *f = amp_reshape(a, 1, AMP_SHAPE(-1));
    amp_tensor *d = amp_dot(f, f);
    assert_int_equal(amp_backward(d), AMP_OK);
}

static void t_no_leaks(void **state) {
    (void)state;
    test_rng r = {27};
    tc_assert_no_leaks(leak_body, &r);
}

AMP_TEST_MAIN(t_conv2d, t_conv2d_views_blocks, t_im2col_reference, t_conv1d, t_max_pool2d, t_max_pool2d_k2_bits,
              t_avg_pool2d, t_adaptive_avg_pool2d, t_golden, t_bad_inputs, t_no_leaks)

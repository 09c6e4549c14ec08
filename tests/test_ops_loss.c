/* Losses: cross_entropy, nll_loss, mse_loss, l1_loss, smooth_l1_loss,
 * binary_cross_entropy_with_logits, kl_div. Each × f32/f16/bf16 × reduction:
 * forward against float64 reference loops written here (torch's formulas,
 * including class weights, ignore_index and label smoothing), backward
 * against central differences of them, PyTorch golden data
 * (tools/golden/gen_reduce_norm_loss.py), edge cases (all targets ignored,
 * empty batches, huge logits, broadcasting), and a bad-input walk.
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
static const amp_reduction REDS[3] = {AMP_REDUCTION_MEAN, AMP_REDUCTION_SUM, AMP_REDUCTION_NONE};
static const char *RED_NAMES[3] = {"mean", "sum", "none"};

static amp_tensor *idx_tensor(const int64_t *v, amp_dtype dt, int nd, const int64_t *s) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= s[i];
    double *d = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) d[i] = (double)v[i];
    amp_tensor *t = tc_from_values(dt, nd, s, d);
    free(d);
    return t;
}

static double gtol(amp_dtype dt, double f32, double half_factor) { return dt == AMP_F32 ? f32 : tc_rtol(dt, half_factor); }

/* ---- class-index losses: float64 reference ----------------------------------------------------- */
typedef struct {
    int64_t N, C, L;
    const int64_t *t;
    const double *w; /* class weights or NULL */
    int64_t ignore;
    double eps;
    int red;
    bool ce; /* logits (cross_entropy) vs log-probabilities (nll_loss) */
} cls_ctx;

static void cls_ref(const double *const *in, double *out, void *vc) {
    const cls_ctx *c = vc;
    const double *x = in[0];
    double total = 0, W = 0;
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t l = 0; l < c->L; l++) {
            int64_t i = n * c->L + l, t = c->t[i];
            double lp[64];
            double m = -INFINITY, s = 0;
            for (int64_t k = 0; k < c->C; k++) m = fmax(m, x[(n * c->C + k) * c->L + l]);
            for (int64_t k = 0; k < c->C; k++) s += exp(x[(n * c->C + k) * c->L + l] - m);
            for (int64_t k = 0; k < c->C; k++) {
                double v = x[(n * c->C + k) * c->L + l];
                lp[k] = c->ce ? v - m - log(s) : v;
            }
            double li = 0;
            if (t != c->ignore) {
                double wt = c->w ? c->w[t] : 1;
                double smooth = 0;
                for (int64_t k = 0; k < c->C; k++) smooth -= (c->w ? c->w[k] : 1) * lp[k];
                li = (1 - c->eps) * (-wt * lp[t]) + c->eps / (double)c->C * smooth;
                W += wt;
            }
            if (c->red == AMP_REDUCTION_NONE) out[i] = li;
            total += li;
        }
    if (c->red == AMP_REDUCTION_SUM) out[0] = total;
    if (c->red == AMP_REDUCTION_MEAN) out[0] = total / W;
}

static void t_cross_entropy(void **state) {
    (void)state;
    test_rng r = {7001};
    const int64_t t6[6] = {1, 0, 4, -100, 2, 1};
    const int64_t t3d[6] = {0, 4, -100, 2, 2, 1};
    const double cw[5] = {0.7, 1.3, 0.9, 1.6, 0.5};
    struct {
        int nd;
        int64_t s[3];
        const int64_t *t;
    } shapes[] = {{2, {6, 5}, t6}, {1, {5}, t6 + 2}, {3, {2, 5, 3}, t3d}};
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        for (int si = 0; si < 3; si++) {
            int nd = shapes[si].nd;
            const int64_t *s = shapes[si].s;
            int64_t N = nd == 1 ? 1 : s[0], C = nd == 1 ? s[0] : s[1], L = nd == 3 ? s[2] : 1;
            int64_t ts[2];
            int tnd = 0;
            for (int i = 0; i < nd; i++)
                if (i != (nd == 1 ? 0 : 1)) ts[tnd++] = s[i];
            for (int ri = 0; ri < 3; ri++)
                for (int wi = 0; wi < 2; wi++)
                    for (int li = 0; li < 2; li++) {
                        amp_tensor *x = tc_randn_grad(&r, dt, nd, s, 2.0, true);
                        amp_tensor *tg = idx_tensor(shapes[si].t, (ri + wi) % 2 ? AMP_I32 : AMP_I64, tnd, ts);
                        amp_tensor *w = wi ? tc_from_values(AMP_F32, 1, AMP_SHAPE(5), cw) : NULL;
                        amp_loss_opts o = AMP_LOSS_DEFAULTS;
                        o.reduction = REDS[ri];
                        o.weight = w;
                        o.label_smoothing = li ? 0.15 : 0.0;
                        amp_tensor *y = amp_cross_entropy(x, tg, &o);
                        assert_non_null(y);
                        assert_int_equal(amp_tensor_dtype(y), dt);
                        if (REDS[ri] == AMP_REDUCTION_NONE) tc_assert_shape(y, tnd, ts, "ce none shape");
                        else tc_assert_shape(y, 0, NULL, "ce reduced shape");
                        cls_ctx c = {N, C, L, shapes[si].t, wi ? cw : NULL, -100, o.label_smoothing, REDS[ri], true};
                        double *xv = tc_values(x), want[8];
                        const double *ins[1] = {xv};
                        cls_ref(ins, want, &c);
                        char what[96];
                        snprintf(what, sizeof what, "cross_entropy %s shape %d %s w%d ls%d", amp_dtype_name(dt), si,
                                 RED_NAMES[ri], wi, li);
                        tc_assert_tensor(y, want, tc_rtol(dt, 1), dt == AMP_F32 ? 1e-6 : tc_rtol(dt, 1), what);
                        amp_tensor *xs[1] = {x};
                        tc_gradcheck(y, xs, 1, cls_ref, &c, gtol(dt, 1e-4, 10), gtol(dt, 1e-6, 4), what);
                        free(xv);
                        test_free_tensors(y, w, tg, x);
                    }
        }
    }
}

static void t_ce_edges(void **state) {
    (void)state;
    test_rng r = {7002};
    amp_tensor *x = tc_randn_grad(&r, AMP_F32, 2, AMP_SHAPE(3, 4), 1.0, true);
    const int64_t all_ign[3] = {-100, -100, -100};
    amp_tensor *tg = idx_tensor(all_ign, AMP_I64, 1, AMP_SHAPE(3));
    /* mean over zero non-ignored targets: NaN, as torch; sum 0; none zeros */
    amp_tensor *m = amp_cross_entropy(x, tg, NULL);
    assert_true(isnan(amp_tensor_item(m)));
    amp_loss_opts o = AMP_LOSS_DEFAULTS;
    o.reduction = AMP_REDUCTION_SUM;
    o.label_smoothing = 0.3;
    amp_tensor *s = amp_cross_entropy(x, tg, &o);
    assert_true(amp_tensor_item(s) == 0.0);
    assert_int_equal(amp_backward(s), AMP_OK);
    double z12[12] = {0};
    tc_assert_tensor(amp_tensor_grad(x), z12, 0, 0, "ignored targets get no gradient");
    o.reduction = AMP_REDUCTION_NONE;
    amp_tensor *nn = amp_cross_entropy(x, tg, &o);
    double z3[3] = {0};
    tc_assert_tensor(nn, z3, 0, 0, "none with all ignored");
    test_free_tensors(m, s, nn, tg);
    /* a custom ignore_index (0 is a real class otherwise) */
    const int64_t t3[3] = {0, 3, 0};
    tg = idx_tensor(t3, AMP_I32, 1, AMP_SHAPE(3));
    o = AMP_LOSS_DEFAULTS;
    o.ignore_index = 0;
    amp_tensor *ci = amp_cross_entropy(x, tg, &o);
    double *xv = tc_values(x), want;
    cls_ctx c = {3, 4, 1, t3, NULL, 0, 0, AMP_REDUCTION_MEAN, true};
    const double *ins[1] = {xv};
    cls_ref(ins, &want, &c);
    assert_close(amp_tensor_item(ci), want, 1e-6, 0, "ignore_index 0");
    free(xv);
    test_free_tensors(ci, tg);
    /* empty batch */
    amp_tensor *e = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(0, 4));
    amp_tensor *te = amp_tensor_zeros(AMP_I64, 1, AMP_SHAPE(0));
    amp_tensor *em = amp_cross_entropy(e, te, NULL);
    assert_true(isnan(amp_tensor_item(em)));
    o = AMP_LOSS_DEFAULTS;
    o.reduction = AMP_REDUCTION_NONE;
    amp_tensor *en = amp_cross_entropy(e, te, &o);
    tc_assert_shape(en, 1, AMP_SHAPE(0), "none of an empty batch");
    test_free_tensors(em, en, e, te);
    /* under autocast cross_entropy is on the fp32 list: f16 logits -> f32 loss */
    amp_tensor *xh = tc_randn_grad(&r, AMP_F16, 2, AMP_SHAPE(3, 4), 1.0, false);
    const int64_t t3b[3] = {1, 2, 3};
    tg = idx_tensor(t3b, AMP_I64, 1, AMP_SHAPE(3));
    amp_autocast_enter(AMP_F16);
    amp_tensor *lh = amp_cross_entropy(xh, tg, NULL);
    amp_autocast_exit();
    assert_int_equal(amp_tensor_dtype(lh), AMP_F32);
    test_free_tensors(lh, tg, xh);
    /* huge logits stay finite */
    double big[4] = {1e4, -1e4, 0, 5e3};
    amp_tensor *xb = tc_from_values(AMP_F32, 2, AMP_SHAPE(1, 4), big);
    const int64_t t1[1] = {1};
    tg = idx_tensor(t1, AMP_I64, 1, AMP_SHAPE(1));
    amp_tensor *lb = amp_cross_entropy(xb, tg, NULL);
    assert_close(amp_tensor_item(lb), 2e4, 1e-6, 0, "cross_entropy of huge logits");
    test_free_tensors(lb, tg, xb, x);
}

static void t_nll_loss(void **state) {
    (void)state;
    test_rng r = {7003};
    const int64_t t6[6] = {4, 0, -100, 3, 2, 2};
    const double cw[5] = {0.7, 1.3, 0.9, 1.6, 0.5};
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        for (int ri = 0; ri < 3; ri++)
            for (int wi = 0; wi < 2; wi++) {
                amp_tensor *x = tc_randn_grad(&r, dt, 2, AMP_SHAPE(6, 5), 1.0, true);
                amp_tensor *tg = idx_tensor(t6, wi ? AMP_I32 : AMP_I64, 1, AMP_SHAPE(6));
                amp_tensor *w = wi ? tc_from_values(dt, 1, AMP_SHAPE(5), cw) : NULL;
                amp_loss_opts o = AMP_LOSS_DEFAULTS;
                o.reduction = REDS[ri];
                o.weight = w;
                o.label_smoothing = 0.5; /* ignored by nll_loss */
                amp_tensor *y = amp_nll_loss(x, tg, &o);
                assert_non_null(y);
                assert_int_equal(amp_tensor_dtype(y), dt);
                double *wv = w ? tc_values(w) : NULL;
                cls_ctx c = {6, 5, 1, t6, wv, -100, 0, REDS[ri], false};
                double *xv = tc_values(x), want[6];
                const double *ins[1] = {xv};
                cls_ref(ins, want, &c);
                char what[80];
                snprintf(what, sizeof what, "nll_loss %s %s w%d", amp_dtype_name(dt), RED_NAMES[ri], wi);
                tc_assert_tensor(y, want, tc_rtol(dt, 1), dt == AMP_F32 ? 1e-6 : tc_rtol(dt, 1), what);
                amp_tensor *xs[1] = {x};
                tc_gradcheck(y, xs, 1, cls_ref, &c, gtol(dt, 1e-4, 10), gtol(dt, 1e-6, 4), what);
                test_free_all(xv, wv);
                test_free_tensors(y, w, tg, x);
            }
    }
}

/* ---- pointwise losses -------------------------------------------------------------------------------- */
enum { P_MSE, P_L1, P_SMOOTH, P_BCE, P_KL, P_KLLOG };
static const char *P_NAMES[] = {"mse", "l1", "smooth_l1", "bce_with_logits", "kl_div", "kl_div(log_target)"};

typedef struct {
    int kind, red;
    double beta;
    bool pw; /* in[2] is pos_weight */
    int nd[3];
    int64_t s[3][3]; /* input, target, pos_weight shapes */
    int ond;
    int64_t os[3];
} pw_ctx;

static int64_t bidx(const pw_ctx *c, int k, int64_t flat) {
    int64_t idx[3], off = 0, st = 1;
    for (int i = c->ond - 1; i >= 0; i--) {
        idx[i] = flat % c->os[i];
        flat /= c->os[i];
    }
    for (int i = c->nd[k] - 1; i >= 0; i--) {
        int oi = i + c->ond - c->nd[k];
        if (c->s[k][i] != 1) off += idx[oi] * st;
        st *= c->s[k][i];
    }
    return off;
}

static void pw_ref(const double *const *in, double *out, void *vc) {
    const pw_ctx *c = vc;
    int64_t n = 1;
    for (int i = 0; i < c->ond; i++) n *= c->os[i];
    double total = 0;
    for (int64_t j = 0; j < n; j++) {
        double x = in[0][bidx(c, 0, j)], y = in[1][bidx(c, 1, j)], p = c->pw ? in[2][bidx(c, 2, j)] : 1, d = x - y, l = 0;
        switch (c->kind) {
        case P_MSE: l = d * d; break;
        case P_L1: l = fabs(d); break;
        case P_SMOOTH: l = fabs(d) < c->beta ? 0.5 * d * d / c->beta : fabs(d) - 0.5 * c->beta; break;
        case P_BCE: l = (1 - y) * x + (1 + (p - 1) * y) * log1p(exp(-x)); break;
        case P_KL: l = y * (log(y) - x); break;
        case P_KLLOG: l = exp(y) * (y - x); break;
        }
        if (c->red == AMP_REDUCTION_NONE) out[j] = l;
        total += l;
    }
    if (c->red == AMP_REDUCTION_SUM) out[0] = total;
    if (c->red == AMP_REDUCTION_MEAN) out[0] = total / (double)n;
}

typedef amp_tensor *(*loss_fn)(amp_tensor *, amp_tensor *, const amp_loss_opts *);

static amp_tensor *call_pw(int kind, amp_tensor *x, amp_tensor *y, amp_loss_opts *o) {
    switch (kind) {
    case P_MSE: return amp_mse_loss(x, y, o);
    case P_L1: return amp_l1_loss(x, y, o);
    case P_SMOOTH: return amp_smooth_l1_loss(x, y, o);
    case P_BCE: return amp_binary_cross_entropy_with_logits(x, y, o);
    case P_KL: o->log_target = false; return amp_kl_div(x, y, o);
    default: o->log_target = true; return amp_kl_div(x, y, o);
    }
}

static void run_pw(test_rng *r, amp_dtype dt, int kind, int ri, double beta, bool pw, int xnd, const int64_t *xs,
                   int ynd, const int64_t *ys) {
    amp_tensor *x, *y;
    if (kind == P_KL) {
        x = tc_randn_grad(r, dt, xnd, xs, 1.0, true);
        y = tc_uniform(r, dt, ynd, ys, 0.1, 1.0);
        amp_tensor_set_requires_grad(y, true);
    } else if (kind == P_BCE) {
        x = tc_randn_grad(r, dt, xnd, xs, 3.0, true);
        y = tc_uniform(r, dt, ynd, ys, 0.0, 1.0);
        amp_tensor_set_requires_grad(y, true);
    } else {
        x = tc_randn_grad(r, dt, xnd, xs, 1.0, true);
        y = tc_randn_grad(r, dt, ynd, ys, 1.0, true);
    }
    amp_tensor *p = pw ? tc_uniform(r, dt, 1, AMP_SHAPE(3), 0.5, 2.5) : NULL;
    if (p) amp_tensor_set_requires_grad(p, true);
    amp_loss_opts o = AMP_LOSS_DEFAULTS;
    o.reduction = REDS[ri];
    o.beta = beta;
    o.pos_weight = p;
    amp_tensor *out = call_pw(kind, x, y, &o);
    assert_non_null(out);
    assert_int_equal(amp_tensor_dtype(out), dt);
    pw_ctx c = {kind, REDS[ri], beta, pw, {xnd, ynd, 1}, {{0}}, 0, {0}};
    memcpy(c.s[0], xs, sizeof(int64_t) * (size_t)xnd);
    memcpy(c.s[1], ys, sizeof(int64_t) * (size_t)ynd);
    c.s[2][0] = 3;
    c.ond = xnd > ynd ? xnd : ynd;
    for (int i = 0; i < c.ond; i++) {
        int a = i - (c.ond - xnd), b = i - (c.ond - ynd);
        int64_t sa = a >= 0 ? xs[a] : 1, sb = b >= 0 ? ys[b] : 1;
        c.os[i] = sa == 1 ? sb : sa;
    }
    if (REDS[ri] == AMP_REDUCTION_NONE) tc_assert_shape(out, c.ond, c.os, "pointwise loss none shape");
    else tc_assert_shape(out, 0, NULL, "pointwise loss reduced shape");
    double *xv = tc_values(x), *yv = tc_values(y), *pv = p ? tc_values(p) : NULL, want[64];
    const double *ins[3] = {xv, yv, pv};
    pw_ref(ins, want, &c);
    char what[96];
    snprintf(what, sizeof what, "%s %s %s beta %g pw %d", P_NAMES[kind], amp_dtype_name(dt), RED_NAMES[ri], beta, pw);
    tc_assert_tensor(out, want, tc_rtol(dt, 1), dt == AMP_F32 ? 1e-6 : tc_rtol(dt, 1), what);
    amp_tensor *xs3[3] = {x, y, p};
    tc_gradcheck(out, xs3, 3, pw_ref, &c, gtol(dt, 1e-4, 10), gtol(dt, 1e-6, 4), what);
    test_free_all(xv, yv, pv);
    test_free_tensors(out, x, y, p);
}

static void t_pointwise(void **state) {
    (void)state;
    test_rng r = {7004};
    const int64_t s43[2] = {4, 3}, s3[1] = {3};
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        for (int ri = 0; ri < 3; ri++) {
            for (int kind = P_MSE; kind <= P_KLLOG; kind++) run_pw(&r, dt, kind, ri, 1.0, false, 2, s43, 2, s43);
            run_pw(&r, dt, P_SMOOTH, ri, 0.5, false, 2, s43, 2, s43);
            run_pw(&r, dt, P_SMOOTH, ri, 0.0, false, 2, s43, 2, s43); /* beta 0 is l1 */
            run_pw(&r, dt, P_BCE, ri, 1.0, true, 2, s43, 2, s43);
            /* broadcasting (torch warns but broadcasts) */
            run_pw(&r, dt, P_MSE, ri, 1.0, false, 2, s43, 1, s3);
            run_pw(&r, dt, P_L1, ri, 1.0, false, 1, s3, 2, s43);
        }
    }
    /* empty input: mean is NaN, sum 0 */
    amp_tensor *e = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(0));
    amp_tensor *me = amp_mse_loss(e, e, NULL);
    assert_true(isnan(amp_tensor_item(me)));
    amp_loss_opts o = AMP_LOSS_DEFAULTS;
    o.reduction = AMP_REDUCTION_SUM;
    amp_tensor *se = amp_l1_loss(e, e, &o);
    assert_true(amp_tensor_item(se) == 0);
    test_free_tensors(me, se, e);
    /* kl_div: target 0 contributes 0 (xlogy), not NaN */
    double in[2] = {-1, -2}, tg[2] = {0, 1};
    amp_tensor *ki = tc_from_values(AMP_F32, 1, AMP_SHAPE(2), in), *kt = tc_from_values(AMP_F32, 1, AMP_SHAPE(2), tg);
    amp_tensor *kl = amp_kl_div(ki, kt, &o);
    assert_close(amp_tensor_item(kl), 2.0, 1e-7, 0, "kl_div with a zero target");
    test_free_tensors(kl, ki, kt);
    /* promotion: f16 input with f32 target -> f32 */
    amp_tensor *h = amp_tensor_ones(AMP_F16, 1, AMP_SHAPE(3)), *f = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(3));
    amp_tensor *pm = amp_mse_loss(h, f, NULL);
    assert_int_equal(amp_tensor_dtype(pm), AMP_F32);
    assert_true(amp_tensor_item(pm) == 1.0);
    test_free_tensors(pm, h, f);
}

/* binary_cross_entropy_with_logits is stable for huge logits */
static void t_bce_stable(void **state) {
    (void)state;
    double x[6] = {100, -100, 100, -100, 0, 40};
    double y[6] = {0, 1, 1, 0, 0.5, 0};
    for (int di = 0; di < 3; di++) {
        amp_dtype dt = DTS[di];
        amp_tensor *xt = tc_from_values(dt, 1, AMP_SHAPE(6), x), *yt = tc_from_values(dt, 1, AMP_SHAPE(6), y);
        amp_tensor_set_requires_grad(xt, true);
        amp_loss_opts o = AMP_LOSS_DEFAULTS;
        o.reduction = AMP_REDUCTION_NONE;
        amp_tensor *l = amp_binary_cross_entropy_with_logits(xt, yt, &o);
        double want[6];
        for (int i = 0; i < 6; i++) want[i] = (1 - y[i]) * x[i] + fmax(-x[i], 0) + log1p(exp(-fabs(x[i])));
        tc_assert_tensor(l, want, tc_rtol(dt, 1), 1e-30, "bce of huge logits");
        amp_tensor *s = amp_sum(l, NULL, 0, false);
        assert_int_equal(amp_backward(s), AMP_OK);
        double gw[6];
        for (int i = 0; i < 6; i++) gw[i] = 1 / (1 + exp(-x[i])) - y[i];
        tc_assert_tensor(amp_tensor_grad(xt), gw, tc_rtol(dt, 1), 1e-30, "bce grad of huge logits");
        test_free_tensors(s, l, xt, yt);
    }
}

/* ---- PyTorch golden data ------------------------------------------------------------------------------ */
static amp_tensor *grec(golden_file *g, const char *name, bool rg) {
    amp_tensor *t = golden_tensor(g, name);
    if (rg) amp_tensor_set_requires_grad(t, true);
    return t;
}

/* Runs a loss on golden inputs and compares out and the gradients listed. */
static void gloss(golden_file *g, const char *cs, const char *xn, const char *yn, bool ygrad, bool cls, amp_loss_opts o,
                  int kind) {
    amp_tensor *x = grec(g, xn, true), *y = grec(g, yn, ygrad);
    amp_tensor *out = cls ? (kind ? amp_cross_entropy(x, y, &o) : amp_nll_loss(x, y, &o)) : call_pw(kind, x, y, &o);
    golden_assert_out_gx(g, cs, out, x, 1e-5, 1e-6);
    if (ygrad) {
        char nm[96];
        snprintf(nm, sizeof nm, "%s/gy", cs);
        golden_assert(g, nm, amp_tensor_grad(y), 1e-5, 1e-6);
    }
    test_free_tensors(out, x, y);
}

static void t_golden(void **state) {
    (void)state;
    golden_file *g = golden_open("golden_reduce_norm_loss.bin");
    amp_tensor *cw = golden_tensor(g, "ce/weight");
    struct {
        const char *name;
        int red;
        bool w;
        double ls;
    } ce[] = {
        {"ce_mean", AMP_REDUCTION_MEAN, false, 0},      {"ce_sum", AMP_REDUCTION_SUM, false, 0},
        {"ce_none", AMP_REDUCTION_NONE, false, 0},      {"ce_w_mean", AMP_REDUCTION_MEAN, true, 0},
        {"ce_w_sum", AMP_REDUCTION_SUM, true, 0},       {"ce_ls_mean", AMP_REDUCTION_MEAN, false, 0.1},
        {"ce_ls_none", AMP_REDUCTION_NONE, false, 0.1}, {"ce_w_ls_mean", AMP_REDUCTION_MEAN, true, 0.2},
        {"ce_w_ls_sum", AMP_REDUCTION_SUM, true, 0.2},  {"ce_w_ls_none", AMP_REDUCTION_NONE, true, 0.3},
    };
    for (size_t i = 0; i < sizeof ce / sizeof ce[0]; i++) {
        amp_loss_opts o = AMP_LOSS_DEFAULTS;
        o.reduction = (amp_reduction)ce[i].red;
        o.weight = ce[i].w ? cw : NULL;
        o.label_smoothing = ce[i].ls;
        gloss(g, ce[i].name, "ce/logits", "ce/target", false, true, o, 1);
    }
    amp_loss_opts o = AMP_LOSS_DEFAULTS;
    o.ignore_index = 1;
    gloss(g, "ce_ig1_mean", "ce/logits", "ce_ig1/target", false, true, o, 1);
    o.weight = cw;
    o.label_smoothing = 0.25;
    gloss(g, "ce_ig1_w_ls_mean", "ce/logits", "ce_ig1/target", false, true, o, 1);
    o = AMP_LOSS_DEFAULTS;
    o.weight = cw;
    o.label_smoothing = 0.1;
    gloss(g, "ce3", "ce3/logits", "ce3/target", false, true, o, 1);
    o = AMP_LOSS_DEFAULTS;
    gloss(g, "nll_mean", "nll/input", "ce/target", false, true, o, 0);
    o.weight = cw;
    gloss(g, "nll_w_mean", "nll/input", "ce/target", false, true, o, 0);
    o.reduction = AMP_REDUCTION_NONE;
    gloss(g, "nll_w_none", "nll/input", "ce/target", false, true, o, 0);
    /* pointwise */
    o = AMP_LOSS_DEFAULTS;
    gloss(g, "mse", "pw/input", "pw/target", true, false, o, P_MSE);
    o.reduction = AMP_REDUCTION_NONE;
    gloss(g, "mse_none", "pw/input", "pw/target", true, false, o, P_MSE);
    o.reduction = AMP_REDUCTION_SUM;
    gloss(g, "l1", "pw/input", "pw/target", true, false, o, P_L1);
    o = AMP_LOSS_DEFAULTS;
    o.beta = 0.5;
    gloss(g, "smooth_l1", "pw/input", "pw/target", true, false, o, P_SMOOTH);
    o.beta = 2.0;
    o.reduction = AMP_REDUCTION_SUM;
    gloss(g, "smooth_l1_b2", "pw/input", "pw/target", true, false, o, P_SMOOTH);
    o = AMP_LOSS_DEFAULTS;
    gloss(g, "bce", "bce/input", "bce/target", true, false, o, P_BCE);
    amp_tensor *pw = golden_tensor(g, "bce/pos_weight");
    o.pos_weight = pw;
    gloss(g, "bce_pw", "bce/input", "bce/target", true, false, o, P_BCE);
    o.reduction = AMP_REDUCTION_NONE;
    gloss(g, "bce_pw_none", "bce/input", "bce/target", true, false, o, P_BCE);
    o = AMP_LOSS_DEFAULTS;
    gloss(g, "kl", "kl/input", "kl/target", true, false, o, P_KL);
    o.reduction = AMP_REDUCTION_SUM;
    gloss(g, "kl_sum", "kl/input", "kl/target", true, false, o, P_KL);
    o = AMP_LOSS_DEFAULTS;
    gloss(g, "kl_log", "kl/input", "kl_log/target", true, false, o, P_KLLOG);
    test_free_tensors(pw, cw);
    golden_close(g);
}

/* ---- bad input ------------------------------------------------------------------------------------- */
/* cross_entropy's row path under autocast: half logits are widened inside
 * the kernel instead of being cast to an f32 copy. The loss (f32) and the
 * logits' gradient have the bits of the explicit cast path (amp_to(logits,
 * f32) then cross_entropy, whose backward rounds the f32 gradient to the
 * half type), and no [N, C] f32 tensor is made, forward or backward. */
static void t_ce_widen_inside(void **state) {
    (void)state;
    const int64_t N = 64, C = 5000;
    amp_generator g = amp_generator_make(3);
    for (int d = 0; d < 2; d++) {
        amp_dtype dt = d ? AMP_F16 : AMP_BF16;
        amp_tensor *lf = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(N, C), &g);
        amp_tensor *x = amp_to(lf, dt);
        amp_tensor_free(lf);
        amp_tensor_set_requires_grad(x, true);
        int64_t tv[64];
        for (int64_t i = 0; i < N; i++) tv[i] = (i * 131) % C;
        tv[5] = -100;
        amp_tensor *t = amp_tensor_from_data(tv, AMP_I64, 1, AMP_SHAPE(N));
        double lv[2];
        amp_tensor *gr[2];
        size_t peak[2];
        for (int k = 0; k < 2; k++) {
            amp_memory_reset_peak();
            size_t base = amp_memory_stats().live_total;
            amp_scope *s = amp_scope_begin();
            assert_int_equal(amp_autocast_enter(dt), AMP_OK);
            amp_tensor *loss = k ? amp_cross_entropy(amp_to(x, AMP_F32), t, NULL) : amp_cross_entropy(x, t, NULL);
            assert_int_equal(amp_autocast_exit(), AMP_OK);
            assert_non_null(loss);
            assert_int_equal(amp_tensor_dtype(loss), AMP_F32);
            lv[k] = amp_tensor_item(loss);
            assert_int_equal(amp_backward(loss), AMP_OK);
            amp_scope_end(s);
            peak[k] = amp_memory_stats().peak_total - base;
            gr[k] = amp_clone(amp_tensor_grad(x));
            amp_tensor_set_grad(x, NULL);
        }
        assert_true(lv[0] == lv[1]);
        assert_int_equal(amp_tensor_dtype(gr[0]), dt);
        assert_memory_equal(amp_tensor_data(gr[0]), amp_tensor_data(gr[1]), amp_tensor_nbytes(gr[0]));
        size_t f32_copy = (size_t)(N * C) * 4;
        printf("%s logits [%lld, %lld]: peak above the inputs %zu bytes widened inside, %zu with an f32 cast\n",
               amp_dtype_name(dt), (long long)N, (long long)C, peak[0], peak[1]);
        assert_true(peak[0] < f32_copy);       /* not even one f32 copy */
        assert_true(peak[1] >= f32_copy);
        test_free_tensors(gr[0], gr[1], x, t);
    }
}

static void t_bad_inputs(void **state) {
    (void)state;
    amp_tensor *x = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(4, 3));
    amp_tensor *xi = amp_tensor_zeros(AMP_I64, 2, AMP_SHAPE(4, 3));
    amp_tensor *x0 = amp_tensor_zeros(AMP_F32, 0, NULL);
    amp_tensor *t4 = amp_tensor_zeros(AMP_I64, 1, AMP_SHAPE(4));
    amp_tensor *t5 = amp_tensor_zeros(AMP_I64, 1, AMP_SHAPE(5));
    amp_tensor *tf = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(4));
    amp_tensor *y = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(4, 3));
    amp_tensor *y5 = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(4, 5));
    amp_tensor *w2 = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(2)), *wi = amp_tensor_ones(AMP_I32, 1, AMP_SHAPE(3));
    amp_tensor *p4 = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(4));
    amp_loss_opts o = AMP_LOSS_DEFAULTS;
    /* class losses */
    loss_fn cls[2] = {amp_cross_entropy, amp_nll_loss};
    const char *cn[2] = {"amp_cross_entropy", "amp_nll_loss"};
    for (int k = 0; k < 2; k++) {
        char msg[128];
        tc_assert_fails(cls[k](NULL, t4, NULL), cn[k]);
        tc_assert_fails(cls[k](x, NULL, NULL), cn[k]);
        snprintf(msg, sizeof msg, "%s: %s has dtype i64", cn[k], k ? "input" : "logits");
        tc_assert_fails(cls[k](xi, t4, NULL), msg);
        snprintf(msg, sizeof msg, "%s: target has dtype f32; expected i64 or i32", cn[k]);
        tc_assert_fails(cls[k](x, tf, NULL), msg);
        snprintf(msg, sizeof msg, "%s: %s must have 1 to 8 dims", cn[k], k ? "input" : "logits");
        tc_assert_fails(cls[k](x0, t4, NULL), msg);
        snprintf(msg, sizeof msg, "%s: target has shape [5]; expected [4]", cn[k]);
        tc_assert_fails(cls[k](x, t5, NULL), msg);
        o = AMP_LOSS_DEFAULTS;
        o.weight = w2;
        snprintf(msg, sizeof msg, "%s: weight has shape [2]; expected [3]", cn[k]);
        tc_assert_fails(cls[k](x, t4, &o), msg);
        o.weight = wi;
        snprintf(msg, sizeof msg, "%s: weight has dtype i32", cn[k]);
        tc_assert_fails(cls[k](x, t4, &o), msg);
        o = AMP_LOSS_DEFAULTS;
        o.reduction = (amp_reduction)7;
        snprintf(msg, sizeof msg, "%s: reduction 7", cn[k]);
        tc_assert_fails(cls[k](x, t4, &o), msg);
        /* out-of-range targets */
        amp_tensor_set(t4, (int64_t[]){2}, 3);
        snprintf(msg, sizeof msg, "%s: target 3 (element 2) is out of range for 3 classes", cn[k]);
        tc_assert_fails(cls[k](x, t4, NULL), msg);
        amp_tensor_set(t4, (int64_t[]){2}, -1);
        snprintf(msg, sizeof msg, "%s: target -1 (element 2)", cn[k]);
        tc_assert_fails(cls[k](x, t4, NULL), msg);
        amp_tensor_set(t4, (int64_t[]){2}, 0);
    }
    o = AMP_LOSS_DEFAULTS;
    o.label_smoothing = 1.5;
    tc_assert_fails(amp_cross_entropy(x, t4, &o), "amp_cross_entropy: label_smoothing 1.5 must be between 0.0 and 1.0");
    /* pointwise losses */
    loss_fn pw[5] = {amp_mse_loss, amp_l1_loss, amp_smooth_l1_loss, amp_binary_cross_entropy_with_logits, amp_kl_div};
    const char *pn[5] = {"amp_mse_loss", "amp_l1_loss", "amp_smooth_l1_loss", "amp_binary_cross_entropy_with_logits",
                         "amp_kl_div"};
    for (int k = 0; k < 5; k++) {
        char msg[160];
        tc_assert_fails(pw[k](NULL, y, NULL), pn[k]);
        tc_assert_fails(pw[k](x, NULL, NULL), pn[k]);
        snprintf(msg, sizeof msg, "%s: input has dtype i64", pn[k]);
        tc_assert_fails(pw[k](xi, y, NULL), msg);
        snprintf(msg, sizeof msg, "%s: target has dtype i64", pn[k]);
        tc_assert_fails(pw[k](x, xi, NULL), msg);
        snprintf(msg, sizeof msg, "%s: shapes [4,3] and [4,5] do not broadcast", pn[k]);
        tc_assert_fails(pw[k](x, y5, NULL), msg);
        snprintf(msg, sizeof msg, "%s: shapes [4,3] and [4] do not broadcast", pn[k]); /* wrong rank */
        tc_assert_fails(pw[k](x, tf, NULL), msg);
        o = AMP_LOSS_DEFAULTS;
        o.reduction = (amp_reduction)-1;
        snprintf(msg, sizeof msg, "%s: reduction -1", pn[k]);
        tc_assert_fails(pw[k](x, y, &o), msg);
    }
    o = AMP_LOSS_DEFAULTS;
    o.beta = -1;
    tc_assert_fails(amp_smooth_l1_loss(x, y, &o), "amp_smooth_l1_loss: beta -1 must be >= 0");
    o = AMP_LOSS_DEFAULTS;
    o.pos_weight = p4;
    tc_assert_fails(amp_binary_cross_entropy_with_logits(x, y, &o), "amp_binary_cross_entropy_with_logits: shapes [4,3] and [4]");
    o.pos_weight = wi;
    tc_assert_fails(amp_binary_cross_entropy_with_logits(x, y, &o), "amp_binary_cross_entropy_with_logits: pos_weight has dtype i32");
    amp_tensor *arr[] = {x, xi, x0, t4, t5, tf, y, y5, w2, wi, p4};
    for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++) amp_tensor_free(arr[i]);
}

AMP_TEST_MAIN(t_cross_entropy, t_ce_edges, t_nll_loss, t_pointwise, t_bce_stable, t_golden, t_bad_inputs,
              t_ce_widen_inside)

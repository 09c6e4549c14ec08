/* amp_scaler_clip_grad_norm: unscale + clip_grad_norm_ + the skip check in
 * one read pass, applied inside each optimizer's step. Against the three
 * calls it replaces (unscale each optimizer, amp_clip_grad_norm_optims,
 * step): the same norm and the same weights, moments and master weights bit
 * for bit, for f32 parameters and an O2 pair (bf16 with masters + f32), with
 * a power-of-two dynamic scale and a static scale of 1, clipping and not;
 * an inf gradient skips every step and leaves everything as it was; the
 * refusals (already unscaled, twice, f16 gradients without masters, bad
 * max_norm); a disabled scaler clips .grad itself. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

typedef struct {
    amp_tensor *p[4];
    amp_optim *opt[2];
    int nopt;
} rig;

/* parameters: two f32, or (O2) two bf16 with masters + one f32 */
static void rig_make(rig *r, bool o2, uint64_t seed) {
    amp_generator g = amp_generator_make(seed);
    memset(r, 0, sizeof *r);
    for (int i = 0; i < 3; i++) {
        amp_tensor *t = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(37, 53 + i), &g);
        if (o2 && i < 2) {
            amp_tensor *h = amp_to(t, AMP_BF16);
            amp_tensor_free(t);
            t = h;
        }
        amp_tensor_set_requires_grad(t, true);
        r->p[i] = t;
    }
    amp_optim_opts oo = amp_adamw_opts(1e-2);
    if (o2) {
        oo.master_weights = true;
        r->opt[0] = amp_optim_new(r->p, 2, &oo);
        oo.master_weights = false;
        r->opt[1] = amp_optim_new(r->p + 2, 1, &oo);
        r->nopt = 2;
    } else {
        r->opt[0] = amp_optim_new(r->p, 3, &oo);
        r->nopt = 1;
    }
}

static void rig_free(rig *r) {
    for (int k = 0; k < r->nopt; k++) amp_optim_free(r->opt[k]);
    for (int i = 0; i < 3; i++) amp_tensor_free(r->p[i]);
}

/* gradients = gscale * (a fixed pattern) * the loss scale, as a scaled backward would leave them */
static void set_grads(rig *r, double scale, double gscale, bool poison) {
    for (int i = 0; i < 3; i++) {
        int64_t n = amp_tensor_numel(r->p[i]);
        float *v = malloc(sizeof(float) * (size_t)n);
        for (int64_t k = 0; k < n; k++) v[k] = (float)(gscale * scale * sin(0.37 * (double)(k + 13 * i)));
        if (poison && i == 1) v[5] = INFINITY;
        amp_tensor *g = amp_tensor_from_data(v, AMP_F32, amp_tensor_ndim(r->p[i]), amp_tensor_shape(r->p[i]));
        assert_int_equal(amp_tensor_set_grad(r->p[i], g), AMP_OK);
        amp_tensor_free(g);
        free(v);
    }
}

static void assert_rigs_equal(rig *a, rig *b) {
    for (int i = 0; i < 3; i++)
        assert_memory_equal(amp_tensor_data(a->p[i]), amp_tensor_data(b->p[i]), amp_tensor_nbytes(a->p[i]));
    for (int k = 0; k < a->nopt; k++)
        for (int i = 0; i < amp_optim_num_params(a->opt[k]); i++) {
            const char *st[] = {"exp_avg", "exp_avg_sq", "master"};
            for (int j = 0; j < 3; j++) {
                amp_tensor *x = amp_optim_state(a->opt[k], i, st[j]), *y = amp_optim_state(b->opt[k], i, st[j]);
                if (!x) continue;
                assert_memory_equal(amp_tensor_data(x), amp_tensor_data(y), amp_tensor_nbytes(x));
            }
        }
}

static void run_case(bool o2, bool dynamic, double gscale, double max_norm, bool poison) {
    rig a, b;
    rig_make(&a, o2, 1);
    rig_make(&b, o2, 1);
    amp_scaler_opts so;
    memset(&so, 0, sizeof so);
    if (!dynamic) {
        so.init_scale = 1.0;
        so.static_scale = true;
    }
    amp_scaler *sa = amp_scaler_new(&so), *sb = amp_scaler_new(&so);
    double scale = amp_scaler_get_scale(sa);
    for (int step = 0; step < 3; step++) {
        bool bad = poison && step == 1;
        set_grads(&a, scale, gscale, bad);
        set_grads(&b, scale, gscale, bad);
        /* the three calls */
        for (int k = 0; k < a.nopt; k++) assert_int_equal(amp_scaler_unscale(sa, a.opt[k]), AMP_OK);
        double na = amp_clip_grad_norm_optims(a.opt, a.nopt, max_norm, sa);
        bool ska = false, skb = false, sk;
        for (int k = 0; k < a.nopt; k++) {
            assert_int_equal(amp_scaler_step(sa, a.opt[k], &sk), AMP_OK);
            ska |= sk;
        }
        assert_int_equal(amp_scaler_update(sa), AMP_OK);
        /* the fused call */
        double nb = amp_scaler_clip_grad_norm(sb, b.opt, b.nopt, max_norm);
        for (int k = 0; k < b.nopt; k++) {
            assert_int_equal(amp_scaler_step(sb, b.opt[k], &sk), AMP_OK);
            skb |= sk;
        }
        assert_int_equal(amp_scaler_update(sb), AMP_OK);
        assert_true(ska == bad && skb == bad);
        if (!bad) assert_true(fabs(na - nb) <= 1e-12 * na);
        else assert_false(isfinite(nb));
        assert_true(amp_scaler_get_scale(sa) == amp_scaler_get_scale(sb));
        assert_rigs_equal(&a, &b);
        scale = amp_scaler_get_scale(sa);
        for (int k = 0; k < a.nopt; k++) {
            amp_optim_zero_grad(a.opt[k]);
            amp_optim_zero_grad(b.opt[k]);
        }
    }
    printf("%s, %s scale, gradients x%g, max_norm %g%s: the fused path equals unscale + clip + step\n", o2 ? "O2 (bf16 + masters, f32)" : "f32",
           dynamic ? "dynamic" : "static", gscale, max_norm, poison ? ", an inf step skipped" : "");
    amp_scaler_free(sa);
    amp_scaler_free(sb);
    rig_free(&a);
    rig_free(&b);
}

static void t_equals_three_calls(void **s) {
    (void)s;
    for (int o2 = 0; o2 < 2; o2++)
        for (int dyn = 0; dyn < 2; dyn++) {
            run_case(o2, dyn, 1.0, 1.0, false);   /* norm ~30: clipped */
            run_case(o2, dyn, 1e-3, 1.0, false);  /* not clipped */
            run_case(o2, dyn, 1.0, 0.5, true);    /* an inf gradient: skipped */
        }
}

static void t_refusals(void **s) {
    (void)s;
    rig r;
    rig_make(&r, false, 2);
    amp_scaler *sc = amp_scaler_new(NULL);
    set_grads(&r, 65536.0, 1.0, false);
    assert_true(amp_scaler_clip_grad_norm(sc, r.opt, 1, 1.0) > 0);
    assert_true(amp_scaler_clip_grad_norm(sc, r.opt, 1, 1.0) < 0); /* twice */
    assert_int_not_equal(amp_scaler_unscale(sc, r.opt[0]), AMP_OK);
    assert_int_equal(amp_scaler_step(sc, r.opt[0], NULL), AMP_OK);
    assert_int_equal(amp_scaler_update(sc), AMP_OK);
    set_grads(&r, 65536.0, 1.0, false);
    assert_int_equal(amp_scaler_unscale(sc, r.opt[0]), AMP_OK);
    assert_true(amp_scaler_clip_grad_norm(sc, r.opt, 1, 1.0) < 0); /* already unscaled */
    assert_non_null(strstr(amp_last_error(), "amp_scaler_clip_grad_norm"));
    assert_true(amp_scaler_clip_grad_norm(sc, r.opt, 1, 0.0) < 0);
    assert_true(amp_scaler_clip_grad_norm(sc, r.opt, 1, NAN) < 0);
    assert_true(amp_scaler_clip_grad_norm(NULL, r.opt, 1, 1.0) < 0);
    assert_true(amp_scaler_clip_grad_norm(sc, NULL, 1, 1.0) < 0);
    amp_optim *twice[2] = {r.opt[0], r.opt[0]};
    assert_true(amp_scaler_clip_grad_norm(sc, twice, 2, 1.0) < 0);
    amp_scaler_free(sc);
    /* a disabled scaler clips .grad itself, as amp_clip_grad_norm_optims */
    amp_scaler_opts off;
    memset(&off, 0, sizeof off);
    off.disabled = true;
    sc = amp_scaler_new(&off);
    set_grads(&r, 1.0, 1.0, false);
    double n = amp_scaler_clip_grad_norm(sc, r.opt, 1, 1.0);
    assert_true(n > 1.0);
    double ss = 0;
    for (int i = 0; i < 3; i++) {
        amp_tensor *g = amp_tensor_grad(r.p[i]);
        const float *v = amp_tensor_data(g);
        for (int64_t k = 0; k < amp_tensor_numel(g); k++) ss += (double)v[k] * v[k];
    }
    assert_true(fabs(sqrt(ss) - 1.0) < 1e-5);
    amp_scaler_free(sc);
    /* f16 gradients without master weights */
    amp_tensor *h = amp_tensor_ones(AMP_F16, 1, AMP_SHAPE(8));
    amp_tensor_set_requires_grad(h, true);
    amp_tensor_set_grad(h, h);
    amp_optim_opts oo = amp_sgd_opts(0.1);
    amp_optim *ho = amp_optim_new(&h, 1, &oo);
    sc = amp_scaler_new(NULL);
    assert_true(amp_scaler_clip_grad_norm(sc, &ho, 1, 1.0) < 0);
    assert_non_null(strstr(amp_last_error(), "FP16"));
    amp_scaler_free(sc);
    amp_optim_free(ho);
    amp_tensor_free(h);
    rig_free(&r);
}

AMP_TEST_MAIN(t_equals_three_calls, t_refusals)

/* GradScaler: PyTorch's own AMP tests (test/test_cuda.py / test_torch.py,
 * _create_scaling_case and friends) ported. Two identical models
 * Linear(8,8) -> Linear(8,8), lr 1.0, 4 batches of 8x8 random data, MSE; an
 * inf is written into model[1].weight.grad at iteration 2; init_scale 128,
 * growth_factor 2, growth_interval 1. The scaled run must end with scale
 * 128 * 2^3 * 0.5 and the same grads, optimizer state and params as an f32
 * control run that skips the same step. Each case runs with SGD, Adam, AdamW
 * and with the scaler enabled and disabled. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <float.h>

#include "golden.h"
#include "op_check.h"

typedef struct {
    amp_module *mod;
    amp_optim *opt;
    amp_tensor *params[4];
} model_t;

typedef struct {
    amp_tensor *x[4], *y[4];
} data_t;

static amp_optim_opts g_optk;

static model_t make_model(amp_generator *g) {
    model_t m;
    amp_module *ch[2] = {amp_nn_linear(8, 8, true, g), amp_nn_linear(8, 8, true, g)};
    m.mod = amp_nn_sequential(ch, 2);
    assert_int_equal(amp_module_parameters(m.mod, m.params, NULL, 4), 4);
    m.opt = amp_optim_new(m.params, 4, &g_optk);
    assert_non_null(m.opt);
    return m;
}

/* control and scaling models with identical weights */
static void make_pair(model_t *control, model_t *scaling, uint64_t seed) {
    amp_generator g1 = amp_generator_make(seed), g2 = amp_generator_make(seed);
    *control = make_model(&g1);
    *scaling = make_model(&g2);
}

static void free_model(model_t *m) {
    amp_optim_free(m->opt);
    amp_module_free(m->mod);
}

static data_t make_data(void) {
    data_t d;
    test_rng r = {2024};
    for (int i = 0; i < 4; i++) {
        d.x[i] = tc_randn(&r, AMP_F32, 2, AMP_SHAPE(8, 8), 1.0);
        d.y[i] = tc_randn(&r, AMP_F32, 2, AMP_SHAPE(8, 8), 1.0);
    }
    return d;
}

static void free_data(data_t *d) {
    for (int i = 0; i < 4; i++) {
        test_free_tensors(d->x[i], d->y[i]);
    }
}

static void poison(model_t *m) {
    /* model[1].weight.grad.fill_(inf) */
    amp_tensor *g = amp_tensor_grad(m->params[2]);
    assert_non_null(g);
    amp_tensor_fill_(g, INFINITY);
}

static void compare(model_t *c, model_t *s, double atol, double rtol, const char *what) {
    static const char *states[] = {"exp_avg", "exp_avg_sq", "momentum_buffer"};
    for (int i = 0; i < 4; i++) {
        char w[128];
        double *cv;
        if (amp_tensor_grad(c->params[i])) {
            cv = tc_values(amp_tensor_grad(c->params[i]));
            snprintf(w, sizeof w, "%s: grad of param %d", what, i);
            tc_assert_tensor(amp_tensor_grad(s->params[i]), cv, rtol, atol, w);
            free(cv);
        }
        for (int k = 0; k < 3; k++) {
            amp_tensor *cs = amp_optim_state(c->opt, i, states[k]);
            amp_tensor *ss = amp_optim_state(s->opt, i, states[k]);
            if (!cs) continue;
            cv = tc_values(cs);
            snprintf(w, sizeof w, "%s: %s of param %d", what, states[k], i);
            tc_assert_tensor(ss, cv, rtol, atol, w);
            free(cv);
        }
        cv = tc_values(c->params[i]);
        snprintf(w, sizeof w, "%s: param %d", what, i);
        tc_assert_tensor(s->params[i], cv, rtol, atol, w);
        free(cv);
    }
    amp_clear_error();
}

typedef enum { CASE_BASIC, CASE_AUTOCAST, CASE_CLIP, CASE_CLIP_UNSCALE, CASE_ACCUM, CASE_STATE } case_kind;

static void run(case_kind k, data_t *d, model_t *m, amp_scaler *sc, bool scaling) {
    const int skip_iter = 2;
    const double max_norm = 0.2;
    for (int i = 0; i < 4; i++) {
        amp_scope *s = amp_scope_begin();
        if (k != CASE_ACCUM) amp_optim_zero_grad(m->opt);
        if (k == CASE_AUTOCAST && scaling) amp_autocast_enter(AMP_F16);
        amp_tensor *out = amp_module_forward(m->mod, d->x[i]);
        amp_tensor *loss = amp_mse_loss(out, d->y[i], NULL);
        if (k == CASE_AUTOCAST && scaling) amp_autocast_exit();
        if (k == CASE_ACCUM) loss = amp_div_scalar(loss, 2.0);
        assert_non_null(loss);
        if (scaling) {
            assert_int_equal(amp_backward(amp_scaler_scale(sc, loss)), AMP_OK);
            bool enabled = amp_scaler_is_enabled(sc);
            if (k == CASE_CLIP) amp_clip_grad_norm(m->opt, max_norm * amp_scaler_get_scale(sc));
            if (k == CASE_ACCUM) {
                if ((i + 1) % 2 == 0) {
                    assert_int_equal(amp_scaler_step(sc, m->opt, NULL), AMP_OK);
                    assert_int_equal(amp_scaler_update(sc), AMP_OK);
                    amp_optim_zero_grad(m->opt);
                }
            } else {
                if (i == skip_iter && enabled) poison(m);
                if (k == CASE_CLIP_UNSCALE) {
                    assert_int_equal(amp_scaler_unscale(sc, m->opt), AMP_OK);
                    amp_clip_grad_norm(m->opt, max_norm);
                }
                bool skipped;
                assert_int_equal(amp_scaler_step(sc, m->opt, &skipped), AMP_OK);
                assert_true(skipped == (i == skip_iter && enabled));
                assert_int_equal(amp_scaler_update(sc), AMP_OK);
            }
        } else {
            assert_int_equal(amp_backward(loss), AMP_OK);
            if (k == CASE_CLIP || k == CASE_CLIP_UNSCALE) amp_clip_grad_norm(m->opt, max_norm);
            if (k == CASE_ACCUM) {
                if ((i + 1) % 2 == 0) {
                    amp_optim_step(m->opt);
                    amp_optim_zero_grad(m->opt);
                }
            } else if (!amp_scaler_is_enabled(sc) || i != skip_iter) {
                amp_optim_step(m->opt);
            }
        }
        amp_scope_end(s);
    }
}

static void run_scaling_case(case_kind k, int unskipped, int skipped, double atol, double rtol) {
    const char *names[] = {"sgd", "adam", "adamw"};
    /* Adam's update m/sqrt(v) is sign-like for small gradients, so with lr 1.0
     * an f16 rounding of a near-zero gradient becomes a +-1 weight change; the
     * autocast variant (which torch runs with SGD only) uses lr 1e-2 for them. */
    double alr = k == CASE_AUTOCAST ? 1e-2 : 1.0;
    amp_optim_opts kinds[3] = {amp_sgd_opts(1.0), amp_adam_opts(alr), amp_adamw_opts(alr)};
    for (int o = 0; o < 3; o++) {
        g_optk = kinds[o];
        for (int enabled = 1; enabled >= 0; enabled--) {
            model_t c, s;
            make_pair(&c, &s, 7 + (uint64_t)o);
            data_t d = make_data();
            amp_scaler_opts so = {.init_scale = 128.0, .growth_factor = 2.0, .growth_interval = 1, .disabled = !enabled};
            amp_scaler *sc = amp_scaler_new(&so);
            run(k, &d, &c, sc, false);
            run(k, &d, &s, sc, true);
            if (enabled) {
                double want = 128.0 * pow(2.0, unskipped) * pow(0.5, skipped);
                if (amp_scaler_get_scale(sc) != want)
                    fail_msg("%s: final scale %g, expected %g", names[o], amp_scaler_get_scale(sc), want);
                assert_int_equal(amp_scaler_num_skipped(sc), skipped);
            } else {
                assert_true(amp_scaler_get_scale(sc) == 1.0);
            }
            char what[64];
            snprintf(what, sizeof what, "case %d, %s, %s", (int)k, names[o], enabled ? "enabled" : "disabled");
            compare(&c, &s, atol, rtol, what);
            amp_scaler_free(sc);
            free_model(&c);
            free_model(&s);
            free_data(&d);
        }
    }
}

static void t_scaling_basic(void **st) {
    (void)st;
    run_scaling_case(CASE_BASIC, 3, 1, 1e-7, 1e-5);
}
static void t_scaling_autocast(void **st) {
    (void)st;
    /* f16 forward vs f32 control: torch uses atol 1e-3; values here reach ~10,
     * so the relative part is f16's precision (2^-11) times a few layers */
    run_scaling_case(CASE_AUTOCAST, 3, 1, 1e-3, 2e-3);
}
static void t_scaling_clipping(void **st) {
    (void)st;
    run_scaling_case(CASE_CLIP, 3, 1, 1e-5, 1e-5); /* clip scaled grads at max_norm*scale (torch: atol 1e-5) */
}
static void t_scaling_clipping_separate_unscale(void **st) {
    (void)st;
    run_scaling_case(CASE_CLIP_UNSCALE, 3, 1, 1e-7, 1e-5);
}
static void t_scaling_accumulation(void **st) {
    (void)st;
    run_scaling_case(CASE_ACCUM, 2, 0, 1e-7, 1e-5);
}

/* two models, two losses, two optimizers: only the poisoned optimizer skips,
 * the scale backs off once */
static void t_scaling_multiple(void **st) {
    (void)st;
    g_optk = amp_sgd_opts(1.0);
    for (int enabled = 1; enabled >= 0; enabled--) {
        model_t c0, s0, c1, s1;
        make_pair(&c0, &s0, 11);
        make_pair(&c1, &s1, 12);
        data_t d = make_data();
        amp_scaler_opts so = {.init_scale = 128.0, .growth_factor = 2.0, .growth_interval = 1, .disabled = !enabled};
        amp_scaler *sc = amp_scaler_new(&so);
        for (int pass = 0; pass < 2; pass++) {
            bool scaling = pass == 1;
            model_t *m0 = scaling ? &s0 : &c0, *m1 = scaling ? &s1 : &c1;
            for (int i = 0; i < 4; i++) {
                amp_scope *s = amp_scope_begin();
                amp_optim_zero_grad(m0->opt);
                amp_optim_zero_grad(m1->opt);
                amp_tensor *o0 = amp_module_forward(m0->mod, d.x[i]), *o1 = amp_module_forward(m1->mod, d.x[i]);
                amp_tensor *l0 = amp_mse_loss(amp_add(amp_mul_scalar(o0, 0.3), amp_mul_scalar(o1, 0.7)), d.y[i], NULL);
                amp_tensor *l1 = amp_mse_loss(amp_sub(amp_mul_scalar(o0, 0.6), amp_mul_scalar(o1, 0.4)), d.y[i], NULL);
                if (scaling) {
                    assert_int_equal(amp_backward_ex(amp_scaler_scale(sc, l0), NULL, true), AMP_OK);
                    assert_int_equal(amp_backward(amp_scaler_scale(sc, l1)), AMP_OK);
                    if (i == 2 && enabled) poison(m1);
                    assert_int_equal(amp_scaler_unscale(sc, m0->opt), AMP_OK); /* stress: separate unscale */
                    bool sk0, sk1;
                    assert_int_equal(amp_scaler_step(sc, m0->opt, &sk0), AMP_OK);
                    assert_int_equal(amp_scaler_step(sc, m1->opt, &sk1), AMP_OK);
                    assert_false(sk0);
                    assert_true(sk1 == (i == 2 && enabled));
                    assert_int_equal(amp_scaler_update(sc), AMP_OK);
                } else {
                    assert_int_equal(amp_backward_ex(l0, NULL, true), AMP_OK);
                    assert_int_equal(amp_backward(l1), AMP_OK);
                    amp_optim_step(m0->opt);
                    if (!enabled || i != 2) amp_optim_step(m1->opt);
                }
                amp_scope_end(s);
            }
        }
        assert_true(amp_scaler_get_scale(sc) == (enabled ? 128.0 * 8 * 0.5 : 1.0));
        compare(&c0, &s0, 1e-7, 1e-5, "multiple: model 0");
        compare(&c1, &s1, 1e-7, 1e-5, "multiple: model 1");
        amp_scaler_free(sc);
        free_model(&c0);
        free_model(&s0);
        free_model(&c1);
        free_model(&s1);
        free_data(&d);
    }
}

/* state saved after two iterations and loaded into a fresh scaler continues
 * exactly like the uninterrupted run */
static void t_state_dict(void **st) {
    (void)st;
    amp_scaler *s0 = amp_scaler_new(&(amp_scaler_opts){.init_scale = 3.0, .growth_factor = 4.0, .backoff_factor = 0.5, .growth_interval = 2});
    amp_scaler *s1 = amp_scaler_new(&(amp_scaler_opts){.init_scale = 6.0, .growth_factor = 7.0, .backoff_factor = 0.8, .growth_interval = 1});
    amp_scaler_state ss;
    assert_int_equal(amp_scaler_state_get(s0, &ss), AMP_OK);
    assert_int_equal(amp_scaler_state_set(s1, &ss), AMP_OK);
    amp_scaler_state got;
    amp_scaler_state_get(s1, &got);
    assert_true(got.scale == 3.0 && got.growth_factor == 4.0 && got.backoff_factor == 0.5);
    assert_int_equal(got.growth_interval, 2);
    assert_int_equal(got.growth_tracker, 0);
    amp_scaler_free(s0);
    amp_scaler_free(s1);

    /* mid-run */
    g_optk = amp_adam_opts(1.0);
    model_t c, s;
    make_pair(&c, &s, 5);
    data_t d = make_data();
    amp_scaler_opts so = {.init_scale = 128.0, .growth_factor = 2.0, .growth_interval = 3};
    amp_scaler *a = amp_scaler_new(&so), *b = amp_scaler_new(&so);
    for (int i = 0; i < 4; i++) {
        for (int which = 0; which < 2; which++) {
            model_t *m = which ? &s : &c;
            amp_scaler **sc = which ? &b : &a;
            if (which && i == 2) { /* save and reload b's state into a brand new scaler */
                amp_scaler_state sv;
                amp_scaler_state_get(*sc, &sv);
                amp_scaler_free(*sc);
                *sc = amp_scaler_new(&(amp_scaler_opts){.init_scale = 1.0});
                assert_int_equal(amp_scaler_state_set(*sc, &sv), AMP_OK);
            }
            amp_scope *scope = amp_scope_begin();
            amp_optim_zero_grad(m->opt);
            amp_tensor *loss = amp_mse_loss(amp_module_forward(m->mod, d.x[i]), d.y[i], NULL);
            amp_backward(amp_scaler_scale(*sc, loss));
            if (i == 1) poison(m);
            amp_scaler_step(*sc, m->opt, NULL);
            amp_scaler_update(*sc);
            amp_scope_end(scope);
        }
    }
    assert_true(amp_scaler_get_scale(a) == amp_scaler_get_scale(b));
    assert_int_equal(amp_scaler_growth_tracker(a), amp_scaler_growth_tracker(b));
    compare(&c, &s, 0, 0, "state reload");
    amp_scaler_free(a);
    amp_scaler_free(b);
    free_model(&c);
    free_model(&s);
    free_data(&d);
    /* a disabled scaler has no state */
    amp_scaler *dis = amp_scaler_new(&(amp_scaler_opts){.disabled = true});
    assert_int_equal(amp_scaler_state_get(dis, &ss), AMP_ERR_STATE);
    assert_int_equal(amp_scaler_state_set(dis, &ss), AMP_ERR_STATE);
    amp_clear_error();
    amp_scaler_free(dis);
}

/* torch's test_grad_scaling_update_scale: growth 2, backoff 0.25, interval 2 */
static void t_update_rule(void **st) {
    (void)st;
    g_optk = amp_sgd_opts(0.1);
    amp_generator g = amp_generator_make(1);
    model_t m = make_model(&g);
    amp_scaler *sc = amp_scaler_new(&(amp_scaler_opts){.init_scale = 4.0, .growth_factor = 2.0, .backoff_factor = 0.25, .growth_interval = 2});
    data_t d = make_data();
    double want_scale[3] = {4.0, 8.0, 2.0};
    int64_t want_tracker[3] = {1, 0, 0};
    for (int i = 0; i < 3; i++) {
        amp_scope *s = amp_scope_begin();
        amp_optim_zero_grad(m.opt);
        amp_backward(amp_scaler_scale(sc, amp_mse_loss(amp_module_forward(m.mod, d.x[i]), d.y[i], NULL)));
        if (i == 2) poison(&m);
        amp_scaler_step(sc, m.opt, NULL);
        assert_int_equal(amp_scaler_update(sc), AMP_OK);
        assert_true(amp_scaler_get_scale(sc) == want_scale[i]);
        assert_int_equal(amp_scaler_growth_tracker(sc), want_tracker[i]);
        amp_scope_end(s);
    }
    int64_t n;
    const float *h = amp_scaler_scale_history(sc, &n);
    assert_int_equal(n, 3);
    assert_true(h[0] == 4.0f && h[1] == 8.0f && h[2] == 2.0f);
    /* update(new_scale) sets the scale and leaves the tracker */
    amp_scope *s = amp_scope_begin();
    amp_backward(amp_scaler_scale(sc, amp_mse_loss(amp_module_forward(m.mod, d.x[3]), d.y[3], NULL)));
    amp_scaler_step(sc, m.opt, NULL);
    assert_int_equal(amp_scaler_update_to(sc, 1024.0), AMP_OK);
    assert_true(amp_scaler_get_scale(sc) == 1024.0);
    assert_int_equal(amp_scaler_growth_tracker(sc), 0);
    amp_scope_end(s);
    amp_scaler_free(sc);
    free_model(&m);
    free_data(&d);
}

/* torch's test_grad_scale_will_not_overflow: init 1e38, growth 2^4, interval 1 */
static void t_no_overflow_to_inf(void **st) {
    (void)st;
    g_optk = amp_adam_opts(1e-3);
    amp_generator g = amp_generator_make(3);
    amp_module *lin = amp_nn_linear(5, 1, true, &g);
    amp_tensor *ps[2];
    amp_module_parameters(lin, ps, NULL, 2);
    amp_optim *opt = amp_optim_new(ps, 2, &g_optk);
    amp_scaler *sc = amp_scaler_new(&(amp_scaler_opts){.growth_interval = 1, .growth_factor = 16.0, .init_scale = 1e38});
    test_rng r = {4};
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = tc_randn(&r, AMP_F32, 2, AMP_SHAPE(1, 5), 1.0);
    amp_tensor *y = tc_randn(&r, AMP_F32, 2, AMP_SHAPE(1, 1), 1e-30);
    amp_tensor *l = amp_mean(amp_pow(amp_sub(amp_module_forward(lin, x), y), 2.0), NULL, 0, false);
    amp_backward(amp_scaler_scale(sc, l));
    amp_scaler_step(sc, opt, NULL);
    amp_scaler_update(sc);
    double scale = amp_scaler_get_scale(sc);
    assert_true(isfinite(scale));
    assert_true(scale == (double)1e38f || scale < (double)1e38f); /* grew to inf: refused, or backed off */
    amp_scope_end(s);
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_module_free(lin);
}

static void t_errors(void **st) {
    (void)st;
    tc_assert_fails(amp_scaler_new(&(amp_scaler_opts){.growth_factor = 1.0}), "growth_factor");
    tc_assert_fails(amp_scaler_new(&(amp_scaler_opts){.backoff_factor = 1.0}), "backoff_factor");
    tc_assert_fails(amp_scaler_new(&(amp_scaler_opts){.init_scale = -1}), "init_scale");
    g_optk = amp_sgd_opts(0.1);
    amp_generator g = amp_generator_make(1);
    model_t m = make_model(&g);
    data_t d = make_data();
    amp_scaler *sc = amp_scaler_new(NULL);
    assert_true(amp_scaler_get_scale(sc) == 65536.0); /* torch's default */
    assert_int_equal(amp_scaler_update(sc), AMP_ERR_STATE); /* no inf checks recorded */
    assert_non_null(strstr(amp_last_error(), "no inf checks"));
    amp_scope *s = amp_scope_begin();
    amp_backward(amp_scaler_scale(sc, amp_mse_loss(amp_module_forward(m.mod, d.x[0]), d.y[0], NULL)));
    assert_int_equal(amp_scaler_unscale(sc, m.opt), AMP_OK);
    assert_int_equal(amp_scaler_unscale(sc, m.opt), AMP_ERR_STATE);
    assert_non_null(strstr(amp_last_error(), "unscale already called on this optimizer since the last update"));
    assert_int_equal(amp_scaler_step(sc, m.opt, NULL), AMP_OK);
    assert_int_equal(amp_scaler_step(sc, m.opt, NULL), AMP_ERR_STATE);
    assert_non_null(strstr(amp_last_error(), "step already called"));
    assert_int_equal(amp_scaler_unscale(sc, m.opt), AMP_ERR_STATE);
    assert_non_null(strstr(amp_last_error(), "after step"));
    assert_int_equal(amp_scaler_update(sc), AMP_OK);
    amp_scope_end(s);
    /* f16 gradients are refused without master weights */
    amp_tensor *hp = amp_tensor_ones(AMP_F16, 1, AMP_SHAPE(4));
    amp_tensor_set_requires_grad(hp, true);
    amp_optim *ho = amp_optim_new(&hp, 1, &g_optk);
    amp_tensor *hg = amp_tensor_ones(AMP_F16, 1, AMP_SHAPE(4));
    amp_tensor_set_grad(hp, hg);
    assert_int_equal(amp_scaler_unscale(sc, ho), AMP_ERR_DTYPE);
    assert_non_null(strstr(amp_last_error(), "FP16 gradients"));
    amp_clear_error();
    amp_optim_free(ho);
    test_free_tensors(hg, hp);
    assert_null(amp_scaler_scale(sc, NULL));
    amp_clear_error();
    amp_scaler_free(sc);
    free_model(&m);
    free_data(&d);
}

/* DeepSpeed/Megatron hysteresis, min/max scale, static scale */
static void t_extensions(void **st) {
    (void)st;
    g_optk = amp_sgd_opts(0.1);
    amp_generator g = amp_generator_make(2);
    model_t m = make_model(&g);
    data_t d = make_data();
    struct {
        amp_scaler_opts o;
        bool poison[6];
        double want[6];
    } cases[] = {
        /* hysteresis 2 (Megatron): back off from the second overflow on; only growth restores the budget */
        {{.init_scale = 64, .hysteresis = 2, .growth_interval = 1000}, {1, 1, 0, 1, 1, 1}, {64, 32, 32, 16, 8, 4}},
        /* consecutive: a clean step restores the budget */
        {{.init_scale = 64, .hysteresis = 2, .consecutive_hysteresis = true, .growth_interval = 1000},
         {1, 0, 1, 1, 0, 1},
         {64, 64, 64, 32, 32, 32}},
        /* min and max scale */
        {{.init_scale = 4, .min_scale = 1, .growth_interval = 1}, {1, 1, 1, 1, 0, 0}, {2, 1, 1, 1, 2, 4}},
        {{.init_scale = 8, .max_scale = 16, .growth_interval = 1}, {0, 0, 0, 1, 0, 0}, {16, 16, 16, 8, 16, 16}},
        /* static scale: skips, never changes */
        {{.init_scale = 512, .static_scale = true, .growth_interval = 1}, {0, 1, 0, 1, 0, 0}, {512, 512, 512, 512, 512, 512}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        amp_scaler *sc = amp_scaler_new(&cases[c].o);
        assert_non_null(sc);
        for (int i = 0; i < 6; i++) {
            amp_scope *s = amp_scope_begin();
            amp_optim_zero_grad(m.opt);
            amp_backward(amp_scaler_scale(sc, amp_mse_loss(amp_module_forward(m.mod, d.x[i % 4]), d.y[i % 4], NULL)));
            if (cases[c].poison[i]) poison(&m);
            bool skipped;
            amp_scaler_step(sc, m.opt, &skipped);
            assert_true(skipped == cases[c].poison[i]);
            amp_scaler_update(sc);
            if (amp_scaler_get_scale(sc) != cases[c].want[i])
                fail_msg("extension case %zu step %d: scale %g, expected %g", c, i, amp_scaler_get_scale(sc), cases[c].want[i]);
            amp_scope_end(s);
        }
        amp_scaler_free(sc);
    }
    free_model(&m);
    free_data(&d);
}

/* amp_context: enabled=false is exactly the plain f32 loop; fp16 scales */
static void t_context(void **st) {
    (void)st;
    g_optk = amp_adamw_opts(1e-2);
    model_t a, b;
    make_pair(&a, &b, 9);
    data_t d = make_data();
    amp_context *off = amp_context_new(&(amp_context_opts){.enabled = false});
    assert_null(amp_context_scaler(off));
    for (int i = 0; i < 4; i++) {
        amp_scope *s = amp_scope_begin();
        amp_optim_zero_grad(a.opt);
        amp_optim_zero_grad(b.opt);
        assert_int_equal(amp_context_enter(off), AMP_OK);
        assert_false(amp_autocast_is_enabled());
        amp_tensor *la = amp_mse_loss(amp_module_forward(a.mod, d.x[i]), d.y[i], NULL);
        assert_int_equal(amp_context_exit(off), AMP_OK);
        assert_int_equal(amp_context_backward(off, la), AMP_OK);
        assert_int_equal(amp_context_step(off, a.opt, NULL), AMP_OK);
        amp_tensor *lb = amp_mse_loss(amp_module_forward(b.mod, d.x[i]), d.y[i], NULL);
        amp_backward(lb);
        amp_optim_step(b.opt);
        amp_scope_end(s);
    }
    compare(&b, &a, 0, 0, "context disabled == plain loop");
    amp_context *h = amp_context_new(&(amp_context_opts){.enabled = true, .dtype = AMP_F16});
    assert_non_null(amp_context_scaler(h));
    assert_true(amp_scaler_get_scale(amp_context_scaler(h)) == 65536.0);
    amp_context *bf = amp_context_new(&(amp_context_opts){.enabled = true, .dtype = AMP_BF16});
    assert_null(amp_context_scaler(bf)); /* bf16: no scaler unless asked */
    amp_context *bf2 = amp_context_new(&(amp_context_opts){.enabled = true, .dtype = AMP_BF16, .scaler = AMP_SCALER_ON});
    assert_non_null(amp_context_scaler(bf2));
    amp_scope *s = amp_scope_begin();
    amp_context_enter(h);
    assert_true(amp_autocast_is_enabled() && amp_autocast_dtype() == AMP_F16);
    amp_tensor *out = amp_module_forward(a.mod, d.x[0]);
    assert_int_equal(amp_tensor_dtype(out), AMP_F16);
    amp_tensor *loss = amp_mse_loss(out, d.y[0], NULL);
    assert_int_equal(amp_tensor_dtype(loss), AMP_F32);
    amp_context_exit(h);
    amp_optim_zero_grad(a.opt);
    assert_int_equal(amp_context_backward(h, loss), AMP_OK);
    assert_int_equal(amp_tensor_dtype(amp_tensor_grad(a.params[0])), AMP_F32);
    bool skipped = true;
    assert_int_equal(amp_context_step(h, a.opt, &skipped), AMP_OK);
    assert_false(skipped);
    amp_scope_end(s);
    tc_assert_fails(amp_context_new(&(amp_context_opts){.enabled = true, .dtype = AMP_F32}), "amp_context_new");
    amp_context_free(off);
    amp_context_free(h);
    amp_context_free(bf);
    amp_context_free(bf2);
    free_model(&a);
    free_model(&b);
    free_data(&d);
}

/* ---- issue 12: non-finite values never reach the weights ------------------------------- */
/* One f32 parameter of 4 elements, gradient set by hand. */
typedef struct {
    amp_tensor *p;
    amp_optim *opt;
} one_param;

static one_param one_make(amp_optim_opts o) {
    one_param r;
    r.p = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(4));
    amp_tensor_set_requires_grad(r.p, true);
    r.opt = amp_optim_new(&r.p, 1, &o);
    assert_non_null(r.opt);
    return r;
}

static void one_grad(one_param *r, double v) {
    amp_tensor *g = amp_tensor_full(AMP_F32, 1, AMP_SHAPE(4), v);
    assert_int_equal(amp_tensor_set_grad(r->p, g), AMP_OK);
    amp_tensor_free(g);
}

static void one_free(one_param *r) {
    amp_optim_free(r->opt);
    amp_tensor_free(r->p);
}

static void assert_all_finite(const amp_tensor *t, const char *what) {
    if (!t) return;
    double *v = tc_values(t);
    for (int64_t i = 0; i < amp_tensor_numel(t); i++)
        if (!isfinite(v[i])) fail_msg("%s: element %lld is %g", what, (long long)i, v[i]);
    free(v);
}

static void assert_state_finite(one_param *r, const char *what) {
    char w[160];
    snprintf(w, sizeof w, "%s: weights", what);
    assert_all_finite(r->p, w);
    static const char *names[] = {"exp_avg", "exp_avg_sq", "momentum_buffer"};
    for (int k = 0; k < 3; k++) {
        amp_tensor *t = amp_optim_state(r->opt, 0, names[k]);
        amp_clear_error();
        snprintf(w, sizeof w, "%s: %s", what, names[k]);
        assert_all_finite(t, w);
    }
}

/* Item 1a: 200 overflowing steps in a row. In f32 arithmetic the scale
 * underflowed to 0 after 165 of them, and the next clean step multiplied
 * its (zero) gradients by 1/0: NaN in every weight and Adam moment. */
static void t_collapse_keeps_weights_finite(void **st) {
    (void)st;
    amp_optim_opts kinds[2] = {amp_sgd_opts(0.1), amp_adam_opts(0.1)};
    for (int k = 0; k < 2; k++) {
        one_param r = one_make(kinds[k]);
        amp_scaler *sc = amp_scaler_new(NULL);
        for (int i = 0; i < 200; i++) {
            one_grad(&r, INFINITY);
            bool skipped = false;
            assert_int_equal(amp_scaler_step(sc, r.opt, &skipped), AMP_OK);
            assert_true(skipped);
            assert_int_equal(amp_scaler_update(sc), AMP_OK);
        }
        double scale = amp_scaler_get_scale(sc);
        one_grad(&r, 0.0); /* a clean step */
        bool skipped = true;
        assert_int_equal(amp_scaler_step(sc, r.opt, &skipped), AMP_OK);
        assert_int_equal(amp_scaler_update(sc), AMP_OK);
        assert_state_finite(&r, k ? "adam after the collapse" : "sgd after the collapse");
        if (!(scale >= FLT_MIN)) fail_msg("the scale collapsed to %g (below the normal f32 range)", scale);
        /* the state of a collapsed scaler can be saved and restored (item 2) */
        amp_scaler_state ss;
        assert_int_equal(amp_scaler_state_get(sc, &ss), AMP_OK);
        amp_scaler *sc2 = amp_scaler_new(NULL);
        if (amp_scaler_state_set(sc2, &ss) != AMP_OK) fail_msg("restoring a collapsed scaler: %s", amp_last_error());
        assert_true(amp_scaler_get_scale(sc2) == amp_scaler_get_scale(sc));
        amp_scaler_free(sc2);
        amp_scaler_free(sc);
        one_free(&r);
    }
}

/* Item 1b: with a scale below 1, a finite scaled gradient unscales to inf.
 * The step must be skipped: on the fused path (step without unscale) and
 * after an explicit unscale. */
static void t_unscale_overflow_skips(void **st) {
    (void)st;
    for (int explicit_unscale = 0; explicit_unscale < 2; explicit_unscale++) {
        one_param r = one_make(amp_adam_opts(0.1));
        amp_scaler *sc = amp_scaler_new(&(amp_scaler_opts){.init_scale = 0.25});
        one_grad(&r, 1e38); /* finite; times 4 is inf */
        if (explicit_unscale) {
            assert_int_equal(amp_scaler_unscale(sc, r.opt), AMP_OK);
            assert_true(amp_scaler_found_inf(sc, r.opt));
        }
        bool skipped = false;
        assert_int_equal(amp_scaler_step(sc, r.opt, &skipped), AMP_OK);
        if (!skipped) fail_msg("%s: a gradient of 1e38 at scale 0.25 (4e38 unscaled) was applied", explicit_unscale ? "unscale + step" : "fused step");
        assert_int_equal(amp_scaler_update(sc), AMP_OK);
        assert_true(amp_scaler_get_scale(sc) == 0.125);
        for (int i = 0; i < 4; i++) assert_true(amp_tensor_get(r.p, AMP_SHAPE(i)) == 1.0);
        assert_state_finite(&r, "after the skipped step");
        amp_scaler_free(sc);
        one_free(&r);
    }
}

/* Item 1c: scales are f32; a double outside the f32 range is an error, not
 * silently 0 or inf. */
static void t_scale_range_checked(void **st) {
    (void)st;
    tc_assert_fails(amp_scaler_new(&(amp_scaler_opts){.init_scale = 1e-300}), "init_scale");
    tc_assert_fails(amp_scaler_new(&(amp_scaler_opts){.init_scale = 1e300}), "init_scale");
    tc_assert_fails(amp_scaler_new(&(amp_scaler_opts){.backoff_factor = 1e-300}), "backoff_factor");
    tc_assert_fails(amp_scaler_new(&(amp_scaler_opts){.growth_factor = 1e300}), "growth_factor");
    tc_assert_fails(amp_scaler_new(&(amp_scaler_opts){.max_scale = 1e300}), "max_scale");
    tc_assert_fails(amp_scaler_new(&(amp_scaler_opts){.min_scale = 1e-300}), "min_scale");
    amp_scaler *sc = amp_scaler_new(NULL);
    one_param r = one_make(amp_sgd_opts(0.1));
    one_grad(&r, 1.0);
    assert_int_equal(amp_scaler_step(sc, r.opt, NULL), AMP_OK);
    assert_int_equal(amp_scaler_update_to(sc, 1e-300), AMP_ERR_ARG);
    assert_non_null(strstr(amp_last_error(), "new_scale"));
    assert_int_equal(amp_scaler_update_to(sc, 1e300), AMP_ERR_ARG);
    assert_true(amp_scaler_get_scale(sc) == 65536.0);
    amp_scaler_state ss;
    assert_int_equal(amp_scaler_state_get(sc, &ss), AMP_OK);
    double bad[3] = {1e-300, 1e300, 0.0};
    for (int i = 0; i < 3; i++) {
        amp_scaler_state b = ss;
        b.scale = bad[i];
        assert_int_equal(amp_scaler_state_set(sc, &b), AMP_ERR_ARG);
        assert_non_null(strstr(amp_last_error(), "scale"));
    }
    amp_scaler_state b = ss;
    b.backoff_factor = 1e-300;
    assert_int_equal(amp_scaler_state_set(sc, &b), AMP_ERR_ARG);
    assert_true(amp_scaler_get_scale(sc) == 65536.0);
    amp_clear_error();
    amp_scaler_free(sc);
    one_free(&r);
}

/* Item 2: the scale update is torch's kernel: the f32 scale times the double
 * factor, rounded once (1700 backed off by 0.3 is 510, not 510.0000305).
 * Traces from tools/golden/gen_scaler.py. */
static void t_update_matches_torch(void **st) {
    (void)st;
    golden_file *gf = golden_open("golden_scaler.bin");
    int cases = 0;
    for (int c = 0;; c++) {
        char name[64];
        snprintf(name, sizeof name, "case%d.params", c);
        if (!golden_has(gf, name)) break;
        amp_tensor *pt = golden_tensor(gf, name);
        amp_tensor *ft = golden_tensorf(gf, "case%d.found", c);
        amp_tensor *st_ = golden_tensorf(gf, "case%d.scale", c);
        amp_tensor *tt = golden_tensorf(gf, "case%d.tracker", c);
        const double *prm = amp_tensor_data(pt);
        amp_scaler *sc = amp_scaler_new(&(amp_scaler_opts){
            .init_scale = prm[0], .growth_factor = prm[1], .backoff_factor = prm[2], .growth_interval = (int64_t)prm[3]});
        assert_non_null(sc);
        one_param r = one_make(amp_sgd_opts(0.0));
        for (int64_t i = 0; i < amp_tensor_numel(ft); i++) {
            bool found = ((const uint8_t *)amp_tensor_data(ft))[i] != 0;
            one_grad(&r, found ? INFINITY : 0.0);
            assert_int_equal(amp_scaler_step(sc, r.opt, NULL), AMP_OK);
            assert_int_equal(amp_scaler_update(sc), AMP_OK);
            float want = ((const float *)amp_tensor_data(st_))[i];
            float got = (float)amp_scaler_get_scale(sc);
            if (memcmp(&want, &got, 4) != 0)
                fail_msg("case %d update %lld: scale %.9g, torch %.9g", c, (long long)i, (double)got, (double)want);
            assert_int_equal(amp_scaler_growth_tracker(sc), ((const int64_t *)amp_tensor_data(tt))[i]);
        }
        one_free(&r);
        amp_scaler_free(sc);
        amp_tensor *all[] = {pt, ft, st_, tt};
        for (int i = 0; i < 4; i++) amp_tensor_free(all[i]);
        cases++;
    }
    assert_true(cases >= 8);
    golden_close(gf);
}

/* Item 4: BatchNorm updates its running statistics in the forward, before the
 * scaler knows the step will be skipped. A skipped step must leave every
 * buffer as it was; a step that is not skipped keeps the update. */
static void t_bn_buffers_skipped_step(void **st) {
    (void)st;
    amp_module *bn = amp_nn_batchnorm2d(3, 1e-5, 0.1);
    amp_module_train(bn, true);
    amp_tensor *ps[2];
    assert_int_equal(amp_module_parameters(bn, ps, NULL, 2), 2);
    amp_optim_opts oo = amp_sgd_opts(0.1);
    amp_optim *opt = amp_optim_new(ps, 2, &oo);
    amp_scaler *sc = amp_scaler_new(NULL);
    amp_tensor *bufs[5];
    const char *names[5];
    assert_int_equal(amp_module_state(bn, bufs, names, 5), 5); /* weight, bias, running_mean, running_var, num_batches_tracked */
    test_rng r = {77};
    for (int it = 0; it < 3; it++) {
        double before[3][3];
        for (int b = 0; b < 3; b++)
            for (int64_t c = 0; c < (b < 2 ? 3 : 1); c++) before[b][c] = b < 2 ? amp_tensor_get(bufs[2 + b], &c) : amp_tensor_get(bufs[4], NULL);
        amp_scope *s = amp_scope_begin();
        amp_optim_zero_grad(opt);
        amp_tensor *x = tc_randn(&r, AMP_F32, 4, AMP_SHAPE(2, 3, 2, 2), 1.0);
        amp_tensor *loss = amp_sum(amp_module_forward(bn, x), NULL, 0, false);
        assert_int_equal(amp_backward(amp_scaler_scale(sc, loss)), AMP_OK);
        bool poison_it = it != 1;
        if (poison_it) amp_tensor_set(amp_tensor_grad(ps[0]), AMP_SHAPE(1), INFINITY);
        bool skipped = false;
        assert_int_equal(amp_scaler_step(sc, opt, &skipped), AMP_OK);
        assert_int_equal(amp_scaler_update(sc), AMP_OK);
        assert_true(skipped == poison_it);
        for (int b = 0; b < 3; b++)
            for (int64_t c = 0; c < (b < 2 ? 3 : 1); c++) {
                double now = b < 2 ? amp_tensor_get(bufs[2 + b], &c) : amp_tensor_get(bufs[4], NULL);
                if (skipped && now != before[b][c])
                    fail_msg("iteration %d (skipped): %s[%lld] changed from %g to %g", it, names[2 + b], (long long)c, before[b][c], now);
                if (!skipped && b == 2 && now != before[b][c] + 1) fail_msg("a clean step must count its batch");
            }
        amp_scope_end(s);
    }
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_module_free(bn);
}

AMP_TEST_MAIN(t_scaling_basic, t_scaling_autocast, t_scaling_clipping, t_scaling_clipping_separate_unscale,
              t_scaling_accumulation, t_scaling_multiple, t_state_dict, t_update_rule, t_no_overflow_to_inf, t_errors,
              t_extensions, t_context, t_collapse_keeps_weights_finite, t_unscale_overflow_skips, t_scale_range_checked,
              t_update_matches_torch, t_bn_buffers_skipped_step)

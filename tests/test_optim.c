/* Optimizers against PyTorch (golden data from tools/golden/gen_optim.py),
 * clipping, schedules, errors, and master weights: the failure they fix. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "op_check.h"

static golden_file *g_gold;

static int setup(void **s) {
    (void)s;
    g_gold = golden_open("golden_optim.bin");
    return 0;
}

static int teardown(void **s) {
    (void)s;
    golden_close(g_gold);
    return 0;
}

static void run_case(const char *name, amp_optim_opts o) {
    amp_tensor *p = golden_tensor(g_gold, "p0");
    amp_tensor_set_requires_grad(p, true);
    amp_optim *opt = amp_optim_new(&p, 1, &o);
    assert_non_null(opt);
    char rec[64];
    for (int i = 0; i < 5; i++) {
        snprintf(rec, sizeof rec, "g%d", i);
        amp_tensor *g = golden_tensor(g_gold, rec);
        assert_int_equal(amp_tensor_set_grad(p, g), AMP_OK);
        amp_tensor_free(g);
        assert_int_equal(amp_optim_step(opt), AMP_OK);
        snprintf(rec, sizeof rec, "%s.p%d", name, i);
        amp_tensor *want = golden_tensor(g_gold, rec);
        double *w = tc_values(want);
        char what[96];
        snprintf(what, sizeof what, "%s step %d vs torch", name, i + 1);
        tc_assert_tensor(p, w, 2e-6, 1e-7, what);
        free(w);
        amp_tensor_free(want);
    }
    const char *states[] = {"exp_avg", "exp_avg_sq", "momentum_buffer"};
    for (int k = 0; k < 3; k++) {
        snprintf(rec, sizeof rec, "%s.%s", name, states[k]);
        if (!golden_has(g_gold, rec)) continue;
        amp_tensor *st = amp_optim_state(opt, 0, states[k]);
        assert_non_null(st);
        amp_tensor *want = golden_tensor(g_gold, rec);
        double *w = tc_values(want);
        tc_assert_tensor(st, w, 2e-6, 2e-7, rec); /* torch fuses a+alpha*b (FMA) */
        free(w);
        amp_tensor_free(want);
    }
    assert_int_equal(amp_optim_steps(opt), 5);
    amp_optim_free(opt);
    amp_tensor_free(p);
}

static void t_sgd_vs_torch(void **s) {
    (void)s;
    run_case("sgd", amp_sgd_opts(0.1));
    amp_optim_opts o = amp_sgd_opts(0.1);
    o.momentum = 0.9;
    o.dampening = 0.1;
    o.weight_decay = 0.01;
    run_case("sgd_mom", o);
    o = amp_sgd_opts(0.05);
    o.momentum = 0.8;
    o.nesterov = true;
    o.weight_decay = 0.02;
    run_case("sgd_nesterov", o);
}

static void t_adam_vs_torch(void **s) {
    (void)s;
    run_case("adam", amp_adam_opts(1e-2));
    amp_optim_opts o = amp_adam_opts(1e-2);
    o.beta1 = 0.8;
    o.beta2 = 0.99;
    o.eps = 1e-6;
    o.weight_decay = 0.1;
    run_case("adam_wd", o);
    run_case("adamw", amp_adamw_opts(1e-2));
    o = amp_adamw_opts(3e-2);
    o.beta1 = 0.85;
    o.beta2 = 0.995;
    o.eps = 1e-7;
    o.weight_decay = 0.2;
    run_case("adamw_wd", o);
    amp_optim_opts d = amp_adamw_opts(1e-3);
    assert_true(d.weight_decay == 0.01 && d.beta1 == 0.9 && d.beta2 == 0.999 && d.eps == 1e-8);
}

static void t_clip_vs_torch(void **s) {
    (void)s;
    amp_tensor *a = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(5, 3)), *b = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(7));
    amp_tensor_set_requires_grad(a, true);
    amp_tensor_set_requires_grad(b, true);
    amp_tensor *ga = golden_tensor(g_gold, "clip.ga"), *gb = golden_tensor(g_gold, "clip.gb");
    amp_tensor_set_grad(a, ga);
    amp_tensor_set_grad(b, gb);
    amp_tensor *ps[2] = {a, b};
    amp_optim *opt = amp_optim_new(ps, 2, &(amp_optim_opts){.kind = AMP_OPTIM_SGD, .lr = 0.1});
    double norm = amp_clip_grad_norm(opt, 1.5);
    amp_tensor *wn = golden_tensor(g_gold, "clip.norm");
    assert_close(norm, amp_tensor_get(wn, AMP_SHAPE(0)), 1e-6, 0, "total norm");
    amp_tensor *wa = golden_tensor(g_gold, "clip.ga_after"), *wb = golden_tensor(g_gold, "clip.gb_after");
    double *va = tc_values(wa), *vb = tc_values(wb);
    tc_assert_tensor(amp_tensor_grad(a), va, 1e-6, 1e-7, "clipped a");
    tc_assert_tensor(amp_tensor_grad(b), vb, 1e-6, 1e-7, "clipped b");
    /* a non-finite norm leaves the gradients alone */
    amp_tensor_set(amp_tensor_grad(b), AMP_SHAPE(3), INFINITY);
    double before = amp_tensor_get(amp_tensor_grad(a), AMP_SHAPE(1, 1));
    assert_true(isinf(amp_clip_grad_norm(opt, 1.5)));
    assert_true(amp_tensor_get(amp_tensor_grad(a), AMP_SHAPE(1, 1)) == before);
    /* clip by value */
    amp_tensor_set(amp_tensor_grad(b), AMP_SHAPE(3), -5.0);
    assert_int_equal(amp_clip_grad_value(opt, 0.25), AMP_OK);
    assert_true(amp_tensor_get(amp_tensor_grad(b), AMP_SHAPE(3)) == -0.25);
    assert_true(amp_clip_grad_norm(opt, -1) < 0);
    assert_non_null(strstr(amp_last_error(), "amp_clip_grad_norm"));
    amp_clear_error();
    test_free_all(va, vb);
    amp_tensor *all[] = {a, b, ga, gb, wn, wa, wb};
    for (int i = 0; i < 7; i++) amp_tensor_free(all[i]);
    amp_optim_free(opt);
}

static void t_errors_and_basics(void **s) {
    (void)s;
    amp_tensor *p = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(4));
    amp_optim_opts o = amp_adamw_opts(1e-3);
    tc_assert_fails(amp_optim_new(&p, 1, &o), "requires grad");
    amp_tensor_set_requires_grad(p, true);
    tc_assert_fails(amp_optim_new(&p, 0, &o), "amp_optim_new");
    tc_assert_fails(amp_optim_new(&p, 1, NULL), "opts");
    amp_tensor *dup[2] = {p, p};
    tc_assert_fails(amp_optim_new(dup, 2, &o), "same tensor");
    amp_optim_opts bad = o;
    bad.beta1 = 1.0;
    tc_assert_fails(amp_optim_new(&p, 1, &bad), "beta1");
    bad = amp_sgd_opts(0.1);
    bad.nesterov = true;
    tc_assert_fails(amp_optim_new(&p, 1, &bad), "nesterov");
    bad = o;
    bad.master_weights = true;
    tc_assert_fails(amp_optim_new(&p, 1, &bad), "master weights need f16 or bf16");
    amp_optim *opt = amp_optim_new(&p, 1, &o);
    assert_non_null(opt);
    /* no grad: the step skips the parameter */
    assert_int_equal(amp_optim_step(opt), AMP_OK);
    assert_true(amp_tensor_get(p, AMP_SHAPE(0)) == 1.0);
    amp_tensor *g = amp_tensor_full(AMP_F32, 1, AMP_SHAPE(4), 0.5);
    amp_tensor_set_grad(p, g);
    assert_int_equal(amp_optim_zero_grad(opt), AMP_OK);
    assert_null(amp_tensor_grad(p));
    assert_int_equal(amp_optim_set_lr(opt, -1), AMP_ERR_ARG);
    assert_int_equal(amp_optim_set_lr(opt, 0.5), AMP_OK);
    assert_true(amp_optim_get_lr(opt) == 0.5);
    assert_null(amp_optim_state(opt, 0, "nope"));
    amp_clear_error();
    amp_optim_free(opt);
    test_free_tensors(g, p);
}

static void t_schedules(void **s) {
    (void)s;
    amp_lr_schedule c = {.kind = AMP_LR_CONSTANT};
    assert_true(amp_lr_at(&c, 100, 0.1) == 0.1);
    amp_lr_schedule st = {.kind = AMP_LR_STEP, .step_size = 10, .gamma = 0.5};
    assert_true(amp_lr_at(&st, 9, 0.1) == 0.1);
    assert_true(amp_lr_at(&st, 10, 0.1) == 0.05);
    assert_true(amp_lr_at(&st, 25, 0.1) == 0.025);
    amp_lr_schedule cs = {.kind = AMP_LR_COSINE, .warmup_steps = 10, .total_steps = 110, .min_lr = 0.0};
    assert_close(amp_lr_at(&cs, 0, 1.0), 0.1, 1e-12, 0, "warmup start");
    assert_close(amp_lr_at(&cs, 9, 1.0), 1.0, 1e-12, 0, "warmup end");
    assert_close(amp_lr_at(&cs, 10, 1.0), 1.0, 1e-12, 0, "cosine start");
    assert_close(amp_lr_at(&cs, 60, 1.0), 0.5, 1e-12, 0, "cosine middle");
    assert_close(amp_lr_at(&cs, 110, 1.0), 0.0, 1e-12, 1e-15, "cosine end");
    assert_close(amp_lr_at(&cs, 500, 1.0), 0.0, 1e-12, 1e-15, "after the end");
}

/* Linear regression y = x·w* with w near 1 (bf16 spacing 2^-7 there): plain
 * SGD with a learning rate whose updates are far below half a bf16 ulp. */
enum { D = 64, B = 128, STEPS = 1500 };

static double regression(amp_dtype pdt, bool master, amp_round_mode rm, double *first_loss) {
    test_rng r = {99};
    amp_tensor *x = tc_randn(&r, AMP_F32, 2, AMP_SHAPE(B, D), 1.0);
    double wstar[D];
    for (int i = 0; i < D; i++) wstar[i] = 1.0 + 0.05 * test_rng_normal(&r);
    amp_tensor *wt = amp_tensor_borrow(wstar, AMP_F64, 2, AMP_SHAPE(1, D));
    amp_tensor *wtf = amp_to(wt, AMP_F32);
    amp_tensor *y = amp_linear(x, wtf, NULL); /* [B,1] targets in f32 */
    amp_tensor *w = amp_tensor_ones(pdt, 2, AMP_SHAPE(1, D));
    amp_tensor_set_requires_grad(w, true);
    amp_optim_opts o = amp_sgd_opts(2e-3); /* updates ~2e-4, 20x below half a bf16 ulp at 1.0 */
    o.master_weights = master;
    o.rounding = rm;
    o.seed = 7;
    amp_optim *opt = amp_optim_new(&w, 1, &o);
    assert_non_null(opt);
    amp_tensor *xin = amp_to(x, pdt);
    double loss_v = 0;
    for (int it = 0; it < STEPS; it++) {
        amp_scope *sc = amp_scope_begin();
        amp_optim_zero_grad(opt);
        amp_tensor *pred = amp_to(amp_linear(xin, w, NULL), AMP_F32);
        amp_tensor *loss = amp_mse_loss(pred, y, NULL);
        loss_v = amp_tensor_item(loss);
        if (it == 0) *first_loss = loss_v;
        assert_int_equal(amp_backward(loss), AMP_OK);
        assert_int_equal(amp_optim_step(opt), AMP_OK);
        amp_scope_end(sc);
    }
    amp_optim_free(opt);
    amp_tensor *all[] = {x, wt, wtf, y, w, xin};
    for (int i = 0; i < 6; i++) amp_tensor_free(all[i]);
    return loss_v;
}

/* The update kernel is compiled once per CPU path: all give identical bits. */
static void t_paths_identical(void **s) {
    (void)s;
    amp_cpu_path orig = amp_cpu_active();
    amp_optim_opts kinds[4] = {amp_sgd_opts(0.1), amp_adam_opts(1e-2), amp_adamw_opts(1e-2), amp_sgd_opts(0.05)};
    kinds[0].momentum = 0.9;
    kinds[0].weight_decay = 1e-3;
    kinds[3].momentum = 0.8;
    kinds[3].nesterov = true;
    for (int k = 0; k < 4; k++) {
        float ref[3001];
        for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
            if (!amp_cpu_supported((amp_cpu_path)p)) continue;
            amp_cpu_select((amp_cpu_path)p);
            test_rng r = {55};
            amp_tensor *w = tc_randn(&r, AMP_F32, 1, AMP_SHAPE(3001), 1.0);
            amp_tensor_set_requires_grad(w, true);
            amp_optim *opt = amp_optim_new(&w, 1, &kinds[k]);
            for (int it = 0; it < 3; it++) {
                amp_tensor *g = tc_randn(&r, AMP_F32, 1, AMP_SHAPE(3001), 0.5 + it);
                amp_tensor_set_grad(w, g);
                amp_tensor_free(g);
                assert_int_equal(amp_optim_step(opt), AMP_OK);
            }
            if (p == 0) memcpy(ref, amp_tensor_data(w), sizeof ref);
            else if (memcmp(ref, amp_tensor_data(w), sizeof ref) != 0)
                fail_msg("optimizer %d: path %s differs from scalar", k, amp_cpu_path_name((amp_cpu_path)p));
            amp_optim_free(opt);
            amp_tensor_free(w);
        }
    }
    amp_cpu_select(orig);
}

static void t_master_weights(void **s) {
    (void)s;
    double l0_f32, l0_sr, l0_rne, l0_m;
    double f32 = regression(AMP_F32, false, AMP_ROUND_NEAREST, &l0_f32);
    double o2_sr = regression(AMP_BF16, true, AMP_ROUND_STOCHASTIC, &l0_sr);
    double o2_rne = regression(AMP_BF16, true, AMP_ROUND_NEAREST, &l0_m);
    double stall = regression(AMP_BF16, false, AMP_ROUND_NEAREST, &l0_rne);
    print_message("regression loss after %d steps: f32 %.3g, bf16 O2+SR %.3g, bf16 O2+RNE %.3g, bf16 in place RNE %.3g "
                  "(start %.3g)\n", STEPS, f32, o2_sr, o2_rne, stall, l0_f32);
    assert_true(f32 < 0.05 * l0_f32);        /* the f32 baseline learns */
    assert_true(o2_sr < 0.05 * l0_sr);       /* master weights + SR track it */
    assert_true(o2_sr < f32 + 0.01 * l0_sr); /* within 1% of the starting loss */
    assert_true(o2_rne < 0.05 * l0_m);
    assert_true(stall > 0.9 * l0_rne);       /* in-place RNE: updates vanish, no progress */
}

/* Issue 12 item 10: settings that make the update non-finite are refused
 * with a message naming the setting (eps = 0: a zero gradient gives 0/0;
 * lr = 1e300 is inf as an f32). */
static void t_nonfinite_settings_refused(void **s) {
    (void)s;
    amp_tensor *p = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(4));
    amp_tensor_set_requires_grad(p, true);
    amp_optim_opts o = amp_adam_opts(1e-3);
    o.eps = 0;
    tc_assert_fails(amp_optim_new(&p, 1, &o), "eps");
    o = amp_adamw_opts(1e-3);
    o.eps = 1e-300; /* 0 as an f32 */
    tc_assert_fails(amp_optim_new(&p, 1, &o), "eps");
    o = amp_sgd_opts(1e300);
    tc_assert_fails(amp_optim_new(&p, 1, &o), "lr");
    o = amp_adam_opts(1e38); /* the first step size lr / (1 - beta1) = 1e39 */
    tc_assert_fails(amp_optim_new(&p, 1, &o), "lr");
    o = amp_sgd_opts(0.1);
    o.momentum = INFINITY;
    tc_assert_fails(amp_optim_new(&p, 1, &o), "momentum");
    o = amp_sgd_opts(0.1);
    o.weight_decay = 1e300;
    tc_assert_fails(amp_optim_new(&p, 1, &o), "weight_decay");
    o = amp_sgd_opts(0.1);
    o.dampening = NAN;
    tc_assert_fails(amp_optim_new(&p, 1, &o), "dampening");
    o = amp_adamw_opts(1e-3);
    amp_optim *opt = amp_optim_new(&p, 1, &o);
    assert_non_null(opt);
    assert_int_equal(amp_optim_set_lr(opt, 1e300), AMP_ERR_ARG);
    assert_non_null(strstr(amp_last_error(), "lr"));
    assert_true(amp_optim_get_lr(opt) == 1e-3);
    /* a zero gradient with the accepted defaults leaves finite weights */
    amp_tensor *g = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(4));
    amp_tensor_set_grad(p, g);
    assert_int_equal(amp_optim_step(opt), AMP_OK);
    for (int i = 0; i < 4; i++) assert_true(isfinite(amp_tensor_get(p, AMP_SHAPE(i))));
    amp_clear_error();
    amp_optim_free(opt);
    test_free_tensors(g, p);
}

/* Issue 12 item 1: finite gradients whose update still overflows f32 (or
 * the half type of an O2 parameter) never leave inf/nan behind: the step
 * fails naming the parameter, and weights and state are as before it. The
 * old code wrote -inf (SGD), an inf second moment (Adam) and an inf f16
 * parameter (O2). */
static void t_update_overflow_kept_out(void **s) {
    (void)s;
    /* SGD, lr 1: -3e38 - 3e38 */
    amp_tensor *p = amp_tensor_full(AMP_F32, 1, AMP_SHAPE(3000), -3e38);
    amp_tensor_set_requires_grad(p, true);
    amp_tensor *g = amp_tensor_full(AMP_F32, 1, AMP_SHAPE(3000), 1e-3);
    amp_tensor_set(g, AMP_SHAPE(2500), 3e38); /* the third tile */
    amp_tensor_set_grad(p, g);
    amp_optim_opts o = amp_sgd_opts(1.0);
    o.momentum = 0.5;
    amp_optim *opt = amp_optim_new(&p, 1, &o);
    assert_int_equal(amp_optim_step(opt), AMP_ERR_RANGE);
    if (!strstr(amp_last_error(), "parameter 0")) fail_msg("%s", amp_last_error());
    double *v = tc_values(p);
    for (int i = 0; i < 3000; i++)
        if (!isfinite(v[i])) fail_msg("SGD: weight %d is %g", i, v[i]);
    assert_true(v[2500] == (double)-3e38f);
    free(v);
    assert_int_equal(amp_optim_steps(opt), 0);
    assert_null(amp_optim_state(opt, 0, "momentum_buffer")); /* the next step is still the first */
    amp_clear_error();
    amp_optim_free(opt);
    /* Adam: (1 - beta2) * 1e22 * 1e22 overflows the second moment */
    amp_tensor_fill_(p, 1.0);
    amp_tensor_set(g, AMP_SHAPE(7), 1e22);
    amp_tensor_set(g, AMP_SHAPE(2500), 1e-3);
    amp_tensor_set_grad(p, g);
    o = amp_adam_opts(0.1);
    opt = amp_optim_new(&p, 1, &o);
    assert_int_equal(amp_optim_step(opt), AMP_ERR_RANGE);
    assert_non_null(strstr(amp_last_error(), "Adam moments"));
    double *ev = tc_values(amp_optim_state(opt, 0, "exp_avg_sq"));
    for (int i = 0; i < 3000; i++)
        if (ev[i] != 0) fail_msg("Adam: exp_avg_sq[%d] = %g after a refused step", i, ev[i]);
    free(ev);
    amp_clear_error();
    amp_optim_free(opt);
    test_free_tensors(g, p);
    /* O2: an f16 parameter whose f32 master would pass 65504 */
    amp_tensor *h = amp_tensor_full(AMP_F16, 1, AMP_SHAPE(16), 65024);
    amp_tensor_set_requires_grad(h, true);
    amp_tensor *hg = amp_tensor_full(AMP_F16, 1, AMP_SHAPE(16), -1000);
    amp_tensor_set_grad(h, hg);
    o = amp_sgd_opts(1.0);
    o.master_weights = true;
    opt = amp_optim_new(&h, 1, &o);
    assert_int_equal(amp_optim_step(opt), AMP_ERR_RANGE);
    assert_non_null(strstr(amp_last_error(), "half type"));
    for (int i = 0; i < 16; i++) {
        assert_true(amp_tensor_get(h, AMP_SHAPE(i)) == 65024);
        assert_true(amp_tensor_get(amp_optim_state(opt, 0, "master"), AMP_SHAPE(i)) == 65024);
    }
    amp_clear_error();
    amp_optim_free(opt);
    test_free_tensors(hg, h);
    /* and inf/nan gradients are refused by a plain step, nothing applied */
    amp_tensor *q = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(4));
    amp_tensor_set_requires_grad(q, true);
    amp_tensor *qg = amp_tensor_full(AMP_F32, 1, AMP_SHAPE(4), NAN);
    amp_tensor_set_grad(q, qg);
    o = amp_sgd_opts(0.1);
    opt = amp_optim_new(&q, 1, &o);
    assert_int_equal(amp_optim_step(opt), AMP_ERR_RANGE);
    assert_non_null(strstr(amp_last_error(), "inf or nan"));
    assert_true(amp_tensor_get(q, AMP_SHAPE(0)) == 1.0);
    amp_clear_error();
    amp_optim_free(opt);
    test_free_tensors(qg, q);
}

/* The global norm does not depend on the thread count: a gradient whose
 * first tile is 1e8 and the rest 0.7 (squares summed in double round
 * differently in any other order) gives the same bits on 1, 3 and 4 threads,
 * so a clipped run is the same whatever the machine's load left free
 * (threads.h: regions use fewer threads while other processes are busy). */
static void t_clip_norm_thread_count(void **s) {
    (void)s;
    const int64_t n = 300000;
    float *v = malloc(sizeof(float) * (size_t)n);
    double ref = 0;
    for (int64_t k = 0; k < n; k++) {
        v[k] = k < 1024 ? 1e8f : 0.7f;
        ref += (double)v[k] * (double)v[k];
    }
    amp_tensor *p = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(n)), *g = amp_tensor_from_data(v, AMP_F32, 1, AMP_SHAPE(n));
    amp_tensor_set_requires_grad(p, true);
    amp_tensor_set_grad(p, g);
    const int saved = amp_get_num_threads(), counts[] = {1, 3, 4};
    double norms[3];
    for (int i = 0; i < 3; i++) {
        amp_set_num_threads(counts[i]);
        norms[i] = amp_clip_grad_norm_params(&p, 1, 1e30); /* no clipping: the gradient stays */
    }
    amp_set_num_threads(saved);
    assert_close(norms[0], sqrt(ref), 1e-12, 0, "norm against float64");
    for (int i = 1; i < 3; i++)
        if (memcmp(&norms[i], &norms[0], sizeof(double)))
            fail_msg("norm on %d threads %.17g, on 1 thread %.17g", counts[i], norms[i], norms[0]);
    test_free_tensors(g, p);
    free(v);
}

AMP_TEST_MAIN_FIXTURES(setup, teardown, t_sgd_vs_torch, t_adam_vs_torch, t_clip_vs_torch, t_errors_and_basics,
                       t_schedules, t_master_weights, t_paths_identical, t_nonfinite_settings_refused,
                       t_update_overflow_kept_out, t_clip_norm_thread_count)

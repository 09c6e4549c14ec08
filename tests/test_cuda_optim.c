/* The optimizers and the GradScaler on a CUDA device against the same calls
 * on the CPU (kernels/backend.h's optimizer and scaler entries, src/optim/,
 * src/amp/scaler.c). Skipped (exit 77, "SKIP: no CUDA device: ...") where no
 * GPU can be used.
 *
 * Each case runs the same parameters, the same gradients and the same
 * found-inf sequence (inf or nan written into chosen gradients at chosen
 * steps) through the public API on both devices, then compares:
 *  - the scaler's scale history, growth tracker, skipped count, consecutive
 *    overflows and hysteresis: exactly (the device's update is the CPU's
 *    arithmetic: double products rounded once to f32);
 *  - every parameter, f32 master weight, Adam moment and momentum buffer:
 *    bit for bit (the device evaluates the CPU kernels' expressions in the
 *    same order without FMA contraction, IEEE division and square root; the
 *    bias corrections come from the host's pow; stochastic rounding uses the
 *    same Philox counters, the skipped steps giving theirs back);
 *  - the step counts and the stochastic-rounding position read back.
 * Gradient clipping on cuda (amp_clip_grad_norm, _optims, the scaler's):
 * the norm within 1e-12 relative of the CPU's (the device sums the squares
 * in double in another order); the weights are then compared bit for bit
 * too, which holds unless the coefficient max_norm / (norm + 1e-6) rounds
 * to another f32 on the two devices (the norms would have to straddle an
 * f32 rounding boundary: about one chance in 10^8 per step).
 *
 * Every comparison reports the case, the step, the tensor, the element and
 * both values, and the cases go on past a failure (one run shows all). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static int g_failures;

#define CHECK(cond, ...)                                                                                              \
    do {                                                                                                              \
        if (!(cond)) {                                                                                                \
            g_failures++;                                                                                             \
            printf("FAIL: ");                                                                                         \
            printf(__VA_ARGS__);                                                                                      \
            printf("\n");                                                                                             \
            fflush(stdout);                                                                                           \
        }                                                                                                             \
    } while (0)

static double get1(const amp_tensor *t, int64_t i) { return amp_tensor_get(t, &i); }

static uint64_t bits_at(const amp_tensor *t, int64_t i) {
    uint64_t u = 0;
    size_t es = amp_dtype_size(amp_tensor_dtype(t));
    memcpy(&u, (const char *)amp_tensor_data((amp_tensor *)t) + (size_t)i * es, es);
    return u;
}

/* bitwise (NaN == NaN); at most 5 elements reported per tensor */
static void same_bits(const char *cs, const char *what, const amp_tensor *cpu, const amp_tensor *dev) {
    if (!cpu || !dev) {
        CHECK(!cpu && !dev, "%s: %s: present on one device only (cpu %p, cuda %p)", cs, what, (void *)cpu, (void *)dev);
        return;
    }
    amp_tensor *h = amp_test_to(dev, AMP_DEVICE_CPU);
    int64_t n = amp_tensor_numel(cpu);
    int shown = 0, bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = get1(cpu, i), y = get1(h, i);
        if (isnan(x) && isnan(y)) continue;
        if (bits_at(cpu, i) != bits_at(h, i)) {
            bad++;
            if (shown++ < 5) CHECK(0, "%s: %s: element %lld: cpu %.9g vs cuda %.9g", cs, what, (long long)i, x, y);
        }
    }
    if (bad > 5) printf("  (%s: %s: %d elements differ in all)\n", cs, what, bad);
    amp_tensor_free(h);
}

/* ---- one training sequence on a device ------------------------------------------------ */
#define NP 3
static const int64_t g_sizes[NP] = {1000, 70000, 131075}; /* one chunk, two, three (65536 per chunk) */

typedef struct {
    const char *name;
    amp_optim_opts o;
    amp_dtype pdt;        /* parameter dtype */
    bool scaler;          /* through amp_scaler_step/update (else amp_optim_step) */
    amp_scaler_opts so;
    int steps;
    int unscale_first;    /* call amp_scaler_unscale before step */
    int clip;             /* 1: amp_clip_grad_norm_optims between unscale and step (unscale_first); 2:
                             amp_scaler_clip_grad_norm before step; 3: amp_clip_grad_norm (no scaler) */
} seq_case;

/* the gradient of parameter i at step k (the same on both devices); bad
 * values at chosen steps: 3 inf in parameter 1, 6 nan in parameter 2,
 * 7 and 8 inf in parameter 0 (two overflows in a row: hysteresis) */
static amp_tensor *grad_at(const seq_case *c, int i, int k, double gscale) {
    /* fixed values (not tied to the scale), the same on both devices */
    amp_generator g = amp_generator_make(1000u + 31u * (uint64_t)k + (uint64_t)i);
    int64_t shape[1] = {g_sizes[i]};
    amp_tensor *f = amp_tensor_randn(AMP_F32, 1, shape, &g);
    float *p = amp_tensor_data(f);
    for (int64_t j = 0; j < g_sizes[i]; j++) p[j] = (float)(p[j] * gscale);
    if ((k == 3 && i == 1) || ((k == 7 || k == 8) && i == 0)) p[g_sizes[i] / 2] = INFINITY;
    if (k == 6 && i == 2) p[g_sizes[i] - 1] = NAN;
    amp_tensor *t = amp_tensor_empty(c->pdt, 1, shape);
    assert_int_equal(amp_tensor_copy_(t, f), AMP_OK);
    amp_tensor_free(f);
    return t;
}

typedef struct {
    amp_tensor *params[NP];
    amp_optim *opt;
    amp_scaler *sc;
    double norms[16];
} run_out;

static void run_seq(const seq_case *c, amp_device dev, run_out *r) {
    memset(r, 0, sizeof *r);
    for (int i = 0; i < NP; i++) {
        amp_generator g = amp_generator_make(7u + (uint64_t)i);
        int64_t shape[1] = {g_sizes[i]};
        amp_tensor *f = amp_tensor_randn(AMP_F32, 1, shape, &g);
        amp_tensor *p = amp_tensor_empty(c->pdt, 1, shape);
        assert_int_equal(amp_tensor_copy_(p, f), AMP_OK);
        amp_tensor_free(f);
        assert_int_equal(amp_tensor_set_requires_grad(p, true), AMP_OK);
        if (dev != AMP_DEVICE_CPU) assert_int_equal(amp_tensor_move_(p, dev), AMP_OK);
        r->params[i] = p;
    }
    r->opt = amp_optim_new(r->params, NP, &c->o);
    if (!r->opt) printf("%s: amp_optim_new: %s\n", c->name, amp_last_error());
    assert_non_null(r->opt);
    amp_optim_set_param_weight_decay(r->opt, 2, 0.0); /* a parameter group without decay */
    if (c->scaler) {
        r->sc = amp_scaler_new(&c->so);
        assert_non_null(r->sc);
    }
    for (int k = 0; k < c->steps; k++) {
        for (int i = 0; i < NP; i++) {
            amp_tensor *g = grad_at(c, i, k, 64.0);
            amp_status st = amp_tensor_set_grad(r->params[i], g);
            if (st) printf("set_grad: %s\n", amp_last_error());
            assert_int_equal(st, AMP_OK);
            amp_tensor_free(g);
        }
        amp_status st;
        if (c->clip == 2) {
            double nrm = amp_scaler_clip_grad_norm(r->sc, &r->opt, 1, 5.0);
            if (k < 16) r->norms[k] = nrm;
            CHECK(nrm >= 0 || isnan(nrm), "%s: step %d: amp_scaler_clip_grad_norm on %s: %s", c->name, k, amp_device_name(dev),
                  amp_last_error());
        }
        if (c->clip == 3) {
            double nrm = amp_clip_grad_norm(r->opt, 5.0);
            if (k < 16) r->norms[k] = nrm;
        }
        if (c->scaler) {
            if (c->unscale_first) {
                st = amp_scaler_unscale(r->sc, r->opt);
                CHECK(st == AMP_OK, "%s: step %d: unscale on %s: %s", c->name, k, amp_device_name(dev), amp_last_error());
                if (c->clip) {
                    double nrm = amp_clip_grad_norm_optims(&r->opt, 1, 5.0, r->sc);
                    if (k < 16) r->norms[k] = nrm;
                }
            }
            st = amp_scaler_step(r->sc, r->opt, NULL);
            CHECK(st == AMP_OK, "%s: step %d: amp_scaler_step on %s: %s", c->name, k, amp_device_name(dev), amp_last_error());
            st = amp_scaler_update(r->sc);
            CHECK(st == AMP_OK, "%s: step %d: amp_scaler_update on %s: %s", c->name, k, amp_device_name(dev),
                  amp_last_error());
        } else {
            st = amp_optim_step(r->opt);
            /* the CPU refuses a step with a non-finite gradient at once; cuda skips it on the device and reports it at
             * the next synchronisation */
            if (dev != AMP_DEVICE_CPU) {
                amp_status s2 = amp_cuda_synchronize();
                if (st == AMP_OK) st = s2;
            }
            bool bad_step = k == 3 || k == 6 || k == 7 || k == 8;
            CHECK((st != AMP_OK) == bad_step, "%s: step %d on %s: status %d (%s), expected %s", c->name, k,
                  amp_device_name(dev), (int)st, st ? amp_last_error() : "ok", bad_step ? "an error" : "ok");
            if (bad_step && st != AMP_OK)
                CHECK(strstr(amp_last_error(), "inf or nan") != NULL, "%s: step %d on %s: message '%s'", c->name, k,
                      amp_device_name(dev), amp_last_error());
        }
    }
}

static void free_run(run_out *r) {
    amp_scaler_free(r->sc);
    amp_optim_free(r->opt);
    for (int i = 0; i < NP; i++) amp_tensor_free(r->params[i]);
}

static void compare_runs(const seq_case *c, run_out *a, run_out *b) {
    char what[64];
    for (int i = 0; i < NP; i++) {
        snprintf(what, sizeof what, "param %d", i);
        same_bits(c->name, what, a->params[i], b->params[i]);
        static const char *names[] = {"master", "exp_avg", "exp_avg_sq", "momentum_buffer"};
        for (int j = 0; j < 4; j++) {
            bool has = (j == 0 && c->o.master_weights) || (j < 3 && j > 0 && c->o.kind != AMP_OPTIM_SGD) ||
                       (j == 3 && c->o.kind == AMP_OPTIM_SGD && c->o.momentum != 0);
            if (!has) continue;
            snprintf(what, sizeof what, "param %d %s", i, names[j]);
            same_bits(c->name, what, amp_optim_state(a->opt, i, names[j]), amp_optim_state(b->opt, i, names[j]));
        }
        /* torch leaves the unscaled gradient in .grad (non-master optimizers) */
        snprintf(what, sizeof what, "param %d .grad after the last step", i);
        same_bits(c->name, what, amp_tensor_grad(a->params[i]), amp_tensor_grad(b->params[i]));
        CHECK(amp_optim_param_steps(a->opt, i) == amp_optim_param_steps(b->opt, i), "%s: param %d steps: cpu %lld cuda %lld",
              c->name, i, (long long)amp_optim_param_steps(a->opt, i), (long long)amp_optim_param_steps(b->opt, i));
    }
    CHECK(amp_optim_steps(a->opt) == amp_optim_steps(b->opt), "%s: optimizer steps: cpu %lld cuda %lld", c->name,
          (long long)amp_optim_steps(a->opt), (long long)amp_optim_steps(b->opt));
    CHECK(amp_optim_sr_counter(a->opt) == amp_optim_sr_counter(b->opt), "%s: sr_counter: cpu %llu cuda %llu", c->name,
          (unsigned long long)amp_optim_sr_counter(a->opt), (unsigned long long)amp_optim_sr_counter(b->opt));
    if (!c->scaler) return;
    int64_t na = 0, nb = 0;
    const float *ha = amp_scaler_scale_history(a->sc, &na);
    const float *hb = amp_scaler_scale_history(b->sc, &nb);
    CHECK(na == nb, "%s: scale history lengths: cpu %lld cuda %lld", c->name, (long long)na, (long long)nb);
    for (int64_t k = 0; k < na && k < nb; k++)
        CHECK(memcmp(&ha[k], &hb[k], 4) == 0, "%s: scale after update %lld: cpu %.9g cuda %.9g", c->name, (long long)k,
              (double)ha[k], (double)hb[k]);
    amp_scaler_state sa, sb;
    assert_int_equal(amp_scaler_state_get(a->sc, &sa), AMP_OK);
    assert_int_equal(amp_scaler_state_get(b->sc, &sb), AMP_OK);
    CHECK(sa.scale == sb.scale && sa.growth_tracker == sb.growth_tracker && sa.num_skipped == sb.num_skipped &&
              sa.num_updates == sb.num_updates && sa.hysteresis_left == sb.hysteresis_left,
          "%s: scaler state: cpu scale %.9g tracker %lld skipped %lld updates %lld hysteresis_left %d; cuda %.9g %lld %lld "
          "%lld %d",
          c->name, sa.scale, (long long)sa.growth_tracker, (long long)sa.num_skipped, (long long)sa.num_updates,
          sa.hysteresis_left, sb.scale, (long long)sb.growth_tracker, (long long)sb.num_skipped, (long long)sb.num_updates,
          sb.hysteresis_left);
    CHECK(amp_scaler_consecutive_overflows(a->sc) == amp_scaler_consecutive_overflows(b->sc),
          "%s: consecutive overflows: cpu %lld cuda %lld", c->name, (long long)amp_scaler_consecutive_overflows(a->sc),
          (long long)amp_scaler_consecutive_overflows(b->sc));
    if (c->clip)
        for (int k = 0; k < c->steps && k < 16; k++) {
            double x = a->norms[k], y = b->norms[k];
            bool ok = (isnan(x) && isnan(y)) || (isinf(x) && isinf(y)) || fabs(x - y) <= 1e-12 * fabs(x);
            CHECK(ok, "%s: clip norm at step %d: cpu %.17g cuda %.17g", c->name, k, x, y);
        }
}

static void run_case(const seq_case *c) {
    run_out a, b;
    run_seq(c, AMP_DEVICE_CPU, &a);
    run_seq(c, AMP_DEVICE_CUDA, &b);
    compare_runs(c, &a, &b);
    free_run(&a);
    free_run(&b);
}

static amp_scaler_opts scaler_opts(void) {
    amp_scaler_opts so;
    memset(&so, 0, sizeof so);
    so.init_scale = 1024.0;
    so.growth_interval = 2; /* growth within the sequence */
    so.hysteresis = 2;      /* two overflows before a backoff (steps 7, 8) */
    return so;
}

/* fail_msg does not return (cmocka jumps out of the test): the count is
 * cleared first, or the next test reports this one's failures as its own */
static void finish(const char *what) {
    int n = g_failures;
    g_failures = 0;
    if (n) fail_msg("%s: %d comparison(s) failed (listed above)", what, n);
}

/* AdamW with f32 master weights over bf16 and f16 parameters, round to
 * nearest and stochastic rounding, through the scaler's fused step */
static void t_adamw_master(void **state) {
    (void)state;
    amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    for (int d = 0; d < 2; d++)
        for (int rm = 0; rm < 2; rm++) {
            seq_case c;
            memset(&c, 0, sizeof c);
            char name[96];
            snprintf(name, sizeof name, "adamw master %s %s", amp_dtype_name(dts[d]), rm ? "stochastic" : "nearest");
            c.name = name;
            c.o = amp_adamw_opts(1e-3);
            c.o.weight_decay = 0.1;
            c.o.master_weights = true;
            c.o.rounding = rm ? AMP_ROUND_STOCHASTIC : AMP_ROUND_NEAREST;
            c.o.seed = 1234;
            c.pdt = dts[d];
            c.scaler = true;
            c.so = scaler_opts();
            c.steps = 12;
            run_case(&c);
        }
    finish("t_adamw_master");
}

/* AdamW and Adam on f32 parameters (the gradient left unscaled in .grad),
 * the scaler's unscale then step */
static void t_adam_f32(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        seq_case c;
        memset(&c, 0, sizeof c);
        c.name = k ? "adam f32 unscale+step" : "adamw f32 fused";
        c.o = k ? amp_adam_opts(2e-3) : amp_adamw_opts(1e-3);
        if (k) c.o.weight_decay = 0.01;
        c.pdt = AMP_F32;
        c.scaler = true;
        c.so = scaler_opts();
        c.steps = 12;
        c.unscale_first = k;
        run_case(&c);
    }
    /* a beta1 above 0.5 takes torch's other lerp form */
    seq_case c;
    memset(&c, 0, sizeof c);
    c.name = "adamw beta1 0.3";
    c.o = amp_adamw_opts(1e-3);
    c.o.beta1 = 0.3;
    c.pdt = AMP_F32;
    c.scaler = true;
    c.so = scaler_opts();
    c.steps = 10;
    run_case(&c);
    finish("t_adam_f32");
}

/* SGD: momentum, nesterov, dampening, weight decay; f32 and bf16
 * parameters; master weights; through the scaler and without one */
static void t_sgd(void **state) {
    (void)state;
    struct {
        double mom, damp, wd;
        bool nesterov, master, scaler;
        amp_dtype dt;
        const char *name;
    } v[] = {
        {0.9, 0, 0, false, false, true, AMP_F32, "sgd momentum f32"},
        {0.9, 0, 1e-4, true, false, true, AMP_F32, "sgd nesterov wd f32"},
        {0.5, 0.1, 0, false, false, true, AMP_BF16, "sgd dampening bf16 in place"},
        {0.9, 0, 0, false, true, true, AMP_BF16, "sgd momentum master bf16"},
        {0, 0, 0, false, false, true, AMP_F32, "sgd plain f32"},
        {0.9, 0, 0, true, false, false, AMP_F32, "sgd nesterov without scaler"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        seq_case c;
        memset(&c, 0, sizeof c);
        c.name = v[i].name;
        c.o = amp_sgd_opts(0.05);
        c.o.momentum = v[i].mom;
        c.o.dampening = v[i].damp;
        c.o.weight_decay = v[i].wd;
        c.o.nesterov = v[i].nesterov;
        c.o.master_weights = v[i].master;
        c.pdt = v[i].dt;
        c.scaler = v[i].scaler;
        c.so = scaler_opts();
        c.steps = 10;
        run_case(&c);
    }
    finish("t_sgd");
}

/* clipping: the norm on the device (a multi-tensor sum of squares in
 * double, another order than the CPU's: within 1e-12 relative), the clip
 * coefficient rounded to f32 (the same bits unless the norms straddle an
 * f32 rounding boundary of max_norm / (norm + 1e-6): about one chance in
 * 10^8 per step), then the same updates */
static void t_clip(void **state) {
    (void)state;
    struct {
        int clip, unscale;
        bool master, scaler;
        amp_dtype dt;
        const char *name;
    } v[] = {
        {2, 0, true, true, AMP_BF16, "adamw master bf16 amp_scaler_clip_grad_norm"},
        {2, 0, false, true, AMP_F32, "adamw f32 amp_scaler_clip_grad_norm"},
        {1, 1, true, true, AMP_F16, "adamw master f16 unscale + amp_clip_grad_norm_optims"},
        {3, 0, false, false, AMP_F32, "adamw f32 amp_clip_grad_norm without scaler"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        seq_case c;
        memset(&c, 0, sizeof c);
        c.name = v[i].name;
        c.o = amp_adamw_opts(1e-3);
        c.o.master_weights = v[i].master;
        c.pdt = v[i].dt;
        c.scaler = v[i].scaler;
        c.so = scaler_opts();
        c.steps = 10;
        c.clip = v[i].clip;
        c.unscale_first = v[i].unscale;
        run_case(&c);
    }
    finish("t_clip");
}

/* amp_optim_step without a scaler: AdamW with master weights (bf16) */
static void t_plain_step(void **state) {
    (void)state;
    seq_case c;
    memset(&c, 0, sizeof c);
    c.name = "adamw master bf16 without scaler";
    c.o = amp_adamw_opts(1e-3);
    c.o.master_weights = true;
    c.pdt = AMP_BF16;
    c.steps = 10;
    run_case(&c);
    finish("t_plain_step");
}

/* t_scaler_scale's and t_scaler_scale_backward's start: a scaler with
 * scaler_opts, a scalar f32 leaf x = 1.5 (requires_grad) moved to cuda, and
 * y = amp_scaler_scale(sc, x) (the test fails where it is NULL) */
static amp_tensor *scaled_loss(amp_scaler **sc, amp_tensor **x) {
    amp_scaler_opts so = scaler_opts();
    *sc = amp_scaler_new(&so);
    *x = amp_tensor_full(AMP_F32, 0, NULL, 1.5);
    assert_int_equal(amp_tensor_set_requires_grad(*x, true), AMP_OK);
    assert_int_equal(amp_tensor_move_(*x, AMP_DEVICE_CUDA), AMP_OK);
    amp_tensor *y = amp_scaler_scale(*sc, *x);
    if (!y) printf("amp_scaler_scale: %s\n", amp_last_error());
    assert_non_null(y);
    return y;
}

/* the scaler's scale on a device: the loss times the device's scale, the
 * backward's gradient times it too, and the trace with static/limited settings */
static void t_scaler_scale(void **state) {
    (void)state;
    amp_scaler *sc;
    amp_tensor *x, *y = scaled_loss(&sc, &x);
    CHECK(amp_tensor_device(y) == AMP_DEVICE_CUDA, "scaled loss on %s", amp_device_name(amp_tensor_device(y)));
    CHECK(amp_tensor_item(y) == 1536.0, "scaled loss %.9g, expected 1536", amp_tensor_item(y));
    CHECK(amp_scaler_get_scale(sc) == 1024.0, "scale %.9g", amp_scaler_get_scale(sc));
    /* bf16 loss: the f32 product rounded once */
    amp_tensor *xb = amp_tensor_full(AMP_BF16, 1, AMP_SHAPE(3), 1.0078125);
    amp_tensor *xc = amp_tensor_to(xb, AMP_DEVICE_CUDA);
    amp_tensor *yb = amp_scaler_scale(sc, xc);
    assert_non_null(yb);
    amp_tensor *yh = amp_test_to(yb, AMP_DEVICE_CPU);
    CHECK(amp_tensor_dtype(yh) == AMP_BF16 && get1(yh, 2) == 1032.0, "bf16 scaled loss %.9g (%s), expected 1032",
          get1(yh, 2), amp_dtype_name(amp_tensor_dtype(yh)));
    test_free_tensors(yh, yb, xc, xb, y, x);
    amp_scaler_free(sc);
    finish("t_scaler_scale");
}

/* the backward of the scaled loss multiplies by the device scale (needs the
 * autograd engine on the device: the seed gradient made on the loss's device) */
static void t_scaler_scale_backward(void **state) {
    (void)state;
    amp_scaler *sc;
    amp_tensor *x, *y = scaled_loss(&sc, &x);
    amp_status st = amp_backward(y);
    CHECK(st == AMP_OK, "amp_backward of the scaled loss on cuda: %s", amp_last_error());
    amp_tensor *g = amp_tensor_grad(x);
    CHECK(g && amp_tensor_device(g) == AMP_DEVICE_CUDA && amp_tensor_item(g) == 1024.0,
          "d(scaled)/dx %.9g, expected 1024 on cuda", g ? amp_tensor_item(g) : -1.0);
    test_free_tensors(y, x);
    amp_scaler_free(sc);
    finish("t_scaler_scale_backward");
}

/* one parameter of 5 elements on dev, its gradient all g, and an SGD optimizer over it */
static amp_optim *one_param_opt(amp_device dev, double g, amp_tensor **pout) {
    int64_t shape[1] = {5};
    amp_tensor *p = amp_tensor_full(AMP_F32, 1, shape, 1.0);
    assert_int_equal(amp_tensor_set_requires_grad(p, true), AMP_OK);
    if (dev != AMP_DEVICE_CPU) assert_int_equal(amp_tensor_move_(p, dev), AMP_OK);
    amp_tensor *gr = amp_tensor_full(AMP_F32, 1, shape, g);
    assert_int_equal(amp_tensor_set_grad(p, gr), AMP_OK);
    amp_tensor_free(gr);
    amp_optim_opts o = amp_sgd_opts(0.5);
    amp_optim *opt = amp_optim_new(&p, 1, &o);
    if (!opt) printf("amp_optim_new: %s\n", amp_last_error());
    assert_non_null(opt);
    *pout = p;
    return opt;
}

/* which device a scaler's state lives on: the first optimizer or loss it
 * sees decides, whichever call that is (amp train's loop without loss
 * scaling calls amp_scaler_clip_grad_norm first; run 5 refused it: the
 * clip made its per-optimizer entry before choosing the device); work the
 * host recorded cannot move to the device, and a scaler on the device
 * refuses a CPU optimizer */
static void t_scaler_devices(void **state) {
    (void)state;
    amp_scaler_opts so = scaler_opts();
    amp_tensor *pc, *pg;
    amp_optim *oc = one_param_opt(AMP_DEVICE_CPU, 2048.0, &pc);
    amp_optim *og = one_param_opt(AMP_DEVICE_CUDA, 2048.0, &pg);
    /* a fresh scaler whose first call is the clip, on cuda, two steps */
    amp_scaler *sc = amp_scaler_new(&so);
    for (int k = 0; k < 2; k++) {
        /* the step leaves the unscaled, clipped gradient in .grad: a fresh one each step */
        amp_tensor *gr = amp_tensor_full(AMP_F32, 1, AMP_SHAPE(5), 2048.0);
        assert_int_equal(amp_tensor_set_grad(pg, gr), AMP_OK);
        amp_tensor_free(gr);
        double nrm = amp_scaler_clip_grad_norm(sc, &og, 1, 1.0);
        /* the unscaled gradient is 2 in each of 5 elements: norm sqrt(20) */
        CHECK(fabs(nrm - sqrt(20.0)) <= 1e-12 * sqrt(20.0), "first-call clip on cuda, step %d: norm %.17g (%s), expected %.17g",
              k, nrm, nrm < 0 ? amp_last_error() : "ok", sqrt(20.0));
        amp_status st = amp_scaler_step(sc, og, NULL);
        CHECK(st == AMP_OK, "first-call clip on cuda, step %d: amp_scaler_step: %s", k, amp_last_error());
        st = amp_scaler_update(sc);
        CHECK(st == AMP_OK, "first-call clip on cuda, step %d: amp_scaler_update: %s", k, amp_last_error());
    }
    CHECK(amp_scaler_num_updates(sc) == 2 && amp_optim_steps(og) == 2, "first-call clip on cuda: %lld updates, %lld steps",
          (long long)amp_scaler_num_updates(sc), (long long)amp_optim_steps(og));
    /* growth_interval 2: two clean updates double the scale */
    CHECK(amp_scaler_get_scale(sc) == 2048.0, "first-call clip on cuda: scale %.9g, expected 2048", amp_scaler_get_scale(sc));
    /* now on cuda: a CPU optimizer is refused by name */
    amp_status st = amp_scaler_step(sc, oc, NULL);
    CHECK(st != AMP_OK && strstr(amp_last_error(), "one scaler per device") != NULL,
          "a CPU optimizer on a cuda scaler: status %d, message '%s'", (int)st, amp_last_error());
    double nrm = amp_scaler_clip_grad_norm(sc, &oc, 1, 1.0);
    CHECK(nrm < 0 && strstr(amp_last_error(), "one scaler per device") != NULL,
          "a CPU optimizer's clip on a cuda scaler: %g, message '%s'", nrm, amp_last_error());
    amp_scaler_free(sc);
    /* a scaler that checked a CPU optimizer refuses a cuda one until its update */
    sc = amp_scaler_new(&so);
    st = amp_scaler_unscale(sc, oc);
    CHECK(st == AMP_OK, "CPU unscale: %s", amp_last_error());
    nrm = amp_scaler_clip_grad_norm(sc, &og, 1, 1.0);
    CHECK(nrm < 0 && strstr(amp_last_error(), "checked CPU optimizers") != NULL,
          "a cuda clip after a CPU unscale: %g, message '%s'", nrm, amp_last_error());
    amp_scaler_free(sc);
    /* a CPU call that failed before recording anything leaves the scaler free
     * to move (f16 gradients without master weights are refused before the check) */
    sc = amp_scaler_new(&so);
    int64_t shape[1] = {3};
    amp_tensor *ph = amp_tensor_full(AMP_F16, 1, shape, 1.0);
    assert_int_equal(amp_tensor_set_requires_grad(ph, true), AMP_OK);
    amp_tensor *gh = amp_tensor_full(AMP_F16, 1, shape, 1.0);
    assert_int_equal(amp_tensor_set_grad(ph, gh), AMP_OK);
    amp_optim_opts o = amp_sgd_opts(0.5);
    amp_optim *oh = amp_optim_new(&ph, 1, &o);
    assert_non_null(oh);
    nrm = amp_scaler_clip_grad_norm(sc, &oh, 1, 1.0);
    CHECK(nrm < 0 && strstr(amp_last_error(), "FP16") != NULL, "f16 clip without master weights: %g, message '%s'", nrm,
          amp_last_error());
    nrm = amp_scaler_clip_grad_norm(sc, &og, 1, 1.0);
    CHECK(nrm >= 0, "a cuda clip after a refused CPU clip: %g (%s)", nrm, nrm < 0 ? amp_last_error() : "ok");
    st = amp_scaler_step(sc, og, NULL);
    CHECK(st == AMP_OK, "a cuda step after a refused CPU clip: %s", amp_last_error());
    st = amp_scaler_update(sc);
    CHECK(st == AMP_OK, "a cuda update after a refused CPU clip: %s", amp_last_error());
    amp_scaler_free(sc);
    amp_optim_free(oh);
    test_free_tensors(gh, ph);
    amp_optim_free(oc);
    amp_optim_free(og);
    test_free_tensors(pc, pg);
    finish("t_scaler_devices");
}

/* the guard: a finite gradient whose update overflows is never kept */
static void t_guard(void **state) {
    (void)state;
    int64_t shape[1] = {4};
    amp_tensor *p = amp_tensor_full(AMP_F32, 1, shape, 3e38);
    assert_int_equal(amp_tensor_set_requires_grad(p, true), AMP_OK);
    assert_int_equal(amp_tensor_move_(p, AMP_DEVICE_CUDA), AMP_OK);
    amp_optim_opts o = amp_sgd_opts(1.0);
    amp_optim *opt = amp_optim_new(&p, 1, &o);
    assert_non_null(opt);
    amp_tensor *g = amp_tensor_full(AMP_F32, 1, shape, -3e38);
    float *gd = amp_tensor_data(g);
    gd[1] = 1e37f; /* element 1 stays finite: updated */
    assert_int_equal(amp_tensor_set_grad(p, g), AMP_OK);
    amp_status st = amp_optim_step(opt);
    amp_status s2 = amp_cuda_synchronize();
    CHECK(st == AMP_OK && s2 == AMP_ERR_RANGE, "guard: step %d, synchronize %d (%s)", (int)st, (int)s2, amp_last_error());
    CHECK(strstr(amp_last_error(), "non-finite") != NULL, "guard message: %s", amp_last_error());
    amp_tensor *h = amp_test_to(p, AMP_DEVICE_CPU);
    volatile float w0 = 3e38f, g1 = 1e37f, nl = -1.0f;
    float e1 = w0 + nl * g1;
    CHECK(get1(h, 0) == (double)w0, "guard: element 0 is %.9g, expected it unchanged", get1(h, 0));
    CHECK(get1(h, 1) == (double)e1, "guard: element 1 is %.9g, expected %.9g (updated)", get1(h, 1), (double)e1);
    test_free_tensors(h, g);
    amp_optim_free(opt);
    amp_tensor_free(p);
    finish("t_guard");
}

int main(void) {
    amp_test_require_cuda();
    return AMP_TEST_RUN(t_scaler_scale, t_adamw_master, t_adam_f32, t_sgd, t_plain_step, t_guard, t_clip,
                        t_scaler_scale_backward, t_scaler_devices);
}

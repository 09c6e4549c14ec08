/* amp_initialize (Apex's amp.initialize): each opt level observed on a real
 * model and compared cell by cell with the table in docs/amp-core.md; O2
 * keeps norms f32 and does not let an f32 input promote the forward; joint
 * clipping across the optimizers it builds; training at every level; the
 * user-defined GPT-style model (tests/support/tiny_lm.c) under O2 with a
 * bit-exact checkpoint resume; policies and errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_check.h"
#include "tiny_lm.h"

static void expect_error(const char *needle) {
    if (!strstr(amp_last_error(), needle)) fail_msg("expected an error containing \"%s\", got \"%s\"", needle, amp_last_error());
}

/* A module that records what its forward saw. */
typedef struct {
    bool autocast;
    amp_dtype in;
} probe_data;

static amp_tensor *probe_forward(amp_module *m, amp_tensor *x) {
    probe_data *p = amp_module_data(m);
    p->autocast = amp_autocast_is_enabled();
    p->in = amp_tensor_dtype(x);
    return amp_module_forward(amp_module_get_child(m, "fc"), x);
}
static const amp_module_class probe_class = {.name = "Probe", .forward = probe_forward};

/* A user normalisation layer (RMS norm). */
static amp_tensor *rms_forward(amp_module *m, amp_tensor *x) {
    amp_tensor *ms = amp_mean(amp_mul(x, x), (const int[]){-1}, 1, true);
    return amp_mul(amp_mul(x, amp_rsqrt(amp_add_scalar(ms, 1e-6))), amp_module_get_parameter(m, "weight"));
}
static const amp_module_class rms_class = {.name = "RMSNorm", .forward = rms_forward, .flags = AMP_MODULE_NORM};

static amp_module *make_model(amp_generator *g) {
    amp_module *probe = amp_module_new(&probe_class, sizeof(probe_data));
    amp_module_register_module(probe, "fc", amp_nn_linear(8, 16, true, g));
    amp_module *rms = amp_module_new(&rms_class, 0);
    amp_module_register_parameter(rms, "weight", amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(16)));
    amp_module *ch[] = {probe, amp_nn_layernorm(16, 1e-5), amp_nn_relu(), rms, amp_nn_linear(16, 4, true, g)};
    return amp_nn_sequential(ch, 5);
}

static const char *dt_word(amp_dtype d, amp_dtype half) { return d == AMP_F32 ? "f32" : d == half ? "half" : "?"; }

/* The table row of docs/amp-core.md for level (cells between '|'). */
static int doc_row(int level, char cells[12][64]) {
    char path[1024];
    snprintf(path, sizeof path, "%s/docs/amp-core.md", AMP_SOURCE_DIR);
    char *doc = test_read_file(path, NULL);
    assert_non_null(doc);
    char key[16];
    snprintf(key, sizeof key, "\n| O%d |", level);
    char *row = strstr(doc, key);
    if (!row) fail_msg("docs/amp-core.md has no table row for O%d", level);
    row += 2;
    int n = 0;
    for (char *p = row; *p && *p != '\n' && n < 12;) {
        char *e = strchr(p, '|');
        if (!e || e > strchr(p, '\n')) break;
        int len = (int)(e - p);
        while (len > 0 && p[len - 1] == ' ') len--;
        while (len > 0 && *p == ' ') p++, len--;
        snprintf(cells[n++], 64, "%.*s", len, p);
        p = e + 1;
    }
    free(doc);
    return n;
}

typedef struct {
    char params[32], norms[32], forward[32], input[32], output[32], master[8], optims[8], scale[16];
} observed;

static void observe(amp_opt_level level, amp_dtype half, observed *ob) {
    amp_generator g = amp_generator_make(3);
    amp_module *m = make_model(&g);
    amp_init_opts o = {.level = level, .half = half, .optim = amp_adamw_opts(1e-3)};
    amp_setup *s = amp_initialize(&m, 1, &o);
    if (!s) fail_msg("amp_initialize O%d: %s", (int)level, amp_last_error());
    amp_scope *sc = amp_scope_begin();
    amp_tensor *x = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(4, 8), &g); /* f32 data, as a loader gives */
    amp_tensor *y = amp_module_forward(m, x);
    assert_non_null(y);
    probe_data *p = amp_module_data(amp_module_get_child(m, "0"));
    snprintf(ob->params, sizeof ob->params, "%s", dt_word(amp_tensor_dtype(amp_module_get_parameter(m, "0.fc.weight")), half));
    amp_dtype ln = amp_tensor_dtype(amp_module_get_parameter(m, "1.weight")), rms = amp_tensor_dtype(amp_module_get_parameter(m, "3.weight"));
    assert_int_equal(ln, rms); /* the user norm is treated as the built-in one */
    bool kept = amp_module_is_kept_f32(amp_module_get_child(m, "1")) && amp_module_is_kept_f32(amp_module_get_child(m, "3"));
    snprintf(ob->norms, sizeof ob->norms, "%s%s", dt_word(ln, half), kept ? ", run in f32" : "");
    snprintf(ob->forward, sizeof ob->forward, "%s", p->autocast ? "autocast" : dt_word(p->in, half));
    snprintf(ob->input, sizeof ob->input, "%s", p->in == AMP_F32 ? "as given" : "cast to half");
    amp_module_io io;
    bool cast_out = amp_module_get_io(m, &io) && io.output == AMP_F32 && level != AMP_O0;
    snprintf(ob->output, sizeof ob->output, "%s%s", cast_out ? "cast to " : "", dt_word(amp_tensor_dtype(y), half));
    int no;
    amp_optim *const *os = amp_setup_optims(s, &no);
    bool master = false;
    for (int i = 0; i < no; i++) master |= amp_optim_get_opts(os[i])->master_weights;
    snprintf(ob->master, sizeof ob->master, "%s", master ? "yes" : "no");
    snprintf(ob->optims, sizeof ob->optims, "%d", no);
    amp_scaler *scaler = amp_setup_scaler(s);
    snprintf(ob->scale, sizeof ob->scale, "%s", !scaler ? "none" : amp_scaler_get_scale(scaler) == 65536.0 ? "dynamic" : "?");
    /* one training step runs at every level */
    assert_int_equal(amp_setup_zero_grad(s), AMP_OK);
    amp_tensor *loss = amp_mse_loss(y, amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(4, 4)), NULL);
    if (amp_setup_backward(s, loss) != AMP_OK) fail_msg("O%d %s: %s", (int)level, amp_dtype_name(half), amp_last_error());
    if (amp_setup_step(s, NULL) != AMP_OK) fail_msg("O%d %s step: %s", (int)level, amp_dtype_name(half), amp_last_error());
    amp_scope_end(sc);
    amp_setup_free(s);
    amp_module_free(m);
}

static void t_levels_match_docs(void **st) {
    (void)st;
    for (int level = 0; level <= 3; level++) {
        observed f16, bf16;
        observe((amp_opt_level)level, AMP_F16, &f16);
        observe((amp_opt_level)level, AMP_BF16, &bf16);
        /* everything but the scale is the same for f16 and bf16 */
        assert_string_equal(f16.params, bf16.params);
        assert_string_equal(f16.norms, bf16.norms);
        assert_string_equal(f16.optims, bf16.optims);
        char cells[12][64];
        int n = doc_row(level, cells);
        assert_int_equal(n, 10);
        const char *got[10] = {"", f16.params, f16.norms, f16.forward, f16.input, f16.output, f16.master, f16.optims, f16.scale, bf16.scale};
        snprintf(cells[0], 64, "%s", "");
        const char *col[10] = {"level", "parameters", "norms", "forward", "model input", "model output", "master weights",
                               "optimizers", "loss scale f16", "loss scale bf16"};
        for (int c = 1; c < 10; c++)
            if (strcmp(got[c], cells[c]))
                fail_msg("O%d, column \"%s\": the code does \"%s\", docs/amp-core.md says \"%s\"", level, col[c], got[c], cells[c]);
        /* and amp_opt_config_get agrees with amp_initialize */
        amp_opt_config c;
        assert_int_equal(amp_opt_config_get((amp_opt_level)level, AMP_F16, &c), AMP_OK);
        assert_int_equal(c.master_weights, !strcmp(f16.master, "yes"));
        assert_int_equal(c.loss_scaling, !strcmp(f16.scale, "dynamic"));
        assert_int_equal(c.autocast, !strcmp(f16.forward, "autocast"));
    }
}

/* Every policy of f32/f16/bf16 dtypes: amp_opt_config_from_policy gives
 * the configuration of its level (amp_opt_config_get), written out here as
 * docs/amp-core.md states it; half params with another compute dtype are
 * refused. */
static void t_policy_is_a_level(void **st) {
    (void)st;
    const amp_dtype dts[3] = {AMP_F32, AMP_F16, AMP_BF16};
    int valid = 0;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            for (int o = 0; o < 3; o++) {
                amp_policy p = {dts[a], dts[b], dts[o]};
                bool hp = p.param != AMP_F32, hc = p.compute != AMP_F32;
                amp_opt_config c;
                memset(&c, 0xa5, sizeof c);
                amp_status s = amp_opt_config_from_policy(&p, &c);
                if (hp && p.compute != p.param) {
                    assert_int_not_equal(s, AMP_OK);
                    expect_error("half parameters compute in their own dtype");
                    continue;
                }
                if (s != AMP_OK) fail_msg("%s", amp_last_error());
                valid++;
                amp_opt_level want = hp ? AMP_O2 : hc ? AMP_O1 : AMP_O0;
                const char *what = amp_dtype_name(p.compute);
                if (c.level != want || c.param_dtype != p.param || c.compute_dtype != p.compute || c.autocast != (!hp && hc) ||
                    c.keep_norm_f32 != hp || c.master_weights != hp || c.loss_scaling != (p.compute == AMP_F16))
                    fail_msg("params %s compute %s: level O%d, autocast %d, keep_norm_f32 %d, master %d, loss scaling %d",
                             amp_dtype_name(p.param), what, (int)c.level, c.autocast, c.keep_norm_f32, c.master_weights,
                             c.loss_scaling);
                amp_opt_config g;
                assert_int_equal(amp_opt_config_get(want, hc ? p.compute : AMP_F16, &g), AMP_OK);
                assert_true(g.level == c.level && g.param_dtype == c.param_dtype && g.compute_dtype == c.compute_dtype &&
                            g.autocast == c.autocast && g.keep_norm_f32 == c.keep_norm_f32 &&
                            g.master_weights == c.master_weights && g.loss_scaling == c.loss_scaling);
            }
    assert_int_equal(valid, 5 * 3); /* (f32, f32), (f32, f16), (f32, bf16), (f16, f16), (bf16, bf16) x 3 outputs */
}

/* ---- clipping over several optimizers and models -------------------------------------------------- */
static double norm_of(amp_tensor *const *ts, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) {
        if (!ts[i]) continue;
        double *v = tc_values(ts[i]);
        for (int64_t k = 0; k < amp_tensor_numel(ts[i]); k++) s += v[k] * v[k];
        free(v);
    }
    return sqrt(s);
}

static void t_joint_clipping(void **st) {
    (void)st;
    amp_generator g = amp_generator_make(4);
    amp_module *m = make_model(&g);
    amp_init_opts o = {.level = AMP_O2, .half = AMP_F16, .optim = amp_sgd_opts(0.1)};
    o.scaler.init_scale = 64;
    amp_setup *s = amp_initialize(&m, 1, &o);
    assert_non_null(s);
    int no;
    amp_optim *const *os = amp_setup_optims(s, &no);
    assert_int_equal(no, 2);
    amp_scope *sc = amp_scope_begin();
    amp_tensor *x = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(16, 8), &g);
    amp_tensor *loss = amp_sum(amp_module_forward(m, x), NULL, 0, false);
    assert_int_equal(amp_setup_backward(s, loss), AMP_OK);
    /* before unscale: refused, naming the optimizer */
    assert_true(amp_clip_grad_norm_optims(os, 2, 1.0, amp_setup_scaler(s)) < 0);
    expect_error("amp_clip_grad_norm_optims: the gradients of opts[0] are still multiplied by the loss scale (64)");
    for (int k = 0; k < 2; k++) assert_int_equal(amp_scaler_unscale(amp_setup_scaler(s), os[k]), AMP_OK);
    /* the joint norm is over the gradients the steps will use: f32 masters + the norms' f32 grads */
    amp_tensor *gs[64];
    int n = 0;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < amp_optim_num_params(os[k]); i++) gs[n++] = amp_optim_grad(os[k], i);
    assert_int_equal(amp_tensor_dtype(gs[0]), AMP_F32);
    double want = norm_of(gs, n);
    assert_true(want > 2.0 && isfinite(want));
    double got = amp_clip_grad_norm_optims(os, 2, 2.0, amp_setup_scaler(s));
    assert_close(got, want, 1e-6, 0, "joint norm before clipping");
    assert_close(norm_of(gs, n), 2.0, 1e-4, 0, "joint norm after clipping");
    /* amp_setup_clip_grad_norm does the unscale itself (and skips it when done) */
    assert_close(amp_setup_clip_grad_norm(s, 2.0), 2.0, 1e-4, 0, "again through the setup");
    assert_int_equal(amp_setup_step(s, NULL), AMP_OK);
    amp_scope_end(sc);

    /* two models, each with its own optimizer: one norm over their parameters' .grad */
    amp_module *a = amp_nn_linear(5, 3, true, &g), *b = amp_nn_linear(5, 2, true, &g);
    sc = amp_scope_begin();
    amp_tensor *in = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(6, 5), &g);
    amp_tensor *l = amp_add(amp_sum(amp_module_forward(a, in), NULL, 0, false), amp_sum(amp_module_forward(b, in), NULL, 0, false));
    assert_int_equal(amp_backward(amp_mul_scalar(l, 5.0)), AMP_OK);
    amp_tensor *ps[5];
    amp_module_parameters(a, ps, NULL, 2);
    amp_module_parameters(b, ps + 2, NULL, 2);
    ps[4] = ps[0]; /* listed twice: counted once */
    amp_tensor *grads[4];
    for (int i = 0; i < 4; i++) grads[i] = amp_tensor_grad(ps[i]);
    want = norm_of(grads, 4);
    assert_close(amp_clip_grad_norm_params(ps, 5, 1.0), want, 1e-6, 0, "params norm");
    assert_close(norm_of(grads, 4), 1.0, 1e-4, 0, "params norm after clipping");
    assert_true(amp_clip_grad_norm_params(ps, 5, -1.0) < 0);
    expect_error("amp_clip_grad_norm_params: max_norm -1 must be finite and > 0");
    amp_scope_end(sc);
    amp_module_free(a);
    amp_module_free(b);
    amp_setup_free(s);
    amp_module_free(m);
}

/* ---- training at each level ----------------------------------------------------------------------- */
static void t_training_levels(void **st) {
    (void)st;
    struct {
        amp_opt_level level;
        amp_dtype half;
        const char *policy;
    } runs[] = {{AMP_O0, AMP_F16, NULL}, {AMP_O1, AMP_F16, NULL}, {AMP_O1, AMP_BF16, NULL}, {AMP_O2, AMP_F16, NULL},
                {AMP_O2, AMP_BF16, NULL}, {AMP_O3, AMP_BF16, NULL}, {AMP_O0, AMP_F16, "params=bfloat16,compute=bfloat16,output=float32"}};
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
        amp_generator g = amp_generator_make(5);
        amp_module *m = make_model(&g);
        amp_init_opts o = {.level = runs[r].level, .half = runs[r].half, .policy = runs[r].policy, .optim = amp_adamw_opts(1e-2)};
        amp_setup *s = amp_initialize(&m, 1, &o);
        assert_non_null(s);
        test_rng rng = {7};
        amp_tensor *x = tc_randn(&rng, AMP_F32, 2, AMP_SHAPE(32, 8), 1.0), *w = tc_randn(&rng, AMP_F32, 2, AMP_SHAPE(4, 8), 0.5);
        amp_scope *ds = amp_scope_begin();
        amp_tensor *y = amp_tensor_keep(amp_tanh(amp_matmul(x, amp_transpose(w, 0, 1))));
        amp_scope_end(ds);
        double first = 0, last = 0;
        for (int step = 0; step < 60; step++) {
            amp_scope *sc = amp_scope_begin();
            amp_setup_zero_grad(s);
            amp_tensor *loss = amp_mse_loss(amp_module_forward(m, x), y, NULL);
            assert_non_null(loss);
            assert_int_equal(amp_tensor_dtype(loss), AMP_F32);
            if (step == 0) first = amp_tensor_item(loss);
            last = amp_tensor_item(loss);
            assert_int_equal(amp_setup_backward(s, loss), AMP_OK);
            amp_setup_clip_grad_norm(s, 5.0);
            assert_int_equal(amp_setup_step(s, NULL), AMP_OK);
            amp_scope_end(sc);
        }
        if (!(last < 0.5 * first)) fail_msg("run %zu: loss %g -> %g", r, first, last);
        test_free_tensors(x, w, y);
        amp_setup_free(s);
        amp_module_free(m);
    }
}

/* ---- the bar: a user model under O2 through amp_initialize, resumed bit-exactly ------------------- */
static const tiny_lm_cfg CFG = {.vocab = 13, .block = 8, .d = 16, .heads = 2, .layers = 2};

typedef struct {
    amp_module *m;
    amp_setup *s;
} lm_rig;

static void lm_make(lm_rig *r, uint64_t seed, amp_dtype half) {
    amp_generator g = amp_generator_make(seed);
    r->m = tiny_lm_new(&CFG, &g);
    assert_non_null(r->m);
    amp_init_opts o = {.level = AMP_O2, .half = half, .optim = amp_adamw_opts(3e-3)};
    o.optim.rounding = AMP_ROUND_STOCHASTIC; /* the generator position must survive the checkpoint too */
    o.optim.seed = 5;
    o.scaler.init_scale = 256;
    o.scaler.growth_interval = 2;
    r->s = amp_initialize(&r->m, 1, &o);
    assert_non_null(r->s);
}

static double lm_steps(lm_rig *r, int from, int to) {
    double loss_v = 0;
    for (int step = from; step < to; step++) {
        amp_scope *sc = amp_scope_begin();
        int64_t xs[32], ys[32];
        for (int i = 0; i < 32; i++) {
            xs[i] = (i * 5 + step * 3) % CFG.vocab;
            ys[i] = (xs[i] * 7 + 2) % CFG.vocab;
        }
        amp_tensor *x = amp_tensor_from_data(xs, AMP_I64, 2, AMP_SHAPE(4, 8)), *y = amp_tensor_from_data(ys, AMP_I64, 1, AMP_SHAPE(32));
        amp_setup_zero_grad(r->s);
        amp_tensor *logits = amp_module_forward(r->m, x); /* token ids are not cast; logits come back f32 */
        assert_non_null(logits);
        assert_int_equal(amp_tensor_dtype(logits), AMP_F32);
        amp_tensor *loss = amp_cross_entropy(amp_reshape(logits, 2, AMP_SHAPE(32, CFG.vocab)), y, NULL);
        loss_v = amp_tensor_item(loss);
        assert_int_equal(amp_setup_backward(r->s, loss), AMP_OK);
        amp_setup_clip_grad_norm(r->s, 1.0);
        assert_int_equal(amp_setup_step(r->s, NULL), AMP_OK);
        amp_scope_end(sc);
    }
    return loss_v;
}

static void assert_same_state(amp_module *a, amp_module *b) {
    amp_tensor *ta[64], *tb[64];
    const char *na[64];
    int n = amp_module_state(a, ta, na, 64);
    assert_int_equal(amp_module_state(b, tb, NULL, 64), n);
    for (int i = 0; i < n; i++) {
        if (amp_tensor_dtype(ta[i]) != amp_tensor_dtype(tb[i]) || memcmp(amp_tensor_data(ta[i]), amp_tensor_data(tb[i]), amp_tensor_nbytes(ta[i])))
            fail_msg("%s differs after the resume", na[i]);
    }
}

static void t_user_model_o2_resume(void **st) {
    (void)st;
    amp_dtype halves[2] = {AMP_BF16, AMP_F16};
    for (int h = 0; h < 2; h++) {
        char *dir = test_mkdtemp(), ck[1024];
        snprintf(ck, sizeof ck, "%s/ck", dir);
        lm_rig a, b;
        lm_make(&a, 21, halves[h]);
        /* O2 on the user model: its Linear and Embedding weights half, its LayerNorms f32 and kept */
        assert_int_equal(amp_tensor_dtype(amp_module_get_parameter(a.m, "h.0.attn.c_attn.weight")), halves[h]);
        assert_int_equal(amp_tensor_dtype(amp_module_get_parameter(a.m, "wte.weight")), halves[h]);
        assert_int_equal(amp_tensor_dtype(amp_module_get_parameter(a.m, "h.1.ln_2.weight")), AMP_F32);
        assert_true(amp_module_is_kept_f32(amp_module_get_child(a.m, "ln_f")));
        assert_ptr_equal(amp_module_get_parameter(a.m, "lm_head.weight"), amp_module_get_parameter(a.m, "wte.weight"));
        double first = lm_steps(&a, 0, 1);
        lm_steps(&a, 1, 4);
        int no;
        amp_optim *const *os = amp_setup_optims(a.s, &no);
        amp_train_state ts = {.model = a.m, .optims = os, .n_optims = no, .scaler = amp_setup_scaler(a.s), .step = 4};
        assert_true((amp_setup_scaler(a.s) != NULL) == (halves[h] == AMP_F16));
        assert_int_equal(amp_checkpoint_save(ck, &ts), AMP_OK);
        double last = lm_steps(&a, 4, 12);
        if (!(last < first)) fail_msg("%s O2: loss %g -> %g", amp_dtype_name(halves[h]), first, last);

        lm_make(&b, 77, halves[h]);
        amp_checkpoint *c = amp_checkpoint_open(ck);
        assert_non_null(c);
        amp_train_state rs = {.model = b.m, .optims = amp_setup_optims(b.s, &no), .n_optims = no, .scaler = amp_setup_scaler(b.s)};
        if (amp_checkpoint_restore(c, &rs) != AMP_OK) fail_msg("restore: %s", amp_last_error());
        amp_checkpoint_close(c);
        lm_steps(&b, 4, 12);
        assert_same_state(a.m, b.m);
        if (halves[h] == AMP_F16) assert_true(amp_scaler_get_scale(amp_setup_scaler(a.s)) == amp_scaler_get_scale(amp_setup_scaler(b.s)));
        for (int k = 0; k < no; k++)
            for (int i = 0; i < amp_optim_num_params(os[k]); i++) {
                amp_tensor *ma = amp_optim_state(os[k], i, "exp_avg"), *mb = amp_optim_state(amp_setup_optims(b.s, NULL)[k], i, "exp_avg");
                assert_memory_equal(amp_tensor_data(ma), amp_tensor_data(mb), amp_tensor_nbytes(ma));
            }
        amp_setup_free(a.s);
        amp_setup_free(b.s);
        amp_module_free(a.m);
        amp_module_free(b.m);
        test_rmtree(dir);
        free(dir);
    }
}

/* ---- policies, overrides, errors --------------------------------------------------------------------- */
static void t_policy_and_errors(void **st) {
    (void)st;
    amp_generator g = amp_generator_make(6);
    amp_module *m = make_model(&g);
    amp_init_opts o = {.policy = "params=float32,compute=float16,output=float32", .optim = amp_sgd_opts(0.1)};
    amp_setup *s = amp_initialize(&m, 1, &o);
    assert_non_null(s);
    const amp_opt_config *c = amp_setup_config(s);
    assert_true(c->autocast && c->compute_dtype == AMP_F16 && c->loss_scaling && !c->master_weights);
    amp_setup_free(s);
    amp_module_free(m);
    /* overrides: O2 without master weights and with half norms */
    m = make_model(&g);
    o = (amp_init_opts){.level = AMP_O2, .half = AMP_BF16, .optim = amp_sgd_opts(0.1), .master_weights = AMP_OFF,
                        .keep_norm_f32 = AMP_OFF, .output = AMP_DTYPE_COUNT};
    s = amp_initialize(&m, 1, &o);
    assert_non_null(s);
    assert_int_equal(amp_tensor_dtype(amp_module_get_parameter(m, "1.weight")), AMP_BF16);
    int no;
    amp_setup_optims(s, &no);
    assert_int_equal(no, 1);
    amp_scope *sc = amp_scope_begin();
    amp_tensor *y = amp_module_forward(m, amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(2, 8)));
    assert_int_equal(amp_tensor_dtype(y), AMP_BF16); /* output left as computed */
    amp_scope_end(sc);
    amp_setup_free(s);
    amp_module_free(m);
    /* errors name amp_initialize and the problem, and change nothing */
    m = make_model(&g);
    o = (amp_init_opts){.level = AMP_O2, .half = AMP_F32, .optim = amp_sgd_opts(0.1)};
    assert_null(amp_initialize(&m, 1, &o));
    expect_error("amp_opt_config_get: half dtype f32 is not f16 or bf16 (then: amp_initialize)");
    assert_int_equal(amp_tensor_dtype(amp_module_get_parameter(m, "0.fc.weight")), AMP_F32);
    o = (amp_init_opts){.policy = "params=bfloat16,compute=float32,output=float32", .optim = amp_sgd_opts(0.1)};
    assert_null(amp_initialize(&m, 1, &o));
    expect_error("half parameters compute in their own dtype");
    o = (amp_init_opts){.policy = "params=bfloat16", .optim = amp_sgd_opts(0.1)};
    assert_null(amp_initialize(&m, 1, &o));
    expect_error("amp_policy_parse: ");
    expect_error(" (then: amp_initialize)");
    o = (amp_init_opts){.level = AMP_O1, .half = AMP_F16, .optim = amp_sgd_opts(0.1), .master_weights = AMP_ON};
    assert_null(amp_initialize(&m, 1, &o));
    expect_error("master weights need half parameters");
    assert_null(amp_initialize(NULL, 1, &o));
    expect_error("amp_initialize: models is NULL");
    o = (amp_init_opts){.level = AMP_O2, .half = AMP_BF16, .optim = amp_sgd_opts(-1.0)};
    assert_null(amp_initialize(&m, 1, &o));
    expect_error("amp_optim_new: lr -1");
    expect_error(" (then: amp_initialize)");
    assert_int_equal(amp_tensor_dtype(amp_module_get_parameter(m, "0.fc.weight")), AMP_F32); /* nothing was cast */
    amp_module *empty = amp_nn_relu();
    o = (amp_init_opts){.level = AMP_O0, .optim = amp_sgd_opts(0.1)};
    assert_null(amp_initialize(&empty, 1, &o));
    expect_error("the models have no parameters");
    amp_module_free(empty);
    amp_module_free(m);
}

AMP_TEST_MAIN(t_levels_match_docs, t_joint_clipping, t_training_levels, t_user_model_o2_resume, t_policy_and_errors,
              t_policy_is_a_level)

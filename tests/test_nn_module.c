/* The module mechanism (amp/nn.h): built-in layers keep PyTorch's state_dict
 * names and repr; a user-defined model (tests/support/tiny_lm.c: attention
 * blocks from public ops, a ModuleList, a non-persistent buffer, a tied
 * parameter) gets everything the built-ins get: names, save/load, bit-exact
 * checkpoint resume, amp_module_to, keep-f32, train/eval, memory accounting. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"
#include "tiny_lm.h"

static char *print_of(const amp_module *m) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(amp_module_print(m, f), AMP_OK);
    fclose(f);
    return buf;
}

static void expect_error(const char *needle) {
    if (!strstr(amp_last_error(), needle)) fail_msg("expected an error containing \"%s\", got \"%s\"", needle, amp_last_error());
}

/* The names and the repr are PyTorch's (printed by torch 1.13 for the same nn.Sequential). */
static void t_builtin_names_and_repr(void **s) {
    (void)s;
    amp_generator g = amp_generator_make(1);
    amp_module *cnn = amp_model_build("cnn", &g);
    const char *want[] = {"0.weight", "0.bias", "3.weight", "3.bias", "4.weight", "4.bias", "4.running_mean", "4.running_var",
                          "4.num_batches_tracked", "8.weight", "8.bias", "11.weight", "11.bias"};
    const char *names[32];
    amp_tensor *ts[32];
    int n = amp_module_state(cnn, ts, names, 32);
    assert_int_equal(n, 13);
    for (int i = 0; i < n; i++) assert_string_equal(names[i], want[i]);
    /* parameters: the same order without the buffers */
    assert_int_equal(amp_module_parameters(cnn, ts, names, 32), 10);
    assert_string_equal(names[4], "4.weight");
    assert_string_equal(names[6], "8.weight");
    assert_int_equal(amp_module_buffers(cnn, ts, names, 32), 3);
    assert_string_equal(names[2], "4.num_batches_tracked");
    assert_int_equal(amp_tensor_dtype(ts[2]), AMP_I64);
    char *p = print_of(cnn);
    const char *torch_repr =
        "Sequential(\n"
        "  (0): Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
        "  (1): ReLU()\n"
        "  (2): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n"
        "  (3): Conv2d(32, 64, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
        "  (4): BatchNorm2d(64, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)\n"
        "  (5): ReLU()\n"
        "  (6): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n"
        "  (7): Flatten(start_dim=1, end_dim=-1)\n"
        "  (8): Linear(in_features=3136, out_features=128, bias=True)\n"
        "  (9): ReLU()\n"
        "  (10): Dropout(p=0.25, inplace=False)\n"
        "  (11): Linear(in_features=128, out_features=10, bias=True)\n"
        ")\n";
    assert_string_equal(p, torch_repr);
    free(p);
    amp_module_free(cnn);

    amp_module *mlp = amp_model_build("mlp", &g);
    assert_int_equal(amp_module_parameters(mlp, ts, names, 32), 6);
    assert_string_equal(names[0], "1.weight");
    assert_string_equal(names[5], "5.bias");
    assert_int_equal(amp_module_num_params(mlp), 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10);
    /* dotted access reaches the same tensors */
    assert_ptr_equal(amp_module_get_parameter(mlp, "3.weight"), ts[2]);
    assert_string_equal(amp_module_kind(amp_module_get_child(mlp, "3")), "Linear");
    amp_module *ln = amp_nn_layernorm(10, 1e-5), *emb = amp_nn_embedding(5, 3, &g), *ge = amp_nn_gelu(AMP_GELU_ERF);
    p = print_of(ln);
    assert_string_equal(p, "LayerNorm((10,), eps=1e-05, elementwise_affine=True)\n");
    free(p);
    p = print_of(emb);
    assert_string_equal(p, "Embedding(5, 3)\n");
    free(p);
    p = print_of(ge);
    assert_string_equal(p, "GELU(approximate='none')\n");
    free(p);
    amp_module_free(ln);
    amp_module_free(emb);
    amp_module_free(ge);
    amp_module_free(mlp);
}

/* ---- registration rules ---------------------------------------------------------------------- */
static amp_tensor *twice_forward(amp_module *m, amp_tensor *x) { return amp_mul(x, amp_module_get_parameter(m, "scale")); }
static const amp_module_class twice_class = {.name = "Twice", .forward = twice_forward};

static void t_registration(void **s) {
    (void)s;
    amp_mem_stats before = amp_memory_stats();
    amp_module *m = amp_module_new(&twice_class, 16);
    assert_non_null(m);
    assert_non_null(amp_module_data(m));
    amp_scope *sc = amp_scope_begin();
    amp_tensor *w = amp_module_register_parameter(m, "scale", amp_tensor_full(AMP_F32, 1, AMP_SHAPE(3), 2.0));
    assert_non_null(w);
    amp_scope_end(sc); /* the module took the tensor out of the scope */
    assert_true(amp_tensor_requires_grad(w));
    assert_int_equal(amp_memory_stats().live[AMP_MEM_PARAM], before.live[AMP_MEM_PARAM] + 12);
    /* each rule, with the message naming the function */
    assert_null(amp_module_register_parameter(m, "scale", amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(3))));
    expect_error("amp_module_register_parameter: Twice: 'scale' is already registered (as a parameter)");
    assert_null(amp_module_register_buffer(m, "scale", amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(3)), true));
    expect_error("already registered");
    assert_null(amp_module_register_parameter(m, "a.b", amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(3))));
    expect_error("must not contain '.'");
    assert_null(amp_module_register_parameter(m, "", amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(3))));
    expect_error("1 to 127 characters");
    assert_null(amp_module_register_parameter(m, "idx", amp_tensor_ones(AMP_I64, 1, AMP_SHAPE(3))));
    expect_error("dtype i64");
    amp_tensor *leaf = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(3));
    amp_tensor_set_requires_grad(leaf, true);
    assert_null(amp_module_register_parameter(m, "sum", amp_add(leaf, leaf)));
    expect_error("was produced by amp_add");
    amp_tensor *base = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(2, 3));
    assert_null(amp_module_register_parameter(m, "t", amp_transpose(base, 0, 1)));
    expect_error("not contiguous");
    amp_tensor_free(base);
    assert_null(amp_module_register_buffer(m, "b", amp_tensor_retain(leaf), true));
    expect_error("requires grad");
    amp_tensor_free(leaf);
    assert_null(amp_module_register_module(m, "self", amp_module_retain(m)));
    expect_error("its own descendant");
    amp_module_free(m); /* the retained reference the failed call did not take */
    assert_null(amp_module_register_parameter(m, "x", NULL));
    assert_null(amp_module_get_parameter(m, "nope"));
    expect_error("amp_module_get_parameter: Twice has no parameter 'nope'");
    assert_null(amp_module_get_child(m, "a.b"));
    expect_error("no child module 'a.b'");
    assert_int_equal(amp_module_append(m, amp_nn_relu()), AMP_ERR_ARG);
    expect_error("amp_module_append: Twice is not a Sequential or ModuleList");
    /* buffers: persistent ones are state, others are not */
    assert_non_null(amp_module_register_buffer(m, "count", amp_tensor_zeros(AMP_I64, 0, NULL), true));
    assert_non_null(amp_module_register_buffer(m, "cache", amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(4)), false));
    const char *names[8];
    assert_int_equal(amp_module_state(m, NULL, names, 8), 2);
    assert_string_equal(names[1], "count");
    assert_int_equal(amp_module_buffers(m, NULL, names, 8), 2);
    assert_string_equal(names[1], "cache");
    /* a module without forward says so */
    amp_module *list = amp_nn_module_list();
    assert_int_equal(amp_module_append(list, amp_module_retain(m)), AMP_OK);
    assert_int_equal(amp_module_append(list, amp_nn_relu()), AMP_OK);
    amp_tensor *x = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(3));
    assert_null(amp_module_forward(list, x));
    expect_error("amp_module_forward: ModuleList has no forward");
    /* the shared child is one module: its forward through the list's child is m's */
    amp_tensor *y = amp_module_forward(amp_module_get_child(list, "0"), x);
    assert_non_null(y);
    assert_true(amp_tensor_get(y, AMP_SHAPE(1)) == 2.0);
    assert_int_equal(amp_module_parameters(list, NULL, names, 8), 1);
    assert_string_equal(names[0], "0.scale");
    /* forward_n: one input only for a forward-only class */
    amp_tensor *xs[2] = {x, x};
    assert_null(amp_module_forward_n(m, xs, 2));
    expect_error("Twice takes one input (got 2)");
    test_free_tensors(x, y);
    amp_module_free(list);
    amp_module_free(m);
    /* everything is gone */
    assert_int_equal(amp_memory_stats().live[AMP_MEM_PARAM], before.live[AMP_MEM_PARAM]);
}

/* ---- the user model -------------------------------------------------------------------------- */
static const tiny_lm_cfg CFG = {.vocab = 17, .block = 8, .d = 16, .heads = 2, .layers = 2};

static amp_tensor *batch_tokens(int step, int64_t B, int64_t T, amp_tensor **targets) {
    int64_t *a = malloc(sizeof(int64_t) * (size_t)(B * T)), *b = malloc(sizeof(int64_t) * (size_t)(B * T));
    for (int64_t i = 0; i < B * T; i++) {
        a[i] = (int64_t)((i * 7 + step * 3) % CFG.vocab);
        b[i] = (a[i] * 5 + 1) % CFG.vocab; /* a learnable mapping */
    }
    amp_tensor *x = amp_tensor_from_data(a, AMP_I64, 2, AMP_SHAPE(B, T));
    *targets = amp_tensor_from_data(b, AMP_I64, 1, AMP_SHAPE(B * T));
    test_free_all(a, b);
    return x;
}

static amp_tensor *lm_loss(amp_module *m, amp_tensor *x, amp_tensor *y) {
    amp_tensor *logits = amp_module_forward(m, x); /* [B,T,V] */
    if (!logits) return NULL;
    return amp_cross_entropy(amp_reshape(logits, 2, AMP_SHAPE(-1, CFG.vocab)), y, NULL);
}

static void t_user_model_names_and_tying(void **s) {
    (void)s;
    amp_generator g = amp_generator_make(5);
    amp_module *m = tiny_lm_new(&CFG, &g);
    assert_non_null(m);
    const char *names[64];
    amp_tensor *ts[64];
    int ns = amp_module_state(m, ts, names, 64);
    /* wte, wpe, per block 2 ln x 2 + c_attn 2 + c_proj 2 + mlp 4 = 12, ln_f 2, lm_head 1 */
    assert_int_equal(ns, 2 + 12 * 2 + 2 + 1);
    assert_string_equal(names[0], "wte.weight");
    assert_string_equal(names[2], "h.0.ln_1.weight");
    assert_string_equal(names[4], "h.0.attn.c_attn.weight");
    assert_string_equal(names[10], "h.0.mlp.c_fc.weight");
    assert_string_equal(names[ns - 1], "lm_head.weight");
    assert_ptr_equal(ts[ns - 1], ts[0]); /* tied: one tensor under two names */
    int np = amp_module_parameters(m, ts, names, 64);
    assert_int_equal(np, ns - 1); /* listed once */
    int64_t want = CFG.vocab * CFG.d + CFG.block * CFG.d + 2 * CFG.d +
                   CFG.layers * (4 * CFG.d + 3 * CFG.d * CFG.d + 3 * CFG.d + CFG.d * CFG.d + CFG.d + 4 * CFG.d * CFG.d + 4 * CFG.d +
                                 4 * CFG.d * CFG.d + CFG.d);
    assert_int_equal(amp_module_num_params(m), want);
    /* the non-persistent mask is a buffer but not state */
    assert_int_equal(amp_module_buffers(m, NULL, names, 64), 2);
    assert_string_equal(names[1], "h.1.attn.mask");

    /* the tied gradient is the sum of both uses: compare with an untied copy */
    amp_scope *scope = amp_scope_begin();
    amp_tensor *y, *x = batch_tokens(0, 2, 5, &y);
    amp_tensor *loss = lm_loss(m, x, y);
    assert_int_equal(amp_backward(loss), AMP_OK);
    amp_tensor *wte = amp_module_get_parameter(m, "wte.weight");
    double *tied = malloc(sizeof(double) * (size_t)amp_tensor_numel(wte));
    assert_int_equal(amp_tensor_copy_out(amp_tensor_grad(wte), tied, AMP_F64), AMP_OK);
    amp_module_zero_grad(m);
    assert_null(amp_tensor_grad(wte));
    amp_tensor *copy = amp_tensor_empty(AMP_F32, 2, AMP_SHAPE(CFG.vocab, CFG.d));
    amp_tensor_copy_(copy, wte);
    assert_int_equal(amp_module_set_parameter(m, "lm_head.weight", copy), AMP_OK);
    assert_int_equal(amp_module_parameters(m, NULL, NULL, 0), np + 1);
    loss = lm_loss(m, x, y);
    assert_int_equal(amp_backward(loss), AMP_OK);
    double *g1 = malloc(sizeof(double) * (size_t)amp_tensor_numel(wte)), *g2 = malloc(sizeof(double) * (size_t)amp_tensor_numel(wte));
    amp_tensor_copy_out(amp_tensor_grad(wte), g1, AMP_F64);
    amp_tensor_copy_out(amp_tensor_grad(copy), g2, AMP_F64);
    for (int64_t i = 0; i < amp_tensor_numel(wte); i++) assert_close(tied[i], g1[i] + g2[i], 1e-5, 1e-7, "tied gradient");
    test_free_all(tied, g1, g2);
    amp_scope_end(scope);
    amp_module_free(m);
}

static void assert_same_state(amp_module *a, amp_module *b) {
    amp_tensor *ta[64], *tb[64];
    const char *na[64], *nb[64];
    int n = amp_module_state(a, ta, na, 64);
    assert_int_equal(amp_module_state(b, tb, nb, 64), n);
    for (int i = 0; i < n; i++) {
        assert_string_equal(na[i], nb[i]);
        assert_int_equal(amp_tensor_dtype(ta[i]), amp_tensor_dtype(tb[i]));
        assert_memory_equal(amp_tensor_data(ta[i]), amp_tensor_data(tb[i]), amp_tensor_nbytes(ta[i]));
    }
}

static void t_user_model_save_load(void **s) {
    (void)s;
    char *dir = test_mkdtemp(), path[1024];
    snprintf(path, sizeof path, "%s/lm.safetensors", dir);
    amp_generator g1 = amp_generator_make(1), g2 = amp_generator_make(2);
    amp_module *a = tiny_lm_new(&CFG, &g1), *b = tiny_lm_new(&CFG, &g2);
    assert_int_equal(amp_model_save(a, path, NULL, 0), AMP_OK);
    /* the tied tensor is stored once, under its first name */
    amp_safetensors *f = amp_safetensors_read(path);
    assert_non_null(f);
    assert_int_equal(amp_safetensors_count(f), amp_module_state(a, NULL, NULL, 0) - 1);
    assert_true(amp_safetensors_find(f, "wte.weight") >= 0);
    assert_true(amp_safetensors_find(f, "lm_head.weight") < 0);
    assert_true(amp_safetensors_find(f, "h.0.attn.mask") < 0); /* not persistent */
    amp_safetensors_free(f);
    assert_int_equal(amp_model_load(b, path), AMP_OK);
    assert_same_state(a, b);
    assert_ptr_equal(amp_module_get_parameter(b, "lm_head.weight"), amp_module_get_parameter(b, "wte.weight"));
    /* a file naming the tie the other way (torch's state_dict keeps both names) loads too */
    amp_tensor *ts[64];
    const char *names[64];
    int n = amp_module_state(a, ts, names, 64);
    assert_int_equal(amp_safetensors_write(path, ts, names, n, NULL, 0), AMP_OK);
    amp_generator g3 = amp_generator_make(3);
    amp_module *c = tiny_lm_new(&CFG, &g3);
    assert_int_equal(amp_model_load(c, path), AMP_OK);
    assert_same_state(a, c);
    /* and a file missing both names of the tie is refused, naming one */
    assert_int_equal(amp_safetensors_write(path, ts + 1, names + 1, n - 2, NULL, 0), AMP_OK);
    assert_int_equal(amp_model_load(c, path), AMP_ERR_FORMAT);
    expect_error("tensor 'wte.weight' is missing");
    amp_module_free(a);
    amp_module_free(b);
    amp_module_free(c);
    test_rmtree(dir);
    free(dir);
}

/* Training with fp16 autocast + GradScaler + AdamW, a checkpoint after 3
 * steps, then a resume into freshly built objects: the weights after 6 steps
 * equal the uninterrupted run's bit for bit. */
typedef struct {
    amp_module *m;
    amp_optim *opt;
    amp_scaler *sc;
} lm_rig;

static void rig_make(lm_rig *r, uint64_t seed) {
    amp_generator g = amp_generator_make(seed);
    r->m = tiny_lm_new(&CFG, &g);
    assert_non_null(r->m);
    amp_optim_opts o = amp_adamw_opts(3e-3);
    r->opt = test_optim_new(r->m, &o);
    r->sc = amp_scaler_new(&(amp_scaler_opts){.init_scale = 1024, .growth_interval = 2});
    assert_true(r->opt && r->sc);
}

static void rig_free(lm_rig *r) {
    amp_optim_free(r->opt);
    amp_scaler_free(r->sc);
    amp_module_free(r->m);
}

static double rig_steps(lm_rig *r, int from, int to) {
    double last = NAN;
    for (int step = from; step < to; step++) {
        amp_scope *s = amp_scope_begin();
        amp_tensor *y, *x = batch_tokens(step, 4, 8, &y);
        amp_optim_zero_grad(r->opt);
        amp_autocast_enter(AMP_F16);
        amp_tensor *loss = lm_loss(r->m, x, y);
        amp_autocast_exit();
        assert_non_null(loss);
        last = amp_tensor_item(loss);
        assert_int_equal(amp_backward(amp_scaler_scale(r->sc, loss)), AMP_OK);
        assert_int_equal(amp_scaler_step(r->sc, r->opt, NULL), AMP_OK);
        assert_int_equal(amp_scaler_update(r->sc), AMP_OK);
        amp_scope_end(s);
    }
    return last;
}

static void t_user_model_resume(void **s) {
    (void)s;
    char *dir = test_mkdtemp(), ck[1024];
    snprintf(ck, sizeof ck, "%s/ck", dir);
    lm_rig a, b;
    rig_make(&a, 11);
    double first = rig_steps(&a, 0, 1);
    rig_steps(&a, 1, 3);
    amp_train_state st = {.model = a.m, .optims = &a.opt, .n_optims = 1, .scaler = a.sc, .step = 3};
    assert_int_equal(amp_checkpoint_save(ck, &st), AMP_OK);
    double last = rig_steps(&a, 3, 6);
    assert_true(last < first); /* it learns */

    rig_make(&b, 99); /* other initial weights: everything comes from the checkpoint */
    amp_checkpoint *c = amp_checkpoint_open(ck);
    assert_non_null(c);
    amp_train_state rs = {.model = b.m, .optims = &b.opt, .n_optims = 1, .scaler = b.sc};
    assert_int_equal(amp_checkpoint_restore(c, &rs), AMP_OK);
    assert_int_equal(rs.step, 3);
    amp_checkpoint_close(c);
    assert_ptr_equal(amp_module_get_parameter(b.m, "lm_head.weight"), amp_module_get_parameter(b.m, "wte.weight"));
    rig_steps(&b, 3, 6);
    assert_same_state(a.m, b.m);
    assert_true(amp_scaler_get_scale(a.sc) == amp_scaler_get_scale(b.sc));
    rig_free(&a);
    rig_free(&b);
    test_rmtree(dir);
    free(dir);
}

/* ---- dtype, keep-f32, train/eval --------------------------------------------------------------- */
typedef struct {
    int calls;
    bool saw_autocast;
    amp_dtype saw_dtype;
} probe_data;

/* A user normalisation layer: rms norm with a weight and a float buffer. */
static amp_tensor *rms_forward(amp_module *m, amp_tensor *x) {
    probe_data *p = amp_module_data(m);
    p->calls++;
    p->saw_autocast = amp_autocast_is_enabled();
    p->saw_dtype = amp_tensor_dtype(x);
    amp_tensor *ms = amp_mean(amp_mul(x, x), (const int[]){-1}, 1, true);
    return amp_mul(amp_mul(x, amp_rsqrt(amp_add_scalar(ms, 1e-6))), amp_module_get_parameter(m, "weight"));
}
static const amp_module_class rms_class = {.name = "RMSNorm", .forward = rms_forward, .flags = AMP_MODULE_NORM};

static amp_module *rms_new(int64_t d) {
    amp_module *m = amp_module_new(&rms_class, sizeof(probe_data));
    if (!amp_module_register_parameter(m, "weight", amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(d))) ||
        !amp_module_register_buffer(m, "stat", amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(d)), true))
        return NULL;
    return m;
}

static amp_tensor *scale_forward(amp_module *m, amp_tensor *x) { return amp_mul(x, amp_module_get_buffer(m, "s")); }
static const amp_module_class scale_class = {.name = "Scale", .forward = scale_forward};

static void t_module_to_keep_f32(void **s) {
    (void)s;
    amp_generator g = amp_generator_make(2);
    amp_module *sc = amp_module_new(&scale_class, 0);
    assert_non_null(amp_module_register_buffer(sc, "s", amp_tensor_full(AMP_F32, 1, AMP_SHAPE(6), 0.5), true));
    amp_module *ch[] = {amp_nn_linear(6, 6, true, &g), rms_new(6), sc, amp_nn_linear(6, 3, true, &g)};
    amp_module *m = amp_nn_sequential(ch, 4);
    assert_non_null(m);
    assert_int_equal(amp_module_to(m, AMP_BF16, true), AMP_OK);
    /* the user norm is kept (parameters and buffers in f32), the plain buffer follows the model */
    assert_int_equal(amp_tensor_dtype(amp_module_get_parameter(m, "1.weight")), AMP_F32);
    assert_int_equal(amp_tensor_dtype(amp_module_get_buffer(m, "1.stat")), AMP_F32);
    assert_true(amp_module_is_kept_f32(amp_module_get_child(m, "1")));
    assert_false(amp_module_is_kept_f32(amp_module_get_child(m, "0")));
    assert_int_equal(amp_tensor_dtype(amp_module_get_buffer(m, "2.s")), AMP_BF16);
    assert_int_equal(amp_tensor_dtype(amp_module_get_parameter(m, "3.weight")), AMP_BF16);
    amp_scope *scope = amp_scope_begin();
    amp_tensor *x = amp_to(amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(4, 6), &g), AMP_BF16);
    amp_autocast_enter(AMP_BF16);
    amp_tensor *y = amp_module_forward(m, x);
    amp_autocast_exit();
    assert_non_null(y);
    probe_data *p = amp_module_data(amp_module_get_child(m, "1"));
    assert_int_equal(p->calls, 1);
    assert_false(p->saw_autocast);        /* kept f32: autocast off inside */
    assert_int_equal(p->saw_dtype, AMP_F32); /* and the input widened */
    assert_int_equal(amp_tensor_dtype(y), AMP_BF16);
    /* train/eval reaches every descendant */
    amp_module_train(m, false);
    assert_false(amp_module_is_training(amp_module_get_child(m, "2")));
    amp_module_train(m, true);
    assert_true(amp_module_is_training(amp_module_get_child(m, "1")));
    /* keep_f32 on a user module by hand, without amp_module_to */
    amp_module_keep_f32(m, false);
    assert_false(amp_module_is_kept_f32(amp_module_get_child(m, "1")));
    amp_scope_end(scope);
    amp_module_free(m);
}

/* Ownership without debug mode (issue 23 item 16): a child belongs to its
 * parent, which took the caller's reference. amp_module_free of the child is
 * refused (it used to free it under the parent: a crash at the next forward
 * and a double release when the parent was freed), and so is registering it
 * in a second parent; amp_module_retain gives the caller a reference of its
 * own, which amp_module_free then drops. */
static void t_child_ownership(void **s) {
    (void)s;
    amp_scope *sc = amp_scope_begin();
    amp_tensor *x = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(2, 4));
    amp_module *lin = amp_nn_linear(4, 3, true, NULL);
    amp_module *seq = amp_nn_sequential((amp_module *[]){lin}, 1);
    assert_non_null(seq);
    amp_clear_error();
    amp_module_free(lin);
    const char *e = amp_last_error();
    if (!strstr(e, "amp_module_free: Linear") || !strstr(e, "belongs to its parent"))
        fail_msg("expected the free of an owned child to be refused, got \"%s\"", e);
    assert_non_null(amp_module_forward(seq, x)); /* still there */
    amp_module *other = amp_nn_sequential(NULL, 0);
    assert_int_not_equal(amp_module_append(other, lin), AMP_OK);
    e = amp_last_error();
    if (!strstr(e, "already belongs to a parent")) fail_msg("expected a second parent to be refused, got \"%s\"", e);
    assert_int_equal(amp_module_num_children(other), 0);
    /* retained: shared by two parents, freed by each */
    assert_non_null(amp_module_retain(lin));
    assert_int_equal(amp_module_append(other, lin), AMP_OK);
    amp_module_free(seq);
    assert_non_null(amp_module_forward(other, x)); /* lin lives on in other */
    amp_module_free(other);
    amp_scope_end(sc);
}

/* A container call that fails reports its own cause even when one of the
 * children it was given belongs to a parent already: freeing that child on
 * the error path is refused, and the refusal used to replace the cause
 * ("amp_module_free: Linear ... belongs to its parent"). The owned child
 * stays in its parent. */
static void t_container_error_keeps_cause(void **s) {
    (void)s;
    amp_scope *sc = amp_scope_begin();
    amp_tensor *x = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(2, 4));
    amp_module *a = amp_nn_linear(4, 4, true, NULL), *b = amp_nn_linear(4, 4, true, NULL);
    amp_module *parent = amp_nn_sequential((amp_module *[]){a, b}, 2); /* a and b are its */
    assert_non_null(parent);
    /* not a container */
    amp_module *relu = amp_nn_relu();
    assert_int_equal(amp_module_append(relu, a), AMP_ERR_ARG);
    expect_error("amp_module_append: ReLU is not a Sequential or ModuleList");
    /* a NULL child (its constructor failed) beside an owned one */
    assert_null(amp_nn_sequential((amp_module *[]){a, amp_nn_linear(-1, 4, true, NULL)}, 2));
    expect_error("amp_nn_linear");
    expect_error("child 1 is NULL");
    if (strstr(amp_last_error(), "belongs to its parent")) fail_msg("the clean-up's refusal in the message: %s", amp_last_error());
    /* an owned child, then another: the first append's refusal is the cause */
    assert_null(amp_nn_sequential((amp_module *[]){a, b}, 2));
    expect_error("amp_module_register_module: Sequential: child '0' (Linear) already belongs to a parent module");
    if (strstr(amp_last_error(), "amp_module_free")) fail_msg("the clean-up's refusal in the message: %s", amp_last_error());
    assert_non_null(amp_module_forward(parent, x)); /* a and b still there */
    amp_module_free(relu);
    amp_module_free(parent);
    amp_scope_end(sc);
}

AMP_TEST_MAIN(t_builtin_names_and_repr, t_registration, t_user_model_names_and_tying, t_user_model_save_load,
              t_user_model_resume, t_module_to_keep_f32, t_child_ownership, t_container_error_keeps_cause)

/* The GPT model (amp/gpt.h) beyond the PyTorch golden data
 * (test_gpt_golden.c): its module tree and names, nanoGPT's initialisation,
 * activation checkpointing (bit-identical gradients, the dropout masks
 * restored, less activation memory, the generic amp_activation_checkpoint
 * and its refusals), the KV cache (equal to recomputing the whole prefix)
 * and generation (deterministic for a seed; the cached and the uncached
 * paths give the same tokens, also past block_size), weight-decay groups
 * under O2's two optimizers, and argument errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_check.h"

static amp_gpt_config small_cfg(double dropout) {
    amp_gpt_config c = {2, 4, 32, 16, 64, dropout, true};
    return c;
}

static void t_structure(void **state) {
    (void)state;
    amp_gpt_config c = {3, 2, 16, 8, 50, 0.1, true};
    amp_generator g = amp_generator_make(1);
    amp_module *m = amp_gpt_new(&c, &g);
    assert_non_null(m);
    amp_tensor *ps[64];
    const char *names[64];
    int np = amp_module_parameters(m, ps, names, 64);
    /* nanoGPT's named_parameters(): wte, wpe, 12 per block, ln_f; lm_head is wte */
    assert_int_equal(np, 4 + 12 * 3);
    assert_string_equal(names[0], "transformer.wte.weight");
    assert_string_equal(names[1], "transformer.wpe.weight");
    const char *blk[] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                         "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                         "mlp.c_proj.weight", "mlp.c_proj.bias"};
    for (int l = 0; l < 3; l++)
        for (int k = 0; k < 12; k++) {
            char want[96];
            snprintf(want, sizeof want, "transformer.h.%d.%s", l, blk[k]);
            assert_string_equal(names[2 + 12 * l + k], want);
        }
    assert_string_equal(names[np - 2], "transformer.ln_f.weight");
    assert_string_equal(names[np - 1], "transformer.ln_f.bias");
    int64_t C = c.n_embd, expect = c.vocab_size * C + c.block_size * C + c.n_layer * (12 * C * C + 13 * C) + 2 * C;
    assert_int_equal(amp_module_num_params(m), expect);
    /* the state lists lm_head.weight too (as torch's state_dict), the same tensor */
    amp_tensor *st[64];
    const char *sn[64];
    int ns = amp_module_state(m, st, sn, 64);
    assert_int_equal(ns, np + 1);
    assert_string_equal(sn[ns - 1], "lm_head.weight");
    assert_ptr_equal(st[ns - 1], ps[0]);
    /* the repr is nanoGPT's module tree */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(amp_module_print(m, f), AMP_OK);
    fclose(f);
    const char *parts[] = {"GPT(", "(transformer): ModuleDict(", "(wte): Embedding(50, 16)", "(h): ModuleList(",
                           "(0): Block(", "(attn): CausalSelfAttention(", "(c_attn): Linear(in_features=16, out_features=48, bias=True)",
                           "(resid_dropout): Dropout(p=0.1, inplace=False)", "(gelu): GELU(approximate='tanh')",
                           "(lm_head): Linear(in_features=16, out_features=50, bias=False)"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (!strstr(buf, parts[i])) fail_msg("repr lacks '%s':\n%s", parts[i], buf);
    free(buf);
    amp_gpt_config got;
    assert_int_equal(amp_gpt_get_config(m, &got), AMP_OK);
    assert_memory_equal(&got, &c, sizeof c);
    amp_module_free(m);
    /* bias = false: no biases at all (nanoGPT's option) */
    c.bias = false;
    m = amp_gpt_new(&c, &g);
    assert_int_equal(amp_module_parameters(m, NULL, NULL, 0), 3 + 6 * 3);
    assert_null(amp_module_get_parameter(m, "transformer.h.0.attn.c_attn.bias"));
    amp_module_free(m);
}

static double stddev(const amp_tensor *t, double *mean) {
    double *v = tc_values(t), s = 0, s2 = 0;
    int64_t n = amp_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) s += v[i];
    double mu = s / (double)n;
    for (int64_t i = 0; i < n; i++) s2 += (v[i] - mu) * (v[i] - mu);
    free(v);
    if (mean) *mean = mu;
    return sqrt(s2 / (double)n);
}

/* GPT-2's init: N(0, 0.02), residual projections 0.02 / sqrt(2 n_layer), biases 0, norms 1. */
static void t_init(void **state) {
    (void)state;
    amp_gpt_config c = {8, 4, 128, 64, 512, 0.0, true};
    amp_module *m = test_gpt_new(&c, 3);
    struct {
        const char *name;
        double std;
    } want[] = {{"transformer.wte.weight", 0.02}, {"transformer.wpe.weight", 0.02}, {"transformer.h.3.attn.c_attn.weight", 0.02},
                {"transformer.h.3.mlp.c_fc.weight", 0.02}, {"transformer.h.5.attn.c_proj.weight", 0.02 / 4.0},
                {"transformer.h.7.mlp.c_proj.weight", 0.02 / 4.0}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        double mu, sd = stddev(amp_module_get_parameter(m, want[i].name), &mu);
        printf("%-36s std %.5f (want %.5f) mean %+.1e\n", want[i].name, sd, want[i].std, mu);
        assert_true(fabs(sd / want[i].std - 1) < 0.03);
        assert_true(fabs(mu) < 0.05 * want[i].std);
    }
    double mu;
    assert_true(stddev(amp_module_get_parameter(m, "transformer.h.2.attn.c_attn.bias"), &mu) == 0 && mu == 0);
    assert_true(stddev(amp_module_get_parameter(m, "transformer.h.2.ln_1.weight"), &mu) == 0 && mu == 1);
    assert_true(stddev(amp_module_get_parameter(m, "transformer.ln_f.bias"), &mu) == 0 && mu == 0);
    /* the same generator seed, the same model */
    amp_generator g2 = amp_generator_make(3);
    amp_module *m2 = amp_gpt_new(&c, &g2);
    amp_tensor *a = amp_module_get_parameter(m, "transformer.h.6.mlp.c_fc.weight"), *b = amp_module_get_parameter(m2, "transformer.h.6.mlp.c_fc.weight");
    assert_memory_equal(amp_tensor_data(a), amp_tensor_data(b), amp_tensor_nbytes(a));
    amp_module_free(m);
    amp_module_free(m2);
}

static const char *fmt_b(size_t b, char *buf) {
    snprintf(buf, 16, "%.2f MiB", (double)b / 1048576.0);
    return buf;
}

/* ---- activation checkpointing ------------------------------------------------------------------ */
typedef enum { MODE_F32, MODE_BF16_O1, MODE_F16_O1, MODE_BF16_O2 } run_mode;

/* One training forward + backward; returns the loss; grads stay in the params. */
static double fwd_bwd(amp_module *m, amp_tensor *x, amp_tensor *y, run_mode mode, amp_mem_stats *mem) {
    amp_memory_reset_peak();
    amp_scope *s = amp_scope_begin();
    if (mode == MODE_BF16_O1 || mode == MODE_F16_O1) assert_int_equal(amp_autocast_enter(mode == MODE_F16_O1 ? AMP_F16 : AMP_BF16), AMP_OK);
    amp_tensor *loss = amp_gpt_loss(m, x, y, NULL);
    if (mode == MODE_BF16_O1 || mode == MODE_F16_O1) assert_int_equal(amp_autocast_exit(), AMP_OK);
    if (!loss) fail_msg("%s", amp_last_error());
    if (amp_tensor_dtype(loss) != AMP_F32) loss = amp_to(loss, AMP_F32);
    double lv = amp_tensor_item(loss);
    if (mode == MODE_F16_O1) loss = amp_mul_scalar(loss, 1024.0); /* as a loss scale would */
    if (amp_backward(loss) != AMP_OK) fail_msg("%s", amp_last_error());
    amp_scope_end(s);
    if (mem) *mem = amp_memory_stats();
    return lv;
}

static void checkpoint_case(run_mode mode, const char *what) {
    amp_gpt_config c = {6, 4, 64, 32, 128, 0.1, true}; /* dropout on: the masks must be the same in the recompute */
    amp_generator ginit = amp_generator_make(11), gdrop = amp_generator_make(99);
    amp_module *m = amp_gpt_new(&c, &ginit);
    assert_non_null(m);
    assert_int_equal(amp_gpt_set_generator(m, &gdrop), AMP_OK);
    if (mode == MODE_BF16_O2) assert_int_equal(amp_module_to(m, AMP_BF16, true), AMP_OK);
    amp_tensor *x = test_tokens(4, 32, c.vocab_size, 1), *y = test_tokens(4, 32, c.vocab_size, 2);
    amp_tensor *ps[128];
    int np = amp_module_parameters(m, ps, NULL, 128);
    assert_true(np <= 128);
    void *g0[128]; /* plain copies: tensors would count in the second run's memory */
    amp_mem_stats m0, m1;
    /* without */
    double l0 = fwd_bwd(m, x, y, mode, &m0);
    uint64_t off0 = gdrop.offset;
    for (int i = 0; i < np; i++) {
        amp_tensor *gi = amp_tensor_grad(ps[i]);
        g0[i] = malloc(amp_tensor_nbytes(gi));
        memcpy(g0[i], amp_tensor_data(gi), amp_tensor_nbytes(gi));
        amp_tensor_set_grad(ps[i], NULL);
    }
    /* with, from the same generator state */
    gdrop = amp_generator_make(99);
    assert_int_equal(amp_gpt_set_activation_checkpointing(m, true), AMP_OK);
    assert_true(amp_gpt_activation_checkpointing(m));
    double l1 = fwd_bwd(m, x, y, mode, &m1);
    assert_true(l0 == l1);
    assert_true(gdrop.offset == off0); /* the recompute's draws were put back */
    for (int i = 0; i < np; i++) {
        amp_tensor *g1 = amp_tensor_grad(ps[i]);
        assert_non_null(g1);
        assert_int_equal(amp_tensor_dtype(g1), amp_tensor_dtype(ps[i]));
        if (memcmp(amp_tensor_data(g1), g0[i], amp_tensor_nbytes(g1)))
            fail_msg("%s: the gradient of parameter %d differs with checkpointing", what, i);
        free(g0[i]);
        amp_tensor_set_grad(ps[i], NULL);
    }
    char a[32], b[32];
    printf("%s: gradients bit-identical with checkpointing; peak activation %s -> %s, total %s -> %s\n", what,
           fmt_b(m0.peak[AMP_MEM_ACTIVATION], a), fmt_b(m1.peak[AMP_MEM_ACTIVATION], b), fmt_b(m0.peak_total, a + 16),
           fmt_b(m1.peak_total, b + 16));
    assert_true(m1.peak[AMP_MEM_ACTIVATION] < m0.peak[AMP_MEM_ACTIVATION]);
    assert_true(m1.peak_total < m0.peak_total);
    test_free_tensors(x, y);
    amp_module_free(m);
}

static void t_checkpoint_bitwise(void **state) {
    (void)state;
    checkpoint_case(MODE_F32, "fp32");
    checkpoint_case(MODE_BF16_O1, "bf16 autocast");
    checkpoint_case(MODE_F16_O1, "fp16 autocast, scaled loss");
    checkpoint_case(MODE_BF16_O2, "bf16 O2 (half params, f32 norms)");
}

/* The generic mechanism, as a user calls it. */
typedef struct {
    amp_tensor *w;
    amp_generator *g;
    int calls;
    amp_dtype seen;
} user_fn;

static amp_tensor *user_block(void *arg, amp_tensor *const *in, int n) {
    user_fn *u = arg;
    u->calls++;
    amp_tensor *h = amp_matmul(in[0], u->w);
    u->seen = amp_tensor_dtype(h);
    h = amp_dropout(amp_gelu(h, AMP_GELU_TANH), 0.3, true, u->g);
    return n > 1 && in[1] ? amp_add(h, in[1]) : h;
}

static void t_checkpoint_generic(void **state) {
    (void)state;
    amp_generator g = amp_generator_make(5);
    amp_tensor *w = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(8, 8), &g);
    amp_tensor *x = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(5, 8), &g), *r = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(5, 8), &g);
    amp_tensor_set_requires_grad(w, true);
    amp_tensor_set_requires_grad(x, true);
    user_fn u = {w, &g, 0, AMP_F32};
    amp_generator *gens[1] = {&g};
    amp_checkpoint_opts o = {gens, 1};
    amp_tensor *ref_w = NULL, *ref_x = NULL;
    for (int k = 0; k < 2; k++) {
        g = amp_generator_make(77);
        amp_scope *s = amp_scope_begin();
        amp_tensor *in[2] = {x, r};
        assert_int_equal(amp_autocast_enter(AMP_BF16), AMP_OK);
        amp_tensor *out = k ? amp_activation_checkpoint(user_block, &u, in, 2, &o) : user_block(&u, in, 2);
        assert_int_equal(amp_autocast_exit(), AMP_OK); /* backward runs outside the region */
        assert_non_null(out);
        assert_int_equal(amp_backward(amp_sum(amp_mul(out, out), NULL, 0, false)), AMP_OK);
        amp_scope_end(s);
        assert_int_equal(u.seen, AMP_BF16); /* the recompute ran under the forward's autocast state */
        if (!k) {
            ref_w = amp_clone(amp_tensor_grad(w));
            ref_x = amp_clone(amp_tensor_grad(x));
        } else {
            assert_int_equal(u.calls, 3); /* plain, checkpointed forward, recompute */
            assert_memory_equal(amp_tensor_data(amp_tensor_grad(w)), amp_tensor_data(ref_w), amp_tensor_nbytes(ref_w));
            assert_memory_equal(amp_tensor_data(amp_tensor_grad(x)), amp_tensor_data(ref_x), amp_tensor_nbytes(ref_x));
        }
        amp_tensor_set_grad(w, NULL);
        amp_tensor_set_grad(x, NULL);
    }
    /* refusals: amp_grad through it, an input changed in place, bad arguments */
    amp_scope *s = amp_scope_begin();
    amp_tensor *in[1] = {x};
    amp_tensor *out = amp_activation_checkpoint(user_block, &u, in, 1, &o);
    amp_tensor *loss = amp_sum(out, NULL, 0, false), *gx = NULL;
    assert_int_not_equal(amp_grad(&loss, 1, NULL, &x, 1, &gx, false, true), AMP_OK);
    assert_non_null(strstr(amp_last_error(), "amp_activation_checkpoint"));
    assert_int_equal(amp_tensor_fill_(x, 1.0), AMP_OK);
    assert_int_not_equal(amp_backward(loss), AMP_OK);
    assert_non_null(strstr(amp_last_error(), "modified in place"));
    amp_scope_end(s);
    assert_null(amp_activation_checkpoint(NULL, NULL, in, 1, NULL));
    assert_null(amp_activation_checkpoint(user_block, &u, in, 0, NULL));
    amp_checkpoint_opts bad = {NULL, 2};
    assert_null(amp_activation_checkpoint(user_block, &u, in, 1, &bad));
    /* no grad: the function just runs */
    amp_no_grad_begin();
    s = amp_scope_begin();
    int before = u.calls;
    out = amp_activation_checkpoint(user_block, &u, in, 1, &o);
    assert_non_null(out);
    assert_false(amp_tensor_requires_grad(out));
    assert_int_equal(u.calls, before + 1);
    amp_scope_end(s);
    amp_no_grad_end();
    test_free_tensors(ref_w, ref_x, w, x, r);
}

/* ---- KV cache and generation ------------------------------------------------------------------ */
static double max_rel(const amp_tensor *a, const amp_tensor *b) {
    double *x = tc_values(a), *y = tc_values(b), d = 0, mx = 0;
    for (int64_t i = 0; i < amp_tensor_numel(a); i++) {
        d = fmax(d, fabs(x[i] - y[i]));
        mx = fmax(mx, fabs(y[i]));
    }
    test_free_all(x, y);
    return d / mx;
}

static void kv_case(bool bf16) {
    amp_gpt_config c = small_cfg(0.1);
    amp_module *m = test_gpt_new(&c, 21);
    amp_module_train(m, false);
    if (bf16) assert_int_equal(amp_module_to(m, AMP_BF16, true), AMP_OK);
    amp_tensor *x = test_tokens(2, 16, c.vocab_size, 9);
    amp_scope *s = amp_scope_begin();
    amp_no_grad_begin();
    amp_tensor *full = amp_module_forward(m, x); /* [2, 16, V] */
    amp_no_grad_end();
    amp_gpt_cache *kc = amp_gpt_cache_new(m, 2);
    assert_non_null(kc);
    /* prefill 5, then 1 at a time, then a chunk of 4 (a bottom-right causal mask), then 6 */
    int64_t cuts[] = {0, 5, 6, 7, 11, 16};
    double worst = 0;
    for (int k = 0; k + 1 < 6; k++) {
        amp_tensor *xi = amp_contiguous(amp_slice(x, 1, cuts[k], cuts[k + 1], 1));
        amp_tensor *li = amp_gpt_forward_cached(m, xi, kc);
        if (!li) fail_msg("%s", amp_last_error());
        assert_false(amp_tensor_requires_grad(li));
        assert_int_equal(amp_gpt_cache_length(kc), cuts[k + 1]);
        worst = fmax(worst, max_rel(li, amp_slice(full, 1, cuts[k], cuts[k + 1], 1)));
    }
    printf("%s: KV-cache logits within %.2e of the full forward's largest\n", bf16 ? "bf16" : "fp32", worst);
    assert_true(worst <= (bf16 ? 2e-2 : 1e-5));
    /* full: refused by name */
    assert_null(amp_gpt_forward_cached(m, amp_slice(x, 1, 0, 1, 1), kc));
    assert_non_null(strstr(amp_last_error(), "block_size"));
    amp_gpt_cache_reset(kc);
    assert_int_equal(amp_gpt_cache_length(kc), 0);
    amp_gpt_cache_free(kc);
    amp_scope_end(s);
    amp_tensor_free(x);
    amp_module_free(m);
}

static void t_kv_cache(void **state) {
    (void)state;
    kv_case(false);
    kv_case(true);
}

static void t_generate(void **state) {
    (void)state;
    amp_gpt_config c = small_cfg(0.0);
    amp_module *m = test_gpt_new(&c, 4);
    int64_t prompt[3] = {1, 2, 3}, a[40], b[40], n1, n2;
    amp_generator s1 = amp_generator_make(123), s2 = amp_generator_make(123), s3 = amp_generator_make(124);
    amp_gpt_generate_opts o = AMP_GPT_GENERATE_DEFAULTS;
    o.max_new_tokens = 40; /* 43 tokens: the 16-token window is shifted several times */
    o.temperature = 0.8;
    o.top_k = 20;
    o.generator = &s1;
    assert_int_equal(amp_gpt_generate(m, prompt, 3, a, &n1, &o), AMP_OK);
    assert_int_equal(n1, 40);
    o.generator = &s2; /* the same seed: the same tokens */
    o.use_kv_cache = false; /* ... also without the cache */
    assert_int_equal(amp_gpt_generate(m, prompt, 3, b, &n2, &o), AMP_OK);
    assert_int_equal(n2, 40);
    assert_memory_equal(a, b, sizeof a);
    o.generator = &s3;
    o.use_kv_cache = true;
    assert_int_equal(amp_gpt_generate(m, prompt, 3, b, &n2, &o), AMP_OK);
    assert_true(memcmp(a, b, sizeof a) != 0);
    for (int i = 0; i < 40; i++) assert_true(a[i] >= 0 && a[i] < c.vocab_size);
    /* greedy: cached == uncached */
    o.temperature = 0;
    assert_int_equal(amp_gpt_generate(m, prompt, 3, a, &n1, &o), AMP_OK);
    o.use_kv_cache = false;
    assert_int_equal(amp_gpt_generate(m, prompt, 3, b, &n2, &o), AMP_OK);
    assert_memory_equal(a, b, sizeof a);
    /* stop token; a prompt longer than the block; errors */
    o.use_kv_cache = true;
    o.stop_token = a[4];
    assert_int_equal(amp_gpt_generate(m, prompt, 3, b, &n2, &o), AMP_OK);
    assert_true(n2 <= 5 && b[n2 - 1] == a[4]);
    int64_t longp[20];
    for (int i = 0; i < 20; i++) longp[i] = i % c.vocab_size;
    o.stop_token = -1;
    o.max_new_tokens = 3;
    assert_int_equal(amp_gpt_generate(m, longp, 20, b, &n2, &o), AMP_OK);
    assert_int_equal(n2, 3);
    longp[4] = c.vocab_size;
    assert_int_not_equal(amp_gpt_generate(m, longp, 20, b, &n2, &o), AMP_OK);
    assert_non_null(strstr(amp_last_error(), "vocabulary"));
    o.temperature = -1;
    assert_int_not_equal(amp_gpt_generate(m, prompt, 3, b, &n2, &o), AMP_OK);
    amp_module_free(m);
}

/* ---- weight decay under O2's two optimizers ---------------------------------------------------- */
static void t_weight_decay_o2(void **state) {
    (void)state;
    amp_gpt_config c = small_cfg(0.0);
    amp_module *m = amp_gpt_new(&c, NULL);
    assert_int_equal(amp_module_to(m, AMP_BF16, true), AMP_OK);
    amp_tensor *ps[64], *half[64], *f32[64];
    const char *names[64];
    int np = amp_module_parameters(m, ps, names, 64), nh = 0, nf = 0;
    for (int i = 0; i < np; i++) {
        if (amp_tensor_dtype(ps[i]) == AMP_F32) f32[nf++] = ps[i];
        else half[nh++] = ps[i];
    }
    assert_int_equal(nf, 2 * 2 * 2 + 2); /* the LayerNorms stay f32 */
    amp_optim_opts oo = amp_adamw_opts(1e-3);
    oo.master_weights = true;
    amp_optim *opts[2];
    opts[0] = amp_optim_new(half, nh, &oo);
    oo.master_weights = false;
    opts[1] = amp_optim_new(f32, nf, &oo);
    assert_int_equal(amp_gpt_apply_weight_decay(m, opts, 2, 0.1, false), AMP_OK);
    for (int i = 0; i < nh; i++) {
        const char *nm = NULL;
        for (int j = 0; j < np; j++)
            if (ps[j] == half[i]) nm = names[j];
        bool dec = strstr(nm, "c_attn.weight") || strstr(nm, "c_proj.weight") || strstr(nm, "c_fc.weight");
        assert_true(amp_optim_param_weight_decay(opts[0], i) == (dec ? 0.1 : 0.0));
    }
    for (int i = 0; i < nf; i++) assert_true(amp_optim_param_weight_decay(opts[1], i) == 0.0);
    /* a parameter of another model is refused */
    amp_module *other = amp_gpt_new(&c, NULL);
    assert_int_not_equal(amp_gpt_apply_weight_decay(other, opts, 2, 0.1, false), AMP_OK);
    assert_int_not_equal(amp_optim_set_param_weight_decay(opts[0], 0, -1.0), AMP_OK);
    assert_int_not_equal(amp_optim_set_param_weight_decay(opts[0], nh, 0.1), AMP_OK);
    amp_optim_free(opts[0]);
    amp_optim_free(opts[1]);
    amp_module_free(other);
    amp_module_free(m);
}

/* A half embedding table's gradient (O2's tied wte) is made in its dtype:
 * each row summed in f32 over its occurrences and rounded once, the bits of
 * an f32 scatter-add rounded; accumulated into a half .grad (the LM head's
 * use first) tile by tile, the bits of f32 addition rounded. */
static void t_embedding_half_grad(void **state) {
    (void)state;
    amp_generator g = amp_generator_make(8);
    for (int d = 0; d < 2; d++) {
        amp_dtype dt = d ? AMP_F16 : AMP_BF16;
        amp_tensor *w32 = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(50, 24), &g);
        amp_tensor *w = amp_to(w32, dt);
        amp_tensor_set_requires_grad(w, true);
        int64_t iv[40];
        for (int i = 0; i < 40; i++) iv[i] = (i * 7) % 13; /* repeated rows */
        amp_tensor *idx = amp_tensor_from_data(iv, AMP_I64, 2, AMP_SHAPE(4, 10));
        amp_tensor *up = amp_tensor_randn(AMP_F32, 3, AMP_SHAPE(4, 10, 24), &g);
        float xs[6 * 24]; /* small integers: the head's gradient is exact in any summation order */
        for (int i = 0; i < 6 * 24; i++) xs[i] = (float)((i * 5) % 9 - 4);
        amp_tensor *x = amp_tensor_from_data(xs, AMP_F32, 2, AMP_SHAPE(6, 24));
        amp_scope *s = amp_scope_begin();
        /* loss = sum(emb(idx) * up) + sum(x w^T * 1): the head's use, then the embedding's */
        amp_tensor *l1 = amp_sum(amp_mul(amp_to(amp_embedding(w, idx), AMP_F32), up), NULL, 0, false);
        amp_tensor *l2 = amp_sum(amp_to(amp_linear(amp_to(x, dt), w, NULL), AMP_F32), NULL, 0, false);
        assert_int_equal(amp_backward(amp_add(l2, l1)), AMP_OK);
        amp_scope_end(s);
        /* reference: f32 scatter-add rounded; the head's gradient (sum over x rows) rounded; their sum rounded */
        amp_scope *s2 = amp_scope_begin();
        amp_tensor *uph = amp_to(up, dt); /* the embedding's output is half: its upstream gradient arrives rounded */
        double *pu = tc_values(uph);
        float emb[50 * 24] = {0}, head[50 * 24];
        for (int i = 0; i < 40; i++)
            for (int k = 0; k < 24; k++) emb[iv[i] * 24 + k] += (float)pu[i * 24 + k];
        free(pu);
        amp_tensor *xh = amp_to(x, dt);
        double *xv = tc_values(xh);
        for (int r = 0; r < 50; r++) /* d(sum(x w^T))/dw[r] = sum over the rows of x (f32 sum of half values) */
            for (int k = 0; k < 24; k++) {
                float sacc = 0;
                for (int i = 0; i < 6; i++) sacc += (float)xv[i * 24 + k];
                head[r * 24 + k] = sacc;
            }
        amp_tensor *eh = amp_to(amp_tensor_from_data(emb, AMP_F32, 2, AMP_SHAPE(50, 24)), dt);
        amp_tensor *hh = amp_to(amp_tensor_from_data(head, AMP_F32, 2, AMP_SHAPE(50, 24)), dt);
        amp_tensor *want = amp_to(amp_add(amp_to(hh, AMP_F32), amp_to(eh, AMP_F32)), dt);
        amp_tensor *got = amp_tensor_grad(w);
        assert_int_equal(amp_tensor_dtype(got), dt);
        double *gv = tc_values(got), *wv = tc_values(want), worst = 0;
        for (int i = 0; i < 50 * 24; i++) worst = fmax(worst, fabs(gv[i] - wv[i]));
        printf("%s tied table: gradient within %.3g of the rounded f32 reference\n", amp_dtype_name(dt), worst);
        assert_true(worst == 0);
        test_free_all(gv, wv, xv);
        amp_scope_end(s2);
        test_free_tensors(w32, w, idx, up, x);
    }
}

/* A LayerNorm kept in f32 (O2) takes a half input as it is
 * (AMP_MODULE_HALF_IO): the output, the input's gradient and the f32
 * weight and bias gradients have the bits of the f32 route (cast in,
 * layer_norm in f32, cast out), and what backward keeps is the half input,
 * not an f32 copy. */
static void t_layernorm_half_io(void **state) {
    (void)state;
    amp_generator g = amp_generator_make(12);
    for (int d = 0; d < 2; d++) {
        amp_dtype dt = d ? AMP_F16 : AMP_BF16;
        amp_module *ln = amp_nn_layernorm(96, 1e-5);
        assert_int_equal(amp_module_to(ln, dt, true), AMP_OK);
        assert_true(amp_module_is_kept_f32(ln));
        amp_tensor *w = amp_module_get_parameter(ln, "weight"), *b = amp_module_get_parameter(ln, "bias");
        assert_int_equal(amp_tensor_dtype(w), AMP_F32);
        amp_tensor_uniform_(w, 0.5, 1.5, &g);
        amp_tensor_uniform_(b, -0.5, 0.5, &g);
        amp_tensor *x32 = amp_tensor_randn(AMP_F32, 3, AMP_SHAPE(4, 33, 96), &g), *x = amp_to(x32, dt);
        amp_tensor *u32 = amp_tensor_randn(AMP_F32, 3, AMP_SHAPE(4, 33, 96), &g), *up = amp_to(u32, dt);
        amp_tensor_free(u32);
        amp_tensor_set_requires_grad(x, true);
        amp_tensor *y[2], *gx[2], *gw[2], *gb[2];
        size_t act[2];
        for (int k = 0; k < 2; k++) {
            amp_memory_reset_peak();
            size_t base = amp_memory_stats().live[AMP_MEM_ACTIVATION];
            amp_scope *s = amp_scope_begin();
            amp_tensor *out = k ? amp_to(amp_layer_norm(amp_to(x, AMP_F32), 1, w, b, 1e-5), dt) : amp_module_forward(ln, x);
            assert_non_null(out);
            assert_int_equal(amp_tensor_dtype(out), dt);
            act[k] = amp_memory_stats().live[AMP_MEM_ACTIVATION] - base;
            y[k] = amp_tensor_keep(amp_clone(out));
            assert_int_equal(amp_backward(amp_sum(amp_to(amp_mul(out, up), AMP_F32), NULL, 0, false)), AMP_OK);
            amp_scope_end(s);
            gx[k] = amp_clone(amp_tensor_grad(x));
            gw[k] = amp_clone(amp_tensor_grad(w));
            gb[k] = amp_clone(amp_tensor_grad(b));
            amp_tensor_set_grad(x, NULL);
            amp_tensor_set_grad(w, NULL);
            amp_tensor_set_grad(b, NULL);
        }
        assert_memory_equal(amp_tensor_data(y[0]), amp_tensor_data(y[1]), amp_tensor_nbytes(y[0]));
        assert_memory_equal(amp_tensor_data(gx[0]), amp_tensor_data(gx[1]), amp_tensor_nbytes(gx[0]));
        assert_memory_equal(amp_tensor_data(gw[0]), amp_tensor_data(gw[1]), amp_tensor_nbytes(gw[0]));
        assert_memory_equal(amp_tensor_data(gb[0]), amp_tensor_data(gb[1]), amp_tensor_nbytes(gb[0]));
        printf("%s LayerNorm kept f32: the f32 route's bits; activations after forward %zu bytes (f32 route %zu)\n",
               amp_dtype_name(dt), act[0], act[1]);
        assert_true(act[0] < act[1]);
        for (int k = 0; k < 2; k++) {
            test_free_tensors(y[k], gx[k], gw[k], gb[k]);
        }
        test_free_tensors(x32, x, up);
        amp_module_free(ln);
    }
}

static void t_errors(void **state) {
    (void)state;
    amp_gpt_config c = small_cfg(0.0);
    c.n_head = 5; /* 32 % 5 */
    assert_null(amp_gpt_new(&c, NULL));
    assert_non_null(strstr(amp_last_error(), "multiple of n_head"));
    c = small_cfg(1.0);
    assert_null(amp_gpt_new(&c, NULL));
    assert_null(amp_gpt_new(NULL, NULL));
    c = small_cfg(0.0);
    c.n_layer = 0;
    assert_null(amp_gpt_new(&c, NULL));
    c = small_cfg(0.0);
    amp_module *m = amp_gpt_new(&c, NULL);
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = test_tokens(1, 17, c.vocab_size, 1); /* longer than the block */
    assert_null(amp_module_forward(m, x));
    assert_non_null(strstr(amp_last_error(), "block_size"));
    amp_tensor *bad = amp_tensor_full(AMP_I64, 2, AMP_SHAPE(1, 4), (double)c.vocab_size);
    assert_null(amp_module_forward(m, bad));
    assert_non_null(strstr(amp_last_error(), "out of range"));
    amp_tensor *f = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(1, 4));
    assert_null(amp_module_forward(m, f));
    assert_null(amp_gpt_loss(m, amp_slice(x, 1, 0, 4, 1), amp_slice(x, 1, 0, 5, 1), NULL));
    amp_scope_end(s);
    amp_module *lin = amp_nn_linear(2, 2, true, NULL);
    assert_int_not_equal(amp_gpt_set_activation_checkpointing(lin, true), AMP_OK);
    assert_non_null(strstr(amp_last_error(), "not a GPT"));
    assert_null(amp_gpt_cache_new(lin, 1));
    assert_null(amp_gpt_cache_new(m, 0));
    amp_module_free(lin);
    amp_module_free(m);
}

AMP_TEST_MAIN(t_structure, t_init, t_checkpoint_bitwise, t_checkpoint_generic, t_kv_cache, t_generate,
              t_weight_decay_o2, t_embedding_half_grad, t_layernorm_half_io, t_errors)

/* GPT-2 in a load dtype and from a Hugging Face directory (amp/gpt.h:
 * amp_gpt_set_load_dtype, amp_gpt_load_ex, amp_gpt_from_pretrained):
 *   - a tiny random GPT-2 in HF layout (tests/data/gpt2_hf_tiny, written with
 *     its logits by tools/ref_gpt2_hf.py, an independent torch forward) gives
 *     the reference's f32 logits within 1e-5 of the largest; the same weights
 *     sharded with "transformer." names give the same bits; its config's
 *     layer_norm_epsilon (1e-4) is honoured;
 *   - loaded in bf16 / f16 it stays within the reference's own bf16 / f16
 *     error (the same rounding in torch);
 *   - a bf16-loaded model under bf16 compute casts no weight at any token
 *     (autocast's cast counter; an f32 model under the same region casts
 *     every matrix at every token, which is what a bf16 load removes), and
 *     its parameters are half the bytes;
 *   - f16: a weight beyond 65504 is named, with its element, at load;
 *   - q8_0 / q4_0 / q4_1: the block matrices and the tied wte/head quantized
 *     (their float parameters freed), logits close to f32, the KV-cache
 *     decode equal to the full forward, refusals (n_embd not a multiple of
 *     32, a second conversion);
 *   - a config that is not GPT-2's, or asks for what amp's GPT does not
 *     compute, is refused naming the key;
 *   - `amp generate --load-dtype` and its tokens/s line; `amp generate
 *     --model DIR` on a GPT-2 directory (the library's greedy tokens).
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path (the
 * quantized and bf16 kernels of each path). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "test_support.h"

#define TINY AMP_TEST_DATA_DIR "/gpt2_hf_tiny"
#define SHARDED AMP_TEST_DATA_DIR "/gpt2_hf_tiny_sharded"

static const amp_load_dtype LD_F32 = {AMP_LOAD_FLOAT, AMP_F32, AMP_Q8_0};
static const amp_load_dtype LD_BF16 = {AMP_LOAD_FLOAT, AMP_BF16, AMP_Q8_0};
static const amp_load_dtype LD_F16 = {AMP_LOAD_FLOAT, AMP_F16, AMP_Q8_0};

/* t's values as f64 (caller frees) */
static double *values(amp_tensor *t) {
    assert_non_null(t);
    int64_t n = amp_tensor_numel(t);
    double *v = malloc(sizeof(double) * (size_t)n);
    assert_int_equal(amp_tensor_copy_out(t, v, AMP_F64), AMP_OK);
    return v;
}

/* max |a - b| / max |b| */
static double rel_diff(amp_tensor *a, amp_tensor *b) {
    assert_int_equal(amp_tensor_numel(a), amp_tensor_numel(b));
    double *x = values(a), *y = values(b), d = 0, m = 0;
    for (int64_t i = 0; i < amp_tensor_numel(a); i++) {
        d = fmax(d, fabs(x[i] - y[i]));
        m = fmax(m, fabs(y[i]));
    }
    free(x);
    free(y);
    return d / m;
}

static amp_module *from_dir(const char *dir, amp_load_dtype ld) {
    amp_module *m = amp_gpt_from_pretrained(dir, ld);
    if (!m) fail_msg("amp_gpt_from_pretrained(%s, %s): %s", dir, amp_load_dtype_name(ld), amp_last_error());
    return m;
}

static amp_tensor *logits_of(amp_module *m, amp_tensor *x) {
    amp_no_grad_begin();
    amp_tensor *y = amp_module_forward(m, x);
    amp_no_grad_end();
    if (!y) fail_msg("forward: %s", amp_last_error());
    return y;
}

static void t_hf_f32_golden(void **state) {
    (void)state;
    golden_file *g = golden_open("gpt2_hf_golden.bin");
    amp_tensor *x = golden_tensor(g, "x"), *ref = golden_tensor(g, "logits");
    amp_module *m = from_dir(TINY, AMP_LOAD_DTYPE_KEEP), *s = from_dir(SHARDED, AMP_LOAD_DTYPE_KEEP);
    amp_gpt_config c;
    assert_int_equal(amp_gpt_get_config(m, &c), AMP_OK);
    assert_true(c.n_layer == 2 && c.n_head == 4 && c.n_embd == 32 && c.block_size == 32 && c.vocab_size == 256 && c.bias);
    amp_load_dtype ld;
    assert_int_equal(amp_gpt_get_load_dtype(m, &ld), AMP_OK);
    assert_true(ld.kind == AMP_LOAD_FLOAT && ld.dtype == AMP_F32);
    amp_tensor *y = logits_of(m, x), *ys = logits_of(s, x);
    double d = rel_diff(y, ref);
    printf("f32 logits vs the torch reference: %.2e of the largest\n", d);
    assert_true(d <= 1e-5);
    assert_true(rel_diff(ys, y) == 0); /* sharded, "transformer." names: the same weights, the same bits */
    /* the config's layer_norm_epsilon (1e-4) is what makes it agree: GPT-2's 1e-5 would not */
    amp_module *e5 = amp_gpt_new(&c, NULL);
    assert_int_equal(amp_gpt_load(e5, TINY "/model.safetensors"), AMP_OK);
    amp_tensor *y5 = logits_of(e5, x);
    assert_true(rel_diff(y5, ref) > 1e-4);
    amp_tensor_free(y5);
    amp_module_free(e5);
    test_free_tensors(x, ref, y, ys);
    amp_module_free(m);
    amp_module_free(s);
    golden_close(g);
}

/* loaded in dt (the compute follows the weights: no autocast, as torch's
 * model.to(dtype)), and under an autocast region of dt as amp generate runs it */
static void half_case(golden_file *g, amp_load_dtype ld, const char *rec) {
    amp_tensor *x = golden_tensor(g, "x"), *ref = golden_tensor(g, "logits"), *rh = golden_tensor(g, rec);
    amp_module *m = from_dir(TINY, ld);
    amp_tensor *ps[64];
    const char *names[64];
    int np = amp_module_parameters(m, ps, names, 64);
    for (int i = 0; i < np; i++) /* LayerNorms f32, every other parameter in the load dtype */
        if (amp_tensor_dtype(ps[i]) != (strstr(names[i], ".ln_") ? AMP_F32 : ld.dtype))
            fail_msg("%s is %s in a %s load", names[i], amp_dtype_name(amp_tensor_dtype(ps[i])), amp_load_dtype_name(ld));
    amp_tensor *y = logits_of(m, x);
    assert_int_equal(amp_autocast_enter(ld.dtype), AMP_OK);
    amp_tensor *ya = logits_of(m, x);
    amp_autocast_exit();
    double bound = rel_diff(rh, ref), d = rel_diff(y, ref), da = rel_diff(ya, ref);
    printf("%s load: logits vs f32 reference %.2e (under autocast %.2e); torch's %s rounding gives %.2e\n", amp_load_dtype_name(ld), d,
           da, amp_load_dtype_name(ld), bound);
    /* amp keeps the residual stream in the half type (torch's autocast
     * adds in f32): within 1.5x the reference's own error */
    assert_true(d <= 1.5 * bound && da <= 1.5 * bound);
    test_free_tensors(x, ref, rh, y, ya);
    amp_module_free(m);
}

static void t_hf_half_golden(void **state) {
    (void)state;
    golden_file *g = golden_open("gpt2_hf_golden.bin");
    half_case(g, LD_BF16, "bf16.logits");
    half_case(g, LD_F16, "f16.logits");
    golden_close(g);
}

static amp_module *small_model(int64_t n_embd, uint64_t seed) {
    amp_gpt_config c = {2, 4, n_embd, 16, 64, 0.0, true};
    amp_generator g = amp_generator_make(seed);
    amp_module *m = amp_gpt_new(&c, &g);
    assert_non_null(m);
    return m;
}

static size_t param_bytes(void) { return amp_memory_stats().live[AMP_MEM_PARAM]; }

/* The casts autocast makes in token-by-token decoding of model m (io:
 * autocast bf16), per token after the first; *step_allocs the allocations
 * of the last token's forward */
static uint64_t casts_per_token(amp_module *m, int tokens) {
    amp_module_io io = {AMP_DTYPE_COUNT, true, AMP_BF16, AMP_DTYPE_COUNT};
    assert_int_equal(amp_module_set_io(m, &io), AMP_OK);
    amp_gpt_cache *c = amp_gpt_cache_new(m, 1);
    uint64_t casts = 0;
    for (int t = 0; t < tokens; t++) {
        int64_t id = (t * 7 + 3) % 64;
        amp_tensor *x = amp_tensor_from_data(&id, AMP_I64, 2, AMP_SHAPE(1, 1));
        uint64_t before = amp_autocast_cast_count();
        amp_tensor *y = amp_gpt_forward_cached(m, x, c);
        if (!y) fail_msg("forward_cached: %s", amp_last_error());
        if (t > 0) casts += amp_autocast_cast_count() - before;
        test_free_tensors(x, y);
    }
    amp_gpt_cache_free(c);
    amp_module_set_io(m, NULL);
    return casts / (uint64_t)(tokens - 1);
}

static void t_bf16_load_no_casts(void **state) {
    (void)state;
    amp_module *f = small_model(64, 1), *b = small_model(64, 1);
    size_t p0 = param_bytes();
    assert_int_equal(amp_gpt_set_load_dtype(b, LD_BF16), AMP_OK);
    size_t p1 = param_bytes();
    amp_load_dtype ld;
    assert_int_equal(amp_gpt_get_load_dtype(b, &ld), AMP_OK);
    assert_true(ld.kind == AMP_LOAD_FLOAT && ld.dtype == AMP_BF16);
    int64_t n = amp_module_num_params(b), norms = 5 * 2 * 64; /* 2 blocks x 2 LayerNorms + ln_f, weight and bias */
    assert_int_equal(p0 - p1, (size_t)(n - norms) * 2); /* every weight but the norms: 4 -> 2 bytes */
    uint64_t cf = casts_per_token(f, 6), cb = casts_per_token(b, 6);
    printf("autocast casts per decoded token under bf16 compute: f32 load %llu, bf16 load %llu\n", (unsigned long long)cf,
           (unsigned long long)cb);
    assert_true(cf >= 2 * 4 + 1); /* at least each block's matrices and the head, at every token */
    assert_int_equal(cb, 0);
    amp_module_free(f);
    amp_module_free(b);
}

static void t_f16_overflow_named(void **state) {
    (void)state;
    amp_module *m = small_model(32, 2);
    float *w = amp_tensor_data(amp_module_get_parameter(m, "transformer.h.1.mlp.c_fc.weight"));
    w[37] = 7e4f;
    assert_int_equal(amp_gpt_set_load_dtype(m, LD_F16), AMP_ERR_RANGE);
    const char *e = amp_last_error();
    if (!strstr(e, "amp_gpt_set_load_dtype") || !strstr(e, "transformer.h.1.mlp.c_fc.weight") || !strstr(e, "element 37") ||
        !strstr(e, "70000") || !strstr(e, "65504") || !strstr(e, "bf16"))
        fail_msg("the weight beyond f16's range is not named with its element and the way out: %s", e);
    amp_load_dtype ld; /* nothing changed */
    assert_int_equal(amp_gpt_get_load_dtype(m, &ld), AMP_OK);
    assert_int_equal(ld.dtype, AMP_F32);
    assert_int_equal(amp_tensor_dtype(amp_module_get_parameter(m, "transformer.wte.weight")), AMP_F32);
    w[37] = 1.0f; /* within range: converts */
    assert_int_equal(amp_gpt_set_load_dtype(m, LD_F16), AMP_OK);
    assert_int_equal(amp_tensor_dtype(amp_module_get_parameter(m, "transformer.h.1.mlp.c_fc.weight")), AMP_F16);
    amp_module_free(m);
}

/* A quantized load: logits near f32's (this tiny random model's logits are
 * small, max 0.44, so q4's noise is large against them: top-1 agreement
 * 17-19 of 24 for q4, 23 for q8_0), and near the f32 model holding the
 * dequantized matrices; the decode through the KV cache the full
 * forward's; the float matrices freed. */
static void quant_case(golden_file *g, amp_qtype qt, double tol) {
    amp_load_dtype ld = {AMP_LOAD_QUANT, AMP_F32, qt};
    amp_tensor *x = golden_tensor(g, "x"), *ref = golden_tensor(g, "logits");
    size_t p0 = param_bytes();
    amp_module *m = from_dir(TINY, ld);
    size_t pq = param_bytes() - p0;
    amp_module *f = from_dir(TINY, LD_F32);
    size_t pf = param_bytes() - p0 - pq;
    amp_load_dtype got;
    assert_int_equal(amp_gpt_get_load_dtype(m, &got), AMP_OK);
    assert_true(got.kind == AMP_LOAD_QUANT && got.qtype == qt);
    assert_int_equal(amp_tensor_numel(amp_module_get_parameter(m, "transformer.wte.weight")), 0);
    assert_int_equal(amp_tensor_numel(amp_module_get_parameter(m, "transformer.h.1.attn.c_attn.weight")), 0);
    assert_int_equal(amp_tensor_dtype(amp_module_get_parameter(m, "transformer.h.1.attn.c_attn.bias")), AMP_F32);
    /* what stays float: wpe 32x32, 2 x (biases 96+32+128+32, norms 4 x 32), ln_f 2 x 32: 1920 f32 */
    assert_int_equal(pq, (size_t)1920 * 4);
    assert_true(pf > 8 * pq);
    amp_tensor *y = logits_of(m, x);
    double d = rel_diff(y, ref);
    /* top-1 agreement with the f32 reference over the 24 positions */
    double *a = values(y), *b = values(ref);
    int agree = 0;
    for (int p = 0; p < 24; p++) {
        int ia = 0, ib = 0;
        for (int v = 1; v < 256; v++) {
            if (a[p * 256 + v] > a[p * 256 + ia]) ia = v;
            if (b[p * 256 + v] > b[p * 256 + ib]) ib = v;
        }
        agree += ia == ib;
    }
    /* the f32 model with each quantized matrix replaced by its dequantized
     * values: what is left is the activations' 8-bit blocks */
    static const char *const mats[] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
    for (int k = 0; k < 9; k++) {
        char nm[96];
        if (k < 8) snprintf(nm, sizeof nm, "transformer.h.%d.%s.weight", k / 4, mats[k % 4]);
        else snprintf(nm, sizeof nm, "transformer.wte.weight");
        amp_tensor *w = amp_module_get_parameter(f, nm);
        amp_qtensor *q = amp_quantize(w, qt);
        amp_tensor *dq = amp_dequantize(q, AMP_F32);
        assert_int_equal(amp_tensor_copy_(w, dq), AMP_OK);
        amp_tensor_free(dq);
        amp_qtensor_free(q);
    }
    amp_tensor *ydq = logits_of(f, x);
    double dw = rel_diff(ydq, ref), da = rel_diff(y, ydq);
    printf("%s: logits vs f32 reference %.2e of the largest (the dequantized weights in f32: %.2e; the quantized model vs those "
           "%.2e), top-1 agreement %d/24\n",
           amp_qtype_name(qt), d, dw, da, agree);
    assert_true(d <= tol);
    assert_true(da <= 3e-2); /* measured 1.6e-2 to 2.0e-2 (a wrong matrix, bias or transpose: O(1)) */
    amp_tensor_free(ydq);
    /* token by token through the KV cache = the full forward */
    amp_gpt_cache *c = amp_gpt_cache_new(m, 2);
    amp_no_grad_begin();
    for (int64_t t = 0; t < 12; t++) {
        amp_scope *sc = amp_scope_begin();
        amp_tensor *xt = amp_contiguous(amp_slice(x, 1, t, t + 1, 1));
        amp_tensor *yt = amp_gpt_forward_cached(m, xt, c), *yf = amp_slice(y, 1, t, t + 1, 1);
        if (!yt) fail_msg("forward_cached: %s", amp_last_error());
        double dd = rel_diff(yt, yf);
        if (dd > 1e-5) fail_msg("%s: position %lld through the KV cache differs from the full forward by %.2e", amp_qtype_name(qt),
                                (long long)t, dd);
        amp_scope_end(sc);
    }
    amp_no_grad_end();
    amp_gpt_cache_free(c);
    free(a);
    free(b);
    test_free_tensors(x, ref, y);
    amp_module_free(m);
    amp_module_free(f);
}

static void t_quantized(void **state) {
    (void)state;
    golden_file *g = golden_open("gpt2_hf_golden.bin");
    quant_case(g, AMP_Q8_0, 3e-2);
    quant_case(g, AMP_Q4_0, 4e-1);
    quant_case(g, AMP_Q4_1, 4e-1);
    golden_close(g);
}

static void expect_error(amp_status got, amp_status want, const char *const *words, int n) {
    if (got != want) fail_msg("status %d, expected %d: %s", got, want, amp_last_error());
    for (int i = 0; i < n; i++)
        if (!strstr(amp_last_error(), words[i])) fail_msg("the error does not say '%s': %s", words[i], amp_last_error());
}

static void t_quant_refusals(void **state) {
    (void)state;
    amp_module *m = small_model(48, 3); /* 48 is not a multiple of 32 */
    expect_error(amp_gpt_set_load_dtype(m, (amp_load_dtype){AMP_LOAD_QUANT, AMP_F32, AMP_Q4_1}), AMP_ERR_SHAPE,
                 (const char *[]){"amp_gpt_set_load_dtype", "q4_1", "n_embd 48", "32"}, 4);
    expect_error(amp_gpt_set_load_dtype(m, (amp_load_dtype){AMP_LOAD_QUANT, AMP_F32, AMP_Q6_K}), AMP_ERR_UNSUPPORTED,
                 (const char *[]){"q6_k", "q8_0, q4_0 or q4_1"}, 2);
    expect_error(amp_gpt_set_load_dtype(m, (amp_load_dtype){AMP_LOAD_FLOAT, AMP_F64, AMP_Q8_0}), AMP_ERR_DTYPE,
                 (const char *[]){"f64", "f32, f16 or bf16"}, 2);
    expect_error(amp_gpt_set_load_dtype(m, (amp_load_dtype){(amp_load_kind)7, AMP_F32, AMP_Q8_0}), AMP_ERR_ARG,
                 (const char *[]){"kind 7"}, 1);
    amp_module_free(m);
    m = small_model(32, 3);
    assert_int_equal(amp_gpt_set_load_dtype(m, (amp_load_dtype){AMP_LOAD_QUANT, AMP_F32, AMP_Q8_0}), AMP_OK);
    assert_int_equal(amp_gpt_set_load_dtype(m, (amp_load_dtype){AMP_LOAD_QUANT, AMP_F32, AMP_Q8_0}), AMP_OK); /* already */
    expect_error(amp_gpt_set_load_dtype(m, LD_BF16), AMP_ERR_STATE, (const char *[]){"quantized (q8_0)", "one-way"}, 2);
    expect_error(amp_gpt_load(m, TINY "/model.safetensors"), AMP_ERR_STATE, (const char *[]){"amp_gpt_load", "quantized"}, 2);
    /* a state_dict saved from it holds the placeholders: refused by shape */
    const char *qf = test_tmp_path("quantized.safetensors");
    assert_int_equal(amp_model_save(m, qf, NULL, 0), AMP_OK);
    amp_module *f = small_model(32, 4);
    expect_error(amp_gpt_load(f, qf), AMP_ERR_SHAPE, (const char *[]){"transformer.wte.weight has shape [0]"}, 1);
    amp_module_free(f);
    /* generation runs on it */
    int64_t prompt[3] = {1, 2, 3}, out[5], n = 0;
    amp_gpt_generate_opts o = AMP_GPT_GENERATE_DEFAULTS;
    o.max_new_tokens = 5;
    o.temperature = 0;
    assert_int_equal(amp_gpt_generate(m, prompt, 3, out, &n, &o), AMP_OK);
    assert_int_equal(n, 5);
    amp_module_free(m);
}

/* A copy of the tiny directory whose config.json has key set to value (a JSON text) */
static const char *dir_with(const char *name, const char *key, const char *value) {
    static char dir[1200];
    snprintf(dir, sizeof dir, "%s/%s", test_tmpdir, name);
    char cmd[4000];
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && cp '%s/model.safetensors' '%s/' && sed 's/\"%s\": [^,]*,/\"%s\": %s,/' '%s/config.json' > '%s/config.json'",
             dir, TINY, dir, key, key, value, TINY, dir);
    assert_int_equal(system(cmd), 0);
    return dir;
}

static void t_hf_config_refused(void **state) {
    (void)state;
    static const struct {
        const char *key, *value;
        amp_status st;
        const char *says;
    } cases[] = {
        {"model_type", "\"llama\"", AMP_ERR_FORMAT, "model_type \"llama\" is not \"gpt2\""},
        {"activation_function", "\"relu\"", AMP_ERR_UNSUPPORTED, "activation_function \"relu\""},
        {"n_inner", "64", AMP_ERR_UNSUPPORTED, "n_inner 64"},
        {"scale_attn_weights", "false", AMP_ERR_UNSUPPORTED, "scale_attn_weights false"},
        {"n_layer", "3", AMP_ERR_FORMAT, "no tensor h.2.ln_1.weight"}, /* before the model is allocated */
        {"n_embd", "\"32\"", AMP_ERR_ARG, "n_embd"},
        {"layer_norm_epsilon", "-1", AMP_ERR_RANGE, "layer_norm_epsilon -1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "cfg%zu", i);
        const char *dir = dir_with(name, cases[i].key, cases[i].value);
        amp_module *m = amp_gpt_from_pretrained(dir, AMP_LOAD_DTYPE_KEEP);
        if (m) fail_msg("config %s = %s was accepted", cases[i].key, cases[i].value);
        const char *e = amp_last_error();
        if (!strstr(e, "amp_gpt_from_pretrained") || !strstr(e, cases[i].says))
            fail_msg("config %s = %s: the error does not say '%s': %s", cases[i].key, cases[i].value, cases[i].says, e);
    }
    assert_null(amp_gpt_from_pretrained(test_tmpdir, AMP_LOAD_DTYPE_KEEP)); /* no config.json */
    assert_non_null(strstr(amp_last_error(), "amp_gpt_from_pretrained"));
    assert_null(amp_gpt_from_pretrained(TINY, (amp_load_dtype){AMP_LOAD_QUANT, AMP_F32, AMP_Q4_K}));
    assert_non_null(strstr(amp_last_error(), "q4_k"));
}

/* amp generate --load-dtype: the line says the load dtype and the compute precision */
static void t_cli_load_dtype(void **state) {
    (void)state;
    char *err;
    const char *gen = "generate --checkpoint " TINY "/model.safetensors --n-head 4 --tokens 6 --temperature 0 --stats";
    char *o32 = test_run_cli_expect(0, &err, "%s", gen);
    if (!strstr(err, "load f32, compute fp32")) fail_msg("%s", err);
    free(err);
    char *o = test_run_cli_expect(0, &err, "%s --load-dtype bf16 --precision bf16", gen);
    if (!strstr(err, "load bf16, compute bf16")) fail_msg("%s", err);
    test_free_all(o, err);
    o = test_run_cli_expect(0, &err, "%s --precision bf16", gen); /* a half precision alone loads in it too */
    if (!strstr(err, "load bf16, compute bf16")) fail_msg("%s", err);
    test_free_all(o, err);
    o = test_run_cli_expect(0, &err, "%s --load-dtype f32 --precision bf16", gen);
    if (!strstr(err, "load f32, compute bf16")) fail_msg("%s", err);
    test_free_all(o, err);
    o = test_run_cli_expect(0, &err, "%s --load-dtype bf16", gen);
    if (!strstr(err, "load bf16, compute bf16")) fail_msg("%s", err);
    test_free_all(o, err);
    o = test_run_cli_expect(0, &err, "%s --load-dtype q8_0", gen);
    if (!strstr(err, "load q8_0, compute fp32")) fail_msg("%s", err);
    test_free_all(o, err);
    o = test_run_cli_expect(2, &err, "%s --load-dtype q5_9", gen);
    if (!strstr(err, "--load-dtype 'q5_9'")) fail_msg("%s", err);
    test_free_all(o, err, o32);
}

/* amp generate --model DIR (or --checkpoint DIR) on a Hugging Face GPT-2 directory */
static void t_cli_hf_dir(void **state) {
    (void)state;
    char *err;
    const char *gen = "generate --tokens 8 --temperature 0 --prompt ab --stats";
    char *a = test_run_cli_expect(0, &err, "%s --model %s", gen, TINY);
    if (!strstr(err, "load f32, compute fp32") || !strstr(err, "model 2L/4H/32 block 32 vocab 256") || !strstr(err, "byte tokenizer"))
        fail_msg("%s", err);
    free(err);
    char *b = test_run_cli_expect(0, NULL, "%s --checkpoint %s --no-kv-cache", gen, SHARDED);
    assert_string_equal(a, b); /* the sharded directory, without the cache: the same text */
    free(b);
    /* the library's greedy tokens on the same prompt */
    amp_module *m = from_dir(TINY, AMP_LOAD_DTYPE_KEEP);
    int64_t prompt[2] = {'a', 'b'}, out[8], n = 0;
    amp_gpt_generate_opts o = AMP_GPT_GENERATE_DEFAULTS;
    o.max_new_tokens = 8;
    o.temperature = 0;
    assert_int_equal(amp_gpt_generate(m, prompt, 2, out, &n, &o), AMP_OK);
    assert_int_equal(n, 8);
    char want[16] = "ab";
    for (int i = 0; i < 8; i++) want[2 + i] = (char)out[i];
    assert_memory_equal(a, want, 10);
    amp_module_free(m);
    free(a);
    b = test_run_cli_expect(0, &err, "%s --model %s --load-dtype q8_0 --precision bf16", gen, TINY);
    if (!strstr(err, "load q8_0, compute bf16")) fail_msg("%s", err);
    test_free_all(b, err);
    b = test_run_cli_expect(1, &err, "%s --model %s", gen, dir_with("llamacfg", "model_type", "\"llama\""));
    if (!strstr(err, "generate")) fail_msg("%s", err);
    test_free_all(b, err);
}

AMP_TEST_MAIN_FIXTURES(test_tmpdir_setup, test_tmpdir_teardown, t_hf_f32_golden, t_hf_half_golden, t_bf16_load_no_casts,
                       t_f16_overflow_named, t_quantized, t_quant_refusals, t_hf_config_refused, t_cli_load_dtype,
                       t_cli_hf_dir)

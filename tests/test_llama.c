/* The Llama decoder (amp/llama.h): against independent numpy float64
 * forwards (tools/ref_llama.py; golden data in tests/data/llama_*): a tiny
 * random Llama in Hugging Face's layout (rotate_half RoPE, grouped-query
 * attention, untied head) and the real SmolLM2-135M-Instruct GGUF file
 * (Q4_1 matrices, a Q8_0 tied embedding, dequantized: f32 logits within
 * 1e-4 relative; greedy continuation of "The capital of France is" names
 * Paris, in f32 and with the file's Q4_1 kept); the KV cache against the
 * full-prefix forward; generation (greedy, sampling, top-k / top-p, stop
 * tokens, the callback); load dtypes; refusals of bad GGUF metadata and
 * shapes, named. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_check.h"

static amp_tensor *golden(amp_safetensors *f, const char *name) {
    amp_tensor *t = amp_safetensors_get(f, name);
    if (!t) fail_msg("golden %s: %s", name, amp_last_error());
    return t;
}

static amp_safetensors *golden_file(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", AMP_TEST_DATA_DIR, name);
    amp_safetensors *f = amp_safetensors_read(path);
    if (!f) fail_msg("%s: %s (tools/ref_llama.py writes it)", path, amp_last_error());
    return f;
}

/* max |got - want| / max |want| over n values */
static double rel_err(const float *got, const float *want, int64_t n) {
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)got[i] - (double)want[i]));
        m = fmax(m, fabs((double)want[i]));
    }
    return d / m;
}

static float *values_f32(amp_tensor *t) {
    float *v = malloc(sizeof(float) * (size_t)amp_tensor_numel(t));
    assert_non_null(v);
    assert_int_equal(amp_tensor_copy_out(t, v, AMP_F32), AMP_OK);
    return v;
}

/* the tiny model tools/ref_llama.py writes (its config.json) */
static amp_llama_config tiny_cfg(void) {
    amp_llama_config c = {.n_layer = 2, .n_embd = 32, .n_ff = 48, .n_head = 4, .n_head_kv = 2, .vocab_size = 61,
                          .context_length = 64, .rope_theta = 10000.0, .rms_eps = 1e-6, .rope_layout = AMP_ROPE_HALVES,
                          .tied = false};
    return c;
}

/* The module tree has Hugging Face's names, so the state_dict of a
 * LlamaForCausalLM loads as it is; logits against the numpy reference. */
static void t_tiny_hf_golden(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/llama_tiny_hf", AMP_TEST_DATA_DIR);
    amp_module *m = amp_llama_from_pretrained(path, AMP_LOAD_DTYPE_KEEP);
    if (!m) fail_msg("%s", amp_last_error());
    amp_llama_config c, want_c = tiny_cfg();
    assert_int_equal(amp_llama_get_config(m, &c), AMP_OK);
    assert_true(c.n_layer == want_c.n_layer && c.n_embd == want_c.n_embd && c.n_ff == want_c.n_ff && c.n_head == want_c.n_head &&
                c.n_head_kv == want_c.n_head_kv && c.vocab_size == want_c.vocab_size &&
                c.context_length == want_c.context_length && c.rope_theta == want_c.rope_theta && c.rms_eps == want_c.rms_eps &&
                c.rope_layout == want_c.rope_layout && c.tied == want_c.tied);
    /* the same weights as the state_dict loaded into a new model of that configuration */
    amp_module *m2 = amp_llama_new(&c, NULL);
    snprintf(path, sizeof path, "%s/llama_tiny_hf/model.safetensors", AMP_TEST_DATA_DIR);
    assert_int_equal(amp_model_load(m2, path), AMP_OK);
    amp_safetensors *g = golden_file("llama_tiny_hf_golden.safetensors");
    amp_scope *s = amp_scope_begin();
    amp_tensor *ids = golden(g, "ids"), *want = golden(g, "logits");
    amp_tensor *lg = amp_llama_forward(m, ids, NULL);
    assert_non_null(lg);
    tc_assert_shape(lg, 3, AMP_SHAPE(2, 7, 61), "logits");
    float *a = values_f32(lg), *b = values_f32(want);
    double e = rel_err(a, b, 2 * 7 * 61);
    print_message("tiny HF Llama: f32 logits %.2e of the largest from the float64 reference\n", e);
    assert_true(e < 1e-5);
    float *a2 = values_f32(amp_llama_forward(m2, ids, NULL));
    assert_memory_equal(a, a2, sizeof(float) * 2 * 7 * 61);
    free(a);
    free(a2);
    free(b);
    amp_scope_end(s);
    amp_safetensors_free(g);
    amp_module_free(m);
    amp_module_free(m2);
}

/* Module tree and names (Hugging Face's LlamaForCausalLM), tied heads. */
static void t_structure(void **state) {
    (void)state;
    amp_llama_config c = tiny_cfg();
    c.tied = true;
    amp_module *m = amp_llama_new(&c, NULL);
    assert_non_null(m);
    amp_tensor *ps[64];
    const char *names[64];
    int np = amp_module_parameters(m, ps, names, 64);
    assert_int_equal(np, 1 + 9 * 2 + 1); /* embed, 9 per layer, norm; the tied head is the embedding */
    assert_string_equal(names[0], "model.embed_tokens.weight");
    assert_string_equal(names[1], "model.layers.0.self_attn.q_proj.weight");
    assert_string_equal(names[np - 1], "model.norm.weight");
    assert_ptr_equal(amp_module_get_parameter(m, "lm_head.weight"), ps[0]);
    assert_string_equal(amp_module_kind(m), "LlamaForCausalLM");
    amp_llama_config got;
    assert_int_equal(amp_llama_get_config(m, &got), AMP_OK);
    assert_int_equal(got.n_head_kv, 2);
    assert_int_equal(amp_llama_weight_bytes(m), 4 * amp_module_num_params(m));
    amp_module_free(m);
}

/* The cached forward, a prompt then single tokens then a chunk of 3 (a
 * bottom-right causal mask), equals the full forward of the prefix. */
static void t_kv_cache(void **state) {
    (void)state;
    amp_llama_config c = tiny_cfg();
    amp_generator gen = amp_generator_make(3);
    amp_module *m = amp_llama_new(&c, &gen);
    amp_scope *s = amp_scope_begin();
    int64_t B = 2, T = 11, V = c.vocab_size;
    amp_tensor *idx = test_tokens(B, T, V, 5);
    float *full = values_f32(amp_llama_forward(m, idx, NULL));
    amp_llama_cache *cache = amp_llama_cache_new(m, B, 16);
    assert_non_null(cache);
    const int64_t cuts[] = {0, 5, 6, 7, 10, 11};
    for (int i = 0; i + 1 < 6; i++) {
        amp_tensor *lg = amp_llama_forward(m, amp_slice(idx, 1, cuts[i], cuts[i + 1], 1), cache);
        assert_non_null(lg);
        int64_t n = cuts[i + 1] - cuts[i];
        assert_int_equal(amp_llama_cache_length(cache), cuts[i + 1]);
        float *got = values_f32(lg);
        for (int64_t b = 0; b < B; b++) {
            double e = rel_err(got + b * n * V, full + (b * T + cuts[i]) * V, n * V);
            assert_true(e < 1e-5);
        }
        free(got);
    }
    /* the last position only */
    amp_llama_cache_reset(cache);
    float *last = values_f32(amp_llama_forward_last(m, idx, cache));
    for (int64_t b = 0; b < B; b++) assert_true(rel_err(last + b * V, full + (b * T + T - 1) * V, V) < 1e-6);
    free(last);
    /* another compute dtype: refused while the cache holds f32 keys, remade after a reset */
    amp_llama_cache_reset(cache);
    assert_non_null(amp_llama_forward(m, amp_slice(idx, 1, 0, 2, 1), cache));
    assert_int_equal(amp_autocast_enter(AMP_BF16), AMP_OK);
    tc_assert_fails(amp_llama_forward(m, amp_slice(idx, 1, 2, 3, 1), cache), "amp_llama_cache_reset empties it");
    amp_llama_cache_reset(cache);
    amp_tensor *hb = amp_llama_forward(m, amp_slice(idx, 1, 0, 2, 1), cache);
    assert_non_null(hb);
    amp_autocast_exit();
    amp_llama_cache_reset(cache);
    assert_non_null(amp_llama_forward(m, amp_slice(idx, 1, 0, 11, 1), cache));
    /* full: more positions than room */
    assert_null(amp_llama_forward(m, amp_slice(idx, 1, 0, 6, 1), cache));
    assert_non_null(strstr(amp_last_error(), "room"));
    free(full);
    amp_llama_cache_free(cache);
    amp_scope_end(s);
    amp_module_free(m);
}

typedef struct {
    int64_t seen[64];
    int n, stop_after;
} cb_state;
static bool on_token(void *user, int64_t tok) {
    cb_state *c = user;
    c->seen[c->n++] = tok;
    return c->n != c->stop_after;
}

static void t_generate(void **state) {
    (void)state;
    amp_llama_config c = tiny_cfg();
    amp_generator gen = amp_generator_make(11);
    amp_module *m = amp_llama_new(&c, &gen);
    const int64_t prompt[] = {3, 17, 42, 5};
    int64_t a[40], b[40], na, nb;
    amp_llama_generate_opts o = AMP_LLAMA_GENERATE_DEFAULTS;
    o.max_new_tokens = 40;
    o.n_stop = -1;
    amp_llama_gen_stats st;
    o.stats = &st;
    assert_int_equal(amp_llama_generate(m, prompt, 4, a, &na, &o), AMP_OK);
    assert_int_equal(na, 40);
    assert_int_equal(st.prefill_tokens, 4);
    assert_int_equal(st.decode_tokens, 39);
    o.use_kv_cache = false;
    assert_int_equal(amp_llama_generate(m, prompt, 4, b, &nb, &o), AMP_OK);
    assert_int_equal(nb, 40);
    assert_memory_equal(a, b, sizeof a); /* greedy: the cached and the uncached paths agree */
    /* a nucleus so small that only the most likely token is in it: greedy */
    o.use_kv_cache = true;
    o.temperature = 1.0;
    o.top_p = 1e-9;
    assert_int_equal(amp_llama_generate(m, prompt, 4, b, &nb, &o), AMP_OK);
    assert_memory_equal(a, b, sizeof a);
    o.top_p = 1.0;
    o.top_k = 1;
    assert_int_equal(amp_llama_generate(m, prompt, 4, b, &nb, &o), AMP_OK);
    assert_memory_equal(a, b, sizeof a);
    /* sampling: the same seed, the same tokens; another seed, others */
    o.top_k = 20;
    o.top_p = 0.9;
    amp_generator g1 = amp_generator_make(7), g2 = amp_generator_make(7), g3 = amp_generator_make(8);
    int64_t c1[40], c2[40], c3[40];
    o.generator = &g1;
    assert_int_equal(amp_llama_generate(m, prompt, 4, c1, &na, &o), AMP_OK);
    o.generator = &g2;
    assert_int_equal(amp_llama_generate(m, prompt, 4, c2, &nb, &o), AMP_OK);
    assert_memory_equal(c1, c2, sizeof c1);
    o.generator = &g3;
    o.temperature = 2.0;
    assert_int_equal(amp_llama_generate(m, prompt, 4, c3, &nb, &o), AMP_OK);
    assert_memory_not_equal(c1, c3, sizeof c1);
    /* a stop token ends the text (kept); the callback sees each token and stops it */
    o = AMP_LLAMA_GENERATE_DEFAULTS;
    o.max_new_tokens = 40;
    o.stop_tokens = &a[6];
    o.n_stop = 1;
    assert_int_equal(amp_llama_generate(m, prompt, 4, b, &nb, &o), AMP_OK);
    int64_t first = 0;
    while (a[first] != a[6]) first++;
    assert_int_equal(nb, first + 1);
    cb_state cs = {.stop_after = 5};
    o.n_stop = -1;
    o.on_token = on_token;
    o.user = &cs;
    assert_int_equal(amp_llama_generate(m, prompt, 4, b, &nb, &o), AMP_OK);
    assert_int_equal(nb, 5);
    assert_int_equal(cs.n, 5);
    assert_memory_equal(cs.seen, a, 5 * sizeof(int64_t));
    /* the context length ends the text: 64 positions */
    o = AMP_LLAMA_GENERATE_DEFAULTS;
    o.n_stop = -1;
    int64_t big[100];
    assert_int_equal(amp_llama_generate(m, prompt, 4, big, &nb, &o), AMP_OK);
    assert_int_equal(nb, 60);
    amp_module_free(m);
}

/* Sampling draws from the distribution it says: softmax(logits / T) over
 * the top_k, then the nucleus of top_p. The first step's logits of a random
 * model, computed here in float64; 3000 seeded one-token generations per
 * setting: no token outside the allowed set, and each allowed token's
 * frequency within 5 standard deviations of its renormalised probability. */
static void t_sampling(void **state) {
    (void)state;
    amp_llama_config c = tiny_cfg();
    amp_generator gen = amp_generator_make(21);
    amp_module *m = amp_llama_new(&c, &gen);
    /* logits large enough to matter: scale the head */
    amp_tensor *head = amp_module_get_parameter(m, "lm_head.weight");
    amp_no_grad_begin();
    amp_tensor *scaled = amp_mul_scalar(head, 60.0);
    assert_int_equal(amp_tensor_copy_(head, scaled), AMP_OK);
    amp_tensor_free(scaled);
    amp_no_grad_end();
    const int64_t prompt[] = {3, 17, 42};
    int64_t V = c.vocab_size;
    amp_scope *s = amp_scope_begin();
    float *lg = values_f32(amp_llama_forward_last(m, amp_tensor_from_data(prompt, AMP_I64, 2, AMP_SHAPE(1, 3)), NULL));
    amp_scope_end(s);
    const struct {
        double T, top_p;
        int64_t top_k;
    } cases[] = {{1.0, 1.0, 0}, {0.7, 1.0, 4}, {1.5, 0.6, 0}, {1.0, 0.8, 5}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        /* the reference: order by logit, keep top_k, then the smallest prefix reaching top_p */
        int64_t order[64];
        double p[64], mx = -INFINITY, sum = 0;
        for (int64_t v = 0; v < V; v++) order[v] = v, mx = fmax(mx, lg[v]);
        for (int64_t i = 0; i < V; i++)
            for (int64_t j = i + 1; j < V; j++)
                if (lg[order[j]] > lg[order[i]]) {
                    int64_t t = order[i];
                    order[i] = order[j];
                    order[j] = t;
                }
        int64_t n = cases[k].top_k ? cases[k].top_k : V;
        for (int64_t i = 0; i < n; i++) sum += p[i] = exp(((double)lg[order[i]] - mx) / cases[k].T);
        double acc = 0;
        int64_t keep = 0;
        while (keep < n && acc < cases[k].top_p * sum) acc += p[keep++];
        int count[64] = {0};
        const int N = 3000;
        amp_llama_generate_opts o = AMP_LLAMA_GENERATE_DEFAULTS;
        o.max_new_tokens = 1;
        o.temperature = cases[k].T;
        o.top_k = cases[k].top_k;
        o.top_p = cases[k].top_p;
        for (int r = 0; r < N; r++) {
            amp_generator g = amp_generator_make(1000 + (uint64_t)r);
            int64_t out, got;
            o.generator = &g;
            assert_int_equal(amp_llama_generate(m, prompt, 3, &out, &got, &o), AMP_OK);
            count[out]++;
        }
        int64_t outside = N;
        for (int64_t i = 0; i < keep; i++) {
            double q = p[i] / acc, want = N * q, sd = sqrt(N * q * (1 - q));
            outside -= count[order[i]];
            if (fabs(count[order[i]] - want) > 5 * sd + 1)
                fail_msg("case %zu: token %lld drawn %d times, expected %.1f", k, (long long)order[i], count[order[i]], want);
        }
        print_message("sampling T %g top_k %lld top_p %g: %lld tokens allowed, frequencies as expected\n", cases[k].T,
                      (long long)cases[k].top_k, cases[k].top_p, (long long)keep);
        assert_true(keep >= 2);
        assert_int_equal(outside, 0);
    }
    free(lg);
    amp_module_free(m);
}

static void t_errors(void **state) {
    (void)state;
    amp_llama_config c = tiny_cfg();
    c.n_head_kv = 3; /* 4 % 3 */
    tc_assert_fails(amp_llama_new(&c, NULL), "n_head_kv");
    c = tiny_cfg();
    c.n_head = 5; /* 32 % 5 */
    tc_assert_fails(amp_llama_new(&c, NULL), "n_head");
    c = tiny_cfg();
    c.rms_eps = 0;
    tc_assert_fails(amp_llama_new(&c, NULL), "rms_eps");
    tc_assert_fails(amp_llama_new(NULL, NULL), "amp_llama_new");
    c = tiny_cfg();
    amp_module *m = amp_llama_new(&c, NULL);
    amp_scope *s = amp_scope_begin();
    tc_assert_fails(amp_llama_forward(m, test_tokens(1, 65, c.vocab_size, 1), NULL), "context length");
    tc_assert_fails(amp_llama_forward(m, amp_tensor_full(AMP_I64, 2, AMP_SHAPE(1, 3), 61), NULL), "outside the vocabulary");
    tc_assert_fails(amp_llama_forward(m, amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(1, 3)), NULL), "i64 or i32");
    amp_module *lin = amp_nn_linear(2, 2, false, NULL);
    tc_assert_fails(amp_llama_forward(lin, test_tokens(1, 3, 10, 1), NULL), "not a Llama");
    tc_assert_fails(amp_llama_cache_new(lin, 1, 0), "not a Llama");
    tc_assert_fails(amp_llama_cache_new(m, 1, 65), "capacity");
    amp_llama_cache *cache = amp_llama_cache_new(m, 2, 0);
    tc_assert_fails(amp_llama_forward(m, test_tokens(1, 3, 10, 1), cache), "batch");
    amp_llama_cache_free(cache);
    int64_t p[2] = {1, 61}, out[4], n;
    assert_int_equal(amp_llama_generate(m, p, 2, out, &n, NULL), AMP_ERR_RANGE);
    assert_non_null(strstr(amp_last_error(), "outside the vocabulary"));
    amp_llama_generate_opts o = AMP_LLAMA_GENERATE_DEFAULTS;
    o.max_new_tokens = 4;
    o.top_p = 0;
    p[1] = 2;
    assert_int_equal(amp_llama_generate(m, p, 2, out, &n, &o), AMP_ERR_ARG);
    assert_non_null(strstr(amp_last_error(), "top_p"));
    tc_assert_fails(amp_llama_tokenizer(m), "no tokenizer");
    amp_scope_end(s);
    amp_module_free(lin);
    amp_module_free(m);
}

static void *read_file(const char *name, size_t *len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", AMP_TEST_DATA_DIR, name);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("%s: cannot open (tools/ref_llama.py writes it)", path);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = malloc(*len);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

/* The tiny model as llama.cpp's converter writes it (GGUF names, q/k rows
 * in adjacent-pair order, F32): the same logits as the Hugging Face layout,
 * in every float load dtype (half loads within their rounding). */
static void t_tiny_gguf(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/llama_tiny.gguf", AMP_TEST_DATA_DIR);
    amp_safetensors *g = golden_file("llama_tiny_hf_golden.safetensors");
    amp_scope *s = amp_scope_begin();
    amp_tensor *ids = golden(g, "ids");
    float *want = values_f32(golden(g, "logits"));
    const char *lds[] = {"keep", "f32", "bf16", "f16"};
    const double tol[] = {1e-5, 1e-5, 3e-2, 4e-3};
    for (int i = 0; i < 4; i++) {
        amp_load_dtype ld;
        assert_int_equal(amp_load_dtype_parse(lds[i], &ld), AMP_OK);
        amp_module *m = amp_llama_from_gguf(path, ld);
        if (!m) fail_msg("%s", amp_last_error());
        amp_llama_config c;
        assert_int_equal(amp_llama_get_config(m, &c), AMP_OK);
        assert_int_equal(c.rope_layout, AMP_ROPE_INTERLEAVED);
        assert_false(c.tied);
        assert_int_equal(c.n_head_kv, 2);
        assert_int_equal(c.context_length, 64);
        float *got = values_f32(amp_llama_forward(m, ids, NULL));
        double e = rel_err(got, want, 2 * 7 * 61);
        print_message("tiny GGUF Llama, load %s: logits %.2e of the largest from the float64 reference\n", lds[i], e);
        assert_true(e < tol[i]);
        free(got);
        amp_module_free(m);
    }
    free(want);
    amp_scope_end(s);
    amp_safetensors_free(g);
}

/* Overwrites the bytes after the first occurrence of key in buf. */
static void patch(uint8_t *buf, size_t len, const char *key, size_t skip, const void *bytes, size_t n) {
    size_t k = strlen(key);
    for (size_t i = 0; i + k <= len; i++)
        if (!memcmp(buf + i, key, k)) {
            memcpy(buf + i + k + skip, bytes, n);
            return;
        }
    fail_msg("%s not in the file", key);
}

/* Each defect of a GGUF file's metadata or tensors, refused by name before
 * anything is allocated. */
static void t_gguf_refusals(void **state) {
    (void)state;
    size_t len;
    uint8_t *orig = read_file("llama_tiny.gguf", &len), *b = malloc(len);
    const uint32_t one = 1, three = 3, big = 1u << 30;
    const uint64_t eight = 8, sixteen = 16;
    const struct {
        const char *key;
        size_t skip; /* from the key's end to the bytes changed */
        const void *bytes;
        size_t n;
        const char *want;
    } cases[] = {
        /* a key's value: type u32, then the value (a string: length u64, then its bytes) */
        {"general.architecture", 12, "lbama", 5, "general.architecture is \"lbama\", not \"llama\""},
        {"llama.attention.head_count_kv", 4, &three, 4, "head_count 4 is not a multiple of llama.attention.head_count_kv 3"},
        {"llama.embedding_length", 4, &three, 4, "embedding_length 3 is not a multiple of llama.attention.head_count 4"},
        {"llama.block_count", 4, &three, 4, "the tensor blk.2.attn_norm.weight is missing"},
        {"llama.block_count", 4, &one, 4, "the file has blk.1.attn_norm.weight but llama.block_count is 1"},
        {"llama.context_length", 4, &big, 4, "llama.context_length is 1073741824, outside 1..16777216"},
        /* a tensor's name, or its info after the name: n_dims u32, then ne[] u64 */
        {"blk.1.ffn_up", 0, "_uq", 3, "the tensor blk.1.ffn_up.weight is missing"},
        {"output_norm.weight", 4, &sixteen, 8, "tensor output_norm.weight has ne {16}, expected {32}"},
        {"blk.0.attn_k.weight", 4 + 8, &eight, 8, "tensor blk.0.attn_k.weight has ne {32, 8}, expected {32, 16}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(b, orig, len);
        patch(b, len, cases[i].key, cases[i].skip, cases[i].bytes, cases[i].n);
        amp_gguf *f = amp_gguf_parse(b, len, "patched.gguf");
        if (!f) fail_msg("case %zu: the reader refuses the file: %s", i, amp_last_error());
        amp_llama_config c;
        assert_int_not_equal(amp_llama_config_from_gguf(f, &c), AMP_OK);
        if (!strstr(amp_last_error(), cases[i].want))
            fail_msg("case %zu: \"%s\" does not say \"%s\"", i, amp_last_error(), cases[i].want);
        amp_gguf_close(f);
    }
    /* a file that is no GGUF: the reader's error, named by the loader */
    char path[1024];
    snprintf(path, sizeof path, "%s/llama_tiny_hf/config.json", AMP_TEST_DATA_DIR);
    tc_assert_fails(amp_llama_from_gguf(path, AMP_LOAD_DTYPE_KEEP), "amp_llama_from_gguf");
    free(orig);
    free(b);
}

/* ---- SmolLM2-135M-Instruct (the GGUF file scripts/deps.sh models installs) ---------------------------- */
static const char *smollm2_path(void) {
    static char path[4096];
    const char *p = amp_models_path("SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!p) fail_msg("amp_models_path: %s", amp_last_error());
    snprintf(path, sizeof path, "%s", p);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("%s is missing: `scripts/deps.sh models` installs it (make test does)", path);
    fclose(f);
    return path;
}

static amp_module *smollm2(const char *ld_name) {
    amp_load_dtype ld;
    assert_int_equal(amp_load_dtype_parse(ld_name, &ld), AMP_OK);
    amp_module *m = amp_llama_from_gguf(smollm2_path(), ld);
    if (!m) fail_msg("load %s: %s", ld_name, amp_last_error());
    return m;
}

/* The logits of the golden prompt's 8 positions [8, V] (f32, no autocast). */
static float *smollm2_logits(amp_module *m, amp_tensor *ids, int64_t V) {
    amp_scope *s = amp_scope_begin();
    amp_tensor *lg = amp_llama_forward(m, amp_reshape(ids, 2, AMP_SHAPE(1, 8)), NULL);
    if (!lg) fail_msg("%s", amp_last_error());
    tc_assert_shape(lg, 3, AMP_SHAPE(1, 8, V), "logits");
    float *v = values_f32(lg);
    amp_scope_end(s);
    return v;
}

/* Weights dequantized to f32: the logits of every position within 1e-4 of
 * the largest from the float64 reference (measured: see the message); the
 * KV cache (5 positions, then one at a time) gives the full forward's
 * logits; greedy decoding of "The capital of France is" gives the
 * reference's tokens, " Paris" first. */
static void t_smollm2_f32(void **state) {
    (void)state;
    amp_safetensors *g = golden_file("llama_smollm2_golden.safetensors");
    amp_module *m = smollm2("f32");
    amp_llama_config c;
    assert_int_equal(amp_llama_get_config(m, &c), AMP_OK);
    assert_true(c.n_layer == 30 && c.n_embd == 576 && c.n_ff == 1536 && c.n_head == 9 && c.n_head_kv == 3 && c.vocab_size == 49152 &&
                c.context_length == 8192 && c.rope_theta == 100000 && c.tied && c.rope_layout == AMP_ROPE_INTERLEAVED);
    amp_scope *s = amp_scope_begin();
    int64_t V = c.vocab_size;
    amp_tensor *ids = golden(g, "ids"), *sel = golden(g, "vocab_sel");
    float *got = smollm2_logits(m, ids, V), *want_last = values_f32(golden(g, "logits_last"));
    float *want_sel = values_f32(golden(g, "logits_sel")), got_sel[8 * 256];
    const int64_t *vs = amp_tensor_data(sel);
    for (int t = 0; t < 8; t++)
        for (int j = 0; j < 256; j++) got_sel[t * 256 + j] = got[t * V + vs[j]];
    double e_last = rel_err(got + 7 * V, want_last, V), e_sel = rel_err(got_sel, want_sel, 8 * 256);
    print_message("SmolLM2 f32: last position's logits %.2e, every position's (256 sampled) %.2e of the largest from the float64 "
                  "reference\n", e_last, e_sel);
    assert_true(e_last < 1e-4);
    assert_true(e_sel < 1e-4);
    /* the cache: 5 positions, then 1, 1, 1 */
    amp_llama_cache *cache = amp_llama_cache_new(m, 1, 8);
    amp_tensor *ids2 = amp_reshape(ids, 2, AMP_SHAPE(1, 8));
    const int64_t cuts[] = {0, 5, 6, 7, 8};
    double e_cache = 0;
    for (int i = 0; i < 4; i++) {
        int64_t n = cuts[i + 1] - cuts[i];
        float *lg = values_f32(amp_llama_forward(m, amp_slice(ids2, 1, cuts[i], cuts[i + 1], 1), cache));
        for (int64_t t = 0; t < n; t++) e_cache = fmax(e_cache, rel_err(lg + t * V, got + (cuts[i] + t) * V, V));
        free(lg);
    }
    print_message("SmolLM2 f32: KV-cache decoding %.2e of the largest from the full-prefix forward\n", e_cache);
    assert_true(e_cache < 1e-5);
    amp_llama_cache_free(cache);
    /* greedy: the reference's 8 tokens */
    const int64_t prompt[5] = {504, 3575, 282, 4649, 314}; /* "The capital of France is" */
    int64_t out[8], n = 0;
    amp_llama_generate_opts o = AMP_LLAMA_GENERATE_DEFAULTS;
    o.max_new_tokens = 8;
    o.n_stop = -1;
    assert_int_equal(amp_llama_generate(m, prompt, 5, out, &n, &o), AMP_OK);
    assert_int_equal(n, 8);
    amp_tensor *greedy = golden(g, "greedy");
    assert_memory_equal(out, amp_tensor_data(greedy), sizeof out);
    assert_int_equal(out[0], 7042); /* " Paris" */
    free(got);
    free(want_last);
    free(want_sel);
    amp_scope_end(s);
    amp_module_free(m);
    amp_safetensors_free(g);
}

/* Other load dtypes on the golden prompt: the top-1 token of every position
 * against f32's, and the logits' distance; keep (the file's Q4_1 matrices
 * and Q8_0 embedding, integer dot products) still says Paris. */
static void t_smollm2_load_dtypes(void **state) {
    (void)state;
    amp_safetensors *g = golden_file("llama_smollm2_golden.safetensors");
    amp_scope *s = amp_scope_begin();
    amp_tensor *ids = golden(g, "ids");
    int64_t V = 49152;
    float *ref = NULL;
    const char *lds[] = {"f32", "keep", "bf16", "q8_0"};
    const int min_agree[] = {8, 6, 6, 7};
    for (int i = 0; i < 4; i++) {
        amp_module *m = smollm2(lds[i]);
        float *lg = smollm2_logits(m, ids, V);
        if (!ref) ref = lg;
        int agree = 0;
        for (int t = 0; t < 8; t++) {
            int64_t a = 0, b = 0;
            for (int64_t v = 1; v < V; v++) {
                if (lg[t * V + v] > lg[t * V + a]) a = v;
                if (ref[t * V + v] > ref[t * V + b]) b = v;
            }
            agree += a == b;
        }
        double e = rel_err(lg, ref, 8 * V);
        print_message("SmolLM2 load %s: top-1 agrees with f32 at %d of 8 positions, logits %.2e of the largest\n", lds[i], agree, e);
        assert_true(agree >= min_agree[i]);
        const int64_t prompt[5] = {504, 3575, 282, 4649, 314};
        int64_t out[1], n = 0;
        amp_llama_generate_opts o = AMP_LLAMA_GENERATE_DEFAULTS;
        o.max_new_tokens = 1;
        assert_int_equal(amp_llama_generate(m, prompt, 5, out, &n, &o), AMP_OK);
        assert_int_equal(out[0], 7042); /* " Paris" */
        if (lg != ref) free(lg);
        amp_module_free(m);
    }
    free(ref);
    amp_scope_end(s);
    amp_safetensors_free(g);
}

AMP_TEST_MAIN(t_tiny_hf_golden, t_tiny_gguf, t_gguf_refusals, t_smollm2_f32, t_smollm2_load_dtypes, t_structure, t_kv_cache, t_generate, t_sampling, t_errors)

/* A Llama decoder built with the public module API (amp/nn.h), as a user's
 * model would be: Hugging Face's LlamaForCausalLM module tree and names,
 * weights from a GGUF file or a Hugging Face directory in a chosen load
 * dtype (float parameters, or amp_qtensor matrices over the mmap'ed file),
 * a KV cache and generation. amp/llama.h has the contract. Shapes: B batch,
 * T new positions, S cached + new positions, C n_embd, Hq / Hkv query / KV
 * heads of D = C / Hq, F n_ff, V vocabulary. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amp/amp.h"
#include "amp/llama.h"
#include "amp/pretrained.h"
#include "core/checked.h"
#include "core/error.h"

/* What every module of one Llama shares (reference counted: a layer may
 * outlive the model that made it). */
typedef struct {
    atomic_int refs;
    amp_llama_config cfg;
    amp_load_dtype ld;
    amp_tokenizer *tok;  /* the file's, or NULL */
    char *chat_template; /* the file's, or NULL */
    int64_t stop[4];     /* the default stop tokens */
    int n_stop;
} llama_shared;

typedef struct {
    llama_shared *sh;
    amp_qtensor *q; /* Linear / Embedding: the quantized weight (else the parameter "weight") */
} mod_data;

static llama_shared *sh_retain(llama_shared *s) {
    atomic_fetch_add(&s->refs, 1);
    return s;
}
static void sh_release(llama_shared *s) {
    if (s && atomic_fetch_sub(&s->refs, 1) == 1) {
        amp_tokenizer_free(s->tok);
        free(s->chat_template);
        free(s);
    }
}
static void mod_destroy(void *data) {
    mod_data *d = data;
    sh_release(d->sh);
    amp_qtensor_free(d->q);
    d->sh = NULL;
    d->q = NULL;
}
static llama_shared *SH(const amp_module *m) { return ((mod_data *)amp_module_data(m))->sh; }
static amp_module *CH(const amp_module *m, const char *name) { return amp_module_get_child(m, name); }
static amp_tensor *P(const amp_module *m, const char *name) { return amp_module_get_parameter(m, name); }

/* ---- the module classes ------------------------------------------------------------------------ */
/* A bias-free Linear over a float parameter or a quantized matrix [out, in]. */
static amp_tensor *linear_fwd(amp_module *m, amp_tensor *x) {
    mod_data *d = amp_module_data(m);
    return d->q ? amp_qlinear(x, d->q, NULL) : amp_linear(x, P(m, "weight"), NULL);
}
static void linear_repr(const amp_module *m, char *b, size_t n) {
    mod_data *d = amp_module_data(m);
    amp_tensor *w = d->q ? NULL : P(m, "weight");
    int64_t out = d->q ? amp_qtensor_rows(d->q) : w ? amp_tensor_dim(w, 0) : 0;
    int64_t in = d->q ? amp_qtensor_cols(d->q) : w ? amp_tensor_dim(w, 1) : 0;
    snprintf(b, n, "in_features=%lld, out_features=%lld, bias=False%s%s", (long long)in, (long long)out, d->q ? ", weight=" : "",
             d->q ? amp_qtype_name(amp_qtensor_type(d->q)) : "");
}
static const amp_module_class linear_class = {.name = "Linear", .forward = linear_fwd, .extra_repr = linear_repr, .destroy = mod_destroy};

/* The token embedding: rows of a float parameter or of a quantized table
 * (f32 rows: the residual stream of a quantized model is f32). */
static amp_tensor *embedding_fwd(amp_module *m, amp_tensor *idx) {
    mod_data *d = amp_module_data(m);
    return d->q ? amp_qembedding(d->q, idx, AMP_F32) : amp_embedding(P(m, "weight"), idx);
}
static const amp_module_class embedding_class = {.name = "Embedding", .forward = embedding_fwd, .destroy = mod_destroy};

/* RMSNorm with an f32 weight; a half input stays half (f32 statistics). */
static amp_tensor *norm_fwd(amp_module *m, amp_tensor *x) {
    return amp_rms_norm(x, 1, P(m, "weight"), SH(m)->cfg.rms_eps);
}
static void norm_repr(const amp_module *m, char *b, size_t n) {
    const amp_llama_config *c = &SH(m)->cfg;
    snprintf(b, n, "(%lld,), eps=%g", (long long)c->n_embd, c->rms_eps);
}
static const amp_module_class norm_class = {.name = "LlamaRMSNorm",
                                            .forward = norm_fwd,
                                            .extra_repr = norm_repr,
                                            .destroy = mod_destroy,
                                            .flags = AMP_MODULE_NORM | AMP_MODULE_HALF_IO};

static amp_tensor *mlp_fwd(amp_module *m, amp_tensor *x) {
    amp_tensor *g = amp_module_forward(CH(m, "gate_proj"), x), *u = g ? amp_module_forward(CH(m, "up_proj"), x) : NULL;
    return u ? amp_module_forward(CH(m, "down_proj"), amp_swiglu(g, u)) : NULL;
}
static const amp_module_class mlp_class = {.name = "LlamaMLP", .forward = mlp_fwd, .destroy = mod_destroy};

/* The KV cache (amp/llama.h). */
struct amp_llama_cache {
    amp_module *m; /* a reference: the model outlives its cache */
    int64_t B, cap, len;
    int n_layer;
    amp_tensor **k, **v; /* [B, Hkv, cap, D] per layer, made at the first forward */
};

/* [B, T, H * D] -> [B, H, T, D] (a view) */
static amp_tensor *heads(amp_tensor *x, int64_t H, int64_t D) {
    int64_t B = amp_tensor_dim(x, 0), T = amp_tensor_dim(x, 1);
    return amp_transpose(amp_reshape(x, 4, AMP_SHAPE(B, T, H, D)), 1, 2);
}

/* Self-attention of x [B, T, C] at positions pos0 .. pos0 + T - 1: without a
 * cache (pos0 0) causal over x; with one, the new keys and values go to
 * layer l's cache and the queries attend to every cached position up to
 * their own. */
static amp_tensor *attn_run(amp_module *m, amp_tensor *x, amp_llama_cache *c, int l) {
    const amp_llama_config *cf = &SH(m)->cfg;
    int64_t Hq = cf->n_head, Hkv = cf->n_head_kv, D = cf->n_embd / cf->n_head;
    int64_t B = amp_tensor_dim(x, 0), T = amp_tensor_dim(x, 1), L0 = c ? c->len : 0, S = L0 + T;
    amp_tensor *q = amp_module_forward(CH(m, "q_proj"), x), *k = q ? amp_module_forward(CH(m, "k_proj"), x) : NULL;
    amp_tensor *v = k ? amp_module_forward(CH(m, "v_proj"), x) : NULL;
    if (!v) return NULL;
    q = amp_rope(heads(q, Hq, D), L0, cf->rope_theta, cf->rope_layout);
    k = amp_rope(heads(k, Hkv, D), L0, cf->rope_theta, cf->rope_layout);
    v = heads(v, Hkv, D);
    if (!q || !k || !v) return NULL;
    amp_sdpa_opts o = AMP_SDPA_DEFAULTS;
    if (c) {
        if (!c->k[l]) {
            amp_mem_push_category(AMP_MEM_ACTIVATION);
            c->k[l] = amp_tensor_keep(amp_tensor_zeros(amp_tensor_dtype(k), 4, AMP_SHAPE(c->B, Hkv, c->cap, D)));
            c->v[l] = amp_tensor_keep(amp_tensor_zeros(amp_tensor_dtype(v), 4, AMP_SHAPE(c->B, Hkv, c->cap, D)));
            amp_mem_pop_category();
            if (!c->k[l] || !c->v[l]) return NULL;
        }
        if (amp_tensor_dtype(c->k[l]) != amp_tensor_dtype(k))
            return amp_error_null(AMP_ERR_DTYPE, "amp_llama_forward: the cache holds %s keys, this forward computes %s (the "
                                                 "autocast state or the load dtype changed: amp_llama_cache_reset)",
                                  amp_dtype_name(amp_tensor_dtype(c->k[l])), amp_dtype_name(amp_tensor_dtype(k)));
        if (amp_tensor_copy_(amp_slice(c->k[l], 2, L0, S, 1), k) != AMP_OK ||
            amp_tensor_copy_(amp_slice(c->v[l], 2, L0, S, 1), v) != AMP_OK)
            return NULL;
        k = amp_slice(c->k[l], 2, 0, S, 1);
        v = amp_slice(c->v[l], 2, 0, S, 1);
        if (T > 1 && L0 > 0) { /* new query i (position L0 + i) sees keys j <= L0 + i: bottom-right aligned */
            amp_tensor *mask = amp_tensor_zeros(AMP_U8, 2, AMP_SHAPE(T, S));
            if (!mask) return NULL;
            uint8_t *pm = amp_tensor_data(mask);
            for (int64_t i = 0; i < T; i++) memset(pm + i * S, 1, (size_t)(L0 + i + 1));
            o.attn_mask = mask;
        } else {
            o.is_causal = T > 1; /* a single new query sees every cached key */
        }
    } else {
        o.is_causal = true;
    }
    o.enable_gqa = Hq != Hkv; /* query head h reads KV head h / (Hq / Hkv): the cache is never repeated */
    amp_tensor *y = amp_scaled_dot_product_attention_ex(q, k, v, &o);
    if (!y) return NULL;
    y = amp_reshape(amp_transpose(y, 1, 2), 3, AMP_SHAPE(B, T, Hq * D)); /* a copy: the transpose is not contiguous */
    return amp_module_forward(CH(m, "o_proj"), y);
}
static amp_tensor *attn_fwd(amp_module *m, amp_tensor *x) { return attn_run(m, x, NULL, 0); }
static const amp_module_class attn_class = {.name = "LlamaAttention", .forward = attn_fwd, .destroy = mod_destroy};

/* A decoder layer; its temporaries go as it returns. */
static amp_tensor *layer_run(amp_module *m, amp_tensor *x, amp_llama_cache *c, int l) {
    amp_scope *sc = amp_scope_begin();
    if (!sc) return NULL;
    amp_tensor *h = amp_add(x, attn_run(CH(m, "self_attn"), amp_module_forward(CH(m, "input_layernorm"), x), c, l));
    amp_tensor *y = h ? amp_add(h, amp_module_forward(CH(m, "mlp"), amp_module_forward(CH(m, "post_attention_layernorm"), h))) : NULL;
    return amp_scope_end_keep(sc, y);
}
static amp_tensor *layer_fwd(amp_module *m, amp_tensor *x) { return layer_run(m, x, NULL, 0); }
static const amp_module_class layer_class = {.name = "LlamaDecoderLayer", .forward = layer_fwd, .destroy = mod_destroy};

static const amp_module_class model_class = {.name = "LlamaModel", .destroy = mod_destroy};

/* idx [B, T] through the model at the cache's positions (c NULL: from 0);
 * the head on every position, or on the last only. */
static amp_tensor *llama_run(amp_module *m, amp_tensor *idx, amp_llama_cache *c, bool last_only) {
    const amp_llama_config *cf = &SH(m)->cfg;
    amp_scope *sc = amp_scope_begin();
    if (!sc) return NULL;
    amp_module *md = CH(m, "model"), *layers = CH(md, "layers");
    amp_tensor *x = amp_module_forward(CH(md, "embed_tokens"), idx); /* [B, T, C] */
    for (int l = 0; l < cf->n_layer && x; l++) x = layer_run(amp_module_child_at(layers, l, NULL), x, c, l);
    int64_t T = amp_tensor_dim(idx, 1);
    if (x && last_only && T > 1) x = amp_slice(x, 1, T - 1, T, 1);
    amp_tensor *logits = amp_module_forward(CH(m, "lm_head"), amp_module_forward(CH(md, "norm"), x)); /* [B, T, V] */
    return amp_scope_end_keep(sc, logits);
}

static amp_status check_idx(const char *fn, const amp_module *m, amp_tensor *idx, int64_t B, int64_t room);

static amp_tensor *llama_fwd(amp_module *m, amp_tensor *idx) {
    if (check_idx("amp_llama_forward", m, idx, -1, SH(m)->cfg.context_length) != AMP_OK) return NULL;
    return llama_run(m, idx, NULL, false);
}
static const amp_module_class llama_class = {.name = "LlamaForCausalLM", .forward = llama_fwd, .destroy = mod_destroy};

static amp_status llama_of(const char *fn, const amp_module *m) {
    if (!m) return amp_error(AMP_ERR_ARG, "%s: model is NULL", fn);
    if (amp_module_class_of(m) != &llama_class)
        return amp_error(AMP_ERR_ARG, "%s: the model is a %s, not a Llama (amp_llama_new, amp_llama_from_gguf, "
                                      "amp_llama_from_pretrained)",
                         fn, amp_module_kind(m));
    return AMP_OK;
}

/* idx: i64/i32 [B, T] (B as given when B >= 0), 1 <= T <= room, every token
 * in the vocabulary (read when idx is on the CPU; the embedding checks it
 * elsewhere). */
static amp_status check_idx(const char *fn, const amp_module *m, amp_tensor *idx, int64_t B, int64_t room) {
    if (!idx) return amp_error(AMP_ERR_ARG, "%s: idx is NULL", fn);
    if (amp_tensor_ndim(idx) < 0) return amp_error_chain(AMP_OK, "%s: idx", fn);
    amp_dtype dt = amp_tensor_dtype(idx);
    if (amp_tensor_ndim(idx) != 2 || (dt != AMP_I64 && dt != AMP_I32) || (B >= 0 && amp_tensor_dim(idx, 0) != B)) {
        char b[64];
        return amp_error(AMP_ERR_SHAPE, "%s: idx must be i64 or i32 [%s, T], got %s %s", fn, B >= 0 ? "batch of the cache" : "B",
                         amp_dtype_name(dt), amp_shape_str(idx, b, sizeof b));
    }
    int64_t T = amp_tensor_dim(idx, 1), n = amp_tensor_numel(idx), V = SH(m)->cfg.vocab_size;
    if (T < 1 || T > room)
        return amp_error(AMP_ERR_RANGE, "%s: %lld positions, room for 1..%lld (the context length %lld%s)", fn, (long long)T,
                         (long long)room, (long long)SH(m)->cfg.context_length, B >= 0 ? ", less the cached positions" : "");
    if (amp_tensor_device(idx) != AMP_DEVICE_CPU || !amp_tensor_is_contiguous(idx)) return AMP_OK;
    const void *p = amp_tensor_data(idx);
    for (int64_t i = 0; i < n; i++) {
        int64_t t = dt == AMP_I64 ? ((const int64_t *)p)[i] : ((const int32_t *)p)[i];
        if (t < 0 || t >= V)
            return amp_error(AMP_ERR_RANGE, "%s: token %lld (element %lld of idx) is outside the vocabulary 0..%lld", fn, (long long)t,
                             (long long)i, (long long)V - 1);
    }
    return AMP_OK;
}

/* ---- construction ---------------------------------------------------------------------------------- */
static amp_module *new_mod(const amp_module_class *cls, llama_shared *s) {
    amp_module *m = amp_module_new(cls, sizeof(mod_data));
    if (m) ((mod_data *)amp_module_data(m))->sh = sh_retain(s);
    return m;
}

/* Registers child under name when everything went well so far (ok), frees
 * it otherwise. */
static void take(amp_module *parent, const char *name, amp_module *child, bool *ok) {
    if (*ok && child && parent) *ok = amp_module_register_module(parent, name, child) != NULL;
    else {
        amp_module_free(child);
        *ok = false;
    }
}

/* The weights a Llama has, by role; a source gives each one. */
typedef enum { W_EMBED, W_NORM, W_HEAD, W_ATTN_NORM, W_Q, W_K, W_V, W_O, W_FFN_NORM, W_GATE, W_UP, W_DOWN, W_COUNT } wrole;
#define W_FIRST_LAYER W_ATTN_NORM

/* torch's shape of a weight: [rows, cols], cols 0 for a 1-D norm weight. */
static void role_shape(const amp_llama_config *c, wrole r, int64_t *rows, int64_t *cols) {
    int64_t C = c->n_embd, D = c->n_embd / c->n_head, Q = c->n_head * D, KV = c->n_head_kv * D, F = c->n_ff;
    static const int8_t is_norm[W_COUNT] = {[W_NORM] = 1, [W_ATTN_NORM] = 1, [W_FFN_NORM] = 1};
    int64_t rc[W_COUNT][2] = {[W_EMBED] = {c->vocab_size, C}, [W_HEAD] = {c->vocab_size, C}, [W_Q] = {Q, C}, [W_K] = {KV, C},
                              [W_V] = {KV, C},  [W_O] = {C, Q},  [W_GATE] = {F, C}, [W_UP] = {F, C}, [W_DOWN] = {C, F}};
    *rows = is_norm[r] ? C : rc[r][0];
    *cols = is_norm[r] ? 0 : rc[r][1];
}
static bool role_is_norm(wrole r) { return r == W_NORM || r == W_ATTN_NORM || r == W_FFN_NORM; }

/* A source of weights: *w (a float tensor of the role's shape: f32 for
 * norms) or *q (a quantized matrix of the role's shape). */
typedef amp_status (*wsource)(void *src, wrole r, int64_t layer, amp_tensor **w, amp_qtensor **q);

/* A Linear (or Embedding) of cls over w or q (its reference taken). */
static amp_module *weight_mod(const amp_module_class *cls, llama_shared *s, amp_tensor *w, amp_qtensor *q) {
    amp_module *m = new_mod(cls, s);
    if (!m) {
        amp_tensor_free(w);
        amp_qtensor_free(q);
        return NULL;
    }
    if (q) ((mod_data *)amp_module_data(m))->q = q;
    else if (!amp_module_register_parameter(m, "weight", w)) {
        amp_module_free(m);
        return NULL;
    }
    return m;
}

static amp_module *from_source(const amp_module_class *cls, llama_shared *s, wsource get, void *src, wrole r, int64_t layer) {
    amp_tensor *w = NULL;
    amp_qtensor *q = NULL;
    if (get(src, r, layer, &w, &q) != AMP_OK) return NULL;
    return weight_mod(cls, s, w, q);
}

static amp_module *layer_new(llama_shared *s, wsource get, void *src, int64_t l) {
    amp_module *b = new_mod(&layer_class, s), *at = new_mod(&attn_class, s), *mlp = new_mod(&mlp_class, s);
    bool ok = b && at && mlp;
    static const struct {
        wrole r;
        const char *name;
        int where; /* 0 attention, 1 mlp, 2 the layer */
    } parts[] = {{W_Q, "q_proj", 0},    {W_K, "k_proj", 0},  {W_V, "v_proj", 0},      {W_O, "o_proj", 0},
                 {W_GATE, "gate_proj", 1}, {W_UP, "up_proj", 1}, {W_DOWN, "down_proj", 1}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        take(parts[i].where ? mlp : at, parts[i].name, ok ? from_source(&linear_class, s, get, src, parts[i].r, l) : NULL, &ok);
    take(b, "self_attn", at, &ok);
    take(b, "mlp", mlp, &ok);
    take(b, "input_layernorm", ok ? from_source(&norm_class, s, get, src, W_ATTN_NORM, l) : NULL, &ok);
    take(b, "post_attention_layernorm", ok ? from_source(&norm_class, s, get, src, W_FFN_NORM, l) : NULL, &ok);
    if (ok) return b;
    amp_module_free(b);
    return NULL;
}

/* The whole model from a source (s: its reference is the caller's). */
static amp_module *build(llama_shared *s, wsource get, void *src) {
    const amp_llama_config *c = &s->cfg;
    amp_module *m = new_mod(&llama_class, s), *md = new_mod(&model_class, s), *layers = amp_nn_module_list();
    bool ok = m && md && layers;
    amp_module *emb = ok ? from_source(&embedding_class, s, get, src, W_EMBED, 0) : NULL;
    amp_module *head = NULL;
    if (emb && c->tied) { /* the head's weight IS the embedding's */
        mod_data *d = amp_module_data(emb);
        head = weight_mod(&linear_class, s, d->q ? NULL : amp_tensor_retain(P(emb, "weight")), d->q ? amp_qtensor_retain(d->q) : NULL);
    } else if (emb) {
        head = from_source(&linear_class, s, get, src, W_HEAD, 0);
    }
    take(md, "embed_tokens", emb, &ok);
    for (int64_t l = 0; ok && l < c->n_layer; l++) ok = amp_module_append(layers, layer_new(s, get, src, l)) == AMP_OK;
    take(md, "layers", layers, &ok);
    take(md, "norm", ok ? from_source(&norm_class, s, get, src, W_NORM, 0) : NULL, &ok);
    take(m, "model", md, &ok);
    take(m, "lm_head", head, &ok);
    if (ok) return m;
    amp_module_free(m);
    return NULL;
}

static amp_status check_config(const char *fn, const amp_llama_config *c) {
    if (!c) return amp_error(AMP_ERR_ARG, "%s: config is NULL", fn);
    if (c->n_layer < 1 || c->n_layer > 1000 || c->n_embd < 1 || c->n_embd > (1 << 20) || c->n_ff < 1 || c->n_ff > (1 << 22) ||
        c->n_head < 1 || c->n_head_kv < 1 || c->vocab_size < 1 || c->vocab_size > (1 << 26) || c->context_length < 1 ||
        c->context_length > (1 << 24))
        return amp_error(AMP_ERR_ARG, "%s: n_layer %lld, n_embd %lld, n_ff %lld, n_head %lld, n_head_kv %lld, vocab_size %lld, "
                                      "context_length %lld: each must be >= 1 (n_layer <= 1000, n_embd <= 2^20, n_ff <= 2^22, "
                                      "vocab_size <= 2^26, context_length <= 2^24)",
                         fn, (long long)c->n_layer, (long long)c->n_embd, (long long)c->n_ff, (long long)c->n_head,
                         (long long)c->n_head_kv, (long long)c->vocab_size, (long long)c->context_length);
    if (c->n_embd % c->n_head || (c->n_embd / c->n_head) % 2)
        return amp_error(AMP_ERR_ARG, "%s: n_embd %lld must be n_head %lld times an even head size", fn, (long long)c->n_embd,
                         (long long)c->n_head);
    if (c->n_head % c->n_head_kv)
        return amp_error(AMP_ERR_ARG, "%s: n_head %lld is not a multiple of n_head_kv %lld (grouped-query attention)", fn,
                         (long long)c->n_head, (long long)c->n_head_kv);
    if (!(c->rope_theta > 0) || !isfinite(c->rope_theta) || !(c->rms_eps > 0 && c->rms_eps < 1))
        return amp_error(AMP_ERR_ARG, "%s: rope_theta %g must be > 0 and finite, rms_eps %g in (0, 1)", fn, c->rope_theta, c->rms_eps);
    if (c->rope_layout != AMP_ROPE_INTERLEAVED && c->rope_layout != AMP_ROPE_HALVES)
        return amp_error(AMP_ERR_ARG, "%s: rope_layout %d is not AMP_ROPE_INTERLEAVED or AMP_ROPE_HALVES", fn, (int)c->rope_layout);
    return AMP_OK;
}

static llama_shared *shared_new(const char *fn, const amp_llama_config *c, amp_load_dtype ld) {
    llama_shared *s = calloc(1, sizeof *s);
    if (!s) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    atomic_init(&s->refs, 1);
    s->cfg = *c;
    s->ld = ld;
    return s;
}

/* random weights: N(0, 0.02), norms 1 */
static amp_status random_source(void *src, wrole r, int64_t layer, amp_tensor **w, amp_qtensor **q) {
    (void)layer;
    (void)q;
    const amp_llama_config *c = ((void **)src)[0];
    amp_generator *g = ((void **)src)[1];
    int64_t rows, cols;
    role_shape(c, r, &rows, &cols);
    amp_mem_push_category(AMP_MEM_PARAM);
    *w = role_is_norm(r) ? amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(rows)) : amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(rows, cols));
    amp_mem_pop_category();
    if (*w && !role_is_norm(r) && amp_tensor_normal_(*w, 0.0, 0.02, g) != AMP_OK) {
        amp_tensor_free(*w);
        *w = NULL;
    }
    return *w ? AMP_OK : amp_last_status();
}

amp_module *amp_llama_new(const amp_llama_config *c, amp_generator *g) {
    static const char *fn = "amp_llama_new";
    if (check_config(fn, c) != AMP_OK) return NULL;
    llama_shared *s = shared_new(fn, c, (amp_load_dtype){AMP_LOAD_FLOAT, AMP_F32, AMP_Q8_0});
    if (!s) return NULL;
    const void *src[2] = {c, g ? g : amp_default_generator()};
    amp_module *m = build(s, random_source, (void *)src);
    sh_release(s);
    return m;
}

amp_status amp_llama_get_config(const amp_module *m, amp_llama_config *out) {
    if (llama_of("amp_llama_get_config", m) != AMP_OK) return amp_last_status();
    if (!out) return amp_error(AMP_ERR_ARG, "amp_llama_get_config: out is NULL");
    *out = SH(m)->cfg;
    return AMP_OK;
}

amp_load_dtype amp_llama_load_dtype(const amp_module *m) {
    if (llama_of("amp_llama_load_dtype", m) != AMP_OK) return AMP_LOAD_DTYPE_KEEP;
    return SH(m)->ld;
}

/* bytes of the weights of m and its children, the tied head counted once */
static int64_t weight_bytes(amp_module *m, const amp_qtensor **seen, int *n_seen) {
    int64_t b = 0;
    const amp_module_class *cls = amp_module_class_of(m);
    if (cls == &linear_class || cls == &embedding_class) {
        mod_data *d = amp_module_data(m);
        if (d->q) {
            for (int i = 0; i < *n_seen; i++)
                if (seen[i] == d->q) return 0;
            if (*n_seen < 2) seen[(*n_seen)++] = d->q;
            return (int64_t)amp_qtensor_nbytes(d->q);
        }
    }
    for (int i = 0; i < amp_module_num_children(m); i++) b += weight_bytes(amp_module_child_at(m, i, NULL), seen, n_seen);
    return b;
}

int64_t amp_llama_weight_bytes(const amp_module *m) {
    if (llama_of("amp_llama_weight_bytes", m) != AMP_OK) return -1;
    amp_module *mm = (amp_module *)m; /* read only: the parameter list is not changed */
    const amp_qtensor *seen[2];
    int n_seen = 0;
    int64_t b = weight_bytes(mm, seen, &n_seen);
    int np = amp_module_parameters(mm, NULL, NULL, 0); /* unique parameters: a tied one once */
    amp_tensor **ps = calloc((size_t)np + 1, sizeof *ps);
    if (!ps) return amp_error_neg(AMP_ERR_NOMEM, "amp_llama_weight_bytes: out of memory");
    amp_module_parameters(mm, ps, NULL, np);
    for (int i = 0; i < np; i++) b += (int64_t)amp_tensor_nbytes(ps[i]);
    free(ps);
    return b;
}

const amp_tokenizer *amp_llama_tokenizer(const amp_module *m) {
    if (llama_of("amp_llama_tokenizer", m) != AMP_OK) return NULL;
    if (!SH(m)->tok) return amp_error_null(AMP_ERR_ARG, "amp_llama_tokenizer: this model has no tokenizer (made by amp_llama_new, "
                                                        "from a Hugging Face directory, or a GGUF file without one)");
    return SH(m)->tok;
}

const char *amp_llama_chat_template(const amp_module *m) {
    if (llama_of("amp_llama_chat_template", m) != AMP_OK) return NULL;
    return SH(m)->chat_template;
}

int amp_llama_stop_tokens(const amp_module *m, const int64_t **ids) {
    if (llama_of("amp_llama_stop_tokens", m) != AMP_OK) return -1;
    if (!ids) return amp_error_neg(AMP_ERR_ARG, "amp_llama_stop_tokens: ids is NULL");
    *ids = SH(m)->stop;
    return SH(m)->n_stop;
}

/* ---- GGUF --------------------------------------------------------------------------------------------- */
static const char *const gguf_layer_names[W_COUNT] = {
    [W_EMBED] = "token_embd", [W_NORM] = "output_norm", [W_HEAD] = "output",   [W_ATTN_NORM] = "attn_norm",
    [W_Q] = "attn_q",         [W_K] = "attn_k",         [W_V] = "attn_v",      [W_O] = "attn_output",
    [W_FFN_NORM] = "ffn_norm", [W_GATE] = "ffn_gate",   [W_UP] = "ffn_up",     [W_DOWN] = "ffn_down"};

static void gguf_name(wrole r, int64_t layer, char *b, size_t n) {
    if (r < W_FIRST_LAYER) snprintf(b, n, "%s.weight", gguf_layer_names[r]);
    else snprintf(b, n, "blk.%lld.%s.weight", (long long)layer, gguf_layer_names[r]);
}

/* ggml's float types as amp dtypes (AMP_DTYPE_COUNT: not a float type) */
static amp_dtype ggml_float(uint32_t t) { return t == 0 ? AMP_F32 : t == 1 ? AMP_F16 : t == 30 ? AMP_BF16 : AMP_DTYPE_COUNT; }

/* An integer key: required (dflt < 0) or dflt when absent; in lo..hi. */
static amp_status gguf_int(const amp_gguf *f, const char *key, int64_t dflt, int64_t lo, int64_t hi, int64_t *out) {
    if (dflt >= 0 && amp_gguf_find_key(f, key) < 0) {
        *out = dflt;
        return AMP_OK;
    }
    if (amp_gguf_get_int(f, key, out) != AMP_OK) return amp_error_chain(AMP_OK, "amp_llama_config_from_gguf: %s", key);
    if (*out < lo || *out > hi)
        return amp_error(AMP_ERR_FORMAT, "amp_llama_config_from_gguf: %s is %lld, outside %lld..%lld", key, (long long)*out,
                         (long long)lo, (long long)hi);
    return AMP_OK;
}

static amp_status gguf_float(const amp_gguf *f, const char *key, double dflt, double *out) {
    if (amp_gguf_find_key(f, key) < 0) {
        if (isnan(dflt)) return amp_error(AMP_ERR_FORMAT, "amp_llama_config_from_gguf: the key %s is missing", key);
        *out = dflt;
        return AMP_OK;
    }
    if (amp_gguf_get_float(f, key, out) != AMP_OK) return amp_error_chain(AMP_OK, "amp_llama_config_from_gguf: %s", key);
    return AMP_OK;
}

/* The tensor of role r (layer l) present with its shape and a usable type. */
static amp_status gguf_check_tensor(const amp_gguf *f, const amp_llama_config *c, wrole r, int64_t l) {
    static const char *fn = "amp_llama_config_from_gguf";
    char name[96];
    gguf_name(r, l, name, sizeof name);
    int64_t i = amp_gguf_find_tensor(f, name);
    if (i < 0) return amp_error(AMP_ERR_FORMAT, "%s: the tensor %s is missing", fn, name);
    amp_gguf_tensor_info in;
    if (amp_gguf_tensor_at(f, i, &in) != AMP_OK) return amp_error_chain(AMP_OK, "%s: tensor %s", fn, name);
    int64_t rows, cols;
    role_shape(c, r, &rows, &cols);
    bool norm = role_is_norm(r);
    /* GGUF order: ne[0] is the fastest, a torch [rows, cols] matrix has ne = {cols, rows} */
    if (in.ndim != (norm ? 1 : 2) || in.ne[0] != (norm ? rows : cols) || (!norm && in.ne[1] != rows)) {
        char got[64];
        if (in.ndim == 1) snprintf(got, sizeof got, "{%lld}", (long long)in.ne[0]);
        else snprintf(got, sizeof got, "{%lld, %lld%s}", (long long)in.ne[0], (long long)in.ne[1], in.ndim > 2 ? ", ..." : "");
        if (norm)
            return amp_error(AMP_ERR_SHAPE, "%s: tensor %s has ne %s, expected {%lld} (embedding_length)", fn, name, got, (long long)rows);
        return amp_error(AMP_ERR_SHAPE, "%s: tensor %s has ne %s, expected {%lld, %lld} (embedding_length %lld, "
                                        "feed_forward_length %lld, head_count %lld, head_count_kv %lld, vocabulary %lld)",
                         fn, name, got, (long long)cols, (long long)rows, (long long)c->n_embd, (long long)c->n_ff,
                         (long long)c->n_head, (long long)c->n_head_kv, (long long)c->vocab_size);
    }
    amp_qtype qt;
    if (ggml_float(in.ggml_type) == AMP_DTYPE_COUNT && (norm || amp_qtype_from_ggml_id(in.ggml_type, &qt) != AMP_OK))
        return amp_error(AMP_ERR_FORMAT, "%s: tensor %s has ggml type %u, which amp does not read%s", fn, name, in.ggml_type,
                         norm ? " for a norm (F32, F16 or BF16)" : " (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K)");
    return AMP_OK;
}

amp_status amp_llama_config_from_gguf(const amp_gguf *f, amp_llama_config *out) {
    static const char *fn = "amp_llama_config_from_gguf";
    if (!f || !out) return amp_error(AMP_ERR_ARG, "%s: %s is NULL", fn, !f ? "f" : "out");
    const char *arch;
    size_t an;
    if (amp_gguf_get_str(f, "general.architecture", &arch, &an) != AMP_OK) return amp_error_chain(AMP_OK, "%s", fn);
    if (an != 5 || memcmp(arch, "llama", 5))
        return amp_error(AMP_ERR_FORMAT, "%s: general.architecture is \"%.*s\", not \"llama\"", fn, (int)(an > 64 ? 64 : an), arch);
    amp_llama_config c = {0};
    c.rope_layout = AMP_ROPE_INTERLEAVED;
    int64_t rope_dim, vocab;
    if (gguf_int(f, "llama.block_count", -1, 1, 1000, &c.n_layer) != AMP_OK ||
        gguf_int(f, "llama.embedding_length", -1, 1, 1 << 20, &c.n_embd) != AMP_OK ||
        gguf_int(f, "llama.feed_forward_length", -1, 1, 1 << 22, &c.n_ff) != AMP_OK ||
        gguf_int(f, "llama.attention.head_count", -1, 1, 1 << 16, &c.n_head) != AMP_OK ||
        gguf_int(f, "llama.attention.head_count_kv", c.n_head, 1, 1 << 16, &c.n_head_kv) != AMP_OK ||
        gguf_int(f, "llama.context_length", -1, 1, 1 << 24, &c.context_length) != AMP_OK ||
        gguf_float(f, "llama.rope.freq_base", 10000.0, &c.rope_theta) != AMP_OK ||
        gguf_float(f, "llama.attention.layer_norm_rms_epsilon", NAN, &c.rms_eps) != AMP_OK)
        return amp_last_status();
    if (c.n_embd % c.n_head)
        return amp_error(AMP_ERR_FORMAT, "%s: llama.embedding_length %lld is not a multiple of llama.attention.head_count %lld", fn,
                         (long long)c.n_embd, (long long)c.n_head);
    if (c.n_head % c.n_head_kv)
        return amp_error(AMP_ERR_FORMAT, "%s: llama.attention.head_count %lld is not a multiple of llama.attention.head_count_kv %lld", fn,
                         (long long)c.n_head, (long long)c.n_head_kv);
    if (gguf_int(f, "llama.rope.dimension_count", c.n_embd / c.n_head, 1, 1 << 20, &rope_dim) != AMP_OK) return amp_last_status();
    if (rope_dim != c.n_embd / c.n_head)
        return amp_error(AMP_ERR_UNSUPPORTED, "%s: llama.rope.dimension_count %lld is not the head size %lld (partial rotary "
                                              "embeddings are not supported)",
                         fn, (long long)rope_dim, (long long)(c.n_embd / c.n_head));
    /* the vocabulary: token_embd's rows (llama.vocab_size, when present, must agree) */
    int64_t ie = amp_gguf_find_tensor(f, "token_embd.weight");
    amp_gguf_tensor_info emb;
    if (ie < 0) return amp_error(AMP_ERR_FORMAT, "%s: the tensor token_embd.weight is missing", fn);
    if (amp_gguf_tensor_at(f, ie, &emb) != AMP_OK) return amp_error_chain(AMP_OK, "%s: token_embd.weight", fn);
    if (emb.ndim != 2 || emb.ne[1] < 1)
        return amp_error(AMP_ERR_SHAPE, "%s: token_embd.weight must be a matrix {embedding_length, vocabulary}, it has %d dimensions",
                         fn, emb.ndim);
    c.vocab_size = emb.ne[1];
    if (gguf_int(f, "llama.vocab_size", c.vocab_size, 1, 1 << 26, &vocab) != AMP_OK) return amp_last_status();
    if (vocab != c.vocab_size)
        return amp_error(AMP_ERR_SHAPE, "%s: llama.vocab_size %lld, but token_embd.weight has %lld rows", fn, (long long)vocab,
                         (long long)c.vocab_size);
    c.tied = amp_gguf_find_tensor(f, "output.weight") < 0;
    if (check_config(fn, &c) != AMP_OK) return amp_error_chain(AMP_OK, "%s: the file's sizes", fn);
    for (int r = 0; r < W_FIRST_LAYER; r++)
        if (!(r == W_HEAD && c.tied) && gguf_check_tensor(f, &c, (wrole)r, 0) != AMP_OK) return amp_last_status();
    for (int64_t l = 0; l < c.n_layer; l++)
        for (int r = W_FIRST_LAYER; r < W_COUNT; r++)
            if (gguf_check_tensor(f, &c, (wrole)r, l) != AMP_OK) return amp_last_status();
    char extra[96];
    gguf_name(W_ATTN_NORM, c.n_layer, extra, sizeof extra);
    if (amp_gguf_find_tensor(f, extra) >= 0)
        return amp_error(AMP_ERR_FORMAT, "%s: the file has %s but llama.block_count is %lld", fn, extra, (long long)c.n_layer);
    *out = c;
    return AMP_OK;
}

typedef struct {
    const amp_gguf *f;
    amp_load_dtype ld;
} gguf_src;

/* A float tensor of dt (f32/f16/bf16) or a qtensor, as ld asks, for a
 * matrix the file holds as the float dtype file_dt, or quantized as *file_q
 * (file_dt AMP_DTYPE_COUNT). */
typedef struct {
    amp_tensor *(*get_float)(void *src, const char *name, amp_dtype dt);
    amp_qtensor *(*get_q)(void *src, const char *name);
    void *src;
} matrix_reader;

static amp_status load_matrix(const char *fn, const char *name, amp_dtype file_dt, const amp_qtype *file_q, amp_load_dtype ld,
                              const matrix_reader *rd, amp_tensor **w, amp_qtensor **q) {
    if (ld.kind == AMP_LOAD_KEEP) {
        if (file_q) *q = rd->get_q(rd->src, name);
        else *w = rd->get_float(rd->src, name, file_dt);
    } else if (ld.kind == AMP_LOAD_FLOAT) {
        *w = rd->get_float(rd->src, name, ld.dtype);
    } else if (file_q && *file_q == ld.qtype) {
        *q = rd->get_q(rd->src, name); /* already of that type: the file's bytes */
    } else {
        amp_tensor *t = rd->get_float(rd->src, name, AMP_F32);
        *q = t ? amp_quantize(t, ld.qtype) : NULL;
        amp_tensor_free(t);
    }
    if (*w || *q) return AMP_OK;
    return amp_error_chain(AMP_OK, "%s: loading %s as %s", fn, name, amp_load_dtype_name(ld));
}

static amp_tensor *gguf_get_float(void *src, const char *name, amp_dtype dt) {
    return amp_gguf_get_tensor(((gguf_src *)src)->f, name, dt);
}
static amp_qtensor *gguf_get_q(void *src, const char *name) { return amp_gguf_get_qtensor(((gguf_src *)src)->f, name); }

static amp_status gguf_source(void *src, wrole r, int64_t layer, amp_tensor **w, amp_qtensor **q) {
    gguf_src *s = src;
    char name[96];
    gguf_name(r, layer, name, sizeof name);
    amp_mem_push_category(AMP_MEM_PARAM);
    amp_status st;
    if (role_is_norm(r)) {
        *w = amp_gguf_get_tensor(s->f, name, AMP_F32);
        st = *w ? AMP_OK : amp_error_chain(AMP_OK, "amp_llama_from_gguf: %s", name);
    } else {
        amp_gguf_tensor_info in;
        st = amp_gguf_tensor_at(s->f, amp_gguf_find_tensor(s->f, name), &in);
        amp_qtype fq;
        amp_dtype fd = ggml_float(in.ggml_type);
        bool quant = fd == AMP_DTYPE_COUNT && amp_qtype_from_ggml_id(in.ggml_type, &fq) == AMP_OK;
        matrix_reader rd = {gguf_get_float, gguf_get_q, src};
        if (st == AMP_OK) st = load_matrix("amp_llama_from_gguf", name, fd, quant ? &fq : NULL, s->ld, &rd, w, q);
    }
    amp_mem_pop_category();
    return st;
}

/* Load-dtype checks that need the sizes: a quantized load needs every
 * matrix's row length a multiple of the block. */
static amp_status check_load(const char *fn, const amp_llama_config *c, amp_load_dtype ld) {
    if (ld.kind == AMP_LOAD_FLOAT && ld.dtype != AMP_F32 && ld.dtype != AMP_F16 && ld.dtype != AMP_BF16)
        return amp_error(AMP_ERR_ARG, "%s: load dtype %s: a float load is f32, f16 or bf16", fn, amp_dtype_name(ld.dtype));
    if (ld.kind == AMP_LOAD_QUANT) {
        if ((int)ld.qtype < 0 || ld.qtype >= AMP_QTYPE_COUNT) return amp_error(AMP_ERR_ARG, "%s: load qtype %d is not a qtype", fn, (int)ld.qtype);
        int64_t be = amp_qtype_block_elems(ld.qtype);
        if (c->n_embd % be || c->n_ff % be || (c->n_head * (c->n_embd / c->n_head)) % be)
            return amp_error(AMP_ERR_ARG, "%s: load dtype %s needs rows of whole blocks of %lld: n_embd %lld, n_ff %lld", fn,
                             amp_qtype_name(ld.qtype), (long long)be, (long long)c->n_embd, (long long)c->n_ff);
    } else if (ld.kind != AMP_LOAD_KEEP && ld.kind != AMP_LOAD_FLOAT) {
        return amp_error(AMP_ERR_ARG, "%s: load kind %d is not keep, float or quant", fn, (int)ld.kind);
    }
    return AMP_OK;
}

/* The default stop tokens: eos and the end-of-turn tokens the vocabulary has. */
static void gguf_stops(const amp_gguf *f, llama_shared *s) {
    int64_t eos;
    s->n_stop = 0;
    if (amp_gguf_find_key(f, "tokenizer.ggml.eos_token_id") >= 0 && amp_gguf_get_int(f, "tokenizer.ggml.eos_token_id", &eos) == AMP_OK &&
        eos >= 0 && eos < s->cfg.vocab_size)
        s->stop[s->n_stop++] = eos;
    static const char *const ends[] = {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>"};
    uint64_t n = 0;
    int64_t ki = amp_gguf_find_key(f, "tokenizer.ggml.tokens");
    if (ki < 0 || amp_gguf_kv_type(f, ki) != AMP_GGUF_ARRAY || amp_gguf_arr_type(f, ki) != AMP_GGUF_STRING) return;
    n = amp_gguf_arr_len(f, ki);
    for (uint64_t i = 0; i < n && i < (uint64_t)s->cfg.vocab_size && s->n_stop < 4; i++) {
        const char *t;
        size_t tn;
        if (amp_gguf_get_arr_str(f, "tokenizer.ggml.tokens", i, &t, &tn) != AMP_OK || tn < 9 || tn > 15 || t[0] != '<') continue;
        for (size_t e = 0; e < sizeof ends / sizeof ends[0]; e++)
            if (strlen(ends[e]) == tn && !memcmp(t, ends[e], tn) && (s->n_stop == 0 || s->stop[0] != (int64_t)i))
                s->stop[s->n_stop++] = (int64_t)i;
    }
}

amp_module *amp_llama_from_gguf(const char *path, amp_load_dtype ld) {
    static const char *fn = "amp_llama_from_gguf";
    if (!path) return amp_error_null(AMP_ERR_ARG, "%s: path is NULL", fn);
    amp_gguf *f = amp_gguf_open(path);
    if (!f) return amp_error_chain_null(AMP_OK, "%s: %s", fn, path);
    amp_llama_config c;
    amp_module *m = NULL;
    llama_shared *s = NULL;
    if (amp_llama_config_from_gguf(f, &c) != AMP_OK || check_load(fn, &c, ld) != AMP_OK) {
        amp_error_chain(AMP_OK, "%s: %s", fn, path);
        goto out;
    }
    if (!(s = shared_new(fn, &c, ld))) goto out;
    gguf_stops(f, s);
    gguf_src src = {f, ld};
    m = build(s, gguf_source, &src);
    const char *tpl;
    size_t tn;
    if (m && amp_gguf_find_key(f, "tokenizer.ggml.model") >= 0 && !(s->tok = amp_tokenizer_from_gguf(f))) {
        amp_error_chain(AMP_OK, "%s: %s: its tokenizer", fn, path);
        amp_module_free(m);
        m = NULL;
    }
    if (m && amp_gguf_find_key(f, "tokenizer.chat_template") >= 0) {
        bool got = amp_gguf_get_str(f, "tokenizer.chat_template", &tpl, &tn) == AMP_OK;
        if (!got || !(s->chat_template = malloc(tn + 1))) {
            if (got) amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
            amp_error_chain(AMP_OK, "%s: %s: tokenizer.chat_template", fn, path);
            amp_module_free(m);
            m = NULL;
        } else {
            memcpy(s->chat_template, tpl, tn);
            s->chat_template[tn] = 0;
        }
    }
out:
    sh_release(s);
    amp_gguf_close(f);
    return m;
}

/* ---- Hugging Face directories ------------------------------------------------------------------------- */
static const char *const hf_names[W_COUNT] = {
    [W_EMBED] = "model.embed_tokens",          [W_NORM] = "model.norm",          [W_HEAD] = "lm_head",
    [W_ATTN_NORM] = "input_layernorm",         [W_Q] = "self_attn.q_proj",       [W_K] = "self_attn.k_proj",
    [W_V] = "self_attn.v_proj",                [W_O] = "self_attn.o_proj",       [W_FFN_NORM] = "post_attention_layernorm",
    [W_GATE] = "mlp.gate_proj",                [W_UP] = "mlp.up_proj",           [W_DOWN] = "mlp.down_proj"};

/* LlamaForCausalLM's state_dict names (the module's parameter names) */
static void hf_name(wrole r, int64_t layer, char *b, size_t n) {
    if (r < W_FIRST_LAYER) snprintf(b, n, "%s.weight", hf_names[r]);
    else snprintf(b, n, "model.layers.%lld.%s.weight", (long long)layer, hf_names[r]);
}

static amp_dtype float_dtype(amp_dtype dt) { return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16 ? dt : AMP_DTYPE_COUNT; }

typedef struct {
    const amp_hf_dir *d;
    const amp_llama_config *c;
    amp_load_dtype ld;
} hf_src;

static amp_tensor *hf_get_float(void *src, const char *name, amp_dtype dt) {
    hf_src *s = src;
    amp_safetensors_info in;
    if (amp_hf_dir_tensor_info(s->d, name, &in) != AMP_OK) return NULL;
    return amp_hf_dir_get(s->d, name, dt, in.ndim, in.shape); /* the shape was checked before the build */
}

static amp_status hf_source(void *src, wrole r, int64_t layer, amp_tensor **w, amp_qtensor **q) {
    hf_src *s = src;
    char name[128];
    hf_name(r, layer, name, sizeof name);
    amp_mem_push_category(AMP_MEM_PARAM);
    amp_status st = AMP_OK;
    if (role_is_norm(r)) {
        *w = hf_get_float(src, name, AMP_F32);
        if (!*w) st = amp_error_chain(AMP_OK, "amp_llama_from_pretrained: %s", name);
    } else {
        amp_safetensors_info in;
        matrix_reader rd = {hf_get_float, NULL, src};
        st = amp_hf_dir_tensor_info(s->d, name, &in);
        if (st == AMP_OK) st = load_matrix("amp_llama_from_pretrained", name, in.dtype, NULL, s->ld, &rd, w, q);
    }
    amp_mem_pop_category();
    return st;
}

static amp_status hf_int(const amp_hf_dir *d, const char *key, int64_t dflt, int64_t *out) {
    if (dflt >= 0 && !amp_hf_config_has(d, key)) {
        *out = dflt;
        return AMP_OK;
    }
    return amp_hf_config_int(d, key, out);
}

/* The configuration of a directory's config.json, then every tensor's
 * presence, float dtype and shape, before anything is allocated. */
static amp_status hf_config(const amp_hf_dir *d, amp_llama_config *c) {
    static const char *fn = "amp_llama_from_pretrained";
    const char *mt = NULL, *act = NULL;
    if (amp_hf_config_str(d, "model_type", &mt) != AMP_OK) return amp_error_chain(AMP_OK, "%s", fn);
    if (strcmp(mt, "llama"))
        return amp_error(AMP_ERR_FORMAT, "%s: %s/config.json: model_type is \"%.64s\", not \"llama\"", fn, amp_hf_dir_path(d), mt);
    memset(c, 0, sizeof *c);
    c->rope_layout = AMP_ROPE_HALVES;
    c->rope_theta = 10000.0;
    bool tied = false, bias = false;
    if (amp_hf_config_int(d, "num_hidden_layers", &c->n_layer) != AMP_OK || amp_hf_config_int(d, "hidden_size", &c->n_embd) != AMP_OK ||
        amp_hf_config_int(d, "intermediate_size", &c->n_ff) != AMP_OK ||
        amp_hf_config_int(d, "num_attention_heads", &c->n_head) != AMP_OK ||
        hf_int(d, "num_key_value_heads", c->n_head, &c->n_head_kv) != AMP_OK || amp_hf_config_int(d, "vocab_size", &c->vocab_size) != AMP_OK ||
        amp_hf_config_int(d, "max_position_embeddings", &c->context_length) != AMP_OK ||
        amp_hf_config_float(d, "rms_norm_eps", &c->rms_eps) != AMP_OK ||
        (amp_hf_config_has(d, "rope_theta") && amp_hf_config_float(d, "rope_theta", &c->rope_theta) != AMP_OK) ||
        (amp_hf_config_has(d, "tie_word_embeddings") && amp_hf_config_bool(d, "tie_word_embeddings", &tied) != AMP_OK) ||
        (amp_hf_config_has(d, "attention_bias") && amp_hf_config_bool(d, "attention_bias", &bias) != AMP_OK) ||
        (amp_hf_config_has(d, "hidden_act") && amp_hf_config_str(d, "hidden_act", &act) != AMP_OK))
        return amp_error_chain(AMP_OK, "%s", fn);
    c->tied = tied;
    int64_t hd = 0;
    if (amp_hf_config_has(d, "head_dim") && (amp_hf_config_int(d, "head_dim", &hd) != AMP_OK))
        return amp_error_chain(AMP_OK, "%s", fn);
    const char *unsup = bias                                                   ? "attention_bias true (biases in q/k/v/o)"
                        : act && strcmp(act, "silu")                           ? "a hidden_act other than silu"
                        : amp_hf_config_has(d, "rope_scaling")                 ? "rope_scaling"
                        : hd && c->n_head > 0 && hd * c->n_head != c->n_embd   ? "a head_dim other than hidden_size / num_attention_heads"
                                                                               : NULL;
    if (unsup) return amp_error(AMP_ERR_UNSUPPORTED, "%s: %s/config.json has %s, which amp's Llama does not support", fn, amp_hf_dir_path(d), unsup);
    if (check_config(fn, c) != AMP_OK) return amp_error_chain(AMP_OK, "%s: %s/config.json", fn, amp_hf_dir_path(d));
    for (int64_t l = -1; l < c->n_layer; l++)
        for (int r = l < 0 ? 0 : W_FIRST_LAYER; r < (l < 0 ? W_FIRST_LAYER : W_COUNT); r++) {
            char name[128];
            hf_name((wrole)r, l, name, sizeof name);
            amp_safetensors_info in;
            if (r == W_HEAD && c->tied && !amp_hf_dir_has_tensor(d, name)) continue;
            if (!amp_hf_dir_has_tensor(d, name))
                return amp_error(AMP_ERR_FORMAT, "%s: %s: the tensor %s is missing", fn, amp_hf_dir_path(d), name);
            if (amp_hf_dir_tensor_info(d, name, &in) != AMP_OK) return amp_error_chain(AMP_OK, "%s", fn);
            int64_t rows, cols;
            role_shape(c, (wrole)r, &rows, &cols);
            bool norm = role_is_norm((wrole)r);
            if (float_dtype(in.dtype) == AMP_DTYPE_COUNT)
                return amp_error(AMP_ERR_DTYPE, "%s: %s: tensor %s is %s, not f32, f16 or bf16", fn, amp_hf_dir_path(d), name,
                                 amp_dtype_name(in.dtype));
            if (in.ndim != (norm ? 1 : 2) || in.shape[0] != rows || (!norm && in.shape[1] != cols))
                return amp_error(AMP_ERR_SHAPE, "%s: %s: tensor %s is not [%lld%s%lld] (hidden_size %lld, intermediate_size %lld, "
                                                "heads %lld / %lld, vocab_size %lld)",
                                 fn, amp_hf_dir_path(d), name, (long long)rows, norm ? "" : ", ", norm ? 0LL : (long long)cols,
                                 (long long)c->n_embd, (long long)c->n_ff, (long long)c->n_head, (long long)c->n_head_kv,
                                 (long long)c->vocab_size);
        }
    return AMP_OK;
}

amp_module *amp_llama_from_pretrained(const char *dir, amp_load_dtype ld) {
    static const char *fn = "amp_llama_from_pretrained";
    if (!dir) return amp_error_null(AMP_ERR_ARG, "%s: dir is NULL", fn);
    amp_hf_dir *d = amp_hf_dir_open(dir);
    if (!d) return amp_error_chain_null(AMP_OK, "%s", fn);
    amp_llama_config c;
    amp_module *m = NULL;
    llama_shared *s = NULL;
    if (hf_config(d, &c) != AMP_OK || check_load(fn, &c, ld) != AMP_OK) goto out;
    if (!(s = shared_new(fn, &c, ld))) goto out;
    int64_t eos;
    if (amp_hf_config_has(d, "eos_token_id") && amp_hf_config_int(d, "eos_token_id", &eos) == AMP_OK && eos >= 0 && eos < c.vocab_size)
        s->stop[s->n_stop++] = eos;
    hf_src src = {d, &c, ld};
    m = build(s, hf_source, &src);
out:
    sh_release(s);
    amp_hf_dir_close(d);
    return m;
}

/* ---- the KV cache --------------------------------------------------------------------------------------- */
amp_llama_cache *amp_llama_cache_new(amp_module *m, int64_t batch, int64_t capacity) {
    static const char *fn = "amp_llama_cache_new";
    if (llama_of(fn, m) != AMP_OK) return NULL;
    const amp_llama_config *cf = &SH(m)->cfg;
    if (capacity == 0) capacity = cf->context_length;
    if (batch < 1 || batch > (1 << 20) || capacity < 1 || capacity > cf->context_length)
        return amp_error_null(AMP_ERR_ARG, "%s: batch %lld must be in 1..2^20, capacity %lld in 1..context_length %lld (0: all)", fn,
                              (long long)batch, (long long)capacity, (long long)cf->context_length);
    /* the cache's size checked before anything is allocated */
    amp_ck ck = AMP_CK(fn, "the KV cache's size");
    int64_t per = amp_ck_mul(&ck, amp_ck_mul(&ck, amp_ck_mul(&ck, batch, cf->n_head_kv), capacity), cf->n_embd / cf->n_head);
    amp_ck_mul(&ck, amp_ck_mul(&ck, per, 2 * 4), cf->n_layer);
    if (!ck.ok) return NULL;
    amp_llama_cache *c = calloc(1, sizeof *c);
    if (c) {
        c->k = calloc((size_t)cf->n_layer, sizeof *c->k);
        c->v = calloc((size_t)cf->n_layer, sizeof *c->v);
    }
    if (!c || !c->k || !c->v) {
        if (c) free(c->k), free(c->v);
        free(c);
        return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    }
    c->m = amp_module_retain(m);
    c->B = batch;
    c->cap = capacity;
    c->n_layer = (int)cf->n_layer;
    return c;
}

void amp_llama_cache_free(amp_llama_cache *c) {
    if (!c) return;
    for (int l = 0; l < c->n_layer; l++) {
        amp_tensor_free(c->k[l]);
        amp_tensor_free(c->v[l]);
    }
    free(c->k);
    free(c->v);
    amp_module_free(c->m);
    free(c);
}

void amp_llama_cache_reset(amp_llama_cache *c) {
    if (c) c->len = 0;
}
int64_t amp_llama_cache_length(const amp_llama_cache *c) {
    if (!c) return amp_error_neg(AMP_ERR_ARG, "amp_llama_cache_length: cache is NULL");
    return c->len;
}
int64_t amp_llama_cache_capacity(const amp_llama_cache *c) {
    if (!c) return amp_error_neg(AMP_ERR_ARG, "amp_llama_cache_capacity: cache is NULL");
    return c->cap;
}

/* The forward with a cache: no grad, eval semantics, the model's io
 * settings (autocast, output cast) as amp_module_forward would apply them. */
static amp_tensor *forward_cached(const char *fn, amp_module *m, amp_tensor *idx, amp_llama_cache *c, bool last_only) {
    if (c->m != m) return amp_error_null(AMP_ERR_ARG, "%s: the cache was made for another model", fn);
    if (check_idx(fn, m, idx, c->B, c->cap - c->len) != AMP_OK) return NULL;
    amp_module_io io;
    bool has_io = amp_module_get_io(m, &io);
    amp_no_grad_begin();
    amp_module_eval_begin();
    bool ac = has_io && io.autocast && amp_autocast_enter(io.autocast_dtype) == AMP_OK;
    amp_tensor *logits = llama_run(m, idx, c, last_only);
    if (logits && has_io && io.output != AMP_DTYPE_COUNT && amp_tensor_dtype(logits) != io.output) {
        amp_tensor *o = amp_to(logits, io.output);
        amp_tensor_free(logits);
        logits = o;
    }
    if (logits) c->len += amp_tensor_dim(idx, 1);
    if (ac) amp_autocast_exit();
    amp_module_eval_end();
    amp_no_grad_end();
    return logits;
}

static amp_tensor *forward_any(const char *fn, amp_module *m, amp_tensor *idx, amp_llama_cache *c, bool last_only) {
    if (!idx) return amp_error_null(AMP_ERR_ARG, "%s: idx is NULL", fn);
    if (amp_tensor_ndim(idx) < 0) return amp_error_chain_null(AMP_OK, "%s: idx", fn); /* a freed tensor, named */
    if (llama_of(fn, m) != AMP_OK) return NULL;
    if (c) return forward_cached(fn, m, idx, c, last_only);
    if (!last_only) return amp_module_forward(m, idx);
    if (check_idx(fn, m, idx, -1, SH(m)->cfg.context_length) != AMP_OK) return NULL;
    return llama_run(m, idx, NULL, true);
}

amp_tensor *amp_llama_forward(amp_module *m, amp_tensor *idx, amp_llama_cache *c) {
    return forward_any("amp_llama_forward", m, idx, c, false);
}
amp_tensor *amp_llama_forward_last(amp_module *m, amp_tensor *idx, amp_llama_cache *c) {
    return forward_any("amp_llama_forward_last", m, idx, c, true);
}

/* ---- generation ----------------------------------------------------------------------------------------- */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    double s; /* (logit - max) / temperature */
    int64_t v;
} cand;

static int cand_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    return x->s > y->s ? -1 : x->s < y->s ? 1 : (x->v > y->v) - (x->v < y->v);
}

/* The next token from a logits row (V floats): argmax, or a draw from
 * softmax(logits / T) cut to the top_k largest, then to the nucleus of
 * top_p. Tokens whose probability is below e^-40 of the most likely one
 * (2e-18) are never candidates: no draw of a double could reach them. */
static int64_t pick(const float *row, int64_t V, const amp_llama_generate_opts *o, amp_generator *g, cand *cs) {
    int64_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (row[v] > row[best]) best = v;
    if (o->temperature <= 0) return best;
    int64_t n = 0;
    for (int64_t v = 0; v < V; v++) {
        double s = ((double)row[v] - (double)row[best]) / o->temperature;
        if (s >= -40) cs[n++] = (cand){s, v};
    }
    qsort(cs, (size_t)n, sizeof *cs, cand_desc);
    if (o->top_k > 0 && o->top_k < n) n = o->top_k;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += cs[i].s = exp(cs[i].s);
    if (o->top_p < 1) { /* the smallest prefix whose probability reaches top_p */
        double acc = 0;
        int64_t k = 0;
        while (k < n && acc < o->top_p * sum) acc += cs[k++].s;
        n = k > 0 ? k : 1;
        sum = acc > 0 ? acc : cs[0].s;
    }
    amp_tensor *u = amp_tensor_uniform(AMP_F64, 1, AMP_SHAPE(1), 0.0, 1.0, g);
    double r = u ? amp_tensor_item(u) * sum : 0, acc = 0;
    amp_tensor_free(u);
    for (int64_t i = 0; i < n; i++) {
        acc += cs[i].s;
        if (r < acc) return cs[i].v;
    }
    return cs[n - 1].v;
}

static bool is_stop(const amp_llama_generate_opts *o, const llama_shared *s, int64_t tok) {
    const int64_t *st = o->n_stop > 0 ? o->stop_tokens : o->n_stop == 0 && !o->stop_tokens ? s->stop : NULL;
    int n = o->n_stop > 0 ? o->n_stop : o->n_stop == 0 && !o->stop_tokens ? s->n_stop : 0;
    for (int i = 0; st && i < n; i++)
        if (st[i] == tok) return true;
    return false;
}

amp_status amp_llama_generate(amp_module *m, const int64_t *prompt, int64_t n, int64_t *out, int64_t *n_out,
                              const amp_llama_generate_opts *o) {
    static const char *fn = "amp_llama_generate";
    if (llama_of(fn, m) != AMP_OK) return amp_last_status();
    if (n_out) *n_out = 0;
    amp_llama_generate_opts d = AMP_LLAMA_GENERATE_DEFAULTS;
    if (!o) o = &d;
    if (o->stats) *o->stats = (amp_llama_gen_stats){0, 0, 0, 0};
    if (!prompt || n < 1 || !n_out || (o->max_new_tokens > 0 && !out))
        return amp_error(AMP_ERR_ARG, "%s: need a prompt of at least one token, out and n_out", fn);
    const llama_shared *s = SH(m);
    const amp_llama_config *cf = &s->cfg;
    int64_t V = cf->vocab_size, ctx = cf->context_length;
    if (o->max_new_tokens < 0 || o->max_new_tokens > (1 << 24) || n > ctx)
        return amp_error(AMP_ERR_ARG, "%s: max_new_tokens %lld must be in 0..2^24, the prompt's %lld tokens at most the context "
                                      "length %lld",
                         fn, (long long)o->max_new_tokens, (long long)n, (long long)ctx);
    if (!(o->temperature >= 0) || !isfinite(o->temperature) || o->top_k < 0 || !(o->top_p > 0 && o->top_p <= 1))
        return amp_error(AMP_ERR_ARG, "%s: temperature %g must be >= 0 and finite, top_k %lld >= 0, top_p %g in (0, 1]", fn,
                         o->temperature, (long long)o->top_k, o->top_p);
    if (o->n_stop > 0 && !o->stop_tokens) return amp_error(AMP_ERR_ARG, "%s: n_stop %d with stop_tokens NULL", fn, o->n_stop);
    for (int64_t i = 0; i < n; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return amp_error(AMP_ERR_RANGE, "%s: prompt token %lld (at %lld) is outside the vocabulary 0..%lld", fn,
                             (long long)prompt[i], (long long)i, (long long)V - 1);
    int64_t total = n + o->max_new_tokens < ctx ? n + o->max_new_tokens : ctx;
    amp_generator *g = o->generator ? o->generator : amp_default_generator();
    int64_t *seq = malloc(sizeof(int64_t) * (size_t)total);
    cand *cs = malloc(sizeof(cand) * (size_t)V);
    float *row = malloc(sizeof(float) * (size_t)V);
    amp_llama_cache *cache = o->use_kv_cache && total > n ? amp_llama_cache_new(m, 1, total) : NULL;
    amp_status st = AMP_OK;
    if (!seq || !cs || !row || (o->use_kv_cache && total > n && !cache)) {
        st = cache || !o->use_kv_cache ? amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn) : amp_last_status();
        goto done;
    }
    memcpy(seq, prompt, sizeof(int64_t) * (size_t)n);
    amp_module_eval_begin();
    amp_no_grad_begin();
    int64_t len = n;
    double t0 = now_s(), t1 = t0;
    while (len < total && st == AMP_OK) {
        amp_scope *sc = amp_scope_begin();
        int64_t from = cache ? amp_llama_cache_length(cache) : 0;
        amp_tensor *x = sc ? amp_tensor_from_data(seq + from, AMP_I64, 2, AMP_SHAPE(1, len - from)) : NULL;
        amp_tensor *logits = x ? amp_llama_forward_last(m, x, cache) : NULL;
        st = logits ? amp_tensor_copy_out(logits, row, AMP_F32) : amp_last_status();
        if (sc) amp_scope_end(sc);
        if (st != AMP_OK) break;
        int64_t v = 0;
        while (v < V && isfinite(row[v])) v++;
        if (v < V) {
            st = amp_error(AMP_ERR_RANGE, "%s: the logits of step %lld are not finite (token %lld: %g): the weights are damaged, or "
                                          "a half precision overflowed (try f32 / bf16)",
                           fn, (long long)(len - n + 1), (long long)v, (double)row[v]);
            break;
        }
        int64_t tok = pick(row, V, o, g, cs);
        if (len == n) t1 = now_s();
        seq[len++] = tok;
        out[len - n - 1] = tok;
        *n_out = len - n;
        if (o->stats) {
            double t = now_s();
            *o->stats = (amp_llama_gen_stats){t1 - t0, t - t1, n, len - n - 1};
        }
        if (is_stop(o, s, tok) || (o->on_token && !o->on_token(o->user, tok))) break;
    }
    amp_no_grad_end();
    amp_module_eval_end();
done:
    amp_llama_cache_free(cache);
    free(seq);
    free(cs);
    free(row);
    return st;
}

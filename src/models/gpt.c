/* GPT-2 as nanoGPT writes it, built with the public module API only
 * (amp/nn.h), as a user's model would be: the module tree and parameter
 * names of nanoGPT's GPT, its initialisation, weight tying through one
 * shared parameter, activation checkpointing through
 * amp_activation_checkpoint, a KV cache for generation. amp/gpt.h has the
 * contract. Shapes in comments: B batch, T sequence, C n_embd, nh heads,
 * hs = C / nh, V vocabulary. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "core/error.h"
#include "amp/scaler_impl.h" /* the weight check: the backend's multi-tensor check (amp__scaler_first_nonfinite) */

/* What every module of one GPT shares (reference counted: a block may
 * outlive the model that made it). */
typedef struct {
    atomic_int refs;
    amp_gpt_config cfg;
    amp_generator *gen; /* dropout */
    bool checkpoint;
    double ln_eps;      /* 1e-5 (nanoGPT, GPT-2); a Hugging Face config's layer_norm_epsilon */
    amp_gelu_approx act; /* tanh (gelu_new); erf for a config's "gelu" */
    bool quantized;     /* the linear layers and wte hold qtensors (amp_gpt_set_load_dtype) */
    amp_qtype qtype;
} gpt_shared;

/* q: a quantized weight standing for a child Linear's (attention, MLP: q[0]
 * c_attn / c_fc, q[1] c_proj), the head's or the model's wte (q[0]); NULL
 * while the weights are floats. */
typedef struct {
    gpt_shared *sh;
    double p; /* Dropout */
    amp_qtensor *q[2];
} mod_data;

static gpt_shared *sh_retain(gpt_shared *s) {
    atomic_fetch_add(&s->refs, 1);
    return s;
}
static void sh_destroy(void *data) {
    mod_data *d = data;
    if (d->sh && atomic_fetch_sub(&d->sh->refs, 1) == 1) free(d->sh);
    d->sh = NULL;
    for (int i = 0; i < 2; i++) amp_qtensor_free(d->q[i]);
    d->q[0] = d->q[1] = NULL;
}
static gpt_shared *SH(const amp_module *m) { return ((mod_data *)amp_module_data(m))->sh; }
static amp_module *CH(const amp_module *m, const char *name) { return amp_module_get_child(m, name); }
static amp_tensor *P(const amp_module *m, const char *name) { return amp_module_get_parameter(m, name); }

/* A tensor argument usable (not NULL, not freed: amp_tensor_ndim names a
 * freed tensor in debug mode); the error names fn. */
static bool arg_ok(const char *fn, const char *what, const amp_tensor *t) {
    if (!t) {
        amp_error(AMP_ERR_ARG, "%s: %s is NULL", fn, what);
        return false;
    }
    if (amp_tensor_ndim(t) < 0) {
        amp_error_chain(AMP_OK, "%s: %s", fn, what);
        return false;
    }
    return true;
}

/* The first element of a float tensor that is not finite: its flat index
 * (row-major), or -1 (also for integer tensors), with its value in *bad; -2
 * when it could not be read (the error set). Read through
 * amp_tensor_copy_out to f64 (exact, any dtype and device) in chunks of
 * 32768 elements of the flattened tensor (a view, or one copy when t is not
 * contiguous). Meant for a tensor already known to hold one (first_nonfinite
 * asks the backend first). */
static int64_t locate_nonfinite(amp_tensor *t, double *bad) {
    amp_dtype dt = amp_tensor_dtype(t);
    int64_t n = amp_tensor_numel(t);
    if (!amp_dtype_is_float(dt) || n == 0) return -1;
    enum { CHUNK = 1 << 15 };
    double *buf = malloc(sizeof(double) * (size_t)(n < CHUNK ? n : CHUNK));
    if (!buf) {
        amp_error(AMP_ERR_NOMEM, "amp_gpt: out of memory checking a tensor's values");
        return -2;
    }
    int64_t at = -1;
    amp_no_grad_begin();
    amp_scope *sc = amp_scope_begin();
    amp_tensor *flat = sc ? amp_reshape(t, 1, AMP_SHAPE(n)) : NULL;
    if (!flat) at = -2;
    for (int64_t b = 0; at == -1 && b < n; b += CHUNK) {
        int64_t m = n - b < CHUNK ? n - b : CHUNK;
        amp_scope *c = amp_scope_begin();
        amp_tensor *v = c ? amp_slice(flat, 0, b, b + m, 1) : NULL;
        if (!v || amp_tensor_copy_out(v, buf, AMP_F64) != AMP_OK) at = -2;
        for (int64_t i = 0; at == -1 && i < m; i++)
            if (!isfinite(buf[i])) at = b + i, *bad = buf[i];
        if (c) amp_scope_end(c);
    }
    if (sc) amp_scope_end(sc);
    amp_no_grad_end();
    free(buf);
    return at;
}

/* Tensors the backend's multi-tensor check takes: contiguous f32, f16, bf16
 * (an f64 value beyond f32's range is finite, and would read as inf). */
static bool backend_checkable(const amp_tensor *t) {
    amp_dtype dt = amp_tensor_dtype(t);
    return (dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16) && amp_tensor_is_contiguous(t);
}

/* locate_nonfinite, after the backend's check (SIMD, threaded, on the
 * tensor's device) said whether there is one: the common case, a finite
 * tensor, is never copied. */
static int64_t first_nonfinite(const char *fn, amp_tensor *t, double *bad) {
    if (backend_checkable(t)) {
        const amp_backend *be = amp__backend_of(fn, t);
        int first = -1;
        if (!be || amp__scaler_first_nonfinite(fn, be, &t, 1, 1.0f, NULL, &first) != AMP_OK) return -2;
        if (first < 0) return -1;
    }
    return locate_nonfinite(t, bad);
}

/* Why a value is refused: "nan", "inf", "-inf". */
static const char *nonfinite_name(double v) { return isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"; }

/* ---- the module classes ------------------------------------------------------------------------ */
static amp_tensor *dropout_fwd(amp_module *m, amp_tensor *x) {
    mod_data *d = amp_module_data(m);
    return amp_dropout(x, d->p, amp_module_is_training(m), d->sh->gen);
}
static void dropout_repr(const amp_module *m, char *b, size_t n) {
    snprintf(b, n, "p=%g, inplace=False", ((mod_data *)amp_module_data(m))->p);
}
static const amp_module_class dropout_class = {
    .name = "Dropout", .forward = dropout_fwd, .extra_repr = dropout_repr, .destroy = sh_destroy};

/* nanoGPT's LayerNorm: weight and an optional bias */
static amp_tensor *ln_fwd(amp_module *m, amp_tensor *x) {
    return amp_layer_norm(x, 1, P(m, "weight"), SH(m)->cfg.bias ? P(m, "bias") : NULL, SH(m)->ln_eps);
}
static const amp_module_class ln_class = {
    .name = "LayerNorm", .forward = ln_fwd, .destroy = sh_destroy, .flags = AMP_MODULE_NORM | AMP_MODULE_HALF_IO};

static amp_qtensor *QW(const amp_module *m, int i) { return ((mod_data *)amp_module_data(m))->q[i]; }

/* parent's Linear child name (its quantized weight: parent's q[i]) on x:
 * the one forward of the float and the quantized model */
static amp_tensor *lin_fwd(amp_module *parent, int i, const char *name, amp_tensor *x) {
    amp_module *l = CH(parent, name);
    amp_qtensor *q = QW(parent, i);
    if (!q || !x || !l) return amp_module_forward(l, x);
    return amp_qlinear(x, q, SH(parent)->cfg.bias ? P(l, "bias") : NULL);
}

/* the LM head: a bias-free Linear whose weight is wte's */
static amp_tensor *head_fwd(amp_module *m, amp_tensor *x) {
    return QW(m, 0) ? amp_qlinear(x, QW(m, 0), NULL) : amp_linear(x, P(m, "weight"), NULL);
}
static void head_repr(const amp_module *m, char *b, size_t n) {
    const amp_gpt_config *c = &SH(m)->cfg;
    snprintf(b, n, "in_features=%lld, out_features=%lld, bias=False", (long long)c->n_embd, (long long)c->vocab_size);
}
static const amp_module_class head_class = {.name = "Linear", .forward = head_fwd, .extra_repr = head_repr, .destroy = sh_destroy};

/* q, k, v of the fused projection qkv [B, T, 3C]: [B, nh, T, hs] views (no copy) */
static void split_heads(amp_tensor *qkv, const amp_gpt_config *c, amp_tensor **hd) {
    int64_t B = amp_tensor_dim(qkv, 0), T = amp_tensor_dim(qkv, 1), C = c->n_embd, nh = c->n_head;
    for (int i = 0; i < 3; i++)
        hd[i] = amp_transpose(amp_reshape(amp_slice(qkv, 2, i * C, (i + 1) * C, 1), 4, AMP_SHAPE(B, T, nh, C / nh)), 1, 2);
}

/* y [B, nh, T, hs] -> c_proj(y [B, T, C]) with residual dropout */
static amp_tensor *attn_out(amp_module *m, amp_tensor *y) {
    int64_t B = amp_tensor_dim(y, 0), T = amp_tensor_dim(y, 2), C = SH(m)->cfg.n_embd;
    amp_tensor *yc = amp_reshape(amp_transpose(y, 1, 2), 3, AMP_SHAPE(B, T, C)); /* a copy: transpose is not contiguous */
    return amp_module_forward(CH(m, "resid_dropout"), lin_fwd(m, 1, "c_proj", yc));
}

static amp_tensor *attn_fwd(amp_module *m, amp_tensor *x) { /* x [B, T, C] */
    gpt_shared *s = SH(m);
    amp_tensor *qkv = lin_fwd(m, 0, "c_attn", x); /* [B, T, 3C] */
    if (!qkv) return NULL;
    amp_tensor *hd[3];
    split_heads(qkv, &s->cfg, hd);
    amp_sdpa_opts o = AMP_SDPA_DEFAULTS;
    o.is_causal = true;
    o.dropout_p = amp_module_is_training(m) ? s->cfg.dropout : 0.0;
    o.generator = s->gen;
    return attn_out(m, amp_scaled_dot_product_attention_ex(hd[0], hd[1], hd[2], &o));
}
static const amp_module_class attn_class = {.name = "CausalSelfAttention", .forward = attn_fwd, .destroy = sh_destroy};

static amp_tensor *mlp_fwd(amp_module *m, amp_tensor *x) {
    amp_tensor *h = amp_module_forward(CH(m, "gelu"), lin_fwd(m, 0, "c_fc", x));
    return amp_module_forward(CH(m, "dropout"), lin_fwd(m, 1, "c_proj", h));
}
static const amp_module_class mlp_class = {.name = "MLP", .forward = mlp_fwd, .destroy = sh_destroy};

/* A block frees its temporaries as it returns: only what autograd saved
 * (and the output) outlives the call, as with torch's reference counts. */
static amp_tensor *block_fwd(amp_module *m, amp_tensor *x) {
    amp_scope *sc = amp_scope_begin();
    if (!sc) return NULL;
    amp_tensor *h = amp_add(x, amp_module_forward(CH(m, "attn"), amp_module_forward(CH(m, "ln_1"), x)));
    amp_tensor *y = h ? amp_add(h, amp_module_forward(CH(m, "mlp"), amp_module_forward(CH(m, "ln_2"), h))) : NULL;
    return amp_scope_end_keep(sc, y);
}
static const amp_module_class block_class = {.name = "Block", .forward = block_fwd, .destroy = sh_destroy};

static const amp_module_class dict_class = {.name = "ModuleDict", .destroy = sh_destroy};

static amp_tensor *ckpt_block(void *arg, amp_tensor *const *in, int n) {
    (void)n;
    return amp_module_forward((amp_module *)arg, in[0]);
}

/* wte(idx) + wpe(positions pos0 .. pos0 + T - 1) [B, T, C]; a quantized
 * wte gathers its rows dequantized to f32 */
static amp_tensor *embed(amp_module *m, amp_tensor *idx, int64_t pos0) {
    amp_module *tr = CH(m, "transformer");
    int64_t T = amp_tensor_dim(idx, 1);
    amp_tensor *pos = amp_tensor_arange((double)pos0, (double)(pos0 + T), 1, AMP_I64);
    if (pos && amp_tensor_device(idx) != AMP_DEVICE_CPU) pos = amp_tensor_to(pos, amp_tensor_device(idx)); /* beside idx */
    amp_tensor *tok = QW(m, 0) ? amp_qembedding(QW(m, 0), idx, AMP_F32) : amp_module_forward(CH(tr, "wte"), idx);
    return amp_add(tok, amp_module_forward(CH(tr, "wpe"), pos));
}

static amp_tensor *gpt_fwd(amp_module *m, amp_tensor *idx) {
    static const char *fn = "amp_gpt_forward";
    gpt_shared *s = SH(m);
    const amp_gpt_config *c = &s->cfg;
    if (amp_tensor_ndim(idx) != 2 || (amp_tensor_dtype(idx) != AMP_I64 && amp_tensor_dtype(idx) != AMP_I32)) {
        char b[64];
        return amp_error_null(AMP_ERR_SHAPE, "%s: idx must be i64 or i32 [B, T], got %s %s", fn,
                              amp_dtype_name(amp_tensor_dtype(idx)), amp_shape_str(idx, b, sizeof b));
    }
    int64_t T = amp_tensor_dim(idx, 1);
    if (T < 1 || T > c->block_size)
        return amp_error_null(AMP_ERR_SHAPE, "%s: sequence length %lld is outside 1..block_size %lld", fn, (long long)T,
                              (long long)c->block_size);
    amp_scope *sc = amp_scope_begin();
    if (!sc) return NULL;
    amp_module *tr = CH(m, "transformer");
    amp_tensor *x = amp_module_forward(CH(tr, "drop"), embed(m, idx, 0)); /* [B, T, C] */
    amp_module *h = CH(tr, "h");
    amp_checkpoint_opts co = {&s->gen, 1};
    for (int l = 0; l < c->n_layer && x; l++) {
        amp_module *blk = amp_module_child_at(h, l, NULL);
        x = s->checkpoint ? amp_activation_checkpoint(ckpt_block, blk, &x, 1, &co) : amp_module_forward(blk, x);
    }
    x = amp_module_forward(CH(tr, "ln_f"), x);
    amp_tensor *logits = amp_module_forward(CH(m, "lm_head"), x); /* [B, T, V] */
    return amp_scope_end_keep(sc, logits);
}
static const amp_module_class gpt_class = {.name = "GPT", .forward = gpt_fwd, .destroy = sh_destroy};

/* ---- construction ---------------------------------------------------------------------------------- */
static amp_module *new_mod(const amp_module_class *cls, gpt_shared *s) {
    amp_module *m = amp_module_new(cls, sizeof(mod_data));
    if (m) ((mod_data *)amp_module_data(m))->sh = sh_retain(s);
    return m;
}

/* Registers child under name when everything went well so far (ok), frees
 * it otherwise; register_module takes the child's reference either way. */
static void take(amp_module *parent, const char *name, amp_module *child, bool *ok) {
    if (*ok && child && parent) *ok = amp_module_register_module(parent, name, child) != NULL;
    else {
        amp_module_free(child);
        *ok = false;
    }
}

/* m when its construction went well (ok), else NULL with m freed */
static amp_module *built(amp_module *m, bool ok) {
    if (ok) return m;
    amp_module_free(m);
    return NULL;
}

static amp_module *dropout_new(gpt_shared *s) {
    amp_module *m = new_mod(&dropout_class, s);
    if (m) ((mod_data *)amp_module_data(m))->p = s->cfg.dropout;
    return m;
}

static amp_module *ln_new(gpt_shared *s) {
    amp_module *m = new_mod(&ln_class, s);
    if (!m) return NULL;
    int64_t C = s->cfg.n_embd;
    amp_mem_push_category(AMP_MEM_PARAM);
    amp_tensor *w = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(C));
    amp_tensor *b = s->cfg.bias ? amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(C)) : NULL;
    amp_mem_pop_category();
    bool ok = w && (!s->cfg.bias || b);
    if (!ok) {
        amp_tensor_free(w);
        amp_tensor_free(b);
    } else {
        ok = amp_module_register_parameter(m, "weight", w) != NULL;
        if (b) ok = ok ? amp_module_register_parameter(m, "bias", b) != NULL : (amp_tensor_free(b), false);
    }
    return built(m, ok);
}

/* nn.Linear re-initialised as GPT-2: weight N(0, std), bias 0 (std < 0:
 * left as nn.Linear made it, for weights loaded next) */
static amp_module *linear_new(int64_t in, int64_t out, bool bias, double std, amp_generator *g) {
    amp_module *m = amp_nn_linear(in, out, bias, g);
    if (!m || std < 0) return m;
    if (amp_tensor_normal_(P(m, "weight"), 0.0, std, g) != AMP_OK || (bias && amp_tensor_zero_(P(m, "bias")) != AMP_OK)) {
        amp_module_free(m);
        return NULL;
    }
    return m;
}

static amp_module *block_new(gpt_shared *s, amp_generator *g, bool init) {
    const amp_gpt_config *c = &s->cfg;
    int64_t C = c->n_embd;
    double proj_std = init ? 0.02 / sqrt(2.0 * (double)c->n_layer) : -1, std = init ? 0.02 : -1;
    amp_module *b = new_mod(&block_class, s), *attn = new_mod(&attn_class, s), *mlp = new_mod(&mlp_class, s);
    bool ok = b && attn && mlp;
    take(attn, "c_attn", linear_new(C, 3 * C, c->bias, std, g), &ok);
    take(attn, "c_proj", linear_new(C, C, c->bias, proj_std, g), &ok);
    take(attn, "attn_dropout", dropout_new(s), &ok);
    take(attn, "resid_dropout", dropout_new(s), &ok);
    take(mlp, "c_fc", linear_new(C, 4 * C, c->bias, std, g), &ok);
    take(mlp, "gelu", amp_nn_gelu(s->act), &ok);
    take(mlp, "c_proj", linear_new(4 * C, C, c->bias, proj_std, g), &ok);
    take(mlp, "dropout", dropout_new(s), &ok);
    take(b, "ln_1", ln_new(s), &ok);
    take(b, "attn", attn, &ok);
    take(b, "ln_2", ln_new(s), &ok);
    take(b, "mlp", mlp, &ok);
    return built(b, ok);
}

static amp_status check_config(const char *fn, const amp_gpt_config *c) {
    if (!c) return amp_error(AMP_ERR_ARG, "%s: config is NULL", fn);
    if (c->n_layer < 1 || c->n_layer > 1000 || c->n_head < 1 || c->n_embd < 1 || c->block_size < 1 || c->vocab_size < 1 ||
        c->n_embd > (1 << 20) || c->block_size > (1 << 24) || c->vocab_size > (1 << 26) || c->n_head > c->n_embd)
        return amp_error(AMP_ERR_ARG, "%s: n_layer %lld, n_head %lld, n_embd %lld, block_size %lld, vocab_size %lld: each "
                                      "must be >= 1 (n_layer <= 1000, n_embd <= 2^20, block_size <= 2^24, vocab <= 2^26)",
                         fn, (long long)c->n_layer, (long long)c->n_head, (long long)c->n_embd, (long long)c->block_size,
                         (long long)c->vocab_size);
    if (c->n_embd % c->n_head)
        return amp_error(AMP_ERR_ARG, "%s: n_embd %lld is not a multiple of n_head %lld", fn, (long long)c->n_embd,
                         (long long)c->n_head);
    if (!(c->dropout >= 0 && c->dropout < 1)) return amp_error(AMP_ERR_ARG, "%s: dropout %g is outside [0, 1)", fn, c->dropout);
    return AMP_OK;
}

/* amp_gpt_new with LayerNorm eps and the MLP's GELU (a Hugging Face
 * config's); init false skips GPT-2's re-initialisation (N(0, 0.02) draws
 * for every matrix: seconds for GPT-2 124M) of a model whose weights are
 * loaded next */
static amp_module *gpt_build(const char *fn, const amp_gpt_config *c, amp_generator *g, double ln_eps, amp_gelu_approx act,
                             bool init) {
    if (check_config(fn, c) != AMP_OK) return NULL;
    if (!g) g = amp_default_generator();
    gpt_shared *s = calloc(1, sizeof *s);
    if (!s) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    atomic_init(&s->refs, 1); /* this function's; the modules take their own */
    s->cfg = *c;
    s->gen = g;
    s->ln_eps = ln_eps;
    s->act = act;
    amp_module *m = new_mod(&gpt_class, s), *tr = new_mod(&dict_class, s), *h = amp_nn_module_list();
    amp_module *wte = amp_nn_embedding(c->vocab_size, c->n_embd, g), *wpe = amp_nn_embedding(c->block_size, c->n_embd, g);
    bool ok = m && tr && h && wte && wpe &&
              (!init || (amp_tensor_normal_(P(wte, "weight"), 0.0, 0.02, g) == AMP_OK &&
                         amp_tensor_normal_(P(wpe, "weight"), 0.0, 0.02, g) == AMP_OK));
    amp_tensor *tied = ok ? P(wte, "weight") : NULL;
    take(tr, "wte", wte, &ok);
    take(tr, "wpe", wpe, &ok);
    take(tr, "drop", dropout_new(s), &ok);
    for (int64_t l = 0; ok && l < c->n_layer; l++) ok = amp_module_append(h, block_new(s, g, init)) == AMP_OK;
    take(tr, "h", h, &ok);
    take(tr, "ln_f", ln_new(s), &ok);
    take(m, "transformer", tr, &ok);
    amp_module *head = ok ? new_mod(&head_class, s) : NULL;
    if (head && !amp_module_register_parameter(head, "weight", amp_tensor_retain(tied))) {
        amp_module_free(head);
        head = NULL;
    }
    ok = ok && head;
    take(m, "lm_head", head, &ok);
    sh_destroy(&(mod_data){s, 0, {NULL, NULL}});
    return built(m, ok);
}

amp_module *amp_gpt_new(const amp_gpt_config *c, amp_generator *g) { return gpt_build("amp_gpt_new", c, g, 1e-5, AMP_GELU_TANH, true); }

static amp_status gpt_of(const char *fn, const amp_module *m) {
    if (!m) return amp_error(AMP_ERR_ARG, "%s: model is NULL", fn);
    if (amp_module_class_of(m) != &gpt_class)
        return amp_error(AMP_ERR_ARG, "%s: the model is a %s, not a GPT made by amp_gpt_new", fn, amp_module_kind(m));
    return AMP_OK;
}

amp_status amp_gpt_get_config(const amp_module *m, amp_gpt_config *out) {
    if (gpt_of("amp_gpt_get_config", m) != AMP_OK) return amp_last_status();
    if (!out) return amp_error(AMP_ERR_ARG, "amp_gpt_get_config: out is NULL");
    *out = SH(m)->cfg;
    return AMP_OK;
}

amp_status amp_gpt_set_generator(amp_module *m, amp_generator *g) {
    if (gpt_of("amp_gpt_set_generator", m) != AMP_OK) return amp_last_status();
    SH(m)->gen = g ? g : amp_default_generator();
    return AMP_OK;
}

amp_status amp_gpt_set_activation_checkpointing(amp_module *m, bool on) {
    if (gpt_of("amp_gpt_set_activation_checkpointing", m) != AMP_OK) return amp_last_status();
    SH(m)->checkpoint = on;
    return AMP_OK;
}

bool amp_gpt_activation_checkpointing(const amp_module *m) {
    return gpt_of("amp_gpt_activation_checkpointing", m) == AMP_OK && SH(m)->checkpoint;
}

amp_tensor *amp_gpt_loss(amp_module *m, amp_tensor *idx, amp_tensor *targets, amp_tensor **logits) {
    static const char *fn = "amp_gpt_loss";
    if (logits) *logits = NULL;
    if (!arg_ok(fn, "idx", idx) || !arg_ok(fn, "targets", targets) || gpt_of(fn, m) != AMP_OK) return NULL;
    if (amp_tensor_ndim(targets) != 2 || amp_tensor_ndim(idx) != 2 || amp_tensor_dim(targets, 0) != amp_tensor_dim(idx, 0) ||
        amp_tensor_dim(targets, 1) != amp_tensor_dim(idx, 1)) {
        char a[64], b[64];
        return amp_error_null(AMP_ERR_SHAPE, "%s: targets %s must have idx's shape %s", fn, amp_shape_str(targets, a, sizeof a),
                              amp_shape_str(idx, b, sizeof b));
    }
    amp_tensor *lg = amp_module_forward(m, idx);
    if (!lg) return NULL;
    int64_t BT = amp_tensor_dim(idx, 0) * amp_tensor_dim(idx, 1), V = SH(m)->cfg.vocab_size;
    amp_loss_opts o = AMP_LOSS_DEFAULTS;
    o.ignore_index = -1;
    /* The loss is f32 whatever the logits' dtype (O2's half logits too):
     * cross_entropy in an autocast region is an fp32 op that widens half
     * logits inside its kernel, so neither an f32 copy of the [B T, V]
     * logits nor a half-precision loss is made. */
    bool region = amp_dtype_is_half(amp_tensor_dtype(lg)) && !amp_autocast_is_enabled() &&
                  amp_autocast_enter(amp_tensor_dtype(lg)) == AMP_OK;
    amp_tensor *loss = amp_cross_entropy(amp_reshape(lg, 2, AMP_SHAPE(BT, V)), amp_reshape(targets, 1, AMP_SHAPE(BT)), &o);
    if (region) amp_autocast_exit();
    if (loss && amp_tensor_dtype(loss) != AMP_F32) loss = amp_to(loss, AMP_F32);
    if (logits) *logits = lg;
    return loss;
}

/* ---- weight decay groups -------------------------------------------------------------------------- */
static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static bool name_decays(const char *name, bool emb) {
    if (ends_with(name, ".c_attn.weight") || ends_with(name, ".c_proj.weight") || ends_with(name, ".c_fc.weight")) return true;
    return emb && (!strcmp(name, "transformer.wte.weight") || !strcmp(name, "transformer.wpe.weight") ||
                   !strcmp(name, "lm_head.weight"));
}

amp_status amp_gpt_apply_weight_decay(amp_module *m, amp_optim *const *optims, int n_optims, double weight_decay,
                                      bool decay_embeddings) {
    static const char *fn = "amp_gpt_apply_weight_decay";
    if (gpt_of(fn, m) != AMP_OK) return amp_last_status();
    if (n_optims < 1 || !optims) return amp_error(AMP_ERR_ARG, "%s: no optimizers (n_optims %d)", fn, n_optims);
    int np = amp_module_parameters(m, NULL, NULL, 0);
    amp_tensor **ps = calloc((size_t)np, sizeof *ps);
    const char **names = calloc((size_t)np, sizeof *names);
    if (!ps || !names) {
        free(ps);
        free(names);
        return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    }
    amp_module_parameters(m, ps, names, np);
    amp_status st = AMP_OK;
    for (int k = 0; k < n_optims && st == AMP_OK; k++) {
        if (!optims[k]) {
            st = amp_error(AMP_ERR_ARG, "%s: optims[%d] is NULL", fn, k);
            break;
        }
        int n = amp_optim_num_params(optims[k]);
        for (int i = 0; i < n && st == AMP_OK; i++) {
            amp_tensor *p = amp_optim_param_origin(optims[k], i, NULL); /* a ZeRO-1 slice: its parameter */
            int j = 0;
            while (j < np && ps[j] != p) j++;
            if (j == np) {
                st = amp_error(AMP_ERR_ARG, "%s: parameter %d of optims[%d] is not one of the model's", fn, i, k);
                break;
            }
            st = amp_optim_set_param_weight_decay(optims[k], i, name_decays(names[j], decay_embeddings) ? weight_decay : 0.0);
        }
    }
    free(ps);
    free(names);
    return st;
}

/* ---- loading PyTorch / Hugging Face state dicts ------------------------------------------------------- */
static bool conv1d_name(const char *n) {
    return ends_with(n, ".c_attn.weight") || ends_with(n, ".c_proj.weight") || ends_with(n, ".c_fc.weight");
}

/* the causal-mask buffers of nanoGPT and Hugging Face, and a tied head (checked apart) */
static bool ignorable(const char *n) {
    return ends_with(n, ".attn.bias") || ends_with(n, ".attn.masked_bias") || !strcmp(n, "lm_head.weight");
}

/* How a state_dict names and lays out the parameters: nanoGPT's names or
 * Hugging Face GPT2Model's without "transformer."; Linear weights [out, in]
 * or Conv1D's [in, out], told by c_attn's shape ([C, 3C] against [3C, C]). */
typedef struct {
    const char *prefix; /* "transformer." or "" */
    bool conv1d;
} sd_layout;

/* Where a GPT's tensors come from: one safetensors file (f) or a Hugging
 * Face directory, single-file or sharded (d); indices run over the file's
 * tensors or the directory's (sorted by name). */
typedef struct {
    const amp_safetensors *f;
    const amp_hf_dir *d;
} sd_src;

static int src_count(sd_src s) { return s.f ? amp_safetensors_count(s.f) : amp_hf_dir_tensor_count(s.d); }
static int src_find(sd_src s, const char *name) {
    if (s.f) return amp_safetensors_find(s.f, name);
    for (int i = 0, n = src_count(s); i < n; i++)
        if (!strcmp(amp_hf_dir_tensor_name(s.d, i), name)) return i;
    return -1;
}
static amp_status src_info_at(sd_src s, int i, amp_safetensors_info *in) {
    return s.f ? amp_safetensors_info_at(s.f, i, in) : amp_hf_dir_tensor_info(s.d, amp_hf_dir_tensor_name(s.d, i), in);
}
/* the tensor in its file's dtype (a directory's other float types as f32) */
static amp_tensor *src_get(sd_src s, const char *name) {
    if (s.f) return amp_safetensors_get(s.f, name);
    amp_safetensors_info in;
    if (amp_hf_dir_tensor_info(s.d, name, &in) != AMP_OK) return NULL;
    return amp_hf_dir_get(s.d, name, in.dtype == AMP_F16 || in.dtype == AMP_BF16 ? in.dtype : AMP_F32, 0, NULL);
}

static sd_layout layout_of(sd_src f) {
    sd_layout l = {src_find(f, "wte.weight") >= 0 ? "" : "transformer.", false};
    char k[64];
    snprintf(k, sizeof k, "%sh.0.attn.c_attn.weight", l.prefix);
    amp_safetensors_info in;
    int i = src_find(f, k);
    if (i >= 0 && src_info_at(f, i, &in) == AMP_OK)
        l.conv1d = in.ndim == 2 && in.shape[0] > 0 && in.shape[1] == 3 * in.shape[0];
    return l;
}

/* The file's name of model parameter want ("transformer.wte.weight"). */
static const char *sd_name(sd_layout l, const char *want) {
    return !*l.prefix && !strncmp(want, "transformer.", 12) ? want + 12 : want;
}

/* The k-th tensor a GPT of configuration c has, as the file names and
 * shapes it: 1 (e filled), -1 (no such parameter: a bias of a bias-free
 * model), 0 past the last. e->what: the sizes that make its shape. */
typedef struct {
    char name[96], what[96];
    int ndim;
    int64_t shape[2];
} sd_entry;

static int sd_entry_at(const amp_gpt_config *c, sd_layout l, int64_t k, sd_entry *e) {
    static const struct {
        const char *name;
        int out, in; /* [out C, in C]; in 0: 1-D */
        bool bias, linear;
    } blk[] = {
        {"ln_1.weight", 1, 0, false, false},     {"ln_1.bias", 1, 0, true, false},
        {"attn.c_attn.weight", 3, 1, false, true}, {"attn.c_attn.bias", 3, 0, true, false},
        {"attn.c_proj.weight", 1, 1, false, true}, {"attn.c_proj.bias", 1, 0, true, false},
        {"ln_2.weight", 1, 0, false, false},     {"ln_2.bias", 1, 0, true, false},
        {"mlp.c_fc.weight", 4, 1, false, true},  {"mlp.c_fc.bias", 4, 0, true, false},
        {"mlp.c_proj.weight", 1, 4, false, true}, {"mlp.c_proj.bias", 1, 0, true, false},
    };
    const int64_t C = c->n_embd, nb = (int64_t)(sizeof blk / sizeof blk[0]);
    char want[96];
    snprintf(e->what, sizeof e->what, "n_embd %lld", (long long)C);
    if (k < 2) {
        snprintf(want, sizeof want, "transformer.%s.weight", k ? "wpe" : "wte");
        e->ndim = 2;
        e->shape[0] = k ? c->block_size : c->vocab_size;
        e->shape[1] = C;
        snprintf(e->what, sizeof e->what, "%s %lld, n_embd %lld", k ? "block_size" : "vocab_size", (long long)e->shape[0], (long long)C);
    } else if (k - 2 < c->n_layer * nb) {
        int64_t layer = (k - 2) / nb, j = (k - 2) % nb;
        if (blk[j].bias && !c->bias) return -1;
        snprintf(want, sizeof want, "transformer.h.%lld.%s", (long long)layer, blk[j].name);
        e->ndim = blk[j].in ? 2 : 1;
        e->shape[0] = blk[j].out * C;
        e->shape[1] = blk[j].in * C;
        if (blk[j].linear && l.conv1d) e->shape[0] = blk[j].in * C, e->shape[1] = blk[j].out * C;
    } else if (k - 2 - c->n_layer * nb < 2) {
        bool bias = k - 2 - c->n_layer * nb == 1;
        if (bias && !c->bias) return -1;
        snprintf(want, sizeof want, "transformer.ln_f.%s", bias ? "bias" : "weight");
        e->ndim = 1;
        e->shape[0] = C;
    } else {
        return 0;
    }
    snprintf(e->name, sizeof e->name, "%s", sd_name(l, want));
    return 1;
}

/* "[a]", "[a, b]", or "of rank r" for other ranks */
static void shape_text(int nd, const int64_t *sh, char *b, size_t n) {
    if (nd == 1 || nd == 2) snprintf(b, n, nd == 1 ? "[%lld]" : "[%lld, %lld]", (long long)sh[0], (long long)(nd > 1 ? sh[1] : 0));
    else snprintf(b, n, "of rank %d", nd);
}

/* A tied head: lm_head.weight, when the file holds one, is the embedding:
 * its shape, its dtype and its bytes. */
static amp_status check_head(const char *pre, sd_src f, sd_layout l) {
    int ih = src_find(f, "lm_head.weight"), iw = src_find(f, sd_name(l, "transformer.wte.weight"));
    if (ih < 0) return AMP_OK;
    amp_safetensors_info h, w;
    src_info_at(f, ih, &h);
    src_info_at(f, iw, &w);
    const char *untied = "amp's GPT ties the LM head to the token embedding (as GPT-2 and nanoGPT) and cannot hold a separate "
                         "head, whose logits would differ";
    char a[64], b[64];
    shape_text(h.ndim, h.shape, a, sizeof a);
    shape_text(w.ndim, w.shape, b, sizeof b);
    if (h.ndim != 2 || h.shape[0] != w.shape[0] || h.shape[1] != w.shape[1])
        return amp_error(AMP_ERR_SHAPE, "%s: lm_head.weight has shape %s, %s %s; %s", pre, a, w.name, b, untied);
    if (h.dtype != w.dtype)
        return amp_error(AMP_ERR_DTYPE, "%s: lm_head.weight is %s, %s %s; %s", pre,
                         h.dtype == AMP_DTYPE_COUNT ? h.dtype_name : amp_dtype_name(h.dtype), w.name,
                         w.dtype == AMP_DTYPE_COUNT ? w.dtype_name : amp_dtype_name(w.dtype), untied);
    size_t nb = (size_t)(w.end - w.begin), es = nb / (size_t)(w.numel ? w.numel : 1);
    const unsigned char *ph = h.data, *pw = w.data;
    if (!memcmp(ph, pw, nb)) return AMP_OK; /* one pass over the bytes; the element is looked for only when they differ */
    int64_t i = 0;
    while (i < w.numel && !memcmp(ph + es * (size_t)i, pw + es * (size_t)i, es)) i++;
    return amp_error(AMP_ERR_FORMAT, "%s: lm_head.weight differs from %s (first at element %lld): an untied head; %s", pre, w.name,
                     (long long)i, untied);
}

/* Does the file hold a GPT of configuration c (every tensor with its shape
 * and a float dtype, nothing else but the mask buffers and a tied head)?
 * Reads the header only (and the head's bytes). where: the file, or NULL. */
static amp_status check_sd(const char *fn, const char *where, sd_src f, const amp_gpt_config *c) {
    char pre[1200];
    snprintf(pre, sizeof pre, "%s%s%s", fn, where ? ": " : "", where ? where : "");
    if (check_config(pre, c) != AMP_OK) return amp_last_status();
    sd_layout l = layout_of(f);
    int nf = src_count(f);
    bool *used = calloc((size_t)nf + 1, sizeof *used);
    if (!used) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    amp_status st = AMP_OK;
    sd_entry e;
    for (int64_t k = 0, r; st == AMP_OK && (r = sd_entry_at(c, l, k, &e)) != 0; k++) {
        if (r < 0) continue;
        int i = src_find(f, e.name);
        amp_safetensors_info in;
        char a[64], b[64];
        if (i < 0) {
            st = amp_error(AMP_ERR_FORMAT, "%s: no tensor %s, which a GPT of n_layer %lld%s has", pre, e.name,
                           (long long)c->n_layer, c->bias ? " with biases" : "");
            break;
        }
        used[i] = true;
        src_info_at(f, i, &in);
        if (in.ndim != e.ndim || in.shape[0] != e.shape[0] || (e.ndim > 1 && in.shape[1] != e.shape[1])) {
            shape_text(e.ndim, e.shape, b, sizeof b);
            shape_text(in.ndim, in.shape, a, sizeof a);
            st = amp_error(AMP_ERR_SHAPE, "%s: %s has shape %s%s, a GPT of %s makes it %s", pre, e.name, a,
                           l.conv1d && conv1d_name(e.name) ? " (Conv1D)" : "", e.what, b);
            break;
        }
        if (in.dtype == AMP_DTYPE_COUNT || !amp_dtype_is_float(in.dtype))
            st = amp_error(AMP_ERR_DTYPE, "%s: %s is %s, not a float tensor", pre, e.name, in.dtype_name);
    }
    for (int k = 0; k < nf && st == AMP_OK; k++) {
        amp_safetensors_info in;
        src_info_at(f, k, &in);
        if (!used[k] && !ignorable(in.name))
            st = amp_error(AMP_ERR_FORMAT, "%s: holds %s, which a GPT of n_layer %lld %s has no parameter for", pre,
                           in.name, (long long)c->n_layer, c->bias ? "with biases" : "without biases (bias false)");
    }
    free(used);
    return st == AMP_OK ? check_head(pre, f, l) : st;
}

amp_status amp_gpt_check_state_dict(const amp_safetensors *f, const amp_gpt_config *c) {
    static const char *fn = "amp_gpt_check_state_dict";
    if (!f) return amp_error(AMP_ERR_ARG, "%s: f is NULL", fn);
    return check_sd(fn, NULL, (sd_src){f, NULL}, c);
}

amp_status amp_gpt_config_from_state_dict(const amp_safetensors *file, int64_t n_head, amp_gpt_config *out) {
    static const char *fn = "amp_gpt_config_from_state_dict";
    if (!file || !out) return amp_error(AMP_ERR_ARG, "%s: f and out must not be NULL", fn);
    sd_src f = {file, NULL};
    sd_layout l = layout_of(f);
    amp_safetensors_info wte, wpe;
    int iw = src_find(f, sd_name(l, "transformer.wte.weight"));
    int ip = src_find(f, sd_name(l, "transformer.wpe.weight"));
    if (iw < 0 || ip < 0)
        return amp_error(AMP_ERR_FORMAT, "%s: no tensors transformer.wte.weight and transformer.wpe.weight (or wte.weight and "
                                         "wpe.weight): not a GPT-2 state_dict",
                         fn);
    src_info_at(f, iw, &wte);
    src_info_at(f, ip, &wpe);
    if (wte.ndim != 2 || wpe.ndim != 2)
        return amp_error(AMP_ERR_SHAPE, "%s: %s and %s must be 2-D, are of rank %d and %d", fn, wte.name, wpe.name, wte.ndim, wpe.ndim);
    char k[96];
    int64_t L = 0;
    for (; L <= 1000; L++) {
        snprintf(k, sizeof k, "%sh.%lld.ln_1.weight", l.prefix, (long long)L);
        if (src_find(f, k) < 0) break;
    }
    snprintf(k, sizeof k, "%sh.0.ln_1.bias", l.prefix);
    amp_gpt_config c = {L, n_head, wte.shape[1], wpe.shape[0], wte.shape[0], 0.0, src_find(f, k) >= 0};
    if (check_sd(fn, NULL, f, &c) != AMP_OK) return amp_last_status();
    *out = c;
    return AMP_OK;
}

/* ---- load dtypes ------------------------------------------------------------------------------------ */
/* A LayerNorm's parameter: f32 in every load dtype (amp_module_to's keep_norm_f32) */
static bool norm_param(const char *name) { return strstr(name, ".ln_") != NULL; }

/* A model quantized by amp_gpt_set_load_dtype cannot take float weights again */
static amp_status not_quantized(const char *fn, const amp_module *m) {
    const gpt_shared *s = SH(m);
    if (!s->quantized) return AMP_OK;
    return amp_error(AMP_ERR_STATE, "%s: the model's weights are quantized (%s) and cannot be replaced or converted: quantizing is "
                                    "one-way; make the model again (amp_gpt_new, amp_gpt_load_ex) to load it in another dtype",
                     fn, amp_qtype_name(s->qtype));
}

/* ld usable for a GPT of configuration c, checked before anything is read or changed */
static amp_status check_load_dtype(const char *fn, const amp_gpt_config *c, amp_load_dtype ld) {
    if (ld.kind == AMP_LOAD_KEEP) return AMP_OK;
    if (ld.kind == AMP_LOAD_FLOAT) {
        if (ld.dtype == AMP_F32 || ld.dtype == AMP_F16 || ld.dtype == AMP_BF16) return AMP_OK;
        return amp_error(AMP_ERR_DTYPE, "%s: load dtype %s is not f32, f16 or bf16", fn,
                         (unsigned)ld.dtype < AMP_DTYPE_COUNT ? amp_dtype_name(ld.dtype) : "(invalid)");
    }
    if (ld.kind != AMP_LOAD_QUANT) return amp_error(AMP_ERR_ARG, "%s: load dtype kind %d is not keep, float or quantized", fn, (int)ld.kind);
    if (ld.qtype != AMP_Q8_0 && ld.qtype != AMP_Q4_0 && ld.qtype != AMP_Q4_1)
        return amp_error(AMP_ERR_UNSUPPORTED, "%s: load dtype %s: a GPT quantizes its weights to q8_0, q4_0 or q4_1", fn,
                         (unsigned)ld.qtype < AMP_QTYPE_COUNT ? amp_qtype_name(ld.qtype) : "(invalid qtype)");
    int64_t be = amp_qtype_block_elems(ld.qtype);
    if (c->n_embd % be)
        return amp_error(AMP_ERR_SHAPE, "%s: load dtype %s: n_embd %lld is not a multiple of its block of %lld values (each row "
                                        "of a quantized matrix is a run of whole blocks)",
                         fn, amp_qtype_name(ld.qtype), (long long)c->n_embd, (long long)be);
    return AMP_OK;
}

/* The value of element at (flat, row-major) of t, as f64 */
static double element_at(amp_tensor *t, int64_t at) {
    double v = NAN;
    amp_scope *sc = amp_scope_begin();
    amp_tensor *e = sc ? amp_slice(amp_reshape(t, 1, AMP_SHAPE(amp_tensor_numel(t))), 0, at, at + 1, 1) : NULL;
    if (!e || amp_tensor_copy_out(e, &v, AMP_F64) != AMP_OK) v = NAN;
    if (sc) amp_scope_end(sc);
    return v;
}

/* Every parameter that an f16 load converts (all but the LayerNorms) within
 * f16's range, or an error naming the first weight that would become inf. */
static amp_status check_f16_range(const char *fn, amp_module *m) {
    int np = amp_module_parameters(m, NULL, NULL, 0);
    amp_tensor **ps = calloc((size_t)np + 1, sizeof *ps);
    const char **names = calloc((size_t)np + 1, sizeof *names);
    amp_status st = ps && names ? AMP_OK : amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    if (st == AMP_OK) amp_module_parameters(m, ps, names, np);
    amp_no_grad_begin();
    for (int i = 0; i < np && st == AMP_OK; i++) {
        if (norm_param(names[i]) || amp_tensor_dtype(ps[i]) == AMP_F16 || amp_tensor_numel(ps[i]) == 0) continue;
        amp_scope *sc = amp_scope_begin();
        amp_tensor *h = sc ? amp_to(ps[i], AMP_F16) : NULL;
        double bad = 0;
        int64_t at = h ? first_nonfinite(fn, h, &bad) : -2;
        if (at == -2) st = amp_last_status();
        else if (at >= 0) {
            double v = element_at(ps[i], at);
            st = isfinite(v) ? amp_error(AMP_ERR_RANGE, "%s: load dtype f16: parameter %s element %lld is %g, beyond f16's largest "
                                                        "finite value 65504 (it would become %s): load in bf16 (f32's range) or f32",
                                         fn, names[i], (long long)at, v, v > 0 ? "inf" : "-inf")
                             : amp_error(AMP_ERR_RANGE, "%s: parameter %s element %lld is %s: the weights must be finite", fn,
                                         names[i], (long long)at, nonfinite_name(v));
        }
        if (sc) amp_scope_end(sc);
    }
    amp_no_grad_end();
    free(ps);
    free(names);
    return st;
}

/* The quantized model: the 4 matrices of each block and wte (= the head)
 * quantized, installed only when all are; their float parameters replaced
 * by 0-element placeholders (the memory is freed); the rest f32. */
static amp_status quantize_model(const char *fn, amp_module *m, amp_qtype qt) {
    gpt_shared *s = SH(m);
    static const char *const lin[4][2] = {{"attn", "c_attn"}, {"attn", "c_proj"}, {"mlp", "c_fc"}, {"mlp", "c_proj"}};
    int64_t L = s->cfg.n_layer, nq = 4 * L + 1;
    amp_qtensor **q = calloc((size_t)nq, sizeof *q);
    if (!q) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    amp_status st = amp_module_to(m, AMP_F32, false); /* the rest (norms, biases, wpe) f32 */
    amp_module *tr = CH(m, "transformer"), *h = CH(tr, "h");
    for (int64_t k = 0; k < nq && st == AMP_OK; k++) {
        amp_module *owner = k < 4 * L ? CH(CH(amp_module_child_at(h, (int)(k / 4), NULL), lin[k % 4][0]), lin[k % 4][1]) : CH(tr, "wte");
        q[k] = amp_quantize(P(owner, "weight"), qt);
        if (!q[k]) {
            st = k < 4 * L ? amp_error_chain(AMP_OK, "%s: quantizing transformer.h.%lld.%s.%s.weight to %s", fn, (long long)(k / 4),
                                             lin[k % 4][0], lin[k % 4][1], amp_qtype_name(qt))
                           : amp_error_chain(AMP_OK, "%s: quantizing transformer.wte.weight to %s", fn, amp_qtype_name(qt));
        }
    }
    for (int64_t k = 0; k < nq && st == AMP_OK; k++) { /* install: nothing below can fail but the placeholders */
        amp_module *owner = k < 4 * L ? CH(amp_module_child_at(h, (int)(k / 4), NULL), lin[k % 4][0]) : m;
        ((mod_data *)amp_module_data(owner))->q[k < 4 * L ? (k % 4) & 1 : 0] = q[k];
        q[k] = NULL;
        if (k == 4 * L) ((mod_data *)amp_module_data(CH(m, "lm_head")))->q[0] = amp_qtensor_retain(QW(m, 0));
    }
    if (st == AMP_OK) {
        s->quantized = true;
        s->qtype = qt;
    }
    for (int64_t k = 0; k < nq && st == AMP_OK; k++) { /* the float weights go */
        amp_module *owner = k < 4 * L ? CH(CH(amp_module_child_at(h, (int)(k / 4), NULL), lin[k % 4][0]), lin[k % 4][1]) : CH(tr, "wte");
        amp_mem_push_category(AMP_MEM_PARAM);
        amp_tensor *ph = amp_tensor_empty(AMP_F32, 1, AMP_SHAPE(0));
        amp_mem_pop_category();
        if (!ph || amp_module_set_parameter(owner, "weight", ph) != AMP_OK) st = amp_last_status();
        else if (k == 4 * L) st = amp_module_set_parameter(CH(m, "lm_head"), "weight", amp_tensor_retain(ph));
    }
    for (int64_t k = 0; k < nq; k++) amp_qtensor_free(q[k]);
    free(q);
    return st;
}

amp_status amp_gpt_set_load_dtype(amp_module *m, amp_load_dtype ld) {
    static const char *fn = "amp_gpt_set_load_dtype";
    if (gpt_of(fn, m) != AMP_OK || check_load_dtype(fn, &SH(m)->cfg, ld) != AMP_OK) return amp_last_status();
    gpt_shared *s = SH(m);
    if (ld.kind == AMP_LOAD_KEEP || (s->quantized && ld.kind == AMP_LOAD_QUANT && ld.qtype == s->qtype)) return AMP_OK;
    if (not_quantized(fn, m) != AMP_OK) return amp_last_status();
    if (ld.kind == AMP_LOAD_QUANT) return quantize_model(fn, m, ld.qtype);
    if (ld.dtype == AMP_F16 && check_f16_range(fn, m) != AMP_OK) return amp_last_status();
    return amp_module_to(m, ld.dtype, ld.dtype != AMP_F32);
}

amp_status amp_gpt_get_load_dtype(const amp_module *m, amp_load_dtype *out) {
    static const char *fn = "amp_gpt_get_load_dtype";
    if (gpt_of(fn, m) != AMP_OK) return amp_last_status();
    if (!out) return amp_error(AMP_ERR_ARG, "%s: out is NULL", fn);
    const gpt_shared *s = SH(m);
    if (s->quantized) *out = (amp_load_dtype){AMP_LOAD_QUANT, AMP_F32, s->qtype};
    else *out = (amp_load_dtype){AMP_LOAD_FLOAT, amp_tensor_dtype(P(m, "transformer.h.0.attn.c_attn.weight")), AMP_Q8_0};
    return AMP_OK;
}

/* Loads m's parameters from f (path: the file or directory, for messages):
 * every tensor checked (check_sd) and finite before any parameter changes;
 * *file_dt (may be NULL) receives the dtype of the file's wte. */
static amp_status load_src(const char *fn, amp_module *m, sd_src f, const char *path, amp_dtype *file_dt) {
    const amp_gpt_config *c = &SH(m)->cfg;
    if (check_sd(fn, path, f, c) != AMP_OK) return amp_last_status();
    sd_layout l = layout_of(f);
    amp_safetensors_info wi;
    if (file_dt && src_info_at(f, src_find(f, sd_name(l, "transformer.wte.weight")), &wi) == AMP_OK)
        *file_dt = wi.dtype;
    int np = amp_module_parameters(m, NULL, NULL, 0);
    amp_tensor **ps = calloc((size_t)np, sizeof *ps), **vals = calloc((size_t)np, sizeof *vals);
    const char **names = calloc((size_t)np, sizeof *names);
    amp_status st = AMP_OK;
    if (!ps || !vals || !names) {
        st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        goto out;
    }
    amp_module_parameters(m, ps, names, np);
    for (int i = 0; i < np && st == AMP_OK; i++) { /* check_sd found each with its shape */
        const char *fname = sd_name(l, names[i]);
        amp_tensor *t = src_get(f, fname);
        double bad = 0;
        int64_t at = t ? first_nonfinite(fn, t, &bad) : -2;
        if (at != -1) {
            st = at == -2 ? amp_last_status()
                          : amp_error(AMP_ERR_RANGE, "%s: %s: %s element %lld is %s: the weights must be finite (a damaged file, or "
                                                     "one saved after training diverged)",
                                      fn, path, fname, (long long)at, nonfinite_name(bad));
            amp_tensor_free(t);
            break;
        }
        if (l.conv1d && conv1d_name(names[i])) {
            amp_tensor *tv = amp_transpose(t, 0, 1);
            amp_tensor *tt = tv ? amp_contiguous(tv) : NULL;
            amp_tensor *own = tt ? amp_tensor_keep(tt) : NULL;
            if (tv) amp_tensor_free(tv); /* the transposed view (outside a scope the caller owns it) */
            amp_tensor_free(t);
            t = own;
        }
        if (!t) {
            st = amp_last_status();
            break;
        }
        vals[i] = t;
    }
    for (int i = 0; i < np && st == AMP_OK; i++) st = amp_tensor_copy_(ps[i], vals[i]);
out:
    if (vals)
        for (int i = 0; i < np; i++) amp_tensor_free(vals[i]);
    free(vals);
    free(ps);
    free(names);
    return st;
}

/* amp_gpt_load's body: *file_dt receives the dtype of the file's wte */
static amp_status load_sd(const char *fn, amp_module *m, const char *path, amp_dtype *file_dt) {
    if (gpt_of(fn, m) != AMP_OK || not_quantized(fn, m) != AMP_OK) return amp_last_status();
    if (!path) return amp_error(AMP_ERR_ARG, "%s: path is NULL", fn);
    amp_safetensors *f = amp_safetensors_read(path);
    if (!f) return amp_error_chain(AMP_OK, "%s", fn);
    amp_status st = load_src(fn, m, (sd_src){f, NULL}, path, file_dt);
    amp_safetensors_free(f);
    return st;
}

amp_status amp_gpt_load(amp_module *m, const char *path) { return load_sd("amp_gpt_load", m, path, NULL); }

amp_status amp_gpt_load_ex(amp_module *m, const char *path, amp_load_dtype ld) {
    static const char *fn = "amp_gpt_load_ex";
    if (gpt_of(fn, m) != AMP_OK || check_load_dtype(fn, &SH(m)->cfg, ld) != AMP_OK) return amp_last_status();
    amp_dtype fdt = AMP_F32;
    if (load_sd(fn, m, path, &fdt) != AMP_OK) return amp_last_status();
    if (ld.kind == AMP_LOAD_KEEP) ld = (amp_load_dtype){AMP_LOAD_FLOAT, fdt == AMP_F16 || fdt == AMP_BF16 ? fdt : AMP_F32, AMP_Q8_0};
    if (amp_gpt_set_load_dtype(m, ld) != AMP_OK) return amp_error_chain(AMP_OK, "%s: %s", fn, path);
    return AMP_OK;
}

/* ---- Hugging Face directories -------------------------------------------------------------------------- */
/* The GELU of a config's activation_function: GPT-2's gelu_new and its
 * equals (the tanh approximation) or the exact erf GELU; -1: another */
static int hf_activation(const char *a) {
    if (!strcmp(a, "gelu_new") || !strcmp(a, "gelu_pytorch_tanh") || !strcmp(a, "gelu_fast")) return AMP_GELU_TANH;
    if (!strcmp(a, "gelu")) return AMP_GELU_ERF;
    return -1;
}

/* config.json -> the GPT's configuration, eps and activation; the options a
 * GPT-2 config may set that amp's GPT does not compute are refused by name */
static amp_status hf_gpt2_config(const char *fn, const amp_hf_dir *d, amp_gpt_config *c, double *eps, amp_gelu_approx *act) {
    const char *dir = amp_hf_dir_path(d), *s = NULL;
    if (!amp_hf_config_has(d, "model_type") || amp_hf_config_str(d, "model_type", &s) != AMP_OK || strcmp(s, "gpt2"))
        return amp_error(AMP_ERR_FORMAT, "%s: %s/config.json: model_type %s%s%s is not \"gpt2\" (a GPT-2 directory)", fn, dir,
                         s ? "\"" : "", s ? s : "(absent or not a string)", s ? "\"" : "");
    int64_t v[5];
    static const char *const keys[5] = {"n_layer", "n_head", "n_embd", "n_positions", "vocab_size"};
    for (int i = 0; i < 5; i++)
        if (amp_hf_config_int(d, keys[i], &v[i]) != AMP_OK) return amp_error_chain(AMP_OK, "%s", fn);
    *c = (amp_gpt_config){v[0], v[1], v[2], v[3], v[4], 0.0, true};
    *eps = 1e-5;
    if (amp_hf_config_has(d, "layer_norm_epsilon") && amp_hf_config_float(d, "layer_norm_epsilon", eps) != AMP_OK)
        return amp_error_chain(AMP_OK, "%s", fn);
    if (!(*eps >= 0 && *eps < 1))
        return amp_error(AMP_ERR_RANGE, "%s: %s/config.json: layer_norm_epsilon %g is outside [0, 1)", fn, dir, *eps);
    const char *a = "gelu_new";
    if (amp_hf_config_has(d, "activation_function") && amp_hf_config_str(d, "activation_function", &a) != AMP_OK)
        return amp_error_chain(AMP_OK, "%s", fn);
    int g = hf_activation(a);
    if (g < 0)
        return amp_error(AMP_ERR_UNSUPPORTED, "%s: %s/config.json: activation_function \"%s\": amp's GPT computes gelu_new (tanh GELU, "
                                              "also gelu_pytorch_tanh, gelu_fast) or gelu (erf)",
                         fn, dir, a);
    *act = (amp_gelu_approx)g;
    int64_t inner = 0;
    if (amp_hf_config_has(d, "n_inner") && (amp_hf_config_int(d, "n_inner", &inner) != AMP_OK || inner != 4 * c->n_embd))
        return amp_error(AMP_ERR_UNSUPPORTED, "%s: %s/config.json: n_inner %lld: amp's GPT has an MLP of 4 n_embd = %lld", fn, dir,
                         (long long)inner, (long long)(4 * c->n_embd));
    static const struct {
        const char *key;
        bool supported;
    } flags[] = {{"scale_attn_weights", true}, {"scale_attn_by_inverse_layer_idx", false}, {"add_cross_attention", false}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        bool b = flags[i].supported;
        if (amp_hf_config_has(d, flags[i].key) && amp_hf_config_bool(d, flags[i].key, &b) != AMP_OK) return amp_error_chain(AMP_OK, "%s", fn);
        if (b != flags[i].supported)
            return amp_error(AMP_ERR_UNSUPPORTED, "%s: %s/config.json: %s %s: amp's GPT computes GPT-2's attention (%s)", fn, dir,
                             flags[i].key, b ? "true" : "false", flags[i].supported ? "scaled by 1/sqrt(head size)" : "without it");
    }
    return AMP_OK;
}

amp_module *amp_gpt_from_pretrained(const char *dir, amp_load_dtype ld) {
    static const char *fn = "amp_gpt_from_pretrained";
    if (!dir) return amp_error_null(AMP_ERR_ARG, "%s: dir is NULL", fn);
    if (check_load_dtype(fn, &AMP_GPT_CONFIG_GPT2, ld) != AMP_OK) return NULL; /* kind and type; the sizes below */
    amp_hf_dir *d = amp_hf_dir_open(dir);
    if (!d) return amp_error_chain_null(AMP_OK, "%s", fn);
    amp_gpt_config c;
    double eps = 1e-5;
    amp_gelu_approx act = AMP_GELU_TANH;
    amp_module *m = NULL;
    sd_src src = {NULL, d};
    amp_dtype fdt = AMP_F32;
    if (hf_gpt2_config(fn, d, &c, &eps, &act) == AMP_OK) {
        char k[64];
        snprintf(k, sizeof k, "%sh.0.ln_1.bias", layout_of(src).prefix);
        c.bias = src_find(src, k) >= 0;
        /* every tensor's shape against the config before the model is allocated */
        if (check_load_dtype(fn, &c, ld) == AMP_OK && check_sd(fn, dir, src, &c) == AMP_OK) m = gpt_build(fn, &c, NULL, eps, act, false);
    }
    if (m && load_src(fn, m, src, dir, &fdt) != AMP_OK) m = (amp_module_free(m), NULL);
    if (m && ld.kind == AMP_LOAD_KEEP) ld = (amp_load_dtype){AMP_LOAD_FLOAT, fdt == AMP_F16 || fdt == AMP_BF16 ? fdt : AMP_F32, AMP_Q8_0};
    if (m && amp_gpt_set_load_dtype(m, ld) != AMP_OK) {
        amp_error_chain(AMP_OK, "%s: %s", fn, dir);
        m = (amp_module_free(m), NULL);
    }
    amp_hf_dir_close(d);
    return m;
}

/* ---- KV cache ---------------------------------------------------------------------------------------------- */
struct amp_gpt_cache {
    amp_module *m;
    int64_t B, len;
    int n_layer;
    amp_dtype dt;
    amp_tensor **k, **v; /* per layer [B, nh, block_size, hs], allocated at the first forward */
};

amp_gpt_cache *amp_gpt_cache_new(amp_module *m, int64_t batch) {
    static const char *fn = "amp_gpt_cache_new";
    if (gpt_of(fn, m) != AMP_OK) return NULL;
    if (batch < 1 || batch > (1 << 20)) return amp_error_null(AMP_ERR_ARG, "%s: batch %lld must be 1..2^20", fn, (long long)batch);
    amp_gpt_cache *c = calloc(1, sizeof *c);
    int L = (int)SH(m)->cfg.n_layer;
    if (c) {
        c->k = calloc((size_t)L, sizeof *c->k);
        c->v = calloc((size_t)L, sizeof *c->v);
    }
    if (!c || !c->k || !c->v) {
        if (c) {
            free(c->k);
            free(c->v);
        }
        free(c);
        return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    }
    c->m = amp_module_retain(m);
    c->B = batch;
    c->n_layer = L;
    c->dt = AMP_DTYPE_COUNT;
    return c;
}

void amp_gpt_cache_free(amp_gpt_cache *c) {
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

void amp_gpt_cache_reset(amp_gpt_cache *c) {
    if (c) c->len = 0;
}
int64_t amp_gpt_cache_length(const amp_gpt_cache *c) {
    if (!c) amp_error(AMP_ERR_ARG, "amp_gpt_cache_length: cache is NULL");
    return c ? c->len : -1;
}

/* One block on new tokens x [B, T', C] at positions c->len ..: keys and
 * values appended to layer l's cache, queries attend to all of them. */
static amp_tensor *block_cached(amp_module *blk, amp_tensor *x, amp_gpt_cache *c, int l) {
    amp_module *at = CH(blk, "attn");
    gpt_shared *s = SH(blk);
    int64_t B = amp_tensor_dim(x, 0), Tn = amp_tensor_dim(x, 1), L0 = c->len, S = L0 + Tn;
    int64_t nh = s->cfg.n_head, hs = s->cfg.n_embd / nh, W = s->cfg.block_size;
    amp_tensor *qkv = lin_fwd(at, 0, "c_attn", amp_module_forward(CH(blk, "ln_1"), x));
    if (!qkv) return NULL;
    amp_tensor *hd[3];
    split_heads(qkv, &s->cfg, hd);
    if (!c->k[l]) {
        amp_mem_push_category(AMP_MEM_ACTIVATION);
        c->k[l] = amp_tensor_keep(amp_tensor_zeros(amp_tensor_dtype(hd[1]), 4, AMP_SHAPE(B, nh, W, hs)));
        c->v[l] = amp_tensor_keep(amp_tensor_zeros(amp_tensor_dtype(hd[2]), 4, AMP_SHAPE(B, nh, W, hs)));
        amp_mem_pop_category();
        if (!c->k[l] || !c->v[l]) return NULL;
    }
    if (amp_tensor_dtype(c->k[l]) != amp_tensor_dtype(hd[1]))
        return amp_error_null(AMP_ERR_DTYPE, "amp_gpt_forward_cached: the cache holds %s keys, this forward computes %s (the "
                                             "autocast state or the model's dtype changed: amp_gpt_cache_reset)",
                              amp_dtype_name(amp_tensor_dtype(c->k[l])), amp_dtype_name(amp_tensor_dtype(hd[1])));
    if (amp_tensor_copy_(amp_slice(c->k[l], 2, L0, S, 1), hd[1]) != AMP_OK ||
        amp_tensor_copy_(amp_slice(c->v[l], 2, L0, S, 1), hd[2]) != AMP_OK)
        return NULL;
    amp_sdpa_opts o = AMP_SDPA_DEFAULTS;
    amp_tensor *mask = NULL;
    if (Tn > 1 && L0 == 0) {
        o.is_causal = true;
    } else if (Tn > 1) { /* new query i (position L0 + i) sees keys j <= L0 + i: bottom-right aligned */
        mask = amp_tensor_zeros(AMP_U8, 2, AMP_SHAPE(Tn, S));
        if (!mask) return NULL;
        uint8_t *pm = amp_tensor_data(mask);
        for (int64_t i = 0; i < Tn; i++)
            for (int64_t j = 0; j <= L0 + i; j++) pm[i * S + j] = 1;
        o.attn_mask = mask;
    }
    amp_tensor *y = amp_scaled_dot_product_attention_ex(hd[0], amp_slice(c->k[l], 2, 0, S, 1), amp_slice(c->v[l], 2, 0, S, 1), &o);
    amp_tensor *h = amp_add(x, attn_out(at, y));
    return h ? amp_add(h, amp_module_forward(CH(blk, "mlp"), amp_module_forward(CH(blk, "ln_2"), h))) : NULL;
}

amp_tensor *amp_gpt_forward_cached(amp_module *m, amp_tensor *idx, amp_gpt_cache *c) {
    static const char *fn = "amp_gpt_forward_cached";
    if (!arg_ok(fn, "idx", idx) || gpt_of(fn, m) != AMP_OK) return NULL;
    if (!c) return amp_error_null(AMP_ERR_ARG, "%s: cache is NULL", fn);
    if (c->m != m) return amp_error_null(AMP_ERR_ARG, "%s: the cache was made for another model", fn);
    const amp_gpt_config *cf = &SH(m)->cfg;
    if (amp_tensor_ndim(idx) != 2 || amp_tensor_dim(idx, 0) != c->B ||
        (amp_tensor_dtype(idx) != AMP_I64 && amp_tensor_dtype(idx) != AMP_I32)) {
        char b[64];
        return amp_error_null(AMP_ERR_SHAPE, "%s: idx must be i64 or i32 [%lld, T], got %s %s", fn, (long long)c->B,
                              amp_dtype_name(amp_tensor_dtype(idx)), amp_shape_str(idx, b, sizeof b));
    }
    int64_t Tn = amp_tensor_dim(idx, 1);
    if (Tn < 1 || c->len + Tn > cf->block_size)
        return amp_error_null(AMP_ERR_RANGE, "%s: %lld cached + %lld new positions exceed block_size %lld (reset the cache)", fn,
                              (long long)c->len, (long long)Tn, (long long)cf->block_size);
    amp_module_io io;
    bool has_io = amp_module_get_io(m, &io);
    amp_no_grad_begin();
    amp_module_eval_begin(); /* eval semantics without writing the shared model's training flag */
    bool ac = has_io && io.autocast && amp_autocast_enter(io.autocast_dtype) == AMP_OK;
    amp_scope *sc = amp_scope_begin();
    amp_module *tr = CH(m, "transformer"), *h = CH(tr, "h");
    amp_tensor *x = embed(m, idx, c->len);
    for (int l = 0; l < c->n_layer && x; l++) x = block_cached(amp_module_child_at(h, l, NULL), x, c, l);
    amp_tensor *logits = amp_module_forward(CH(m, "lm_head"), amp_module_forward(CH(tr, "ln_f"), x));
    if (logits && has_io && io.output != AMP_DTYPE_COUNT && amp_tensor_dtype(logits) != io.output) logits = amp_to(logits, io.output);
    if (logits) c->len += Tn;
    logits = sc ? amp_scope_end_keep(sc, logits) : NULL;
    if (ac) amp_autocast_exit();
    amp_module_eval_end();
    amp_no_grad_end();
    return logits;
}

/* ---- generation ----------------------------------------------------------------------------------------- */
/* The hint for a non-finite value computed in dtype dt. */
static const char *range_hint(amp_dtype dt) {
    return dt == AMP_F16 ? "f16's range ends at 65504, a larger value becomes inf: run in bf16 (f32's range) or f32"
                         : "f32's range is exceeded, or the weights are damaged";
}

/* Every weight finite, or an error naming the first that is not. The
 * backend's multi-tensor check reads them all in one call (on the CPU SIMD
 * and threaded; on a GPU a kernel, only its flag and index come back); only
 * the tensor it flags is searched for the element to name. Parameters it
 * cannot take (f64, not contiguous, another device than the first's) are
 * searched one by one, in order, so the first non-finite one is named. */
static amp_status check_weights(const char *fn, amp_module *m) {
    int np = amp_module_parameters(m, NULL, NULL, 0);
    amp_tensor **ps = calloc((size_t)np + 1, sizeof *ps), **fast = calloc((size_t)np + 1, sizeof *fast);
    const char **names = calloc((size_t)np + 1, sizeof *names);
    amp_status st = ps && fast && names ? AMP_OK : amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    if (st == AMP_OK) amp_module_parameters(m, ps, names, np);
    int nf = 0, bad_i = -1; /* the first parameter the backend flagged */
    for (int i = 0; i < np && st == AMP_OK; i++) {
        fast[i] = backend_checkable(ps[i]) && amp_tensor_device(ps[i]) == amp_tensor_device(ps[0]) ? ps[i] : NULL;
        nf += fast[i] != NULL;
    }
    if (st == AMP_OK && nf) {
        const amp_backend *be = amp__backend_of(fn, ps[0]);
        if (!be || amp__scaler_first_nonfinite(fn, be, fast, np, 1.0f, NULL, &bad_i) != AMP_OK) st = amp_last_status();
    }
    for (int i = 0; i < np && st == AMP_OK && (bad_i < 0 || i <= bad_i); i++) {
        if (fast[i] && i != bad_i) continue; /* the backend found it finite */
        double bad = 0;
        int64_t at = locate_nonfinite(ps[i], &bad);
        if (at == -2) st = amp_last_status();
        else if (at >= 0) {
            amp_dtype dt = amp_tensor_dtype(ps[i]);
            st = amp_error(AMP_ERR_RANGE, "%s: parameter %s element %lld is %s (%s): the weights must be finite; %s", fn, names[i],
                           (long long)at, nonfinite_name(bad), amp_dtype_name(dt),
                           dt == AMP_F16 ? range_hint(dt) : "a damaged file, or one saved after training diverged");
        }
    }
    free(ps);
    free(fast);
    free(names);
    return st;
}

/* The step's logits (V floats) finite, or an error naming the step and the
 * precision the model ran in. */
static amp_status check_logits(const char *fn, const amp_module *m, const float *row, int64_t V, int64_t step) {
    int64_t v = 0;
    while (v < V && isfinite(row[v])) v++;
    if (v == V) return AMP_OK;
    amp_load_dtype ld;
    amp_gpt_get_load_dtype(m, &ld);
    amp_dtype wd = ld.kind == AMP_LOAD_FLOAT ? ld.dtype : AMP_F32; /* a quantized model's activations are f32 */
    amp_module_io io;
    amp_dtype ac = amp_autocast_is_enabled() ? amp_autocast_dtype()
                   : amp_module_get_io(m, &io) && io.autocast ? io.autocast_dtype
                                                               : AMP_DTYPE_COUNT;
    amp_dtype worst = wd == AMP_F16 || ac == AMP_F16 ? AMP_F16 : wd;
    char prec[96];
    snprintf(prec, sizeof prec, "%s weights%s%s", amp_load_dtype_name(ld), ac != AMP_DTYPE_COUNT ? ", autocast to " : "",
             ac != AMP_DTYPE_COUNT ? amp_dtype_name(ac) : "");
    return amp_error(AMP_ERR_RANGE, "%s: the logits of step %lld are not finite (token %lld: %s) with %s: %s", fn, (long long)step,
                     (long long)v, nonfinite_name(row[v]), prec, range_hint(worst));
}

/* Next token from a logits row (V floats). */
static int64_t sample(const float *row, int64_t V, const amp_gpt_generate_opts *o, amp_generator *g, double *scratch) {
    int64_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (row[v] > row[best]) best = v;
    if (o->temperature <= 0) return best;
    /* (logit - max) / T: at most 0, so nothing overflows; when T is so small
     * that the quotient does (1e-310), every other token gets -inf and
     * probability 0: the greedy token, the limit of T -> 0 */
    for (int64_t v = 0; v < V; v++) scratch[v] = ((double)row[v] - (double)row[best]) / o->temperature;
    double cut = -INFINITY;
    if (o->top_k > 0 && o->top_k < V) { /* the k-th largest value (ties kept, as nanoGPT's logits < v[-1]) */
        double *tmp = scratch + V;
        memcpy(tmp, scratch, sizeof(double) * (size_t)V);
        int64_t lo = 0, hi = V - 1, k = o->top_k - 1; /* quickselect for descending order */
        while (lo < hi) {
            double piv = tmp[(lo + hi) / 2];
            int64_t i = lo, j = hi;
            while (i <= j) {
                while (tmp[i] > piv) i++;
                while (tmp[j] < piv) j--;
                if (i <= j) {
                    double t = tmp[i];
                    tmp[i] = tmp[j];
                    tmp[j] = t;
                    i++;
                    j--;
                }
            }
            if (k <= j) hi = j;
            else if (k >= i) lo = i;
            else break;
        }
        cut = tmp[k];
    }
    double sum = 0;
    for (int64_t v = 0; v < V; v++) {
        scratch[v] = scratch[v] < cut ? 0.0 : exp(scratch[v]);
        sum += scratch[v];
    }
    amp_tensor *u = amp_tensor_uniform(AMP_F32, 1, AMP_SHAPE(1), 0.0, 1.0, g);
    double r = u ? amp_tensor_item(u) * sum : 0;
    amp_tensor_free(u);
    double acc = 0;
    int64_t last = best;
    for (int64_t v = 0; v < V; v++) {
        if (scratch[v] <= 0) continue;
        acc += scratch[v];
        last = v;
        if (r < acc) return v;
    }
    return last;
}

amp_status amp_gpt_generate(amp_module *m, const int64_t *prompt, int64_t n, int64_t *out, int64_t *n_out,
                            const amp_gpt_generate_opts *o) {
    static const char *fn = "amp_gpt_generate";
    if (gpt_of(fn, m) != AMP_OK) return amp_last_status();
    if (n_out) *n_out = 0;
    amp_gpt_generate_opts d = AMP_GPT_GENERATE_DEFAULTS;
    if (!o) o = &d;
    if (!prompt || n < 1 || !n_out || (o->max_new_tokens > 0 && !out))
        return amp_error(AMP_ERR_ARG, "%s: need a prompt of at least one token, out and n_out", fn);
    if (o->max_new_tokens < 0 || o->max_new_tokens > (1 << 24) || n > (1 << 24))
        return amp_error(AMP_ERR_ARG, "%s: max_new_tokens %lld / prompt length %lld out of range", fn,
                         (long long)o->max_new_tokens, (long long)n);
    if (!(o->temperature >= 0) || !isfinite(o->temperature) || o->top_k < 0)
        return amp_error(AMP_ERR_ARG, "%s: temperature %g must be >= 0 and finite, top_k %lld >= 0", fn, o->temperature,
                         (long long)o->top_k);
    const amp_gpt_config *cf = &SH(m)->cfg;
    int64_t V = cf->vocab_size, W = cf->block_size, H = W / 2 > 0 ? W / 2 : 1;
    for (int64_t i = 0; i < n; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return amp_error(AMP_ERR_RANGE, "%s: prompt token %lld (at %lld) is outside the vocabulary 0..%lld", fn,
                             (long long)prompt[i], (long long)i, (long long)V - 1);
    if (check_weights(fn, m) != AMP_OK) return amp_last_status();
    amp_generator *g = o->generator ? o->generator : amp_default_generator();
    int64_t total = n + o->max_new_tokens;
    int64_t *seq = malloc(sizeof(int64_t) * (size_t)total);
    double *scratch = malloc(sizeof(double) * 2 * (size_t)V);
    float *row = malloc(sizeof(float) * (size_t)V);
    amp_gpt_cache *cache = o->use_kv_cache ? amp_gpt_cache_new(m, 1) : NULL;
    amp_status st = AMP_OK;
    if (!seq || !scratch || !row || (o->use_kv_cache && !cache)) {
        st = cache || !o->use_kv_cache ? amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn) : amp_last_status();
        goto done;
    }
    memcpy(seq, prompt, sizeof(int64_t) * (size_t)n);
    amp_module_eval_begin(); /* eval semantics without writing the shared module's flag */
    amp_no_grad_begin();
    int64_t len = n, ws = n > W ? n - W : 0, cached_ws = -1;
    while (len < total && st == AMP_OK) {
        if (len - ws > W) ws = len - H; /* the window is full: keep its newest half */
        amp_scope *sc = amp_scope_begin();
        amp_tensor *logits;
        int64_t from;
        if (cache) {
            if (cached_ws != ws) { /* a new window: encode it from position 0 */
                amp_gpt_cache_reset(cache);
                cached_ws = ws;
            }
            from = ws + amp_gpt_cache_length(cache);
            amp_tensor *x = amp_tensor_from_data(seq + from, AMP_I64, 2, AMP_SHAPE(1, len - from));
            logits = amp_gpt_forward_cached(m, x, cache);
        } else {
            from = ws;
            amp_tensor *x = amp_tensor_from_data(seq + from, AMP_I64, 2, AMP_SHAPE(1, len - from));
            logits = amp_module_forward(m, x);
        }
        if (logits) {
            amp_tensor *last = amp_slice(amp_reshape(logits, 2, AMP_SHAPE(len - from, V)), 0, len - from - 1, len - from, 1);
            st = last ? amp_tensor_copy_out(last, row, AMP_F32) : amp_last_status();
        } else {
            st = amp_last_status();
        }
        amp_scope_end(sc);
        if (st == AMP_OK) st = check_logits(fn, m, row, V, len - n + 1);
        if (st != AMP_OK) break;
        int64_t tok = sample(row, V, o, g, scratch);
        seq[len++] = tok;
        out[len - n - 1] = tok;
        *n_out = len - n;
        if (tok == o->stop_token) break;
    }
    amp_no_grad_end();
    amp_module_eval_end();
done:
    amp_gpt_cache_free(cache);
    free(seq);
    free(scratch);
    free(row);
    return st;
}

/* BERT (Hugging Face's BertModel) built with the public module API only
 * (amp/nn.h), loaded from a Hugging Face model directory (amp/pretrained.h),
 * and sentence embeddings as sentence-transformers computes them. amp/bert.h
 * has the contract. Shapes in comments: B batch, T tokens, H hidden, nh
 * heads, hd = H / nh, I intermediate. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "amp/bert.h"
#include "core/error.h"

#define BERT_MAX_DIM ((int64_t)1 << 20) /* any size of a config beyond this is a broken file */
#define BERT_MAX_LAYERS 1024
#define SHAPE_BUF 160

/* ---- the modules ------------------------------------------------------------------------------- */
typedef struct {
    amp_bert_config cfg;
} model_data;

typedef struct {
    amp_qtensor *q; /* a quantized weight (then no "weight" parameter), or NULL */
    int64_t in, out;
    double eps;           /* LayerNorm */
    amp_gelu_approx act;  /* BertIntermediate */
    int64_t nh;           /* BertSelfAttention */
    amp_dtype emb_dtype;  /* a quantized Embedding's output dtype */
} mod_data;

static void mod_destroy(void *data) {
    mod_data *d = data;
    amp_qtensor_free(d->q);
    d->q = NULL;
}

static mod_data *D(const amp_module *m) { return amp_module_data(m); }
static amp_module *CH(const amp_module *m, const char *name) { return amp_module_get_child(m, name); }
static amp_tensor *P(const amp_module *m, const char *name) { return amp_module_get_parameter(m, name); }

static amp_tensor *linear_fwd(amp_module *m, amp_tensor *x) {
    mod_data *d = D(m);
    amp_tensor *b = P(m, "bias");
    return d->q ? amp_qlinear(x, d->q, b) : amp_linear(x, P(m, "weight"), b);
}
static void linear_repr(const amp_module *m, char *b, size_t n) {
    const mod_data *d = D(m);
    snprintf(b, n, "in_features=%lld, out_features=%lld, bias=True%s%s", (long long)d->in, (long long)d->out, d->q ? ", weight=" : "",
             d->q ? amp_qtype_name(amp_qtensor_type(d->q)) : "");
}
static const amp_module_class linear_class = {.name = "Linear", .forward = linear_fwd, .extra_repr = linear_repr, .destroy = mod_destroy};

static amp_tensor *embedding_fwd(amp_module *m, amp_tensor *idx) {
    mod_data *d = D(m);
    return d->q ? amp_qembedding(d->q, idx, d->emb_dtype) : amp_embedding(P(m, "weight"), idx);
}
static void embedding_repr(const amp_module *m, char *b, size_t n) {
    const mod_data *d = D(m);
    snprintf(b, n, "%lld, %lld%s%s", (long long)d->in, (long long)d->out, d->q ? ", weight=" : "",
             d->q ? amp_qtype_name(amp_qtensor_type(d->q)) : "");
}
static const amp_module_class embedding_class = {
    .name = "Embedding", .forward = embedding_fwd, .extra_repr = embedding_repr, .destroy = mod_destroy};

static amp_tensor *ln_fwd(amp_module *m, amp_tensor *x) { return amp_layer_norm(x, 1, P(m, "weight"), P(m, "bias"), D(m)->eps); }
static void ln_repr(const amp_module *m, char *b, size_t n) {
    snprintf(b, n, "(%lld,), eps=%g, elementwise_affine=True", (long long)D(m)->in, D(m)->eps);
}
static const amp_module_class ln_class = {.name = "LayerNorm",
                                          .forward = ln_fwd,
                                          .extra_repr = ln_repr,
                                          .destroy = mod_destroy,
                                          .flags = AMP_MODULE_NORM | AMP_MODULE_HALF_IO};

/* BertEmbeddings: (ids, token_types) -> LayerNorm(word + token_type + position) [B, T, H] */
static amp_tensor *embeddings_fwd_n(amp_module *m, amp_tensor *const *xs, int n) {
    (void)n;
    amp_tensor *ids = xs[0], *tt = xs[1];
    int64_t T = amp_tensor_dim(ids, 1);
    amp_tensor *pos = amp_tensor_arange(0, (double)T, 1, AMP_I64);
    if (pos && amp_tensor_device(ids) != AMP_DEVICE_CPU) pos = amp_tensor_to(pos, amp_tensor_device(ids));
    amp_tensor *x = amp_add(amp_module_forward(CH(m, "word_embeddings"), ids), amp_module_forward(CH(m, "token_type_embeddings"), tt));
    x = amp_add(x, amp_module_forward(CH(m, "position_embeddings"), pos)); /* [T, H] broadcast over B */
    return amp_module_forward(CH(m, "LayerNorm"), x);
}
static const amp_module_class embeddings_class = {.name = "BertEmbeddings", .forward_n = embeddings_fwd_n, .destroy = mod_destroy};

/* [B, T, H] -> [B, nh, T, hd] */
static amp_tensor *heads(amp_tensor *x, int64_t nh) {
    int64_t B = amp_tensor_dim(x, 0), T = amp_tensor_dim(x, 1), H = amp_tensor_dim(x, 2);
    return amp_transpose(amp_reshape(x, 4, AMP_SHAPE(B, T, nh, H / nh)), 1, 2);
}

/* BertSelfAttention: (x [B, T, H], key mask u8 [B, 1, 1, T] or NULL) -> [B, T, H] */
static amp_tensor *self_attn_fwd_n(amp_module *m, amp_tensor *const *xs, int n) {
    amp_tensor *x = xs[0], *mask = n > 1 ? xs[1] : NULL;
    int64_t nh = D(m)->nh;
    amp_tensor *q = heads(amp_module_forward(CH(m, "query"), x), nh);
    amp_tensor *k = heads(amp_module_forward(CH(m, "key"), x), nh);
    amp_tensor *v = heads(amp_module_forward(CH(m, "value"), x), nh);
    amp_sdpa_opts o = AMP_SDPA_DEFAULTS;
    o.attn_mask = mask;
    amp_tensor *y = amp_scaled_dot_product_attention_ex(q, k, v, &o); /* [B, nh, T, hd] */
    if (!y) return NULL;
    return amp_reshape(amp_transpose(y, 1, 2), 3, AMP_SHAPE(amp_tensor_dim(x, 0), amp_tensor_dim(x, 1), amp_tensor_dim(x, 2)));
}
static const amp_module_class self_attn_class = {.name = "BertSelfAttention", .forward_n = self_attn_fwd_n, .destroy = mod_destroy};

/* BertSelfOutput / BertOutput: (h, residual) -> LayerNorm(dense(h) + residual) (post-LN) */
static amp_tensor *out_fwd_n(amp_module *m, amp_tensor *const *xs, int n) {
    (void)n;
    return amp_module_forward(CH(m, "LayerNorm"), amp_add(amp_module_forward(CH(m, "dense"), xs[0]), xs[1]));
}
static const amp_module_class self_out_class = {.name = "BertSelfOutput", .forward_n = out_fwd_n, .destroy = mod_destroy};
static const amp_module_class output_class = {.name = "BertOutput", .forward_n = out_fwd_n, .destroy = mod_destroy};

/* BertAttention: (x, mask) -> output(self(x, mask), x) */
static amp_tensor *attention_fwd_n(amp_module *m, amp_tensor *const *xs, int n) {
    amp_tensor *a = amp_module_forward_n(CH(m, "self"), xs, n);
    return a ? amp_module_forward_n(CH(m, "output"), (amp_tensor *[]){a, xs[0]}, 2) : NULL;
}
static const amp_module_class attention_class = {.name = "BertAttention", .forward_n = attention_fwd_n, .destroy = mod_destroy};

/* BertIntermediate: gelu(dense(x)) */
static amp_tensor *inter_fwd(amp_module *m, amp_tensor *x) { return amp_gelu(amp_module_forward(CH(m, "dense"), x), D(m)->act); }
static const amp_module_class inter_class = {.name = "BertIntermediate", .forward = inter_fwd, .destroy = mod_destroy};

/* BertLayer: (x, mask) -> [B, T, H]; its temporaries freed as it returns */
static amp_tensor *layer_fwd_n(amp_module *m, amp_tensor *const *xs, int n) {
    amp_scope *sc = amp_scope_begin();
    if (!sc) return NULL;
    amp_tensor *h = amp_module_forward_n(CH(m, "attention"), xs, n);
    amp_tensor *y = h ? amp_module_forward_n(CH(m, "output"), (amp_tensor *[]){amp_module_forward(CH(m, "intermediate"), h), h}, 2) : NULL;
    return amp_scope_end_keep(sc, y);
}
static const amp_module_class layer_class = {.name = "BertLayer", .forward_n = layer_fwd_n, .destroy = mod_destroy};
static const amp_module_class encoder_class = {.name = "BertEncoder", .destroy = mod_destroy};

/* BertModel: (ids, token_types, attn_mask) -> last hidden state; checked by amp_bert_forward */
static amp_tensor *bert_fwd_n(amp_module *m, amp_tensor *const *xs, int n) {
    amp_tensor *ids = xs[0], *tt = n > 1 ? xs[1] : NULL, *mask = n > 2 ? xs[2] : NULL; /* (amp_module_forward_n refuses NULL inputs) */
    amp_scope *sc = amp_scope_begin();
    if (!sc) return NULL;
    if (!tt) tt = amp_tensor_zeros_on(amp_tensor_device(ids), AMP_I64, 2, amp_tensor_shape(ids));
    amp_tensor *km = NULL; /* key mask [B, 1, 1, T], u8 */
    if (mask) {
        km = amp_tensor_dtype(mask) == AMP_U8 ? mask : amp_to(mask, AMP_U8);
        km = amp_reshape(km, 4, AMP_SHAPE(amp_tensor_dim(ids, 0), 1, 1, amp_tensor_dim(ids, 1)));
    }
    amp_tensor *x = (tt && (!mask || km)) ? amp_module_forward_n(CH(m, "embeddings"), (amp_tensor *[]){ids, tt}, 2) : NULL;
    amp_module *layers = CH(CH(m, "encoder"), "layer");
    int L = amp_module_num_children(layers);
    for (int l = 0; l < L && x; l++) x = amp_module_forward_n(amp_module_child_at(layers, l, NULL), (amp_tensor *[]){x, km}, km ? 2 : 1);
    return amp_scope_end_keep(sc, x);
}
static amp_tensor *bert_fwd(amp_module *m, amp_tensor *ids) { return bert_fwd_n(m, &ids, 1); }
static const amp_module_class bert_class = {.name = "BertModel", .forward = bert_fwd, .forward_n = bert_fwd_n};

/* ---- loading ------------------------------------------------------------------------------------- */
typedef struct {
    const char *fn;
    const amp_hf_dir *d;
    const char *prefix; /* "" or "bert." */
    amp_dtype dt;       /* float parameters */
    bool quant;
    amp_qtype qt;
    bool ok;
} loader;

static const char *full_name(const loader *ld, const char *name, char *buf, size_t n) {
    snprintf(buf, n, "%s%s", ld->prefix, name);
    return buf;
}

static amp_module *new_mod(const amp_module_class *cls) { return amp_module_new(cls, sizeof(mod_data)); }

/* Registers child under name when everything went well so far, frees it otherwise. */
static void take(loader *ld, amp_module *parent, const char *name, amp_module *child) {
    if (ld->ok && child && parent) ld->ok = amp_module_register_module(parent, name, child) != NULL;
    else {
        amp_module_free(child);
        ld->ok = false;
    }
}

/* The file's tensor `name` (prefix added) as parameter `pname` of m, in dt. */
static void param(loader *ld, amp_module *m, const char *pname, const char *name, amp_dtype dt, int nd, const int64_t *dims) {
    if (!ld->ok || !m) {
        ld->ok = false;
        return;
    }
    char nb[512];
    amp_tensor *t = amp_hf_dir_get(ld->d, full_name(ld, name, nb, sizeof nb), dt, nd, dims);
    ld->ok = t && amp_module_register_parameter(m, pname, t);
}

/* The file's f32 weight `name` quantized into m's data. */
static void qweight(loader *ld, amp_module *m, const char *name, int64_t rows, int64_t cols) {
    if (!ld->ok || !m) {
        ld->ok = false;
        return;
    }
    char nb[512];
    amp_scope *sc = amp_scope_begin();
    amp_tensor *w = sc ? amp_hf_dir_get(ld->d, full_name(ld, name, nb, sizeof nb), AMP_F32, 2, AMP_SHAPE(rows, cols)) : NULL;
    D(m)->q = w ? amp_quantize(w, ld->qt) : NULL;
    ld->ok = D(m)->q != NULL;
    if (!ld->ok && w) amp_error_chain(amp_last_status(), "%s: tensor '%s'", ld->fn, nb);
    if (sc) amp_scope_end(sc);
}

/* nn.Linear(in, out) from `<pre>.weight` [out, in] and `<pre>.bias` [out] (cls linear_class), or
 * nn.LayerNorm(in, eps) from `<pre>.weight` and `<pre>.bias` [in] (ln_class). Under a quantized load
 * the linear weight is quantized, the rest f32. */
static amp_module *wb_load(loader *ld, const amp_module_class *cls, const char *pre, int64_t in, int64_t out, double eps) {
    amp_module *m = new_mod(cls);
    if (!m) return NULL;
    bool lin = cls == &linear_class;
    D(m)->in = in;
    D(m)->out = out;
    D(m)->eps = eps;
    char w[256], b[256];
    snprintf(w, sizeof w, "%s.weight", pre);
    snprintf(b, sizeof b, "%s.bias", pre);
    amp_dtype dt = ld->quant ? AMP_F32 : ld->dt;
    if (lin && ld->quant) qweight(ld, m, w, out, in);
    else param(ld, m, "weight", w, dt, lin ? 2 : 1, lin ? AMP_SHAPE(out, in) : AMP_SHAPE(in));
    param(ld, m, "bias", b, dt, 1, AMP_SHAPE(out));
    return m;
}
#define linear_load(ld, pre, in, out) wb_load(ld, &linear_class, pre, in, out, 0)
#define ln_load(ld, pre, H, eps) wb_load(ld, &ln_class, pre, H, H, eps)

static amp_module *embedding_load(loader *ld, const char *name, int64_t num, int64_t dim, bool quantize) {
    amp_module *m = new_mod(&embedding_class);
    if (!m) return NULL;
    D(m)->in = num;
    D(m)->out = dim;
    D(m)->emb_dtype = AMP_F32;
    if (quantize) qweight(ld, m, name, num, dim);
    else param(ld, m, "weight", name, ld->quant ? AMP_F32 : ld->dt, 2, AMP_SHAPE(num, dim));
    return m;
}

static amp_module *layer_load(loader *ld, const amp_bert_config *c, int l) {
    int64_t H = c->hidden_size, I = c->intermediate_size;
    char p[160], q[200];
    snprintf(p, sizeof p, "encoder.layer.%d.", l);
#define NAME(s) (snprintf(q, sizeof q, "%s%s", p, s), q)
    amp_module *layer = new_mod(&layer_class), *att = new_mod(&attention_class), *self = new_mod(&self_attn_class),
               *so = new_mod(&self_out_class), *inter = new_mod(&inter_class), *out = new_mod(&output_class);
    if (self) D(self)->nh = c->num_heads;
    if (inter) D(inter)->act = c->act;
    take(ld, self, "query", linear_load(ld, NAME("attention.self.query"), H, H));
    take(ld, self, "key", linear_load(ld, NAME("attention.self.key"), H, H));
    take(ld, self, "value", linear_load(ld, NAME("attention.self.value"), H, H));
    take(ld, so, "dense", linear_load(ld, NAME("attention.output.dense"), H, H));
    take(ld, so, "LayerNorm", ln_load(ld, NAME("attention.output.LayerNorm"), H, c->layer_norm_eps));
    take(ld, att, "self", self);
    take(ld, att, "output", so);
    take(ld, inter, "dense", linear_load(ld, NAME("intermediate.dense"), H, I));
    take(ld, out, "dense", linear_load(ld, NAME("output.dense"), I, H));
    take(ld, out, "LayerNorm", ln_load(ld, NAME("output.LayerNorm"), H, c->layer_norm_eps));
    take(ld, layer, "attention", att);
    take(ld, layer, "intermediate", inter);
    take(ld, layer, "output", out);
#undef NAME
    if (ld->ok) return layer;
    amp_module_free(layer);
    return NULL;
}

static const char *shape_text(int nd, const int64_t *dims, char b[SHAPE_BUF]) {
    size_t k = (size_t)snprintf(b, SHAPE_BUF, "[");
    for (int i = 0; i < nd && k < SHAPE_BUF; i++) k += (size_t)snprintf(b + k, SHAPE_BUF - k, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (k < SHAPE_BUF) snprintf(b + k, SHAPE_BUF - k, "]");
    return b;
}

/* Every tensor the model reads, with the shape the config implies: checked
 * (present, a float dtype, that shape) before anything is allocated. */
static amp_status check_tensors(const loader *ld, const amp_bert_config *c) {
    int64_t H = c->hidden_size, I = c->intermediate_size;
    struct {
        const char *name;
        int nd;
        int64_t d0, d1;
    } emb[] = {{"embeddings.word_embeddings.weight", 2, c->vocab_size, H},
               {"embeddings.position_embeddings.weight", 2, c->max_position, H},
               {"embeddings.token_type_embeddings.weight", 2, c->type_vocab_size, H},
               {"embeddings.LayerNorm.weight", 1, H, 0},
               {"embeddings.LayerNorm.bias", 1, H, 0}},
      lay[] = {{"attention.self.query.weight", 2, H, H},     {"attention.self.query.bias", 1, H, 0},
               {"attention.self.key.weight", 2, H, H},       {"attention.self.key.bias", 1, H, 0},
               {"attention.self.value.weight", 2, H, H},     {"attention.self.value.bias", 1, H, 0},
               {"attention.output.dense.weight", 2, H, H},   {"attention.output.dense.bias", 1, H, 0},
               {"attention.output.LayerNorm.weight", 1, H, 0}, {"attention.output.LayerNorm.bias", 1, H, 0},
               {"intermediate.dense.weight", 2, I, H},       {"intermediate.dense.bias", 1, I, 0},
               {"output.dense.weight", 2, H, I},             {"output.dense.bias", 1, H, 0},
               {"output.LayerNorm.weight", 1, H, 0},         {"output.LayerNorm.bias", 1, H, 0}};
    const int ne = (int)(sizeof emb / sizeof emb[0]), nl = (int)(sizeof lay / sizeof lay[0]);
    for (int64_t l = -1; l < c->num_layers; l++) {
        for (int k = 0; k < (l < 0 ? ne : nl); k++) {
            const char *nm = l < 0 ? emb[k].name : lay[k].name;
            int nd = l < 0 ? emb[k].nd : lay[k].nd;
            int64_t want[2] = {l < 0 ? emb[k].d0 : lay[k].d0, l < 0 ? emb[k].d1 : lay[k].d1};
            char full[512];
            if (l < 0) snprintf(full, sizeof full, "%s%s", ld->prefix, nm);
            else snprintf(full, sizeof full, "%sencoder.layer.%lld.%s", ld->prefix, (long long)l, nm);
            amp_safetensors_info in;
            if (!amp_hf_dir_has_tensor(ld->d, full))
                return amp_error(AMP_ERR_FORMAT, "%s: %s has no tensor '%s' (config.json: %lld layers)", ld->fn, amp_hf_dir_path(ld->d),
                                 full, (long long)c->num_layers);
            if (amp_hf_dir_tensor_info(ld->d, full, &in)) return amp_error_chain(amp_last_status(), "%s", ld->fn);
            if (in.ndim != nd || in.shape[0] != want[0] || (nd == 2 && in.shape[1] != want[1])) {
                char got[SHAPE_BUF], exp[SHAPE_BUF];
                return amp_error(AMP_ERR_SHAPE, "%s: %s: tensor '%s' has shape %s; config.json implies %s", ld->fn, amp_hf_dir_path(ld->d),
                                 full, shape_text(in.ndim, in.shape, got), shape_text(nd, want, exp));
            }
            if (in.dtype == AMP_DTYPE_COUNT || !amp_dtype_is_float(in.dtype))
                return amp_error(AMP_ERR_DTYPE, "%s: %s: tensor '%s' has dtype %s, not a floating-point dtype", ld->fn,
                                 amp_hf_dir_path(ld->d), full, in.dtype_name);
        }
    }
    return AMP_OK;
}

static amp_status cfg_int(const char *fn, const amp_hf_dir *d, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    if (amp_hf_config_int(d, key, out)) return amp_error_chain(amp_last_status(), "%s", fn);
    if (*out < lo || *out > hi)
        return amp_error(AMP_ERR_FORMAT, "%s: %s/config.json: %s = %lld is outside [%lld, %lld]", fn, amp_hf_dir_path(d), key,
                         (long long)*out, (long long)lo, (long long)hi);
    return AMP_OK;
}

static amp_status read_config(const char *fn, const amp_hf_dir *d, amp_bert_config *c) {
    const char *path = amp_hf_dir_path(d), *mt, *act = "gelu";
    if (amp_hf_config_str(d, "model_type", &mt)) return amp_error_chain(amp_last_status(), "%s", fn);
    if (strcmp(mt, "bert"))
        return amp_error(AMP_ERR_UNSUPPORTED, "%s: %s/config.json: model_type \"%.100s\" is not a BERT (\"bert\")", fn, path, mt);
    if (cfg_int(fn, d, "vocab_size", 1, (int64_t)1 << 24, &c->vocab_size) ||
        cfg_int(fn, d, "hidden_size", 1, BERT_MAX_DIM, &c->hidden_size) ||
        cfg_int(fn, d, "num_hidden_layers", 1, BERT_MAX_LAYERS, &c->num_layers) ||
        cfg_int(fn, d, "num_attention_heads", 1, BERT_MAX_DIM, &c->num_heads) ||
        cfg_int(fn, d, "intermediate_size", 1, BERT_MAX_DIM, &c->intermediate_size) ||
        cfg_int(fn, d, "max_position_embeddings", 1, BERT_MAX_DIM, &c->max_position))
        return amp_last_status();
    c->type_vocab_size = 2;
    if (amp_hf_config_has(d, "type_vocab_size") && cfg_int(fn, d, "type_vocab_size", 1, 1024, &c->type_vocab_size)) return amp_last_status();
    c->pad_id = 0;
    if (amp_hf_config_has(d, "pad_token_id") && cfg_int(fn, d, "pad_token_id", 0, c->vocab_size - 1, &c->pad_id)) return amp_last_status();
    if (c->hidden_size % c->num_heads)
        return amp_error(AMP_ERR_FORMAT, "%s: %s/config.json: hidden_size %lld is not a multiple of num_attention_heads %lld", fn, path,
                         (long long)c->hidden_size, (long long)c->num_heads);
    c->layer_norm_eps = 1e-12; /* BertConfig's default */
    if (amp_hf_config_has(d, "layer_norm_eps") && amp_hf_config_float(d, "layer_norm_eps", &c->layer_norm_eps))
        return amp_error_chain(amp_last_status(), "%s", fn);
    if (!(c->layer_norm_eps >= 0 && c->layer_norm_eps < 1))
        return amp_error(AMP_ERR_FORMAT, "%s: %s/config.json: layer_norm_eps %g is outside [0, 1)", fn, path, c->layer_norm_eps);
    if (amp_hf_config_has(d, "hidden_act") && amp_hf_config_str(d, "hidden_act", &act)) return amp_error_chain(amp_last_status(), "%s", fn);
    if (!strcmp(act, "gelu")) c->act = AMP_GELU_ERF;
    else if (!strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh")) c->act = AMP_GELU_TANH;
    else return amp_error(AMP_ERR_UNSUPPORTED, "%s: %s/config.json: hidden_act \"%.100s\" is not supported (gelu, gelu_new)", fn, path, act);
    const char *pet;
    if (amp_hf_config_has(d, "position_embedding_type") && !amp_hf_config_str(d, "position_embedding_type", &pet) && strcmp(pet, "absolute"))
        return amp_error(AMP_ERR_UNSUPPORTED, "%s: %s/config.json: position_embedding_type \"%.100s\" is not supported (absolute)", fn,
                         path, pet);
    c->max_seq_length = c->max_position;
    int64_t msl;
    amp_status st = amp_hf_file_int(d, "sentence_bert_config.json", "max_seq_length", &msl);
    if (st == AMP_OK) {
        if (msl < 2 || msl > c->max_position)
            return amp_error(AMP_ERR_FORMAT, "%s: %s/sentence_bert_config.json: max_seq_length %lld is outside [2, %lld]", fn, path,
                             (long long)msl, (long long)c->max_position);
        c->max_seq_length = msl;
    } else if (st == AMP_ERR_IO) {
        amp_clear_error(); /* no sentence_bert_config.json: not an error */
    } else {
        return amp_error_chain(st, "%s", fn);
    }
    return AMP_OK;
}

amp_module *amp_bert_from_pretrained(const char *dir, const amp_bert_load_opts *o) {
    static const char *fn = "amp_bert_from_pretrained";
    amp_bert_load_opts opts = o ? *o : AMP_BERT_LOAD_DEFAULTS;
    if (!dir) return amp_error_null(AMP_ERR_ARG, "%s: dir is NULL", fn);
    amp_load_dtype ld_dt = opts.load_dtype;
    if (ld_dt.kind == AMP_LOAD_FLOAT && ld_dt.dtype != AMP_F32 && ld_dt.dtype != AMP_F16 && ld_dt.dtype != AMP_BF16)
        return amp_error_null(AMP_ERR_DTYPE, "%s: load dtype %s: a BERT is loaded in f32, f16, bf16, q8_0, q4_0 or q4_1", fn,
                              amp_dtype_name(ld_dt.dtype));
    if (ld_dt.kind == AMP_LOAD_QUANT && ld_dt.qtype != AMP_Q8_0 && ld_dt.qtype != AMP_Q4_0 && ld_dt.qtype != AMP_Q4_1)
        return amp_error_null(AMP_ERR_UNSUPPORTED, "%s: load dtype %s: a BERT is quantized to q8_0, q4_0 or q4_1", fn,
                              amp_load_dtype_name(ld_dt));
    if (ld_dt.kind != AMP_LOAD_KEEP && ld_dt.kind != AMP_LOAD_FLOAT && ld_dt.kind != AMP_LOAD_QUANT)
        return amp_error_null(AMP_ERR_ARG, "%s: load dtype kind %d is not keep, float or quantized", fn, (int)ld_dt.kind);
    amp_hf_dir *d = amp_hf_dir_open(dir);
    if (!d) return amp_error_chain_null(amp_last_status(), "%s", fn);
    amp_bert_config c;
    memset(&c, 0, sizeof c);
    loader ld = {fn, d, "", AMP_F32, false, AMP_Q8_0, true};
    amp_module *m = NULL;
    if (read_config(fn, d, &c)) goto out;
    if (!amp_hf_dir_has_tensor(d, "embeddings.word_embeddings.weight") && amp_hf_dir_has_tensor(d, "bert.embeddings.word_embeddings.weight"))
        ld.prefix = "bert."; /* BertForMaskedLM / ForSequenceClassification checkpoints */
    if (check_tensors(&ld, &c)) goto out;
    if (ld_dt.kind == AMP_LOAD_KEEP) { /* the file's dtype (of the token embedding); f64 / fp8 files load in f32 */
        amp_safetensors_info in;
        char nb[512];
        if (amp_hf_dir_tensor_info(d, full_name(&ld, "embeddings.word_embeddings.weight", nb, sizeof nb), &in)) goto out;
        ld_dt.kind = AMP_LOAD_FLOAT;
        ld_dt.dtype = in.dtype == AMP_F16 || in.dtype == AMP_BF16 ? in.dtype : AMP_F32;
    }
    ld.quant = ld_dt.kind == AMP_LOAD_QUANT;
    ld.dt = ld.quant ? AMP_F32 : ld_dt.dtype;
    ld.qt = ld_dt.qtype;
    if (ld.quant) {
        int64_t be = amp_qtype_block_elems(ld.qt);
        if (c.hidden_size % be || c.intermediate_size % be) {
            amp_error(AMP_ERR_SHAPE, "%s: %s: hidden_size %lld and intermediate_size %lld must be multiples of %s's block of %lld", fn, dir,
                      (long long)c.hidden_size, (long long)c.intermediate_size, amp_qtype_name(ld.qt), (long long)be);
            goto out;
        }
    }
    c.load_dtype = ld_dt;
    m = amp_module_new(&bert_class, sizeof(model_data));
    amp_module *emb = new_mod(&embeddings_class), *enc = new_mod(&encoder_class), *list = amp_nn_module_list();
    if (m) ((model_data *)amp_module_data(m))->cfg = c;
    ld.ok = m != NULL;
    amp_mem_push_category(AMP_MEM_PARAM);
    take(&ld, emb, "word_embeddings", embedding_load(&ld, "embeddings.word_embeddings.weight", c.vocab_size, c.hidden_size, ld.quant));
    take(&ld, emb, "position_embeddings", embedding_load(&ld, "embeddings.position_embeddings.weight", c.max_position, c.hidden_size, false));
    take(&ld, emb, "token_type_embeddings",
         embedding_load(&ld, "embeddings.token_type_embeddings.weight", c.type_vocab_size, c.hidden_size, false));
    take(&ld, emb, "LayerNorm", ln_load(&ld, "embeddings.LayerNorm", c.hidden_size, c.layer_norm_eps));
    for (int l = 0; l < c.num_layers && ld.ok; l++) {
        amp_module *layer = layer_load(&ld, &c, l);
        if (!layer || amp_module_append(list, layer)) ld.ok = false;
    }
    amp_mem_pop_category();
    take(&ld, enc, "layer", list);
    take(&ld, m, "embeddings", emb);
    take(&ld, m, "encoder", enc);
    if (!ld.ok) {
        amp_error_chain(amp_last_status(), "%s: %s", fn, dir);
        amp_module_free(m);
        m = NULL;
        goto out;
    }
    amp_module_train(m, false);
out:
    amp_hf_dir_close(d);
    return m;
}

/* ---- running ------------------------------------------------------------------------------------- */
static amp_status bert_of(const char *fn, const amp_module *m) {
    if (!m) return amp_error(AMP_ERR_ARG, "%s: m is NULL", fn);
    if (amp_module_class_of(m) != &bert_class)
        return amp_error(AMP_ERR_ARG, "%s: m is a %s, not a BertModel (amp_bert_from_pretrained)", fn, amp_module_kind(m));
    return AMP_OK;
}

amp_status amp_bert_get_config(const amp_module *m, amp_bert_config *out) {
    static const char *fn = "amp_bert_get_config";
    if (bert_of(fn, m)) return amp_last_status();
    if (!out) return amp_error(AMP_ERR_ARG, "%s: out is NULL", fn);
    *out = ((const model_data *)amp_module_data(m))->cfg;
    return AMP_OK;
}

static bool int_dtype(amp_dtype dt) { return dt == AMP_I64 || dt == AMP_I32; }

/* t [B, T] like ids, of an accepted dtype; (lo, hi): its values' range (hi < 0: none) */
static amp_status check_ids(const char *fn, const char *what, amp_tensor *t, amp_tensor *ids, bool mask, int64_t hi) {
    char b[SHAPE_BUF], c[SHAPE_BUF];
    amp_dtype dt = amp_tensor_dtype(t);
    if (amp_tensor_ndim(t) != 2 || (ids && (amp_tensor_dim(t, 0) != amp_tensor_dim(ids, 0) || amp_tensor_dim(t, 1) != amp_tensor_dim(ids, 1))))
        return amp_error(AMP_ERR_SHAPE, "%s: %s has shape %s; want [B, T]%s%s", fn, what,
                         shape_text(amp_tensor_ndim(t), amp_tensor_shape(t), b), ids ? " as ids, " : "",
                         ids ? shape_text(2, amp_tensor_shape(ids), c) : "");
    if (!(int_dtype(dt) || (mask && dt == AMP_U8)))
        return amp_error(AMP_ERR_DTYPE, "%s: %s has dtype %s; want i64 or i32%s", fn, what, amp_dtype_name(dt), mask ? " or u8" : "");
    int64_t n = amp_tensor_numel(t);
    int64_t *v = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!v) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    amp_status st = amp_tensor_copy_out(t, v, AMP_I64);
    for (int64_t i = 0; i < n && !st; i++)
        if (v[i] < 0 || v[i] > hi)
            st = amp_error(AMP_ERR_RANGE, "%s: %s[%lld][%lld] = %lld is outside [0, %lld]", fn, what, (long long)(i / amp_tensor_dim(t, 1)),
                           (long long)(i % amp_tensor_dim(t, 1)), (long long)v[i], (long long)hi);
    free(v);
    return st;
}

amp_tensor *amp_bert_forward(amp_module *m, amp_tensor *ids, amp_tensor *token_types, amp_tensor *attn_mask) {
    static const char *fn = "amp_bert_forward";
    if (!ids) return amp_error_null(AMP_ERR_ARG, "%s: ids is NULL", fn);
    /* a freed tensor first: amp_tensor_ndim names it (debug mode) */
    const char *what[3] = {"ids", "token_types", "attn_mask"};
    amp_tensor *ts[3] = {ids, token_types, attn_mask};
    for (int i = 0; i < 3; i++)
        if (ts[i] && amp_tensor_ndim(ts[i]) < 0) return amp_error_chain_null(AMP_OK, "%s: %s", fn, what[i]);
    if (bert_of(fn, m)) return NULL;
    const amp_bert_config *c = &((const model_data *)amp_module_data(m))->cfg;
    if (check_ids(fn, "ids", ids, NULL, false, c->vocab_size - 1)) return NULL;
    int64_t T = amp_tensor_dim(ids, 1);
    if (T < 1 || T > c->max_position)
        return amp_error_null(AMP_ERR_SHAPE, "%s: %lld tokens is outside 1..max_position_embeddings %lld", fn, (long long)T,
                              (long long)c->max_position);
    if (token_types && check_ids(fn, "token_types", token_types, ids, false, c->type_vocab_size - 1)) return NULL;
    if (attn_mask && check_ids(fn, "attn_mask", attn_mask, ids, true, 1)) return NULL;
    amp_scope *sc = amp_scope_begin();
    if (!sc) return NULL;
    if (!token_types) token_types = amp_tensor_zeros_on(amp_tensor_device(ids), AMP_I64, 2, amp_tensor_shape(ids));
    amp_tensor *y = token_types ? amp_module_forward_n(m, (amp_tensor *[]){ids, token_types, attn_mask}, attn_mask ? 3 : 2) : NULL;
    return amp_scope_end_keep(sc, y);
}

typedef struct {
    int64_t len;
    int i;
} by_len;

static int cmp_len_desc(const void *a, const void *b) {
    const by_len *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* Mean of h [b, T, H] over the tokens mask [b, T] (u8) keeps, L2-normalised when norm: [b, H] f32. */
static amp_tensor *pool(amp_tensor *h, amp_tensor *mask, bool norm) {
    amp_tensor *mf = amp_unsqueeze(amp_to(mask, AMP_F32), 2); /* [b, T, 1] */
    amp_tensor *s = amp_sum(amp_mul(amp_to(h, AMP_F32), mf), (const int[]){1}, 1, false);
    amp_tensor *e = amp_div(s, amp_clamp(amp_sum(mf, (const int[]){1}, 1, false), 1e-9, INFINITY));
    if (!norm || !e) return e;
    return amp_div(e, amp_clamp(amp_norm(e, 2.0, (const int[]){1}, 1, true), 1e-12, INFINITY));
}

/* One batch: the sequences of ord[0..b) into rows of out (f32 [n, H]) */
static amp_status embed_batch(const char *fn, amp_module *m, const int32_t *const *ids, const by_len *ord, int b, int64_t maxlen,
                              const amp_embed_opts *o, float *out) {
    const amp_bert_config *c = &((const model_data *)amp_module_data(m))->cfg;
    int64_t T = ord[0].len < maxlen ? ord[0].len : maxlen, H = c->hidden_size;
    amp_scope *sc = amp_scope_begin();
    if (!sc) return amp_last_status();
    amp_tensor *x = amp_tensor_full(AMP_I64, 2, AMP_SHAPE(b, T), (double)c->pad_id);
    amp_tensor *mk = amp_tensor_zeros(AMP_U8, 2, AMP_SHAPE(b, T));
    amp_status st = x && mk ? AMP_OK : amp_last_status();
    if (!st) {
        int64_t *xp = amp_tensor_data(x);
        uint8_t *mp = amp_tensor_data(mk);
        for (int r = 0; r < b; r++) {
            const int32_t *s = ids[ord[r].i];
            int64_t L = ord[r].len, n = L < T ? L : T;
            for (int64_t t = 0; t < n; t++) {
                /* cut to T: the first T - 1 ids and the last ([SEP]), as the tokenizer truncates */
                int64_t v = L > T && t == n - 1 ? s[L - 1] : s[t];
                if (v < 0 || v >= c->vocab_size) {
                    st = amp_error(AMP_ERR_RANGE, "%s: text %d: token id %lld at %lld is outside the vocabulary [0, %lld)", fn, ord[r].i,
                                   (long long)v, (long long)t, (long long)c->vocab_size);
                    break;
                }
                xp[r * T + t] = v;
                mp[r * T + t] = 1;
            }
        }
    }
    if (!st) {
        amp_tensor *tt = amp_tensor_zeros(AMP_I64, 2, AMP_SHAPE(b, T));
        amp_tensor *h = tt ? amp_module_forward_n(m, (amp_tensor *[]){x, tt, mk}, 3) : NULL;
        /* pooling in f32, outside any autocast region (as sentence-transformers' pooling of f32 hidden states) */
        amp_autocast_opts off = AMP_AUTOCAST_OPTS(AMP_F16);
        off.enabled = false;
        amp_tensor *e = NULL;
        if (h && amp_autocast_enter_opts(&off) == AMP_OK) {
            e = pool(h, mk, o->normalize);
            amp_autocast_exit();
        }
        float *buf = e ? malloc(sizeof(float) * (size_t)(b * H)) : NULL;
        if (!buf || amp_tensor_copy_out(e, buf, AMP_F32)) st = e && !buf ? amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn) : amp_last_status();
        else
            for (int r = 0; r < b; r++) memcpy(out + (size_t)ord[r].i * (size_t)H, buf + (size_t)r * (size_t)H, sizeof(float) * (size_t)H);
        free(buf);
    }
    amp_scope_end(sc);
    return st;
}

amp_status amp_bert_embed_ids(amp_module *m, const int32_t *const *ids, const int64_t *lens, int n, const amp_embed_opts *o,
                              amp_tensor **out) {
    static const char *fn = "amp_bert_embed_ids";
    if (bert_of(fn, m)) return amp_last_status();
    if (!out) return amp_error(AMP_ERR_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (n < 0) return amp_error(AMP_ERR_ARG, "%s: n = %d is negative", fn, n);
    if (n > 0 && (!ids || !lens)) return amp_error(AMP_ERR_ARG, "%s: ids or lens is NULL", fn);
    amp_embed_opts opt = o ? *o : AMP_EMBED_DEFAULTS;
    const amp_bert_config *c = &((const model_data *)amp_module_data(m))->cfg;
    int64_t maxlen = opt.max_seq_length ? opt.max_seq_length : c->max_seq_length, bs = opt.batch_size ? opt.batch_size : 32;
    if (maxlen < 2 || maxlen > c->max_position)
        return amp_error(AMP_ERR_ARG, "%s: max_seq_length %lld is outside [2, max_position_embeddings %lld]", fn, (long long)maxlen,
                         (long long)c->max_position);
    if (bs < 1 || bs > 1 << 20) return amp_error(AMP_ERR_ARG, "%s: batch_size %lld is outside [1, 2^20]", fn, (long long)bs);
    for (int i = 0; i < n; i++) {
        if (!ids[i]) return amp_error(AMP_ERR_ARG, "%s: ids[%d] is NULL", fn, i);
        if (lens[i] < 1) return amp_error(AMP_ERR_ARG, "%s: lens[%d] = %lld: a text has at least one token", fn, i, (long long)lens[i]);
    }
    int64_t H = c->hidden_size;
    by_len *ord = malloc(sizeof *ord * (size_t)(n ? n : 1));
    float *buf = calloc((size_t)(n ? n : 1) * (size_t)H, sizeof(float));
    amp_status st = ord && buf ? AMP_OK : amp_error(AMP_ERR_NOMEM, "%s: out of memory for %d texts", fn, n);
    if (!st) {
        for (int i = 0; i < n; i++) ord[i] = (by_len){lens[i], i};
        qsort(ord, (size_t)n, sizeof *ord, cmp_len_desc); /* batches of similar lengths: little padding */
        amp_no_grad_begin();
        amp_module_eval_begin();
        for (int i = 0; i < n && !st; i += (int)bs) st = embed_batch(fn, m, ids, ord + i, (int)(n - i < bs ? n - i : bs), maxlen, &opt, buf);
        amp_module_eval_end();
        amp_no_grad_end();
    }
    if (!st) {
        *out = amp_tensor_from_data(buf, AMP_F32, 2, AMP_SHAPE(n, H));
        if (!*out) st = amp_last_status();
    }
    free(ord);
    free(buf);
    return st;
}

amp_status amp_bert_embed(amp_module *m, const amp_tokenizer *t, const char *const *texts, int n, const amp_embed_opts *o,
                          amp_tensor **out) {
    static const char *fn = "amp_bert_embed";
    if (bert_of(fn, m)) return amp_last_status();
    if (!t || !out) return amp_error(AMP_ERR_ARG, "%s: t or out is NULL", fn);
    *out = NULL;
    if (n < 0) return amp_error(AMP_ERR_ARG, "%s: n = %d is negative", fn, n);
    if (n > 0 && !texts) return amp_error(AMP_ERR_ARG, "%s: texts is NULL", fn);
    int32_t **ids = calloc((size_t)(n ? n : 1), sizeof *ids);
    int64_t *lens = calloc((size_t)(n ? n : 1), sizeof *lens);
    amp_status st = ids && lens ? AMP_OK : amp_error(AMP_ERR_NOMEM, "%s: out of memory for %d texts", fn, n);
    /* as sentence-transformers' tokenizer call: [CLS] ... [SEP], special-token strings matched */
    amp_encode_opts eo = {true, true};
    for (int i = 0; i < n && !st; i++) {
        size_t cnt = 0;
        if (!texts[i]) st = amp_error(AMP_ERR_ARG, "%s: texts[%d] is NULL", fn, i);
        else if (amp_tokenizer_encode_ex(t, texts[i], strlen(texts[i]), &eo, &ids[i], &cnt))
            st = amp_error_chain(amp_last_status(), "%s: texts[%d]", fn, i);
        else lens[i] = (int64_t)cnt;
    }
    if (!st) st = amp_bert_embed_ids(m, (const int32_t *const *)ids, lens, n, o, out);
    for (int i = 0; ids && i < n; i++) free(ids[i]);
    free(ids);
    free(lens);
    return st;
}

amp_tokenizer *amp_bert_tokenizer(const char *dir) {
    static const char *fn = "amp_bert_tokenizer";
    if (!dir) return amp_error_null(AMP_ERR_ARG, "%s: dir is NULL", fn);
    char p[4096];
    if ((size_t)snprintf(p, sizeof p, "%s/tokenizer.json", dir) >= sizeof p) return amp_error_null(AMP_ERR_ARG, "%s: dir is too long", fn);
    FILE *f = fopen(p, "rb");
    if (f) {
        fclose(f);
        amp_tokenizer *t = amp_tokenizer_from_hf_json(p);
        return t ? t : amp_error_chain_null(amp_last_status(), "%s: %s", fn, dir);
    }
    /* vocab.txt, lowercasing (and accent stripping, as BertTokenizer's strip_accents=None) from tokenizer_config.json */
    amp_wordpiece_opts wo = AMP_WORDPIECE_DEFAULTS;
    amp_hf_dir *d = amp_hf_dir_open(dir);
    if (!d) return amp_error_chain_null(amp_last_status(), "%s", fn);
    bool lower = true;
    amp_status st = amp_hf_file_bool(d, "tokenizer_config.json", "do_lower_case", &lower);
    amp_hf_dir_close(d);
    if (st && st != AMP_ERR_IO) return amp_error_chain_null(st, "%s", fn);
    amp_clear_error();
    wo.lowercase = wo.strip_accents = lower;
    snprintf(p, sizeof p, "%s/vocab.txt", dir);
    amp_tokenizer *t = amp_tokenizer_wordpiece(p, &wo);
    return t ? t : amp_error_chain_null(amp_last_status(), "%s: %s has neither tokenizer.json nor a readable vocab.txt", fn, dir);
}

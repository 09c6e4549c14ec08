/* The built-in layers and containers, written with the public module API of
 * amp/nn.h only (amp_module_new + register_*), as a user's module would be:
 * Linear, Conv2d, BatchNorm2d, LayerNorm, Embedding, Dropout, ReLU, GELU,
 * MaxPool2d, Flatten, Sequential, ModuleList; the built-in mlp and cnn. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "amp/nn.h"
#include "core/error.h"

#define DATA(T, m) ((T *)amp_module_data(m))
/* a parameter the constructor registered (no error path: it exists) */
static amp_tensor *P(const amp_module *m, const char *name) { return amp_module_get_parameter(m, name); }

/* Registers an f32 parameter of the given shape, filled uniform(-bound, bound)
 * or with the constant fill (bound <= 0). */
static amp_tensor *param(amp_module *m, const char *name, int ndim, const int64_t *shape, double bound, double fill,
                         amp_generator *g) {
    amp_mem_push_category(AMP_MEM_PARAM); /* counted as parameter memory from the start */
    amp_tensor *t = amp_tensor_empty(AMP_F32, ndim, shape);
    amp_mem_pop_category();
    if (!t) return NULL;
    amp_status st = bound > 0 ? amp_tensor_uniform_(t, -bound, bound, g) : amp_tensor_fill_(t, fill);
    if (st) {
        amp_tensor_free(t);
        return NULL;
    }
    return amp_module_register_parameter(m, name, t);
}

static amp_tensor *buffer(amp_module *m, const char *name, amp_dtype dt, int ndim, const int64_t *shape, double fill) {
    amp_mem_push_category(AMP_MEM_PARAM);
    amp_tensor *t = amp_tensor_full(dt, ndim, shape, fill);
    amp_mem_pop_category();
    return t ? amp_module_register_buffer(m, name, t, true) : NULL;
}

static amp_module *fail(amp_module *m) {
    amp_module_free(m);
    return NULL;
}

/* ---- Linear ----------------------------------------------------------------------------------- */
typedef struct {
    int64_t in, out;
    bool bias;
} linear_cfg;

static amp_tensor *linear_forward(amp_module *m, amp_tensor *x) {
    return amp_linear(x, P(m, "weight"), DATA(linear_cfg, m)->bias ? P(m, "bias") : NULL);
}
static void linear_repr(const amp_module *m, char *b, size_t n) {
    const linear_cfg *c = amp_module_data(m);
    snprintf(b, n, "in_features=%lld, out_features=%lld, bias=%s", (long long)c->in, (long long)c->out, c->bias ? "True" : "False");
}
static const amp_module_class linear_class = {.name = "Linear", .forward = linear_forward, .extra_repr = linear_repr};

amp_module *amp_nn_linear(int64_t in, int64_t out, bool bias, amp_generator *g) {
    if (in <= 0 || out <= 0)
        return amp_error_null(AMP_ERR_ARG, "amp_nn_linear: in %lld and out %lld must be > 0", (long long)in, (long long)out);
    amp_module *m = amp_module_new(&linear_class, sizeof(linear_cfg));
    if (!m) return NULL;
    *DATA(linear_cfg, m) = (linear_cfg){in, out, bias};
    /* kaiming_uniform_(a = sqrt(5)) gives bound 1/sqrt(fan_in); the bias likewise */
    double bound = 1.0 / sqrt((double)in);
    if (!param(m, "weight", 2, AMP_SHAPE(out, in), bound, 0, g)) return fail(m);
    if (bias && !param(m, "bias", 1, AMP_SHAPE(out), bound, 0, g)) return fail(m);
    return m;
}

/* ---- Conv2d ----------------------------------------------------------------------------------- */
typedef struct {
    int64_t in, out, kernel;
    amp_conv_params p;
    bool bias;
} conv_cfg;

static amp_tensor *conv_forward(amp_module *m, amp_tensor *x) {
    const conv_cfg *c = amp_module_data(m);
    return amp_conv2d(x, P(m, "weight"), c->bias ? P(m, "bias") : NULL, &c->p);
}
static void conv_repr(const amp_module *m, char *b, size_t n) {
    const conv_cfg *c = amp_module_data(m);
    const amp_conv_params *p = &c->p;
    int64_t s0 = p->stride[0] ? p->stride[0] : 1, s1 = p->stride[1] ? p->stride[1] : 1;
    int k = snprintf(b, n, "%lld, %lld, kernel_size=(%lld, %lld), stride=(%lld, %lld)", (long long)c->in, (long long)c->out,
                     (long long)c->kernel, (long long)c->kernel, (long long)s0, (long long)s1);
    if (k > 0 && (size_t)k < n && (p->padding[0] || p->padding[1]))
        k += snprintf(b + k, n - (size_t)k, ", padding=(%lld, %lld)", (long long)p->padding[0], (long long)p->padding[1]);
    if (k > 0 && (size_t)k < n && p->groups > 1) k += snprintf(b + k, n - (size_t)k, ", groups=%lld", (long long)p->groups);
    if (k > 0 && (size_t)k < n && !c->bias) snprintf(b + k, n - (size_t)k, ", bias=False");
}
static const amp_module_class conv_class = {.name = "Conv2d", .forward = conv_forward, .extra_repr = conv_repr};

amp_module *amp_nn_conv2d(int64_t in_ch, int64_t out_ch, int64_t kernel, const amp_conv_params *p, bool bias,
                          amp_generator *g) {
    int64_t groups = p && p->groups ? p->groups : 1;
    if (in_ch <= 0 || out_ch <= 0 || kernel <= 0 || groups <= 0 || in_ch % groups || out_ch % groups)
        return amp_error_null(AMP_ERR_ARG, "amp_nn_conv2d: in %lld, out %lld, kernel %lld, groups %lld are not valid",
                              (long long)in_ch, (long long)out_ch, (long long)kernel, (long long)groups);
    amp_module *m = amp_module_new(&conv_class, sizeof(conv_cfg));
    if (!m) return NULL;
    conv_cfg *c = DATA(conv_cfg, m);
    c->in = in_ch;
    c->out = out_ch;
    c->kernel = kernel;
    c->bias = bias;
    if (p) c->p = *p;
    double bound = 1.0 / sqrt((double)(in_ch / groups) * (double)kernel * (double)kernel); /* no int64 product: sizes may be huge */
    if (!param(m, "weight", 4, AMP_SHAPE(out_ch, in_ch / groups, kernel, kernel), bound, 0, g)) return fail(m);
    if (bias && !param(m, "bias", 1, AMP_SHAPE(out_ch), bound, 0, g)) return fail(m);
    return m;
}

/* ---- BatchNorm2d ------------------------------------------------------------------------------ */
typedef struct {
    int64_t c;
    double eps, momentum;
} bn_cfg;

static amp_tensor *bn_forward(amp_module *m, amp_tensor *x) {
    const bn_cfg *c = amp_module_data(m);
    bool training = amp_module_is_training(m);
    amp_tensor *y = amp_batch_norm(x, amp_module_get_buffer(m, "running_mean"), amp_module_get_buffer(m, "running_var"),
                                   P(m, "weight"), P(m, "bias"), training, c->momentum, c->eps);
    if (y && training) {
        amp_tensor *nbt = amp_module_get_buffer(m, "num_batches_tracked");
        amp_tensor_will_modify(nbt); /* undone with the running statistics if the step is skipped */
        if (amp_tensor_device(nbt) == AMP_DEVICE_CPU) {
            int64_t *nb = amp_tensor_data(nbt);
            (*nb)++;
        } else { /* a device counter: through the host (one small synchronising read) */
            int64_t idx[1] = {0};
            amp_tensor_set(nbt, idx, amp_tensor_item(nbt) + 1.0);
        }
    }
    return y;
}
static void bn_repr(const amp_module *m, char *b, size_t n) {
    const bn_cfg *c = amp_module_data(m);
    snprintf(b, n, "%lld, eps=%g, momentum=%g, affine=True, track_running_stats=True", (long long)c->c, c->eps, c->momentum);
}
static const amp_module_class bn_class = {
    .name = "BatchNorm2d", .forward = bn_forward, .extra_repr = bn_repr, .flags = AMP_MODULE_NORM};

amp_module *amp_nn_batchnorm2d(int64_t channels, double eps, double momentum) {
    if (channels <= 0 || !(eps > 0) || !(momentum >= 0 && momentum <= 1))
        return amp_error_null(AMP_ERR_ARG, "amp_nn_batchnorm2d: channels %lld, eps %g, momentum %g are not valid",
                              (long long)channels, eps, momentum);
    amp_module *m = amp_module_new(&bn_class, sizeof(bn_cfg));
    if (!m) return NULL;
    *DATA(bn_cfg, m) = (bn_cfg){channels, eps, momentum};
    if (!param(m, "weight", 1, AMP_SHAPE(channels), 0, 1.0, NULL) || !param(m, "bias", 1, AMP_SHAPE(channels), 0, 0.0, NULL) ||
        !buffer(m, "running_mean", AMP_F32, 1, AMP_SHAPE(channels), 0.0) ||
        !buffer(m, "running_var", AMP_F32, 1, AMP_SHAPE(channels), 1.0) ||
        !buffer(m, "num_batches_tracked", AMP_I64, 0, NULL, 0.0))
        return fail(m);
    return m;
}

/* ---- LayerNorm -------------------------------------------------------------------------------- */
typedef struct {
    int64_t features;
    double eps;
} ln_cfg;

static amp_tensor *ln_forward(amp_module *m, amp_tensor *x) {
    return amp_layer_norm(x, 1, P(m, "weight"), P(m, "bias"), DATA(ln_cfg, m)->eps);
}
static void ln_repr(const amp_module *m, char *b, size_t n) {
    const ln_cfg *c = amp_module_data(m);
    snprintf(b, n, "(%lld,), eps=%g, elementwise_affine=True", (long long)c->features, c->eps);
}
/* layer_norm computes half rows in f32 with f32 weights and returns x's
 * dtype: kept in f32 (O2) it takes half inputs as they are (the values of
 * the f32 route, without the f32 copy backward would keep) */
static const amp_module_class ln_class = {
    .name = "LayerNorm", .forward = ln_forward, .extra_repr = ln_repr, .flags = AMP_MODULE_NORM | AMP_MODULE_HALF_IO};

amp_module *amp_nn_layernorm(int64_t features, double eps) {
    if (features <= 0 || !(eps > 0))
        return amp_error_null(AMP_ERR_ARG, "amp_nn_layernorm: features %lld and eps %g are not valid", (long long)features, eps);
    amp_module *m = amp_module_new(&ln_class, sizeof(ln_cfg));
    if (!m) return NULL;
    *DATA(ln_cfg, m) = (ln_cfg){features, eps};
    if (!param(m, "weight", 1, AMP_SHAPE(features), 0, 1.0, NULL) || !param(m, "bias", 1, AMP_SHAPE(features), 0, 0.0, NULL))
        return fail(m);
    return m;
}

/* ---- Embedding -------------------------------------------------------------------------------- */
typedef struct {
    int64_t num, dim;
} emb_cfg;

static amp_tensor *emb_forward(amp_module *m, amp_tensor *idx) { return amp_embedding(P(m, "weight"), idx); }
static void emb_repr(const amp_module *m, char *b, size_t n) {
    const emb_cfg *c = amp_module_data(m);
    snprintf(b, n, "%lld, %lld", (long long)c->num, (long long)c->dim);
}
static const amp_module_class emb_class = {.name = "Embedding", .forward = emb_forward, .extra_repr = emb_repr};

amp_module *amp_nn_embedding(int64_t num, int64_t dim, amp_generator *g) {
    if (num <= 0 || dim <= 0)
        return amp_error_null(AMP_ERR_ARG, "amp_nn_embedding: num %lld and dim %lld must be > 0", (long long)num, (long long)dim);
    amp_module *m = amp_module_new(&emb_class, sizeof(emb_cfg));
    if (!m) return NULL;
    *DATA(emb_cfg, m) = (emb_cfg){num, dim};
    amp_mem_push_category(AMP_MEM_PARAM);
    amp_tensor *w = amp_tensor_empty(AMP_F32, 2, AMP_SHAPE(num, dim));
    amp_mem_pop_category();
    if (!w || amp_tensor_normal_(w, 0.0, 1.0, g)) {
        amp_tensor_free(w);
        return fail(m);
    }
    if (!amp_module_register_parameter(m, "weight", w)) return fail(m);
    return m;
}

/* ---- parameterless layers -------------------------------------------------------------------- */
typedef struct {
    double p;
    amp_generator *g;
} dropout_cfg;

static amp_tensor *dropout_forward(amp_module *m, amp_tensor *x) {
    const dropout_cfg *c = amp_module_data(m);
    return amp_dropout(x, c->p, amp_module_is_training(m), c->g);
}
static void dropout_repr(const amp_module *m, char *b, size_t n) { snprintf(b, n, "p=%g, inplace=False", DATA(dropout_cfg, m)->p); }
static const amp_module_class dropout_class = {.name = "Dropout", .forward = dropout_forward, .extra_repr = dropout_repr};

amp_module *amp_nn_dropout(double p, amp_generator *g) {
    if (!(p >= 0 && p <= 1)) return amp_error_null(AMP_ERR_ARG, "amp_nn_dropout: p %g is outside [0, 1]", p);
    amp_module *m = amp_module_new(&dropout_class, sizeof(dropout_cfg));
    if (m) *DATA(dropout_cfg, m) = (dropout_cfg){p, g};
    return m;
}

static amp_tensor *relu_forward(amp_module *m, amp_tensor *x) {
    (void)m;
    return amp_relu(x);
}
static const amp_module_class relu_class = {.name = "ReLU", .forward = relu_forward};
amp_module *amp_nn_relu(void) { return amp_module_new(&relu_class, 0); }

static amp_tensor *gelu_forward(amp_module *m, amp_tensor *x) { return amp_gelu(x, *DATA(amp_gelu_approx, m)); }
static void gelu_repr(const amp_module *m, char *b, size_t n) {
    snprintf(b, n, "approximate='%s'", *DATA(amp_gelu_approx, m) == AMP_GELU_TANH ? "tanh" : "none");
}
static const amp_module_class gelu_class = {.name = "GELU", .forward = gelu_forward, .extra_repr = gelu_repr};
amp_module *amp_nn_gelu(amp_gelu_approx approx) {
    if (approx != AMP_GELU_ERF && approx != AMP_GELU_TANH)
        return amp_error_null(AMP_ERR_ARG, "amp_nn_gelu: approx %d is not AMP_GELU_ERF or AMP_GELU_TANH", (int)approx);
    amp_module *m = amp_module_new(&gelu_class, sizeof(amp_gelu_approx));
    if (m) *DATA(amp_gelu_approx, m) = approx;
    return m;
}

static amp_tensor *pool_forward(amp_module *m, amp_tensor *x) { return amp_max_pool2d(x, DATA(amp_pool_params, m), NULL); }
static void pool_repr(const amp_module *m, char *b, size_t n) {
    const amp_pool_params *p = amp_module_data(m);
    snprintf(b, n, "kernel_size=%lld, stride=%lld, padding=0, dilation=1, ceil_mode=False", (long long)p->kernel[0],
             (long long)p->stride[0]);
}
static const amp_module_class pool_class = {.name = "MaxPool2d", .forward = pool_forward, .extra_repr = pool_repr};

amp_module *amp_nn_maxpool2d(int64_t kernel, int64_t stride) {
    if (kernel <= 0 || stride < 0)
        return amp_error_null(AMP_ERR_ARG, "amp_nn_maxpool2d: kernel %lld / stride %lld are not valid", (long long)kernel,
                              (long long)stride);
    amp_module *m = amp_module_new(&pool_class, sizeof(amp_pool_params));
    if (!m) return NULL;
    amp_pool_params *p = amp_module_data(m);
    p->kernel[0] = p->kernel[1] = kernel;
    p->stride[0] = p->stride[1] = stride ? stride : kernel;
    return m;
}

static amp_tensor *flatten_forward(amp_module *m, amp_tensor *x) {
    (void)m;
    return amp_flatten(x, 1, -1);
}
static void flatten_repr(const amp_module *m, char *b, size_t n) {
    (void)m;
    snprintf(b, n, "start_dim=1, end_dim=-1");
}
static const amp_module_class flatten_class = {.name = "Flatten", .forward = flatten_forward, .extra_repr = flatten_repr};
amp_module *amp_nn_flatten(void) { return amp_module_new(&flatten_class, 0); }

/* ---- containers ------------------------------------------------------------------------------ */
static amp_tensor *seq_forward(amp_module *m, amp_tensor *x) {
    amp_tensor *h = x;
    int n = amp_module_num_children(m);
    for (int i = 0; i < n && h; i++) h = amp_module_forward(amp_module_child_at(m, i, NULL), h);
    return h;
}
static const amp_module_class seq_class = {.name = "Sequential", .forward = seq_forward};
static const amp_module_class list_class = {.name = "ModuleList"};

/* Frees a child a container call took, on that call's error path, keeping
 * the error it reports: a child that belongs to a parent already is not the
 * caller's to give, and amp_module_free refuses it, recording the refusal
 * over the cause (saved here and put back). */
static void free_child_keep_error(amp_module *child) {
    if (!child) return;
    amp_status st = amp_last_status();
    char cause[1024];
    snprintf(cause, sizeof cause, "%s", amp_last_error());
    amp_module_free(child);
    if (strcmp(cause, amp_last_error())) amp_error(st, "%s", cause);
}

amp_status amp_module_append(amp_module *c, amp_module *child) {
    static const char *fn = "amp_module_append";
    const amp_module_class *k = c ? amp_module_class_of(c) : NULL; /* NULL for a freed module (debug mode) */
    if (!c || (k != &seq_class && k != &list_class)) {
        amp_status st = c && !k ? amp_error_chain(AMP_ERR_STATE, "%s", fn)
                                : amp_error(AMP_ERR_ARG, "%s: %s is not a Sequential or ModuleList", fn, c ? k->name : "module NULL");
        free_child_keep_error(child);
        return st;
    }
    if (!child) return amp_error_chain(AMP_ERR_ARG, "%s: child is NULL", fn);
    char name[24];
    snprintf(name, sizeof name, "%d", amp_module_num_children(c));
    return amp_module_register_module(c, name, child) ? AMP_OK : amp_last_status();
}

amp_module *amp_nn_module_list(void) { return amp_module_new(&list_class, 0); }

amp_module *amp_nn_sequential(amp_module *const *children, int n) {
    if (n < 0 || (n > 0 && !children)) return amp_error_null(AMP_ERR_ARG, "amp_nn_sequential: bad children list");
    for (int i = 0; i < n; i++)
        if (!children[i]) {
            for (int j = 0; j < n; j++) free_child_keep_error(children[j]);
            return amp_error_chain_null(AMP_ERR_ARG, "amp_nn_sequential: child %d is NULL", i);
        }
    amp_module *m = amp_module_new(&seq_class, 0);
    if (!m) {
        for (int j = 0; j < n; j++) free_child_keep_error(children[j]);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (amp_module_append(m, children[i]) != AMP_OK) {
            for (int j = i + 1; j < n; j++) free_child_keep_error(children[j]);
            return fail(m);
        }
    return m;
}

/* ---- models ---------------------------------------------------------------------------------- */
amp_module *amp_model_build(const char *name, amp_generator *g) {
    if (!name) return amp_error_null(AMP_ERR_ARG, "amp_model_build: name is NULL");
    if (!strcmp(name, "mlp")) {
        amp_module *ch[] = {amp_nn_flatten(),        amp_nn_linear(784, 512, true, g), amp_nn_relu(),
                            amp_nn_linear(512, 512, true, g), amp_nn_relu(),          amp_nn_linear(512, 10, true, g)};
        return amp_nn_sequential(ch, 6);
    }
    if (!strcmp(name, "cnn")) {
        amp_conv_params pad1;
        memset(&pad1, 0, sizeof pad1);
        pad1.padding[0] = pad1.padding[1] = 1;
        amp_module *ch[] = {amp_nn_conv2d(1, 32, 3, &pad1, true, g),
                            amp_nn_relu(),
                            amp_nn_maxpool2d(2, 2),
                            amp_nn_conv2d(32, 64, 3, &pad1, true, g),
                            amp_nn_batchnorm2d(64, 1e-5, 0.1),
                            amp_nn_relu(),
                            amp_nn_maxpool2d(2, 2),
                            amp_nn_flatten(),
                            amp_nn_linear(3136, 128, true, g),
                            amp_nn_relu(),
                            amp_nn_dropout(0.25, g),
                            amp_nn_linear(128, 10, true, g)};
        return amp_nn_sequential(ch, 12);
    }
    return amp_error_null(AMP_ERR_ARG, "amp_model_build: unknown model '%s' (expected mlp or cnn)", name);
}

/* Modules: Linear, Conv2d, BatchNorm2d, LayerNorm, Dropout, ReLU, GELU,
 * MaxPool2d, Flatten, Sequential; the built-in mlp and cnn. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/nn.h"
#include "tensor/tensor_impl.h"

typedef enum { M_LINEAR, M_CONV2D, M_BN2D, M_LN, M_DROPOUT, M_RELU, M_GELU, M_MAXPOOL, M_FLATTEN, M_SEQ } mkind;

static const char *g_kind_names[] = {"Linear",  "Conv2d", "BatchNorm2d", "LayerNorm", "Dropout",
                                     "ReLU",    "GELU",   "MaxPool2d",   "Flatten",   "Sequential"};

struct amp_module {
    mkind k;
    bool training, keep_f32;
    amp_tensor *weight, *bias;
    amp_tensor *running_mean, *running_var, *num_batches; /* buffers */
    amp_conv_params conv;
    double eps, momentum, p;
    amp_gelu_approx approx;
    int64_t pool_k, pool_s;
    int64_t features;
    amp_generator *gen;
    amp_module **ch;
    int n_ch;
    /* name cache for amp_module_parameters / amp_module_state */
    char **names;
    int n_names;
};

static amp_module *mod_new(mkind k) {
    amp_module *m = calloc(1, sizeof *m);
    if (!m) return amp_error_null(AMP_ERR_NOMEM, "amp_nn: out of memory");
    m->k = k;
    m->training = true;
    return m;
}

/* A parameter: unscoped, PARAM memory, requires grad. */
static amp_tensor *param_new(const char *fn, int ndim, const int64_t *shape) {
    amp_tensor *t = amp__tensor_new(fn, AMP_F32, ndim, shape, AMP_MEM_PARAM, AMP_NEW_UNSCOPED);
    if (t) amp_tensor_set_requires_grad(t, true);
    return t;
}

static amp_tensor *buffer_new(amp_dtype dt, int ndim, const int64_t *shape, double fill) {
    amp_tensor *t = amp__tensor_new("amp_nn_batchnorm2d", dt, ndim, shape, AMP_MEM_PARAM, AMP_NEW_UNSCOPED);
    if (t) amp_tensor_fill_(t, fill);
    return t;
}

static void free_names(amp_module *m) {
    for (int i = 0; i < m->n_names; i++) free(m->names[i]);
    free(m->names);
    m->names = NULL;
    m->n_names = 0;
}

void amp_module_free(amp_module *m) {
    if (!m) return;
    for (int i = 0; i < m->n_ch; i++) amp_module_free(m->ch[i]);
    free(m->ch);
    amp__release(m->weight);
    amp__release(m->bias);
    amp__release(m->running_mean);
    amp__release(m->running_var);
    amp__release(m->num_batches);
    free_names(m);
    free(m);
}

/* kaiming_uniform_(a = sqrt(5)) gives bound 1/sqrt(fan_in); bias likewise. */
static amp_status init_uniform(amp_tensor *t, double bound, amp_generator *g) {
    return amp_tensor_uniform_(t, -bound, bound, g);
}

amp_module *amp_nn_linear(int64_t in, int64_t out, bool bias, amp_generator *g) {
    if (in <= 0 || out <= 0)
        return amp_error_null(AMP_ERR_ARG, "amp_nn_linear: in %lld and out %lld must be > 0", (long long)in, (long long)out);
    amp_module *m = mod_new(M_LINEAR);
    if (!m) return NULL;
    m->weight = param_new("amp_nn_linear", 2, AMP_SHAPE(out, in));
    if (bias) m->bias = param_new("amp_nn_linear", 1, AMP_SHAPE(out));
    if (!m->weight || (bias && !m->bias)) goto fail;
    double bound = 1.0 / sqrt((double)in);
    if (init_uniform(m->weight, bound, g) || (bias && init_uniform(m->bias, bound, g))) goto fail;
    return m;
fail:
    amp_module_free(m);
    return NULL;
}

amp_module *amp_nn_conv2d(int64_t in_ch, int64_t out_ch, int64_t kernel, const amp_conv_params *p, bool bias,
                          amp_generator *g) {
    int64_t groups = p && p->groups ? p->groups : 1;
    if (in_ch <= 0 || out_ch <= 0 || kernel <= 0 || groups <= 0 || in_ch % groups || out_ch % groups)
        return amp_error_null(AMP_ERR_ARG, "amp_nn_conv2d: in %lld, out %lld, kernel %lld, groups %lld are not valid",
                              (long long)in_ch, (long long)out_ch, (long long)kernel, (long long)groups);
    amp_module *m = mod_new(M_CONV2D);
    if (!m) return NULL;
    if (p) m->conv = *p;
    m->weight = param_new("amp_nn_conv2d", 4, AMP_SHAPE(out_ch, in_ch / groups, kernel, kernel));
    if (bias) m->bias = param_new("amp_nn_conv2d", 1, AMP_SHAPE(out_ch));
    if (!m->weight || (bias && !m->bias)) goto fail;
    double bound = 1.0 / sqrt((double)(in_ch / groups * kernel * kernel));
    if (init_uniform(m->weight, bound, g) || (bias && init_uniform(m->bias, bound, g))) goto fail;
    return m;
fail:
    amp_module_free(m);
    return NULL;
}

amp_module *amp_nn_batchnorm2d(int64_t channels, double eps, double momentum) {
    if (channels <= 0 || !(eps > 0) || !(momentum >= 0 && momentum <= 1))
        return amp_error_null(AMP_ERR_ARG, "amp_nn_batchnorm2d: channels %lld, eps %g, momentum %g are not valid",
                              (long long)channels, eps, momentum);
    amp_module *m = mod_new(M_BN2D);
    if (!m) return NULL;
    m->eps = eps;
    m->momentum = momentum;
    m->features = channels;
    m->weight = param_new("amp_nn_batchnorm2d", 1, AMP_SHAPE(channels));
    m->bias = param_new("amp_nn_batchnorm2d", 1, AMP_SHAPE(channels));
    m->running_mean = buffer_new(AMP_F32, 1, AMP_SHAPE(channels), 0.0);
    m->running_var = buffer_new(AMP_F32, 1, AMP_SHAPE(channels), 1.0);
    m->num_batches = buffer_new(AMP_I64, 0, NULL, 0.0);
    if (!m->weight || !m->bias || !m->running_mean || !m->running_var || !m->num_batches) goto fail;
    amp_tensor_fill_(m->weight, 1.0);
    amp_tensor_fill_(m->bias, 0.0);
    return m;
fail:
    amp_module_free(m);
    return NULL;
}

amp_module *amp_nn_layernorm(int64_t features, double eps) {
    if (features <= 0 || !(eps > 0))
        return amp_error_null(AMP_ERR_ARG, "amp_nn_layernorm: features %lld and eps %g are not valid", (long long)features, eps);
    amp_module *m = mod_new(M_LN);
    if (!m) return NULL;
    m->eps = eps;
    m->features = features;
    m->weight = param_new("amp_nn_layernorm", 1, AMP_SHAPE(features));
    m->bias = param_new("amp_nn_layernorm", 1, AMP_SHAPE(features));
    if (!m->weight || !m->bias) {
        amp_module_free(m);
        return NULL;
    }
    amp_tensor_fill_(m->weight, 1.0);
    amp_tensor_fill_(m->bias, 0.0);
    return m;
}

amp_module *amp_nn_dropout(double p, amp_generator *g) {
    if (!(p >= 0 && p <= 1)) return amp_error_null(AMP_ERR_ARG, "amp_nn_dropout: p %g is outside [0, 1]", p);
    amp_module *m = mod_new(M_DROPOUT);
    if (m) {
        m->p = p;
        m->gen = g;
    }
    return m;
}

amp_module *amp_nn_relu(void) { return mod_new(M_RELU); }

amp_module *amp_nn_gelu(amp_gelu_approx approx) {
    amp_module *m = mod_new(M_GELU);
    if (m) m->approx = approx;
    return m;
}

amp_module *amp_nn_maxpool2d(int64_t kernel, int64_t stride) {
    if (kernel <= 0 || stride < 0)
        return amp_error_null(AMP_ERR_ARG, "amp_nn_maxpool2d: kernel %lld / stride %lld are not valid", (long long)kernel,
                              (long long)stride);
    amp_module *m = mod_new(M_MAXPOOL);
    if (m) {
        m->pool_k = kernel;
        m->pool_s = stride ? stride : kernel;
    }
    return m;
}

amp_module *amp_nn_flatten(void) { return mod_new(M_FLATTEN); }

amp_module *amp_nn_sequential(amp_module *const *children, int n) {
    if (n < 0 || (n > 0 && !children)) return amp_error_null(AMP_ERR_ARG, "amp_nn_sequential: bad children list");
    for (int i = 0; i < n; i++)
        if (!children[i]) {
            for (int j = 0; j < n; j++) amp_module_free(children[j]);
            return amp_error_null(AMP_ERR_ARG, "amp_nn_sequential: child %d is NULL (%s)", i, amp_last_error());
        }
    amp_module *m = mod_new(M_SEQ);
    if (m) m->ch = calloc((size_t)(n ? n : 1), sizeof *m->ch);
    if (!m || !m->ch) {
        free(m);
        for (int j = 0; j < n; j++) amp_module_free(children[j]);
        return amp_error_null(AMP_ERR_NOMEM, "amp_nn_sequential: out of memory");
    }
    memcpy(m->ch, children, sizeof *children * (size_t)n);
    m->n_ch = n;
    return m;
}

const char *amp_module_kind(const amp_module *m) { return m ? g_kind_names[m->k] : "(null)"; }
bool amp_module_is_training(const amp_module *m) { return m && m->training; }

void amp_module_train(amp_module *m, bool training) {
    if (!m) return;
    m->training = training;
    for (int i = 0; i < m->n_ch; i++) amp_module_train(m->ch[i], training);
}

void amp_module_keep_f32(amp_module *m, bool keep) {
    if (!m) return;
    m->keep_f32 = keep;
    for (int i = 0; i < m->n_ch; i++) amp_module_keep_f32(m->ch[i], keep);
}

/* ---- forward ------------------------------------------------------------------------------ */
static amp_tensor *forward_inner(amp_module *m, amp_tensor *x) {
    switch (m->k) {
    case M_LINEAR: return amp_linear(x, m->weight, m->bias);
    case M_CONV2D: return amp_conv2d(x, m->weight, m->bias, &m->conv);
    case M_BN2D: {
        amp_tensor *y = amp_batch_norm(x, m->running_mean, m->running_var, m->weight, m->bias, m->training, m->momentum, m->eps);
        if (y && m->training) {
            int64_t *nb = amp_tensor_data(m->num_batches);
            (*nb)++;
        }
        return y;
    }
    case M_LN: return amp_layer_norm(x, 1, m->weight, m->bias, m->eps);
    case M_DROPOUT: return amp_dropout(x, m->p, m->training, m->gen);
    case M_RELU: return amp_relu(x);
    case M_GELU: return amp_gelu(x, m->approx);
    case M_MAXPOOL: {
        amp_pool_params pp;
        memset(&pp, 0, sizeof pp);
        pp.kernel[0] = pp.kernel[1] = m->pool_k;
        pp.stride[0] = pp.stride[1] = m->pool_s;
        return amp_max_pool2d(x, &pp, NULL);
    }
    case M_FLATTEN: return amp_flatten(x, 1, -1);
    case M_SEQ: {
        amp_tensor *h = x;
        for (int i = 0; i < m->n_ch && h; i++) {
            amp_tensor *next = amp_module_forward(m->ch[i], h);
            h = next;
        }
        return h;
    }
    }
    return NULL;
}

static amp_tensor *forward_body(amp_module *m, amp_tensor *x);
static _Thread_local int g_fwd_depth; /* nested forwards (Sequential children) */

amp_tensor *amp_module_forward(amp_module *m, amp_tensor *x) {
    if (!m) return amp_error_null(AMP_ERR_ARG, "amp_module_forward: module is NULL");
    if (!x) return amp_error_null(AMP_ERR_ARG, "amp_module_forward: %s input is NULL (%s)", g_kind_names[m->k], amp_last_error());
    g_fwd_depth++;
    amp_tensor *y = forward_body(m, x);
    g_fwd_depth--;
    /* an op's error inside names the op; the outermost forward names itself too */
    if (!y && g_fwd_depth == 0 && strncmp(amp_last_error(), "amp_module_forward", 18))
        amp_error(amp_last_status() ? amp_last_status() : AMP_ERR_ARG, "amp_module_forward: %s: %s", g_kind_names[m->k], amp_last_error());
    return y;
}

static amp_tensor *forward_body(amp_module *m, amp_tensor *x) {
    if (!m->keep_f32 || m->k == M_SEQ) return forward_inner(m, x);
    /* kept in f32: no autocast inside, f32 input, result back in x's dtype */
    amp_autocast_opts off = AMP_AUTOCAST_OPTS(AMP_F16);
    off.enabled = false;
    if (amp_autocast_enter_opts(&off) != AMP_OK) return NULL;
    amp_tensor *xf = x->dtype == AMP_F32 ? x : amp_to(x, AMP_F32);
    amp_tensor *y = xf ? forward_inner(m, xf) : NULL;
    amp_autocast_exit();
    if (y && y->dtype != x->dtype && amp_dtype_is_half(x->dtype)) y = amp_to(y, x->dtype);
    return y;
}

/* ---- parameters and state -------------------------------------------------------------------- */
typedef struct {
    amp_tensor **out;
    const char **names;
    int max, n;
    amp_module *root;
    bool buffers;
} walk;

static void emit(walk *w, const char *prefix, const char *leaf, amp_tensor *t) {
    if (!t) return;
    if (w->out && w->n < w->max) w->out[w->n] = t;
    if (w->names && w->n < w->max) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s%s", prefix, leaf);
        amp_module *r = w->root;
        /* names stay valid while the module lives: reuse a cached name */
        const char *hit = NULL;
        for (int i = 0; i < r->n_names && !hit; i++)
            if (!strcmp(r->names[i], buf)) hit = r->names[i];
        if (hit) {
            w->names[w->n] = hit;
        } else {
            char **nn = realloc(r->names, (size_t)(r->n_names + 1) * sizeof *nn);
            if (nn) {
                r->names = nn;
                r->names[r->n_names] = strdup(buf);
                w->names[w->n] = r->names[r->n_names];
                r->n_names++;
            }
        }
    }
    w->n++;
}

static void walk_module(walk *w, amp_module *m, const char *prefix) {
    emit(w, prefix, "weight", m->weight);
    emit(w, prefix, "bias", m->bias);
    if (w->buffers) {
        emit(w, prefix, "running_mean", m->running_mean);
        emit(w, prefix, "running_var", m->running_var);
        emit(w, prefix, "num_batches_tracked", m->num_batches);
    }
    for (int i = 0; i < m->n_ch; i++) {
        char p[256];
        snprintf(p, sizeof p, "%s%d.", prefix, i);
        walk_module(w, m->ch[i], p);
    }
}

static int collect(amp_module *m, amp_tensor **out, const char **names, int max, bool buffers) {
    if (!m) {
        amp_error(AMP_ERR_ARG, "%s: module is NULL", buffers ? "amp_module_state" : "amp_module_parameters");
        return -1;
    }
    walk w = {out, names, max, 0, m, buffers};
    walk_module(&w, m, "");
    return w.n;
}

int amp_module_parameters(amp_module *m, amp_tensor **params, const char **names, int max) {
    return collect(m, params, names, max, false);
}

int amp_module_state(amp_module *m, amp_tensor **tensors, const char **names, int max) {
    return collect(m, tensors, names, max, true);
}

int64_t amp_module_num_params(amp_module *m) {
    if (!m) {
        amp_error(AMP_ERR_ARG, "amp_module_num_params: module is NULL");
        return 0;
    }
    int n = amp_module_parameters(m, NULL, NULL, 0);
    if (n <= 0) return 0;
    amp_tensor **ps = calloc((size_t)n, sizeof *ps);
    if (!ps) return 0;
    amp_module_parameters(m, ps, NULL, n);
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += amp_tensor_numel(ps[i]);
    free(ps);
    return total;
}

static bool is_norm(const amp_module *m) { return m->k == M_BN2D || m->k == M_LN; }

static amp_status retype(amp_tensor *t, amp_dtype dt) {
    if (!t || t->dtype == dt) return AMP_OK;
    return amp__tensor_change_dtype(t, dt);
}

amp_status amp_module_to(amp_module *m, amp_dtype dt, bool keep_norm_f32) {
    if (!m) return amp_error(AMP_ERR_ARG, "amp_module_to: module is NULL");
    if (dt != AMP_F32 && dt != AMP_F16 && dt != AMP_BF16)
        return amp_error(AMP_ERR_DTYPE, "amp_module_to: dtype %s is not f32, f16 or bf16", amp_dtype_name(dt));
    if (keep_norm_f32 && is_norm(m)) {
        m->keep_f32 = true;
        amp_status st = retype(m->weight, AMP_F32);
        return st ? st : retype(m->bias, AMP_F32);
    }
    amp_status st = retype(m->weight, dt);
    if (!st) st = retype(m->bias, dt);
    for (int i = 0; i < m->n_ch && !st; i++) st = amp_module_to(m->ch[i], dt, keep_norm_f32);
    return st;
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

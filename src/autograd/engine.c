/* The autograd engine: node bookkeeping, backward, no-grad mode. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/autograd.h"
#include "amp/numeric.h"
#include "amp/ops.h"
#include "autograd/node.h"
#include "kernels/backend.h"

static _Thread_local int g_no_grad;
/* > 0 while a create_graph run is in the engine: its own sums and casts record history */
static _Thread_local int g_create_graph;
/* > 0 while the innermost engine run is amp_grad or create_graph (not an accumulating backward) */
static _Thread_local int g_grad_api;
static atomic_uint_fast64_t g_seq = 1;
static atomic_uint_fast64_t g_epoch = 1;

/* ---- grad mode ---------------------------------------------------------------- */
void amp_no_grad_begin(void) { g_no_grad++; }
void amp_no_grad_end(void) {
    if (g_no_grad > 0) g_no_grad--;
}
bool amp__engine_grad_api(void) { return g_grad_api > 0; }
bool amp_grad_enabled(void) { return g_no_grad == 0 && (amp__engine_depth == 0 || g_create_graph > 0); }

/* ---- leaves ------------------------------------------------------------------- */
static bool grad_dtype_ok(amp_dtype dt) { return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16 || dt == AMP_F64; }

amp_status amp_tensor_set_requires_grad(amp_tensor *t, bool rg) {
    if (!t) return amp_error(AMP_ERR_ARG, "amp_tensor_set_requires_grad: t is NULL");
    if (!amp__live("amp_tensor_set_requires_grad", t)) return AMP_ERR_STATE;
    if (t->grad_fn)
        return amp_error(AMP_ERR_STATE, "amp_tensor_set_requires_grad: t is not a leaf (it was produced by %s); "
                                        "use amp_detach first", t->grad_fn->name);
    if (rg && !grad_dtype_ok(t->dtype))
        return amp_error(AMP_ERR_DTYPE, "amp_tensor_set_requires_grad: dtype %s cannot require grad "
                                        "(only f32, f16, bf16, f64)", amp_dtype_name(t->dtype));
    t->requires_grad = rg;
    return AMP_OK;
}

bool amp_tensor_requires_grad(const amp_tensor *t) { return t && amp__live("amp_tensor_requires_grad", t) && t->requires_grad; }
bool amp_tensor_is_leaf(const amp_tensor *t) { return t && amp__live("amp_tensor_is_leaf", t) && !t->grad_fn; }
amp_tensor *amp_tensor_grad(const amp_tensor *t) {
    if (!t) return amp_error_null(AMP_ERR_ARG, "amp_tensor_grad: t is NULL");
    return amp__live("amp_tensor_grad", t) ? t->grad : NULL;
}
const char *amp_tensor_grad_fn_name(const amp_tensor *t) {
    if (!t) return amp_error_null(AMP_ERR_ARG, "amp_tensor_grad_fn_name: t is NULL");
    if (!amp__live("amp_tensor_grad_fn_name", t)) return NULL;
    return t->grad_fn ? t->grad_fn->name : NULL;
}

amp_status amp_tensor_set_grad(amp_tensor *t, const amp_tensor *grad) {
    if (!t) return amp_error(AMP_ERR_ARG, "amp_tensor_set_grad: t is NULL");
    if (!amp__live("amp_tensor_set_grad", t) || (grad && !amp__live("amp_tensor_set_grad", grad))) return AMP_ERR_STATE;
    if (!grad) {
        amp__release(t->grad);
        t->grad = NULL;
        return AMP_OK;
    }
    if (!amp__same_shape(t, grad)) {
        char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
        return amp_error(AMP_ERR_SHAPE, "amp_tensor_set_grad: grad shape %s differs from tensor shape %s",
                         amp__shape_fmt(grad->ndim, grad->shape, a, sizeof a), amp__shape_fmt(t->ndim, t->shape, b, sizeof b));
    }
    amp_tensor *g = amp__tensor_new_on("amp_tensor_set_grad", amp__dev(t), t->dtype, t->ndim, t->shape, AMP_MEM_GRAD,
                                       AMP_NEW_UNSCOPED);
    if (!g) return amp_last_status();
    amp_status s = amp__copy_convert(g, grad);
    if (s != AMP_OK) {
        amp__release(g);
        return s;
    }
    amp__release(t->grad);
    t->grad = g;
    return AMP_OK;
}

amp_tensor *amp_detach(amp_tensor *t) {
    if (!t) return amp_error_null(AMP_ERR_ARG, "amp_detach: t is NULL");
    if (!amp__live("amp_detach", t)) return NULL;
    amp_tensor *a = amp__alias(t);
    if (a) amp__scope_register(a);
    return a;
}

/* ---- post-accumulate-grad hooks and end-of-backward callbacks ------------------ */
typedef struct {
    amp_grad_hook_fn fn;
    void *ctx;
    int handle;
} grad_hook;

struct amp_grad_hooks {
    grad_hook *v;
    int n, cap, next_handle;
    /* engine scratch for one backward: edges still to run, whether a gradient arrived */
    uint64_t mark;
    int pending;
    bool got;
};

static void grad_hooks_free(struct amp_grad_hooks *h) {
    if (!h) return;
    free(h->v);
    free(h);
}

/* The tensor layer frees a tensor's grad_fn and hooks through these (it does
 * not call autograd): handed over before a node or a hook list exists. */
static const amp_tensor_autograd_ops g_tensor_ops = {amp__node_release, grad_hooks_free};

int amp_tensor_register_post_accumulate_grad_hook(amp_tensor *leaf, amp_grad_hook_fn fn, void *ctx) {
    static const char *fn_name = "amp_tensor_register_post_accumulate_grad_hook";
    if (!leaf || !fn) {
        amp_error(AMP_ERR_ARG, "%s: leaf or fn is NULL", fn_name);
        return -1;
    }
    if (!amp__live(fn_name, leaf)) return -1;
    if (leaf->grad_fn || !leaf->requires_grad) {
        amp_error(AMP_ERR_ARG, "%s: the tensor must be a leaf that requires grad (its .grad is what the hook sees)", fn_name);
        return -1;
    }
    struct amp_grad_hooks *h = leaf->hooks;
    if (!h) {
        h = calloc(1, sizeof *h);
        if (!h) {
            amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn_name);
            return -1;
        }
        amp__tensor_set_autograd_ops(&g_tensor_ops);
        leaf->hooks = h;
    }
    if (h->n == h->cap) {
        int cap = h->cap ? h->cap * 2 : 2;
        grad_hook *v = realloc(h->v, sizeof *v * (size_t)cap);
        if (!v) {
            amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn_name);
            return -1;
        }
        h->v = v;
        h->cap = cap;
    }
    int handle = h->next_handle++;
    h->v[h->n++] = (grad_hook){fn, ctx, handle};
    return handle;
}

amp_status amp_tensor_remove_hook(amp_tensor *leaf, int handle) {
    if (!leaf) return amp_error(AMP_ERR_ARG, "amp_tensor_remove_hook: leaf is NULL");
    if (!amp__live("amp_tensor_remove_hook", leaf)) return AMP_ERR_STATE;
    struct amp_grad_hooks *h = leaf->hooks;
    for (int i = 0; h && i < h->n; i++)
        if (h->v[i].handle == handle) {
            memmove(&h->v[i], &h->v[i + 1], sizeof *h->v * (size_t)(h->n - i - 1));
            h->n--;
            return AMP_OK;
        }
    return amp_error(AMP_ERR_ARG, "amp_tensor_remove_hook: the tensor has no hook %d", handle);
}

static amp_status run_hooks(const char *fn, amp_tensor *leaf) {
    struct amp_grad_hooks *h = leaf->hooks;
    for (int i = 0; h && i < h->n; i++) {
        amp_status st = h->v[i].fn(leaf, h->v[i].ctx);
        if (st != AMP_OK) {
            if (amp_last_status() == AMP_OK) amp_error(st, "%s: a post-accumulate-grad hook failed", fn);
            return st;
        }
        h = leaf->hooks; /* a hook may have registered or removed hooks */
    }
    return AMP_OK;
}

typedef struct {
    amp_backward_callback_fn fn;
    void *ctx;
} queued_cb;

typedef struct {
    queued_cb *v;
    int n, cap;
} cb_queue;

/* the callbacks of the backward running on this thread (NULL outside one) */
static _Thread_local cb_queue *g_cb_queue;

amp_status amp_autograd_queue_callback(amp_backward_callback_fn fn, void *ctx) {
    static const char *name = "amp_autograd_queue_callback";
    if (!fn) return amp_error(AMP_ERR_ARG, "%s: fn is NULL", name);
    cb_queue *q = g_cb_queue;
    if (!q) return amp_error(AMP_ERR_STATE, "%s: no backward is running on this thread (call it from a hook)", name);
    if (q->n == q->cap) {
        int cap = q->cap ? q->cap * 2 : 4;
        queued_cb *v = realloc(q->v, sizeof *v * (size_t)cap);
        if (!v) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", name);
        q->v = v;
        q->cap = cap;
    }
    q->v[q->n++] = (queued_cb){fn, ctx};
    return AMP_OK;
}

/* ---- nodes -------------------------------------------------------------------- */
bool amp__needs_grad(int n, amp_tensor *const *inputs) {
    if (!amp_grad_enabled()) return false;
    for (int i = 0; i < n; i++)
        if (inputs[i] && inputs[i]->requires_grad) return true;
    return false;
}

amp_node *amp__node_new(const char *name, amp_backward_fn fn, int n_inputs, amp_tensor *const *inputs, size_t ctx_size) {
    amp__tensor_set_autograd_ops(&g_tensor_ops);
    amp_node *n = calloc(1, sizeof *n);
    if (!n) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory (autograd node)", name);
    n->inputs = calloc((size_t)(n_inputs > 0 ? n_inputs : 1), sizeof *n->inputs);
    n->ctx = calloc(1, ctx_size ? ctx_size : 1);
    if (!n->inputs || !n->ctx) {
        free(n->inputs);
        free(n->ctx);
        free(n);
        return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory (autograd node)", name);
    }
    n->name = name;
    n->backward = fn;
    atomic_init(&n->refcount, 1);
    n->n_inputs = n_inputs;
    n->seq = atomic_fetch_add(&g_seq, 1);
    for (int i = 0; i < n_inputs; i++) {
        amp_tensor *x = inputs[i];
        amp_edge *e = &n->inputs[i];
        if (!x) continue;
        e->dtype = x->dtype;
        e->ndim = x->ndim;
        e->storage = x->storage;
        e->tensor = x;
        memcpy(e->shape, x->shape, sizeof e->shape);
        if (!x->requires_grad) continue;
        e->needs_grad = true;
        if (x->grad_fn) {
            e->node = x->grad_fn;
            e->index = x->out_index;
            atomic_fetch_add(&x->grad_fn->refcount, 1);
        } else {
            e->leaf = amp_tensor_retain(x);
        }
    }
    return n;
}

int amp__node_save(amp_node *n, const amp_tensor *t) {
    int i = n->n_saved;
    if (i >= AMP_NODE_MAX_SAVED) {
        amp_error(AMP_ERR_STATE, "%s: internal error: more than %d saved tensors", n->name, AMP_NODE_MAX_SAVED);
        return -1;
    }
    n->saved[i] = NULL;
    n->saved_version[i] = 0;
    n->saved_input[i] = -1;
    n->saved_arg[i] = -1;
    if (t) {
        n->saved[i] = amp__alias(t);
        if (!n->saved[i]) return -1;
        n->saved_version[i] = amp__version(t);
        for (int k = 0; k < n->n_inputs && k < 127; k++)
            if (n->inputs[k].tensor == (const void *)t) {
                n->saved_arg[i] = (signed char)k;
                break;
            }
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k].storage == (const void *)t->storage) {
                n->saved_input[i] = k;
                break;
            }
    }
    n->n_saved++;
    return i;
}

amp_status amp__node_record(const char *fn, amp_tensor *out, amp_tensor *const *in, int nin, const amp_node_spec *nd) {
    if (!amp__needs_grad(nin, in)) return AMP_OK;
    amp_node *node = amp__node_new(fn, nd->backward, nin, in, nd->ctx_size);
    if (!node) return amp_last_status();
    for (int i = 0; i < nd->nsave; i++) amp__node_save(node, nd->save[i]);
    if (nd->ctx_size) memcpy(node->ctx, nd->ctx, nd->ctx_size);
    node->backward_diff = nd->backward_diff;
    node->ctx_free = nd->ctx_free;
    amp__node_attach(node, out);
    return AMP_OK;
}

amp_status amp__node_check_saved(const amp_node *n, const char *fn) {
    for (int i = 0; i < n->n_saved; i++) {
        const amp_tensor *t = n->saved[i];
        if (!t) continue;
        uint64_t now = amp__version(t);
        if (now == n->saved_version[i]) continue;
        char what[64], b[AMP_SHAPE_BUF];
        if (n->saved_input[i] >= 0) snprintf(what, sizeof what, "input %d", n->saved_input[i]);
        else snprintf(what, sizeof what, "tensor %d (its output or an intermediate)", i);
        return amp_error(AMP_ERR_STATE,
                         "%s: %s saved %s (%s %s) for backward, and it was modified in place afterwards (version %llu, "
                         "expected %llu): the gradient would use the new values. Change it after backward, or change a "
                         "copy (amp_clone)",
                         fn, n->name, what, amp_dtype_name(t->dtype), amp__shape_fmt(t->ndim, t->shape, b, sizeof b),
                         (unsigned long long)now, (unsigned long long)n->saved_version[i]);
    }
    return AMP_OK;
}

void amp__node_attach(amp_node *n, amp_tensor *out) {
    n->out_dtype = out->dtype;
    n->out_ndim = out->ndim;
    memcpy(n->out_shape, out->shape, sizeof n->out_shape);
    out->grad_fn = n; /* takes the creation reference */
    out->out_index = 0;
    out->requires_grad = true;
}

static void node_free_saved(amp_node *n) {
    for (int i = 0; i < n->n_saved; i++) {
        amp__release(n->saved[i]);
        n->saved[i] = NULL;
    }
    if (n->ctx_free && n->ctx) n->ctx_free(n->ctx);
    n->ctx_free = NULL;
}

void amp__node_release(amp_node *n) {
    if (!n) return;
    if (atomic_fetch_sub(&n->refcount, 1) != 1) return;
    node_free_saved(n);
    for (int i = 0; i < n->n_inputs; i++) {
        if (n->inputs[i].node) amp__node_release(n->inputs[i].node);
        if (n->inputs[i].leaf) amp__release(n->inputs[i].leaf);
    }
    amp__release(n->pending);
    free(n->inputs);
    free(n->ctx);
    free(n);
}

/* ---- helpers ----------------------------------------------------------------- */
/* out (contiguous) = a + b (same shape as out) through their device's
 * backend: the elementwise add (f32 arithmetic rounded once to out's dtype,
 * double for f64), what add_new computes on the host. out may be a. */
static amp_status dev_add(amp_tensor *out, const amp_tensor *a, const amp_tensor *b) {
    static const char *fn = "amp_backward";
    amp_device dev;
    const amp_tensor *const ts[3] = {out, a, b};
    const char *const names[3] = {"the gradient", "the gradient", "the gradient added to it"};
    if (amp__same_device(fn, ts, names, 3, &dev) != AMP_OK) return amp_last_status();
    const amp_backend *be = amp__backend(fn, dev);
    if (!be) return amp_last_status();
    amp_ew_operand in[2];
    memset(in, 0, sizeof in);
    in[0].data = amp__data(a);
    in[0].dtype = a->dtype;
    in[1].data = amp__data(b);
    in[1].dtype = b->dtype;
    for (int d = 0; d < out->ndim; d++) {
        in[0].stride[d] = a->stride[d];
        in[1].stride[d] = b->stride[d];
    }
    return AMP_KCALL(be, ew, ew, fn, AMP_EW_ADD, NULL, out->ndim, out->shape, amp__data(out), out->dtype, 2, in);
}

/* out = a + b (new, dtype of a, unscoped, on a's device). */
static amp_tensor *add_new(const amp_tensor *a, const amp_tensor *b) {
    amp_tensor *out = amp__tensor_new_on("amp_backward", amp__dev(a), a->dtype, a->ndim, a->shape, AMP_MEM_WORKSPACE,
                                         AMP_NEW_UNSCOPED);
    if (!out) return NULL;
    if (amp__dev(a) != AMP_DEVICE_CPU || amp__dev(b) != AMP_DEVICE_CPU) {
        if (dev_add(out, a, b) != AMP_OK) {
            amp__release(out);
            return NULL;
        }
        return out;
    }
    if (a->dtype == AMP_F64) { /* f64 gradients add in double, not through f32 */
        int64_t n = amp_tensor_numel(a);
        double *po = amp__data(out);
        for (int64_t i = 0; i < n; i++)
            po[i] = amp__load(amp__elem_ptr(a, i), a->dtype) + amp__load(amp__elem_ptr(b, i), b->dtype);
        return out;
    }
    bool oa, ob;
    const float *pa = amp__f32_view(a, &oa), *pb = amp__f32_view(b, &ob);
    int64_t n = amp_tensor_numel(a);
    float *tmp = amp__ws_alloc((size_t)n * sizeof(float));
    if (!pa || !pb || !tmp) {
        amp__f32_done(a, pa, oa && pa);
        amp__f32_done(b, pb, ob && pb);
        amp__ws_free(tmp, (size_t)n * sizeof(float));
        amp__release(out);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) tmp[i] = pa[i] + pb[i];
    amp__from_f32(out, tmp);
    amp__ws_free(tmp, (size_t)n * sizeof(float));
    amp__f32_done(a, pa, oa);
    amp__f32_done(b, pb, ob);
    return out;
}

/* g belongs to the engine (one reference). When nothing else shares its
 * storage, the first gradient of a leaf takes the buffer over instead of
 * copying it (as PyTorch's AccumulateGrad steals), and later gradients are
 * added in place. */
static amp_status accumulate_leaf(amp_tensor *leaf, const amp_tensor *g) {
    size_t es = amp_dtype_size(leaf->dtype);
    int64_t n = amp_tensor_numel(leaf);
    if (!leaf->grad) {
        amp_storage *st = g->storage;
        if (g->dtype == leaf->dtype && g->offset == 0 && amp_tensor_is_contiguous(g) && !st->borrowed &&
            atomic_load(&st->refcount) == 1 && atomic_load(&g->refcount) == 1 && st->nbytes == (size_t)n * es) {
            amp_tensor *ng = amp__alias(g);
            if (!ng) return amp_last_status();
            amp__contig_strides(ng->ndim, ng->shape, ng->stride);
            amp__mem_move_dev(st->device, st->nbytes, st->cat, AMP_MEM_GRAD);
            st->cat = AMP_MEM_GRAD;
            leaf->grad = ng;
            return AMP_OK;
        }
        amp_tensor *ng = amp__tensor_new_on("amp_backward", amp__dev(leaf), leaf->dtype, leaf->ndim, leaf->shape,
                                            AMP_MEM_GRAD, AMP_NEW_UNSCOPED);
        if (!ng) return amp_last_status();
        amp_status s = amp__copy_convert(ng, g);
        if (s != AMP_OK) {
            amp__release(ng);
            return s;
        }
        leaf->grad = ng;
        return AMP_OK;
    }
    amp_tensor *acc = leaf->grad;
    if (amp__dev(acc) != AMP_DEVICE_CPU || amp__dev(g) != AMP_DEVICE_CPU) {
        /* on a device: added in place by its backend (element i read and
         * written by one thread), the arithmetic of the host paths below */
        if (amp_tensor_is_contiguous(acc)) return dev_add(acc, acc, g);
        amp_tensor *sum = add_new(acc, g);
        if (!sum) return amp_last_status();
        amp_status s = amp__copy_convert(acc, sum);
        amp__release(sum);
        return s;
    }
    if (acc->dtype == AMP_F32 && g->dtype == AMP_F32 && amp_tensor_is_contiguous(acc) && amp_tensor_is_contiguous(g)) {
        float *a = amp__data(acc);
        const float *b = amp__data(g);
        for (int64_t i = 0; i < n; i++) a[i] += b[i];
        return AMP_OK;
    }
    if (amp_dtype_is_half(acc->dtype) && g->dtype == acc->dtype && amp_tensor_is_contiguous(acc) && amp_tensor_is_contiguous(g)) {
        /* a half .grad (O2's tied embedding): widened, added and rounded tile
         * by tile in place, the bits of add_new without its whole-tensor f32
         * copies */
        char *a = amp__data(acc);
        const char *b = amp__data(g);
        enum { T = 2048 };
        for (int64_t t0 = 0; t0 < n; t0 += T) {
            float x[T], y[T];
            size_t m = (size_t)(n - t0 < T ? n - t0 : T);
            amp_convert(x, AMP_F32, a + (size_t)t0 * es, acc->dtype, m, 0);
            amp_convert(y, AMP_F32, b + (size_t)t0 * es, g->dtype, m, 0);
            for (size_t k = 0; k < m; k++) x[k] += y[k];
            amp_convert(a + (size_t)t0 * es, acc->dtype, x, AMP_F32, m, 0);
        }
        return AMP_OK;
    }
    amp_tensor *sum = add_new(acc, g);
    if (!sum) return amp_last_status();
    amp_status s = amp__copy_convert(acc, sum);
    amp__release(sum);
    return s;
}

/* Differentiable accumulation and casts while create_graph is on (the
 * engine's own sums and casts become part of the new graph). */

static amp_status accumulate_pending(amp_tensor **slot, amp_tensor *g) {
    if (!*slot) {
        *slot = g;
        return AMP_OK;
    }
    amp_tensor *sum = g_create_graph ? amp_add(*slot, g) : add_new(*slot, g);
    amp__release(g);
    if (!sum) return amp_last_status();
    amp__release(*slot);
    *slot = sum;
    return AMP_OK;
}

/* Converted copy when dtype differs; otherwise g itself. Consumes g. */
static amp_tensor *to_dtype(amp_tensor *g, amp_dtype dt) {
    if (g->dtype == dt) return g;
    amp_tensor *c;
    if (g_create_graph) {
        c = amp_to(g, dt);
    } else {
        c = amp__tensor_new_on("amp_backward", amp__dev(g), dt, g->ndim, g->shape, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
        if (c && amp__copy_convert(c, g) != AMP_OK) {
            amp__release(c);
            c = NULL;
        }
    }
    amp__release(g);
    return c;
}

/* ---- running a backward as user code ------------------------------------------------ */
/* The engine normally runs backward functions with grad mode off, without
 * scopes and without autocast (engine depth > 0). A differentiable backward
 * (create_graph) and a custom function's backward run like user code
 * instead: engine depth 0, grad mode on (create_graph) or off, the autocast
 * state given (off for built-in ops), and a scope that holds the
 * temporaries. The results gin[] are taken out of the scope (or retained when
 * the function returned a tensor it does not own). */
amp_status amp__run_as_user(amp_backward_fn f, amp_node *n, amp_tensor *gout, amp_tensor **gin, bool grad,
                            const amp_autocast_opts *ac) {
    int depth = amp__engine_depth, no_grad = g_no_grad, cg = g_create_graph;
    amp__engine_depth = 0;
    g_no_grad = grad ? 0 : 1;
    g_create_graph = 0;
    amp_autocast_opts off = AMP_AUTOCAST_OPTS(AMP_F16);
    off.enabled = false;
    off.cache_enabled = false;
    amp_status st = amp_autocast_enter_opts(ac ? ac : &off);
    bool entered = st == AMP_OK;
    amp_scope *sc = st == AMP_OK ? amp_scope_begin() : NULL;
    if (st == AMP_OK && !sc) st = amp_last_status();
    if (st == AMP_OK) {
        amp_mem_push_category(grad ? AMP_MEM_ACTIVATION : AMP_MEM_WORKSPACE);
        st = f(n, (amp_tensor *const *)&gout, gin);
        amp_mem_pop_category();
        for (int i = 0; i < n->n_inputs; i++) {
            if (!gin[i]) continue;
            if (st != AMP_OK || !n->inputs[i].needs_grad) {
                gin[i] = NULL; /* the scope drops it */
                continue;
            }
            if (gin[i]->scope == sc) amp_tensor_keep(gin[i]);
            else amp_tensor_retain(gin[i]);
        }
        amp_scope_end(sc);
    }
    if (entered) amp_autocast_exit();
    amp__engine_depth = depth;
    g_no_grad = no_grad;
    g_create_graph = cg;
    return st;
}

/* An unscoped alias of t keeping its history. */
static amp_tensor *alias_with_history(amp_tensor *t) {
    amp_tensor *a = amp__alias(t);
    if (a && t->grad_fn) {
        a->grad_fn = t->grad_fn;
        atomic_fetch_add(&t->grad_fn->refcount, 1);
        a->out_index = t->out_index;
        a->requires_grad = true;
    }
    return a;
}

static amp_tensor *live_alias(amp_tensor *s, amp_node *producer, int index) {
    amp_tensor *a = amp__alias(s);
    if (!a) return NULL;
    a->grad_fn = producer;
    atomic_fetch_add(&producer->refcount, 1);
    a->out_index = index;
    a->requires_grad = true;
    amp__scope_register(a);
    return a;
}

amp_tensor *amp__saved_input(amp_node *n, int k) {
    if (k < 0 || k >= n->n_inputs) return amp_error_null(AMP_ERR_STATE, "%s: internal error: no input %d", n->name, k);
    const amp_edge *e = &n->inputs[k];
    int j = -1;
    for (int i = 0; i < n->n_saved && j < 0; i++)
        if (n->saved[i] && n->saved_arg[i] >= 0 && n->inputs[(int)n->saved_arg[i]].tensor == e->tensor) j = i;
    if (j < 0)
        return amp_error_null(AMP_ERR_STATE, "%s: internal error: input %d was not saved for a differentiable backward", n->name, k);
    if (!e->needs_grad) return n->saved[j];
    if (e->leaf) return e->leaf;
    return live_alias(n->saved[j], e->node, e->index);
}

amp_tensor *amp__saved_output(amp_node *n, int j) {
    if (j < 0 || j >= n->n_saved || !n->saved[j])
        return amp_error_null(AMP_ERR_STATE, "%s: internal error: no saved output %d", n->name, j);
    return live_alias(n->saved[j], n, 0);
}

amp_tensor *amp__sum_to_diff(amp_tensor *g, int ndim, const int64_t *shape) {
    if (!g) return NULL;
    if (g->ndim == ndim && memcmp(g->shape, shape, sizeof(int64_t) * (size_t)ndim) == 0) return g;
    int dims[AMP_MAX_DIMS], nd = 0, off = g->ndim - ndim;
    for (int i = 0; i < g->ndim; i++) {
        int ti = i - off;
        if (ti < 0 || (shape[ti] == 1 && g->shape[i] != 1)) dims[nd++] = i;
    }
    amp_tensor *r = nd ? amp_sum(g, dims, nd, true) : g;
    return amp_reshape(r, ndim, shape);
}

/* ---- the engine ------------------------------------------------------------------ */
typedef struct {
    amp_node **v;
    size_t n, cap;
} node_vec;

static int vec_push(node_vec *v, amp_node *n) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        amp_node **p = realloc(v->v, cap * sizeof *p);
        if (!p) return -1;
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = n;
    return 0;
}

typedef struct {
    const char *fn; /* the public entry point, named in errors */
    int n_roots;
    amp_tensor *const *roots;
    amp_tensor **seeds; /* one reference each, consumed */
    bool retain_graph, create_graph;
    /* amp_grad: the requested inputs and their gradients (one reference each);
     * n_cap == 0: amp_backward, accumulate into the leaves' .grad */
    int n_cap;
    amp_tensor *const *cap;
    amp_tensor **cap_grad;
} run_spec;

static int cap_leaf_index(const run_spec *rs, const amp_tensor *leaf) {
    for (int i = 0; i < rs->n_cap; i++)
        if (rs->cap[i] == leaf && !leaf->grad_fn) return i;
    return -1;
}

static bool is_cap_node(const run_spec *rs, const amp_node *n) {
    for (int i = 0; i < rs->n_cap; i++)
        if (rs->cap[i]->grad_fn == n) return true;
    return false;
}

/* A gradient arriving at leaf input e. */
static amp_status deliver_leaf(const run_spec *rs, amp_tensor *leaf, amp_tensor *g) {
    if (!rs->n_cap) {
        amp_status st = accumulate_leaf(leaf, g);
        amp__release(g);
        if (st == AMP_OK && leaf->hooks) leaf->hooks->got = true;
        return st;
    }
    int i = cap_leaf_index(rs, leaf);
    if (i < 0) {
        amp__release(g);
        return AMP_OK;
    }
    return accumulate_pending(&rs->cap_grad[i], g);
}

static amp_status call_backward(const run_spec *rs, amp_node *n, amp_tensor *gout, amp_tensor **gin) {
    if (!rs->create_graph) return n->backward(n, (amp_tensor *const *)&gout, gin);
    if (!n->backward_diff)
        return amp_error(AMP_ERR_UNSUPPORTED, "%s: create_graph: %s has no double backward in amp (its backward is not "
                                              "differentiable); the ops covered are listed in docs/autograd.md", rs->fn, n->name);
    return amp__run_as_user(n->backward_diff, n, gout, gin, true, NULL);
}

static amp_status engine_run(const run_spec *rs) {
    const char *fn = rs->fn;
    amp_status st = AMP_OK;
    node_vec all = {0}, stack = {0}, order = {0};
    uint64_t epoch = atomic_fetch_add(&g_epoch, 1);
    g_create_graph += rs->create_graph;
    int grad_api = g_grad_api;
    g_grad_api = rs->n_cap > 0 || rs->create_graph;
    /* seeds: leaves directly, nodes through their pending gradient */
    for (int k = 0; k < rs->n_roots; k++) {
        amp_tensor *root = rs->roots[k], *g = rs->seeds[k];
        rs->seeds[k] = NULL;
        if (st != AMP_OK) {
            amp__release(g);
            continue;
        }
        if (!root->grad_fn) {
            st = deliver_leaf(rs, root, g);
            if (st == AMP_OK && !rs->n_cap && root->hooks) st = run_hooks(fn, root); /* nothing else can reach it */
            continue;
        }
        amp_node *r = root->grad_fn;
        if (r->mark != epoch) {
            r->mark = epoch;
            r->deps = 0;
            r->needed = rs->n_cap == 0;
            if (vec_push(&all, r) || vec_push(&stack, r)) {
                amp__release(g);
                goto nomem;
            }
        }
        st = accumulate_pending(&r->pending, g);
    }
    if (st != AMP_OK) goto out;
    /* collect the reachable nodes and count dependencies */
    while (stack.n) {
        amp_node *n = stack.v[--stack.n];
        if (n->released) {
            st = amp_error(AMP_ERR_STATE, "%s: the graph through %s was already freed by an earlier backward; "
                                          "pass retain_graph to the first backward to run another", fn, n->name);
            goto out;
        }
        for (int i = 0; i < n->n_inputs; i++) {
            amp_tensor *lf = n->inputs[i].leaf;
            if (lf && lf->hooks && !rs->n_cap && n->inputs[i].needs_grad) {
                struct amp_grad_hooks *h = lf->hooks;
                if (h->mark != epoch) {
                    h->mark = epoch;
                    h->pending = 0;
                    h->got = false;
                }
                h->pending++;
            }
            amp_node *c = n->inputs[i].node;
            if (!c) continue;
            if (c->mark != epoch) {
                c->mark = epoch;
                c->deps = 0;
                c->needed = rs->n_cap == 0;
                if (vec_push(&all, c) || vec_push(&stack, c)) goto nomem;
            }
            c->deps++;
        }
    }
    if (rs->n_cap) {
        /* amp_grad runs only the nodes on a path to a requested input: a
         * topological order first (Kahn's algorithm on a copy of the
         * counts), then "needed" from the inputs up */
        int *deps = malloc(sizeof(int) * (all.n ? all.n : 1));
        if (!deps) goto nomem;
        for (size_t i = 0; i < all.n; i++) deps[i] = all.v[i]->deps;
        for (size_t i = 0; i < all.n; i++)
            if (all.v[i]->deps == 0 && vec_push(&stack, all.v[i])) {
                free(deps);
                goto nomem;
            }
        while (stack.n) {
            amp_node *n = stack.v[--stack.n];
            if (vec_push(&order, n)) {
                free(deps);
                goto nomem;
            }
            for (int i = 0; i < n->n_inputs; i++) {
                amp_node *c = n->inputs[i].node;
                if (c && --c->deps == 0 && vec_push(&stack, c)) {
                    free(deps);
                    goto nomem;
                }
            }
        }
        for (size_t i = 0; i < all.n; i++) all.v[i]->deps = deps[i];
        free(deps);
        for (size_t o = order.n; o-- > 0;) {
            amp_node *n = order.v[o];
            for (int i = 0; i < n->n_inputs && !n->needed; i++) {
                const amp_edge *e = &n->inputs[i];
                if (!e->needs_grad) continue;
                if (e->leaf) n->needed = cap_leaf_index(rs, e->leaf) >= 0;
                else if (e->node) n->needed = e->node->needed || is_cap_node(rs, e->node);
            }
        }
    }
    /* Kahn's algorithm from the roots */
    stack.n = 0;
    for (size_t i = 0; i < all.n; i++)
        if (all.v[i]->deps == 0 && vec_push(&stack, all.v[i])) goto nomem;
    amp_tensor *gin_local[16];
    while (stack.n) {
        amp_node *n = stack.v[--stack.n];
        amp_tensor *gout = n->pending;
        n->pending = NULL;
        /* a requested non-leaf input: its gradient is what reached its producer */
        for (int i = 0; gout && i < rs->n_cap && st == AMP_OK; i++)
            if (rs->cap[i]->grad_fn == n) st = accumulate_pending(&rs->cap_grad[i], amp_tensor_retain(gout));
        amp_tensor **gin = n->n_inputs <= 16 ? gin_local : calloc((size_t)n->n_inputs, sizeof *gin);
        if (!gin) {
            amp__release(gout);
            goto nomem;
        }
        memset(gin, 0, sizeof *gin * (size_t)n->n_inputs);
        bool run = gout && n->needed && st == AMP_OK;
        if (run) st = amp__node_check_saved(n, fn);
        if (run && st == AMP_OK) {
            st = call_backward(rs, n, gout, gin);
            if (st != AMP_OK && amp_last_status() == AMP_OK) amp_error(st, "%s: backward of %s failed", fn, n->name);
        }
        amp__release(gout);
        if (run && !rs->retain_graph && (n->n_saved > 0 || n->ctx_free)) {
            node_free_saved(n); /* torch frees saved tensors only: a node without any may run again */
            n->released = true;
        }
        for (int i = 0; i < n->n_inputs; i++) {
            amp_edge *e = &n->inputs[i];
            amp_tensor *g = gin[i];
            gin[i] = NULL;
            if (st == AMP_OK && g && e->needs_grad) {
                if (g->ndim != e->ndim || memcmp(g->shape, e->shape, sizeof(int64_t) * (size_t)e->ndim) != 0) {
                    char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
                    st = amp_error(AMP_ERR_SHAPE, "%s: internal error: backward of %s gave a gradient of shape %s for "
                                                  "input %d of shape %s", fn, n->name,
                                   amp__shape_fmt(g->ndim, g->shape, a, sizeof a), i, amp__shape_fmt(e->ndim, e->shape, b, sizeof b));
                    amp__release(g);
                    g = NULL;
                } else {
                    g = to_dtype(g, e->dtype);
                    if (!g) st = amp_last_status();
                }
                if (st == AMP_OK && g) st = e->leaf ? deliver_leaf(rs, e->leaf, g) : accumulate_pending(&e->node->pending, g);
            } else {
                amp__release(g);
            }
            if (e->leaf && e->leaf->hooks && !rs->n_cap && e->needs_grad && e->leaf->hooks->mark == epoch &&
                --e->leaf->hooks->pending == 0 && e->leaf->hooks->got && st == AMP_OK)
                st = run_hooks(fn, e->leaf); /* every edge into the leaf has run: its .grad is final */
            if (e->node && --e->node->deps == 0) {
                if (vec_push(&stack, e->node)) st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
            }
        }
        if (gin != gin_local) free(gin);
        if (st != AMP_OK) break;
    }
    goto out;
nomem:
    st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
out:
    /* drop whatever is still pending (an error stops the run midway) */
    for (size_t i = 0; i < all.n; i++) {
        amp__release(all.v[i]->pending);
        all.v[i]->pending = NULL;
    }
    g_create_graph -= rs->create_graph;
    g_grad_api = grad_api;
    free(all.v);
    free(stack.v);
    free(order.v);
    return st;
}

static amp_status backward_impl(const char *fn, amp_tensor *root, const amp_tensor *grad, bool retain_graph);

amp_status amp_backward(amp_tensor *root) { return backward_impl("amp_backward", root, NULL, false); }

amp_status amp_backward_ex(amp_tensor *root, const amp_tensor *grad, bool retain_graph) {
    return backward_impl("amp_backward_ex", root, grad, retain_graph);
}

/* Checks one output and its upstream gradient (grad may be NULL: ones for a
 * one-element output). what names it in messages ("root", "outputs[2]"). */
static amp_status check_root(const char *fn, const char *what, const amp_tensor *root, const amp_tensor *grad, bool amp_grad_api) {
    if (!root) return amp_error_chain(AMP_ERR_ARG, "%s: %s is NULL", fn, what); /* after the forward's error, if any */
    if (!amp__live(fn, root) || (grad && !amp__live(fn, grad))) return AMP_ERR_STATE;
    if (!root->requires_grad)
        return amp_error(AMP_ERR_STATE, "%s: %s does not require grad (no input of the ops that produced it "
                                        "requires grad, or it was made under no_grad)", fn, what);
    if (!grad && amp_tensor_numel(root) != 1) {
        char b[AMP_SHAPE_BUF];
        return amp_error(AMP_ERR_SHAPE, "%s: %s of shape %s is not a one-element tensor; pass its upstream gradient%s", fn, what,
                         amp__shape_fmt(root->ndim, root->shape, b, sizeof b),
                         amp_grad_api ? " in grad_outputs" : " with amp_backward_ex");
    }
    if (grad && !amp__same_shape(grad, root)) {
        char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
        return amp_error(AMP_ERR_SHAPE, "%s: the gradient for %s has shape %s; %s has shape %s", fn, what,
                         amp__shape_fmt(grad->ndim, grad->shape, a, sizeof a), what, amp__shape_fmt(root->ndim, root->shape, b, sizeof b));
    }
    if (grad && !amp_dtype_is_float(grad->dtype))
        return amp_error(AMP_ERR_DTYPE, "%s: the gradient for %s has dtype %s; expected a float tensor", fn, what,
                         amp_dtype_name(grad->dtype));
    return AMP_OK;
}

/* The seed for root: a copy of grad in root's dtype (or ones); with
 * create_graph, grad itself (cast differentiably) so it may carry history. */
static amp_tensor *make_seed(const char *fn, const amp_tensor *root, amp_tensor *grad, bool create_graph) {
    if (grad && create_graph) {
        if (grad->dtype == root->dtype) return amp_tensor_retain(grad);
        g_create_graph++;
        amp_tensor *c = amp_to(grad, root->dtype);
        g_create_graph--;
        return c;
    }
    /* on the root's device (a given grad is copied there) */
    amp_tensor *g0 = amp__tensor_new_on(fn, amp__dev(root), root->dtype, root->ndim, root->shape, AMP_MEM_WORKSPACE,
                                        AMP_NEW_UNSCOPED);
    if (!g0) return NULL;
    amp_status st = grad ? amp__copy_convert(g0, grad) : amp_tensor_fill_(g0, 1.0);
    if (st != AMP_OK) {
        amp__release(g0);
        return NULL;
    }
    return g0;
}

static amp_status backward_impl(const char *fn, amp_tensor *root, const amp_tensor *grad, bool retain_graph) {
    amp_status st = check_root(fn, "root", root, grad, false);
    if (st) return st;
    amp__engine_depth++;
    amp_tensor *g0 = make_seed(fn, root, (amp_tensor *)grad, false);
    if (!g0) {
        amp__engine_depth--;
        return amp_last_status();
    }
    run_spec rs = {fn, 1, &root, &g0, retain_graph, false, 0, NULL, NULL};
    /* a backward run inside another one (activation checkpointing's inner
     * backward) queues onto the outermost backward: its callbacks run when
     * the whole graph is done */
    cb_queue q = {0};
    bool outermost = g_cb_queue == NULL;
    if (outermost) g_cb_queue = &q;
    st = engine_run(&rs);
    if (!outermost) {
        amp__engine_depth--;
        return st;
    }
    /* callbacks queued by hooks run once the graph is done (torch's
     * queue_callback), each told how the backward went; a callback may
     * queue another */
    for (int i = 0; i < q.n; i++) {
        amp_status cs = q.v[i].fn(q.v[i].ctx, st);
        if (cs != AMP_OK && st == AMP_OK) {
            st = cs;
            if (amp_last_status() == AMP_OK) amp_error(st, "%s: a backward callback failed", fn);
        }
    }
    g_cb_queue = NULL;
    free(q.v);
    amp__engine_depth--;
    return st;
}

amp_status amp_grad(amp_tensor *const *outputs, int n_outputs, amp_tensor *const *grad_outputs, amp_tensor *const *inputs,
                    int n_inputs, amp_tensor **grads, bool create_graph, bool retain_graph) {
    static const char *fn = "amp_grad";
    if (!outputs || n_outputs <= 0) return amp_error(AMP_ERR_ARG, "%s: outputs is NULL or n_outputs %d is not positive", fn, n_outputs);
    if (!inputs || n_inputs <= 0) return amp_error(AMP_ERR_ARG, "%s: inputs is NULL or n_inputs %d is not positive", fn, n_inputs);
    if (!grads) return amp_error(AMP_ERR_ARG, "%s: grads is NULL (it receives n_inputs gradients)", fn);
    if (n_outputs > 4096 || n_inputs > (1 << 20)) return amp_error(AMP_ERR_ARG, "%s: too many outputs or inputs", fn);
    for (int i = 0; i < n_inputs; i++) grads[i] = NULL;
    char what[48];
    for (int k = 0; k < n_outputs; k++) {
        snprintf(what, sizeof what, "outputs[%d]", k);
        amp_status st = check_root(fn, what, outputs[k], grad_outputs ? grad_outputs[k] : NULL, true);
        if (st) return st;
    }
    for (int i = 0; i < n_inputs; i++) {
        if (!inputs[i]) return amp_error(AMP_ERR_ARG, "%s: inputs[%d] is NULL", fn, i);
        if (!amp__live(fn, inputs[i])) return AMP_ERR_STATE;
        if (!inputs[i]->requires_grad) return amp_error(AMP_ERR_STATE, "%s: inputs[%d] does not require grad", fn, i);
    }
    /* torch: a graph is recorded only when grad mode is on at the call */
    create_graph = create_graph && amp_grad_enabled();
    amp_tensor *seed_local[8], **seeds = n_outputs <= 8 ? seed_local : calloc((size_t)n_outputs, sizeof *seeds);
    if (!seeds) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    amp__engine_depth++;
    amp_status st = AMP_OK;
    for (int k = 0; k < n_outputs; k++) {
        seeds[k] = st == AMP_OK ? make_seed(fn, outputs[k], grad_outputs ? grad_outputs[k] : NULL, create_graph) : NULL;
        if (!seeds[k] && st == AMP_OK) st = amp_last_status();
    }
    if (st == AMP_OK) {
        run_spec rs = {fn, n_outputs, outputs, seeds, retain_graph, create_graph, n_inputs, inputs, grads};
        st = engine_run(&rs);
    } else {
        for (int k = 0; k < n_outputs; k++) amp__release(seeds[k]);
    }
    /* the same leaf asked for twice gets its gradient twice (an alias: each entry is one reference) */
    for (int i = 0; i < n_inputs && st == AMP_OK; i++)
        for (int j = 0; j < i && !grads[i]; j++)
            if (inputs[j] == inputs[i] && grads[j]) {
                grads[i] = alias_with_history(grads[j]);
                if (!grads[i]) st = amp_last_status();
            }
    for (int i = 0; i < n_inputs && st == AMP_OK; i++) {
        if (grads[i]) continue;
        st = amp_error(AMP_ERR_STATE, "%s: inputs[%d] was not used to compute the outputs (no gradient reaches it); "
                                      "leave it out of inputs", fn, i);
    }
    amp__engine_depth--;
    if (seeds != seed_local) free(seeds);
    for (int i = 0; i < n_inputs; i++) {
        if (!grads[i]) continue;
        if (st != AMP_OK) {
            amp__release(grads[i]);
            grads[i] = NULL;
            continue;
        }
        /* the caller's now: into the caller's scope, counted as gradient memory unless part of a graph */
        if (!grads[i]->grad_fn && grads[i]->storage->cat == AMP_MEM_WORKSPACE) amp_tensor_set_category(grads[i], AMP_MEM_GRAD);
        amp__scope_register(grads[i]);
    }
    return st;
}

/* ---- sum_to_shape --------------------------------------------------------------- */
/* g summed down to shape through its device's backend (kernels/backend.h:
 * sum_to_shape; the CPU's sums in double, kernels/cpu/backend_cpu_reduce.c);
 * an equal shape is a copy. */
amp_tensor *amp__sum_to_shape(const amp_tensor *g, int ndim, const int64_t *shape) {
    static const char *fn = "amp_backward";
    if (g->ndim == ndim && memcmp(g->shape, shape, sizeof(int64_t) * (size_t)ndim) == 0) {
        amp_tensor *c = amp__tensor_new_on(fn, amp__dev(g), g->dtype, ndim, shape, amp__mem_current(AMP_MEM_WORKSPACE), 0);
        if (c && amp__copy_convert(c, g) != AMP_OK) {
            amp__release(c);
            return NULL;
        }
        return c;
    }
    const amp_backend *be = amp__backend_of(fn, g);
    if (!be) return NULL;
    amp_tensor *out = NULL;
    if (AMP_KCALL(be, reduce, sum_to_shape, fn, g, ndim, shape, &out) != AMP_OK) return NULL;
    return out;
}

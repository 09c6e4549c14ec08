/* The autograd engine: node bookkeeping, backward, no-grad mode. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/autograd.h"
#include "autograd/node.h"

static _Thread_local int g_no_grad;
static atomic_uint_fast64_t g_seq = 1;
static atomic_uint_fast64_t g_epoch = 1;

/* ---- grad mode ---------------------------------------------------------------- */
void amp_no_grad_begin(void) { g_no_grad++; }
void amp_no_grad_end(void) {
    if (g_no_grad > 0) g_no_grad--;
}
bool amp_grad_enabled(void) { return g_no_grad == 0 && amp__engine_depth == 0; }

/* ---- leaves ------------------------------------------------------------------- */
static bool grad_dtype_ok(amp_dtype dt) { return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16 || dt == AMP_F64; }

amp_status amp_tensor_set_requires_grad(amp_tensor *t, bool rg) {
    if (!t) return amp_error(AMP_ERR_ARG, "amp_tensor_set_requires_grad: t is NULL");
    if (t->grad_fn)
        return amp_error(AMP_ERR_STATE, "amp_tensor_set_requires_grad: t is not a leaf (it was produced by %s); "
                                        "use amp_detach first", t->grad_fn->name);
    if (rg && !grad_dtype_ok(t->dtype))
        return amp_error(AMP_ERR_DTYPE, "amp_tensor_set_requires_grad: dtype %s cannot require grad "
                                        "(only f32, f16, bf16, f64)", amp_dtype_name(t->dtype));
    t->requires_grad = rg;
    return AMP_OK;
}

bool amp_tensor_requires_grad(const amp_tensor *t) { return t && t->requires_grad; }
bool amp_tensor_is_leaf(const amp_tensor *t) { return t && !t->grad_fn; }
amp_tensor *amp_tensor_grad(const amp_tensor *t) { return t ? t->grad : amp_error_null(AMP_ERR_ARG, "amp_tensor_grad: t is NULL"); }
const char *amp_tensor_grad_fn_name(const amp_tensor *t) {
    if (!t) return amp_error_null(AMP_ERR_ARG, "amp_tensor_grad_fn_name: t is NULL");
    return t->grad_fn ? t->grad_fn->name : NULL;
}

amp_status amp_tensor_set_grad(amp_tensor *t, const amp_tensor *grad) {
    if (!t) return amp_error(AMP_ERR_ARG, "amp_tensor_set_grad: t is NULL");
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
    amp_tensor *g = amp__tensor_new("amp_tensor_set_grad", t->dtype, t->ndim, t->shape, AMP_MEM_GRAD, AMP_NEW_UNSCOPED);
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
    amp_tensor *a = amp__alias(t);
    if (a) amp__scope_register(a);
    return a;
}

/* ---- nodes -------------------------------------------------------------------- */
bool amp__needs_grad(int n, amp_tensor *const *inputs) {
    if (!amp_grad_enabled()) return false;
    for (int i = 0; i < n; i++)
        if (inputs[i] && inputs[i]->requires_grad) return true;
    return false;
}

amp_node *amp__node_new(const char *name, amp_backward_fn fn, int n_inputs, amp_tensor *const *inputs, size_t ctx_size) {
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
    if (t) {
        n->saved[i] = amp__alias(t);
        if (!n->saved[i]) return -1;
        n->saved_version[i] = amp__version(t);
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k].storage == (const void *)t->storage) {
                n->saved_input[i] = k;
                break;
            }
    }
    n->n_saved++;
    return i;
}

amp_status amp__node_check_saved(const amp_node *n, const char *fn) {
    for (int i = 0; i < n->n_saved; i++) {
        const amp_tensor *t = n->saved[i];
        if (!t) continue;
        uint64_t now = amp__version(t);
        if (now == n->saved_version[i]) continue;
        char what[48], b[AMP_SHAPE_BUF];
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
/* out = a + b (new, dtype of a, unscoped). */
static amp_tensor *add_new(const amp_tensor *a, const amp_tensor *b) {
    amp_tensor *out = amp__tensor_new("amp_backward", a->dtype, a->ndim, a->shape, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
    if (!out) return NULL;
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
            amp__mem_move(st->nbytes, st->cat, AMP_MEM_GRAD);
            st->cat = AMP_MEM_GRAD;
            leaf->grad = ng;
            return AMP_OK;
        }
        amp_tensor *ng = amp__tensor_new("amp_backward", leaf->dtype, leaf->ndim, leaf->shape, AMP_MEM_GRAD, AMP_NEW_UNSCOPED);
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
    if (acc->dtype == AMP_F32 && g->dtype == AMP_F32 && amp_tensor_is_contiguous(acc) && amp_tensor_is_contiguous(g)) {
        float *a = amp__data(acc);
        const float *b = amp__data(g);
        for (int64_t i = 0; i < n; i++) a[i] += b[i];
        return AMP_OK;
    }
    amp_tensor *sum = add_new(acc, g);
    if (!sum) return amp_last_status();
    amp_status s = amp__copy_convert(acc, sum);
    amp__release(sum);
    return s;
}

static amp_status accumulate_pending(amp_tensor **slot, amp_tensor *g) {
    if (!*slot) {
        *slot = g;
        return AMP_OK;
    }
    amp_tensor *sum = add_new(*slot, g);
    amp__release(g);
    if (!sum) return amp_last_status();
    amp__release(*slot);
    *slot = sum;
    return AMP_OK;
}

/* Converted copy when dtype differs; otherwise g itself. Consumes g. */
static amp_tensor *to_dtype(amp_tensor *g, amp_dtype dt) {
    if (g->dtype == dt) return g;
    amp_tensor *c = amp__tensor_new("amp_backward", dt, g->ndim, g->shape, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
    if (c && amp__copy_convert(c, g) != AMP_OK) {
        amp__release(c);
        c = NULL;
    }
    amp__release(g);
    return c;
}

/* ---- backward ------------------------------------------------------------------ */
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

static amp_status backward_impl(const char *fn, amp_tensor *root, const amp_tensor *grad, bool retain_graph);

amp_status amp_backward(amp_tensor *root) { return backward_impl("amp_backward", root, NULL, false); }

amp_status amp_backward_ex(amp_tensor *root, const amp_tensor *grad, bool retain_graph) {
    return backward_impl("amp_backward_ex", root, grad, retain_graph);
}

/* fn: the public entry point, named in errors */
static amp_status backward_impl(const char *fn, amp_tensor *root, const amp_tensor *grad, bool retain_graph) {
    if (!root) return amp_error(AMP_ERR_ARG, "%s: root is NULL (did the forward fail? %s)", fn, amp_last_error());
    if (!root->requires_grad)
        return amp_error(AMP_ERR_STATE, "%s: the tensor does not require grad (no input of the ops that produced it "
                                        "requires grad, or it was made under no_grad)", fn);
    if (!grad && amp_tensor_numel(root) != 1) {
        char b[AMP_SHAPE_BUF];
        return amp_error(AMP_ERR_SHAPE, "%s: root of shape %s is not a one-element tensor; pass its upstream gradient "
                                        "with amp_backward_ex", fn, amp__shape_fmt(root->ndim, root->shape, b, sizeof b));
    }
    if (grad && !amp__same_shape(grad, root)) {
        char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
        return amp_error(AMP_ERR_SHAPE, "%s: grad shape %s differs from root shape %s", fn,
                         amp__shape_fmt(grad->ndim, grad->shape, a, sizeof a), amp__shape_fmt(root->ndim, root->shape, b, sizeof b));
    }
    amp__engine_depth++;
    amp_status st = AMP_OK;
    amp_tensor *g0 = amp__tensor_new(fn, root->dtype, root->ndim, root->shape, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
    if (!g0) {
        amp__engine_depth--;
        return amp_last_status();
    }
    if (grad) st = amp__copy_convert(g0, grad);
    else amp_tensor_fill_(g0, 1.0);
    if (st != AMP_OK) goto out_g0;

    if (!root->grad_fn) { /* a leaf */
        st = accumulate_leaf(root, g0);
        goto out_g0;
    }

    /* Collect reachable nodes and count dependencies. */
    uint64_t epoch = atomic_fetch_add(&g_epoch, 1);
    node_vec all = {0}, stack = {0};
    amp_node *r = root->grad_fn;
    r->mark = epoch;
    r->deps = 0;
    if (vec_push(&all, r) || vec_push(&stack, r)) goto nomem;
    while (stack.n) {
        amp_node *n = stack.v[--stack.n];
        if (n->released) {
            st = amp_error(AMP_ERR_STATE, "%s: the graph through %s was already freed by an earlier backward; "
                                          "pass retain_graph to the first backward to run another", fn, n->name);
            goto out_vec;
        }
        for (int i = 0; i < n->n_inputs; i++) {
            amp_node *c = n->inputs[i].node;
            if (!c) continue;
            if (c->mark != epoch) {
                c->mark = epoch;
                c->deps = 0;
                if (vec_push(&all, c) || vec_push(&stack, c)) goto nomem;
            }
            c->deps++;
        }
    }

    /* Kahn's algorithm from the root. */
    r->pending = g0;
    g0 = NULL;
    stack.n = 0;
    if (vec_push(&stack, r)) goto nomem;
    amp_tensor *gin_local[16];
    while (stack.n) {
        amp_node *n = stack.v[--stack.n];
        amp_tensor *gout = n->pending;
        n->pending = NULL;
        amp_tensor **gin = n->n_inputs <= 16 ? gin_local : calloc((size_t)n->n_inputs, sizeof *gin);
        if (!gin) {
            amp__release(gout);
            goto nomem;
        }
        memset(gin, 0, sizeof *gin * (size_t)n->n_inputs);
        if (gout) st = amp__node_check_saved(n, fn);
        if (gout && st == AMP_OK) {
            st = n->backward(n, (amp_tensor *const *)&gout, gin);
            if (st != AMP_OK && amp_last_status() == AMP_OK) amp_error(st, "%s: backward of %s failed", fn, n->name);
        }
        amp__release(gout);
        if (!retain_graph && (n->n_saved > 0 || n->ctx_free)) {
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
                if (st == AMP_OK && g) {
                    if (e->leaf) {
                        st = accumulate_leaf(e->leaf, g);
                        amp__release(g);
                    } else {
                        st = accumulate_pending(&e->node->pending, g);
                    }
                }
            } else {
                amp__release(g);
            }
            if (e->node && --e->node->deps == 0) {
                if (vec_push(&stack, e->node)) {
                    st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
                }
            }
        }
        if (gin != gin_local) free(gin);
        if (st != AMP_OK) break;
    }
    /* On error, drop whatever is still pending. */
    for (size_t i = 0; i < all.n; i++) {
        amp__release(all.v[i]->pending);
        all.v[i]->pending = NULL;
    }
    goto out_vec;
nomem:
    st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
out_vec:
    free(all.v);
    free(stack.v);
out_g0:
    amp__release(g0);
    amp__engine_depth--;
    return st;
}

/* ---- sum_to_shape --------------------------------------------------------------- */
amp_tensor *amp__sum_to_shape(const amp_tensor *g, int ndim, const int64_t *shape) {
    if (g->ndim == ndim && memcmp(g->shape, shape, sizeof(int64_t) * (size_t)ndim) == 0) {
        amp_tensor *c = amp__tensor_new("amp_backward", g->dtype, ndim, shape, amp__mem_current(AMP_MEM_WORKSPACE), 0);
        if (c && amp__copy_convert(c, g) != AMP_OK) {
            amp__release(c);
            return NULL;
        }
        return c;
    }
    int64_t tn = amp__numel(ndim, shape);
    double *acc = calloc((size_t)(tn ? tn : 1), sizeof *acc);
    if (!acc) return amp_error_null(AMP_ERR_NOMEM, "amp_backward: out of memory");
    /* stride of each g dim into the target (0 where broadcast) */
    int64_t tstride[AMP_MAX_DIMS] = {0}, cs[AMP_MAX_DIMS];
    amp__contig_strides(ndim, shape, cs);
    int off = g->ndim - ndim;
    for (int i = 0; i < g->ndim; i++) {
        int ti = i - off;
        tstride[i] = (ti >= 0 && shape[ti] == g->shape[i]) ? cs[ti] : 0;
    }
    bool owned = false;
    const float *pg = NULL;
    const double *pd = NULL; /* f64 gradients are summed from their double values */
    amp_tensor *gd = NULL;
    if (g->dtype == AMP_F64 && amp_tensor_is_contiguous(g)) {
        pd = amp__data(g);
    } else if (g->dtype == AMP_F64) {
        gd = amp__tensor_new("amp_backward", AMP_F64, g->ndim, g->shape, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
        if (gd && amp__copy_convert(gd, g) == AMP_OK) pd = amp__data(gd);
    } else {
        pg = amp__f32_view(g, &owned);
    }
    if (!pg && !pd) {
        amp__release(gd);
        free(acc);
        return NULL;
    }
    int64_t n = amp_tensor_numel(g);
    int64_t idx[AMP_MAX_DIMS] = {0};
    int64_t t = 0;
    for (int64_t f = 0; f < n; f++) {
        acc[t] += pd ? pd[f] : pg[f];
        for (int i = g->ndim - 1; i >= 0; i--) {
            idx[i]++;
            t += tstride[i];
            if (idx[i] < g->shape[i]) break;
            t -= tstride[i] * idx[i];
            idx[i] = 0;
        }
    }
    if (pg) amp__f32_done(g, pg, owned);
    amp__release(gd);
    amp_tensor *out = amp__tensor_new("amp_backward", g->dtype, ndim, shape, amp__mem_current(AMP_MEM_WORKSPACE), 0);
    if (out && g->dtype == AMP_F64) {
        memcpy(amp__data(out), acc, (size_t)tn * sizeof(double));
    } else if (out) {
        float *tmp = amp__ws_alloc((size_t)(tn ? tn : 1) * sizeof(float));
        if (!tmp) {
            amp__release(out);
            out = NULL;
        } else {
            for (int64_t i = 0; i < tn; i++) tmp[i] = (float)acc[i];
            amp__from_f32(out, tmp);
            amp__ws_free(tmp, (size_t)(tn ? tn : 1) * sizeof(float));
        }
    }
    free(acc);
    return out;
}

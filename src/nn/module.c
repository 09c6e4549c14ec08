/* The module mechanism: a class (vtable) plus named parameters, buffers and
 * children registered by the constructor. Everything here is reached through
 * the public API of amp/nn.h; the built-in layers (layers.c) use nothing else. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/nn.h"
#include "tensor/tensor_impl.h"

#define NAME_MAX_LEN 127

typedef struct {
    char *name;
    amp_tensor *t;
    bool persistent;
} slot;

typedef struct {
    char *name;
    amp_module *m;
} child;

typedef struct {
    slot *v;
    int n, cap;
} slot_vec;

struct amp_module {
    const amp_module_class *cls;
    atomic_int refcount;
    atomic_int owners; /* parents holding one of the references (registered as their child) */
    uint32_t magic;    /* MOD_LIVE; MOD_DEAD once freed, in debug mode (the struct is kept) */
    const amp_module_class *freed_with; /* debug mode: the class of the parent whose free freed it */
    bool training, keep_f32;
    bool has_io;
    amp_module_io io;
    slot_vec params, bufs;
    child *ch;
    int n_ch, cap_ch;
    void *data;
    /* dotted names handed out by the queries (valid while the module lives) */
    pthread_mutex_t names_lock;
    char **names;
    int n_names, cap_names;
};

/* ---- ownership and debug mode ------------------------------------------------------------------
 * A module's references: the caller's (amp_module_new, amp_module_retain)
 * and its parents' (amp_module_register_module takes the caller's). A free
 * that would drop a reference a parent holds (the caller has none left) is
 * refused in any mode, as is a second parent for a child nobody retained.
 * Debug mode (AMP_DEBUG=1, as for tensors): a freed module's struct is kept,
 * marked dead and emptied, in a quarantine of the last MOD_QUARANTINE, and
 * every public module call checks its module (mod_live), so using a module
 * after it (or its parent) was freed, or freeing it twice, is an error naming
 * the call, not a crash or a second release. */
#define MOD_LIVE 0x4c444f4du
#define MOD_DEAD 0x44414544u
#define MOD_QUARANTINE 4096

static pthread_mutex_t g_mq_mu = PTHREAD_MUTEX_INITIALIZER;
static amp_module *g_mq[MOD_QUARANTINE];
static size_t g_mq_next;

static bool mod_live(const char *fn, const amp_module *m) {
    if (!amp__debug || !m || m->magic == MOD_LIVE) return true;
    if (m->freed_with)
        amp_error(AMP_ERR_STATE, "%s: module %s %p was freed (by amp_module_free of its parent %s, which owned it) and is used "
                                 "again; amp_module_retain a child to keep it beyond its parent", fn, m->cls->name,
                  (const void *)m, m->freed_with->name);
    else
        amp_error(AMP_ERR_STATE, "%s: module %s %p was freed (by amp_module_free) and is used again", fn, m->cls->name,
                  (const void *)m);
    return false;
}

/* Debug mode: marks m dead and keeps its (emptied) struct; the oldest kept one is freed for real. */
static void bury(amp_module *m, const amp_module *parent) {
    m->magic = MOD_DEAD;
    m->freed_with = parent ? parent->cls : NULL;
    m->ch = NULL;
    m->n_ch = m->cap_ch = 0;
    memset(&m->params, 0, sizeof m->params);
    memset(&m->bufs, 0, sizeof m->bufs);
    m->names = NULL;
    m->n_names = m->cap_names = 0;
    m->data = NULL;
    pthread_mutex_lock(&g_mq_mu);
    amp_module *old = g_mq[g_mq_next % MOD_QUARANTINE];
    g_mq[g_mq_next++ % MOD_QUARANTINE] = m;
    pthread_mutex_unlock(&g_mq_mu);
    free(old);
}

amp_module *amp_module_new(const amp_module_class *cls, size_t data_size) {
    static const char *fn = "amp_module_new";
    (void)amp_debug_enabled(); /* AMP_DEBUG read before the first module too */
    if (!cls) return amp_error_null(AMP_ERR_ARG, "%s: class is NULL", fn);
    if (!cls->name || !*cls->name) return amp_error_null(AMP_ERR_ARG, "%s: the class has no name", fn);
    if (data_size > ((size_t)1 << 30))
        return amp_error_null(AMP_ERR_ARG, "%s: %s: data_size %zu is not a module's configuration (over 1 GiB)", fn,
                              cls->name, data_size);
    amp_module *m = calloc(1, sizeof *m);
    void *d = calloc(1, data_size ? data_size : 1);
    if (!m || !d) {
        free(m);
        free(d);
        return amp_error_null(AMP_ERR_NOMEM, "%s: %s: out of memory", fn, cls->name);
    }
    m->cls = cls;
    m->data = d;
    m->training = true;
    m->magic = MOD_LIVE;
    atomic_init(&m->refcount, 1);
    atomic_init(&m->owners, 0);
    pthread_mutex_init(&m->names_lock, NULL);
    return m;
}

void *amp_module_data(const amp_module *m) {
    if (!mod_live("amp_module_data", m)) return NULL;
    return m ? m->data : amp_error_null(AMP_ERR_ARG, "amp_module_data: module is NULL");
}

const amp_module_class *amp_module_class_of(const amp_module *m) {
    if (!mod_live("amp_module_class_of", m)) return NULL;
    return m ? m->cls : amp_error_null(AMP_ERR_ARG, "amp_module_class_of: module is NULL");
}

amp_module *amp_module_retain(amp_module *m) {
    if (!m) return amp_error_null(AMP_ERR_ARG, "amp_module_retain: module is NULL");
    if (!mod_live("amp_module_retain", m)) return NULL;
    atomic_fetch_add(&m->refcount, 1);
    return m;
}

static void slots_free(slot_vec *s) {
    for (int i = 0; i < s->n; i++) {
        free(s->v[i].name);
        amp__release(s->v[i].t);
    }
    free(s->v);
}

/* Drops one reference (parent: the module whose free drops it, or NULL for the caller's). */
static void release(amp_module *m, const amp_module *parent) {
    if (atomic_fetch_sub(&m->refcount, 1) != 1) return;
    if (m->cls->destroy) m->cls->destroy(m->data);
    for (int i = 0; i < m->n_ch; i++) {
        free(m->ch[i].name);
        atomic_fetch_sub(&m->ch[i].m->owners, 1);
        release(m->ch[i].m, m);
    }
    free(m->ch);
    slots_free(&m->params);
    slots_free(&m->bufs);
    for (int i = 0; i < m->n_names; i++) free(m->names[i]);
    free(m->names);
    pthread_mutex_destroy(&m->names_lock);
    free(m->data);
    if (amp__debug) bury(m, parent);
    else free(m);
}

void amp_module_free(amp_module *m) {
    static const char *fn = "amp_module_free";
    if (!m || !mod_live(fn, m)) return;
    /* every reference left is a parent's: the caller gave its own away */
    if (atomic_load(&m->refcount) <= atomic_load(&m->owners)) {
        amp_error(AMP_ERR_STATE, "%s: %s %p belongs to its parent module (registering it as a child took your reference): the "
                                 "parent frees it; amp_module_retain it to keep a reference of your own", fn, m->cls->name,
                  (void *)m);
        return;
    }
    release(m, NULL);
}

/* ---- registration ------------------------------------------------------------------------- */
static slot *slot_find(const slot_vec *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->v[i].name, name)) return &s->v[i];
    return NULL;
}

static amp_module *child_find(const amp_module *m, const char *name) {
    for (int i = 0; i < m->n_ch; i++)
        if (!strcmp(m->ch[i].name, name)) return m->ch[i].m;
    return NULL;
}

static amp_status check_name(const char *fn, const amp_module *m, const char *name) {
    if (!name) return amp_error(AMP_ERR_ARG, "%s: %s: name is NULL", fn, m->cls->name);
    size_t len = strlen(name);
    if (len == 0 || len > NAME_MAX_LEN)
        return amp_error(AMP_ERR_ARG, "%s: %s: name '%.40s' must have 1 to %d characters", fn, m->cls->name, name, NAME_MAX_LEN);
    if (strchr(name, '.')) return amp_error(AMP_ERR_ARG, "%s: %s: name '%s' must not contain '.'", fn, m->cls->name, name);
    const char *what = slot_find(&m->params, name) ? "parameter" : slot_find(&m->bufs, name) ? "buffer" : child_find(m, name) ? "child module" : NULL;
    if (what) return amp_error(AMP_ERR_ARG, "%s: %s: '%s' is already registered (as a %s)", fn, m->cls->name, name, what);
    return AMP_OK;
}

static amp_status slot_push(const char *fn, slot_vec *s, const char *name, amp_tensor *t, bool persistent) {
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 4;
        slot *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        s->v = v;
        s->cap = cap;
    }
    char *nm = strdup(name);
    if (!nm) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    s->v[s->n++] = (slot){nm, t, persistent};
    return AMP_OK;
}

/* The module takes the caller's reference: out of its scope, if any. */
static void take(amp_tensor *t) {
    if (t->scope) amp__scope_forget(t);
}

static void drop(amp_tensor *t) {
    if (!t) return;
    take(t);
    amp__release(t);
}

/* The checks registering a parameter or a buffer begin with: m live, t
 * given, name free and well formed; AMP_OK or the error. */
static amp_status check_register(const char *fn, amp_module *m, const char *name, amp_tensor *t) {
    if (!mod_live(fn, m)) return AMP_ERR_STATE;
    if (!m) return amp_error(AMP_ERR_ARG, "%s: module is NULL", fn);
    if (!t) return amp_error_chain(AMP_ERR_ARG, "%s: %s: tensor '%s' is NULL", fn, m->cls->name, name ? name : "?");
    return check_name(fn, m, name);
}

/* The end of registering or setting a parameter: t dropped when st is an
 * error (false), else taken as a parameter (requires grad, category PARAM). */
static bool adopt_param(amp_tensor *t, amp_status st) {
    if (st) {
        drop(t);
        return false;
    }
    take(t);
    t->requires_grad = true;
    amp_tensor_set_category(t, AMP_MEM_PARAM);
    return true;
}

amp_tensor *amp_module_register_parameter(amp_module *m, const char *name, amp_tensor *t) {
    static const char *fn = "amp_module_register_parameter";
    amp_status st = check_register(fn, m, name, t);
    if (st) {
    } else if (t->grad_fn)
        st = amp_error(AMP_ERR_ARG, "%s: %s: '%s' was produced by %s; a parameter must be a leaf (amp_detach it, or "
                                    "create it directly)", fn, m->cls->name, name, amp_tensor_grad_fn_name(t));
    else if (!amp_dtype_is_float(t->dtype) || (t->dtype != AMP_F32 && t->dtype != AMP_F16 && t->dtype != AMP_BF16 && t->dtype != AMP_F64))
        st = amp_error(AMP_ERR_DTYPE, "%s: %s: '%s' has dtype %s; parameters are f32, f16, bf16 or f64", fn, m->cls->name, name,
                       amp_dtype_name(t->dtype));
    else if (!amp_tensor_is_contiguous(t))
        st = amp_error(AMP_ERR_ARG, "%s: %s: '%s' is not contiguous (amp_contiguous it first)", fn, m->cls->name, name);
    else if (t->storage->borrowed)
        st = amp_error(AMP_ERR_ARG, "%s: %s: '%s' borrows user memory (amp_tensor_borrow); copy it (amp_clone) to "
                                    "make it a parameter", fn, m->cls->name, name);
    if (!st) st = slot_push(fn, &m->params, name, t, true);
    return adopt_param(t, st) ? t : NULL;
}

amp_tensor *amp_module_register_buffer(amp_module *m, const char *name, amp_tensor *t, bool persistent) {
    static const char *fn = "amp_module_register_buffer";
    amp_status st = check_register(fn, m, name, t);
    if (st) {
    } else if (t->grad_fn || t->requires_grad)
        st = amp_error(AMP_ERR_ARG, "%s: %s: buffer '%s' requires grad; register it as a parameter, or amp_detach it", fn,
                       m->cls->name, name);
    if (!st) st = slot_push(fn, &m->bufs, name, t, persistent);
    if (st) {
        drop(t);
        return NULL;
    }
    take(t);
    amp_tensor_set_category(t, AMP_MEM_PARAM);
    return t;
}

static bool contains(const amp_module *tree, const amp_module *m) {
    if (tree == m) return true;
    for (int i = 0; i < tree->n_ch; i++)
        if (contains(tree->ch[i].m, m)) return true;
    return false;
}

amp_module *amp_module_register_module(amp_module *m, const char *name, amp_module *c) {
    static const char *fn = "amp_module_register_module";
    amp_status st = AMP_OK;
    bool owned = false; /* c has no reference left to give: every one is a parent's */
    if (!m) st = amp_error(AMP_ERR_ARG, "%s: module is NULL", fn);
    else if (!c) st = amp_error_chain(AMP_ERR_ARG, "%s: %s: child '%s' is NULL", fn, m->cls->name, name ? name : "?");
    else if (!mod_live(fn, m) || !mod_live(fn, c)) return NULL;
    else if ((owned = atomic_load(&c->refcount) <= atomic_load(&c->owners)))
        st = amp_error(AMP_ERR_ARG, "%s: %s: child '%s' (%s) already belongs to a parent module; amp_module_retain it to "
                                    "register it in a second one", fn, m->cls->name, name ? name : "?", c->cls->name);
    else if ((st = check_name(fn, m, name))) {
    } else if (contains(c, m))
        st = amp_error(AMP_ERR_ARG, "%s: %s: registering '%s' would make the module its own descendant", fn, m->cls->name, name);
    if (!st && m->n_ch == m->cap_ch) {
        int cap = m->cap_ch ? m->cap_ch * 2 : 4;
        child *v = realloc(m->ch, (size_t)cap * sizeof *v);
        if (!v) st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        else {
            m->ch = v;
            m->cap_ch = cap;
        }
    }
    char *nm = st ? NULL : strdup(name);
    if (!st && !nm) st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    if (st) {
        /* takes ownership on failure too, unless it would free a module still in use by m, or the caller had
         * no reference to give */
        if (c && !owned && !(m && contains(c, m))) release(c, NULL);
        return NULL;
    }
    m->ch[m->n_ch++] = (child){nm, c};
    atomic_fetch_add(&c->owners, 1);
    return c;
}

/* Resolves "a.b.leaf": the module owning the last component and the leaf's name. */
static const amp_module *resolve(const amp_module *m, const char *name, const char **leaf) {
    const char *dot;
    while ((dot = strchr(name, '.'))) {
        char part[NAME_MAX_LEN + 1];
        size_t len = (size_t)(dot - name);
        if (len == 0 || len > NAME_MAX_LEN) return NULL;
        memcpy(part, name, len);
        part[len] = 0;
        m = child_find(m, part);
        if (!m) return NULL;
        name = dot + 1;
    }
    *leaf = name;
    return m;
}

amp_status amp_module_set_parameter(amp_module *m, const char *name, amp_tensor *t) {
    static const char *fn = "amp_module_set_parameter";
    amp_status st = AMP_OK;
    slot *s = NULL;
    const char *leaf = NULL;
    const amp_module *owner = NULL;
    if (!m || !name) st = amp_error(AMP_ERR_ARG, "%s: module or name is NULL", fn);
    else if (!mod_live(fn, m)) st = AMP_ERR_STATE;
    else if (!t) st = amp_error_chain(AMP_ERR_ARG, "%s: %s: tensor for '%s' is NULL", fn, m->cls->name, name);
    else if (!(owner = resolve(m, name, &leaf)) || !(s = slot_find(&owner->params, leaf)))
        st = amp_error(AMP_ERR_ARG, "%s: %s has no parameter '%s'", fn, m->cls->name, name);
    else if (t->grad_fn)
        st = amp_error(AMP_ERR_ARG, "%s: '%s': the tensor was produced by %s; a parameter must be a leaf", fn, name, amp_tensor_grad_fn_name(t));
    else if (t->dtype != AMP_F32 && t->dtype != AMP_F16 && t->dtype != AMP_BF16 && t->dtype != AMP_F64)
        st = amp_error(AMP_ERR_DTYPE, "%s: '%s': dtype %s; parameters are f32, f16, bf16 or f64", fn, name, amp_dtype_name(t->dtype));
    else if (!amp_tensor_is_contiguous(t) || t->storage->borrowed)
        st = amp_error(AMP_ERR_ARG, "%s: '%s': the tensor is not contiguous or borrows user memory", fn, name);
    if (!adopt_param(t, st)) return st;
    amp__release(s->t);
    s->t = t;
    return AMP_OK;
}

/* ---- access ---------------------------------------------------------------------------------- */
enum { GET_PARAMETER, GET_BUFFER, GET_CHILD };

/* The parameter, buffer or child (kind) at the dotted path name, or NULL
 * with fn's error */
static void *get_named(const char *fn, const amp_module *m, const char *name, int kind) {
    static const char *const what[] = {"parameter", "buffer", "child module"};
    if (!m || !name) return amp_error_null(AMP_ERR_ARG, "%s: module or name is NULL", fn);
    if (!mod_live(fn, m)) return NULL;
    const char *leaf;
    const amp_module *o = resolve(m, name, &leaf);
    slot *s = NULL;
    amp_module *c = NULL;
    if (o && kind == GET_CHILD) c = child_find(o, leaf);
    else if (o) s = slot_find(kind == GET_BUFFER ? &o->bufs : &o->params, leaf);
    if (!s && !c) return amp_error_null(AMP_ERR_ARG, "%s: %s has no %s '%s'", fn, m->cls->name, what[kind], name);
    return s ? (void *)s->t : (void *)c;
}

amp_tensor *amp_module_get_parameter(const amp_module *m, const char *name) {
    return get_named("amp_module_get_parameter", m, name, GET_PARAMETER);
}

amp_tensor *amp_module_get_buffer(const amp_module *m, const char *name) {
    return get_named("amp_module_get_buffer", m, name, GET_BUFFER);
}

amp_module *amp_module_get_child(const amp_module *m, const char *name) {
    return get_named("amp_module_get_child", m, name, GET_CHILD);
}

int amp_module_num_children(const amp_module *m) {
    if (!m) return amp_error_neg(AMP_ERR_ARG, "amp_module_num_children: module is NULL");
    return mod_live("amp_module_num_children", m) ? m->n_ch : -1;
}

amp_module *amp_module_child_at(const amp_module *m, int i, const char **name) {
    if (!mod_live("amp_module_child_at", m)) return NULL;
    if (!m || i < 0 || i >= m->n_ch)
        return amp_error_null(AMP_ERR_ARG, "amp_module_child_at: module is NULL or index %d is out of range", i);
    if (name) *name = m->ch[i].name;
    return m->ch[i].m;
}

const char *amp_module_kind(const amp_module *m) { return m ? m->cls->name : "(null)"; }
/* eval scopes open on this thread (amp_module_eval_begin): inside one every
 * module answers "not training" here, and its flag is never written, so
 * threads sharing a model can each run it in eval semantics while the model
 * stays in training mode */
static _Thread_local int g_eval_depth;
void amp_module_eval_begin(void) { g_eval_depth++; }
void amp_module_eval_end(void) {
    if (g_eval_depth > 0) g_eval_depth--;
}
bool amp_module_is_training(const amp_module *m) {
    return m && mod_live("amp_module_is_training", m) && m->training && g_eval_depth == 0;
}
bool amp_module_is_kept_f32(const amp_module *m) { return m && mod_live("amp_module_is_kept_f32", m) && m->keep_f32; }

void amp_module_train(amp_module *m, bool training) {
    if (!m || !mod_live("amp_module_train", m)) return;
    m->training = training;
    for (int i = 0; i < m->n_ch; i++) amp_module_train(m->ch[i].m, training);
}

void amp_module_keep_f32(amp_module *m, bool keep) {
    if (!m || !mod_live("amp_module_keep_f32", m)) return;
    m->keep_f32 = keep;
    for (int i = 0; i < m->n_ch; i++) amp_module_keep_f32(m->ch[i].m, keep);
}

/* ---- forward ------------------------------------------------------------------------------ */
static _Thread_local int g_fwd_depth; /* nested forwards (children) */

static amp_tensor *call_forward(amp_module *m, amp_tensor *const *xs, int n) {
    if (m->cls->forward_n) return m->cls->forward_n(m, xs, n);
    if (!m->cls->forward)
        return amp_error_null(AMP_ERR_UNSUPPORTED, "amp_module_forward: %s has no forward (a container: call its children)",
                              m->cls->name);
    if (n != 1)
        return amp_error_null(AMP_ERR_ARG, "amp_module_forward_n: %s takes one input (got %d)", m->cls->name, n);
    return m->cls->forward(m, xs[0]);
}

static amp_tensor *forward_body(amp_module *m, amp_tensor *const *xs, int n) {
    if (!m->keep_f32) return call_forward(m, xs, n);
    /* kept in f32: no autocast inside, half inputs widened to f32, the result
     * back in the first input's dtype when that was half */
    amp_autocast_opts off = AMP_AUTOCAST_OPTS(AMP_F16);
    off.enabled = false;
    if (amp_autocast_enter_opts(&off) != AMP_OK) return NULL;
    const bool half_io = (m->cls->flags & AMP_MODULE_HALF_IO) != 0; /* computes in f32 from half inputs itself */
    amp_tensor *local[8], **xf = n <= 8 ? local : calloc((size_t)n, sizeof *xf);
    amp_tensor *y = NULL;
    if (xf) {
        bool ok = true;
        for (int i = 0; i < n && ok; i++) {
            xf[i] = !half_io && xs[i] && amp_dtype_is_half(xs[i]->dtype) ? amp_to(xs[i], AMP_F32) : xs[i];
            ok = !xs[i] || xf[i];
        }
        if (ok) y = call_forward(m, xf, n);
        if (xf != local) free(xf);
    } else {
        amp_error(AMP_ERR_NOMEM, "amp_module_forward: out of memory");
    }
    amp_autocast_exit();
    if (y && !half_io && n > 0 && xs[0] && y->dtype == AMP_F32 && amp_dtype_is_half(xs[0]->dtype)) y = amp_to(y, xs[0]->dtype);
    return y;
}

static bool io_castable(const amp_tensor *t, amp_dtype to) {
    return to != AMP_DTYPE_COUNT && t && t->dtype != to &&
           (t->dtype == AMP_F32 || t->dtype == AMP_F16 || t->dtype == AMP_BF16 || t->dtype == AMP_F64);
}

/* The module's io settings around its forward (amp_module_set_io). */
static amp_tensor *forward_io(amp_module *m, amp_tensor *const *xs, int n) {
    if (!m->has_io) return forward_body(m, xs, n);
    const amp_module_io *io = &m->io;
    amp_tensor *local[8], **xc = n <= 8 ? local : calloc((size_t)n, sizeof *xc);
    if (!xc) return amp_error_null(AMP_ERR_NOMEM, "amp_module_forward: out of memory");
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        xc[i] = io_castable(xs[i], io->input) ? amp_to(xs[i], io->input) : xs[i];
        ok = xc[i] != NULL;
    }
    amp_tensor *y = NULL;
    if (ok && io->autocast) {
        if (amp_autocast_enter(io->autocast_dtype) == AMP_OK) {
            y = forward_body(m, xc, n);
            amp_autocast_exit();
        }
    } else if (ok) {
        y = forward_body(m, xc, n);
    }
    if (xc != local) free(xc);
    if (y && io_castable(y, io->output)) y = amp_to(y, io->output);
    return y;
}

amp_status amp_module_set_io(amp_module *m, const amp_module_io *io) {
    static const char *fn = "amp_module_set_io";
    if (!m) return amp_error(AMP_ERR_ARG, "%s: module is NULL", fn);
    if (!mod_live(fn, m)) return AMP_ERR_STATE;
    if (!io) {
        m->has_io = false;
        return AMP_OK;
    }
    amp_dtype ds[2] = {io->input, io->output};
    for (int i = 0; i < 2; i++)
        if (ds[i] != AMP_DTYPE_COUNT && ds[i] != AMP_F32 && ds[i] != AMP_F16 && ds[i] != AMP_BF16 && ds[i] != AMP_F64)
            return amp_error(AMP_ERR_DTYPE, "%s: %s dtype %s is not f32, f16, bf16, f64 or AMP_DTYPE_COUNT (as is)", fn,
                             i ? "output" : "input", amp_dtype_name(ds[i]));
    if (io->autocast && io->autocast_dtype != AMP_F16 && io->autocast_dtype != AMP_BF16)
        return amp_error(AMP_ERR_DTYPE, "%s: autocast dtype %s is not f16 or bf16", fn, amp_dtype_name(io->autocast_dtype));
    m->io = *io;
    m->has_io = true;
    return AMP_OK;
}

bool amp_module_get_io(const amp_module *m, amp_module_io *io) {
    if (!m || !mod_live("amp_module_get_io", m) || !m->has_io) return false;
    if (io) *io = m->io;
    return true;
}

static amp_tensor *forward_entry(const char *fn, amp_module *m, amp_tensor *const *xs, int n) {
    if (!m) return amp_error_null(AMP_ERR_ARG, "%s: module is NULL", fn);
    if (!mod_live(fn, m)) return NULL;
    if (n < 1 || !xs) return amp_error_null(AMP_ERR_ARG, "%s: %s: no inputs (n = %d)", fn, m->cls->name, n);
    for (int i = 0; i < n; i++)
        if (!xs[i])
            return amp_error_chain_null(AMP_ERR_ARG, "%s: %s input %d is NULL", fn, m->cls->name, i);
    for (int i = 0; i < n; i++)
        if (!amp__live(fn, xs[i])) return NULL;
    /* The outermost forward runs in a scope of its own, so it frees what it
     * does not return even when the caller has no scope (issue 12: an mlp
     * forward outside a scope left ~24 KB of intermediates nobody could
     * free). What backward needs stays alive through the graph; the output
     * goes to the caller's scope, or to the caller when there is none. */
    amp_scope *own = g_fwd_depth == 0 ? amp_scope_begin() : NULL;
    g_fwd_depth++;
    amp_tensor *y = forward_io(m, xs, n);
    g_fwd_depth--;
    if (own) {
        bool mine = y && y->scope == own;
        if (mine) amp__scope_forget(y);
        amp_status keep_st = amp_last_status();
        char keep_msg[1024];
        snprintf(keep_msg, sizeof keep_msg, "%s", amp_last_error());
        amp_scope_end(own);
        if (keep_st != AMP_OK) amp_error(keep_st, "%s", keep_msg); /* the forward's own error stays the last one */
        else amp_clear_error();
        if (mine) amp__scope_register(y);
    }
    /* an op's error inside names the op; the outermost forward names itself too, after it */
    if (!y && g_fwd_depth == 0 && !strstr(amp_last_error(), fn))
        amp_error_chain(amp_last_status() ? amp_last_status() : AMP_ERR_ARG, "%s: %s", fn, m->cls->name);
    return y;
}

amp_tensor *amp_module_forward(amp_module *m, amp_tensor *x) {
    if (m && !x && mod_live("amp_module_forward", m)) return amp_error_chain_null(AMP_ERR_ARG, "amp_module_forward: %s input is NULL", m->cls->name);
    return forward_entry("amp_module_forward", m, &x, 1);
}

amp_tensor *amp_module_forward_n(amp_module *m, amp_tensor *const *xs, int n) {
    return forward_entry("amp_module_forward_n", m, xs, n);
}

/* ---- parameters and state -------------------------------------------------------------------- */
enum { W_PARAMS = 1, W_BUFFERS = 2, W_STATE = 4 };

typedef struct {
    amp_tensor **out;
    const char **names;
    int max, n;
    amp_module *root;
    unsigned what;
    bool oom;
    /* tensors already listed (for the unique walks) */
    amp_tensor **seen;
    int n_seen, cap_seen;
} walk;

/* A stable copy of a dotted name, owned by the root (caller holds names_lock). */
static const char *intern(walk *w, const char *buf) {
    amp_module *r = w->root;
    for (int i = 0; i < r->n_names; i++)
        if (!strcmp(r->names[i], buf)) return r->names[i];
    if (r->n_names == r->cap_names) {
        int cap = r->cap_names ? r->cap_names * 2 : 16;
        char **nn = realloc(r->names, (size_t)cap * sizeof *nn);
        if (!nn) return NULL;
        r->names = nn;
        r->cap_names = cap;
    }
    char *s = strdup(buf);
    if (!s) return NULL;
    r->names[r->n_names++] = s;
    return s;
}

static bool seen_before(walk *w, amp_tensor *t) {
    for (int i = 0; i < w->n_seen; i++)
        if (w->seen[i] == t) return true;
    if (w->n_seen == w->cap_seen) {
        int cap = w->cap_seen ? w->cap_seen * 2 : 32;
        amp_tensor **p = realloc(w->seen, (size_t)cap * sizeof *p);
        if (!p) {
            w->oom = true;
            return false;
        }
        w->seen = p;
        w->cap_seen = cap;
    }
    w->seen[w->n_seen++] = t;
    return false;
}

static void emit(walk *w, const char *prefix, const char *leaf, amp_tensor *t, bool unique) {
    if (unique && seen_before(w, t)) return;
    if (w->out && w->n < w->max) w->out[w->n] = t;
    if (w->names && w->n < w->max) {
        char buf[4096];
        snprintf(buf, sizeof buf, "%s%s", prefix, leaf);
        const char *s = intern(w, buf);
        if (!s) w->oom = true;
        w->names[w->n] = s;
    }
    w->n++;
}

static void walk_module(walk *w, amp_module *m, const char *prefix) {
    if (w->what & (W_PARAMS | W_STATE))
        for (int i = 0; i < m->params.n; i++) emit(w, prefix, m->params.v[i].name, m->params.v[i].t, !(w->what & W_STATE));
    if (w->what & (W_BUFFERS | W_STATE))
        for (int i = 0; i < m->bufs.n; i++)
            if (m->bufs.v[i].persistent || !(w->what & W_STATE)) emit(w, prefix, m->bufs.v[i].name, m->bufs.v[i].t, !(w->what & W_STATE));
    for (int i = 0; i < m->n_ch; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s%s.", prefix, m->ch[i].name);
        walk_module(w, m->ch[i].m, p);
    }
}

static int collect(const char *fn, amp_module *m, amp_tensor **out, const char **names, int max, unsigned what) {
    if (!m) {
        amp_error(AMP_ERR_ARG, "%s: module is NULL", fn);
        return -1;
    }
    if (!mod_live(fn, m)) return -1;
    if (max < 0) max = 0;
    walk w = {out, names, max, 0, m, what, false, NULL, 0, 0};
    pthread_mutex_lock(&m->names_lock);
    walk_module(&w, m, "");
    pthread_mutex_unlock(&m->names_lock);
    free(w.seen);
    if (w.oom) {
        amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        return -1;
    }
    return w.n;
}

int amp_module_parameters(amp_module *m, amp_tensor **params, const char **names, int max) {
    return collect("amp_module_parameters", m, params, names, max, W_PARAMS);
}

int amp_module_buffers(amp_module *m, amp_tensor **buffers, const char **names, int max) {
    return collect("amp_module_buffers", m, buffers, names, max, W_BUFFERS);
}

int amp_module_state(amp_module *m, amp_tensor **tensors, const char **names, int max) {
    return collect("amp_module_state", m, tensors, names, max, W_STATE);
}

/* Runs f on every parameter (once each) of m's tree. */
static amp_status for_each_param(const char *fn, amp_module *m, amp_status (*f)(amp_tensor *, void *), void *arg) {
    int n = collect(fn, m, NULL, NULL, 0, W_PARAMS);
    if (n < 0) return amp_last_status();
    amp_tensor **ps = calloc((size_t)(n ? n : 1), sizeof *ps);
    if (!ps) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    collect(fn, m, ps, NULL, n, W_PARAMS);
    amp_status st = AMP_OK;
    for (int i = 0; i < n && !st; i++) st = f(ps[i], arg);
    free(ps);
    return st;
}

static amp_status count_numel(amp_tensor *t, void *arg) {
    *(int64_t *)arg += amp_tensor_numel(t);
    return AMP_OK;
}

int64_t amp_module_num_params(amp_module *m) {
    int64_t total = 0;
    if (!m) {
        amp_error(AMP_ERR_ARG, "amp_module_num_params: module is NULL");
        return 0;
    }
    if (!mod_live("amp_module_num_params", m)) return 0;
    if (for_each_param("amp_module_num_params", m, count_numel, &total)) return 0;
    return total;
}

static amp_status clear_grad(amp_tensor *t, void *arg) {
    (void)arg;
    return amp_tensor_set_grad(t, NULL);
}

amp_status amp_module_zero_grad(amp_module *m) {
    if (!m) return amp_error(AMP_ERR_ARG, "amp_module_zero_grad: module is NULL");
    if (!mod_live("amp_module_zero_grad", m)) return AMP_ERR_STATE;
    return for_each_param("amp_module_zero_grad", m, clear_grad, NULL);
}

/* ---- dtype ------------------------------------------------------------------------------------ */
static amp_status retype(amp_tensor *t, amp_dtype dt) {
    if (!t || t->dtype == dt || !amp_dtype_is_float(t->dtype)) return AMP_OK;
    return amp__tensor_change_dtype(t, dt);
}

amp_status amp_module_to(amp_module *m, amp_dtype dt, bool keep_norm_f32) {
    if (!m) return amp_error(AMP_ERR_ARG, "amp_module_to: module is NULL");
    if (!mod_live("amp_module_to", m)) return AMP_ERR_STATE;
    if (dt != AMP_F32 && dt != AMP_F16 && dt != AMP_BF16)
        return amp_error(AMP_ERR_DTYPE, "amp_module_to: dtype %s is not f32, f16 or bf16", amp_dtype_name(dt));
    bool norm = (m->cls->flags & AMP_MODULE_NORM) != 0;
    amp_dtype pdt = dt;
    if (keep_norm_f32 && norm) {
        m->keep_f32 = true;
        pdt = AMP_F32;
    }
    amp_status st = AMP_OK;
    for (int i = 0; i < m->params.n && !st; i++) st = retype(m->params.v[i].t, pdt);
    /* a norm's buffers (running statistics) keep their dtype: amp's batch norm
     * reads and writes them in f32 whatever the parameters are */
    for (int i = 0; i < m->bufs.n && !st && !norm; i++) st = retype(m->bufs.v[i].t, pdt);
    for (int i = 0; i < m->n_ch && !st; i++) st = amp_module_to(m->ch[i].m, dt, keep_norm_f32);
    return st;
}

amp_status amp_module_to_device(amp_module *m, amp_device d) {
    if (!m) return amp_error(AMP_ERR_ARG, "amp_module_to_device: module is NULL");
    if (!mod_live("amp_module_to_device", m)) return AMP_ERR_STATE;
    if ((int)d < 0 || d >= AMP_DEVICE_COUNT) return amp_error(AMP_ERR_ARG, "amp_module_to_device: device %d is not valid", (int)d);
    amp_status st = AMP_OK;
    for (int i = 0; i < m->params.n && !st; i++)
        if (m->params.v[i].t) st = amp_tensor_move_(m->params.v[i].t, d);
    for (int i = 0; i < m->bufs.n && !st; i++)
        if (m->bufs.v[i].t) st = amp_tensor_move_(m->bufs.v[i].t, d);
    for (int i = 0; i < m->n_ch && !st; i++) st = amp_module_to_device(m->ch[i].m, d);
    return st;
}

/* ---- printing ----------------------------------------------------------------------------------- */
/* torch's Module.__repr__: one extra line alone stays on the first line;
 * with children, the extra lines and the children go on lines of their own */
static bool print_rec(const amp_module *m, FILE *f, int indent) {
    char extra[512] = "";
    if (m->cls->extra_repr) m->cls->extra_repr(m, extra, sizeof extra);
    if (fprintf(f, "%s(", m->cls->name) < 0) return false;
    if (!m->n_ch) return fprintf(f, "%s)", extra) >= 0;
    if (*extra && fprintf(f, "\n%*s%s", indent + 2, "", extra) < 0) return false;
    for (int i = 0; i < m->n_ch; i++) {
        if (fprintf(f, "\n%*s(%s): ", indent + 2, "", m->ch[i].name) < 0) return false;
        if (!print_rec(m->ch[i].m, f, indent + 2)) return false;
    }
    return fprintf(f, "\n%*s)", indent, "") >= 0;
}

amp_status amp_module_print(const amp_module *m, FILE *f) {
    if (!m || !f) return amp_error(AMP_ERR_ARG, "amp_module_print: module or file is NULL");
    if (!mod_live("amp_module_print", m)) return AMP_ERR_STATE;
    if (!print_rec(m, f, 0) || fputc('\n', f) == EOF) return amp_error(AMP_ERR_IO, "amp_module_print: write failed");
    return AMP_OK;
}

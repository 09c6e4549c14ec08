/* Scopes: every tensor created on a thread inside a scope is released when
 * the scope ends, unless the caller kept it. Per thread, nested. */
#include <stdlib.h>

#include "tensor/tensor_impl.h"

struct amp_scope {
    amp_tensor **items;
    int64_t n, cap;
    amp_scope *parent;
    int autocast_depth; /* at amp_scope_begin: a region left open inside is reported at the end */
};

static _Thread_local amp_scope *g_top;
_Thread_local void (*amp__autocast_unwind)(int depth);
_Thread_local int amp__autocast_depth;

amp_scope *amp_scope_begin(void) {
    amp_scope *s = calloc(1, sizeof *s);
    if (!s) return amp_error_null(AMP_ERR_NOMEM, "amp_scope_begin: out of memory");
    s->parent = g_top;
    s->autocast_depth = amp__autocast_depth;
    g_top = s;
    return s;
}

void amp__scope_register(amp_tensor *t) {
    amp_scope *s = g_top;
    if (!s || amp__engine_depth > 0) return;
    if (s->n == s->cap) {
        int64_t cap = s->cap ? s->cap * 2 : 64;
        amp_tensor **it = realloc(s->items, (size_t)cap * sizeof *it);
        if (!it) return; /* caller keeps ownership; reported as a leak, never a crash */
        s->items = it;
        s->cap = cap;
    }
    t->scope = s;
    t->scope_slot = s->n;
    s->items[s->n++] = t;
}

void amp__scope_forget(amp_tensor *t) {
    amp_scope *s = t->scope;
    if (!s) return;
    if (t->scope_slot >= 0 && t->scope_slot < s->n && s->items[t->scope_slot] == t) s->items[t->scope_slot] = NULL;
    t->scope = NULL;
    t->scope_slot = -1;
}

amp_status amp_scope_end(amp_scope *s) {
    if (!s) return amp_error(AMP_ERR_ARG, "amp_scope_end: s is NULL");
    if (s != g_top) {
        return amp_error(AMP_ERR_STATE, "amp_scope_end: scope %p is not the innermost open scope on this thread "
                                        "(end inner scopes first)", (void *)s);
    }
    /* Release in reverse creation order: outputs before the inputs they use. */
    const char *outer = amp__freer;
    amp__freer = "amp_scope_end";
    for (int64_t i = s->n - 1; i >= 0; i--) {
        amp_tensor *t = s->items[i];
        if (!t) continue;
        t->scope = NULL;
        t->scope_slot = -1;
        amp__release(t);
    }
    amp__freer = outer;
    g_top = s->parent;
    int began = s->autocast_depth, now = amp__autocast_depth;
    free(s->items);
    free(s);
    /* An amp_autocast_enter without its exit inside the scope: every later
     * iteration would nest one more region (training stalled at 64 with
     * errors nobody read). Close what was left open and say so. */
    if (now != began) {
        if (now > began && amp__autocast_unwind) amp__autocast_unwind(began);
        return amp_error(AMP_ERR_STATE, "amp_scope_end: the autocast depth changed inside this scope (%d when it began, %d at its "
                                        "end): an amp_autocast_enter without its amp_autocast_exit%s",
                         began, now, now > began ? " (the regions left open were closed)" : " (or an exit of a region opened before it)");
    }
    return AMP_OK;
}

amp_tensor *amp_scope_end_keep(amp_scope *s, amp_tensor *t) {
    if (t && !amp__live("amp_scope_end_keep", t)) return NULL;
    if (!s) {
        amp_error(AMP_ERR_ARG, "amp_scope_end_keep: s is NULL");
        return NULL;
    }
    if (s != g_top) {
        amp_error(AMP_ERR_STATE, "amp_scope_end_keep: scope %p is not the innermost open scope on this thread "
                                 "(end inner scopes first)", (void *)s);
        return NULL;
    }
    bool moved = t && t->scope == s;
    if (moved) amp__scope_forget(t);
    amp_scope_end(s);
    if (moved) amp__scope_register(t); /* into the enclosing scope, or the caller's with none */
    return t;
}

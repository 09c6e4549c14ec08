/* The buffer journal: the old contents of buffers that a forward changed in
 * place (BatchNorm's running statistics and batch count), kept until the
 * GradScaler decides the step: amp_scaler_update commits them (forgets the
 * old contents) after a clean step and rolls them back after a skipped one,
 * so a skipped step leaves every buffer as it was. Per thread; recording
 * happens only on a thread that has created a live scaler (the forwards and
 * the scaler's update run on one thread, as in every training loop). */
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor_impl.h"

typedef struct {
    amp_tensor *t;    /* retained */
    void *old;        /* contiguous copy of t's elements before the first change */
    size_t nbytes;
    uint64_t version; /* t's version when recorded ... */
    uint64_t writes;  /* ... and the journaled changes since (each bumps it once) */
} journal_entry;

static _Thread_local journal_entry *g_j;
static _Thread_local size_t g_jn, g_jcap;
static _Thread_local int g_armed;

void amp__journal_arm(void) { g_armed++; }

void amp__journal_disarm(void) {
    if (g_armed > 0) g_armed--;
    if (g_armed == 0) amp__journal_commit();
}

/* A same-shape contiguous tensor struct over buf (no ownership). */
static amp_tensor flat_over(const amp_tensor *t, void *buf, amp_storage *st) {
    amp_tensor tmp;
    memset(&tmp, 0, sizeof tmp);
    memset(st, 0, sizeof *st);
    st->data = buf;
    tmp.dtype = t->dtype;
    tmp.storage = st;
    tmp.ndim = t->ndim;
    memcpy(tmp.shape, t->shape, sizeof tmp.shape);
    amp__contig_strides(t->ndim, tmp.shape, tmp.stride);
    return tmp;
}

void amp__journal_record(amp_tensor *t) {
    if (!g_armed || !t) return;
    for (size_t i = 0; i < g_jn; i++)
        if (g_j[i].t == t) {
            g_j[i].writes++;
            return;
        }
    if (g_jn == g_jcap) {
        size_t cap = g_jcap ? g_jcap * 2 : 16;
        journal_entry *p = realloc(g_j, cap * sizeof *p);
        if (!p) return; /* out of memory: this change is not undoable (never a crash) */
        g_j = p;
        g_jcap = cap;
    }
    size_t nbytes = (size_t)amp__numel(t->ndim, t->shape) * amp_dtype_size(t->dtype);
    void *old = malloc(nbytes ? nbytes : 1);
    if (!old) return;
    amp_storage st;
    amp_tensor dst = flat_over(t, old, &st);
    if (amp__copy_convert(&dst, t) != AMP_OK) {
        free(old);
        return;
    }
    g_j[g_jn++] = (journal_entry){amp_tensor_retain(t), old, nbytes, amp__version(t), 1};
}

size_t amp__journal_size(void) { return g_jn; }

void amp__journal_commit(void) {
    for (size_t i = 0; i < g_jn; i++) {
        amp__release(g_j[i].t);
        free(g_j[i].old);
    }
    free(g_j);
    g_j = NULL;
    g_jn = g_jcap = 0;
}

void amp__journal_rollback(void) {
    /* newest first, in case one tensor's storage is shared with another's */
    for (size_t i = g_jn; i-- > 0;) {
        journal_entry *e = &g_j[i];
        /* changed by someone else since (a checkpoint restore): that value wins */
        if (amp__version(e->t) != e->version + e->writes) continue;
        amp_storage st;
        amp_tensor src = flat_over(e->t, e->old, &st);
        if (amp__copy_convert(e->t, &src) == AMP_OK) amp__bump_version(e->t);
    }
    amp__journal_commit();
}

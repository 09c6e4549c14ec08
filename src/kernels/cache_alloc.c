/* The caching allocator (cache_alloc.h). Blocks of a segment form a
 * doubly-linked list in address order; free blocks of each pool are kept in
 * an array sorted by (size, address), searched by bisection. Lookups of
 * in-use blocks by pointer go through an open-addressing hash table. */
#include "kernels/cache_alloc.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define ROUND 512u
#define SMALL_MAX ((size_t)1 << 20)      /* requests up to 1 MiB: small pool */
#define SMALL_SEG ((size_t)2 << 20)      /* small pool segments */
#define MID_MAX ((size_t)10 << 20)       /* large requests below 10 MiB ... */
#define MID_SEG ((size_t)20 << 20)       /* ... share 20 MiB segments */
#define LARGE_ROUND ((size_t)2 << 20)
#define LARGE_SPLIT_MIN ((size_t)1 << 20)

typedef struct block {
    char *ptr;
    size_t size;
    bool in_use;
    int pool; /* 0 small, 1 large */
    struct block *prev, *next; /* neighbours in the segment */
    struct segment *seg;
} block;

typedef struct segment {
    char *base;
    size_t size;
    struct segment *prev, *next;
    struct block *first; /* the block at base: splits keep it first and merges never free it */
} segment;

typedef struct {
    block **v;
    size_t n, cap;
} blockset;

struct amp_cache_alloc {
    amp_cache_backing b;
    pthread_mutex_t mu;
    blockset free_[2];
    segment *segs;
    /* in-use blocks by pointer */
    block **tab;
    size_t tab_cap, tab_n, tab_tomb;
    amp_cache_stats st;
};

static block *const TOMB = (block *)1;

size_t amp_cache_round(size_t size) {
    if (size == 0) return ROUND;
    if (size > SIZE_MAX - ROUND) return 0;
    return (size + ROUND - 1) / ROUND * ROUND;
}

/* ---- the sorted free sets ---------------------------------------------------- */
static int cmp_block(const block *a, size_t size, const char *ptr) {
    if (a->size != size) return a->size < size ? -1 : 1;
    if (a->ptr != ptr) return a->ptr < ptr ? -1 : 1;
    return 0;
}

/* first index whose block is >= (size, ptr) */
static size_t lower_bound(const blockset *s, size_t size, const char *ptr) {
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_block(s->v[mid], size, ptr) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static bool set_insert(blockset *s, block *b) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        block **v = realloc(s->v, cap * sizeof *v);
        if (!v) return false;
        s->v = v;
        s->cap = cap;
    }
    size_t i = lower_bound(s, b->size, b->ptr);
    memmove(s->v + i + 1, s->v + i, (s->n - i) * sizeof *s->v);
    s->v[i] = b;
    s->n++;
    return true;
}

static void set_remove(blockset *s, block *b) {
    size_t i = lower_bound(s, b->size, b->ptr);
    if (i < s->n && s->v[i] == b) {
        memmove(s->v + i, s->v + i + 1, (s->n - i - 1) * sizeof *s->v);
        s->n--;
    }
}

/* ---- the in-use table ---------------------------------------------------------- */
static size_t hash_ptr(const void *p, size_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static bool tab_grow(amp_cache_alloc *a) {
    size_t cap = a->tab_cap ? a->tab_cap * 2 : 1024;
    block **t = calloc(cap, sizeof *t);
    if (!t) return false;
    for (size_t i = 0; i < a->tab_cap; i++) {
        block *b = a->tab[i];
        if (!b || b == TOMB) continue;
        size_t h = hash_ptr(b->ptr, cap);
        while (t[h]) h = (h + 1) & (cap - 1);
        t[h] = b;
    }
    free(a->tab);
    a->tab = t;
    a->tab_cap = cap;
    a->tab_tomb = 0;
    return true;
}

static bool tab_put(amp_cache_alloc *a, block *b) {
    if ((a->tab_n + a->tab_tomb + 1) * 2 > a->tab_cap && !tab_grow(a)) return false;
    size_t h = hash_ptr(b->ptr, a->tab_cap);
    while (a->tab[h] && a->tab[h] != TOMB) h = (h + 1) & (a->tab_cap - 1);
    if (a->tab[h] == TOMB) a->tab_tomb--;
    a->tab[h] = b;
    a->tab_n++;
    return true;
}

static block *tab_take(amp_cache_alloc *a, const void *p) {
    if (!a->tab_cap) return NULL;
    size_t h = hash_ptr(p, a->tab_cap);
    while (a->tab[h]) {
        if (a->tab[h] != TOMB && a->tab[h]->ptr == p) {
            block *b = a->tab[h];
            a->tab[h] = TOMB;
            a->tab_n--;
            a->tab_tomb++;
            return b;
        }
        h = (h + 1) & (a->tab_cap - 1);
    }
    return NULL;
}

/* ---- segments -------------------------------------------------------------------- */
static void seg_free(amp_cache_alloc *a, segment *s) {
    if (s->prev) s->prev->next = s->next;
    else a->segs = s->next;
    if (s->next) s->next->prev = s->prev;
    a->b.raw_free(a->b.ctx, s->base, s->size);
    a->st.reserved -= s->size;
    a->st.raw_frees++;
    a->st.segments--;
    free(s);
}

/* segments whose one block is free go back */
static size_t empty_locked(amp_cache_alloc *a) {
    size_t freed = 0;
    for (int pool = 0; pool < 2; pool++) {
        blockset *fs = &a->free_[pool];
        for (size_t i = 0; i < fs->n;) {
            block *b = fs->v[i];
            if (!b->prev && !b->next && b->size == b->seg->size) {
                memmove(fs->v + i, fs->v + i + 1, (fs->n - i - 1) * sizeof *fs->v);
                fs->n--;
                freed += b->seg->size;
                seg_free(a, b->seg);
                free(b);
                continue;
            }
            i++;
        }
    }
    return freed;
}

amp_cache_alloc *amp_cache_alloc_new(amp_cache_backing b) {
    if (!b.raw_alloc || !b.raw_free) return NULL;
    amp_cache_alloc *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->b = b;
    pthread_mutex_init(&a->mu, NULL);
    return a;
}

void amp_cache_alloc_free(amp_cache_alloc *a) {
    if (!a) return;
    segment *s = a->segs;
    while (s) {
        segment *next = s->next;
        for (block *b = s->first; b;) { /* the segment's blocks, in address order */
            block *nb = b->next;
            free(b);
            b = nb;
        }
        a->b.raw_free(a->b.ctx, s->base, s->size);
        free(s);
        s = next;
    }
    for (int pool = 0; pool < 2; pool++) free(a->free_[pool].v);
    free(a->tab);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* ---- allocation ---------------------------------------------------------------------- */
static size_t segment_size(size_t rounded) {
    if (rounded <= SMALL_MAX) return SMALL_SEG;
    if (rounded < MID_MAX) return MID_SEG;
    return (rounded + LARGE_ROUND - 1) / LARGE_ROUND * LARGE_ROUND;
}

static block *find_free(amp_cache_alloc *a, int pool, size_t size) {
    blockset *fs = &a->free_[pool];
    size_t i = lower_bound(fs, size, NULL);
    if (i >= fs->n) return NULL;
    return fs->v[i];
}

static block *new_segment(amp_cache_alloc *a, int pool, size_t size) {
    size_t ss = segment_size(size);
    if (ss < size) return NULL;
    void *p = a->b.raw_alloc(a->b.ctx, ss);
    if (!p) {
        a->st.raw_failures++;
        empty_locked(a);
        p = a->b.raw_alloc(a->b.ctx, ss);
        if (!p) return NULL;
    }
    segment *s = calloc(1, sizeof *s);
    block *b = calloc(1, sizeof *b);
    if (!s || !b) {
        free(s);
        free(b);
        a->b.raw_free(a->b.ctx, p, ss);
        return NULL;
    }
    s->base = p;
    s->size = ss;
    s->next = a->segs;
    if (a->segs) a->segs->prev = s;
    a->segs = s;
    b->ptr = p;
    b->size = ss;
    b->pool = pool;
    b->seg = s;
    s->first = b;
    a->st.reserved += ss;
    if (a->st.reserved > a->st.peak_reserved) a->st.peak_reserved = a->st.reserved;
    a->st.raw_allocs++;
    a->st.segments++;
    return b;
}

void *amp_cache_malloc(amp_cache_alloc *a, size_t size) {
    size_t r = amp_cache_round(size);
    if (!a || r == 0) return NULL;
    int pool = r <= SMALL_MAX ? 0 : 1;
    pthread_mutex_lock(&a->mu);
    block *b = find_free(a, pool, r);
    if (b) {
        set_remove(&a->free_[pool], b);
    } else {
        b = new_segment(a, pool, r);
        if (!b) {
            pthread_mutex_unlock(&a->mu);
            return NULL;
        }
    }
    size_t rest = b->size - r;
    if (rest >= (pool == 0 ? ROUND : LARGE_SPLIT_MIN)) {
        block *nb = calloc(1, sizeof *nb);
        if (nb) {
            nb->ptr = b->ptr + r;
            nb->size = rest;
            nb->pool = pool;
            nb->seg = b->seg;
            nb->prev = b;
            nb->next = b->next;
            if (b->next) b->next->prev = nb;
            b->next = nb;
            b->size = r;
            if (!set_insert(&a->free_[pool], nb)) { /* keep it attached: merged back at free */
                b->size += rest;
                b->next = nb->next;
                if (nb->next) nb->next->prev = b;
                free(nb);
            }
        }
    }
    b->in_use = true;
    if (!tab_put(a, b)) {
        b->in_use = false;
        set_insert(&a->free_[pool], b);
        pthread_mutex_unlock(&a->mu);
        return NULL;
    }
    a->st.allocated += b->size;
    a->st.blocks_in_use++;
    pthread_mutex_unlock(&a->mu);
    return b->ptr;
}

void amp_cache_release(amp_cache_alloc *a, void *p) {
    if (!a || !p) return;
    pthread_mutex_lock(&a->mu);
    block *b = tab_take(a, p);
    if (!b) {
        pthread_mutex_unlock(&a->mu);
        return;
    }
    b->in_use = false;
    a->st.allocated -= b->size;
    a->st.blocks_in_use--;
    blockset *fs = &a->free_[b->pool];
    /* merge with free neighbours */
    block *pv = b->prev, *nx = b->next;
    if (pv && !pv->in_use) {
        set_remove(fs, pv);
        pv->size += b->size;
        pv->next = nx;
        if (nx) nx->prev = pv;
        free(b);
        b = pv;
    }
    nx = b->next;
    if (nx && !nx->in_use) {
        set_remove(fs, nx);
        b->size += nx->size;
        b->next = nx->next;
        if (nx->next) nx->next->prev = b;
        free(nx);
    }
    set_insert(fs, b);
    pthread_mutex_unlock(&a->mu);
}

size_t amp_cache_empty(amp_cache_alloc *a) {
    if (!a) return 0;
    pthread_mutex_lock(&a->mu);
    size_t n = empty_locked(a);
    pthread_mutex_unlock(&a->mu);
    return n;
}

amp_cache_stats amp_cache_get_stats(amp_cache_alloc *a) {
    amp_cache_stats s;
    memset(&s, 0, sizeof s);
    if (!a) return s;
    pthread_mutex_lock(&a->mu);
    s = a->st;
    pthread_mutex_unlock(&a->mu);
    return s;
}

/* The counting allocator: live and peak bytes per device and category.
 * Host memory comes from the block cache below; a device's from its
 * backend (kernels/device.h: raw_alloc, a caching allocator on CUDA). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "kernels/device.h"
#include "tensor/tensor_impl.h"

static atomic_size_t g_live_d[AMP_DEVICE_COUNT][AMP_MEM_CATEGORY_COUNT];
static atomic_size_t g_peak_d[AMP_DEVICE_COUNT][AMP_MEM_CATEGORY_COUNT];
static atomic_size_t g_live_total_d[AMP_DEVICE_COUNT], g_peak_total_d[AMP_DEVICE_COUNT];
static atomic_uint_fast64_t g_allocs_d[AMP_DEVICE_COUNT], g_frees_d[AMP_DEVICE_COUNT];
/* the host's (device 0) under their old names */
#define g_live g_live_d[AMP_DEVICE_CPU]
#define g_peak g_peak_d[AMP_DEVICE_CPU]
#define g_live_total g_live_total_d[AMP_DEVICE_CPU]
#define g_peak_total g_peak_total_d[AMP_DEVICE_CPU]
#define g_allocs g_allocs_d[AMP_DEVICE_CPU]
#define g_frees g_frees_d[AMP_DEVICE_CPU]

#define MAX_CAT_STACK 32
static _Thread_local amp_mem_category g_cat_stack[MAX_CAT_STACK];
static _Thread_local int g_cat_depth;

static const char *g_cat_names[] = {
    "param", "grad", "optimizer", "activation", "cast_cache", "workspace", "data",
};
_Static_assert(sizeof g_cat_names / sizeof g_cat_names[0] == AMP_MEM_CATEGORY_COUNT,
               "g_cat_names: one name per memory category");

const char *amp_mem_category_name(amp_mem_category c) {
    return ((int)c >= 0 && c < AMP_MEM_CATEGORY_COUNT) ? g_cat_names[c] : "invalid-category";
}

static void raise_peak(atomic_size_t *peak, size_t v) {
    size_t cur = atomic_load_explicit(peak, memory_order_relaxed);
    while (v > cur && !atomic_compare_exchange_weak(peak, &cur, v)) {
    }
}

static void count_add_d(int d, amp_mem_category c, size_t n) {
    size_t v = atomic_fetch_add(&g_live_d[d][c], n) + n;
    raise_peak(&g_peak_d[d][c], v);
    size_t t = atomic_fetch_add(&g_live_total_d[d], n) + n;
    raise_peak(&g_peak_total_d[d], t);
}

static void count_sub_d(int d, amp_mem_category c, size_t n) {
    atomic_fetch_sub(&g_live_d[d][c], n);
    atomic_fetch_sub(&g_live_total_d[d], n);
}

static void count_add(amp_mem_category c, size_t n) { count_add_d(AMP_DEVICE_CPU, c, n); }
static void count_sub(amp_mem_category c, size_t n) { count_sub_d(AMP_DEVICE_CPU, c, n); }

/* ---- the block cache ------------------------------------------------------
 * A training loop allocates the same sizes every step. Returning big blocks
 * to the OS and taking them back costs a page fault per 4 KiB, so freed
 * blocks are kept in exact-size free lists (the next pointer lives in the
 * free block itself) up to a cap, like PyTorch's caching allocators. The byte
 * counters count live tensors only; cached bytes are reported separately.
 * Off under AddressSanitizer (use-after-free must stay visible) and with
 * AMP_CACHE_MB=0. */
#if defined(__SANITIZE_ADDRESS__)
#define AMP_CACHE_DEFAULT_MB 0
#else
#define AMP_CACHE_DEFAULT_MB 1024
#endif
#define NBUCKETS 1024

typedef struct bucket {
    size_t size;
    void *head;
    struct bucket *next;
} bucket;

static pthread_mutex_t g_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static bucket *g_buckets[NBUCKETS];
static size_t g_cached, g_cache_cap;
static pthread_once_t g_cache_once = PTHREAD_ONCE_INIT;
static atomic_size_t g_cached_pub;

static void cache_init(void) {
    long mb = amp__env_cache_mb(AMP_CACHE_DEFAULT_MB); /* a malformed value: the default, and amp_init says so */
    g_cache_cap = mb > 0 ? (size_t)mb << 20 : 0;
}

static bucket *find_bucket(size_t sz, bool create) {
    size_t h = (sz / 64) % NBUCKETS;
    for (bucket *b = g_buckets[h]; b; b = b->next)
        if (b->size == sz) return b;
    if (!create) return NULL;
    bucket *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->size = sz;
    b->next = g_buckets[h];
    g_buckets[h] = b;
    return b;
}

static void *cache_take(size_t sz) {
    if (!g_cache_cap) return NULL;
    void *p = NULL;
    pthread_mutex_lock(&g_cache_mu);
    bucket *b = find_bucket(sz, false);
    if (b && b->head) {
        p = b->head;
        b->head = *(void **)p;
        g_cached -= sz;
        atomic_store(&g_cached_pub, g_cached);
    }
    pthread_mutex_unlock(&g_cache_mu);
    return p;
}

static bool cache_put(void *p, size_t sz) {
    if (!g_cache_cap || sz > g_cache_cap) return false;
    bool kept = false;
    pthread_mutex_lock(&g_cache_mu);
    if (g_cached + sz <= g_cache_cap) {
        bucket *b = find_bucket(sz, true);
        if (b) {
            *(void **)p = b->head;
            b->head = p;
            g_cached += sz;
            atomic_store(&g_cached_pub, g_cached);
            kept = true;
        }
    }
    pthread_mutex_unlock(&g_cache_mu);
    return kept;
}

static void empty_host_cache(void);
void amp_memory_empty_cache(void) {
    empty_host_cache();
    /* devices already in use (never starts one) */
    for (int d = 1; d < AMP_DEVICE_COUNT; d++) {
        const amp_device_iface *dv = amp__device_iface_if_started((amp_device)d);
        if (dv && dv->empty_cache) dv->empty_cache();
    }
}

static void empty_host_cache(void) {
    pthread_mutex_lock(&g_cache_mu);
    for (int h = 0; h < NBUCKETS; h++) {
        bucket *b = g_buckets[h];
        while (b) {
            void *p = b->head;
            while (p) {
                void *next = *(void **)p;
                free(p);
                p = next;
            }
            bucket *nb = b->next;
            free(b);
            b = nb;
        }
        g_buckets[h] = NULL;
    }
    g_cached = 0;
    atomic_store(&g_cached_pub, 0);
    pthread_mutex_unlock(&g_cache_mu);
}

static void free_cache_at_exit(void) { empty_host_cache(); }

static void cache_once(void) {
    cache_init();
    atexit(free_cache_at_exit);
}

void *amp__alloc(size_t nbytes, amp_mem_category c) {
    size_t sz = (nbytes + 63) & ~(size_t)63;
    if (sz == 0) sz = 64;
    if (sz < nbytes) return amp_error_null(AMP_ERR_NOMEM, "amp: allocation of %zu bytes overflows", nbytes);
    pthread_once(&g_cache_once, cache_once);
    void *p = cache_take(sz);
    if (!p) p = aligned_alloc(64, sz);
    if (!p) {
        empty_host_cache(); /* give cached blocks back and retry once */
        p = aligned_alloc(64, sz);
    }
    if (!p) return amp_error_null(AMP_ERR_NOMEM, "amp: out of memory allocating %zu bytes (%s)", nbytes, g_cat_names[c]);
    count_add(c, nbytes);
    atomic_fetch_add(&g_allocs, 1);
    return p;
}

void amp__free(void *p, size_t nbytes, amp_mem_category c) {
    if (!p) return;
    size_t sz = (nbytes + 63) & ~(size_t)63;
    if (sz == 0) sz = 64;
    if (!cache_put(p, sz)) free(p);
    count_sub(c, nbytes);
    atomic_fetch_add(&g_frees, 1);
}

void amp__mem_move_dev(amp_device d, size_t nbytes, amp_mem_category from, amp_mem_category to) {
    if (from == to || (int)d < 0 || d >= AMP_DEVICE_COUNT) return;
    atomic_fetch_sub(&g_live_d[d][from], nbytes);
    size_t v = atomic_fetch_add(&g_live_d[d][to], nbytes) + nbytes;
    raise_peak(&g_peak_d[d][to], v);
}

void amp__mem_move(size_t nbytes, amp_mem_category from, amp_mem_category to) {
    amp__mem_move_dev(AMP_DEVICE_CPU, nbytes, from, to);
}

/* ---- device memory ---------------------------------------------------------------- */
void *amp__alloc_dev(amp_device d, size_t nbytes, amp_mem_category c) {
    if (d == AMP_DEVICE_CPU) return amp__alloc(nbytes, c);
    const amp_device_iface *dv = amp__device_iface("amp", d);
    if (!dv) return NULL;
    void *p = dv->raw_alloc(nbytes);
    if (!p) return NULL;
    count_add_d(d, c, nbytes);
    atomic_fetch_add(&g_allocs_d[d], 1);
    return p;
}

void amp__free_dev(amp_device d, void *p, size_t nbytes, amp_mem_category c) {
    if (!p) return;
    if (d == AMP_DEVICE_CPU) {
        amp__free(p, nbytes, c);
        return;
    }
    const amp_device_iface *dv = amp__device_iface_if_started(d);
    if (dv) dv->raw_free(p, nbytes);
    count_sub_d(d, c, nbytes);
    atomic_fetch_add(&g_frees_d[d], 1);
}

amp_mem_stats amp_memory_stats_device(amp_device d) {
    amp_mem_stats s;
    memset(&s, 0, sizeof s);
    if ((int)d < 0 || d >= AMP_DEVICE_COUNT) return s;
    for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++) {
        s.live[c] = atomic_load(&g_live_d[d][c]);
        s.peak[c] = atomic_load(&g_peak_d[d][c]);
    }
    s.live_total = atomic_load(&g_live_total_d[d]);
    s.peak_total = atomic_load(&g_peak_total_d[d]);
    s.allocs = atomic_load(&g_allocs_d[d]);
    s.frees = atomic_load(&g_frees_d[d]);
    if (d == AMP_DEVICE_CPU) {
        s.cached = atomic_load(&g_cached_pub);
    } else {
        const amp_device_iface *dv = amp__device_iface_if_started(d);
        if (dv && dv->cache_stats) dv->cache_stats(&s.cached, &s.reserved, &s.device_mallocs);
    }
    return s;
}

amp_mem_stats amp_memory_stats(void) { return amp_memory_stats_device(AMP_DEVICE_CPU); }

void amp_memory_reset_peak(void) {
    for (int d = 0; d < AMP_DEVICE_COUNT; d++) {
        for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++) atomic_store(&g_peak_d[d][c], atomic_load(&g_live_d[d][c]));
        atomic_store(&g_peak_total_d[d], atomic_load(&g_live_total_d[d]));
    }
}

void amp_mem_push_category(amp_mem_category c) {
    if ((int)c < 0 || c >= AMP_MEM_CATEGORY_COUNT) {
        /* keep push/pop balanced: push the current category instead */
        amp_error(AMP_ERR_ARG, "amp_mem_push_category: category %d is not a memory category", (int)c);
        c = amp__mem_current(AMP_MEM_DATA);
    }
    if (g_cat_depth < MAX_CAT_STACK) g_cat_stack[g_cat_depth] = c;
    g_cat_depth++;
}

void amp_mem_pop_category(void) {
    if (g_cat_depth > 0) g_cat_depth--;
}

amp_mem_category amp__mem_current(amp_mem_category fallback) {
    if (g_cat_depth > 0 && g_cat_depth <= MAX_CAT_STACK) return g_cat_stack[g_cat_depth - 1];
    return fallback;
}

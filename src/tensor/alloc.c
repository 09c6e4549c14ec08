/* The counting allocator: live and peak bytes per category. */
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor_impl.h"

static atomic_size_t g_live[AMP_MEM_CATEGORY_COUNT];
static atomic_size_t g_peak[AMP_MEM_CATEGORY_COUNT];
static atomic_size_t g_live_total, g_peak_total;
static atomic_uint_fast64_t g_allocs, g_frees;

#define MAX_CAT_STACK 32
static _Thread_local amp_mem_category g_cat_stack[MAX_CAT_STACK];
static _Thread_local int g_cat_depth;

static const char *g_cat_names[AMP_MEM_CATEGORY_COUNT] = {
    "param", "grad", "optimizer", "activation", "cast_cache", "workspace", "data",
};

const char *amp_mem_category_name(amp_mem_category c) {
    return ((int)c >= 0 && c < AMP_MEM_CATEGORY_COUNT) ? g_cat_names[c] : "invalid-category";
}

static void raise_peak(atomic_size_t *peak, size_t v) {
    size_t cur = atomic_load_explicit(peak, memory_order_relaxed);
    while (v > cur && !atomic_compare_exchange_weak(peak, &cur, v)) {
    }
}

static void count_add(amp_mem_category c, size_t n) {
    size_t v = atomic_fetch_add(&g_live[c], n) + n;
    raise_peak(&g_peak[c], v);
    size_t t = atomic_fetch_add(&g_live_total, n) + n;
    raise_peak(&g_peak_total, t);
}

static void count_sub(amp_mem_category c, size_t n) {
    atomic_fetch_sub(&g_live[c], n);
    atomic_fetch_sub(&g_live_total, n);
}

void *amp__alloc(size_t nbytes, amp_mem_category c) {
    size_t sz = (nbytes + 63) & ~(size_t)63;
    if (sz == 0) sz = 64;
    if (sz < nbytes) return amp_error_null(AMP_ERR_NOMEM, "amp: allocation of %zu bytes overflows", nbytes);
    void *p = aligned_alloc(64, sz);
    if (!p) return amp_error_null(AMP_ERR_NOMEM, "amp: out of memory allocating %zu bytes (%s)", nbytes, g_cat_names[c]);
    count_add(c, nbytes);
    atomic_fetch_add(&g_allocs, 1);
    return p;
}

void amp__free(void *p, size_t nbytes, amp_mem_category c) {
    if (!p) return;
    free(p);
    count_sub(c, nbytes);
    atomic_fetch_add(&g_frees, 1);
}

void amp__mem_move(size_t nbytes, amp_mem_category from, amp_mem_category to) {
    if (from == to) return;
    atomic_fetch_sub(&g_live[from], nbytes);
    size_t v = atomic_fetch_add(&g_live[to], nbytes) + nbytes;
    raise_peak(&g_peak[to], v);
}

amp_mem_stats amp_memory_stats(void) {
    amp_mem_stats s;
    memset(&s, 0, sizeof s);
    for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++) {
        s.live[c] = atomic_load(&g_live[c]);
        s.peak[c] = atomic_load(&g_peak[c]);
    }
    s.live_total = atomic_load(&g_live_total);
    s.peak_total = atomic_load(&g_peak_total);
    s.allocs = atomic_load(&g_allocs);
    s.frees = atomic_load(&g_frees);
    return s;
}

void amp_memory_reset_peak(void) {
    for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++) atomic_store(&g_peak[c], atomic_load(&g_live[c]));
    atomic_store(&g_peak_total, atomic_load(&g_live_total));
}

void amp_mem_push_category(amp_mem_category c) {
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

/* The caching allocator of the CUDA backend (kernels/cache_alloc.h) on host
 * memory: the same code manages GPU memory behind cudaMalloc; here its
 * backing allocator is malloc with a budget, so the steady state, splitting,
 * merging, emptying and the retry after a failed allocation are tested on
 * any machine. Every block handed out is filled with its own byte pattern
 * and checked when freed: overlapping blocks would corrupt each other. */
#include <stdlib.h>
#include <string.h>

#include "op_check.h"
#include "kernels/cache_alloc.h"

typedef struct {
    size_t budget, used;
    int allocs, frees;
} backing;

static void *b_alloc(void *ctx, size_t bytes) {
    backing *b = ctx;
    if (b->used + bytes > b->budget) return NULL;
    void *p = aligned_alloc(512, bytes);
    if (!p) return NULL;
    b->used += bytes;
    b->allocs++;
    return p;
}

static void b_free(void *ctx, void *p, size_t bytes) {
    backing *b = ctx;
    b->used -= bytes;
    b->frees++;
    free(p);
}

static amp_cache_alloc *make(backing *b, size_t budget) {
    memset(b, 0, sizeof *b);
    b->budget = budget;
    return amp_cache_alloc_new((amp_cache_backing){b_alloc, b_free, b});
}

static void t_rounding(void **state) {
    (void)state;
    assert_int_equal(amp_cache_round(0), 512);
    assert_int_equal(amp_cache_round(1), 512);
    assert_int_equal(amp_cache_round(512), 512);
    assert_int_equal(amp_cache_round(513), 1024);
    assert_int_equal(amp_cache_round(SIZE_MAX - 10), 0); /* would overflow */
}

/* The sizes of a training step, allocated and freed step after step: after
 * the first step the backing allocator is never called again. */
static void t_steady_state(void **state) {
    (void)state;
    backing b;
    amp_cache_alloc *a = make(&b, (size_t)1 << 30);
    const size_t sizes[] = {100, 4096, 3 << 20, 65536, 12 << 20, 700, 1 << 20, 2 << 20, 5000000, 64};
    enum { N = sizeof sizes / sizeof sizes[0] };
    int after_first = 0;
    for (int step = 0; step < 20; step++) {
        void *p[N];
        for (int i = 0; i < N; i++) {
            p[i] = amp_cache_malloc(a, sizes[i]);
            assert_non_null(p[i]);
            assert_int_equal((uintptr_t)p[i] % 512, 0);
            memset(p[i], i + 1, sizes[i]);
        }
        for (int i = 0; i < N; i++) {
            const unsigned char *c = p[i];
            for (size_t k = 0; k < sizes[i]; k += 997) assert_int_equal(c[k], i + 1);
            amp_cache_release(a, p[i]);
        }
        if (step == 0) after_first = b.allocs;
    }
    assert_int_equal(b.allocs, after_first);
    amp_cache_stats st = amp_cache_get_stats(a);
    assert_int_equal(st.raw_allocs, (uint64_t)after_first);
    assert_int_equal(st.allocated, 0);
    assert_int_equal(st.blocks_in_use, 0);
    assert_true(st.reserved > 0);
    /* everything is free: empty returns every segment */
    size_t back = amp_cache_empty(a);
    assert_int_equal(back, st.reserved);
    assert_int_equal(amp_cache_get_stats(a).reserved, 0);
    assert_int_equal(b.used, 0);
    amp_cache_alloc_free(a);
}

/* small requests share 2 MiB segments; freeing merges neighbours back into
 * one block that can serve a request as large as the segment */
static void t_split_merge(void **state) {
    (void)state;
    backing b;
    amp_cache_alloc *a = make(&b, (size_t)1 << 30);
    void *p[64];
    for (int i = 0; i < 64; i++) p[i] = amp_cache_malloc(a, 30000); /* 30208 each: 69 fit in 2 MiB */
    assert_int_equal(b.allocs, 1);
    for (int i = 0; i < 64; i++) {
        for (int j = 0; j < i; j++) assert_true(p[i] != p[j]);
        memset(p[i], i, 30000);
    }
    for (int i = 0; i < 64; i += 2) amp_cache_release(a, p[i]);
    for (int i = 1; i < 64; i += 2) {
        const unsigned char *c = p[i];
        assert_int_equal(c[0], i);
        assert_int_equal(c[29999], i);
        amp_cache_release(a, p[i]);
    }
    void *big = amp_cache_malloc(a, 1 << 20); /* the merged segment serves it */
    assert_non_null(big);
    assert_int_equal(b.allocs, 1);
    amp_cache_release(a, big);
    /* a large request gets its own pool and segment */
    void *l = amp_cache_malloc(a, 30 << 20);
    assert_non_null(l);
    assert_int_equal(b.allocs, 2);
    amp_cache_release(a, l);
    /* a smaller large request is cut from the cached 30 MiB block */
    void *m = amp_cache_malloc(a, 3 << 20);
    assert_ptr_equal(m, l);
    assert_int_equal(b.allocs, 2);
    amp_cache_release(a, m);
    amp_cache_alloc_free(a);
    assert_int_equal(b.used, 0);
}

/* the budget is full of cached free segments: a new size still fits after
 * the allocator returns them (the retry), and a request above the budget
 * fails cleanly */
static void t_retry_after_failure(void **state) {
    (void)state;
    backing b;
    amp_cache_alloc *a = make(&b, (size_t)64 << 20);
    void *p = amp_cache_malloc(a, 40 << 20);
    assert_non_null(p);
    amp_cache_release(a, p); /* cached: 40 MiB of the 64 held */
    void *q = amp_cache_malloc(a, 50 << 20);
    assert_non_null(q);
    amp_cache_stats st = amp_cache_get_stats(a);
    assert_int_equal(st.raw_failures, 1);
    assert_int_equal(st.reserved, (size_t)50 << 20);
    assert_null(amp_cache_malloc(a, 100 << 20));
    amp_cache_release(a, q);
    amp_cache_release(a, NULL);
    amp_cache_release(a, (void *)0x1234); /* not ours: ignored */
    amp_cache_alloc_free(a);
    assert_int_equal(b.used, 0);
}

/* random allocation and free with pattern checks */
static void t_random(void **state) {
    (void)state;
    backing b;
    amp_cache_alloc *a = make(&b, (size_t)2 << 30);
    enum { SLOTS = 200 };
    void *p[SLOTS] = {0};
    size_t sz[SLOTS] = {0};
    test_rng r = {1234};
    for (int it = 0; it < 20000; it++) {
        int i = (int)(test_rng_u32(&r) % SLOTS);
        if (p[i]) {
            const unsigned char *c = p[i];
            unsigned char want = (unsigned char)(i * 7 + 1);
            assert_int_equal(c[0], want);
            assert_int_equal(c[sz[i] / 2], want);
            assert_int_equal(c[sz[i] - 1], want);
            amp_cache_release(a, p[i]);
            p[i] = NULL;
        } else {
            uint32_t k = test_rng_u32(&r);
            sz[i] = (k & 3) == 0 ? 1 + k % (24u << 20) : 1 + k % 200000;
            p[i] = amp_cache_malloc(a, sz[i]);
            assert_non_null(p[i]);
            memset(p[i], i * 7 + 1, sz[i]);
        }
    }
    amp_cache_stats st = amp_cache_get_stats(a);
    size_t live = 0;
    for (int i = 0; i < SLOTS; i++)
        if (p[i]) live += amp_cache_round(sz[i]);
    /* blocks are the rounded sizes, except a large block whose remainder was
     * under 1 MiB (not split): it keeps the remainder */
    assert_true(st.allocated >= live);
    assert_true(st.allocated - live < (size_t)SLOTS << 20);
    for (int i = 0; i < SLOTS; i++) amp_cache_release(a, p[i]);
    assert_int_equal(amp_cache_get_stats(a).allocated, 0);
    amp_cache_empty(a);
    assert_int_equal(amp_cache_get_stats(a).reserved, 0);
    amp_cache_alloc_free(a);
    assert_int_equal(b.used, 0);
    assert_int_equal(b.allocs, b.frees);
}

AMP_TEST_MAIN(t_rounding, t_steady_state, t_split_merge, t_retry_after_failure, t_random)

/* Thread safety, one test per claim docs/threads.md makes "safe":
 *  - a module in eval mode runs forward on several threads at once (with and
 *    without autocast, with grad mode on too), giving each thread the bits a
 *    single thread gets, while other threads query its parameters and names;
 *  - one generator (the default one) drawn from by several threads: every
 *    call gets its own block of the stream, nothing drawn twice or lost;
 *  - the memory counters under concurrent allocation;
 *  - autocast state, grad mode, scopes and the last error are per thread. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"
#include "tiny_lm.h"

#define THREADS 4
#define ROUNDS 6

static const tiny_lm_cfg CFG = {.vocab = 11, .block = 8, .d = 16, .heads = 2, .layers = 2};

typedef struct {
    amp_module *m;
    amp_tensor *idx[ROUNDS];
    float *want[ROUNDS]; /* single-thread results */
    amp_dtype ac[ROUNDS];
    bool grad_mode;
    int mismatches, failures;
    pthread_barrier_t *go;
} fwd_job;

static amp_tensor *run(amp_module *m, amp_tensor *idx, amp_dtype ac) {
    if (ac != AMP_F32) amp_autocast_enter(ac);
    amp_tensor *y = amp_module_forward(m, idx);
    if (ac != AMP_F32) amp_autocast_exit();
    return y ? amp_to(y, AMP_F32) : NULL;
}

static void *fwd_worker(void *arg) {
    fwd_job *j = arg;
    pthread_barrier_wait(j->go);
    if (!j->grad_mode) amp_no_grad_begin();
    for (int r = 0; r < ROUNDS; r++) {
        amp_scope *s = amp_scope_begin();
        amp_tensor *y = run(j->m, j->idx[r], j->ac[r]);
        if (!y) j->failures++;
        else if (memcmp(amp_tensor_data(y), j->want[r], amp_tensor_nbytes(y))) j->mismatches++;
        amp_scope_end(s);
    }
    if (!j->grad_mode) amp_no_grad_end();
    return NULL;
}

typedef struct {
    amp_module *m;
    int bad;
    pthread_barrier_t *go;
} query_job;

static void *query_worker(void *arg) {
    query_job *q = arg;
    pthread_barrier_wait(q->go);
    for (int r = 0; r < 200; r++) {
        const char *names[64];
        amp_tensor *ts[64];
        int n = amp_module_state(q->m, ts, names, 64);
        q->bad += n != 2 + 12 * CFG.layers + 3 || strcmp(names[n - 1], "lm_head.weight") ||
                  amp_module_get_parameter(q->m, "h.1.attn.c_proj.bias") == NULL;
    }
    return NULL;
}

static void t_shared_module_inference(void **st) {
    (void)st;
    amp_generator g = amp_generator_make(1);
    amp_module *m = tiny_lm_new(&CFG, &g);
    assert_non_null(m);
    amp_module_train(m, false);
    fwd_job jobs[THREADS];
    const amp_dtype acs[3] = {AMP_F32, AMP_BF16, AMP_F16};
    for (int t = 0; t < THREADS; t++) {
        jobs[t] = (fwd_job){.m = m, .grad_mode = t % 2 == 1};
        for (int r = 0; r < ROUNDS; r++) {
            int64_t v[2 * 8];
            for (int i = 0; i < 16; i++) v[i] = (t * 7 + r * 3 + i * 5) % CFG.vocab;
            jobs[t].idx[r] = amp_tensor_from_data(v, AMP_I64, 2, AMP_SHAPE(2, 8));
            jobs[t].ac[r] = acs[(t + r) % 3];
            amp_scope *s = amp_scope_begin(); /* the reference, alone */
            amp_tensor *y = run(m, jobs[t].idx[r], jobs[t].ac[r]);
            assert_non_null(y);
            jobs[t].want[r] = malloc(amp_tensor_nbytes(y));
            memcpy(jobs[t].want[r], amp_tensor_data(y), amp_tensor_nbytes(y));
            amp_scope_end(s);
        }
    }
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, THREADS + 2);
    pthread_t th[THREADS + 1];
    query_job q = {m, 0, &go};
    for (int t = 0; t < THREADS; t++) {
        jobs[t].go = &go;
        pthread_create(&th[t], NULL, fwd_worker, &jobs[t]);
    }
    pthread_create(&th[THREADS], NULL, query_worker, &q);
    amp_autocast_enter(AMP_F16); /* the main thread's region is its own */
    pthread_barrier_wait(&go);
    for (int t = 0; t <= THREADS; t++) pthread_join(th[t], NULL);
    amp_autocast_exit();
    pthread_barrier_destroy(&go);
    for (int t = 0; t < THREADS; t++) {
        assert_int_equal(jobs[t].failures, 0);
        assert_int_equal(jobs[t].mismatches, 0);
        for (int r = 0; r < ROUNDS; r++) {
            amp_tensor_free(jobs[t].idx[r]);
            free(jobs[t].want[r]);
        }
    }
    assert_int_equal(q.bad, 0);
    amp_module_free(m);
}

/* ---- one generator, several threads ---------------------------------------------------------- */
#define DRAWS 2000
#define SIZE 3

typedef struct {
    double v[DRAWS * SIZE];
    pthread_barrier_t *go;
} draw_job;

static void *draw_worker(void *arg) {
    draw_job *j = arg;
    pthread_barrier_wait(j->go);
    for (int d = 0; d < DRAWS; d++) {
        amp_tensor *t = amp_tensor_randn(AMP_F64, 1, AMP_SHAPE(SIZE), NULL); /* the default generator */
        amp_tensor_copy_out(t, j->v + d * SIZE, AMP_F64);
        amp_tensor_free(t);
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void t_shared_generator(void **st) {
    (void)st;
    amp_manual_seed(1234);
    uint64_t start = amp_default_generator()->offset;
    static draw_job jobs[THREADS];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, THREADS);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        jobs[t].go = &go;
        pthread_create(&th[t], NULL, draw_worker, &jobs[t]);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    pthread_barrier_destroy(&go);
    const int total = THREADS * DRAWS * SIZE;
    assert_true(amp_default_generator()->offset == start + (uint64_t)total); /* no reservation lost */
    /* the values drawn are exactly the stream's first `total` values, each once */
    double *all = malloc(sizeof(double) * (size_t)total), *ref = malloc(sizeof(double) * (size_t)total);
    for (int t = 0; t < THREADS; t++) memcpy(all + t * DRAWS * SIZE, jobs[t].v, sizeof(double) * DRAWS * SIZE);
    amp_generator seq = {1234, start};
    amp_tensor *r = amp_tensor_randn(AMP_F64, 1, AMP_SHAPE(total), &seq);
    amp_tensor_copy_out(r, ref, AMP_F64);
    amp_tensor_free(r);
    qsort(all, (size_t)total, sizeof(double), cmp_double);
    qsort(ref, (size_t)total, sizeof(double), cmp_double);
    assert_memory_equal(all, ref, sizeof(double) * (size_t)total);
    test_free_all(all, ref);
}

/* ---- memory counters ------------------------------------------------------------------------ */
typedef struct {
    int seed;
    pthread_barrier_t *go;
} mem_job;

static void *mem_worker(void *arg) {
    mem_job *j = arg;
    pthread_barrier_wait(j->go);
    for (int r = 0; r < 300; r++) {
        amp_scope *s = amp_scope_begin();
        int64_t n = 1 + (r * 37 + j->seed * 101) % 5000;
        amp_tensor *a = amp_tensor_ones(AMP_F32, 1, &n), *b = amp_tensor_zeros(AMP_BF16, 1, &n);
        amp_add(a, b);
        amp_mem_stats ms = amp_memory_stats(); /* reading while others allocate */
        (void)ms;
        amp_scope_end(s);
    }
    return NULL;
}

static void t_memory_counters(void **st) {
    (void)st;
    amp_mem_stats before = amp_memory_stats();
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, THREADS);
    pthread_t th[THREADS];
    mem_job jobs[THREADS];
    for (int t = 0; t < THREADS; t++) {
        jobs[t] = (mem_job){t, &go};
        pthread_create(&th[t], NULL, mem_worker, &jobs[t]);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    pthread_barrier_destroy(&go);
    amp_mem_stats after = amp_memory_stats();
    for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++) assert_int_equal(after.live[c], before.live[c]);
    assert_int_equal(after.live_total, before.live_total);
    assert_true(after.allocs - before.allocs == after.frees - before.frees);
    assert_true(after.allocs - before.allocs >= (uint64_t)THREADS * 300 * 3);
    assert_true(after.peak[AMP_MEM_DATA] >= before.live[AMP_MEM_DATA] + 5000 * 6);
}

/* ---- per-thread state ------------------------------------------------------------------------------ */
typedef struct {
    bool autocast, grad, err;
    int depth;
    pthread_barrier_t *b1, *b2;
} state_job;

static void *state_worker(void *arg) {
    state_job *j = arg;
    pthread_barrier_wait(j->b1); /* main is inside autocast, no_grad, a scope, with an error */
    j->autocast = amp_autocast_is_enabled();
    j->depth = amp_autocast_depth();
    j->grad = amp_grad_enabled();
    j->err = amp_last_status() != AMP_OK;
    amp_scope *s = amp_scope_begin(); /* a scope of its own, ended here */
    amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(4));
    amp_scope_end(s);
    pthread_barrier_wait(j->b2);
    return NULL;
}

static void t_per_thread_state(void **st) {
    (void)st;
    pthread_barrier_t b1, b2;
    pthread_barrier_init(&b1, NULL, 2);
    pthread_barrier_init(&b2, NULL, 2);
    state_job j = {.b1 = &b1, .b2 = &b2};
    pthread_t th;
    pthread_create(&th, NULL, state_worker, &j);
    amp_scope *s = amp_scope_begin();
    amp_autocast_enter(AMP_BF16);
    amp_no_grad_begin();
    assert_null(amp_matmul(NULL, NULL)); /* an error on this thread */
    pthread_barrier_wait(&b1);
    pthread_barrier_wait(&b2);
    pthread_join(th, NULL);
    assert_false(j.autocast);
    assert_int_equal(j.depth, 0);
    assert_true(j.grad);
    assert_false(j.err);
    assert_true(amp_autocast_is_enabled()); /* ours are untouched */
    assert_false(amp_grad_enabled());
    amp_no_grad_end();
    amp_autocast_exit();
    assert_int_equal(amp_scope_end(s), AMP_OK);
    pthread_barrier_destroy(&b1);
    pthread_barrier_destroy(&b2);
}

AMP_TEST_MAIN(t_shared_module_inference, t_shared_generator, t_memory_counters, t_per_thread_state)

/* amp_gpt_generate from several threads sharing one GPT (docs/threads.md):
 * generation runs the model in eval semantics without writing the module's
 * training flag, so threads generating from one model at once, while one
 * more thread keeps starting and finishing short generations, each get the
 * tokens one thread alone gets, and the model's mode never changes
 * (generate used to switch the model to eval mode and back: a thread that
 * finished switched dropout back on under the others, and the mode flipped
 * while other threads read it).
 *
 * The mechanism is general (amp_module_eval_begin / _end, an eval scope per
 * thread): t_shared_eval_scope runs a Sequential of Conv2d, BatchNorm2d,
 * Dropout and Linear, kept in training mode, from several threads inside
 * their scopes while one more thread reads the mode: every forward gives the
 * eval-mode bits (no dropout, batch norm on its running statistics, which
 * stay as they were), amp_module_is_training answers false inside a scope
 * and true everywhere else, and the model's flag never changes. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

#define WORKERS 3
#define ROUNDS 4
#define NEW 40

static const amp_gpt_config CFG = {2, 2, 32, 16, 40, 0.5, true}; /* dropout 0.5: any dropout changes the tokens */
static const int64_t PROMPT[3] = {1, 2, 3};

typedef struct {
    amp_module *m;
    const int64_t *want;
    bool cache;
    int mismatches, failures;
    pthread_barrier_t *go;
    atomic_int *running;
} gen_job;

static amp_status gen(amp_module *m, bool cache, int64_t max_new, int64_t *out, int64_t *n) {
    amp_generator g = amp_generator_make(99);
    amp_gpt_generate_opts o = AMP_GPT_GENERATE_DEFAULTS;
    o.max_new_tokens = max_new;
    o.temperature = 0.9;
    o.generator = &g;
    o.use_kv_cache = cache;
    return amp_gpt_generate(m, PROMPT, 3, out, n, &o);
}

static void *gen_worker(void *arg) {
    gen_job *j = arg;
    amp_set_num_threads(1);
    pthread_barrier_wait(j->go);
    for (int r = 0; r < ROUNDS; r++) {
        int64_t out[NEW], n = 0;
        if (gen(j->m, j->cache, NEW, out, &n) != AMP_OK || n != NEW) j->failures++;
        else if (memcmp(out, j->want, sizeof out)) j->mismatches++;
    }
    atomic_fetch_sub(j->running, 1);
    return NULL;
}

typedef struct {
    amp_module *m;
    int calls, failures, eval_seen;
    pthread_barrier_t *go;
    atomic_int *running;
} short_job;

/* one-token generations back to back, and the mode read between them */
static void *short_worker(void *arg) {
    short_job *s = arg;
    amp_set_num_threads(1);
    pthread_barrier_wait(s->go);
    while (atomic_load(s->running) > 0) {
        int64_t out[1], n;
        if (gen(s->m, s->calls % 2 == 0, 1, out, &n) != AMP_OK) s->failures++;
        s->calls++;
        s->eval_seen += !amp_module_is_training(s->m);
    }
    return NULL;
}

static void *watch_worker(void *arg) {
    short_job *s = arg;
    pthread_barrier_wait(s->go);
    while (atomic_load(s->running) > 0) {
        s->eval_seen += !amp_module_is_training(s->m);
        s->calls++;
    }
    return NULL;
}

static void t_shared_generate(void **st) {
    (void)st;
    amp_module *m = test_gpt_new(&CFG, 5);
    /* the reference: eval mode, one thread; the cached and uncached paths agree */
    int64_t want[NEW], other[NEW], n;
    amp_module_train(m, false);
    assert_int_equal(gen(m, true, NEW, want, &n), AMP_OK);
    assert_int_equal(gen(m, false, NEW, other, &n), AMP_OK);
    assert_memory_equal(want, other, sizeof want);
    /* in training mode generate still runs without dropout */
    amp_module_train(m, true);
    assert_int_equal(gen(m, true, NEW, other, &n), AMP_OK);
    assert_memory_equal(want, other, sizeof want);
    assert_true(amp_module_is_training(m));

    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, WORKERS + 3);
    atomic_int running = WORKERS;
    gen_job jobs[WORKERS];
    short_job shorty = {m, 0, 0, 0, &go, &running}, watch = {m, 0, 0, 0, &go, &running};
    pthread_t th[WORKERS + 2];
    for (int i = 0; i < WORKERS; i++) {
        jobs[i] = (gen_job){m, want, i % 2 == 0, 0, 0, &go, &running};
        assert_int_equal(pthread_create(&th[i], NULL, gen_worker, &jobs[i]), 0);
    }
    assert_int_equal(pthread_create(&th[WORKERS], NULL, short_worker, &shorty), 0);
    assert_int_equal(pthread_create(&th[WORKERS + 1], NULL, watch_worker, &watch), 0);
    pthread_barrier_wait(&go);
    for (int i = 0; i < WORKERS + 2; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
    int bad = 0;
    for (int i = 0; i < WORKERS; i++) {
        if (jobs[i].failures || jobs[i].mismatches)
            print_message("worker %d (%s): %d failures, %d of %d generations differ from one thread's\n", i,
                          jobs[i].cache ? "KV cache" : "no cache", jobs[i].failures, jobs[i].mismatches, ROUNDS);
        bad += jobs[i].failures + jobs[i].mismatches;
    }
    print_message("%d one-token generations and %d reads of the mode beside them; eval mode seen %d times\n", shorty.calls,
                  watch.calls, shorty.eval_seen + watch.eval_seen);
    assert_int_equal(shorty.failures, 0);
    assert_int_equal(bad, 0);
    assert_int_equal(shorty.eval_seen + watch.eval_seen, 0); /* the model stayed in training mode */
    assert_true(amp_module_is_training(m));
    amp_module_free(m);
}

typedef struct {
    amp_module *m;
    amp_tensor *x;
    const float *want;
    int64_t n;
    int mismatches, failures, wrong_mode;
    pthread_barrier_t *go;
    atomic_int *running;
} eval_job;

static void *eval_worker(void *arg) {
    eval_job *j = arg;
    amp_set_num_threads(1);
    float *got = malloc(sizeof(float) * (size_t)j->n);
    pthread_barrier_wait(j->go);
    for (int r = 0; r < 3 * ROUNDS; r++) {
        j->wrong_mode += !amp_module_is_training(j->m); /* outside the scope: the model's mode */
        amp_module_eval_begin();
        amp_module_eval_begin(); /* nests */
        amp_module_eval_end();
        j->wrong_mode += amp_module_is_training(j->m) || amp_module_is_training(amp_module_child_at(j->m, 1, NULL));
        amp_scope *sc = amp_scope_begin();
        amp_tensor *y = amp_module_forward(j->m, j->x);
        if (!y || amp_tensor_copy_out(y, got, AMP_F32) != AMP_OK) j->failures++;
        else if (memcmp(got, j->want, sizeof(float) * (size_t)j->n)) j->mismatches++;
        amp_scope_end(sc);
        amp_module_eval_end();
    }
    free(got);
    atomic_fetch_sub(j->running, 1);
    return NULL;
}

static void t_shared_eval_scope(void **st) {
    (void)st;
    amp_generator g = amp_generator_make(8);
    amp_module *m = amp_nn_sequential((amp_module *[]){amp_nn_conv2d(3, 8, 3, NULL, true, &g), amp_nn_batchnorm2d(8, 1e-5, 0.1),
                                                       amp_nn_dropout(0.5, &g), amp_nn_flatten(),
                                                       amp_nn_linear(8 * 6 * 6, 10, true, &g)},
                                      5);
    assert_non_null(m);
    amp_tensor *x = amp_tensor_randn(AMP_F32, 4, AMP_SHAPE(4, 3, 8, 8), &g);
    assert_non_null(x);
    amp_tensor *rm = amp_module_get_buffer(m, "1.running_mean"), *rv = amp_module_get_buffer(m, "1.running_var");
    assert_non_null(rm);
    assert_non_null(rv);
    /* running statistics that are not the initial 0 and 1: one training forward */
    amp_scope *sc = amp_scope_begin();
    assert_non_null(amp_module_forward(m, x));
    amp_scope_end(sc);
    float stats0[16], stats1[16];
    assert_int_equal(amp_tensor_copy_out(rm, stats0, AMP_F32), AMP_OK);
    assert_int_equal(amp_tensor_copy_out(rv, stats0 + 8, AMP_F32), AMP_OK);
    /* the reference: eval mode, one thread */
    const int64_t n = 4 * 10;
    float want[40], got[40];
    amp_module_train(m, false);
    sc = amp_scope_begin();
    assert_int_equal(amp_tensor_copy_out(amp_module_forward(m, x), want, AMP_F32), AMP_OK);
    amp_scope_end(sc);
    amp_module_train(m, true);
    /* in training mode, outside a scope, the output differs (dropout, the batch's statistics) */
    sc = amp_scope_begin();
    assert_int_equal(amp_tensor_copy_out(amp_module_forward(m, x), got, AMP_F32), AMP_OK);
    amp_scope_end(sc);
    assert_true(memcmp(got, want, sizeof want) != 0);
    sc = amp_scope_begin(); /* that forward updated them: put them back */
    assert_int_equal(amp_tensor_copy_(rm, amp_tensor_from_data(stats0, AMP_F32, 1, AMP_SHAPE(8))), AMP_OK);
    assert_int_equal(amp_tensor_copy_(rv, amp_tensor_from_data(stats0 + 8, AMP_F32, 1, AMP_SHAPE(8))), AMP_OK);
    amp_scope_end(sc);

    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, WORKERS + 2);
    atomic_int running = WORKERS;
    eval_job jobs[WORKERS];
    short_job watch = {m, 0, 0, 0, &go, &running};
    pthread_t th[WORKERS + 1];
    for (int i = 0; i < WORKERS; i++) {
        jobs[i] = (eval_job){m, x, want, n, 0, 0, 0, &go, &running};
        assert_int_equal(pthread_create(&th[i], NULL, eval_worker, &jobs[i]), 0);
    }
    assert_int_equal(pthread_create(&th[WORKERS], NULL, watch_worker, &watch), 0);
    pthread_barrier_wait(&go);
    for (int i = 0; i < WORKERS + 1; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
    for (int i = 0; i < WORKERS; i++) {
        if (jobs[i].failures || jobs[i].mismatches || jobs[i].wrong_mode)
            fail_msg("worker %d: %d failures, %d of %d forwards differ from eval mode's, %d wrong answers of "
                     "amp_module_is_training", i, jobs[i].failures, jobs[i].mismatches, 3 * ROUNDS, jobs[i].wrong_mode);
    }
    print_message("%d reads of the mode beside the scoped forwards; eval mode seen %d times\n", watch.calls, watch.eval_seen);
    assert_int_equal(watch.eval_seen, 0); /* the model stayed in training mode */
    assert_true(amp_module_is_training(m));
    assert_int_equal(amp_tensor_copy_out(rm, stats1, AMP_F32), AMP_OK);
    assert_int_equal(amp_tensor_copy_out(rv, stats1 + 8, AMP_F32), AMP_OK);
    assert_memory_equal(stats1, stats0, sizeof stats0); /* batch norm never updated them */
    amp_module_eval_end(); /* an end without a begin does nothing */
    assert_true(amp_module_is_training(m));
    amp_tensor_free(x);
    amp_module_free(m);
}

AMP_TEST_MAIN(t_shared_generate, t_shared_eval_scope)

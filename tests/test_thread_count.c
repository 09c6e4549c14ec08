/* How many threads amp's parallel regions use (core/threads.h): fewer while
 * other processes keep cores busy, never more than OpenMP's limit.
 *   - /proc/stat's idle ticks summed over the CPUs of the affinity mask only
 *     (a fixture: the aggregate "cpu" line and other CPUs are not counted;
 *     niced time counted on request; a truncated line is an error, not a zero);
 *   - the decision: t cores only while t - 0.25 are free, with hysteresis
 *     (a table of cases, among them 2 CPUs with one busy process: 1.33 cores
 *     free while two threads spin, 1.0 with one thread);
 *   - the limits: amp_set_num_threads(1) gives 1, adaptation off gives the
 *     limit, a forced cap is honoured below the limit and never above it;
 *   - a window's free cores (amp__threads_window_avail) from two samples,
 *     and no answer (NaN: the window is skipped) when a count went backwards
 *     (the kernel's iowait ticks may decrease) or the window is stale;
 *   - the measurement runs (where /proc/stat can be read and the affinity
 *     mask has 2 CPUs or more): statistics over the windows, the count
 *     within [1, limit], with adaptation turned on by the test itself (the
 *     test support turns it off; AMP_ADAPTIVE_THREADS=0 may be set);
 *   - a training step (a small GPT-style model: forward, cross entropy,
 *     backward, clipping, AdamW) whose thread count changes between steps
 *     (1, 2, 3 threads, forced) gives the bits of the steps on one thread;
 *   - AMP_ADAPTIVE_THREADS other than 0 or 1 is an error naming it. */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/threads.h"
#include "test_support.h"
#include "tiny_lm.h"

static const char *k_stat = "cpu  81076 0 16967 70933 753 0 75 192 0 0\n"
                            "cpu0 40150 0 8341 36209 192 0 7 89 0 0\n"
                            "cpu1 40926 0 8625 34724 561 0 67 102 0 0\n"
                            "cpu2 1 2 3 1000 20 0 0 0 0 0\n"
                            "intr 123456 1 2 3 4 5\n"
                            "ctxt 987654\n";

static void t_parse_stat(void **s) {
    (void)s;
    uint64_t mask[AMP_THREADS_MASK_WORDS] = {0}, idle = 0;
    mask[0] = 0x3; /* cpu0, cpu1 */
    assert_int_equal(amp__threads_parse_stat(k_stat, mask, false, &idle), 2);
    assert_int_equal(idle, 36209 + 192 + 34724 + 561);
    mask[0] = 0x4 | 0x20; /* cpu2 and cpu5 (absent) */
    assert_int_equal(amp__threads_parse_stat(k_stat, mask, false, &idle), 1);
    assert_int_equal(idle, 1020);
    assert_int_equal(amp__threads_parse_stat(k_stat, mask, true, &idle), 1); /* + nice */
    assert_int_equal(idle, 1022);
    mask[0] = 0;
    mask[1] = 1; /* cpu64 */
    assert_int_equal(amp__threads_parse_stat(k_stat, mask, true, &idle), 0);
    assert_int_equal(idle, 0);
    /* a line cut before its iowait field */
    mask[0] = 0x2;
    mask[1] = 0;
    assert_int_equal(amp__threads_parse_stat("cpu0 1 2 3 4 5\ncpu1 40926 0 8625", mask, false, &idle), -1);
}

static void t_decide(void **s) {
    (void)s;
    static const struct {
        int cur, ncpu;
        double avail;
        int want;
    } c[] = {
        {2, 2, 2.00, 2}, {2, 2, 1.90, 2}, {2, 2, 1.76, 2}, /* noise around an idle machine */
        {2, 2, 1.74, 1}, {2, 2, 1.33, 1},                   /* one busy process while two threads run */
        {1, 2, 1.00, 1}, {1, 2, 1.50, 1}, {1, 2, 1.84, 1}, /* ... while one runs; half a core busy */
        {1, 2, 1.86, 2}, {1, 2, 2.00, 2},                   /* the other process ended */
        {2, 2, 0.10, 1}, {1, 1, 0.50, 1},                   /* never below one */
        {16, 16, 12.3, 12}, {16, 16, 15.8, 16}, {12, 16, 13.9, 14}, {12, 16, 13.8, 13}, {12, 16, 12.8, 12},
        {4, 16, 20.0, 16},                                  /* never above the CPUs */
        {9, 4, 4.0, 4}, {0, 4, 4.0, 4},                     /* a current count out of range */
        {2, 2, 0.0 / 0.0, 2},                               /* NaN: no information */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        int got = amp__threads_decide(c[i].cur, c[i].ncpu, c[i].avail);
        if (got != c[i].want)
            fail_msg("decide(cur %d, ncpu %d, avail %.2f) = %d, want %d", c[i].cur, c[i].ncpu, c[i].avail, got, c[i].want);
    }
}

static void t_window(void **s) {
    (void)s;
    const long long ms = 1000000;
    /* 30 free ticks at 100 Hz (0.3 s) + 0.1 s of the process's own CPU time over 0.2 s: 2 cores */
    assert_true(amp__threads_window_avail(1000, 1030, 100, 5 * ms, 105 * ms, 1000 * ms, 1200 * ms) == 2.0);
    /* nothing free, the process idle: 0 cores */
    assert_true(amp__threads_window_avail(1000, 1000, 100, 5 * ms, 5 * ms, 1000 * ms, 1200 * ms) == 0.0);
    /* iowait went back by more than idle rose: skipped (it was 2^64 - 10 ticks, 9.2e16 cores) */
    assert_true(isnan(amp__threads_window_avail(1000, 990, 100, 5 * ms, 105 * ms, 1000 * ms, 1200 * ms)));
    assert_true(isnan(amp__threads_window_avail(1000, 1030, 100, 105 * ms, 5 * ms, 1000 * ms, 1200 * ms)));
    /* no wall time, or stale (no region for 0.8 s) */
    assert_true(isnan(amp__threads_window_avail(1000, 1030, 100, 5 * ms, 105 * ms, 1000 * ms, 1000 * ms)));
    assert_true(isnan(amp__threads_window_avail(1000, 1030, 100, 5 * ms, 105 * ms, 1000 * ms, 1800 * ms)));
    assert_false(isnan(amp__threads_window_avail(1000, 1030, 100, 5 * ms, 105 * ms, 1000 * ms, 1799 * ms)));
    /* the decision keeps the count on a skipped window */
    assert_int_equal(amp__threads_decide(2, 2, amp__threads_window_avail(1000, 990, 100, 0, 0, 0, 200 * ms)), 2);
}

static void t_limits(void **s) {
    (void)s;
    const int saved = amp_get_num_threads();
    amp_set_num_threads(1);
    assert_int_equal(amp_get_active_threads(), 1);
    amp_set_num_threads(4);
    amp__threads_force_cap(3);
    assert_int_equal(amp_get_active_threads(), 3);
    amp__threads_force_cap(6);
    assert_int_equal(amp_get_active_threads(), 4);
    amp__threads_force_cap(0);
    amp_set_adaptive_threads(false);
    assert_false(amp_get_adaptive_threads());
    assert_int_equal(amp_get_active_threads(), 4);
    amp_set_adaptive_threads(true);
    assert_true(amp_get_adaptive_threads());
    amp_set_adaptive_threads(false); /* as the test support left it */
    amp_set_num_threads(saved);
}

static void t_measures(void **s) {
    (void)s;
    if (access("/proc/stat", R_OK) != 0) {
        print_message("skipped: /proc/stat cannot be read, so the count is never adapted\n");
        skip();
    }
    /* the CPUs this process may run on (taskset), which is what the library adapts within */
    cpu_set_t set;
    CPU_ZERO(&set);
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    const int ncpu = CPU_COUNT(&set);
    if (ncpu < 2) {
        print_message("skipped: %d CPU in the affinity mask, nothing to adapt\n", ncpu);
        skip();
    }
    const int saved = amp_get_num_threads();
    amp_set_num_threads(2);
    amp_set_adaptive_threads(true); /* whatever AMP_ADAPTIVE_THREADS and the test support said */
    const int limit = amp_get_num_threads();
    amp__threads_stats_reset();
    /* windows of 200 ms: measure for 0.65 s, as regions starting now would */
    for (int i = 0; i < 65; i++) {
        int t = amp_get_active_threads();
        assert_true(t >= 1 && t <= limit);
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    double mean, secs;
    int changes;
    amp__threads_stats(&mean, &secs, &changes);
    amp_set_adaptive_threads(false);
    amp_set_num_threads(saved);
    assert_int_equal(limit, 2);
    if (!(secs > 0.35)) fail_msg("%.3f s measured over 0.65 s of regions (adaptation on, limit 2, %d CPUs)", secs, ncpu);
    assert_true(mean >= 1 && mean <= limit);
    assert_true(changes >= 0);
}

/* ---- a training step at any thread count ---------------------------------------------------- */
static const tiny_lm_cfg LM = {.vocab = 256, .block = 64, .d = 192, .heads = 4, .layers = 2};

/* The model after `steps` training steps, step k on threads[k % nthreads]
 * threads (forced); *losses gets each step's loss. */
static amp_module *train_steps(const int *threads, int nthreads, int steps, double *losses) {
    amp_generator g = amp_generator_make(7);
    amp_module *m = tiny_lm_new(&LM, &g);
    assert_non_null(m);
    amp_tensor *ps[64];
    int n = amp_module_parameters(m, ps, NULL, 64);
    amp_optim_opts o = amp_adamw_opts(1e-3);
    amp_optim *opt = amp_optim_new(ps, n, &o);
    assert_non_null(opt);
    const int64_t B = 8, T = LM.block;
    int64_t *a = malloc(sizeof(int64_t) * (size_t)(B * T)), *b = malloc(sizeof(int64_t) * (size_t)(B * T));
    for (int step = 0; step < steps; step++) {
        amp__threads_force_cap(threads[step % nthreads]);
        for (int64_t i = 0; i < B * T; i++) {
            a[i] = (i * 7 + step * 3) % LM.vocab;
            b[i] = (a[i] * 5 + 1) % LM.vocab;
        }
        amp_scope *sc = amp_scope_begin();
        amp_tensor *x = amp_tensor_from_data(a, AMP_I64, 2, AMP_SHAPE(B, T)), *y = amp_tensor_from_data(b, AMP_I64, 1, AMP_SHAPE(B * T));
        amp_optim_zero_grad(opt);
        amp_tensor *logits = amp_module_forward(m, x);
        amp_tensor *loss = logits ? amp_cross_entropy(amp_reshape(logits, 2, AMP_SHAPE(-1, LM.vocab)), y, NULL) : NULL;
        if (!loss) fail_msg("%s", amp_last_error());
        losses[step] = amp_tensor_item(loss);
        assert_int_equal(amp_backward(loss), AMP_OK);
        assert_true(amp_clip_grad_norm_params(ps, n, 0.5) >= 0); /* the global norm (grad_sumsq) */
        assert_int_equal(amp_optim_step(opt), AMP_OK);
        amp_scope_end(sc);
    }
    amp__threads_force_cap(0);
    test_free_all(a, b);
    amp_optim_free(opt);
    return m;
}

/* Every parameter of a and b, bit for bit. */
static void assert_same_params(amp_module *a, amp_module *b, const char *what) {
    amp_tensor *pa[64], *pb[64];
    const char *names[64];
    int n = amp_module_parameters(a, pa, names, 64);
    assert_int_equal(amp_module_parameters(b, pb, NULL, 64), n);
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)amp_tensor_numel(pa[i]) * 4;
        if (memcmp(amp_tensor_data(pa[i]), amp_tensor_data(pb[i]), bytes)) fail_msg("%s: %s differs from 1 thread's", what, names[i]);
    }
}

/* Results never depend on the thread count, and the count may change
 * between any two regions (threads.h: it follows the machine's load). The
 * model's tensors are above the kernels' parallel thresholds (activations
 * 8 x 64 x 192, MLP weights 192 x 768), so the regions do split. */
static void t_train_step_any_count(void **s) {
    (void)s;
    const int saved = amp_get_num_threads();
    amp_set_num_threads(3); /* the limit; the forced cap picks 1, 2 or 3 under it */
    enum { STEPS = 3 };
    double l1[STEPS], lx[STEPS];
    amp_module *one = train_steps((const int[]){1}, 1, STEPS, l1);
    const int *orders[] = {(const int[]){1, 2, 3}, (const int[]){3, 2, 1}, (const int[]){2}};
    const char *what[] = {"steps on 1, 2, 3 threads", "steps on 3, 2, 1 threads", "2 threads"};
    for (int k = 0; k < 3; k++) {
        amp_module *m = train_steps(orders[k], k < 2 ? 3 : 1, STEPS, lx);
        for (int i = 0; i < STEPS; i++)
            if (memcmp(&lx[i], &l1[i], sizeof(double))) fail_msg("%s: loss of step %d %.17g, 1 thread %.17g", what[k], i, lx[i], l1[i]);
        assert_same_params(m, one, what[k]);
        amp_module_free(m);
    }
    assert_true(l1[STEPS - 1] < l1[0]); /* it trains */
    amp_module_free(one);
    amp_set_num_threads(saved);
}

/* Batch-1 products (gemv: decoding) split across threads from a much
 * smaller size than compute-bound products (gemm.c: a few rows against a
 * long operand are memory-bound). Each output is still one thread's sum in
 * one order: 1 to 4 rows of x against a 1000 x 576 weight, f32 and bf16,
 * give the same bits on 1, 2 and 3 threads. */
static void t_gemv_any_count(void **s) {
    (void)s;
    const int saved = amp_get_num_threads();
    amp_set_num_threads(3);
    const amp_dtype dts[] = {AMP_F32, AMP_BF16};
    for (int d = 0; d < 2; d++)
        for (int64_t rows = 1; rows <= 4; rows++) {
            amp_scope *sc = amp_scope_begin();
            amp_generator g = amp_generator_make(11 + (uint64_t)rows);
            amp_tensor *w = amp_tensor_randn(dts[d], 2, AMP_SHAPE(1000, 576), &g);
            amp_tensor *x = amp_tensor_randn(dts[d], 2, AMP_SHAPE(rows, 576), &g);
            amp_tensor *y[3];
            for (int t = 0; t < 3; t++) {
                amp__threads_force_cap(t + 1);
                y[t] = amp_linear(x, w, NULL);
                assert_non_null(y[t]);
            }
            amp__threads_force_cap(0);
            const size_t bytes = (size_t)amp_tensor_numel(y[0]) * amp_dtype_size(dts[d]);
            for (int t = 1; t < 3; t++)
                if (memcmp(amp_tensor_data(y[t]), amp_tensor_data(y[0]), bytes))
                    fail_msg("%s, %lld rows: %d threads differ from 1", amp_dtype_name(dts[d]), (long long)rows, t + 1);
            amp_scope_end(sc);
        }
    amp_set_num_threads(saved);
}

static void t_env_checked(void **s) {
    (void)s;
    const char *bad[] = {"AMP_ADAPTIVE_THREADS=2", "AMP_ADAPTIVE_THREADS=yes", "AMP_ADAPTIVE_THREADS=00"};
    for (int i = 0; i < 3; i++) {
        char *out, *err;
        int rc = test_run_cli(bad[i], "--version", &out, &err);
        if (rc != 1 || !strstr(err, "AMP_ADAPTIVE_THREADS") || !strstr(err, "is not 0"))
            fail_msg("%s: exit %d:\n%s", bad[i], rc, err);
        test_free_all(out, err);
    }
    const char *good[] = {"AMP_ADAPTIVE_THREADS=0", "AMP_ADAPTIVE_THREADS=1"};
    for (int i = 0; i < 2; i++) {
        char *out, *err;
        int rc = test_run_cli(good[i], "--version", &out, &err);
        if (rc != 0) fail_msg("%s: exit %d:\n%s", good[i], rc, err);
        test_free_all(out, err);
    }
}

AMP_TEST_MAIN(t_parse_stat, t_decide, t_window, t_limits, t_measures, t_train_step_any_count, t_gemv_any_count, t_env_checked)

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
 *   - the measurement runs (where /proc/stat can be read): statistics over
 *     the windows, the count within [1, limit];
 *   - AMP_ADAPTIVE_THREADS other than 0 or 1 is an error naming it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/threads.h"
#include "test_support.h"

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
    amp_set_num_threads(saved);
}

static void t_measures(void **s) {
    (void)s;
    if (access("/proc/stat", R_OK) != 0) skip();
    const int saved = amp_get_num_threads();
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    amp_set_num_threads(2 <= ncpu ? 2 : 1);
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
    if (limit > 1) { /* one thread: nothing to adapt, nothing measured */
        assert_true(secs > 0.35);
        assert_true(mean >= 1 && mean <= limit);
        assert_true(changes >= 0);
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
        free(out);
        free(err);
    }
    const char *good[] = {"AMP_ADAPTIVE_THREADS=0", "AMP_ADAPTIVE_THREADS=1"};
    for (int i = 0; i < 2; i++) {
        char *out, *err;
        int rc = test_run_cli(good[i], "--version", &out, &err);
        if (rc != 0) fail_msg("%s: exit %d:\n%s", good[i], rc, err);
        free(out);
        free(err);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_parse_stat), cmocka_unit_test(t_decide),      cmocka_unit_test(t_limits),
        cmocka_unit_test(t_measures),   cmocka_unit_test(t_env_checked),
    };
    return amp_test_run(tests);
}

/* The messages that name ranks (src/dist/dist_msg.c), in one process: the
 * bounded appender never writes past its buffer and marks a cut; ranks are
 * grouped by what they have ("rank 0 called X, but ranks 1, 3 called Y");
 * the collectives' identity check (amp__dist_ident_check) on a world of
 * 1100 ranks with the longest labels and numbers keeps its message whole;
 * and what the check compares: the call site yes, the step no (it is only
 * named). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist_impl.h"
#include "test_support.h"

static void t_put_stays_in_its_buffer(void **state) {
    (void)state;
    char buf[64];
    memset(buf, 0x5a, sizeof buf);
    amp__dist_msg o;
    amp__dist_msg_start(&o, buf, 40); /* bytes 40..63: a canary */
    amp__dist_put(&o, "%s", "rank 0");
    assert_string_equal(buf, "rank 0");
    assert_false(amp__dist_msg_full(&o));
    for (int i = 1; i < 20; i++) amp__dist_put(&o, ", rank %d", i);
    assert_true(amp__dist_msg_full(&o));
    assert_int_equal(strlen(buf), 39);
    assert_string_equal(buf, "rank 0, rank 1, rank 2, rank 3, rank...");
    amp__dist_put(&o, "more"); /* full: nothing changes */
    assert_string_equal(buf, "rank 0, rank 1, rank 2, rank 3, rank...");
    for (size_t i = 40; i < sizeof buf; i++) assert_int_equal((unsigned char)buf[i], 0x5a);
    /* a piece that exactly fills the buffer is not a cut */
    amp__dist_msg_start(&o, buf, 6);
    amp__dist_put(&o, "abcde");
    assert_string_equal(buf, "abcde");
    assert_true(amp__dist_msg_full(&o));
    amp__dist_msg_start(&o, buf, 0); /* no room at all: never written */
    amp__dist_put(&o, "x");
    assert_string_equal(buf, "abcde");
}

static bool int_same(const void *ctx, int a, int b) { return ((const int *)ctx)[a] == ((const int *)ctx)[b]; }
static void int_what(amp__dist_msg *o, const void *ctx, int rank) { amp__dist_put(o, "v%d", ((const int *)ctx)[rank]); }

static void groups(const int *v, int world, const char *want) {
    char buf[400];
    amp__dist_msg o;
    amp__dist_msg_start(&o, buf, sizeof buf);
    amp__dist_groups gr = {int_same, int_what, v, "has", "have", ", but ", "; "};
    amp__dist_put_groups(&o, world, &gr);
    assert_string_equal(buf, want);
}

static void t_groups(void **state) {
    (void)state;
    int a[] = {7, 8, 8, 7, 9};
    groups(a, 5, "ranks 0, 3 have v7, but ranks 1, 2 have v8; rank 4 has v9");
    int b[20] = {0};
    b[19] = 1;
    groups(b, 20, "ranks 0, 1, 2, 3, 4, 5, 6, 7 and 11 more have v0, but rank 19 has v1");
    int c[] = {0, 1, 2, 3, 4, 5};
    groups(c, 6, "rank 0 has v0, but rank 1 has v1; rank 2 has v2; rank 3 has v3; ...");
}

static amp_dist_ident ident(amp_dist_kind kind, uint64_t count, int64_t step, const char *label) {
    amp_dist_ident id;
    memset(&id, 0, sizeof id);
    id.magic = AMP_DIST_IDENT_MAGIC;
    id.kind = (int32_t)kind;
    id.dtype = AMP_F32;
    id.op = AMP_DIST_SUM;
    id.root = -1;
    id.seq = 3;
    id.count = count;
    id.step = step;
    snprintf(id.label, sizeof id.label, "%s", label);
    return id;
}

/* amp__dist_ident_check on rank `rank` of a world of n */
static amp_status check(const amp_dist_ident *ids, int n, int rank) {
    amp_dist_group g;
    memset(&g, 0, sizeof g);
    g.size = n;
    g.rank = rank;
    amp_dist_work w;
    memset(&w, 0, sizeof w);
    w.g = &g;
    w.fn = "t";
    w.seq = 3;
    amp_status st = amp__dist_ident_check(&w, ids);
    assert_true(st == AMP_OK || g.shared_failure);
    free(g.peer_final);
    return st;
}

static const char *suffix = ". Every rank must call the same collectives in the same order: the ranks' programs, options or data differ";

/* 1100 ranks in 5 groups (ranks 0-999, then 20 each), every number and
 * label as long as it gets: the message names 4 groups, keeps its last
 * sentence, and fits amp_last_error() (1023 characters) */
static void t_ident_check_many_ranks_long_labels(void **state) {
    (void)state;
    int n = 1100;
    amp_dist_ident *ids = calloc((size_t)n, sizeof *ids);
    assert_non_null(ids);
    for (int L = 1; L < AMP_DIST_LABEL; L++) {
        for (int p = 0; p < n; p++) {
            int grp = p < 1000 ? 0 : 1 + (p - 1000) / 20;
            char label[AMP_DIST_LABEL];
            memset(label, 'a' + grp, sizeof label);
            label[grp == 0 ? L : AMP_DIST_LABEL - 1] = 0;
            ids[p] = ident(AMP_DIST_K_REDUCE_SCATTER, UINT64_MAX - (uint64_t)grp, INT64_MAX, label);
            ids[p].dtype = AMP_F8E4M3;
            ids[p].op = AMP_DIST_AVG;
        }
        assert_int_not_equal(check(ids, n, 1050), AMP_OK);
        const char *e = amp_last_error();
        size_t len = strlen(e), sl = strlen(suffix);
        assert_true(len < 1023);
        assert_true(len > sl);
        assert_string_equal(e + len - sl, suffix);
        assert_non_null(strstr(e, "t: the ranks called different collectives as their collective #3: ranks 0, 1, 2, 3, 4, 5, 6, 7 and "
                                  "992 more called reduce_scatter(f8e4m3, 18446744073709551615 elements per rank, avg) in a"));
        assert_non_null(strstr(e, ", but ranks 1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007 and 12 more called reduce_scatter(f8e4m3, "
                                  "18446744073709551614 elements per rank, avg) in bbbb"));
    }
    free(ids);
}

/* what is compared: the call site is (the same all_reduce from another
 * function is a mismatch); the step is not (a rank that had nothing to
 * backward in a round may still name the previous step), only named */
static void t_ident_compares_call_site_not_step(void **state) {
    (void)state;
    amp_dist_ident ids[2] = {ident(AMP_DIST_K_ALL_REDUCE, 16, 7, "amp_dist_all_reduce"),
                             ident(AMP_DIST_K_ALL_REDUCE, 16, 6, "amp_dist_all_reduce")};
    assert_int_equal(check(ids, 2, 0), AMP_OK);
    assert_int_equal(check(ids, 2, 1), AMP_OK);
    ids[1] = ident(AMP_DIST_K_ALL_REDUCE, 16, 7, "amp_dist_all_reduce_async");
    assert_int_not_equal(check(ids, 2, 1), AMP_OK);
    assert_non_null(strstr(amp_last_error(), "rank 0 called all_reduce(f32, 16 elements, sum) in amp_dist_all_reduce at step 7, but rank "
                                             "1 called all_reduce(f32, 16 elements, sum) in amp_dist_all_reduce_async at step 7."));
}

AMP_TEST_MAIN(t_put_stays_in_its_buffer, t_groups, t_ident_check_many_ranks_long_labels,
              t_ident_compares_call_site_not_step)

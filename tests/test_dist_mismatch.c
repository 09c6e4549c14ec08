/* Ranks that call different collectives (issue 23, section 4, defect 3):
 * every collective carries its identity (kind, dtype, element count,
 * reduction, root, call site, step), so a mismatch is an error on every
 * rank naming both ranks' operations, found before any receive buffer is
 * written: never a crash, a hang or silently mixed data.
 *
 * Ranks restoring different checkpoints (defect 4) are refused the same way.
 *
 * A rank that stalls is named alone by the ranks that time out waiting for
 * it (a 3-rank case: the one peer of a 2-rank world is always right).
 *
 * Each case is its own `mpirun -np 2` (or 3) of this program (`--child CASE
 * DIR`): a mismatch leaves the group unusable, so one case per run. Each
 * rank writes what it saw (status, message, whether its buffers are
 * untouched) to DIR/rankR.txt before it ends the run, and the parent checks
 * every rank's file. Skipped (77) when amp was built without MPI. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_support.h"

/* ---- the child: one case on 2 ranks ------------------------------------------------ */
static FILE *g_out;
static int g_rank;

static amp_tensor *filled(amp_dtype dt, int64_t n, double v) {
    int64_t shape[1] = {n};
    amp_tensor *t = amp_tensor_full(dt, 1, shape, v);
    if (!t) {
        fprintf(stderr, "amp_tensor_full: %s\n", amp_last_error());
        exit(2);
    }
    return t;
}

static bool all_equal(const amp_tensor *t, double v) {
    int64_t n = amp_tensor_numel(t);
    double *p = malloc(sizeof *p * (size_t)n);
    bool ok = p && amp_tensor_copy_out(t, p, AMP_F64) == AMP_OK;
    for (int64_t i = 0; ok && i < n; i++) ok = p[i] == v;
    free(p);
    return ok;
}

static void report(const char *what, amp_status st) {
    fprintf(g_out, "%s: status %d: %s\n", what, (int)st, st == AMP_OK ? "ok" : amp_last_error());
}

/* ends the run the way a program should after a collective failed */
static int finish(amp_dist_group *w, bool failed) {
    fprintf(g_out, "rank %d: done\n", g_rank);
    fclose(g_out);
    if (failed) amp_dist_abort(w, 3);
    return amp_dist_finalize() == AMP_OK ? 0 : 4;
}

/* MPI's own entry points, for the case of a program that initialises MPI
 * itself (amp_dist_init adopts it). Weak: this file also links where amp
 * was built without MPI (and then skips every case). */
extern int MPI_Init(int *argc, char ***argv) __attribute__((weak));
extern int MPI_Finalize(void) __attribute__((weak));

static int child(const char *which, const char *dir) {
    bool own_mpi = !strcmp(which, "finalize_own_mpi");
    if (own_mpi && (!MPI_Init || MPI_Init(NULL, NULL) != 0)) {
        fprintf(stderr, "MPI_Init failed\n");
        return 2;
    }
    if (amp_dist_init(NULL, NULL) != AMP_OK) {
        fprintf(stderr, "amp_dist_init: %s\n", amp_last_error());
        return 2;
    }
    amp_dist_group *w = amp_dist_world();
    g_rank = amp_dist_rank(w);
    bool three = !strcmp(which, "stall");
    if (amp_dist_world_size(w) != (three ? 3 : 2)) {
        fprintf(stderr, "run case %s on %d ranks\n", which, three ? 3 : 2);
        return 2;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/rank%d.err", dir, g_rank);
    if (!freopen(path, "w", stderr)) return 2; /* each rank's own stderr (amp's warnings, sanitizer reports) */
    setvbuf(stderr, NULL, _IONBF, 0);
    snprintf(path, sizeof path, "%s/rank%d.txt", dir, g_rank);
    g_out = fopen(path, "w");
    if (!g_out) return 2;
    setvbuf(g_out, NULL, _IOLBF, 0);
    int r = g_rank;
    if (!strcmp(which, "kinds")) {
        /* rank 0: all_reduce(f32, 1024); rank 1: broadcast(u8, 64) (the 64-byte buffer of the issue) */
        amp_tensor *t = r == 0 ? filled(AMP_F32, 1024, 1.0) : filled(AMP_U8, 64, 171);
        amp_status st = r == 0 ? amp_dist_all_reduce(w, t, AMP_DIST_SUM) : amp_dist_broadcast(w, t, 0);
        report("collective", st);
        fprintf(g_out, "buffer %s\n", all_equal(t, r == 0 ? 1.0 : 171) ? "untouched" : "written");
        amp_tensor_free(t);
        return finish(w, st != AMP_OK);
    }
    if (!strcmp(which, "count")) { /* the same kind and dtype, 1024 against 1000 elements */
        amp_tensor *t = filled(AMP_F32, r == 0 ? 1024 : 1000, 2.0);
        amp_status st = amp_dist_all_reduce(w, t, AMP_DIST_SUM);
        report("collective", st);
        fprintf(g_out, "buffer %s\n", all_equal(t, 2.0) ? "untouched" : "written");
        amp_tensor_free(t);
        return finish(w, st != AMP_OK);
    }
    if (!strcmp(which, "op")) { /* the same buffer shape, a sum against a max */
        amp_tensor *t = filled(AMP_F32, 16, 3.0);
        amp_status st = amp_dist_all_reduce(w, t, r == 0 ? AMP_DIST_SUM : AMP_DIST_MAX);
        report("collective", st);
        fprintf(g_out, "buffer %s\n", all_equal(t, 3.0) ? "untouched" : "written");
        amp_tensor_free(t);
        return finish(w, st != AMP_OK);
    }
    if (!strcmp(which, "async")) {
        /* two collectives in flight: the first matches and completes, the second does not */
        amp_tensor *a = filled(AMP_F32, 256, 1.0), *b = r == 0 ? filled(AMP_F32, 128, 5.0) : filled(AMP_BF16, 128, 5.0);
        amp_dist_work *wa = amp_dist_all_reduce_async(w, a, AMP_DIST_SUM);
        amp_dist_work *wb = r == 0 ? amp_dist_all_reduce_async(w, b, AMP_DIST_SUM) : amp_dist_broadcast_async(w, b, 1);
        amp_status sa = amp_dist_wait(wa);
        report("first", sa);
        fprintf(g_out, "first sum %s\n", all_equal(a, 2.0) ? "right" : "wrong");
        amp_status sb = amp_dist_wait(wb);
        report("second", sb);
        fprintf(g_out, "buffer %s\n", all_equal(b, 5.0) ? "untouched" : "written");
        test_free_tensors(a, b);
        return finish(w, sa != AMP_OK || sb != AMP_OK);
    }
    if (!strcmp(which, "finalize") || own_mpi) {
        /* rank 0 ends its run while rank 1 still calls a collective: neither
         * waits forever. With own_mpi the program initialised MPI and
         * finalizes it after amp_dist_finalize (which then blocks until the
         * job ends): rank 1's amp_dist_abort must hear from rank 0 by then. */
        if (r == 0) {
            amp_status st = amp_dist_finalize();
            report("finalize", st);
            fprintf(g_out, "rank %d: done\n", g_rank);
            fclose(g_out);
            if (own_mpi) MPI_Finalize();
            return st == AMP_OK ? 0 : 5;
        }
        amp_tensor *t = filled(AMP_F32, 1024, 1.0);
        amp_status st = amp_dist_all_reduce(w, t, AMP_DIST_AVG);
        report("collective", st);
        fprintf(g_out, "buffer %s\n", all_equal(t, 1.0) ? "untouched" : "written");
        amp_tensor_free(t);
        return finish(w, st != AMP_OK);
    }
    if (!strcmp(which, "restore")) {
        /* each rank restores its own checkpoint, saved at another step: refused on every rank before anything changes */
        amp_generator gen = amp_generator_make(7);
        amp_module *m = amp_nn_linear(4, 3, true, &gen);
        amp_tensor *p[2];
        int np = amp_module_parameters(m, p, NULL, 2);
        amp_optim_opts oo = amp_sgd_opts(0.1);
        amp_optim *solo = amp_optim_new(p, np, &oo);
        char ck[PATH_MAX];
        snprintf(ck, sizeof ck, "%s/ck%d", dir, r);
        amp_train_state st = {m, &solo, 1, NULL, NULL, NULL, r == 0 ? 3 : 6, NULL, 0};
        amp_status ss = amp_checkpoint_save(ck, &st);
        amp_optim_free(solo);
        amp_ddp *d = amp_ddp_new_module(w, m, NULL);
        amp_optim *opt = d ? amp_ddp_optim_new(d, p, np, &oo) : NULL;
        amp_checkpoint *c = amp_checkpoint_open(ck);
        if (ss != AMP_OK || !d || !opt || !c) {
            fprintf(g_out, "setup failed: %s\n", amp_last_error());
            return finish(w, true);
        }
        amp_train_state rs = {m, &opt, 1, NULL, NULL, NULL, 0, NULL, 0};
        amp_status st2 = amp_ddp_checkpoint_restore(d, c, &rs);
        report("restore", st2);
        amp_checkpoint_close(c);
        amp_optim_free(opt);
        amp_ddp_free(d);
        amp_module_free(m);
        return finish(w, st2 != AMP_OK);
    }
    if (!strcmp(which, "stall")) {
        /* 3 ranks meet at a barrier, then rank 2 stalls while ranks 0 and 1
         * all_reduce: each of them must name rank 2 alone (rank 1's identity
         * and data did arrive at rank 0, and rank 0's at rank 1) */
        amp_status st = amp_dist_barrier(w);
        report("barrier", st);
        if (r == 2) {
            fprintf(g_out, "rank %d: done (stalls)\n", g_rank);
            fclose(g_out);
            sleep(120); /* ended by the others' amp_dist_abort */
            return 6;
        }
        amp_dist_set_timeout(w, 3.0);
        amp_tensor *t = filled(AMP_F32, 1024, 1.0);
        st = amp_dist_all_reduce(w, t, AMP_DIST_SUM);
        report("collective", st);
        amp_tensor_free(t);
        return finish(w, st != AMP_OK);
    }
    if (!strcmp(which, "same")) { /* control: matching collectives of every kind still work */
        amp_tensor *t = filled(AMP_F32, 1000, (double)(r + 1));
        amp_status st = amp_dist_all_reduce(w, t, AMP_DIST_SUM);
        bool ok = st == AMP_OK && all_equal(t, 3.0);
        amp_tensor *u = filled(AMP_U8, 64, (double)(10 + r));
        st = amp_dist_broadcast(w, u, 1);
        ok = ok && st == AMP_OK && all_equal(u, 11.0);
        int64_t s2[1] = {2}, s1[1] = {1};
        amp_tensor *in = amp_tensor_full(AMP_F32, 1, s2, (double)r), *out = amp_tensor_full(AMP_F32, 1, s1, 0.0);
        st = amp_dist_reduce_scatter(w, out, in, AMP_DIST_SUM);
        ok = ok && st == AMP_OK && all_equal(out, 1.0);
        st = amp_dist_all_gather(w, in, out);
        ok = ok && st == AMP_OK && all_equal(in, 1.0);
        ok = ok && amp_dist_barrier(w) == AMP_OK;
        fprintf(g_out, "collectives %s\n", ok ? "right" : "wrong");
        test_free_tensors(t, u, in, out);
        return finish(w, !ok);
    }
    fprintf(stderr, "unknown case %s\n", which);
    return 2;
}

/* ---- the parent --------------------------------------------------------------------- */
#define MAX_RANKS 3
typedef struct {
    char *rank[MAX_RANKS]; /* each rank's report (NULL: it wrote none) */
    char *out;             /* mpirun's output */
} result;

static result run_case_np(const char *which, int np) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = 0;
    char *dir = test_mkdtemp();
    assert_non_null(dir);
    char cmd[16384], outp[PATH_MAX + 32];
    snprintf(outp, sizeof outp, "%s/mpirun.out", dir);
    snprintf(cmd, sizeof cmd, "AMP_DIST_TIMEOUT=5 %s %s --child %s %s > %s 2>&1", test_mpirun_prefix(np), self, which, dir, outp);
    int rc = system(cmd);
    result res = {{NULL}, NULL};
    for (int r = 0; r < np; r++) {
        char p[PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/rank%d.txt", dir, r);
        res.rank[r] = test_read_file(p, NULL);
    }
    res.out = test_read_file(outp, NULL);
    if (!res.out) res.out = strdup("");
    for (int r = 0; r < np; r++) { /* the ranks' stderr after mpirun's output */
        char p[PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/rank%d.err", dir, r);
        char *e = test_read_file(p, NULL);
        size_t a = strlen(res.out), b = e ? strlen(e) : 0;
        char *both = e ? realloc(res.out, a + b + 1) : NULL;
        if (both) {
            memcpy(both + a, e, b + 1);
            res.out = both;
        }
        free(e);
    }
    printf("  case %s: mpirun status %d\n", which, rc);
    for (int r = 0; r < np; r++) printf("    rank %d: %s", r, res.rank[r] ? res.rank[r] : "(no report)\n");
    /* never a crash: no rank ended on a signal (Open MPI: "exited on signal 11") */
    if (strstr(res.out, "signal") || strstr(res.out, "Segmentation")) fail_msg("a rank crashed:\n%s", res.out);
    if (strstr(res.out, "Sanitizer")) fail_msg("a sanitizer report (make test-asan):\n%s", res.out);
    /* an aborting rank heard from every peer before it ended the job */
    if (strstr(res.out, "did not report")) fail_msg("a rank ended the job without a peer's report:\n%s", res.out);
    for (int r = 0; r < np; r++)
        if (!res.rank[r] || !strstr(res.rank[r], "done")) fail_msg("rank %d did not report:\n%s", r, res.out);
    test_rmtree(dir);
    free(dir);
    return res;
}

static result run_case(const char *which) { return run_case_np(which, 2); }

static void free_result(result *r) {
    for (int k = 0; k < MAX_RANKS; k++) free(r->rank[k]);
    free(r->out);
}

static void has(const char *text, const char *what) {
    if (!strstr(text, what)) fail_msg("expected \"%s\" in:\n%s", what, text);
}

static void t_control_same_collectives(void **state) {
    (void)state;
    result r = run_case("same");
    for (int k = 0; k < 2; k++) has(r.rank[k], "collectives right");
    free_result(&r);
}

/* a case where each rank's one collective fails naming both calls, its buffer untouched */
static void expect_mismatch(const char *which, const char *call0, const char *call1) {
    result r = run_case(which);
    for (int k = 0; k < 2; k++) {
        has(r.rank[k], "collective: status");
        assert_null(strstr(r.rank[k], "status 0"));
        has(r.rank[k], "buffer untouched");
        has(r.rank[k], call0);
        has(r.rank[k], call1);
    }
    free_result(&r);
}

/* the case: an all_reduce of 1024 f32 met a broadcast of 64 bytes */
static void t_kinds(void **state) {
    (void)state;
    expect_mismatch("kinds", "rank 0 called all_reduce(f32, 1024 elements, sum)", "rank 1 called broadcast(u8, 64 elements, root 0)");
}

static void t_count(void **state) {
    (void)state;
    expect_mismatch("count", "rank 0 called all_reduce(f32, 1024 elements, sum)", "rank 1 called all_reduce(f32, 1000 elements, sum)");
}

static void t_op(void **state) {
    (void)state;
    expect_mismatch("op", "rank 0 called all_reduce(f32, 16 elements, sum)", "rank 1 called all_reduce(f32, 16 elements, max)");
}

static void t_async(void **state) {
    (void)state;
    result r = run_case("async");
    for (int k = 0; k < 2; k++) {
        has(r.rank[k], "first: status 0");
        has(r.rank[k], "first sum right");
        assert_null(strstr(r.rank[k], "second: status 0"));
        has(r.rank[k], "buffer untouched");
        has(r.rank[k], "rank 0 called all_reduce(f32, 128 elements, sum)");
        has(r.rank[k], "rank 1 called broadcast(bf16, 128 elements, root 1)");
    }
    free_result(&r);
}

/* rank 0 ended its run while rank 1 called a collective: both fail, both name the finalize */
static result finalize_met(const char *which) {
    result r = run_case(which);
    has(r.rank[0], "finalize: status");
    assert_null(strstr(r.rank[0], "status 0"));
    has(r.rank[1], "collective: status");
    assert_null(strstr(r.rank[1], "status 0"));
    for (int k = 0; k < 2; k++) has(r.rank[k], "rank 0 called amp_dist_finalize");
    return r;
}

/* a rank that has ended its run: the other is told so at its next collective instead of waiting */
static void t_finalize(void **state) {
    (void)state;
    result r = finalize_met("finalize");
    has(r.rank[1], "buffer untouched");
    for (int k = 0; k < 2; k++) has(r.rank[k], "rank 1 called all_reduce(f32, 1024 elements, avg)");
    free_result(&r);
}

/* the same, when the program owns MPI: rank 0 reports, then blocks in
 * MPI_Finalize; rank 1's amp_dist_abort hears from it (not after its wait
 * runs out, which run_case refuses) */
static void t_finalize_own_mpi(void **state) {
    (void)state;
    result r = finalize_met("finalize_own_mpi");
    free_result(&r);
}

/* a rank that stalls: the two that wait for it name it alone, not the peer that delivered */
static void t_stall_names_only_the_silent_rank(void **state) {
    (void)state;
    result r = run_case_np("stall", 3);
    for (int k = 0; k < 3; k++) has(r.rank[k], "barrier: status 0");
    for (int k = 0; k < 2; k++) {
        has(r.rank[k], "collective: status");
        assert_null(strstr(r.rank[k], "collective: status 0"));
        has(r.rank[k], "did not complete within 3 s: no data from rank(s) 2, which had not started this collective");
    }
    free_result(&r);
}

/* amp_ddp_checkpoint_restore with different checkpoints on the ranks (issue 23, defect 4) */
static void t_restore_different_checkpoints(void **state) {
    (void)state;
    result r = run_case("restore");
    for (int k = 0; k < 2; k++) {
        has(r.rank[k], "restore: status");
        assert_null(strstr(r.rank[k], "status 0"));
        has(r.rank[k], "the checkpoints restored differ between ranks");
        has(r.rank[k], "rank 0 has step 3, checkpoint_id");
        has(r.rank[k], "rank 1 has step 6, checkpoint_id");
    }
    free_result(&r);
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--child")) {
        amp_test_prepare();
        return child(argv[2], argv[3]);
    }
    if (!test_mpirun_prefix(3)) {
        printf("amp was built without MPI: skipped\n");
        return 77;
    }
    return AMP_TEST_RUN(t_control_same_collectives, t_kinds, t_count, t_op, t_async, t_finalize, t_finalize_own_mpi,
                        t_stall_names_only_the_silent_rank, t_restore_different_checkpoints);
}

/* `mpirun -np N amp train` end to end (the bar through the CLI):
 * 2 ranks on a global batch B against 1 process on B (loss curve and final
 * weights), bit-exact resume on 2 ranks (ZeRO-1, O2 bf16), a 2-rank
 * checkpoint resumed on 1 process and a 1-process one on 2 ranks, a rank
 * killed with SIGKILL (the other exits non-zero within a bounded time and
 * the last checkpoint is intact), a rank failing with an error (the run
 * ends on every rank naming it), the CNN under mpirun with rank 0 alone
 * printing, the summary and flags, and ranks that disagree (different
 * --max-steps, --eval-every on one rank, checkpoints of different steps,
 * --lr, --precision, --batch, --seed, --n-head, --grad-clip, --dropout, the
 * content of --data): an error on every rank, before step 1, naming what
 * differs with both ranks' values.
 * Skipped (77) when amp was built without MPI.
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path (the
 * ranks inherit AMP_CPU through mpirun): there only the cases whose results
 * are arithmetic (2 ranks against 1 process, the exact resumes, the GPT); a
 * killed, stalled or failing rank, the cnn's output lines, the flags and the
 * ranks that disagree do not depend on the path and run on the machine's own
 * path. */
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_support.h"

/* `amp ARGS` on np ranks (np 0: no mpirun); fails unless the exit status is want; returns stdout. */
static char *run(int np, int want, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *out = test_run_cli_vexpect(np ? test_mpirun_prefix(np) : "OMP_NUM_THREADS=2", want, NULL, fmt, ap);
    va_end(ap);
    return out;
}

/* step -> loss from a metrics file */
static int read_losses(const char *path, double *loss, int max) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[512];
    int n = 0;
    if (!fgets(line, sizeof line, f)) {
        fclose(f);
        return -1;
    }
    while (n < max && fgets(line, sizeof line, f)) {
        long step, epoch;
        double l;
        if (sscanf(line, "%ld,%ld,%lf", &step, &epoch, &l) != 3) break;
        loss[n++] = l;
    }
    fclose(f);
    return n;
}

/* max over tensors of max|a - b| / max|b| between two model files */
static double model_diff(const char *a, const char *b, bool *bitwise) {
    char pa[1200], pb[1200];
    snprintf(pa, sizeof pa, "%s/model.safetensors", a);
    snprintf(pb, sizeof pb, "%s/model.safetensors", b);
    amp_safetensors *fa = amp_safetensors_read(pa), *fb = amp_safetensors_read(pb);
    if (!fa || !fb) fail_msg("%s", amp_last_error());
    double worst = 0;
    *bitwise = true;
    for (int i = 0; i < amp_safetensors_count(fa); i++) {
        amp_safetensors_info x;
        amp_safetensors_info_at(fa, i, &x);
        amp_tensor *ta = amp_safetensors_get(fa, x.name), *tb = amp_safetensors_get(fb, x.name);
        assert_non_null(ta);
        assert_non_null(tb);
        int64_t n = amp_tensor_numel(ta);
        double *va = malloc(sizeof(double) * (size_t)n), *vb = malloc(sizeof(double) * (size_t)n);
        amp_tensor_copy_out(ta, va, AMP_F64);
        amp_tensor_copy_out(tb, vb, AMP_F64);
        double m = 0, d = 0;
        for (int64_t k = 0; k < n; k++) {
            m = fmax(m, fabs(vb[k]));
            d = fmax(d, fabs(va[k] - vb[k]));
        }
        if (d != 0) *bitwise = false;
        worst = fmax(worst, m > 0 ? d / m : d);
        test_free_all(va, vb);
        test_free_tensors(ta, tb);
    }
    amp_safetensors_free(fa);
    amp_safetensors_free(fb);
    return worst;
}

static bool same_state_tensors(const char *a, const char *b) {
    char pa[1200], pb[1200];
    snprintf(pa, sizeof pa, "%s/training_state.safetensors", a);
    snprintf(pb, sizeof pb, "%s/training_state.safetensors", b);
    amp_safetensors *fa = amp_safetensors_read(pa), *fb = amp_safetensors_read(pb);
    if (!fa || !fb) fail_msg("%s", amp_last_error());
    bool same = amp_safetensors_count(fa) == amp_safetensors_count(fb);
    for (int i = 0; same && i < amp_safetensors_count(fa); i++) {
        amp_safetensors_info x, y;
        amp_safetensors_info_at(fa, i, &x);
        amp_safetensors_info_at(fb, i, &y);
        same = !strcmp(x.name, y.name) && x.end - x.begin == y.end - y.begin && !memcmp(x.data, y.data, x.end - x.begin);
        if (!same) fprintf(stderr, "training state tensor %s differs\n", x.name);
    }
    amp_safetensors_free(fa);
    amp_safetensors_free(fb);
    return same;
}

#define COMMON "train --quiet --model mlp --limit 1280 --test-limit 500 --batch 64"

/* the bar: 2 ranks, global batch 64 == 1 process, batch 64 (fp32 SGD, 20 steps) */
static void t_two_ranks_equal_one_process(void **state) {
    (void)state;
    char a[1100], b[1100];
    snprintf(a, sizeof a, "%s/one", test_tmpdir);
    snprintf(b, sizeof b, "%s/two", test_tmpdir);
    const char *flags = "--optimizer sgd --lr 0.05 --max-steps 20 --precision fp32";
    free(run(0, 0, COMMON " %s --checkpoint %s --metrics %s/one.csv", flags, a, test_tmpdir));
    char *out = run(2, 0, COMMON " %s --checkpoint %s --metrics %s/two.csv", flags, b, test_tmpdir);
    assert_non_null(strstr(out, "world size        2 ranks"));
    assert_non_null(strstr(out, "communication"));
    free(out);
    double l1[32], l2[32];
    char p1[1200], p2[1200];
    snprintf(p1, sizeof p1, "%s/one.csv", test_tmpdir);
    snprintf(p2, sizeof p2, "%s/two.csv", test_tmpdir);
    assert_int_equal(read_losses(p1, l1, 32), 20);
    assert_int_equal(read_losses(p2, l2, 32), 20);
    double worst = 0;
    for (int i = 0; i < 20; i++) worst = fmax(worst, fabs(l2[i] - l1[i]) / fabs(l1[i]));
    bool bitwise;
    double w = model_diff(b, a, &bitwise);
    printf("  amp train, 2 ranks x 32 vs 1 process x 64 (fp32 SGD, 20 steps): loss curve max rel diff %.3g, final weights max rel "
           "diff %.3g%s\n",
           worst, w, bitwise ? " (bitwise equal)" : "");
    assert_true(worst <= 1e-6);
    assert_true(w <= 1e-6);
}

/* bit-exact resume on 2 ranks: ZeRO-1, bf16 O2 with stochastic rounding, bf16 gradient communication */
static void t_resume_two_ranks_bitexact(void **state) {
    (void)state;
    char a[1100], b[1100];
    snprintf(a, sizeof a, "%s/zstraight", test_tmpdir);
    snprintf(b, sizeof b, "%s/zsplit", test_tmpdir);
    const char *flags = "--precision bf16 --opt-level O2 --rounding stochastic --zero 1 --grad-comm bf16 --max-steps 12";
    test_free_all(run(2, 0, COMMON " %s --checkpoint %s", flags, a), run(2, 0, COMMON " %s --stop-after 5 --checkpoint %s", flags, b), run(2, 0, COMMON " %s --resume %s", flags, b));
    bool bitwise;
    double w = model_diff(b, a, &bitwise);
    bool st = same_state_tensors(a, b);
    printf("  2 ranks, ZeRO-1 O2 bf16 SR, stopped at 5 and resumed on 2 ranks: weights %s, training state %s\n",
           bitwise ? "bit-exact" : "differ", st ? "bit-exact" : "differs");
    assert_true(bitwise && w == 0);
    assert_true(st);
}

/* re-sharding: a 2-rank ZeRO-1 checkpoint continues on 1 process, a 1-process one on 2 ranks */
static void t_resume_other_world_size(void **state) {
    (void)state;
    const char *flags = "--optimizer adamw --max-steps 12";
    char s2[1100], s1[1100], c2[1100], c1[1100];
    snprintf(s2, sizeof s2, "%s/w2straight", test_tmpdir);
    snprintf(s1, sizeof s1, "%s/w1straight", test_tmpdir);
    snprintf(c2, sizeof c2, "%s/w2to1", test_tmpdir);
    snprintf(c1, sizeof c1, "%s/w1to2", test_tmpdir);
    test_free_all(run(2, 0, COMMON " %s --zero 1 --checkpoint %s", flags, s2), run(0, 0, COMMON " %s --checkpoint %s", flags, s1));
    /* 2 ranks to step 6, then 1 process to 12 */
    free(run(2, 0, COMMON " %s --zero 1 --stop-after 6 --checkpoint %s", flags, c2));
    char *out = run(0, 0, "%s %s --resume %s", COMMON " --log-every 100", flags, c2);
    free(out);
    /* 1 process to step 6, then 2 ranks (ZeRO-1) to 12 */
    test_free_all(run(0, 0, COMMON " %s --stop-after 6 --checkpoint %s", flags, c1), run(2, 0, COMMON " %s --zero 1 --resume %s", flags, c1));
    bool b1, b2;
    double d21 = model_diff(c2, s2, &b1), d12 = model_diff(c1, s1, &b2);
    printf("  resumed on another world size (AdamW, 12 steps): 2 ranks -> 1 process vs 2 ranks straight: max rel diff %.3g; "
           "1 process -> 2 ranks vs 1 process straight: %.3g (summation order only)\n", d21, d12);
    assert_true(d21 < 1e-5);
    assert_true(d12 < 1e-5);
    amp_checkpoint *c = amp_checkpoint_open(c1);
    assert_non_null(c);
    assert_string_equal(amp_checkpoint_meta(c, "dist.world_size"), "2");
    assert_int_equal(amp_checkpoint_step(c), 12);
    amp_checkpoint_close(c);
}

/* the GPT: 2 ranks == 1 process (fp32), and ZeRO-1 O2 bf16 with dropout resumes bit-exactly on 2 ranks */
#define GPT "train --quiet --model gpt --n-layer 2 --n-head 2 --n-embd 64 --block-size 32 --batch 8 --eval-windows 16"

static void t_gpt(void **state) {
    (void)state;
    char a[1100], b[1100], z1[1100], z2[1100];
    snprintf(a, sizeof a, "%s/gpt1", test_tmpdir);
    snprintf(b, sizeof b, "%s/gpt2", test_tmpdir);
    snprintf(z1, sizeof z1, "%s/gptz_straight", test_tmpdir);
    snprintf(z2, sizeof z2, "%s/gptz_split", test_tmpdir);
    /* SGD: AdamW turns the float noise of a gradient that is 0 in exact arithmetic (the attention
     * key bias: softmax ignores a constant per row) into full-size steps of either sign */
    free(run(0, 0, GPT " --optimizer sgd --lr 0.05 --max-steps 10 --checkpoint %s", a));
    char *out = run(2, 0, GPT " --optimizer sgd --lr 0.05 --max-steps 10 --checkpoint %s", b);
    assert_non_null(strstr(out, "world size        2 ranks"));
    free(out);
    bool bitwise;
    double w = model_diff(b, a, &bitwise);
    printf("  amp train --model gpt, 2 ranks x 4 vs 1 process x 8 windows (fp32 SGD, clip 1.0, 10 steps): final weights max rel "
           "diff %.3g\n", w);
    assert_true(w < 1e-6);
    /* activation checkpointing: the block's parameters get their gradients in an inner backward; the same bits */
    char ck[1100];
    snprintf(ck, sizeof ck, "%s/gpt2ckpt", test_tmpdir);
    free(run(2, 0, GPT " --optimizer sgd --lr 0.05 --max-steps 10 --checkpoint-activations --checkpoint %s", ck));
    double wc = model_diff(ck, b, &bitwise);
    printf("  gpt, 2 ranks, activation checkpointing vs not: %s\n", bitwise ? "bitwise equal" : "differ");
    assert_true(bitwise && wc == 0);
    const char *z = "--precision bf16 --opt-level O2 --dropout 0.1 --zero 1 --max-steps 8";
    test_free_all(run(2, 0, GPT " %s --checkpoint %s", z, z1), run(2, 0, GPT " %s --stop-after 3 --checkpoint %s", z, z2), run(2, 0, GPT " %s --resume %s", z, z2));
    double wz = model_diff(z2, z1, &bitwise);
    bool st = same_state_tensors(z1, z2);
    printf("  gpt, 2 ranks, ZeRO-1 O2 bf16 with dropout, stopped at 3 and resumed: weights %s, training state %s\n",
           bitwise ? "bit-exact" : "differ", st ? "bit-exact" : "differs");
    assert_true(bitwise && wz == 0 && st);
}

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

/* the CNN (BatchNorm: buffers follow rank 0) under mpirun with ZeRO-1: one
 * header, one progress line and one summary (rank 0 only), a checkpoint that
 * a single process continues */
static void t_cnn_rank0_output(void **state) {
    (void)state;
    amp_test_skip_per_path("the path changes nothing it asserts");
    char ck[1100];
    snprintf(ck, sizeof ck, "%s/cnn2", test_tmpdir);
    const char *cnn = "train --model cnn --limit 512 --test-limit 200 --batch 64";
    char *out = run(2, 0, "%s --max-steps 6 --log-every 5 --zero 1 --grad-comm bf16 --checkpoint %s", cnn, ck);
    int headers = count(out, "amp train: cnn"), summaries = count(out, "summary: cnn"), bars = count(out, "epoch 1/1 step");
    printf("  amp train --model cnn on 2 ranks (ZeRO-1, bf16 gradients): %d header, %d progress line(s), %d summary in the output\n",
           headers, bars, summaries);
    assert_int_equal(headers, 1);
    assert_int_equal(summaries, 1);
    /* under mpirun the ranks' stdout is a pseudo-terminal (Open MPI's I/O forwarding), yet
     * progress comes as lines (--log-every 5: one line at step 5), never '\r' updates */
    assert_int_equal(bars, 1);
    assert_null(strchr(out, '\r'));
    assert_int_equal(count(out, "5/8"), 1);
    assert_non_null(strstr(out, "world size        2 ranks"));
    assert_non_null(strstr(out, "ZeRO stage 1, gradients sent as bf16"));
    test_free_all(out, run(0, 0, "%s --quiet --max-steps 8 --resume %s", cnn, ck));
    amp_checkpoint *c = amp_checkpoint_open(ck);
    if (!c) fail_msg("%s", amp_last_error());
    assert_int_equal(amp_checkpoint_step(c), 8);
    amp_checkpoint_close(c);
}

/* ---- failures ------------------------------------------------------------------------------ */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* the pid of the process whose environment holds tag and OMPI_COMM_WORLD_RANK=rank, or -1 */
static pid_t find_rank(const char *tag, int rank) {
    char want[64];
    snprintf(want, sizeof want, "OMPI_COMM_WORLD_RANK=%d", rank);
    DIR *d = opendir("/proc");
    if (!d) return -1;
    struct dirent *e;
    pid_t found = -1;
    while ((e = readdir(d)) && found < 0) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0) continue;
        char path[300];
        snprintf(path, sizeof path, "/proc/%ld/environ", pid);
        size_t len = 0;
        char *env = test_read_file(path, &len);
        if (!env) continue;
        bool has_tag = false, has_rank = false;
        for (size_t k = 0; k < len; k += strlen(env + k) + 1) {
            if (!strcmp(env + k, tag)) has_tag = true;
            if (!strcmp(env + k, want)) has_rank = true;
        }
        free(env);
        char cpath[300];
        snprintf(cpath, sizeof cpath, "/proc/%ld/comm", pid);
        char *comm = test_read_file(cpath, NULL);
        if (has_tag && has_rank && comm && !strncmp(comm, "amp", 3)) found = (pid_t)pid;
        free(comm);
    }
    closedir(d);
    return found;
}

/* kill -9 one rank mid-run: the other exits non-zero within a bounded time, naming it; the checkpoint is intact */
static void t_kill_one_rank(void **state) {
    (void)state;
    amp_test_skip_per_path("the path changes nothing it asserts");
    char ck[1100], outp[1100], tag[128];
    snprintf(ck, sizeof ck, "%s/killed", test_tmpdir);
    snprintf(outp, sizeof outp, "%s/killed.out", test_tmpdir);
    snprintf(tag, sizeof tag, "AMP_TEST_KILL_TAG=%ld_%d", (long)getpid(), rand());
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s %s train --quiet --model mlp --limit 2048 --test-limit 100 --batch 32 --epochs 1000 "
                              "--checkpoint %s --save-every 10 < /dev/null > %s 2>&1",
             tag, test_mpirun_prefix(2), AMP_CLI_PATH, ck, outp);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    /* wait for a checkpoint, then a few more steps */
    char spath[1200];
    snprintf(spath, sizeof spath, "%s/training_state.safetensors", ck);
    double t0 = now_s();
    int status = 0;
    while (access(spath, F_OK) != 0 && now_s() - t0 < 120) {
        if (waitpid(child, &status, WNOHANG) == child) {
            char *o = test_read_file(outp, NULL);
            fail_msg("the run ended (status %d) before its first checkpoint:\n%s", status, o ? o : "");
        }
        usleep(50000);
    }
    if (access(spath, F_OK) != 0) {
        kill(child, SIGKILL);
        char *o = test_read_file(outp, NULL);
        fail_msg("no checkpoint after %.0f s:\n%s", now_s() - t0, o ? o : "");
    }
    usleep(300000);
    pid_t victim = find_rank(tag, 1);
    assert_true(victim > 0);
    double tk = now_s();
    assert_int_equal(kill(victim, SIGKILL), 0);
    pid_t w = 0;
    while ((w = waitpid(child, &status, WNOHANG)) == 0 && now_s() - tk < 60) usleep(20000);
    double took = now_s() - tk;
    if (w == 0) { /* still running: end it and fail */
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        fail_msg("mpirun still running %.1f s after rank 1 was killed", took);
    }
    char *out = test_read_file(outp, NULL);
    printf("  rank 1 killed with SIGKILL: mpirun exited with status %d after %.2f s\n",
           WIFEXITED(status) ? WEXITSTATUS(status) : -1, took);
    assert_true(!WIFEXITED(status) || WEXITSTATUS(status) != 0);
    assert_true(took < 30.0);
    assert_non_null(out);
    assert_non_null(strstr(out, "rank 1")); /* Open MPI: "process rank 1 with PID ... exited on signal 9" */
    free(out);
    /* no rank left behind */
    assert_true(find_rank(tag, 0) < 0);
    /* the last good checkpoint opens and validates */
    amp_checkpoint *c = amp_checkpoint_open(ck);
    if (!c) fail_msg("%s", amp_last_error());
    int64_t at = amp_checkpoint_step(c);
    assert_true(at >= 10 && at % 10 == 0);
    amp_checkpoint_close(c);
    /* and resumes (on one process) */
    free(run(0, 0, "train --quiet --model mlp --limit 2048 --test-limit 100 --batch 32 --epochs 1000 --resume %s --stop-after %lld", ck,
             (long long)at + 5));
}

/* a rank that stops answering (SIGSTOP: no death for mpirun to notice) is
 * named by the others' watchdog once AMP_DIST_TIMEOUT passes, and the run
 * ends. Rank 1 is stopped once training is under way (a first checkpoint is
 * written): a rank stopped inside MPI_Init would leave the others waiting in
 * MPI_Init, which has no timeout (slow starts, as under the sanitizers, hit that). */
static void t_stalled_rank_times_out(void **state) {
    (void)state;
    amp_test_skip_per_path("the path changes nothing it asserts");
    char outp[1100], tag[128], ck[1100], spath[1200];
    snprintf(outp, sizeof outp, "%s/stalled.out", test_tmpdir);
    snprintf(ck, sizeof ck, "%s/stalled", test_tmpdir);
    snprintf(spath, sizeof spath, "%s/training_state.safetensors", ck);
    snprintf(tag, sizeof tag, "AMP_TEST_STALL_TAG=%ld_%d", (long)getpid(), rand());
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s AMP_DIST_TIMEOUT=3 %s %s train --quiet --model mlp --limit 2048 --test-limit 100 --batch 32 "
                              "--epochs 1000 --checkpoint %s --save-every 5 < /dev/null > %s 2>&1",
             tag, test_mpirun_prefix(2), AMP_CLI_PATH, ck, outp);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    pid_t victim = -1;
    double t0 = now_s();
    int status = 0;
    while ((access(spath, F_OK) != 0 || (victim = find_rank(tag, 1)) < 0) && now_s() - t0 < 120) {
        if (waitpid(child, &status, WNOHANG) == child) {
            char *o = test_read_file(outp, NULL);
            fail_msg("the run ended (status %d) before it was training on rank 1:\n%s", status, o ? o : "");
        }
        usleep(50000);
    }
    if (victim < 0) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        char *o = test_read_file(outp, NULL);
        fail_msg("no checkpoint or no rank 1 after %.0f s:\n%s", now_s() - t0, o ? o : "");
    }
    double ts = now_s();
    assert_int_equal(kill(victim, SIGSTOP), 0);
    pid_t w = 0;
    while ((w = waitpid(child, &status, WNOHANG)) == 0 && now_s() - ts < 90) usleep(20000);
    double took = now_s() - ts;
    if (w == 0) {
        kill(victim, SIGKILL);
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        fail_msg("mpirun still running %.1f s after rank 1 stopped", took);
    }
    char *out = test_read_file(outp, NULL);
    printf("  rank 1 stopped (SIGSTOP), AMP_DIST_TIMEOUT=3: run ended with status %d after %.2f s\n",
           WIFEXITED(status) ? WEXITSTATUS(status) : -1, took);
    assert_true(!WIFEXITED(status) || WEXITSTATUS(status) != 0);
    assert_true(took < 45.0);
    assert_non_null(out);
    if (!strstr(out, "no data from rank(s) 1")) fail_msg("no watchdog message naming rank 1:\n%s", out);
    free(out);
    pid_t left = find_rank(tag, 1);
    if (left > 0) kill(left, SIGKILL);
    assert_true(left < 0);
}

/* a rank that fails with an error ends the run on every rank, naming itself */
static void t_rank_error_ends_run(void **state) {
    (void)state;
    amp_test_skip_per_path("the path changes nothing it asserts");
    /* MPMD: rank 1 is given a checkpoint directory that does not exist to resume from */
    char args[2048];
    snprintf(args, sizeof args, "train --quiet --model mlp --limit 512 --batch 32 --epochs 100 : -np 1 %s train --quiet --model mlp "
                                "--limit 512 --batch 32 --epochs 100 --resume %s/no_such_dir", AMP_CLI_PATH, test_tmpdir);
    char pre[1200];
    snprintf(pre, sizeof pre, "%s", test_mpirun_prefix(1));
    char *out = NULL, *err = NULL;
    double t0 = now_s();
    int rc = test_run_cli(pre, args, &out, &err);
    double took = now_s() - t0;
    printf("  rank 1 failing at start: exit %d after %.2f s\n", rc, took);
    assert_true(rc != 0);
    assert_true(took < 60);
    assert_non_null(strstr(err, "rank 1 of 2"));
    assert_non_null(strstr(err, "no_such_dir"));
    test_free_all(out, err);
}

/* ---- ranks that disagree (issue 23, defects 3 and 4) -----------------------------------------------
 * MPMD runs (`mpirun -np 1 amp ARGS0 : -np 1 amp ARGS1`) whose ranks would
 * call different collectives. Each must end with an error on every rank
 * naming what differs, never a crash, a hang or a silent exit 0. */
static void both_ranks_fail(const char *args0, const char *args1, const char *const *needles, int nneedles) {
    char args[4096], pre[1400];
    snprintf(args, sizeof args, "%s : -np 1 %s %s", args0, AMP_CLI_PATH, args1);
    snprintf(pre, sizeof pre, "AMP_DIST_TIMEOUT=60 %s", test_mpirun_prefix(1));
    char *out = NULL, *err = NULL;
    double t0 = now_s();
    int rc = test_run_cli(pre, args, &out, &err);
    double took = now_s() - t0;
    printf("  rank 0: amp %s\n  rank 1: amp %s\n  -> exit %d after %.2f s\n%s", args0, args1, rc, took, err);
    if (rc == 0) fail_msg("exit 0\nstdout:\n%s\nstderr:\n%s", out, err);
    if (strstr(err, "signal") || strstr(err, "Segmentation")) fail_msg("a rank crashed:\n%s", err);
    /* every rank reports, and the report names what each rank did */
    for (int r = 0; r < 2; r++) {
        char who[64];
        snprintf(who, sizeof who, "amp: error: rank %d of 2", r);
        if (!strstr(err, who)) fail_msg("no error from rank %d:\n%s", r, err);
    }
    for (int i = 0; i < nneedles; i++)
        if (!strstr(err, needles[i])) fail_msg("expected \"%s\" in:\n%s", needles[i], err);
    test_free_all(out, err);
}

/* different --max-steps: one rank would stop training while the other starts another step;
 * found before step 1 and named (defect 4), never met as collectives that differ */
static void t_ranks_differ_max_steps(void **state) {
    (void)state;
    amp_test_skip_per_path("the path changes nothing it asserts");
    const char *n[] = {"options or data differ between ranks", "--max-steps: rank 0 has 5, rank 1 has 10"};
    both_ranks_fail(COMMON " --epochs 2 --max-steps 5", COMMON " --epochs 2 --max-steps 10", n, 2);
}

/* --eval-every on one rank only: its evaluation would meet the other's gradient averaging */
static void t_ranks_differ_eval_every(void **state) {
    (void)state;
    amp_test_skip_per_path("the path changes nothing it asserts");
    const char *n[] = {"--eval-every: rank 0 has 2, rank 1 has 0"};
    both_ranks_fail(GPT " --max-steps 4 --eval-every 2", GPT " --max-steps 4", n, 1);
}

/* ranks resuming checkpoints of different steps */
static void t_ranks_differ_resume(void **state) {
    (void)state;
    amp_test_skip_per_path("the path changes nothing it asserts");
    char a[1100], b[1100];
    snprintf(a, sizeof a, "%s/resume_at3", test_tmpdir);
    snprintf(b, sizeof b, "%s/resume_at6", test_tmpdir);
    test_free_all(run(0, 0, COMMON " --max-steps 10 --stop-after 3 --checkpoint %s", a), run(0, 0, COMMON " --max-steps 10 --stop-after 6 --checkpoint %s", b));
    char a0[1400], a1[1400];
    snprintf(a0, sizeof a0, COMMON " --max-steps 10 --resume %s", a);
    snprintf(a1, sizeof a1, COMMON " --max-steps 10 --resume %s", b);
    const char *n[] = {"--resume: rank 0 has step 3, checkpoint_id", "rank 1 has step 6, checkpoint_id", "resume_at3)", "resume_at6)"};
    both_ranks_fail(a0, a1, n, 4);
}

/* (defect 4) ranks that disagree on an option that changes the math or the data: refused
 * before step 1 on every rank, naming the option and both values */
static void t_ranks_differ_options(void **state) {
    (void)state;
    amp_test_skip_per_path("the path changes nothing it asserts");
    static const struct {
        const char *common, *a, *b, *needle;
    } cases[] = {
        {COMMON " --max-steps 3", "--lr 0.001", "--lr 0.002", "--lr: rank 0 has 0.001, rank 1 has 0.002"},
        {COMMON " --max-steps 3", "--precision bf16", "--precision fp32", "--precision/--opt-level/--policy: rank 0 has bf16"},
        {"train --quiet --model mlp --limit 1280 --test-limit 500 --max-steps 3", "--batch 64", "--batch 32",
         "--batch: rank 0 has 64, rank 1 has 32"},
        {COMMON " --max-steps 3", "--seed 1", "--seed 2", "--seed: rank 0 has 1, rank 1 has 2"},
        {GPT " --max-steps 2", "--n-head 2", "--n-head 4", "--n-head: rank 0 has 2, rank 1 has 4"},
        {GPT " --max-steps 2", "--grad-clip 1", "--grad-clip 0.5", "--grad-clip: rank 0 has 1, rank 1 has 0.5"},
        {GPT " --max-steps 2", "--dropout 0", "--dropout 0.1", "--dropout: rank 0 has 0, rank 1 has 0.1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char a0[1400], a1[1400];
        snprintf(a0, sizeof a0, "%s %s", cases[i].common, cases[i].a);
        snprintf(a1, sizeof a1, "%s %s", cases[i].common, cases[i].b);
        const char *n[] = {"options or data differ between ranks", cases[i].needle};
        both_ranks_fail(a0, a1, n, 2);
    }
}

/* --data: the content is compared, not the path: another text is refused (naming both
 * files), a copy of the same text at another path trains */
static void t_ranks_differ_data(void **state) {
    (void)state;
    amp_test_skip_per_path("the path changes nothing it asserts");
    char p1[1100], p2[1100], p3[1100];
    snprintf(p1, sizeof p1, "%s/text_a.txt", test_tmpdir);
    snprintf(p2, sizeof p2, "%s/text_b.txt", test_tmpdir);
    snprintf(p3, sizeof p3, "%s/text_a_copy.txt", test_tmpdir);
    const char *paths[] = {p1, p2, p3};
    for (int k = 0; k < 3; k++) {
        FILE *f = fopen(paths[k], "w");
        assert_non_null(f);
        for (int i = 0; i < 400; i++) fprintf(f, "%s line %d of a small text to train on.\n", k == 1 ? "Another" : "The first", i);
        assert_int_equal(fclose(f), 0);
    }
    char a0[1400], a1[1400];
    snprintf(a0, sizeof a0, GPT " --max-steps 2 --data %s", p1);
    snprintf(a1, sizeof a1, GPT " --max-steps 2 --data %s", p2);
    const char *n[] = {"--data: rank 0 has ", "text_a.txt)", ", rank 1 has ", "text_b.txt)"};
    both_ranks_fail(a0, a1, n, 4);
    /* the same text under another name, and options that may differ per rank */
    char args[4096], pre[1400];
    snprintf(args, sizeof args, GPT " --max-steps 2 --data %s --log-every 1 --threads 1 : -np 1 %s " GPT
                                " --max-steps 2 --data %s --metrics %s/rank1.csv --threads 2 --dist-timeout 100 "
                                "--checkpoint-activations --no-overlap",
             p1, AMP_CLI_PATH, p3, test_tmpdir);
    snprintf(pre, sizeof pre, "%s", test_mpirun_prefix(1));
    char *out = NULL, *err = NULL;
    int rc = test_run_cli(pre, args, &out, &err);
    if (rc != 0) fail_msg("the same text at two paths: exit %d\n%s\n%s", rc, out, err);
    test_free_all(out, err);
}

static void t_flags_and_version(void **state) {
    (void)state;
    amp_test_skip_per_path("the path changes nothing it asserts");
    char *out = run(0, 0, "--version");
    assert_non_null(strstr(out, "distributed: MPI"));
    free(out);
    char *o2 = NULL, *e2 = NULL;
    assert_int_equal(test_run_cli(NULL, "train --zero 2", &o2, &e2), 2);
    assert_non_null(strstr(e2, "--zero"));
    test_free_all(o2, e2);
    assert_int_equal(test_run_cli(NULL, "train --grad-comm fp8", &o2, &e2), 2);
    test_free_all(o2, e2);
    /* one process: the flags change nothing and the summary has no distributed lines */
    out = run(0, 0, COMMON " --max-steps 3 --zero 1 --grad-comm bf16");
    assert_null(strstr(out, "world size"));
    free(out);
    /* 2 ranks, ZeRO-1, bf16 gradients, no overlap: the summary says so; the optimizer
     * memory per rank is half of the 1-process figure */
    out = run(2, 0, COMMON " --max-steps 3 --zero 1 --grad-comm bf16 --no-overlap");
    assert_non_null(strstr(out, "ZeRO stage 1, gradients sent as bf16"));
    assert_non_null(strstr(out, "overlap off"));
    assert_non_null(strstr(out, " 0 of "));
    free(out);
}

int main(void) {
    if (!test_mpirun_prefix(2)) {
        printf("amp was built without MPI: skipped\n");
        return 77;
    }
    return AMP_TEST_RUN_FIXTURES(test_tmpdir_setup, test_tmpdir_teardown, t_two_ranks_equal_one_process,
                                 t_resume_two_ranks_bitexact, t_resume_other_world_size, t_gpt, t_cnn_rank0_output,
                                 t_kill_one_rank, t_stalled_rank_times_out, t_rank_error_ends_run, t_flags_and_version,
                                 t_ranks_differ_max_steps, t_ranks_differ_eval_every, t_ranks_differ_resume,
                                 t_ranks_differ_options, t_ranks_differ_data);
}

/* The promises of `amp train`'s one training loop, kept for every model
 * (mlp, cnn and the GPT go through the same loop, src/cli/trainer.c):
 * the checkpoint directory is locked for the whole run (a second run on it
 * stops at once), every write of the metrics file is checked, a resume
 * with another schedule or warmup warns, --inject-nonfinite-every poisons
 * gradients (and the steps are skipped). */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_support.h"

/* small and fast: 2 layers, 64 wide, block 32, batch 8 */
#define GPT "--model gpt --n-layer 2 --n-head 4 --n-embd 64 --block-size 32 --batch 8 --threads 2 --eval-windows 16"
#define MLP "--model mlp --limit 512 --test-limit 100 --batch 64 --threads 2"

static char *g_dir;

static int setup(void **state) {
    (void)state;
    g_dir = test_mkdtemp();
    return g_dir ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    test_rmtree(g_dir);
    free(g_dir);
    return 0;
}

/* Runs `amp ARGS`; fails unless the exit status is want; returns stdout (caller frees), *err stderr when asked. */
static char *amp(int want, char **err, const char *fmt, ...) {
    char args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char *out = NULL, *e = NULL;
    int rc = test_run_cli(NULL, args, &out, &e);
    if (rc != want) fail_msg("amp %s: exit %d (expected %d)\nstdout:\n%s\nstderr:\n%s", args, rc, want, out, e);
    if (err) *err = e;
    else free(e);
    return out;
}

static void expect_in(const char *text, const char *needle, const char *what) {
    if (!strstr(text, needle)) fail_msg("%s lacks '%s':\n%s", what, needle, text);
}

/* ---- a child `amp train` we can signal ---------------------------------------------- */
typedef struct {
    pid_t pid;
    char out[1200], err[1200];
} child;

/* Starts `amp ARGS` with stdout and stderr in files of g_dir (name.out, name.err). */
static void spawn(child *c, const char *name, const char *fmt, ...) {
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(c->out, sizeof c->out, "%s/%s.out", g_dir, name);
    snprintf(c->err, sizeof c->err, "%s/%s.err", g_dir, name);
    unlink(c->out);
    unlink(c->err);
    snprintf(cmd, sizeof cmd, "exec %s %s < /dev/null > %s 2> %s", AMP_CLI_PATH, args, c->out, c->err);
    fflush(NULL);
    c->pid = fork();
    assert_true(c->pid >= 0);
    if (c->pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
}

/* Waits until the child's stdout holds needle (a guard of 5 minutes against a hang, not a timing). */
static void wait_for_output(child *c, const char *needle) {
    for (int i = 0; i < 30000; i++) {
        char *o = test_read_file(c->out, NULL);
        bool found = o && strstr(o, needle);
        free(o);
        if (found) return;
        int st;
        if (waitpid(c->pid, &st, WNOHANG) == c->pid) {
            char *e = test_read_file(c->err, NULL);
            fail_msg("the child ended (status %d) before printing '%s':\n%s", st, needle, e ? e : "");
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fail_msg("no '%s' from the child after 5 minutes", needle);
}

/* Waits for the child's end; returns its exit status (-signal if a signal ended it). */
static int wait_child(child *c) {
    int st;
    while (waitpid(c->pid, &st, 0) < 0)
        if (errno != EINTR) fail_msg("waitpid: %s", strerror(errno));
    return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? -WTERMSIG(st) : -1000;
}

/* ---- defect 1: one run per checkpoint directory, for the whole run ------------------- */
static void t_lock_whole_run(void **s) {
    (void)s;
    const char *models[] = {GPT, MLP " --epochs 1000"};
    for (int k = 0; k < 2; k++) {
        char dir[1200];
        snprintf(dir, sizeof dir, "%s/lock%d", g_dir, k);
        child a;
        char name[32];
        snprintf(name, sizeof name, "lock%d", k);
        spawn(&a, name, "train %s --max-steps 100000 --log-every 1 --checkpoint %s", models[k], dir);
        wait_for_output(&a, "step 1/"); /* it holds the directory from its start */
        char *err;
        free(amp(1, &err, "train %s --max-steps 2 --quiet --checkpoint %s", models[k], dir));
        expect_in(err, "is in use by another process", "the second run's error");
        free(err);
        kill(a.pid, SIGKILL);
        wait_child(&a);
    }
}

/* ---- defect 5: every write of the metrics file is checked, the first before step 1 ---- */
static void t_metrics_full_disk(void **s) {
    (void)s;
    struct stat sb;
    if (stat("/dev/full", &sb) != 0) {
        print_message("no /dev/full here: skipped\n");
        return;
    }
    const char *models[] = {GPT, MLP};
    for (int k = 0; k < 2; k++) {
        char *err, *out = amp(1, &err, "train %s --max-steps 3 --log-every 1 --metrics /dev/full", models[k]);
        expect_in(err, "cannot write the metrics file /dev/full", "stderr");
        if (strstr(out, "step 1/")) fail_msg("%s: the full disk was found after training started:\n%s", models[k], out);
        free(out);
        free(err);
    }
}

/* ---- defect 12: resume warnings and non-finite injection hold for the GPT too ---------- */
static void t_gpt_resume_warnings(void **s) {
    (void)s;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/warn", g_dir);
    free(amp(0, NULL, "train " GPT " --max-steps 6 --stop-after 3 --quiet --checkpoint %s", dir));
    char *err;
    free(amp(0, &err, "train " GPT " --max-steps 6 --quiet --schedule constant --resume %s --checkpoint %s/w1", dir, g_dir));
    expect_in(err, "warning: --schedule constant differs from the checkpoint's cosine", "stderr");
    free(err);
    /* 6 steps warm up for 0 (10% of the run) unless --warmup says otherwise */
    free(amp(0, &err, "train " GPT " --max-steps 6 --quiet --warmup 2 --resume %s --checkpoint %s/w2", dir, g_dir));
    expect_in(err, "warning: --warmup: this run warms up for 2 steps, the checkpoint's run for 0", "stderr");
    free(err);
    /* the same settings: no warning */
    free(amp(0, &err, "train " GPT " --max-steps 6 --quiet --resume %s --checkpoint %s/w3", dir, g_dir));
    if (strstr(err, "warning")) fail_msg("an unchanged resume warned:\n%s", err);
    free(err);
}

static void t_inject_nonfinite(void **s) {
    (void)s;
    const char *models[] = {GPT, MLP, GPT " --precision fp16", GPT " --precision bf16 --opt-level O2"};
    for (int k = 0; k < 4; k++) {
        char *out = amp(0, NULL, "train %s --max-steps 6 --quiet --inject-nonfinite-every 2", models[k]);
        if (!strstr(out, "6 (3 skipped for inf/nan gradients)")) fail_msg("%s: not 3 of 6 steps skipped:\n%s", models[k], out);
        free(out);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_lock_whole_run),
        cmocka_unit_test(t_metrics_full_disk),
        cmocka_unit_test(t_gpt_resume_warnings),
        cmocka_unit_test(t_inject_nonfinite),
    };
    amp_test_prepare();
    return cmocka_run_group_tests(tests, setup, teardown);
}

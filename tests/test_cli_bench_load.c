/* amp bench load (the busy-machine benchmark), its structure only, never a
 * timing: one round of the mlp writes the table's two rows (none, 1 busy)
 * and the JSON's cells, each with the three configurations' step times and
 * the ratios that are their quotients; the busy loop it forks is gone when
 * it exits; bad options are usage errors naming the option; a busy loop
 * that cannot be started (fork refused: RLIMIT_NPROC) is an error, exit 1,
 * with the loops already started stopped (the table said "N busy" beside
 * fewer). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_support.h"

/* the busy loops the benchmark reported starting, each gone (killed and reaped) */
static int busy_loops_left(const char *err, int *started) {
    int left = 0;
    *started = 0;
    for (const char *p = err; (p = strstr(p, "busy loop ")); p++) {
        long pid;
        if (sscanf(p, "busy loop %ld started", &pid) != 1) continue;
        (*started)++;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) left++;
    }
    return left;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v)) fail_msg("JSON has no number '%s'", k);
    return v->valuedouble;
}

static void t_one_round(void **s) {
    (void)s;
    char *dir = test_mkdtemp(), args[1024], json[600];
    snprintf(json, sizeof json, "%s/load.json", dir);
    snprintf(args, sizeof args, "bench load --model mlp --rounds 1 --mlp-steps 2 --threads 2 --json %s", json);
    char *out, *err;
    int rc = test_run_cli(NULL, args, &out, &err);
    if (rc != 0) fail_msg("exit %d\n%s\n%s", rc, out, err);
    assert_non_null(strstr(out, "| model | busy processes | 1 thread | 2 fixed | 2 adaptive | adaptive / 1 thread |"));
    assert_non_null(strstr(out, "| mlp fp32 | none |"));
    assert_non_null(strstr(out, "| mlp fp32 | 1 busy |"));
    assert_non_null(strstr(out, "the bar: at most"));
    char *text = test_read_file(json, NULL);
    assert_non_null(text);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    assert_int_equal((int)num(root, "threads"), 2);
    assert_int_equal((int)num(root, "busy_processes"), 1);
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(root, "models");
    assert_int_equal(cJSON_GetArraySize(models), 1);
    const cJSON *cells = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(models, 0), "cells");
    assert_int_equal(cJSON_GetArraySize(cells), 2);
    for (int c = 0; c < 2; c++) {
        const cJSON *o = cJSON_GetArrayItem(cells, c);
        assert_int_equal((int)num(o, "busy_processes"), c);
        double ms[3];
        const char *conf[] = {"one_thread", "fixed", "adaptive"};
        for (int k = 0; k < 3; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, conf[k]);
            assert_non_null(v);
            ms[k] = num(v, "ms_per_step");
            assert_true(ms[k] > 0 && num(v, "ms_per_step_min") == ms[k] && num(v, "ms_per_step_max") == ms[k]);
            double t = num(v, "threads_mean");
            assert_true(t >= 1 && t <= 2);
        }
        assert_int_equal((int)num(cJSON_GetObjectItemCaseSensitive(o, "one_thread"), "threads_mean"), 1);
        assert_int_equal((int)num(cJSON_GetObjectItemCaseSensitive(o, "fixed"), "threads_mean"), 2);
        /* one round: each ratio is the quotient of that round's steps */
        assert_close(num(o, "adaptive_over_one_thread"), ms[2] / ms[0], 1e-12, 0, "adaptive / 1 thread");
        assert_close(num(o, "fixed_over_one_thread"), ms[1] / ms[0], 1e-12, 0, "fixed / 1 thread");
        assert_close(num(o, "adaptive_over_fixed"), ms[2] / ms[1], 1e-12, 0, "adaptive / fixed");
    }
    int started;
    assert_int_equal(busy_loops_left(err, &started), 0);
    assert_int_equal(started, 1); /* --rounds 1: the busy half once */
    cJSON_Delete(root);
    test_free_all(text, out, err);
    test_rmtree(dir);
    free(dir);
}

static void t_bad_options(void **s) {
    (void)s;
    const char *bad[] = {"--rounds 0", "--busy 0", "--threads 1", "--model cnn", "--mlp-steps x", "--gpt-steps"};
    for (int i = 0; i < 6; i++) {
        char args[128], *out, *err;
        snprintf(args, sizeof args, "bench load %s", bad[i]);
        int rc = test_run_cli(NULL, args, &out, &err);
        char opt[32];
        sscanf(bad[i], "%31s", opt);
        if (rc != 2 || !strstr(err, opt)) fail_msg("%s: exit %d\n%s", args, rc, err);
        test_free_all(out, err);
    }
    char *out, *err;
    assert_int_equal(test_run_cli(NULL, "bench load --help", &out, &err), 0);
    assert_non_null(strstr(out, "usage: amp bench load"));
    test_free_all(out, err);
}

/* fork refused after two busy loops: RLIMIT_NPROC 4 for a user with no
 * other process (nobody, when the test runs as root; elsewhere skipped) */
static void t_fork_fails(void **s) {
    (void)s;
    if (geteuid() != 0) {
        print_message("not root: cannot run as a user with no other process: skipped\n");
        return;
    }
    char *dir = test_mkdtemp(), out_path[600], err_path[600], cli[600];
    assert_int_equal(chmod(dir, 0777), 0);
    snprintf(out_path, sizeof out_path, "%s/out", dir);
    snprintf(err_path, sizeof err_path, "%s/err", dir);
    /* nobody may not reach the build tree (a clone in a 0700 directory):
     * it runs a copy of amp in the test's own directory */
    snprintf(cli, sizeof cli, "%s/amp", dir);
    test_copy_file(AMP_CLI_PATH, cli);
    assert_int_equal(chmod(cli, 0755), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (!freopen(out_path, "w", stdout) || !freopen(err_path, "w", stderr)) _exit(125);
        if (setgid(65534) != 0 || setuid(65534) != 0) _exit(126);
        struct rlimit rl = {4, 4};
        if (setrlimit(RLIMIT_NPROC, &rl) != 0) _exit(126);
        execl(cli, "amp", "bench", "load", "--model", "mlp", "--rounds", "1", "--busy", "8", "--mlp-steps", "1", "--threads",
              "2", (char *)NULL);
        _exit(127);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    char *out = test_read_file(out_path, NULL), *err = test_read_file(err_path, NULL);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (rc == 126) {
        print_message("cannot become nobody with RLIMIT_NPROC here: skipped\n");
    } else {
        if (rc != 1 || !strstr(err, "bench load: cannot start busy process ") || !strstr(err, "fork: "))
            fail_msg("exit %d (expected 1, naming the busy loop and fork)\nstdout:\n%s\nstderr:\n%s", rc, out, err);
        if (strstr(out, "| mlp fp32 | 8 busy |")) fail_msg("the table claims 8 busy processes:\n%s", out);
        int started;
        assert_int_equal(busy_loops_left(err, &started), 0);
        assert_true(started < 8);
    }
    test_free_all(out, err);
    test_rmtree(dir);
    free(dir);
}

AMP_TEST_MAIN(t_one_round, t_bad_options, t_fork_fails)

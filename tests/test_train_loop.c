/* The promises of `amp train`'s one training loop, kept for every model
 * (mlp, cnn and the GPT go through the same loop, src/cli/trainer.c):
 * the checkpoint directory is locked for the whole run (a second run on it
 * stops at once), every write of the metrics file is checked, a resume
 * with another schedule or warmup warns, --inject-nonfinite-every poisons
 * gradients (and the steps are skipped), and a run that could never save
 * its checkpoint or evaluate stops before step 1 (a missing parent, a
 * directory it cannot write, a symlink loop, a validation split shorter
 * than a window), while a long --data path is no reason not to save;
 * pure fp16 is refused before training; SIGINT and SIGTERM end the current
 * step, save and exit 130 / 143 (under mpirun every rank stops after the
 * same step), and the run resumes from that checkpoint bit for bit; a
 * second signal ends the run at once without a save (the run is held in a
 * progress write on a full pipe, so the two signals cannot merge into one);
 * a stdout reader gone with the same Ctrl-C (tee) does not stop the save;
 * a signal during the last step leaves a complete run, not a stopped one.
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path (the
 * amp processes inherit AMP_CPU): the loop's promises hold on every path.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "amp/amp.h"
#include "test_support.h"

/* small and fast: 2 layers, 64 wide, block 32, batch 8 */
#define GPT "--model gpt --n-layer 2 --n-head 4 --n-embd 64 --block-size 32 --batch 8 --threads 2 --eval-windows 16"
#define MLP "--model mlp --limit 512 --test-limit 100 --batch 64 --threads 2"


static void expect_in(const char *text, const char *needle, const char *what) {
    if (!strstr(text, needle)) fail_msg("%s lacks '%s':\n%s", what, needle, text);
}

/* ---- a child `amp train` we can signal ---------------------------------------------- */
typedef struct {
    pid_t pid;
    char out[1200], err[1200];
} child;

/* Starts `amp ARGS` with stdout and stderr in files of test_tmpdir (name.out, name.err). */
static void spawn(child *c, const char *name, const char *fmt, ...) {
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(c->out, sizeof c->out, "%s/%s.out", test_tmpdir, name);
    snprintf(c->err, sizeof c->err, "%s/%s.err", test_tmpdir, name);
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

/* Starts `amp ARGS` with stdout into a pipe whose read end the test keeps
 * (*rfd) and stderr in a file (c->err). prefill: the pipe shrunk to one page
 * and filled first, so amp's first write of stdout blocks until the test
 * reads (its progress is flushed at each line, the lines before it with it). */
static void spawn_piped(child *c, int *rfd, bool prefill, const char *name, const char *fmt, ...) {
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    c->out[0] = 0;
    snprintf(c->err, sizeof c->err, "%s/%s.err", test_tmpdir, name);
    unlink(c->err);
    int p[2];
    assert_int_equal(pipe(p), 0);
    if (prefill) {
        if (fcntl(p[1], F_SETPIPE_SZ, 4096) < 0) fail_msg("F_SETPIPE_SZ: %s", strerror(errno));
        int fl = fcntl(p[1], F_GETFL);
        assert_int_equal(fcntl(p[1], F_SETFL, fl | O_NONBLOCK), 0);
        char fill[512];
        memset(fill, '#', sizeof fill);
        while (write(p[1], fill, sizeof fill) > 0) {
        }
        if (errno != EAGAIN) fail_msg("filling the pipe: %s", strerror(errno));
        assert_int_equal(fcntl(p[1], F_SETFL, fl), 0); /* amp's writes block */
    }
    snprintf(cmd, sizeof cmd, "exec %s %s < /dev/null 2> %s", AMP_CLI_PATH, args, c->err);
    fflush(NULL);
    c->pid = fork();
    assert_true(c->pid >= 0);
    if (c->pid == 0) {
        close(p[0]);
        if (dup2(p[1], 1) < 0) _exit(126);
        close(p[1]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    *rfd = p[0];
}

/* Reads the pipe into *buf (grown) until it holds needle; fails if the
 * child ends first or nothing comes for 5 minutes (a guard against a hang). */
static void read_until(child *c, int fd, char **buf, size_t *len, const char *needle) {
    for (;;) {
        if (*buf && strstr(*buf, needle)) return;
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 300 * 1000) <= 0) fail_msg("no '%s' from the child after 5 minutes", needle);
        char tmp[4096];
        ssize_t k = read(fd, tmp, sizeof tmp);
        if (k <= 0) {
            char *e = test_read_file(c->err, NULL);
            fail_msg("the child closed its stdout before printing '%s':\n%s", needle, e ? e : "");
        }
        *buf = realloc(*buf, *len + (size_t)k + 1);
        assert_non_null(*buf);
        memcpy(*buf + *len, tmp, (size_t)k);
        *len += (size_t)k;
        (*buf)[*len] = 0;
    }
}

/* Waits until the child's stderr holds needle (the same guard). */
static void wait_for_stderr(child *c, const char *needle) {
    for (int i = 0; i < 30000; i++) {
        char *e = test_read_file(c->err, NULL);
        bool found = e && strstr(e, needle);
        free(e);
        if (found) return;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fail_msg("no '%s' on the child's stderr after 5 minutes", needle);
}

/* Waits for the child's end; returns its exit status (-signal if a signal ended it). */
static int wait_child(child *c) {
    int st;
    while (waitpid(c->pid, &st, 0) < 0)
        if (errno != EINTR) fail_msg("waitpid: %s", strerror(errno));
    return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? -WTERMSIG(st) : -1000;
}

/* The same, failing (the child killed) if it has not ended after 5 minutes:
 * a run held in a write that a signal should have ended would hang the test. */
static int wait_child_guarded(child *c) {
    for (int i = 0; i < 30000; i++) {
        int st;
        pid_t w = waitpid(c->pid, &st, WNOHANG);
        if (w == c->pid) return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? -WTERMSIG(st) : -1000;
        if (w < 0 && errno != EINTR) fail_msg("waitpid: %s", strerror(errno));
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(c->pid, SIGKILL);
    wait_child(c);
    char *e = test_read_file(c->err, NULL);
    fail_msg("the child did not end within 5 minutes of the signal:\n%s", e ? e : "");
    return -1000;
}

/* ---- defect 1: one run per checkpoint directory, for the whole run ------------------- */
static void t_lock_whole_run(void **s) {
    (void)s;
    const char *models[] = {GPT, MLP " --epochs 1000"};
    for (int k = 0; k < 2; k++) {
        char dir[1200];
        snprintf(dir, sizeof dir, "%s/lock%d", test_tmpdir, k);
        child a;
        char name[32];
        snprintf(name, sizeof name, "lock%d", k);
        spawn(&a, name, "train %s --max-steps 100000 --log-every 1 --checkpoint %s", models[k], dir);
        wait_for_output(&a, "step 1/"); /* it holds the directory from its start */
        char *err;
        free(test_run_cli_expect(1, &err, "train %s --max-steps 2 --quiet --checkpoint %s", models[k], dir));
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
        char *err, *out = test_run_cli_expect(1, &err, "train %s --max-steps 3 --log-every 1 --metrics /dev/full", models[k]);
        expect_in(err, "cannot write the metrics file /dev/full", "stderr");
        if (strstr(out, "step 1/")) fail_msg("%s: the full disk was found after training started:\n%s", models[k], out);
        test_free_all(out, err);
    }
}

/* ---- defect 12: resume warnings and non-finite injection hold for the GPT too ---------- */
static void t_gpt_resume_warnings(void **s) {
    (void)s;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/warn", test_tmpdir);
    free(test_run_cli_expect(0, NULL, "train " GPT " --max-steps 6 --stop-after 3 --quiet --checkpoint %s", dir));
    char *err;
    free(test_run_cli_expect(0, &err, "train " GPT " --max-steps 6 --quiet --schedule constant --resume %s --checkpoint %s/w1", dir, test_tmpdir));
    expect_in(err, "warning: --schedule constant differs from the checkpoint's cosine", "stderr");
    free(err);
    /* 6 steps warm up for 0 (10% of the run) unless --warmup says otherwise */
    free(test_run_cli_expect(0, &err, "train " GPT " --max-steps 6 --quiet --warmup 2 --resume %s --checkpoint %s/w2", dir, test_tmpdir));
    expect_in(err, "warning: --warmup: this run warms up for 2 steps, the checkpoint's run for 0", "stderr");
    free(err);
    /* the same settings: no warning */
    free(test_run_cli_expect(0, &err, "train " GPT " --max-steps 6 --quiet --resume %s --checkpoint %s/w3", dir, test_tmpdir));
    if (strstr(err, "warning")) fail_msg("an unchanged resume warned:\n%s", err);
    free(err);
}

static void t_inject_nonfinite(void **s) {
    (void)s;
    const char *models[] = {GPT, MLP, GPT " --precision fp16", GPT " --precision bf16 --opt-level O2"};
    for (int k = 0; k < 4; k++) {
        char *out = test_run_cli_expect(0, NULL, "train %s --max-steps 6 --quiet --inject-nonfinite-every 2", models[k]);
        if (!strstr(out, "6 (3 skipped for inf/nan gradients)")) fail_msg("%s: not 3 of 6 steps skipped:\n%s", models[k], out);
        free(out);
    }
}

/* ---- defect 2: a run that can never save (or evaluate) stops before step 1 ------------------ */
static void write_text(const char *path, int lines, int last_line) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < lines; i++) fprintf(f, "line %d of a text for the trainer, long enough for windows\n", i);
    for (int i = 0; i < last_line; i++) fputc('a' + i % 26, f);
    assert_int_equal(fclose(f), 0);
}

/* Fails unless `amp train ARGS --log-every 1` exits 1 before its first step with stderr naming needle. */
static void expect_refused_before_step1(const char *needle, const char *fmt, ...) {
    char args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char *err, *out = test_run_cli_expect(1, &err, "train %s --log-every 1", args);
    if (strstr(out, "step 1/")) fail_msg("amp train %s: the problem was found after training started:\n%s\n%s", args, out, err);
    expect_in(err, needle, "stderr");
    test_free_all(out, err);
}

static void t_checked_before_step1(void **s) {
    (void)s;
    char file[1200], loop[1200], text[1200];
    snprintf(file, sizeof file, "%s/a_file", test_tmpdir);
    write_text(file, 1, 0);
    snprintf(loop, sizeof loop, "%s/loop", test_tmpdir);
    assert_int_equal(symlink(loop, loop), 0);
    const char *models[] = {GPT, MLP};
    for (int k = 0; k < 2; k++) {
        const char *m = models[k];
        expect_refused_before_step1("/missing/parent", "%s --max-steps 3 --checkpoint %s/missing/parent/ck", m, test_tmpdir);
        expect_refused_before_step1("/proc/self", "%s --max-steps 3 --checkpoint /proc/self", m); /* root cannot write there either */
        expect_refused_before_step1("a_file/ck", "%s --max-steps 3 --checkpoint %s/ck", m, file);
        expect_refused_before_step1("symbolic links", "%s --max-steps 3 --checkpoint %s", m, loop);
    }
    /* the GPT's validation split must hold a window + 1 tokens: a text whose last 10% is inside its last line has none */
    snprintf(text, sizeof text, "%s/no_val.txt", test_tmpdir);
    write_text(text, 300, 3000);
    expect_refused_before_step1("validation split", GPT " --max-steps 3 --data %s", text);
    expect_refused_before_step1("validation split", GPT " --max-steps 3 --eval-every 1 --data %s", text);
}

/* Runs `amp ARGS` as a user file modes stop (nobody when the test runs as
 * root, since they do not stop root), stdout and stderr in files of a
 * directory everyone may write (c->out, c->err); 126 when that user cannot
 * be become. */
static int run_as_other_user(child *c, const char *name, const char *fmt, ...) {
    char args[4096], io[1000], cmd[9000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    assert_int_equal(chmod(test_tmpdir, 0755), 0);
    snprintf(io, sizeof io, "%s/io", test_tmpdir); /* where the other user writes stdout and stderr */
    if (mkdir(io, 0777) != 0) assert_int_equal(errno, EEXIST);
    assert_int_equal(chmod(io, 0777), 0);
    snprintf(c->out, sizeof c->out, "%s/%s.out", io, name);
    snprintf(c->err, sizeof c->err, "%s/%s.err", io, name);
    snprintf(cmd, sizeof cmd, "exec %s %s < /dev/null > %s 2> %s", AMP_CLI_PATH, args, c->out, c->err);
    fflush(NULL);
    c->pid = fork();
    assert_true(c->pid >= 0);
    if (c->pid == 0) {
        if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(126);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return wait_child(c);
}

/* A directory the run cannot create files in although its lock file exists
 * and is writable (left by an earlier run): the directory made read-only by
 * chmod, the run started as a user chmod stops. */
static void t_readonly_dir(void **s) {
    (void)s;
    char dir[1200], lockf[1300];
    snprintf(dir, sizeof dir, "%s/ro", test_tmpdir);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(lockf, sizeof lockf, "%s/.amp.lock", dir);
    write_text(lockf, 0, 0);
    assert_int_equal(chmod(lockf, 0666), 0);
    assert_int_equal(chmod(dir, 0555), 0);
    child c;
    int rc = run_as_other_user(&c, "ro", "train " MLP " --max-steps 3 --log-every 1 --checkpoint %s", dir);
    char *out = test_read_file(c.out, NULL), *err = test_read_file(c.err, NULL);
    if (rc == 126) {
        print_message("cannot become nobody here: skipped\n");
    } else {
        if (rc != 1 || strstr(out, "step 1/")) fail_msg("exit %d; a read-only checkpoint directory not found before step 1:\n%s\n%s", rc, out, err);
        expect_in(err, dir, "stderr");
    }
    test_free_all(out, err);
    chmod(dir, 0755);
}

/* ---- defect 4 of the review: the metrics file of a resumed run ----------------------------
 * It was truncated in place before its kept rows were written back, and a
 * file that could not be read lost every row silently (the run went on
 * with a header only). Now the header and kept rows go to a temporary
 * name, fsync'ed and renamed over; a read error stops the run naming the
 * file, before step 1, the file untouched. */
static void t_metrics_resume_unreadable(void **s) {
    (void)s;
    char work[1200], csv[1300];
    snprintf(work, sizeof work, "%s/mres", test_tmpdir);
    assert_int_equal(mkdir(work, 0777), 0);
    assert_int_equal(chmod(work, 0777), 0);
    snprintf(csv, sizeof csv, "%s/m.csv", work);
    free(test_run_cli_expect(0, NULL, "train " GPT " --max-steps 6 --stop-after 3 --quiet --checkpoint %s/ck --metrics %s", work, csv));
    /* a resume keeps the rows up to its step, the rows after it dropped */
    free(test_run_cli_expect(0, NULL, "train " GPT " --max-steps 6 --stop-after 5 --quiet --resume %s/ck --checkpoint %s/ck5 --metrics %s",
                             work, work, csv));
    free(test_run_cli_expect(0, NULL, "train " GPT " --max-steps 6 --stop-after 4 --quiet --resume %s/ck --checkpoint %s/ck4 --metrics %s",
                             work, work, csv));
    size_t n;
    char *before = test_read_file(csv, &n);
    assert_non_null(before);
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += before[i] == '\n';
    assert_int_equal(lines, 5); /* the header, steps 1-4 */
    assert_true(strstr(before, "\n4,") && !strstr(before, "\n5,"));
    /* unreadable (write-only) for the user the run is: refused, the rows kept */
    assert_int_equal(chmod(csv, 0222), 0);
    child c;
    int rc = run_as_other_user(&c, "mres", "train " GPT " --max-steps 6 --quiet --resume %s/ck --checkpoint %s/ck6 --metrics %s", work, work, csv);
    char *err = test_read_file(c.err, NULL);
    if (rc == 126) {
        print_message("cannot become nobody here: skipped\n");
    } else {
        if (rc != 1 || !strstr(err, "cannot read the metrics file") || !strstr(err, csv))
            fail_msg("exit %d (expected 1, the metrics file named, nothing lost):\n%s", rc, err);
        assert_int_equal(chmod(csv, 0644), 0);
        size_t n2;
        char *after = test_read_file(csv, &n2);
        assert_non_null(after);
        if (n2 != n || memcmp(before, after, n)) fail_msg("the metrics file changed:\n%s", after);
        free(after);
    }
    test_free_all(err, before);
}

/* A --data path of 240 bytes or more used to make every save fail (the
 * data.path value did not fit its 240 bytes): it is stored whole. */
static void t_long_data_path(void **s) {
    (void)s;
    char path[1200], ck[1200];
    snprintf(path, sizeof path, "%s/", test_tmpdir);
    for (int d = 0; d < 3; d++) {
        size_t n = strlen(path);
        memset(path + n, 'a' + d, 100);
        path[n + 100] = 0;
        assert_int_equal(mkdir(path, 0755), 0);
        strcat(path, "/");
    }
    strcat(path, "text.txt");
    assert_true(strlen(path) > 300);
    write_text(path, 400, 0);
    snprintf(ck, sizeof ck, "%s/long", test_tmpdir);
    free(test_run_cli_expect(0, NULL, "train " GPT " --max-steps 2 --quiet --data %s --checkpoint %s", path, ck));
    amp_checkpoint *c = amp_checkpoint_open(ck);
    if (!c) fail_msg("%s", amp_last_error());
    assert_string_equal(amp_checkpoint_meta(c, "data.path"), path);
    amp_checkpoint_close(c);
    char *out = test_run_cli_expect(0, NULL, "train " GPT " --max-steps 3 --data %s --resume %s", path, ck);
    expect_in(out, "resumed from", "stdout");
    free(out);
}

/* ---- defect 12: pure fp16 (fp16 parameters without f32 master weights) is refused at parse time ---- */
static void t_pure_fp16_refused(void **s) {
    (void)s;
    const char *models[] = {GPT, MLP};
    for (int k = 0; k < 2; k++) {
        char *err, *out = test_run_cli_expect(2, &err, "train %s --precision fp16 --opt-level O3 --max-steps 2 --log-every 1", models[k]);
        expect_in(err, "fp16 parameters without f32 master weights", "stderr");
        expect_in(err, "--opt-level O2", "stderr"); /* what to use instead */
        if (strstr(out, "step 1/")) fail_msg("%s: trained:\n%s", models[k], out);
        test_free_all(out, err);
    }
    /* bf16 O3 (f32's range) trains, and so does fp16 O2 */
    test_free_all(test_run_cli_expect(0, NULL, "train " GPT " --precision bf16 --opt-level O3 --max-steps 2 --quiet"), test_run_cli_expect(0, NULL, "train " GPT " --precision fp16 --opt-level O2 --max-steps 2 --quiet"));
    /* a policy with fp16 parameters is O2 (f32 master weights, loss scaling), as amp_initialize applies it:
     * it trains, and the checkpoint's mode says so */
    const char *policies[] = {"params=float16,compute=float16,output=float32", "p=f16,c=f16,o=f16"};
    for (int i = 0; i < 2; i++) {
        char dir[] = "/tmp/amp_policy_XXXXXX";
        if (!mkdtemp(dir)) fail_msg("mkdtemp");
        free(test_run_cli_expect(0, NULL, "train " MLP " --policy %s --max-steps 2 --quiet --checkpoint %s/ck", policies[i], dir));
        char ck[64];
        snprintf(ck, sizeof ck, "%s/ck", dir);
        amp_checkpoint *c = amp_checkpoint_open(ck);
        if (!c) fail_msg("%s", amp_last_error());
        const char *mode = amp_checkpoint_meta(c, "mode");
        if (!mode || !strstr(mode, "O2 ") || !strstr(mode, "master_weights=1") || !strstr(mode, "loss_scaling=1"))
            fail_msg("--policy %s: mode %s", policies[i], mode ? mode : "(none)");
        amp_checkpoint_close(c);
        free(test_run_cli_expect(0, NULL, "train " GPT " --policy %s --max-steps 2 --quiet", policies[i]));
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        assert_int_equal(system(cmd), 0);
    }
}

/* ---- defect 13: SIGINT / SIGTERM finish the step, save and exit 128 + signal ---------------------- */
/* The data sections of two safetensors files and their headers with the checkpoint id masked. */
static void assert_same_file_but_id(const char *a, const char *b) {
    size_t na, nb;
    char *fa = test_read_file(a, &na), *fb = test_read_file(b, &nb);
    if (!fa || !fb) fail_msg("cannot read %s or %s", a, b);
    assert_int_equal(na, nb);
    const char *key = "\"checkpoint_id\":\"";
    assert_true(na > 8);
    char *ia = strstr(fa + 8, key), *ib = strstr(fb + 8, key); /* the JSON header after its u64 length */
    assert_non_null(ia);
    assert_non_null(ib);
    memset(ia + strlen(key), '0', 16);
    memset(ib + strlen(key), '0', 16);
    if (memcmp(fa, fb, na)) fail_msg("%s and %s differ beyond the checkpoint id", a, b);
    test_free_all(fa, fb);
}

static void assert_same_checkpoint_files(const char *a, const char *b) {
    const char *files[] = {"model.safetensors", "training_state.safetensors"};
    for (int k = 0; k < 2; k++) {
        char pa[1300], pb[1300];
        snprintf(pa, sizeof pa, "%s/%s", a, files[k]);
        snprintf(pb, sizeof pb, "%s/%s", b, files[k]);
        assert_same_file_but_id(pa, pb);
    }
}

static int64_t checkpoint_step(const char *dir) {
    amp_checkpoint *c = amp_checkpoint_open(dir);
    if (!c) fail_msg("%s", amp_last_error());
    int64_t step = amp_checkpoint_step(c);
    amp_checkpoint_close(c);
    return step;
}

static void signal_case(const char *model, int sig) {
    static int n;
    char dir[1200], straight[1200], name[32];
    snprintf(dir, sizeof dir, "%s/sig%d", test_tmpdir, n);
    snprintf(straight, sizeof straight, "%s/sig%d_straight", test_tmpdir, n);
    snprintf(name, sizeof name, "sig%d", n++);
    /* a long run: the schedule spans 2000 steps whoever stops it */
    const char *len = "--max-steps 2000 --epochs 1000";
    const char *m = strcmp(model, "gpt") ? MLP : GPT " --dropout 0.1";
    child c;
    spawn(&c, name, "train %s %s --log-every 1 --checkpoint %s --metrics %s.csv", m, strcmp(model, "gpt") ? len : "--max-steps 2000",
          dir, dir);
    wait_for_output(&c, "step 1/");
    kill(c.pid, sig);
    int rc = wait_child(&c);
    char *err = test_read_file(c.err, NULL);
    if (rc != 128 + sig) fail_msg("%s: exit %d after signal %d, expected %d:\n%s", model, rc, sig, 128 + sig, err);
    expect_in(err, sig == SIGINT ? "SIGINT" : "SIGTERM", "stderr");
    expect_in(err, "--resume", "stderr"); /* how to continue */
    free(err);
    int64_t at = checkpoint_step(dir);
    assert_true(at >= 1);
    /* every step's metrics row was written */
    char csv[1300];
    snprintf(csv, sizeof csv, "%s.csv", dir);
    char *rows = test_read_file(csv, NULL);
    assert_non_null(rows);
    int64_t lines = 0;
    for (char *p = rows; *p; p++) lines += *p == '\n';
    assert_int_equal(lines, at + 1);
    free(rows);
    /* resumed to two steps later: the bits of a run that was never stopped */
    char *out = test_run_cli_expect(0, NULL, "train %s %s --stop-after %lld --quiet --resume %s", m, strcmp(model, "gpt") ? len : "--max-steps 2000",
                    (long long)at + 2, dir);
    free(out);
    free(test_run_cli_expect(0, NULL, "train %s %s --stop-after %lld --quiet --checkpoint %s", m, strcmp(model, "gpt") ? len : "--max-steps 2000",
             (long long)at + 2, straight));
    assert_int_equal(checkpoint_step(dir), at + 2);
    assert_same_checkpoint_files(dir, straight);
    print_message("%s: signal %d after step %lld, saved, resumed bit for bit\n", model, sig, (long long)at);
}

static void t_signals(void **s) {
    (void)s;
    signal_case("gpt", SIGINT);
    signal_case("gpt", SIGTERM);
    signal_case("mlp", SIGINT);
    signal_case("mlp", SIGTERM);
}


/* A run without --checkpoint stopped by a signal says nothing was kept and
 * how a run that saves continues, no "--resume DIR" of a directory it never had. */
static void t_signal_nothing_kept(void **s) {
    (void)s;
    child c;
    spawn(&c, "sig_nosave", "train " MLP " --max-steps 2000 --epochs 1000 --log-every 1");
    wait_for_output(&c, "step 1/");
    kill(c.pid, SIGINT);
    int rc = wait_child(&c);
    char *err = test_read_file(c.err, NULL);
    if (rc != 130 || !strstr(err, "amp train: stopped by SIGINT after step ") ||
        !strstr(err, "; without --checkpoint DIR nothing is kept (a run that saves can be continued with --resume DIR)") ||
        strstr(err, "holds that step"))
        fail_msg("exit %d (expected 130, saying nothing is kept):\n%s", rc, err);
    free(err);
}

/* ---- defect 1 of the review: Ctrl-C on `amp train ... | tee log` ------------------------
 * SIGINT reaches the whole process group: tee dies with amp, and amp's next
 * progress write raised SIGPIPE and killed it (exit 141) before the save. A
 * closed reader now stops the progress output only: the run finishes its
 * step, saves and exits 130. */
static void t_signal_closed_pipe(void **s) {
    (void)s;
    for (int k = 0; k < 3; k++) {
        /* 0, 1: the reader closes, then the signal (tee's case), GPT and mlp;
         * 2: the reader closes, amp goes on without progress, later the signal */
        const char *m = k == 1 ? MLP " --epochs 1000" : GPT;
        char dir[1200], name[32];
        snprintf(dir, sizeof dir, "%s/pipe%d", test_tmpdir, k);
        snprintf(name, sizeof name, "pipe%d", k);
        child c;
        int fd;
        spawn_piped(&c, &fd, false, name, "train %s --max-steps 100000 --log-every 1 --checkpoint %s", m, dir);
        char *buf = NULL;
        size_t len = 0;
        read_until(&c, fd, &buf, &len, "step 1/");
        free(buf);
        close(fd);
        if (k == 2) wait_for_stderr(&c, "training goes on without it");
        kill(c.pid, SIGINT);
        int rc = wait_child(&c);
        char *err = test_read_file(c.err, NULL);
        if (rc != 130) fail_msg("%s: exit %d after SIGINT with its stdout's reader gone (expected 130, saved):\n%s", m, rc, err);
        expect_in(err, "stopped by SIGINT", "stderr");
        free(err);
        assert_true(checkpoint_step(dir) >= 1);
    }
}

/* Waits until the child's main thread is blocked writing its stdout (fd 1),
 * as /proc/PID/syscall shows it: then it is inside a progress write the
 * test holds up (spawn_piped's prefill). Skips (false) where that file
 * cannot be read. */
static bool wait_blocked_in_stdout_write(child *c) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/syscall", (long)c->pid);
    for (int i = 0; i < 30000; i++) {
        char *t = test_read_file(path, NULL);
        if (!t) return false;
        long nr = -1;
        unsigned long fd = 99;
        bool in = sscanf(t, "%ld 0x%lx", &nr, &fd) == 2 && nr == SYS_write && fd == 1;
        free(t);
        if (in) return true;
        int st;
        if (waitpid(c->pid, &st, WNOHANG) == c->pid) {
            char *e = test_read_file(c->err, NULL);
            fail_msg("the child ended (status %d) before writing its stdout:\n%s", st, e ? e : "");
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fail_msg("the child did not block on its stdout in 5 minutes");
    return false;
}

/* wait_blocked_in_stdout_write, or (where /proc cannot tell) the run ended
 * and false: the caller's test is skipped. */
static bool held_or_skipped(child *c, int fd) {
    if (wait_blocked_in_stdout_write(c)) return true;
    print_message("/proc/PID/syscall unreadable: skipped\n");
    kill(c->pid, SIGKILL);
    wait_child(c);
    close(fd);
    return false;
}

/* Reads the pipe to its end (the child's exit) into a string. */
static char *read_all(int fd) {
    char *buf = NULL;
    size_t len = 0;
    for (;;) {
        char tmp[4096];
        ssize_t k = read(fd, tmp, sizeof tmp);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        buf = realloc(buf, len + (size_t)k + 1);
        assert_non_null(buf);
        memcpy(buf + len, tmp, (size_t)k);
        len += (size_t)k;
        buf[len] = 0;
    }
    close(fd);
    return buf ? buf : strdup("");
}

/* ---- defect 6 of the review: a signal during the last step ----------------------------------
 * The run is complete: it prints its summary, says the signal arrived after
 * the last step, saves and exits 130; it was reported as stopped early
 * ("stopped by SIGINT after step 3", no summary). Deterministic: 3 steps,
 * progress at step 2 only, whose write blocks on a full pipe; the signal is
 * sent while it blocks (after step 2's stop check), then the pipe drained,
 * so it arrives during the last step. */
static void t_signal_last_step(void **s) {
    (void)s;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/sig_last", test_tmpdir);
    child c;
    int fd;
    spawn_piped(&c, &fd, true, "sig_last", "train " GPT " --max-steps 3 --log-every 2 --checkpoint %s", dir);
    if (!held_or_skipped(&c, fd)) return;
    kill(c.pid, SIGINT);
    wait_for_stderr(&c, "signal received");
    char *all = read_all(fd), *out = all + strspn(all, "#"); /* after the filler */
    int rc = wait_child(&c);
    char *err = test_read_file(c.err, NULL);
    if (rc != 130 || strstr(err, "stopped by") || !strstr(err, "SIGINT arrived after the last step: the run is complete and saved") ||
        !strstr(out, "\nsummary: gpt ") || !strstr(out, "steps             3 ("))
        fail_msg("exit %d (expected 130, the run complete with its summary)\nstdout:\n%s\nstderr:\n%s", rc, out, err);
    assert_int_equal(checkpoint_step(dir), 3);
    test_free_all(all, err);
}

/* A second signal ends the run at once, without the save the first one
 * asked for. Two kills back to back could merge into one (a pending signal
 * is not queued twice) and the test passed either way; now the run is held
 * in its first progress write (a full pipe), the second signal is sent once
 * stderr shows the first was received, and the test asks for the "second
 * signal" message, no "stopped by" and no checkpoint. */
static void t_second_signal(void **s) {
    (void)s;
    char dir[1200], model[1300];
    snprintf(dir, sizeof dir, "%s/sig_twice", test_tmpdir);
    snprintf(model, sizeof model, "%s/model.safetensors", dir);
    child c;
    int fd;
    spawn_piped(&c, &fd, true, "sig_twice", "train " GPT " --max-steps 2000 --log-every 1 --checkpoint %s", dir);
    if (!held_or_skipped(&c, fd)) return;
    kill(c.pid, SIGINT);
    wait_for_stderr(&c, "signal received");
    kill(c.pid, SIGINT);
    int rc = wait_child_guarded(&c);
    close(fd);
    char *err = test_read_file(c.err, NULL);
    if (rc != 130 || !strstr(err, "amp train: second signal: stopping now") || strstr(err, "stopped by"))
        fail_msg("exit %d (expected 130 and the second signal's message alone):\n%s", rc, err);
    struct stat sb;
    if (stat(model, &sb) == 0) fail_msg("a checkpoint was saved after the second signal");
    free(err);
}

/* The pid of the amp process of the run whose arguments hold `tag` and whose environment says OMPI rank `rank`. */
static pid_t find_rank(const char *tag, int rank) {
    char want[64];
    snprintf(want, sizeof want, "OMPI_COMM_WORLD_RANK=%d", rank);
    DIR *d = opendir("/proc");
    assert_non_null(d);
    pid_t found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        char path[300];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        size_t n;
        char *cmd = test_read_file(path, &n);
        bool is_run = cmd && n > 0 && strstr(cmd, "/amp") && strlen(cmd) >= 4 && !strcmp(cmd + strlen(cmd) - 4, "/amp");
        for (size_t i = 0; is_run && i + 1 < n; i++)
            if (!cmd[i]) cmd[i] = ' ';
        is_run = is_run && strstr(cmd, tag);
        free(cmd);
        if (!is_run) continue;
        snprintf(path, sizeof path, "/proc/%s/environ", e->d_name);
        char *env = test_read_file(path, &n);
        for (size_t i = 0; env && i < n; i += strlen(env + i) + 1)
            if (!strcmp(env + i, want)) found = (pid_t)atoi(e->d_name);
        free(env);
    }
    closedir(d);
    return found;
}

/* Under mpirun a signal to one rank stops every rank after the same step: rank 0 saves, all exit. */
static void t_signal_mpi(void **s) {
    (void)s;
    const char *mpi = test_mpirun_prefix(2);
    if (!mpi) {
        print_message("no MPI: skipped\n");
        return;
    }
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/sig_mpi", test_tmpdir);
    child c;
    char args[4096];
    snprintf(args, sizeof args, "train " GPT " --max-steps 2000 --log-every 1 --checkpoint %s", dir);
    char cmd[8192];
    snprintf(c.out, sizeof c.out, "%s/sig_mpi.out", test_tmpdir);
    snprintf(c.err, sizeof c.err, "%s/sig_mpi.err", test_tmpdir);
    snprintf(cmd, sizeof cmd, "exec env %s %s %s < /dev/null > %s 2> %s", mpi, AMP_CLI_PATH, args, c.out, c.err);
    fflush(NULL);
    c.pid = fork();
    assert_true(c.pid >= 0);
    if (c.pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    wait_for_output(&c, "step 1/");
    pid_t r1 = find_rank(dir, 1);
    if (!r1) fail_msg("rank 1 of the run not found");
    kill(r1, SIGINT); /* rank 1 alone */
    int rc = wait_child(&c);
    char *err = test_read_file(c.err, NULL), *out = test_read_file(c.out, NULL);
    if (rc == 0 || !strstr(err, "SIGINT")) fail_msg("mpirun: exit %d\n%s\n%s", rc, out, err);
    int64_t at = checkpoint_step(dir);
    assert_true(at >= 1);
    /* the run continues on one process from there */
    free(test_run_cli_expect(0, NULL, "train " GPT " --max-steps 2000 --stop-after %lld --quiet --resume %s", (long long)at + 1, dir));
    assert_int_equal(checkpoint_step(dir), at + 1);
    test_free_all(err, out);
}

/* ---- defect 11 of the review: the step times are kept for the steps this process runs ----------
 * A run of 2^40 steps stopped after 10 (--stop-after: the schedule spans
 * the 2^40) sized its step-time array by the whole run and failed with
 * "out of memory" before step 1. */
static void t_huge_run_stopped_early(void **s) {
    (void)s;
    char *out = test_run_cli_expect(0, NULL, "train " GPT " --max-steps 1099511627776 --stop-after 10 --quiet");
    expect_in(out, "steps             10 (0 skipped", "the summary");
    free(out);
}

/* ---- defect 21 of the review: the ETA counts to where this process stops ---------------------
 * The mlp's counted to the end of the whole run (--stop-after 2 of 100000
 * steps said minutes), the GPT's to --stop-after: both now say 0 s at the
 * step they stop at. */
static void t_progress_eta(void **s) {
    (void)s;
    const char *models[] = {MLP " --epochs 1000", GPT};
    for (int k = 0; k < 2; k++) {
        char *out = test_run_cli_expect(0, NULL, "train %s --max-steps 100000 --stop-after 2 --log-every 1", models[k]);
        char *line = strstr(out, k ? "step 2/100000 " : " step 2/");
        if (!line) fail_msg("no progress line of step 2:\n%s", out);
        *strchr(line, '\n') = 0;
        if (!strstr(line, " ETA 0s")) fail_msg("%s: step 2 of a run stopping at 2 says %s", models[k], line);
        free(out);
    }
}

/* ---- a new user's view: --help anywhere, and what "final train loss" is ------------------------------ */
static void t_help_and_summary(void **s) {
    (void)s;
    const char *helps[] = {"train --model gpt --help", "train --quiet --help", "train --model mlp --precision bf16 -h"};
    for (int i = 0; i < 3; i++) {
        char *out = test_run_cli_expect(0, NULL, "%s", helps[i]);
        expect_in(out, "usage: amp train", helps[i]);
        expect_in(out, "--n-layer", helps[i]); /* the GPT's options */
        free(out);
    }
    char *out = test_run_cli_expect(0, NULL, "train " GPT " --max-steps 12 --quiet");
    expect_in(out, "final train loss  ", "the GPT's summary");
    expect_in(out, " (mean of the last 12 step losses)", "the GPT's summary");
    free(out);
    out = test_run_cli_expect(0, NULL, "train " MLP " --epochs 10 --max-steps 60 --quiet");
    expect_in(out, " (mean of the last 50 step losses)", "the mlp's summary");
    free(out);
    out = test_run_cli_expect(0, NULL, "train " MLP " --epochs 10 --max-steps 60 --stop-after 4 --quiet");
    expect_in(out, " (step 4's loss; the mean covers the run's last 50)", "a stopped run's summary");
    free(out);
}

AMP_TEST_MAIN_FIXTURES(test_tmpdir_setup, test_tmpdir_teardown, t_lock_whole_run, t_metrics_full_disk,
                       t_gpt_resume_warnings, t_inject_nonfinite, t_checked_before_step1, t_readonly_dir,
                       t_metrics_resume_unreadable, t_long_data_path, t_pure_fp16_refused, t_signals, t_second_signal,
                       t_signal_nothing_kept, t_signal_closed_pipe, t_signal_last_step, t_signal_mpi,
                       t_huge_run_stopped_early, t_progress_eta, t_help_and_summary)

/* Files under attack (issue 12 items 6-9):
 *   6  opening a checkpoint for reading never changes the directory (amp
 *      inspect used to rename a running trainer's temporary file, killing
 *      it); a second trainer on one directory refuses to start;
 *   7  every write is checked: metrics on a full disk, stdout into
 *      /dev/full, bench --json into /dev/full all exit 1 naming the file;
 *   8  restored values are validated (NaN or negative moments, a scale of
 *      1e-300, a step count of INT64_MAX, min_scale > max_scale, NaN
 *      weights), with a message naming the key;
 *   9  metadata keys are checked with a hash (80k keys took 19 s), and a
 *      FIFO given as a checkpoint or dataset is refused without blocking. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_support.h"

static char *path_in(const char *fmt, ...) {
    char rel[512], *p = malloc(2048);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof rel, fmt, ap);
    va_end(ap);
    snprintf(p, 2048, "%s/%s", test_tmpdir, rel);
    return p;
}

/* ---- a small training state ------------------------------------------------------------------- */
typedef struct {
    amp_module *m;
    amp_optim *opt;
    amp_scaler *sc;
    amp_tensor *ps[2];
} small_run;

static small_run small_make(uint64_t seed, int steps) {
    small_run r;
    amp_generator g = amp_generator_make(seed);
    r.m = amp_nn_linear(4, 3, true, &g);
    assert_int_equal(amp_module_parameters(r.m, r.ps, NULL, 2), 2);
    amp_optim_opts o = amp_adam_opts(0.1);
    r.opt = amp_optim_new(r.ps, 2, &o);
    r.sc = amp_scaler_new(NULL);
    test_rng rng = {seed};
    for (int s = 0; s < steps; s++) {
        amp_scope *sc = amp_scope_begin();
        amp_optim_zero_grad(r.opt);
        amp_tensor *x = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(5, 4));
        for (int i = 0; i < 20; i++) amp_tensor_set(x, AMP_SHAPE(i / 4, i % 4), test_rng_normal(&rng));
        amp_tensor *l = amp_sum(amp_module_forward(r.m, x), NULL, 0, false);
        assert_int_equal(amp_backward(amp_scaler_scale(r.sc, l)), AMP_OK);
        assert_int_equal(amp_scaler_step(r.sc, r.opt, NULL), AMP_OK);
        assert_int_equal(amp_scaler_update(r.sc), AMP_OK);
        amp_scope_end(sc);
    }
    return r;
}

static void small_free(small_run *r) {
    amp_scaler_free(r->sc);
    amp_optim_free(r->opt);
    amp_module_free(r->m);
}

static void small_save(small_run *r, const char *dir, int64_t step) {
    amp_train_state st = {r->m, &r->opt, 1, r->sc, NULL, NULL, step, NULL, 0};
    if (amp_checkpoint_save(dir, &st) != AMP_OK) fail_msg("%s", amp_last_error());
}

static amp_status small_restore(small_run *r, const char *dir) {
    amp_checkpoint *c = amp_checkpoint_open(dir);
    if (!c) return amp_last_status();
    amp_train_state st = {r->m, &r->opt, 1, r->sc, NULL, NULL, 0, NULL, 0};
    amp_status s = amp_checkpoint_restore(c, &st);
    amp_checkpoint_close(c);
    return s;
}

/* "name size mtime" of every entry, sorted by readdir order of names */
static char *listing(const char *dir) {
    char *out = calloc(1, 8192);
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    char names[32][256];
    int n = 0;
    while ((e = readdir(d)) && n < 32)
        if (e->d_name[0] != '.' || strlen(e->d_name) > 2) snprintf(names[n++], 256, "%s", e->d_name);
    closedir(d);
    qsort(names, (size_t)n, 256, (int (*)(const void *, const void *))strcmp);
    for (int i = 0; i < n; i++) {
        char p[4096];
        struct stat sb;
        if (snprintf(p, sizeof p, "%s/%s", dir, names[i]) >= (int)sizeof p) fail_msg("path too long");
        assert_int_equal(stat(p, &sb), 0);
        size_t l = strlen(out);
        snprintf(out + l, 8192 - l, "%s %lld %lld.%09ld %llu\n", names[i], (long long)sb.st_size, (long long)sb.st_mtim.tv_sec,
                 sb.st_mtim.tv_nsec, (unsigned long long)sb.st_ino);
    }
    return out;
}

/* ---- item 6 ------------------------------------------------------------------------------------ */
/* An interrupted commit (model renamed, training state still in its
 * complete temporary file): open reads the new checkpoint from the
 * temporary file and leaves the directory exactly as it was; the next save
 * (the writer) finishes the commit. */
static void t_open_is_read_only(void **state) {
    (void)state;
    small_run r = small_make(1, 2);
    char *a = path_in("ckA"), *b = path_in("ckB"), *d = path_in("ckD");
    small_save(&r, a, 2);
    small_run r2 = small_make(2, 3);
    small_save(&r2, b, 3);
    assert_int_equal(mkdir(d, 0755), 0);
    char src[2100], dst[2100];
    snprintf(src, sizeof src, "%s/model.safetensors", b), snprintf(dst, sizeof dst, "%s/model.safetensors", d);
    test_copy_file(src, dst);
    snprintf(src, sizeof src, "%s/training_state.safetensors", a), snprintf(dst, sizeof dst, "%s/training_state.safetensors", d);
    test_copy_file(src, dst);
    snprintf(src, sizeof src, "%s/training_state.safetensors", b), snprintf(dst, sizeof dst, "%s/training_state.safetensors.tmp", d);
    test_copy_file(src, dst);
    char *before = listing(d);
    amp_checkpoint *c = amp_checkpoint_open(d);
    if (!c) fail_msg("%s", amp_last_error());
    assert_int_equal(amp_checkpoint_step(c), 3);
    amp_checkpoint_close(c);
    char *after = listing(d);
    if (strcmp(before, after)) fail_msg("amp_checkpoint_open changed the directory:\nbefore:\n%safter:\n%s", before, after);
    /* the CLI's inspect is read-only too */
    char args[2200], *out;
    snprintf(args, sizeof args, "inspect --no-tensors %s", d);
    assert_int_equal(test_run_cli(NULL, args, &out, NULL), 0);
    assert_non_null(strstr(out, "step 3"));
    free(out);
    char *after2 = listing(d);
    if (strcmp(before, after2)) fail_msg("amp inspect changed the directory:\nbefore:\n%safter:\n%s", before, after2);
    /* restoring from it gives step 3's state */
    assert_int_equal(small_restore(&r, d), AMP_OK);
    free(before), free(after), free(after2), free(a), free(b), free(d);
    small_free(&r);
    small_free(&r2);
}

/* Starts `amp ARGS` in the background with stdout/stderr to files; returns the pid. */
static pid_t spawn_cli(const char *args, const char *errfile) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "exec %s %s < /dev/null > /dev/null 2> %s", AMP_CLI_PATH, args, errfile);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static int wait_exit(pid_t pid) {
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void wait_for_file(const char *path, pid_t pid) {
    for (int i = 0; i < 6000; i++) {
        struct stat sb;
        if (stat(path, &sb) == 0) return;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) fail_msg("the trainer ended before writing %s", path);
        usleep(10000);
    }
    fail_msg("%s never appeared", path);
}

/* A trainer saving every step while `amp inspect` reads the directory over
 * and over: the trainer must not notice. */
static void t_inspect_while_training(void **state) {
    (void)state;
    char *d = path_in("live"), *errf = path_in("live.err"), *model = path_in("live/model.safetensors");
    char args[2400];
    snprintf(args, sizeof args, "train --limit 1024 --batch 16 --test-limit 100 --quiet --threads 1 --checkpoint %s --save-every 1", d);
    pid_t pid = spawn_cli(args, errf);
    wait_for_file(model, pid);
    int reads = 0, st, rc = -2;
    while (reads < 400) {
        if (waitpid(pid, &st, WNOHANG) == pid) {
            rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
            break;
        }
        snprintf(args, sizeof args, "inspect --no-tensors %s", d);
        test_run_cli(NULL, args, NULL, NULL); /* reads only; it must never disturb the writer */
        reads++;
    }
    if (rc == -2) rc = wait_exit(pid);
    char *err = test_read_file(errf, NULL);
    print_message("%d inspections during the run\n", reads);
    if (rc != 0) fail_msg("the trainer failed (exit %d) while amp inspect read its directory:\n%s", rc, err);
    free(err), free(d), free(errf), free(model);
}

/* Two trainers on one checkpoint directory: the second refuses to start. */
static void t_second_trainer_refused(void **state) {
    (void)state;
    char *d = path_in("shared"), *e1 = path_in("t1.err"), *model = path_in("shared/model.safetensors");
    char args[2400];
    snprintf(args, sizeof args, "train --limit 1024 --batch 16 --test-limit 100 --quiet --threads 1 --checkpoint %s --save-every 1", d);
    pid_t pid = spawn_cli(args, e1);
    wait_for_file(model, pid);
    char *err;
    snprintf(args, sizeof args, "train --limit 256 --batch 16 --test-limit 100 --quiet --threads 1 --checkpoint %s --save-every 1", d);
    int rc2 = test_run_cli(NULL, args, NULL, &err);
    int rc1 = wait_exit(pid);
    char *err1 = test_read_file(e1, NULL);
    if (rc1 != 0) fail_msg("the first trainer failed (exit %d):\n%s", rc1, err1);
    if (rc2 != 1) fail_msg("the second trainer on %s exited %d (expected 1):\n%s", d, rc2, err);
    if (!strstr(err, d) || !strstr(err, "in use")) fail_msg("expected a message naming %s and 'in use':\n%s", d, err);
    amp_checkpoint *c = amp_checkpoint_open(d);
    if (!c) fail_msg("%s", amp_last_error());
    assert_int_equal(amp_checkpoint_step(c), 64); /* the first run's own last step */
    amp_checkpoint_close(c);
    free(err), free(err1), free(d), free(e1), free(model);
}

/* ---- item 7 ------------------------------------------------------------------------------------ */
static int run_sh(const char *cmd, char **err) {
    char *errf = path_in("sh.err"), full[4096];
    snprintf(full, sizeof full, "%s 2> %s", cmd, errf);
    int st = system(full);
    if (err) *err = test_read_file(errf, NULL);
    free(errf);
    return st == -1 || !WIFEXITED(st) ? -1 : WEXITSTATUS(st);
}

static void expect_write_failure(const char *cmd, const char *name) {
    char *err;
    int rc = run_sh(cmd, &err);
    if (rc != 1) fail_msg("%s: exit %d (expected 1)\n%s", cmd, rc, err);
    if (!strstr(err, name)) fail_msg("%s: expected a message naming %s:\n%s", cmd, name, err);
    free(err);
}

static void t_write_errors(void **state) {
    (void)state;
    char cmd[4096];
    /* --metrics on a full disk */
    snprintf(cmd, sizeof cmd, "%s train --limit 512 --batch 16 --test-limit 100 --quiet --threads 2 --metrics /dev/full", AMP_CLI_PATH);
    expect_write_failure(cmd, "/dev/full");
    /* results to stdout: train's summary, inspect, predict */
    snprintf(cmd, sizeof cmd, "%s train --limit 256 --batch 16 --test-limit 100 --quiet --threads 2 --checkpoint %s/wck > /dev/full",
             AMP_CLI_PATH, test_tmpdir);
    expect_write_failure(cmd, "standard output");
    snprintf(cmd, sizeof cmd, "%s inspect %s/wck > /dev/full", AMP_CLI_PATH, test_tmpdir);
    expect_write_failure(cmd, "standard output");
    snprintf(cmd, sizeof cmd, "%s predict --checkpoint %s/wck --input /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz "
             "--limit 100 > /dev/full", AMP_CLI_PATH, test_tmpdir);
    expect_write_failure(cmd, "standard output");
    snprintf(cmd, sizeof cmd, "%s autocast > /dev/full", AMP_CLI_PATH);
    expect_write_failure(cmd, "standard output");
    /* bench --json through a link to /dev/full: the device is written, never replaced */
    char *link = path_in("bench.json");
    assert_int_equal(symlink("/dev/full", link), 0);
    snprintf(cmd, sizeof cmd, "%s bench convert --size 4096 --json %s > /dev/null", AMP_CLI_PATH, link);
    expect_write_failure(cmd, link);
    struct stat sb;
    assert_int_equal(lstat(link, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    assert_int_equal(stat("/dev/full", &sb), 0);
    assert_true(S_ISCHR(sb.st_mode));
    free(link);
}

/* ---- item 8 ------------------------------------------------------------------------------------ */
/* dir2 = dir with training_state.safetensors rewritten: tensor `tname`
 * element 0 set to tval (if tname), metadata `key` set to `val` (if key). */
static void tamper(const char *dir, const char *dir2, const char *file, const char *tname, double tval, const char *key,
                   const char *val) {
    assert_int_equal(mkdir(dir2, 0755), 0);
    const char *files[2] = {"model.safetensors", "training_state.safetensors"};
    for (int k = 0; k < 2; k++) {
        char src[2100], dst[2100];
        snprintf(src, sizeof src, "%s/%s", dir, files[k]);
        snprintf(dst, sizeof dst, "%s/%s", dir2, files[k]);
        if (strcmp(files[k], file)) {
            test_copy_file(src, dst);
            continue;
        }
        amp_safetensors *f = amp_safetensors_read(src);
        assert_non_null(f);
        int n = amp_safetensors_count(f), nm = amp_safetensors_meta_count(f);
        amp_tensor **ts = calloc((size_t)n, sizeof *ts);
        const char **names = calloc((size_t)n, sizeof *names);
        amp_kv *kv = calloc((size_t)nm + 1, sizeof *kv);
        for (int i = 0; i < n; i++) {
            amp_safetensors_info in;
            amp_safetensors_info_at(f, i, &in);
            names[i] = in.name;
            ts[i] = amp_safetensors_get(f, in.name);
            if (tname && !strcmp(in.name, tname)) {
                int64_t zero[8] = {0};
                assert_int_equal(amp_tensor_set(ts[i], zero, tval), AMP_OK);
            }
        }
        int m = 0;
        bool found = false;
        for (int i = 0; i < nm; i++) {
            const char *kk = amp_safetensors_meta_key(f, i);
            if (!strcmp(kk, "data_crc32")) continue;
            kv[m].key = kk;
            kv[m].value = key && !strcmp(kk, key) ? (found = true, val) : amp_safetensors_meta(f, kk);
            m++;
        }
        if (key && !found) fail_msg("no metadata key %s", key);
        assert_int_equal(amp_safetensors_write(dst, ts, names, n, kv, m), AMP_OK);
        for (int i = 0; i < n; i++) amp_tensor_free(ts[i]);
        free(ts), free(names), free(kv);
        amp_safetensors_free(f);
    }
}

static void expect_restore_refused(small_run *r, const char *dir, const char *key) {
    amp_status st = small_restore(r, dir);
    if (st == AMP_OK) fail_msg("%s: a checkpoint with a bad %s was restored", dir, key);
    if (!strstr(amp_last_error(), key)) fail_msg("expected the message to name %s: %s", key, amp_last_error());
    amp_clear_error();
}

static void t_restore_validates(void **state) {
    (void)state;
    small_run r = small_make(3, 3);
    char *base = path_in("val");
    small_save(&r, base, 3);
    const char *st = "training_state.safetensors", *mo = "model.safetensors";
    struct {
        const char *file, *tname;
        double tval;
        const char *key, *val, *named;
    } cases[] = {
        {st, "optim.0.weight.exp_avg", NAN, NULL, NULL, "optim.0.weight.exp_avg"},
        {st, "optim.0.bias.exp_avg_sq", -1.0, NULL, NULL, "optim.0.bias.exp_avg_sq"},
        {st, "optim.0.weight.exp_avg_sq", INFINITY, NULL, NULL, "optim.0.weight.exp_avg_sq"},
        {st, NULL, 0, "scaler.scale", "1e-300", "scaler.scale"},
        {st, NULL, 0, "scaler.scale", "nan", "scaler.scale"},
        {st, NULL, 0, "scaler.scale", "0", "scaler.scale = 0: the loss scale collapsed to 0"}, /* issue 23 item 16: the ':' */
        {st, NULL, 0, "scaler.growth_factor", "0.5", "scaler.growth_factor = 0.5: must be > 1"},
        {st, NULL, 0, "optim.0.steps", "9223372036854775807", "optim.0.steps"},
        {st, "optim.0.weight.step", 9.2e18, NULL, NULL, "optim.0.weight.step"}, /* above 2^62, inside i64 */
        {st, NULL, 0, "scaler.min_scale", "1e30", "scaler.min_scale"},
        {st, NULL, 0, "scaler.max_scale", "4", "scaler.max_scale"},
        {st, NULL, 0, "scaler.growth_factor", "inf", "scaler.growth_factor"},
        {st, NULL, 0, "scaler.num_skipped", "-5", "scaler.num_skipped"},
        {st, NULL, 0, "step", "9223372036854775807", "step"},
        {mo, "weight", NAN, NULL, NULL, "weight"},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    /* the max_scale case needs a min_scale above it: 4 < the saved 65536 scale */
    for (int i = 0; i < n; i++) {
        char *d = path_in("val%d", i);
        tamper(base, d, cases[i].file, cases[i].tname, cases[i].tval, cases[i].key, cases[i].val);
        expect_restore_refused(&r, d, cases[i].named);
        free(d);
    }
    /* and nothing of the refused states reached r: its own checkpoint still restores */
    assert_int_equal(small_restore(&r, base), AMP_OK);
    free(base);
    small_free(&r);
}

/* ---- item 9 ------------------------------------------------------------------------------------ */
static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_io_robustness: timed out (blocked or quadratic)\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(3);
    _exit(2);
}

static void t_fifo_refused(void **state) {
    (void)state;
    signal(SIGALRM, on_alarm);
    char *fifo = path_in("fifo"), *cdir = path_in("fifock");
    assert_int_equal(mkfifo(fifo, 0644), 0);
    alarm(20); /* a blocking open() would hang here */
    assert_null(amp_safetensors_read(fifo));
    assert_non_null(strstr(amp_last_error(), "not a regular file"));
    amp_idx idx;
    assert_int_equal(amp_idx_load(fifo, &idx), AMP_ERR_IO);
    assert_non_null(strstr(amp_last_error(), "not a regular file"));
    amp_dataset ds;
    assert_true(amp_dataset_load(fifo, fifo, 0, &ds) != AMP_OK);
    amp_generator g = amp_generator_make(1);
    amp_module *m = amp_nn_linear(2, 2, true, &g);
    assert_true(amp_model_load(m, fifo) != AMP_OK);
    amp_module_free(m);
    /* a checkpoint directory whose files are FIFOs */
    assert_int_equal(mkdir(cdir, 0755), 0);
    char p[2200];
    snprintf(p, sizeof p, "%s/model.safetensors", cdir);
    assert_int_equal(mkfifo(p, 0644), 0);
    snprintf(p, sizeof p, "%s/training_state.safetensors", cdir);
    assert_int_equal(mkfifo(p, 0644), 0);
    snprintf(p, sizeof p, "%s/training_state.safetensors.tmp", cdir);
    assert_int_equal(mkfifo(p, 0644), 0);
    assert_null(amp_checkpoint_open(cdir));
    /* and the CLI */
    char args[2400];
    snprintf(args, sizeof args, "inspect %s", fifo);
    assert_int_equal(test_run_cli(NULL, args, NULL, NULL), 1);
    snprintf(args, sizeof args, "inspect %s", cdir);
    assert_int_equal(test_run_cli(NULL, args, NULL, NULL), 1);
    alarm(0);
    amp_clear_error();
    free(fifo), free(cdir);
}

/* 300k metadata keys: the quadratic duplicate check took minutes; a hash
 * takes a fraction of a second. A duplicate is still found and named. */
static void t_many_metadata_keys(void **state) {
    (void)state;
    signal(SIGALRM, on_alarm);
    const int n = 300000;
    size_t cap = (size_t)n * 40 + 256;
    char *hdr = malloc(cap);
    size_t len = 0;
    len += (size_t)snprintf(hdr + len, cap - len, "{\"__metadata__\":{");
    for (int i = 0; i < n; i++) len += (size_t)snprintf(hdr + len, cap - len, "%s\"key%d\":\"v%d\"", i ? "," : "", i, i);
    size_t dup_at = len;
    len += (size_t)snprintf(hdr + len, cap - len, "}}");
    unsigned char *img = malloc(cap + 16); /* room for the longer header with the duplicate, below */
    for (int k = 0; k < 8; k++) img[k] = (unsigned char)((uint64_t)len >> (8 * k));
    memcpy(img + 8, hdr, len);
    alarm(120);
    amp_safetensors *f = amp_safetensors_parse(img, len + 8, "many");
    if (!f) fail_msg("%s", amp_last_error());
    assert_int_equal(amp_safetensors_meta_count(f), n);
    for (int i = 0; i < n; i += 997) {
        char k[32], v[32];
        snprintf(k, sizeof k, "key%d", i);
        snprintf(v, sizeof v, "v%d", i);
        assert_string_equal(amp_safetensors_meta(f, k), v);
    }
    amp_safetensors_free(f);
    /* the last key repeats the first */
    len = dup_at + (size_t)snprintf(hdr + dup_at, cap - dup_at, ",\"key0\":\"again\"}}");
    for (int k = 0; k < 8; k++) img[k] = (unsigned char)((uint64_t)len >> (8 * k));
    memcpy(img + 8, hdr, len);
    assert_null(amp_safetensors_parse(img, len + 8, "dup"));
    assert_non_null(strstr(amp_last_error(), "\"key0\" appears twice"));
    alarm(0);
    amp_clear_error();
    test_free_all(img, hdr);
}

AMP_TEST_MAIN_FIXTURES(test_tmpdir_setup, test_tmpdir_teardown, t_open_is_read_only, t_restore_validates,
                       t_write_errors, t_second_trainer_refused, t_inspect_while_training, t_many_metadata_keys,
                       t_fifo_refused)

/* The amp command end to end on a slice of the real Fashion-MNIST data:
 * train's summary and metrics CSV, compare's table, memory's arithmetic,
 * usage errors (exit 2), runtime errors (exit 1) naming the bad file.
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path (the
 * amp processes it starts inherit AMP_CPU). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "test_support.h"

#define SLICE "--limit 1024 --test-limit 500 --batch 64"

static void t_train_summary_and_metrics(void **s) {
    (void)s;
    char *dir = test_mkdtemp(), csv[512], args[1024];
    snprintf(csv, sizeof csv, "%s/m.csv", dir);
    snprintf(args, sizeof args, "train --model mlp --precision fp16 --epochs 2 " SLICE " --log-every 4 --metrics %s", csv);
    char *out, *err;
    int rc = test_run_cli(NULL, args, &out, &err);
    if (rc != 0) fail_msg("exit %d\n%s\n%s", rc, out, err);
    /* not a terminal: plain progress lines every 4 steps */
    assert_non_null(strstr(out, "epoch 1/2 step 4/16"));
    assert_non_null(strstr(out, "epoch 2/2 step 16/16"));
    double acc = test_field(out, "test accuracy");
    assert_true(acc > 50 && acc <= 100); /* 2 epochs on 1024 images: far above chance (10%) */
    assert_true(isfinite(test_field(out, "final train loss")));
    assert_true(test_field(out, "wall time") > 0);
    assert_true(test_field(out, "throughput") > 0);
    assert_int_equal((int)test_field(out, "steps"), 32);
    double scale = test_field(out, "final loss scale");
    assert_true(scale > 0 && scale <= 65536 && scale == exp2(round(log2(scale)))); /* a power of two */
    assert_non_null(strstr(out, "peak memory"));
    const char *cats[] = {"param", "grad", "optimizer", "activation", "cast_cache", "workspace", "data"};
    for (int i = 0; i < 7; i++) assert_non_null(strstr(out, cats[i]));
    assert_true(test_field(out, "cast_cache") > 0); /* O1 fp16 caches the weight casts */
    char *m = test_read_file(csv, NULL);
    assert_non_null(m);
    assert_int_equal(strncmp(m, "step,epoch,loss,scale,skipped,lr,ms\n", 36), 0);
    int rows = 0, last_step = 0;
    for (char *line = strchr(m, '\n'); line && line[1]; line = strchr(line + 1, '\n')) {
        int step, epoch, skipped;
        double loss, sc, lr, ms;
        assert_int_equal(sscanf(line + 1, "%d,%d,%lf,%lf,%d,%lf,%lf", &step, &epoch, &loss, &sc, &skipped, &lr, &ms), 7);
        assert_int_equal(step, last_step + 1);
        assert_int_equal(epoch, step <= 16 ? 1 : 2);
        assert_true(isfinite(loss) && loss > 0);
        /* default schedule: warmup over 10% of the 32 steps (3), then cosine to 0 */
        double want_lr = step <= 3 ? 1e-3 * step / 3.0 : 0.5e-3 * (1 + cos(M_PI * (step - 1 - 3) / 29.0));
        assert_close(lr, want_lr, 1e-5, 1e-12, "scheduled lr");
        last_step = step;
        rows++;
    }
    assert_int_equal(rows, 32);
    test_free_all(m, out, err);
    test_rmtree(dir);
    free(dir);
}

static void t_modes(void **s) {
    (void)s;
    const char *modes[] = {"--precision fp32", "--precision bf16", "--precision bf16 --opt-level O2",
                           "--precision fp16 --opt-level O2 --rounding stochastic", "--precision bf16 --opt-level O3",
                           "--policy p=f32,c=bf16,o=f32", "--model cnn --precision bf16 --max-steps 6",
                           "--matmul-precision medium", "--matmul-precision high --model cnn --max-steps 6"};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        char args[512], *out, *err;
        snprintf(args, sizeof args, "train %s --epochs 1 " SLICE " --quiet", modes[i]);
        int rc = test_run_cli(NULL, args, &out, &err);
        if (rc != 0) fail_msg("%s: exit %d\n%s\n%s", modes[i], rc, out, err);
        double acc = test_field(out, "test accuracy");
        if (!(acc > 30)) fail_msg("%s: accuracy %.2f%% is not above chance", modes[i], acc);
        double sc = test_field(out, "final loss scale");
        if (strstr(modes[i], "fp16")) assert_true(sc > 0 && sc == exp2(round(log2(sc)))); /* dynamic: a power of two */
        else assert_true(sc == 1.0);                                                       /* no loss scaling */
        /* the summary says what the products cost on this CPU path: the whole line */
        const char *mp = strstr(modes[i], "--matmul-precision ");
        char want[64], matmul[16] = "highest";
        if (mp) sscanf(mp + 19, "%15s", matmul);
        snprintf(want, sizeof want, "matmul precision  %s\n", matmul);
        if (!strstr(out, want)) fail_msg("%s: no '%s' in the summary:\n%s", modes[i], want, out);
        const char *prod = strstr(out, "  products          ");
        if (!prod) fail_msg("%s: no products line in the summary", modes[i]);
        prod += 20;
        const char *which = strstr(modes[i], "bf16") ? "bf16" : strstr(modes[i], "fp16") ? "fp16" : "fp32";
        const char *note = test_precision_note(which, matmul);
        size_t len = strcspn(prod, "\n");
        if (len != strlen(note) || strncmp(prod, note, len))
            fail_msg("%s on cpu path %s: the products line is\n  %.*s\nexpected\n  %s", modes[i],
                     amp_cpu_path_name(amp_cpu_active()), (int)len, prod, note);
        test_free_all(out, err);
    }
}

static void expect_usage(const char *args, const char *needle) {
    char *out, *err;
    int rc = test_run_cli(NULL, args, &out, &err);
    if (rc != 2) fail_msg("'amp %s': exit %d, expected 2 (usage)\n%s", args, rc, err);
    if (!strstr(err, needle)) fail_msg("'amp %s': stderr does not mention '%s':\n%s", args, needle, err);
    if (!strstr(err, "usage:")) fail_msg("'amp %s': no usage text on stderr:\n%s", args, err);
    test_free_all(out, err);
}

static void t_bad_usage(void **s) {
    (void)s;
    expect_usage("train --model resnet", "--model");
    expect_usage("train --epochs 0", "--epochs");
    expect_usage("train --epochs", "--epochs");
    expect_usage("train --batch -3", "--batch");
    expect_usage("train --lr abc", "--lr");
    expect_usage("train --precision fp64", "--precision");
    expect_usage("train --opt-level O7", "opt level");
    expect_usage("train --precision fp32 --opt-level O2", "--opt-level");
    expect_usage("train --policy params=float32,compute=int8,output=float32", "int8");
    expect_usage("train --policy p=f32 --precision fp16", "--policy");
    expect_usage("train --frobnicate", "--frobnicate");
    expect_usage("compare --precision fp16", "compare");
    expect_usage("train --matmul-precision fast", "--matmul-precision");
    expect_usage("memory --batch 0", "--batch");
    expect_usage("nosuchcommand", "nosuchcommand");
    expect_usage("", "no command");
}

static void t_help(void **s) {
    (void)s;
    char *out, *err;
    assert_int_equal(test_run_cli(NULL, "--help", &out, &err), 0);
    const char *cmds[] = {"train", "compare", "memory", "formats", "autocast", "bench"};
    for (int i = 0; i < 6; i++) assert_non_null(strstr(out, cmds[i]));
    test_free_all(out, err);
    assert_int_equal(test_run_cli(NULL, "train --help", &out, &err), 0);
    const char *flags[] = {"--model", "--precision", "--opt-level", "--policy", "--epochs", "--batch", "--lr", "--optimizer",
                           "--seed", "--threads", "--metrics", "--limit", "--inject-nonfinite-every", "--matmul-precision"};
    for (int i = 0; i < 14; i++)
        if (!strstr(out, flags[i])) fail_msg("amp train --help does not document %s", flags[i]);
    test_free_all(out, err);
    assert_int_equal(test_run_cli(NULL, "--version", &out, &err), 0);
    assert_non_null(strstr(out, "cpu path"));
    test_free_all(out, err);
    assert_int_equal(test_run_cli("AMP_CPU=scalar", "--version", &out, &err), 0);
    assert_non_null(strstr(out, "cpu path: scalar"));
    test_free_all(out, err);
    assert_int_equal(test_run_cli("AMP_CPU=quantum", "--version", &out, &err), 1);
    assert_non_null(strstr(err, "AMP_CPU"));
    test_free_all(out, err);
}

static void copy_gz_truncated(const char *src, const char *dst, long keep) {
    size_t n;
    char *b = test_read_file(src, &n);
    assert_non_null(b);
    test_write_file(dst, b, keep < 0 ? n : (size_t)keep);
    free(b);
}

static void t_bad_data(void **s) {
    (void)s;
    char *out, *err;
    int rc = test_run_cli("AMP_DATA_DIR=/nonexistent/fmnist", "train --quiet --limit 100", &out, &err);
    assert_int_equal(rc, 1);
    if (!strstr(err, "/nonexistent/fmnist/train-images-idx3-ubyte.gz")) fail_msg("message does not name the file:\n%s", err);
    test_free_all(out, err);
    /* a copy of the data set with the training images cut short */
    char *dir = test_mkdtemp(), src[512], dst[512], env[600];
    const char *names[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                           "t10k-labels-idx1-ubyte.gz"};
    for (int i = 0; i < 4; i++) {
        snprintf(src, sizeof src, "/usr/share/datasets/fashion-mnist/%s", names[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, names[i]);
        copy_gz_truncated(src, dst, i == 0 ? 200000 : -1);
    }
    snprintf(env, sizeof env, "AMP_DATA_DIR=%s", dir);
    rc = test_run_cli(env, "train --quiet --limit 100", &out, &err);
    assert_int_equal(rc, 1);
    snprintf(dst, sizeof dst, "%s/train-images-idx3-ubyte.gz", dir);
    if (!strstr(err, dst)) fail_msg("message does not name the truncated file:\n%s", err);
    if (!strstr(err, "truncated") && !strstr(err, "corrupt")) fail_msg("message does not say what is wrong:\n%s", err);
    test_free_all(out, err);
    /* labels that do not match the images */
    snprintf(src, sizeof src, "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
    snprintf(dst, sizeof dst, "%s/train-labels-idx1-ubyte.gz", dir);
    copy_gz_truncated(src, dst, -1);
    snprintf(src, sizeof src, "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
    snprintf(dst, sizeof dst, "%s/train-images-idx3-ubyte.gz", dir);
    copy_gz_truncated(src, dst, -1);
    rc = test_run_cli(env, "train --quiet --limit 100", &out, &err);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err, "60000 images but"));
    test_free_all(out, err);
    test_rmtree(dir);
    free(dir);
}

static void t_compare_and_memory(void **s) {
    (void)s;
    char *out, *err;
    int rc = test_run_cli(NULL, "compare --model mlp --epochs 1 " SLICE " --quiet", &out, &err);
    if (rc != 0) fail_msg("compare: exit %d\n%s", rc, err);
    assert_non_null(strstr(out, "| mode | test acc | delta vs fp32 | train time | speedup | peak memory | saving | skipped |"));
    assert_non_null(strstr(out, "| fp32 |"));
    assert_non_null(strstr(out, "| fp16 |"));
    assert_non_null(strstr(out, "| bf16 |"));
    assert_non_null(strstr(out, "max logit diff"));
    assert_non_null(strstr(out, "peak memory by category"));
    /* what each precision costs on this CPU */
    const char *precs[] = {"fp32", "fp16", "bf16"};
    for (int i = 0; i < 3; i++) {
        char line[600];
        snprintf(line, sizeof line, "\n  - %s\n", test_precision_note(precs[i], NULL));
        if (!strstr(out, line)) fail_msg("compare's notes on cpu path %s lack the line%s", amp_cpu_path_name(amp_cpu_active()), line);
    }
    /* the logit differences are real measurements: finite and small */
    const char *p = strstr(out, "| fp16 |");
    const char *bar = p;
    for (int i = 0; i < 9; i++) bar = strchr(bar + 1, '|'); /* the 10th column */
    double d16 = strtod(bar + 1, NULL);
    assert_true(d16 > 0 && d16 < 0.5);
    test_free_all(out, err);
    rc = test_run_cli(NULL, "memory --model mlp --batch 32", &out, &err);
    if (rc != 0) fail_msg("memory: exit %d\n%s", rc, err);
    /* 784*512+512 + 512*512+512 + 512*10+10 = 669706 parameters */
    assert_non_null(strstr(out, "669706 parameters"));
    assert_non_null(strstr(out, "4 params + 4 grads + 8 optimizer = 16 B/param"));
    assert_non_null(strstr(out, "| param |"));
    assert_non_null(strstr(out, "where measurement and arithmetic differ"));
    test_free_all(out, err);
}

AMP_TEST_MAIN(t_train_summary_and_metrics, t_modes, t_bad_usage, t_help, t_bad_data, t_compare_and_memory)

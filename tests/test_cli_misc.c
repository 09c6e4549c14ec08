/* The smaller CLI defects of issue 12 item 11, each reproduced:
 *   - an AMP_DATA_DIR of ~1500 characters works (the file name was cut off
 *     at ~995);
 *   - --schedule / --warmup changed on resume are warned about, as --lr is
 *     (they silently changed the result);
 *   - --opt-level O2 without --precision is a usage error naming the flag
 *     (it silently picked fp16);
 *   - predict on a file whose model cannot be told exits 1 (a content
 *     problem), not 2 (usage);
 *   - AMP_CACHE_MB=abc or -1 is an error (it was accepted silently);
 *   - bench gemm --sizes 1,,2 is refused.
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_support.h"

static void t_long_data_dir(void **state) {
    (void)state;
    /* a directory ~1500 characters deep, holding links to the real dataset */
    char *p = malloc(4096);
    snprintf(p, 4096, "%s", test_tmpdir);
    for (int i = 0; i < 7; i++) {
        size_t l = strlen(p);
        p[l] = '/';
        memset(p + l + 1, 'a' + i, 200);
        p[l + 201] = 0;
        assert_int_equal(mkdir(p, 0755), 0);
    }
    assert_true(strlen(p) > 1400);
    const char *files[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                           "t10k-labels-idx1-ubyte.gz"};
    for (int i = 0; i < 4; i++) {
        char src[256], dst[4400];
        snprintf(src, sizeof src, "/usr/share/datasets/fashion-mnist/%s", files[i]);
        snprintf(dst, sizeof dst, "%s/%s", p, files[i]);
        assert_int_equal(symlink(src, dst), 0);
    }
    char *env = malloc(4200), *err;
    snprintf(env, 4200, "AMP_DATA_DIR=%s", p);
    int rc = test_run_clif(env, NULL, &err, "train --limit 256 --batch 64 --test-limit 100 --quiet --threads 2");
    if (rc != 0) fail_msg("exit %d with a %zu-character AMP_DATA_DIR:\n%s", rc, strlen(p), err);
    test_free_all(err, env, p);
}

static void t_schedule_change_on_resume(void **state) {
    (void)state;
    char *err;
    assert_int_equal(test_run_clif(NULL, NULL, &err, "train --limit 512 --batch 64 --test-limit 100 --quiet --threads 2 --stop-after 4 "
                                           "--checkpoint %s/sch", test_tmpdir),
                     0);
    free(err);
    assert_int_equal(test_run_clif(NULL, NULL, &err, "train --limit 512 --batch 64 --test-limit 100 --quiet --threads 2 --resume %s/sch "
                                           "--schedule constant", test_tmpdir),
                     0);
    if (!strstr(err, "warning") || !strstr(err, "--schedule")) fail_msg("no warning about --schedule on resume:\n%s", err);
    free(err);
    assert_int_equal(test_run_clif(NULL, NULL, &err, "train --limit 512 --batch 64 --test-limit 100 --quiet --threads 2 --stop-after 4 "
                                           "--checkpoint %s/sch2", test_tmpdir),
                     0);
    free(err);
    assert_int_equal(test_run_clif(NULL, NULL, &err, "train --limit 512 --batch 64 --test-limit 100 --quiet --threads 2 --resume %s/sch2 "
                                           "--warmup 3", test_tmpdir),
                     0);
    if (!strstr(err, "warning") || !strstr(err, "--warmup")) fail_msg("no warning about --warmup on resume:\n%s", err);
    free(err);
}

static void t_opt_level_needs_precision(void **state) {
    (void)state;
    char *err;
    int rc = test_run_clif(NULL, NULL, &err, "train --opt-level O2 --limit 128 --batch 64 --test-limit 100 --quiet");
    if (rc != 2 || !strstr(err, "--opt-level") || !strstr(err, "--precision")) fail_msg("exit %d:\n%s", rc, err);
    free(err);
}

static void t_predict_content_exit(void **state) {
    (void)state;
    /* a valid safetensors file holding neither model */
    char path[1200];
    snprintf(path, sizeof path, "%s/other.safetensors", test_tmpdir);
    amp_tensor *t = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(3));
    const char *names[] = {"something"};
    assert_int_equal(amp_safetensors_write(path, &t, names, 1, NULL, 0), AMP_OK);
    amp_tensor_free(t);
    char *err;
    int rc = test_run_clif(NULL, NULL, &err, "predict --checkpoint %s --input /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", path);
    if (rc != 1 || !strstr(err, "model")) fail_msg("exit %d (expected 1):\n%s", rc, err);
    free(err);
}

static void t_cache_env_checked(void **state) {
    (void)state;
    const char *bad[] = {"AMP_CACHE_MB=abc", "AMP_CACHE_MB=-1", "AMP_CACHE_MB=12x", "AMP_CACHE_MB=99999999999999999999"};
    for (int i = 0; i < 4; i++) {
        char *err;
        int rc = test_run_clif(bad[i], NULL, &err, "--version");
        if (rc != 1 || !strstr(err, "AMP_CACHE_MB")) fail_msg("%s: exit %d:\n%s", bad[i], rc, err);
        free(err);
    }
    assert_int_equal(test_run_clif("AMP_CACHE_MB=0", NULL, NULL, "--version"), 0);
    assert_int_equal(test_run_clif("AMP_CACHE_MB=256", NULL, NULL, "--version"), 0);
}

static void t_bench_sizes_strict(void **state) {
    (void)state;
    const char *bad[] = {"1,,2", ",4", "4,", "4,x"};
    for (int i = 0; i < 4; i++) {
        char *err;
        int rc = test_run_clif(NULL, NULL, &err, "bench gemm --sizes %s --rounds 1", bad[i]);
        if (rc != 2) fail_msg("--sizes %s: exit %d (expected 2):\n%s", bad[i], rc, err);
        free(err);
    }
}

/* --device: a bad name is a usage error; cuda without a usable GPU stops
 * with the reason (built without CUDA, or no CUDA device) before any work */
static void t_bench_device(void **state) {
    (void)state;
    char *err;
    int rc = test_run_clif(NULL, NULL, &err, "bench precision --device tpu");
    if (rc != 2 || !strstr(err, "'tpu' is not a device")) fail_msg("--device tpu: exit %d:\n%s", rc, err);
    free(err);
    if (amp_cuda_available()) return; /* a GPU machine measures instead (scripts/gpu_check.sh) */
    rc = test_run_clif(NULL, NULL, &err, "bench precision --device cuda --n 64 --reps 1 --no-torch");
    const char *why = amp_cuda_built() ? "no CUDA device" : "built without CUDA";
    if (rc != 1 || !strstr(err, "amp bench precision: ") || !strstr(err, why))
        fail_msg("--device cuda without a GPU: exit %d (expected 1, '%s'):\n%s", rc, why, err);
    free(err);
}

/* --device on amp train / compare / memory: parsed, and refused with the reason
 * where a device cannot be used for that run */
static void t_train_device(void **state) {
    (void)state;
    struct {
        const char *args, *want;
        int rc;
    } c[] = {
        {"train --model gpt --device tpu", "'tpu' is not a device", 2},
        {"train --model mlp --device cuda", "--model mlp and cnn train on the CPU only so far", 2},
        {"train --model gpt --device cuda --checkpoint /tmp/x", "--checkpoint/--resume are not supported there yet", 2},
        {"train --model gpt --device cuda --inject-nonfinite-every 3", "writes into gradients on the host", 2},
        {"compare --model gpt --device cuda", "compare: --device cuda is not supported yet", 2},
        {"memory --model gpt --device cuda", "memory: --device cuda is not supported yet", 2},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char *err;
        int rc = test_run_clif(NULL, NULL, &err, c[i].args);
        if (rc != c[i].rc || !strstr(err, c[i].want)) fail_msg("amp %s: exit %d (expected %d, '%s'):\n%s", c[i].args, rc, c[i].rc, c[i].want, err);
        free(err);
    }
    if (amp_cuda_available()) return; /* a GPU machine trains instead (test_cuda_gpt, docs/cuda.md) */
    char *err;
    int rc = test_run_clif(NULL, NULL, &err, "train --model gpt --device cuda --max-steps 1");
    const char *why = amp_cuda_built() ? "no CUDA device" : "built without CUDA";
    if (rc != 2 || !strstr(err, "--device cuda: ") || !strstr(err, why))
        fail_msg("train --device cuda without a GPU: exit %d (expected 2, '%s'):\n%s", rc, why, err);
    free(err);
}

AMP_TEST_MAIN_FIXTURES(test_tmpdir_setup, test_tmpdir_teardown, t_long_data_dir, t_schedule_change_on_resume,
                       t_opt_level_needs_precision, t_predict_content_exit, t_cache_env_checked, t_bench_sizes_strict,
                       t_bench_device, t_train_device)

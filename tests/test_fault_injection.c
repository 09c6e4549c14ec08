/* Faults during training, through the CLI:
 *   - `amp train --inject-nonfinite-every K` (fp16 O1, dynamic loss scaling):
 *     every K-th step's gradient gets an inf/nan; that step is skipped and
 *     counted, the loss scale halves at exactly those steps (metrics file),
 *     the saved weights and optimizer state are finite, and the test accuracy
 *     ends within 1 percentage point of the same run without faults;
 *   - the same with bf16 O2 (master weights, the static guard scale of 1):
 *     skipped and counted, the scale stays 1, everything finite;
 *   - NaN in the input data (an f32 IDX training set in $AMP_DATA_DIR): the
 *     run stops with a report naming the step, epoch, batch and sample (the
 *     test finds the NaN image's batch with the library's own loader), and the
 *     last checkpoint, saved every step before it, is intact and finite.
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path (the
 * amp processes inherit AMP_CPU); there the scaler test checks the mechanics
 * on a shorter run, as under the sanitizers (fp16 is widened to f32 on every
 * path; the accuracy comparison is the full run's, on the machine's own
 * path). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static double summary_num(const char *out, const char *label) {
    const char *p = strstr(out, label);
    if (!p) fail_msg("no '%s' in the summary:\n%s", label, out);
    return atof(p + strlen(label));
}

/* Every float tensor of both checkpoint files is finite. */
static void assert_checkpoint_finite(const char *dir) {
    amp_checkpoint *c = amp_checkpoint_open(dir);
    if (!c) fail_msg("%s", amp_last_error());
    const amp_safetensors *files[] = {amp_checkpoint_model_file(c), amp_checkpoint_state_file(c)};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < amp_safetensors_count(files[k]); i++) {
            amp_safetensors_info in;
            amp_safetensors_info_at(files[k], i, &in);
            if (!amp_dtype_is_float(in.dtype)) continue;
            amp_tensor *t = amp_safetensors_get(files[k], in.name);
            int64_t n = amp_tensor_numel(t);
            double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
            amp_tensor_copy_out(t, v, AMP_F64);
            for (int64_t j = 0; j < n; j++)
                if (!isfinite(v[j])) fail_msg("%s: tensor %s element %lld is %g", dir, in.name, (long long)j, v[j]);
            free(v);
            amp_tensor_free(t);
        }
    }
    amp_checkpoint_close(c);
}

typedef struct {
    long step, skipped;
    double scale;
} metric_row;

static int read_metrics(const char *path, metric_row *rows, int max) {
    char *csv = test_read_file(path, NULL);
    assert_non_null(csv);
    int n = 0;
    char *save, *line = strtok_r(csv, "\n", &save);
    for (line = strtok_r(NULL, "\n", &save); line && n < max; line = strtok_r(NULL, "\n", &save)) {
        /* step,epoch,loss,scale,skipped,lr,ms */
        char *f[7];
        char *s2, *tok = strtok_r(line, ",", &s2);
        for (int i = 0; i < 7 && tok; i++, tok = strtok_r(NULL, ",", &s2)) f[i] = tok;
        rows[n].step = atol(f[0]);
        rows[n].scale = atof(f[3]);
        rows[n].skipped = atol(f[4]);
        n++;
    }
    free(csv);
    return n;
}

static void t_inject_fp16_scaler(void **state) {
    (void)state;
    /* under the sanitizers (make test-asan sets AMP_ASAN) and in the per-path runs
       a shorter run checks the mechanics; the accuracy comparison needs the full one */
    bool short_run = getenv("AMP_ASAN") != NULL || amp_test_per_path_run();
    const char *common = short_run ? "train --precision fp16 --limit 1024 --epochs 2 --batch 64 --test-limit 200 --quiet --threads 2"
                                   : "train --precision fp16 --limit 8192 --epochs 2 --batch 64 --test-limit 2000 --quiet --threads 2";
    const int K = short_run ? 4 : 16, steps = short_run ? 32 : 256;
    char *clean = test_run_cli_expect(0, NULL, "%s", common);
    char *fault = test_run_cli_expect(0, NULL, "%s --inject-nonfinite-every %d --checkpoint %s/inj --metrics %s/inj.csv", common, K, test_tmpdir, test_tmpdir);
    double acc_clean = summary_num(clean, "test accuracy"), acc_fault = summary_num(fault, "test accuracy");
    char label[64];
    snprintf(label, sizeof label, "steps             %d (", steps);
    double skipped = summary_num(fault, label);
    print_message("clean %.2f%%, with a fault every %d steps %.2f%% (%g steps skipped)\n", acc_clean, K, acc_fault, skipped);
    assert_true(skipped >= steps / K);
    if (!short_run && fabs(acc_clean - acc_fault) > 1.0) fail_msg("accuracy %.2f%% with faults vs %.2f%% without: more than 1 point apart", acc_fault, acc_clean);
    /* per step: the injected steps are exactly the skipped ones, and the scale halves there */
    char csv[1200];
    snprintf(csv, sizeof csv, "%s/inj.csv", test_tmpdir);
    metric_row rows[300];
    int n = read_metrics(csv, rows, 300);
    assert_int_equal(n, steps);
    long prev_skipped = 0;
    double prev_scale = 65536;
    for (int i = 0; i < n; i++) {
        bool injected = rows[i].step % K == 0;
        if (injected) {
            assert_int_equal(rows[i].skipped, prev_skipped + 1);
            if (rows[i].scale != prev_scale / 2) fail_msg("step %ld: scale %g after an injected fault, expected %g", rows[i].step, rows[i].scale, prev_scale / 2);
        } else if (rows[i].skipped == prev_skipped) {
            assert_true(rows[i].scale == prev_scale); /* growth needs 2000 clean steps */
        }
        prev_skipped = rows[i].skipped;
        prev_scale = rows[i].scale;
    }
    assert_true(summary_num(fault, "final loss scale") <= 65536.0 / (1 << (steps / K)));
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/inj", test_tmpdir);
    assert_checkpoint_finite(dir);
    test_free_all(clean, fault);
}

static void t_inject_bf16_master(void **state) {
    (void)state;
    char *out = test_run_cli_expect(0, NULL, "train --model mlp --precision bf16 --opt-level O2 --limit 1024 --batch 64 --test-limit 200 --quiet --threads 2 "
                    "--inject-nonfinite-every 4 --checkpoint %s/bf16", test_tmpdir);
    assert_non_null(strstr(out, "steps             16 (4 skipped for inf/nan gradients)"));
    assert_true(summary_num(out, "final loss scale") == 1.0); /* the guard scale is static */
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/bf16", test_tmpdir);
    assert_checkpoint_finite(dir);
    free(out);
}

/* ---- NaN in the data ------------------------------------------------------------------------------ */
static void write_idx(const char *path, int type, int ndim, const uint32_t *dims, const void *data, size_t es) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    unsigned char h[4] = {0, 0, (unsigned char)type, (unsigned char)ndim};
    fwrite(h, 1, 4, f);
    size_t count = 1;
    for (int i = 0; i < ndim; i++) {
        unsigned char d[4] = {(unsigned char)(dims[i] >> 24), (unsigned char)(dims[i] >> 16), (unsigned char)(dims[i] >> 8), (unsigned char)dims[i]};
        fwrite(d, 1, 4, f);
        count *= dims[i];
    }
    const unsigned char *p = data;
    for (size_t i = 0; i < count; i++)
        for (size_t b = 0; b < es; b++) fputc(p[i * es + es - 1 - b], f); /* big-endian */
    fclose(f);
}

/* An f32 IDX training set of n images (pixels given) and a 100-image u8
 * test set in dir; returns nothing, fails the test on error. */
static void write_dataset(const char *dir, uint32_t n, const float *img) {
    char path[1300];
    snprintf(path, sizeof path, "mkdir -p %s", dir);
    assert_int_equal(system(path), 0);
    uint8_t *lab = malloc(n), *timg = malloc(100 * 784), *tlab = malloc(100);
    for (uint32_t i = 0; i < n; i++) lab[i] = (uint8_t)(i % 10);
    for (int i = 0; i < 100 * 784; i++) timg[i] = (uint8_t)(i * 13);
    for (int i = 0; i < 100; i++) tlab[i] = (uint8_t)(i % 10);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    write_idx(path, 0x0D, 3, (uint32_t[]){n, 28, 28}, img, 4);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", dir);
    write_idx(path, 0x08, 1, (uint32_t[]){n}, lab, 1);
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte.gz", dir);
    write_idx(path, 0x08, 3, (uint32_t[]){100, 28, 28}, timg, 1);
    snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte.gz", dir);
    write_idx(path, 0x08, 1, (uint32_t[]){100}, tlab, 1);
    test_free_all(lab, timg, tlab);
}

/* n random images in [0, 1); the images listed in `big` get `value` in
 * every pixel (finite in f32, beyond fp16's 65504 when value > 65504). */
static float *images(uint32_t n, const uint32_t *big, int nbig, float value) {
    float *img = malloc(sizeof(float) * n * 784);
    test_rng r = {11};
    for (uint32_t i = 0; i < n * 784; i++) img[i] = (float)test_rng_uniform(&r);
    for (int b = 0; b < nbig; b++)
        for (int k = 0; k < 784; k++) img[big[b] * 784 + k] = value;
    return img;
}

/* ---- issue 12 item 1: an overflow storm stops the run with a diagnosis ----------------------- */
/* Every image holds 1e5 (finite in f32, inf in fp16): every fp16 step
 * overflows. The old trainer backed the scale off 40, 100, 165 times and
 * exited 0. Now it stops, exit 1, saying how many overflows in a row, the
 * scale, the first parameter whose gradient overflowed and to use bf16. */
static void t_overflow_storm_diagnosis(void **state) {
    (void)state;
    char data[1100], env[1200], *err;
    snprintf(data, sizeof data, "%s/storm", test_tmpdir);
    const uint32_t n = 512;
    uint32_t all[512];
    for (uint32_t i = 0; i < n; i++) all[i] = i;
    float *img = images(n, all, (int)n, 1e5f);
    write_dataset(data, n, img);
    free(img);
    snprintf(env, sizeof env, "AMP_DATA_DIR=%s", data);
    free(test_run_cli_expect_env(env, 1, &err, "train --precision fp16 --batch 8 --epochs 1 --quiet --threads 2 --checkpoint %s/storm-ck --save-every 5", test_tmpdir));
    const char *want[] = {"amp train: ", "consecutive", "loss scale", "1.weight", "bf16"};
    for (int i = 0; i < 5; i++)
        if (!strstr(err, want[i])) fail_msg("expected \"%s\" in the diagnosis:\n%s", want[i], err);
    free(err);
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/storm-ck", test_tmpdir);
    assert_checkpoint_finite(dir);
}

/* The scale collapsing: every step's gradient poisoned. The run stops after
 * --max-consecutive-overflows (here 10) with the diagnosis, weights finite. */
static void t_scale_collapse_stops(void **state) {
    (void)state;
    char *err;
    free(test_run_cli_expect(1, &err, "train --precision fp16 --limit 1024 --batch 16 --test-limit 100 --quiet --threads 2 --inject-nonfinite-every 1 "
             "--max-consecutive-overflows 10 --checkpoint %s/collapse --save-every 3", test_tmpdir));
    if (!strstr(err, "10 consecutive")) fail_msg("expected the count of overflows in a row:\n%s", err);
    if (!strstr(err, "step 10")) fail_msg("expected the run to stop at step 10:\n%s", err);
    free(err);
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/collapse", test_tmpdir);
    assert_checkpoint_finite(dir);
}

/* Unscale overflow: at scale 0.25 a finite scaled gradient of 1e38 unscales
 * to inf. Those steps are skipped; everything saved is finite. */
static void t_unscale_overflow_cli(void **state) {
    (void)state;
    char *out = test_run_cli_expect(0, NULL, "train --precision fp16 --limit 512 --batch 32 --test-limit 100 --quiet --threads 2 --init-scale 0.25 "
                    "--inject-nonfinite-every 4 --inject-value 1e38 --checkpoint %s/unscale", test_tmpdir);
    if (!strstr(out, "steps             16 (4 skipped for inf/nan gradients)")) fail_msg("expected 4 of 16 steps skipped:\n%s", out);
    free(out);
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/unscale", test_tmpdir);
    assert_checkpoint_finite(dir);
}

/* The scale collapsing to its floor: every step poisoned, no limit on the
 * count. f32 arithmetic reached 0 after 165 halvings (then 1/0); amp stops
 * at 2^-126, and the run stops when an overflow leaves the scale there:
 * 65536 -> 2^-126 is 142 halvings. */
static void t_scale_floor_stops(void **state) {
    (void)state;
    char *err;
    free(test_run_cli_expect(1, &err, "train --precision fp16 --limit 4096 --batch 16 --test-limit 100 --quiet --threads 2 --inject-nonfinite-every 1 "
             "--max-consecutive-overflows 100000 --checkpoint %s/floor --save-every 50", test_tmpdir));
    if (!strstr(err, "step 142") || !strstr(err, "(its floor)") || !strstr(err, "bf16")) fail_msg("expected a stop at the floor:\n%s", err);
    free(err);
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/floor", test_tmpdir);
    assert_checkpoint_finite(dir);
}

/* Unscale overflow on every step (1e38 at scale 0.25): each is skipped, the
 * weights stay finite, and the run stops with the diagnosis. */
static void t_unscale_overflow_storm(void **state) {
    (void)state;
    char *err;
    free(test_run_cli_expect(1, &err, "train --precision fp16 --limit 512 --batch 16 --test-limit 100 --quiet --threads 2 --init-scale 0.25 "
             "--inject-nonfinite-every 1 --inject-value 1e38 --max-consecutive-overflows 8 --checkpoint %s/uo --save-every 2", test_tmpdir));
    if (!strstr(err, "8 consecutive steps overflowed") || !strstr(err, "1.weight")) fail_msg("%s", err);
    free(err);
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/uo", test_tmpdir);
    assert_checkpoint_finite(dir);
}

/* ---- issue 12 item 4: a skipped step leaves the BatchNorm buffers alone --------------------- */
static void t_bn_skipped_step_buffers(void **state) {
    (void)state;
    const uint32_t n = 256;
    /* fp16: one image of 1e5 overflows fp16 in its batch; that step is skipped
       and the running statistics stay finite (they became NaN, accuracy 10%) */
    for (int prec = 0; prec < 2; prec++) {
        char data[1100], env[1200];
        snprintf(data, sizeof data, "%s/bn%d", test_tmpdir, prec);
        float *img = images(n, (uint32_t[]){37}, 1, prec == 0 ? 1e5f : 1e30f);
        write_dataset(data, n, img);
        free(img);
        snprintf(env, sizeof env, "AMP_DATA_DIR=%s", data);
        /* fp32: huge finite inputs made running_var inf */
        char *out = test_run_cli_expect_env(env, 0, NULL, "train --model cnn --precision %s --batch 32 --quiet --threads 2 --checkpoint %s/bnck%d", prec == 0 ? "fp16" : "fp32", test_tmpdir, prec);
        free(out);
        char dir[1200];
        snprintf(dir, sizeof dir, "%s/bnck%d", test_tmpdir, prec);
        assert_checkpoint_finite(dir);
    }
}

static void t_nan_in_input(void **state) {
    (void)state;
    char data[1100], path[1200];
    snprintf(data, sizeof data, "%s/data", test_tmpdir);
    snprintf(path, sizeof path, "mkdir -p %s", data);
    assert_int_equal(system(path), 0);
    const uint32_t n = 256, bad = 200;
    float *img = malloc(sizeof(float) * n * 784);
    uint8_t *lab = malloc(n), *timg = malloc(100 * 784), *tlab = malloc(100);
    test_rng r = {7};
    for (uint32_t i = 0; i < n * 784; i++) img[i] = (float)test_rng_uniform(&r);
    for (uint32_t i = 0; i < n; i++) lab[i] = (uint8_t)(i % 10);
    img[bad * 784 + 123] = NAN;
    for (int i = 0; i < 100 * 784; i++) timg[i] = (uint8_t)(i * 13);
    for (int i = 0; i < 100; i++) tlab[i] = (uint8_t)(i % 10);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", data); /* plain IDX under the .gz name: zlib reads both */
    write_idx(path, 0x0D, 3, (uint32_t[]){n, 28, 28}, img, 4);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", data);
    write_idx(path, 0x08, 1, (uint32_t[]){n}, lab, 1);
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte.gz", data);
    write_idx(path, 0x08, 3, (uint32_t[]){100, 28, 28}, timg, 1);
    snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte.gz", data);
    write_idx(path, 0x08, 1, (uint32_t[]){100}, tlab, 1);

    /* where the trainer's loader (batch 32, shuffled with seed 0) puts the bad image */
    char im[1200], lb[1200];
    snprintf(im, sizeof im, "%s/train-images-idx3-ubyte.gz", data);
    snprintf(lb, sizeof lb, "%s/train-labels-idx1-ubyte.gz", data);
    amp_dataset ds;
    if (amp_dataset_load(im, lb, 0, &ds) != AMP_OK) fail_msg("%s", amp_last_error());
    assert_non_null(ds.fimages);
    amp_loader_opts lo = {.batch = 32, .shuffle = true, .seed = 0};
    amp_loader *l = amp_loader_new(&ds, &lo);
    long want_batch = -1, want_sample = -1;
    for (long b = 0; want_batch < 0; b++) {
        amp_tensor *x, *y;
        assert_true(amp_loader_next(l, &x, &y));
        const float *px = amp_tensor_data(x);
        for (int64_t i = 0; i < amp_tensor_numel(x); i++)
            if (isnan(px[i])) {
                want_batch = b + 1;
                want_sample = (long)(i / 784);
                break;
            }
        test_free_tensors(x, y);
    }
    amp_loader_free(l);
    amp_dataset_free(&ds);

    print_message("the NaN image lands in batch %ld, sample %ld\n", want_batch, want_sample);
    char env[1300], *err;
    snprintf(env, sizeof env, "AMP_DATA_DIR=%s", data);
    free(test_run_cli_expect_env(env, 1, &err, "train --batch 32 --quiet --threads 2 --checkpoint %s/nan --save-every 1", test_tmpdir));
    char want[256];
    snprintf(want, sizeof want, "amp train: non-finite loss at step %ld (epoch 1, batch %ld): input batch contains NaN (sample %ld of the batch)",
             want_batch, want_batch, want_sample);
    if (!strstr(err, want)) fail_msg("expected \"%s\" in:\n%s", want, err);
    assert_non_null(strstr(err, "the weights were not updated"));
    free(err);
    if (want_batch > 1) {
        /* the checkpoint of the step before is intact and finite */
        char dir[1200];
        snprintf(dir, sizeof dir, "%s/nan", test_tmpdir);
        amp_checkpoint *c = amp_checkpoint_open(dir);
        if (!c) fail_msg("%s", amp_last_error());
        assert_int_equal(amp_checkpoint_step(c), want_batch - 1);
        amp_checkpoint_close(c);
        assert_checkpoint_finite(dir);
    }
    test_free_all(img, lab, timg, tlab);
}

AMP_TEST_MAIN_FIXTURES(test_tmpdir_setup, test_tmpdir_teardown, t_inject_fp16_scaler, t_inject_bf16_master,
                       t_nan_in_input, t_overflow_storm_diagnosis, t_scale_collapse_stops, t_unscale_overflow_cli,
                       t_scale_floor_stops, t_unscale_overflow_storm, t_bn_skipped_step_buffers)

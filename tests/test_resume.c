/* Exact resume through the CLI: a run of 2 epochs straight and the same run
 * stopped after a few steps (--stop-after), saved, and resumed (--resume)
 * end with byte-identical tensors in model.safetensors and
 * training_state.safetensors, and identical metadata (metrics included), for
 * fp32 (O0), fp16 O1 with the GradScaler, bf16 O2 with master weights and
 * stochastic rounding, and the cnn (dropout generator, batch-norm buffers,
 * a second optimizer for the f32 norms under O2). The stop points fall
 * mid-epoch and on an epoch boundary. Also: --save-every, the metrics file
 * of a resumed run, and the refusals (model, precision mode, optimizer,
 * batch, missing checkpoint, bad usage).
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path (the
 * amp processes inherit AMP_CPU): resume is exact on every path. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* Runs `amp train ARGS`; fails the test unless the exit status is want. */
static char *train(int want, const char *fmt, ...) {
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char cmd[2300];
    snprintf(cmd, sizeof cmd, "train --quiet --threads 2 --test-limit 100 %s", args);
    char *out = NULL, *err = NULL;
    int rc = test_run_cli(NULL, cmd, &out, &err);
    if (rc != want) fail_msg("amp %s: exit %d (expected %d)\nstdout:\n%s\nstderr:\n%s", cmd, rc, want, out, err);
    free(out);
    return err;
}

/* Every tensor byte-identical; metadata identical except the checkpoint id. */
static const char *const RESUME_SKIP[] = {"checkpoint_id", NULL};

/* 2 epochs of 4 batches = 8 steps; straight vs stopped at `stop` and resumed. */
static void resume_case(const char *name, const char *flags, int stop) {
    const char *common = "--limit 256 --batch 64 --epochs 2";
    char a[1100], b[1100];
    snprintf(a, sizeof a, "%s/%s_straight", test_tmpdir, name);
    snprintf(b, sizeof b, "%s/%s_split", test_tmpdir, name);
    test_free_all(train(0, "%s %s --checkpoint %s", common, flags, a), train(0, "%s %s --stop-after %d --checkpoint %s", common, flags, stop, b));
    free(train(0, "%s %s --resume %s", common, flags, b)); /* --checkpoint defaults to the resumed directory */
    test_assert_same_checkpoint(a, b, RESUME_SKIP, true);
}

static void t_resume_fp32(void **state) {
    (void)state;
    resume_case("fp32", "--model mlp", 3);
}

static void t_resume_fp16_scaler(void **state) {
    (void)state;
    /* the scaler skips the first step(s) at 2^16 and backs off: its state must travel */
    resume_case("fp16", "--model mlp --precision fp16", 4);
}

static void t_resume_bf16_o2_stochastic(void **state) {
    (void)state;
    resume_case("bf16o2", "--model mlp --precision bf16 --opt-level O2 --rounding stochastic", 5);
}

static void t_resume_cnn_fp16(void **state) {
    (void)state;
    resume_case("cnn_fp16", "--model cnn --precision fp16 --limit 128", 3);
}

static void t_resume_cnn_bf16_o2(void **state) {
    (void)state;
    resume_case("cnn_bf16o2", "--model cnn --precision bf16 --opt-level O2 --optimizer sgd --limit 128", 2);
}

static void t_save_every_and_metrics(void **state) {
    (void)state;
    char a[1100], b[1100], ma[1100], mb[1100];
    snprintf(a, sizeof a, "%s/se_straight", test_tmpdir);
    snprintf(b, sizeof b, "%s/se_split", test_tmpdir);
    snprintf(ma, sizeof ma, "%s/se_straight.csv", test_tmpdir);
    snprintf(mb, sizeof mb, "%s/se_split.csv", test_tmpdir);
    const char *common = "--model mlp --precision fp16 --limit 256 --batch 64 --epochs 2";
    free(train(0, "%s --checkpoint %s --metrics %s", common, a, ma));
    /* saves at 3 and 6; the run "dies" at 7 after writing a metrics row past the checkpoint */
    char cmd[8192], *out = NULL;
    snprintf(cmd, sizeof cmd, "train --threads 2 --test-limit 100 --log-every 100 %s --checkpoint %s --save-every 3 --stop-after 7 --metrics %s", common,
             b, mb);
    assert_int_equal(test_run_cli(NULL, cmd, &out, NULL), 0);
    assert_non_null(strstr(out, "(step 7; 3 saved by this run)"));
    free(out);
    /* roll the checkpoint back to step 6 as a crash after step 7's metrics row would leave it */
    char b6[1100];
    snprintf(b6, sizeof b6, "%s/se_split6", test_tmpdir);
    free(train(0, "%s --checkpoint %s --save-every 3 --stop-after 6", common, b6));
    snprintf(cmd, sizeof cmd, "train --threads 2 --test-limit 100 %s --resume %s --checkpoint %s --metrics %s", common, b6, b, mb);
    assert_int_equal(test_run_cli(NULL, cmd, &out, NULL), 0);
    assert_non_null(strstr(out, "resumed from"));
    assert_non_null(strstr(out, "at step 6 (epoch 2, batch 2)"));
    free(out);
    test_assert_same_checkpoint(a, b, RESUME_SKIP, true);
    /* the metrics files agree row by row except for the timing column */
    char *ca = test_read_file(ma, NULL), *cb = test_read_file(mb, NULL);
    assert_non_null(ca);
    assert_non_null(cb);
    char *sa, *sb;
    char *la = strtok_r(ca, "\n", &sa), *lb = strtok_r(cb, "\n", &sb);
    int rows = 0;
    while (la && lb) {
        char *ea = strrchr(la, ','), *eb = strrchr(lb, ',');
        *ea = *eb = 0;
        assert_string_equal(la, lb);
        rows++;
        la = strtok_r(NULL, "\n", &sa);
        lb = strtok_r(NULL, "\n", &sb);
    }
    assert_null(la);
    assert_null(lb);
    assert_int_equal(rows, 9); /* header + 8 steps, none twice */
    test_free_all(ca, cb);
}

static void t_resume_refusals(void **state) {
    (void)state;
    char d[1100];
    snprintf(d, sizeof d, "%s/ref", test_tmpdir);
    const char *common = "--limit 256 --batch 64";
    free(train(0, "%s --model mlp --stop-after 2 --checkpoint %s", common, d));
    char *err;
    err = train(1, "%s --model cnn --resume %s", common, d);
    assert_non_null(strstr(err, "the checkpoint was saved with model = mlp, this run has cnn (set by --model)"));
    free(err);
    err = train(1, "%s --model mlp --precision fp16 --resume %s", common, d);
    assert_non_null(strstr(err, "saved with mode = O0"));
    assert_non_null(strstr(err, "(set by --precision/--opt-level/--policy)"));
    free(err);
    err = train(1, "%s --model mlp --optimizer sgd --resume %s", common, d);
    assert_non_null(strstr(err, "saved with optimizer = adamw, this run has sgd"));
    free(err);
    err = train(1, "--limit 256 --batch 32 --model mlp --resume %s", d);
    assert_non_null(strstr(err, "saved with batch = 64, this run has 32"));
    free(err);
    err = train(1, "--limit 128 --batch 64 --model mlp --resume %s", d);
    assert_non_null(strstr(err, "train_examples = 256, this run has 128"));
    free(err);
    err = train(1, "%s --resume %s/does-not-exist", common, test_tmpdir);
    assert_non_null(strstr(err, "amp train: --resume"));
    assert_non_null(strstr(err, "cannot open checkpoint directory"));
    free(err);
    err = train(2, "%s --save-every 5", common);
    assert_non_null(strstr(err, "--save-every needs --checkpoint DIR"));
    free(err);
    err = train(2, "%s --checkpoint", common);
    free(err);
    /* a changed schedule horizon is allowed, with a warning */
    err = train(0, "%s --model mlp --max-steps 3 --resume %s", common, d);
    assert_non_null(strstr(err, "warning: the learning-rate schedule spans 3 steps"));
    free(err);
}

AMP_TEST_MAIN_FIXTURES(test_tmpdir_setup, test_tmpdir_teardown, t_resume_fp32, t_resume_fp16_scaler,
                       t_resume_bf16_o2_stochastic, t_resume_cnn_fp16, t_resume_cnn_bf16_o2, t_save_every_and_metrics,
                       t_resume_refusals)

/* Composition: small networks built from the public ops train to > 99%
 * training accuracy with plain SGD (written here on the f32 parameter
 * buffers; the optimizer library comes later):
 *   - a 2-layer MLP (linear-relu-linear + cross_entropy), 200 full-batch
 *     steps on a seeded, linearly separable 4-class problem (also run under
 *     bf16 autocast);
 *   - a tiny conv net (conv2d-relu-max_pool2d-linear) on seeded 8x8 images:
 *     which quadrant holds the bright blob (also run under f16 autocast).
 * Each step runs in a scope; live bytes must return to the same value after
 * every step from the second on (no leaks).
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "op_check.h"

#define STEPS 200

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    amp_tensor *p[4];
    int n;
} params;

static amp_tensor *param(test_rng *r, int nd, const int64_t *shape, double bound) {
    amp_tensor *t = tc_uniform(r, AMP_F32, nd, shape, -bound, bound);
    assert_int_equal(amp_tensor_set_requires_grad(t, true), AMP_OK);
    return t;
}

/* p -= lr * grad, then zero the grad (in place, like an optimizer) */
static void sgd_step(params *ps, float lr) {
    amp_no_grad_begin();
    for (int i = 0; i < ps->n; i++) {
        amp_tensor *g = amp_tensor_grad(ps->p[i]);
        assert_non_null(g);
        assert_int_equal(amp_tensor_dtype(g), AMP_F32);
        float *w = amp_tensor_data(ps->p[i]);
        float *gv = amp_tensor_data(g);
        int64_t n = amp_tensor_numel(ps->p[i]);
        for (int64_t k = 0; k < n; k++) w[k] -= lr * gv[k];
        amp_tensor_zero_(g);
    }
    amp_no_grad_end();
}

static double accuracy(const amp_tensor *logits, const int64_t *labels, int64_t n, int64_t classes) {
    double *v = tc_values(logits);
    int64_t ok = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t best = 0;
        for (int64_t c = 1; c < classes; c++)
            if (v[i * classes + c] > v[i * classes + best]) best = c;
        ok += best == labels[i];
    }
    free(v);
    return (double)ok / (double)n;
}

/* live bytes after every step from the second on equal those after the first */
static void check_live(int step, size_t *live1) {
    size_t live = amp_memory_stats().live_total;
    if (step == 0)
        *live1 = live;
    else if (live != *live1)
        fail_msg("step %d: live bytes %zu differ from %zu after step 1 (leak)", step, live, *live1);
}

/* ---- MLP on a separable problem ------------------------------------------------------------ */
#define MLP_N 256
#define MLP_D 8
#define MLP_H 32
#define MLP_C 4

static void make_separable(test_rng *r, float *x, int64_t *y) {
    double wt[MLP_C][MLP_D];
    for (int c = 0; c < MLP_C; c++)
        for (int d = 0; d < MLP_D; d++) wt[c][d] = test_rng_normal(r);
    int n = 0;
    while (n < MLP_N) {
        double p[MLP_D], s[MLP_C];
        for (int d = 0; d < MLP_D; d++) p[d] = test_rng_range(r, -1, 1);
        int best = 0, second = -1;
        for (int c = 0; c < MLP_C; c++) {
            s[c] = 0;
            for (int d = 0; d < MLP_D; d++) s[c] += wt[c][d] * p[d];
        }
        for (int c = 1; c < MLP_C; c++)
            if (s[c] > s[best]) best = c;
        for (int c = 0; c < MLP_C; c++)
            if (c != best && (second < 0 || s[c] > s[second])) second = c;
        if (s[best] - s[second] < 0.5) continue; /* keep a margin */
        for (int d = 0; d < MLP_D; d++) x[n * MLP_D + d] = (float)p[d];
        y[n] = best;
        n++;
    }
}

static void train_mlp(amp_dtype autocast_dt) {
    test_rng r = {2024};
    static float xs[MLP_N * MLP_D];
    static int64_t ys[MLP_N];
    make_separable(&r, xs, ys);
    amp_tensor *x = amp_tensor_from_data(xs, AMP_F32, 2, AMP_SHAPE(MLP_N, MLP_D));
    amp_tensor *y = amp_tensor_from_data(ys, AMP_I64, 1, AMP_SHAPE(MLP_N));
    params ps = {{param(&r, 2, AMP_SHAPE(MLP_H, MLP_D), 1.0 / sqrt(MLP_D)), param(&r, 1, AMP_SHAPE(MLP_H), 1.0 / sqrt(MLP_D)),
                  param(&r, 2, AMP_SHAPE(MLP_C, MLP_H), 1.0 / sqrt(MLP_H)), param(&r, 1, AMP_SHAPE(MLP_C), 1.0 / sqrt(MLP_H))},
                 4};
    size_t live1 = 0;
    double first_loss = 0, last_loss = 0, t0 = now_s();
    for (int step = 0; step < STEPS; step++) {
        amp_scope *s = amp_scope_begin();
        if (autocast_dt != AMP_F32) assert_int_equal(amp_autocast_enter(autocast_dt), AMP_OK);
        amp_tensor *h = amp_relu(amp_linear(x, ps.p[0], ps.p[1]));
        amp_tensor *logits = amp_linear(h, ps.p[2], ps.p[3]);
        amp_tensor *loss = amp_cross_entropy(logits, y, NULL);
        if (autocast_dt != AMP_F32) assert_int_equal(amp_autocast_exit(), AMP_OK);
        if (!loss) fail_msg("mlp step %d: %s", step, amp_last_error());
        if (autocast_dt != AMP_F32) assert_int_equal(amp_tensor_dtype(logits), autocast_dt);
        assert_int_equal(amp_backward(loss), AMP_OK);
        last_loss = amp_tensor_item(loss);
        if (step == 0) first_loss = last_loss;
        sgd_step(&ps, 0.5f);
        assert_int_equal(amp_scope_end(s), AMP_OK);
        check_live(step, &live1);
    }
    amp_scope *s = amp_scope_begin();
    amp_no_grad_begin();
    amp_tensor *logits = amp_linear(amp_relu(amp_linear(x, ps.p[0], ps.p[1])), ps.p[2], ps.p[3]);
    amp_no_grad_end();
    double acc = accuracy(logits, ys, MLP_N, MLP_C);
    amp_scope_end(s);
    printf("mlp (%s): loss %.6f -> %.6f, training accuracy %.2f%% (%d steps, %.2f s)\n",
           autocast_dt == AMP_F32 ? "f32" : amp_dtype_name(autocast_dt), first_loss, last_loss, 100 * acc, STEPS,
           now_s() - t0);
    assert_true(last_loss < first_loss);
    if (!(acc > 0.99)) fail_msg("mlp accuracy %.4f <= 0.99", acc);
    for (int i = 0; i < ps.n; i++) amp_tensor_free(ps.p[i]);
    test_free_tensors(x, y);
}

static void t_mlp(void **state) {
    (void)state;
    train_mlp(AMP_F32);
}

static void t_mlp_autocast_bf16(void **state) {
    (void)state;
    train_mlp(AMP_BF16);
}

/* ---- conv net: which quadrant holds the blob ----------------------------------------------------- */
#define CN_N 128
#define CN_S 8
#define CN_F 4 /* conv channels */

static void make_blobs(test_rng *r, float *x, int64_t *y) {
    for (int n = 0; n < CN_N; n++) {
        int q = n % 4;
        y[n] = q;
        float *img = x + n * CN_S * CN_S;
        for (int i = 0; i < CN_S * CN_S; i++) img[i] = (float)(0.2 * test_rng_normal(r));
        int half = CN_S / 2;
        int r0 = (q / 2) * half + (int)(test_rng_u64(r) % (uint64_t)(half - 1));
        int c0 = (q % 2) * half + (int)(test_rng_u64(r) % (uint64_t)(half - 1));
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) img[(r0 + i) * CN_S + c0 + j] += 1.5f;
    }
}

static void train_convnet(amp_dtype autocast_dt) {
    test_rng r = {77};
    static float xs[CN_N * CN_S * CN_S];
    static int64_t ys[CN_N];
    make_blobs(&r, xs, ys);
    amp_tensor *x = amp_tensor_from_data(xs, AMP_F32, 4, AMP_SHAPE(CN_N, 1, CN_S, CN_S));
    amp_tensor *y = amp_tensor_from_data(ys, AMP_I64, 1, AMP_SHAPE(CN_N));
    const int64_t flat = CN_F * (CN_S / 2) * (CN_S / 2);
    params ps = {{param(&r, 4, AMP_SHAPE(CN_F, 1, 3, 3), 1.0 / 3.0), param(&r, 1, AMP_SHAPE(CN_F), 1.0 / 3.0),
                  param(&r, 2, AMP_SHAPE(4, flat), 1.0 / sqrt((double)flat)), param(&r, 1, AMP_SHAPE(4), 1.0 / sqrt((double)flat))},
                 4};
    amp_conv_params cp = {{1, 1}, {1, 1}, {1, 1}, 1};
    amp_pool_params pp = {{2, 2}, {0, 0}, {0, 0}, {0, 0}, false, false};
    size_t live1 = 0;
    double first_loss = 0, last_loss = 0, t0 = now_s();
    for (int step = 0; step < STEPS; step++) {
        amp_scope *s = amp_scope_begin();
        if (autocast_dt != AMP_F32) assert_int_equal(amp_autocast_enter(autocast_dt), AMP_OK);
        amp_tensor *h = amp_max_pool2d(amp_relu(amp_conv2d(x, ps.p[0], ps.p[1], &cp)), &pp, NULL);
        amp_tensor *logits = amp_linear(amp_flatten(h, 1, -1), ps.p[2], ps.p[3]);
        amp_tensor *loss = amp_cross_entropy(logits, y, NULL);
        if (autocast_dt != AMP_F32) assert_int_equal(amp_autocast_exit(), AMP_OK);
        if (!loss) fail_msg("convnet step %d: %s", step, amp_last_error());
        if (autocast_dt != AMP_F32) assert_int_equal(amp_tensor_dtype(h), autocast_dt);
        assert_int_equal(amp_backward(loss), AMP_OK);
        last_loss = amp_tensor_item(loss);
        if (step == 0) first_loss = last_loss;
        sgd_step(&ps, 0.2f);
        assert_int_equal(amp_scope_end(s), AMP_OK);
        check_live(step, &live1);
    }
    amp_scope *s = amp_scope_begin();
    amp_no_grad_begin();
    amp_tensor *h = amp_max_pool2d(amp_relu(amp_conv2d(x, ps.p[0], ps.p[1], &cp)), &pp, NULL);
    amp_tensor *logits = amp_linear(amp_flatten(h, 1, -1), ps.p[2], ps.p[3]);
    amp_no_grad_end();
    double acc = accuracy(logits, ys, CN_N, 4);
    amp_scope_end(s);
    printf("convnet (%s): loss %.6f -> %.6f, training accuracy %.2f%% (%d steps, %.2f s)\n",
           autocast_dt == AMP_F32 ? "f32" : amp_dtype_name(autocast_dt), first_loss, last_loss, 100 * acc, STEPS,
           now_s() - t0);
    assert_true(last_loss < first_loss);
    if (!(acc > 0.99)) fail_msg("convnet accuracy %.4f <= 0.99", acc);
    for (int i = 0; i < ps.n; i++) amp_tensor_free(ps.p[i]);
    test_free_tensors(x, y);
}

static void t_convnet(void **state) {
    (void)state;
    train_convnet(AMP_F32);
}

static void t_convnet_autocast_f16(void **state) {
    (void)state;
    train_convnet(AMP_F16);
}

AMP_TEST_MAIN(t_mlp, t_mlp_autocast_bf16, t_convnet, t_convnet_autocast_f16)

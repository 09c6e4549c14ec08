/* Shape arithmetic that wraps (issue 12 item 3): sizes, strides and op
 * parameters near 2^63 must give an error naming the op and the argument,
 * never a tensor whose shape lies about its memory (reading past the
 * buffer), a negative size, a wrong output or a loop that never ends. */
#include <limits.h>
#include <string.h>

#include "op_check.h"

static void expect_refused(amp_tensor *t, const char *op, const char *arg) {
    if (t) {
        char b[200];
        fail_msg("%s accepted (shape %s); expected an error naming %s", op, amp_shape_str(t, b, sizeof b), arg);
    }
    const char *e = amp_last_error();
    if (!strstr(e, op) || !strstr(e, arg)) fail_msg("expected an error naming %s and %s, got: %s", op, arg, e);
    amp_clear_error();
}

/* 24 elements to [2^62+6, 4]: 4 * (2^62 + 6) wraps to 24. The old reshape
 * accepted it and then read gigabytes past the buffer. */
static void t_reshape(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = amp_tensor_arange(0, 24, 1, AMP_F32);
    int64_t big = ((int64_t)1 << 62) + 6;
    expect_refused(amp_reshape(x, 2, AMP_SHAPE(big, 4)), "amp_reshape", "overflow");
    expect_refused(amp_reshape(x, 3, AMP_SHAPE(-1, (int64_t)1 << 32, (int64_t)1 << 32)), "amp_reshape", "overflow");
    expect_refused(amp_reshape(x, 3, AMP_SHAPE(INT64_MAX, INT64_MAX, 0)), "amp_reshape", "overflow");
    amp_tensor *ok = amp_reshape(x, 3, AMP_SHAPE(2, -1, 4));
    assert_non_null(ok);
    assert_int_equal(amp_tensor_dim(ok, 1), 3);
    amp_scope_end(s);
}

/* step near 2^62 and INT64_MAX: the old size (end - start + step - 1) / step
 * wrapped to -1. One element is taken: the first. */
static void t_slice(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = amp_reshape(amp_tensor_arange(0, 24, 1, AMP_F32), 3, AMP_SHAPE(2, 3, 4));
    int64_t steps[3] = {((int64_t)1 << 62) + 1, INT64_MAX - 1, INT64_MAX};
    for (int i = 0; i < 3; i++) {
        amp_tensor *y = amp_slice(x, 0, 0, 2, steps[i]);
        if (!y) fail_msg("step %lld: %s", (long long)steps[i], amp_last_error());
        assert_int_equal(amp_tensor_ndim(y), 3);
        assert_int_equal(amp_tensor_dim(y, 0), 1);
        for (int64_t k = 0; k < 12; k++) assert_true(amp_tensor_get(y, AMP_SHAPE(0, k / 4, k % 4)) == (double)k);
        amp_tensor *c = amp_contiguous(y);
        assert_int_equal(amp_tensor_numel(c), 12);
    }
    /* start/end at the extremes are clamped, not wrapped */
    amp_tensor *z = amp_slice(x, 2, INT64_MIN, INT64_MAX, 3);
    assert_non_null(z);
    assert_int_equal(amp_tensor_dim(z, 2), 2);
    amp_scope_end(s);
}

/* dilation INT64_MAX: the old conv2d returned a 7x3 output. */
static void t_conv(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    test_rng r = {5};
    amp_tensor *x = tc_randn(&r, AMP_F32, 4, AMP_SHAPE(1, 1, 9, 5), 1);
    amp_tensor *w = tc_randn(&r, AMP_F32, 4, AMP_SHAPE(2, 1, 3, 3), 1);
    amp_conv_params p;
    memset(&p, 0, sizeof p);
    p.dilation[0] = p.dilation[1] = INT64_MAX;
    expect_refused(amp_conv2d(x, w, NULL, &p), "amp_conv2d", "dilation");
    memset(&p, 0, sizeof p);
    p.padding[0] = INT64_MAX / 2 + 1;
    expect_refused(amp_conv2d(x, w, NULL, &p), "amp_conv2d", "padding");
    memset(&p, 0, sizeof p);
    p.stride[1] = INT64_MAX;
    amp_tensor *y = amp_conv2d(x, w, NULL, &p); /* a legal huge stride: one output column */
    if (!y) fail_msg("%s", amp_last_error());
    assert_int_equal(amp_tensor_dim(y, 3), 1);
    amp_tensor *x1 = tc_randn(&r, AMP_F32, 3, AMP_SHAPE(1, 1, 9), 1);
    amp_tensor *w1 = tc_randn(&r, AMP_F32, 3, AMP_SHAPE(2, 1, 3), 1);
    memset(&p, 0, sizeof p);
    p.dilation[0] = ((int64_t)1 << 62) + 1;
    expect_refused(amp_conv1d(x1, w1, NULL, &p), "amp_conv1d", "dilation");
    amp_scope_end(s);
}

/* kernel INT64_MAX: the old pooling returned numbers; with padding 2^62 it
 * never returned. */
static void t_pool(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    test_rng r = {6};
    amp_tensor *x = tc_randn(&r, AMP_F32, 4, AMP_SHAPE(1, 2, 6, 5), 1);
    for (int avg = 0; avg < 2; avg++) {
        const char *op = avg ? "amp_avg_pool2d" : "amp_max_pool2d";
        for (int k = 0; k < 4; k++) {
            amp_pool_params p;
            memset(&p, 0, sizeof p);
            p.kernel[0] = p.kernel[1] = INT64_MAX;
            if (k == 1) p.stride[0] = p.stride[1] = 1;
            if (k == 2) p.padding[0] = p.padding[1] = (int64_t)1 << 62;
            if (k == 3) p.ceil_mode = true;
            amp_tensor *y = avg ? amp_avg_pool2d(x, &p) : amp_max_pool2d(x, &p, NULL);
            if (y) {
                char b[200];
                fail_msg("%s kernel INT64_MAX (case %d) gave a %s output", op, k, amp_shape_str(y, b, sizeof b));
            }
            if (!strstr(amp_last_error(), op)) fail_msg("%s", amp_last_error());
            amp_clear_error();
        }
        amp_pool_params p;
        memset(&p, 0, sizeof p);
        p.kernel[0] = p.kernel[1] = 2;
        p.stride[0] = INT64_MAX;
        amp_tensor *y = avg ? amp_avg_pool2d(x, &p) : amp_max_pool2d(x, &p, NULL);
        if (!y) fail_msg("%s with stride INT64_MAX: %s", op, amp_last_error());
        assert_int_equal(amp_tensor_dim(y, 2), 1);
        assert_int_equal(amp_tensor_dim(y, 3), 2);
    }
    amp_scope_end(s);
}

/* views whose element count or extent does not fit: expand to [2^62, 2^62] */
static void t_expand(void **state) {
    (void)state;
    amp_scope *s = amp_scope_begin();
    amp_tensor *x = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(1, 1));
    int64_t big = (int64_t)1 << 62;
    expect_refused(amp_expand(x, 2, AMP_SHAPE(big, big)), "amp_expand", "overflow");
    expect_refused(amp_expand(x, 3, AMP_SHAPE(INT64_MAX, 2, 1)), "amp_expand", "overflow");
    amp_scope_end(s);
}

AMP_TEST_MAIN(t_reshape, t_slice, t_conv, t_expand, t_pool)

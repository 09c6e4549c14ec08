/* Custom autograd functions (amp/autograd.h: amp_function), the C form of
 * torch.autograd.Function with custom_fwd / custom_bwd: the gradients they
 * define, the autocast state forward and backward run under (with and without
 * cast_inputs, inside and outside autocast), saved tensors and their version
 * checks, differentiating a custom backward again (create_graph) or refusing
 * to (once_differentiable), and the errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_check.h"

static void expect_error(const char *needle) {
    if (!strstr(amp_last_error(), needle)) fail_msg("expected an error containing \"%s\", got \"%s\"", needle, amp_last_error());
}

/* What forward and backward saw. */
typedef struct {
    bool fwd_autocast, bwd_autocast, bwd_grad_mode, fwd_grad_mode;
    amp_dtype fwd_dtype, bwd_dtype, in_dtype[2], out_dtype;
    int fwd_calls, bwd_calls;
} probe;

static probe g_probe;

/* MyMM from the torch page: a @ b, gradients g bᵀ and aᵀ g. */
static amp_tensor *mm_forward(amp_function_ctx *ctx, amp_tensor *const *in, int n) {
    (void)n;
    g_probe.fwd_calls++;
    g_probe.fwd_autocast = amp_autocast_is_enabled();
    g_probe.fwd_dtype = amp_autocast_dtype();
    g_probe.fwd_grad_mode = amp_grad_enabled();
    g_probe.in_dtype[0] = amp_tensor_dtype(in[0]);
    g_probe.in_dtype[1] = amp_tensor_dtype(in[1]);
    amp_function_save(ctx, in[0]);
    amp_function_save(ctx, in[1]);
    amp_tensor *out = amp_mm(in[0], in[1]);
    g_probe.out_dtype = amp_tensor_dtype(out);
    return out;
}

static amp_status mm_backward(amp_function_ctx *ctx, amp_tensor *g, amp_tensor **gin) {
    g_probe.bwd_calls++;
    g_probe.bwd_autocast = amp_autocast_is_enabled();
    g_probe.bwd_dtype = amp_autocast_dtype();
    g_probe.bwd_grad_mode = amp_grad_enabled();
    amp_tensor *a = amp_function_saved(ctx, 0), *b = amp_function_saved(ctx, 1);
    if (amp_function_needs_input_grad(ctx, 0)) gin[0] = amp_mm(g, amp_transpose(b, 0, 1));
    if (amp_function_needs_input_grad(ctx, 1)) gin[1] = amp_mm(amp_transpose(a, 0, 1), g);
    return AMP_OK;
}

static const amp_function MyMM = {.name = "MyMM", .forward = mm_forward, .backward = mm_backward};
/* MyFloat32Func: custom_fwd(cast_inputs=torch.float32) */
static const amp_function MyMM32 = {.name = "MyMM32", .forward = mm_forward, .backward = mm_backward, .cast_inputs = true,
                                    .cast_dtype = AMP_F32};

static void reference_grads(amp_tensor *a, amp_tensor *b, amp_tensor *w, double **ga, double **gb) {
    /* the same loss through amp_mm */
    amp_scope *s = amp_scope_begin();
    amp_tensor *la = amp_to(amp_detach(a), AMP_F32), *lb = amp_to(amp_detach(b), AMP_F32);
    la = amp_clone(la);
    lb = amp_clone(lb);
    amp_tensor_keep(la);
    amp_tensor_keep(lb);
    amp_scope_end(s);
    s = amp_scope_begin();
    amp_tensor *l2a = amp_detach(la), *l2b = amp_detach(lb);
    amp_tensor_set_requires_grad(l2a, true);
    amp_tensor_set_requires_grad(l2b, true);
    amp_tensor *loss = amp_sum(amp_mul(amp_mm(l2a, l2b), w), NULL, 0, false), *g[2];
    assert_int_equal(amp_grad(&loss, 1, NULL, (amp_tensor *[]){l2a, l2b}, 2, g, false, false), AMP_OK);
    *ga = tc_values(g[0]);
    *gb = tc_values(g[1]);
    amp_scope_end(s);
    test_free_tensors(la, lb);
}

static void t_gradients_and_autocast_states(void **s) {
    (void)s;
    test_rng r = {1};
    amp_scope *sc = amp_scope_begin();
    amp_tensor *a = tc_randn(&r, AMP_F32, 2, AMP_SHAPE(3, 4), 1.0), *b = tc_randn(&r, AMP_F32, 2, AMP_SHAPE(4, 5), 1.0);
    amp_tensor *w = tc_randn(&r, AMP_F32, 2, AMP_SHAPE(3, 5), 1.0);
    amp_tensor_set_requires_grad(a, true);
    amp_tensor_set_requires_grad(b, true);
    double *ra, *rb;
    reference_grads(a, b, w, &ra, &rb);

    /* 1. outside autocast: plain function; forward records nothing; backward gives the reference */
    memset(&g_probe, 0, sizeof g_probe);
    amp_tensor *y = amp_function_apply(&MyMM, (amp_tensor *[]){a, b}, 2, NULL);
    assert_non_null(y);
    assert_string_equal(amp_tensor_grad_fn_name(y), "MyMM");
    assert_false(g_probe.fwd_grad_mode); /* forward runs under no_grad, as torch's */
    assert_false(g_probe.fwd_autocast);
    assert_int_equal(amp_backward(amp_sum(amp_mul(y, w), NULL, 0, false)), AMP_OK);
    assert_int_equal(g_probe.bwd_calls, 1);
    assert_false(g_probe.bwd_autocast);
    assert_false(g_probe.bwd_grad_mode);
    double *ga = tc_values(amp_tensor_grad(a)), *gb = tc_values(amp_tensor_grad(b));
    tc_assert_close_n(ga, ra, 12, 1e-6, 1e-6, "MyMM grad a");
    tc_assert_close_n(gb, rb, 20, 1e-6, 1e-6, "MyMM grad b");
    test_free_all(ga, gb);

    /* 2. custom_fwd without cast_inputs inside f16 autocast: forward runs
     *    under autocast (mm gives f16), backward under the same state (custom_bwd) */
    amp_tensor_set_grad(a, NULL);
    amp_tensor_set_grad(b, NULL);
    memset(&g_probe, 0, sizeof g_probe);
    amp_autocast_enter(AMP_F16);
    y = amp_function_apply(&MyMM, (amp_tensor *[]){a, b}, 2, NULL);
    amp_autocast_exit();
    assert_true(g_probe.fwd_autocast);
    assert_int_equal(g_probe.in_dtype[0], AMP_F32);
    assert_int_equal(g_probe.out_dtype, AMP_F16);
    assert_int_equal(amp_tensor_dtype(y), AMP_F16);
    assert_int_equal(amp_backward(amp_sum(amp_mul(amp_to(y, AMP_F32), w), NULL, 0, false)), AMP_OK);
    assert_true(g_probe.bwd_autocast); /* autocast was exited by now: the state is forward's */
    assert_int_equal(g_probe.bwd_dtype, AMP_F16);
    ga = tc_values(amp_tensor_grad(a));
    tc_assert_close_n(ga, ra, 12, 2e-2, 2e-2, "MyMM under autocast, grad a (half precision)");
    assert_int_equal(amp_tensor_dtype(amp_tensor_grad(a)), AMP_F32); /* leaf dtype */
    free(ga);

    /* 3. cast_inputs = f32 inside autocast: f16 inputs arrive as f32, forward
     *    runs with autocast off, backward too; the output is f32 */
    amp_tensor *a16 = amp_to(amp_detach(a), AMP_F16), *b16 = amp_to(amp_detach(b), AMP_F16);
    amp_tensor_set_requires_grad(a16, true);
    amp_tensor_set_requires_grad(b16, true);
    memset(&g_probe, 0, sizeof g_probe);
    amp_autocast_enter(AMP_F16);
    y = amp_function_apply(&MyMM32, (amp_tensor *[]){a16, b16}, 2, NULL);
    amp_autocast_exit();
    assert_false(g_probe.fwd_autocast);
    assert_int_equal(g_probe.in_dtype[0], AMP_F32);
    assert_int_equal(g_probe.in_dtype[1], AMP_F32);
    assert_int_equal(amp_tensor_dtype(y), AMP_F32);
    amp_autocast_enter(AMP_F16); /* backward called inside a region still runs as forward did */
    assert_int_equal(amp_backward(amp_sum(amp_mul(y, w), NULL, 0, false)), AMP_OK);
    amp_autocast_exit();
    assert_false(g_probe.bwd_autocast);
    /* the casts were differentiable: f16 leaves get f16 grads of the f32 math */
    assert_int_equal(amp_tensor_dtype(amp_tensor_grad(a16)), AMP_F16);
    ga = tc_values(amp_tensor_grad(a16));
    tc_assert_close_n(ga, ra, 12, 1e-2, 1e-2, "MyMM32 grad a");
    free(ga);

    /* 4. cast_inputs outside autocast has no effect */
    memset(&g_probe, 0, sizeof g_probe);
    y = amp_function_apply(&MyMM32, (amp_tensor *[]){a16, b16}, 2, NULL);
    assert_int_equal(g_probe.in_dtype[0], AMP_F16);
    assert_int_equal(amp_tensor_dtype(y), AMP_F16);
    test_free_all(ra, rb);
    amp_scope_end(sc);
}

/* ---- saved tensors, outputs, version checks ------------------------------------------------------- */
typedef struct {
    double k;
} cube_data;

/* k x^3 with its output saved too; backward with ops: differentiable again */
static amp_tensor *cube_forward(amp_function_ctx *ctx, amp_tensor *const *in, int n) {
    (void)n;
    ((cube_data *)amp_function_data(ctx))->k = *(double *)amp_function_arg(ctx);
    amp_tensor *y = amp_mul_scalar(amp_pow(in[0], 3.0), ((cube_data *)amp_function_data(ctx))->k);
    amp_function_save(ctx, in[0]);
    amp_function_save(ctx, y);
    return y;
}

static amp_status cube_backward(amp_function_ctx *ctx, amp_tensor *g, amp_tensor **gin) {
    /* 3 k x^2 = 3 y / x: uses both saved tensors, so a second derivative must see both histories */
    amp_tensor *x = amp_function_saved(ctx, 0), *y = amp_function_saved(ctx, 1);
    gin[0] = amp_mul(g, amp_div(amp_mul_scalar(y, 3.0), x));
    return AMP_OK;
}

static const amp_function Cube = {.name = "Cube", .forward = cube_forward, .backward = cube_backward, .data_size = sizeof(cube_data)};
static const amp_function CubeOnce = {.name = "CubeOnce", .forward = cube_forward, .backward = cube_backward,
                                      .data_size = sizeof(cube_data), .once_differentiable = true};

static void t_saved_and_higher_order(void **s) {
    (void)s;
    amp_scope *sc = amp_scope_begin();
    double k = 0.5;
    amp_tensor *x = amp_tensor_from_data((float[]){1.5f, -2, 0.5f}, AMP_F32, 1, AMP_SHAPE(3));
    amp_tensor_set_requires_grad(x, true);
    amp_tensor *y = amp_function_apply(&Cube, &x, 1, &k);
    amp_tensor *l = amp_sum(y, NULL, 0, false), *g[1], *g2[1];
    assert_int_equal(amp_grad(&l, 1, NULL, &x, 1, g, true, true), AMP_OK);
    assert_true(amp_tensor_requires_grad(g[0]));
    amp_tensor *l2 = amp_sum(g[0], NULL, 0, false);
    assert_int_equal(amp_grad(&l2, 1, NULL, &x, 1, g2, false, true), AMP_OK);
    for (int i = 0; i < 3; i++) {
        double xv = amp_tensor_get(x, (int64_t[]){i});
        assert_close(amp_tensor_get(g[0], (int64_t[]){i}), 3 * k * xv * xv, 1e-6, 0, "d/dx k x^3");
        assert_close(amp_tensor_get(g2[0], (int64_t[]){i}), 6 * k * xv, 1e-5, 0, "d2/dx2 k x^3 through a custom backward");
    }
    /* once_differentiable: create_graph refuses by name; the ordinary gradient works */
    y = amp_function_apply(&CubeOnce, &x, 1, &k);
    l = amp_sum(y, NULL, 0, false);
    assert_int_equal(amp_grad(&l, 1, NULL, &x, 1, g, true, true), AMP_ERR_UNSUPPORTED);
    expect_error("create_graph: CubeOnce has no double backward");
    assert_int_equal(amp_grad(&l, 1, NULL, &x, 1, g, false, true), AMP_OK);
    assert_close(amp_tensor_get(g[0], (int64_t[]){1}), 3 * k * 4, 1e-6, 0, "CubeOnce gradient");
    /* a saved input changed in place: backward refuses, naming the function */
    amp_tensor *z = amp_tensor_from_data((float[]){1, 2, 3}, AMP_F32, 1, AMP_SHAPE(3));
    amp_tensor_set_requires_grad(z, true);
    amp_tensor *zc = amp_mul_scalar(z, 1.0); /* a non-leaf to change */
    y = amp_function_apply(&Cube, &zc, 1, &k);
    amp_tensor_fill_(zc, 7.0);
    assert_int_equal(amp_backward(amp_sum(y, NULL, 0, false)), AMP_ERR_STATE);
    expect_error("Cube saved input 0");
    expect_error("modified in place");
    amp_scope_end(sc);
}

/* ---- errors ---------------------------------------------------------------------------------------- */
static amp_tensor *null_forward(amp_function_ctx *ctx, amp_tensor *const *in, int n) {
    (void)ctx;
    (void)n;
    return amp_matmul(in[0], in[0]); /* [3] @ [3] is fine; [2,3] @ [2,3] fails inside */
}
static amp_status bad_shape_backward(amp_function_ctx *ctx, amp_tensor *g, amp_tensor **gin) {
    (void)ctx;
    gin[0] = amp_reshape(g, 1, AMP_SHAPE(-1)); /* wrong shape for a [2,2] input */
    return AMP_OK;
}
static amp_tensor *id_forward(amp_function_ctx *ctx, amp_tensor *const *in, int n) {
    (void)n;
    for (int i = 0; i < 9; i++)
        if (amp_function_save(ctx, in[0]) != AMP_OK) return NULL;
    return in[0];
}
static amp_status fail_backward(amp_function_ctx *ctx, amp_tensor *g, amp_tensor **gin) {
    (void)ctx;
    (void)g;
    (void)gin;
    return AMP_ERR_RANGE;
}
static amp_tensor *sum_forward(amp_function_ctx *ctx, amp_tensor *const *in, int n) {
    (void)ctx;
    (void)n;
    return amp_sum(in[0], NULL, 0, false);
}

static amp_tensor *int_forward(amp_function_ctx *ctx, amp_tensor *const *in, int n) {
    (void)ctx;
    (void)n;
    return amp_to(in[0], AMP_I64);
}

static void t_errors(void **s) {
    (void)s;
    amp_scope *sc = amp_scope_begin();
    amp_tensor *x = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(2, 3)), *sq = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(2, 2));
    amp_tensor_set_requires_grad(x, true);
    amp_tensor_set_requires_grad(sq, true);
    amp_function f = {.name = "Broken", .forward = null_forward, .backward = bad_shape_backward};
    assert_null(amp_function_apply(&f, &x, 1, NULL));
    expect_error("amp_matmul: [2,3] @ [2,3]: inner dimensions 3 and 2 differ (then: amp_function_apply: Broken: forward failed)");
    amp_tensor *y = amp_function_apply(&f, &sq, 1, NULL);
    assert_non_null(y);
    assert_int_equal(amp_backward(amp_sum(y, NULL, 0, false)), AMP_ERR_SHAPE);
    expect_error("Broken: backward gave a gradient of shape [4] for input 0 of shape [2,2]");
    f = (amp_function){.name = "Hoarder", .forward = id_forward, .backward = bad_shape_backward};
    assert_null(amp_function_apply(&f, &x, 1, NULL));
    expect_error("Hoarder: at most 8 saved tensors");
    f = (amp_function){.name = "Fails", .forward = sum_forward, .backward = fail_backward};
    y = amp_function_apply(&f, &x, 1, NULL);
    assert_int_equal(amp_backward(y), AMP_ERR_RANGE);
    expect_error("Fails: backward failed");
    f = (amp_function){.name = "NoBackward", .forward = sum_forward};
    assert_null(amp_function_apply(&f, &x, 1, NULL));
    expect_error("amp_function_apply: NoBackward: forward and backward are required");
    f = (amp_function){.name = "Cast", .forward = sum_forward, .backward = fail_backward, .cast_inputs = true, .cast_dtype = AMP_I64};
    assert_null(amp_function_apply(&f, &x, 1, NULL));
    expect_error("cast_dtype i64 is not f32, f16 or bf16");
    /* an integer output of a recorded function: refused, naming its dtype (the message was built from the
     * released tensor: a use after free under ASan) */
    f = (amp_function){.name = "ToInt", .forward = int_forward, .backward = fail_backward};
    assert_null(amp_function_apply(&f, &x, 1, NULL));
    expect_error("amp_function_apply: ToInt: forward returned a tensor of dtype i64; an output that requires grad is");
    /* no input requires grad: forward runs, nothing is recorded, saves are ignored */
    amp_tensor *c = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(4));
    double k = 2;
    y = amp_function_apply(&Cube, &c, 1, &k);
    assert_non_null(y);
    assert_false(amp_tensor_requires_grad(y));
    assert_true(amp_tensor_get(y, (int64_t[]){0}) == 2.0);
    amp_scope_end(sc);
}

AMP_TEST_MAIN(t_gradients_and_autocast_states, t_saved_and_higher_order, t_errors)

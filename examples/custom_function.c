/* Autocast and custom autograd functions (PyTorch's AMP examples page).
 * MyMM is the page's custom matmul: with the default (custom_fwd without
 * cast_inputs) its forward runs under the caller's autocast state, so the
 * product is f16 inside a region, and its backward runs under the same state
 * (custom_bwd). MyFloat32Func stands for a function that needs f32 (here a
 * softmax cross-entropy written by hand, as a numerically careful kernel
 * would be): custom_fwd(cast_inputs=torch.float32) casts its f16 inputs to
 * f32 and runs forward with autocast off. The example checks the dtypes each
 * one saw and its gradients against the same computation with built-in ops. */
#include <amp/amp.h>
#include <math.h>
#include <stdio.h>

typedef struct {
    bool autocast;
    amp_dtype in;
} seen;
static seen g_fwd, g_mm_bwd, g_xent_bwd;

static amp_tensor *mm_forward(amp_function_ctx *ctx, amp_tensor *const *in, int n) {
    (void)n;
    g_fwd = (seen){amp_autocast_is_enabled(), amp_tensor_dtype(in[0])};
    amp_function_save(ctx, in[0]); /* ctx.save_for_backward(a, b) */
    amp_function_save(ctx, in[1]);
    return amp_mm(in[0], in[1]);
}

static amp_status mm_backward(amp_function_ctx *ctx, amp_tensor *grad, amp_tensor **gin) {
    g_mm_bwd = (seen){amp_autocast_is_enabled(), amp_tensor_dtype(grad)};
    amp_tensor *a = amp_function_saved(ctx, 0), *b = amp_function_saved(ctx, 1);
    gin[0] = amp_mm(grad, amp_transpose(b, 0, 1)); /* grad.mm(b.t()) */
    gin[1] = amp_mm(amp_transpose(a, 0, 1), grad); /* a.t().mm(grad) */
    return AMP_OK;
}

static const amp_function MyMM = {.name = "MyMM", .forward = mm_forward, .backward = mm_backward};

/* softmax cross-entropy with one-hot targets, by hand: mean(logsumexp(z) - z[target]) */
static amp_tensor *xent_forward(amp_function_ctx *ctx, amp_tensor *const *in, int n) {
    (void)n;
    g_fwd = (seen){amp_autocast_is_enabled(), amp_tensor_dtype(in[0])};
    amp_tensor *p = amp_softmax(in[0], 1);
    amp_function_save(ctx, p);
    amp_function_save(ctx, in[1]);
    amp_tensor *picked = amp_sum(amp_mul(amp_log_softmax(in[0], 1), in[1]), (const int[]){1}, 1, false);
    return amp_neg(amp_mean(picked, NULL, 0, false));
}

static amp_status xent_backward(amp_function_ctx *ctx, amp_tensor *grad, amp_tensor **gin) {
    g_xent_bwd = (seen){amp_autocast_is_enabled(), amp_tensor_dtype(grad)};
    amp_tensor *p = amp_function_saved(ctx, 0), *onehot = amp_function_saved(ctx, 1);
    double rows = (double)amp_tensor_dim(p, 0);
    gin[0] = amp_mul(amp_div_scalar(amp_sub(p, onehot), rows), grad); /* (softmax - onehot) / N */
    return AMP_OK;                                                  /* no gradient for the targets */
}

static const amp_function MyFloat32Func = {.name = "MyFloat32Func", .forward = xent_forward, .backward = xent_backward,
                                           .cast_inputs = true, .cast_dtype = AMP_F32};

/* max |a - b| over max |b| */
static double max_rel_diff(amp_tensor *a, amp_tensor *b) {
    double x[128], y[128], mx = 0, d = 0;
    amp_tensor_copy_out(a, x, AMP_F64);
    amp_tensor_copy_out(b, y, AMP_F64);
    for (int64_t k = 0; k < amp_tensor_numel(a); k++) {
        mx = fmax(mx, fabs(y[k]));
        d = fmax(d, fabs(x[k] - y[k]));
    }
    return d / mx;
}

int main(void) {
    amp_generator g = amp_generator_make(6);
    amp_scope *s = amp_scope_begin();
    amp_tensor *a = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(8, 16), &g), *b = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(16, 4), &g);
    amp_tensor_set_requires_grad(a, true);
    amp_tensor_set_requires_grad(b, true);
    amp_tensor *onehot = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(8, 4));
    for (int64_t i = 0; i < 8; i++) amp_tensor_set(onehot, (int64_t[]){i, i % 4}, 1.0);

    /* mixed precision: MyMM under autocast, then the f32 loss */
    amp_autocast_enter(AMP_F16);
    amp_tensor *z = amp_function_apply(&MyMM, (amp_tensor *[]){a, b}, 2, NULL);
    seen mm_fwd = g_fwd;
    amp_tensor *loss = amp_function_apply(&MyFloat32Func, (amp_tensor *[]){z, onehot}, 2, NULL);
    seen xent_fwd = g_fwd;
    amp_autocast_exit();
    amp_tensor *ga[2];
    amp_grad(&loss, 1, NULL, (amp_tensor *[]){a, b}, 2, ga, false, false); /* outside the region now */
    seen mm_bwd = g_mm_bwd, xent_bwd = g_xent_bwd;

    /* the same with built-in ops */
    amp_tensor *a2 = amp_detach(a), *b2 = amp_detach(b), *gr[2];
    amp_tensor_set_requires_grad(a2, true);
    amp_tensor_set_requires_grad(b2, true);
    amp_autocast_enter(AMP_F16);
    amp_tensor *z2 = amp_mm(a2, b2);
    amp_autocast_exit();
    amp_tensor *targets = amp_tensor_empty(AMP_I64, 1, AMP_SHAPE(8));
    for (int64_t i = 0; i < 8; i++) amp_tensor_set(targets, &i, (double)(i % 4));
    amp_tensor *loss2 = amp_cross_entropy(amp_to(z2, AMP_F32), targets, NULL);
    amp_grad(&loss2, 1, NULL, (amp_tensor *[]){a2, b2}, 2, gr, false, false);

    int ok = mm_fwd.autocast && mm_fwd.in == AMP_F32 && amp_tensor_dtype(z) == AMP_F16; /* custom_fwd: f16 product */
    ok &= !xent_fwd.autocast && xent_fwd.in == AMP_F32;                                  /* cast_inputs: f32, autocast off */
    ok &= amp_tensor_dtype(loss) == AMP_F32 && mm_bwd.autocast && !xent_bwd.autocast;    /* custom_bwd: forward's state */
    ok &= amp_tensor_dtype(ga[0]) == AMP_F32;                                            /* the leaf's dtype */
    double d = fmax(max_rel_diff(ga[0], gr[0]), max_rel_diff(ga[1], gr[1]));
    ok &= fabs(amp_tensor_item(loss) - amp_tensor_item(loss2)) < 1e-5 && d < 1e-5;
    printf("custom_function: MyMM forward %s autocast on %s inputs -> %s; MyFloat32Func forward %s autocast on %s inputs; "
           "backwards under forward's state; gradients vs built-in ops: max difference %.1e\n",
           mm_fwd.autocast ? "under" : "without", amp_dtype_name(mm_fwd.in), amp_dtype_name(amp_tensor_dtype(z)),
           xent_fwd.autocast ? "under" : "without", amp_dtype_name(xent_fwd.in), d);
    amp_scope_end(s);
    return ok ? 0 : 1;
}

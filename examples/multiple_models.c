/* Working with multiple models, losses and optimizers (PyTorch's AMP
 * examples page): one scaler for all of them. Each loss is scaled and
 * backwarded (the first with retain_graph: both losses use both models),
 * each optimizer is stepped through the scaler, which decides for each on its
 * own gradients whether to skip, and the scale is updated once per
 * iteration (the first steps skip while the default scale, 2^16, backs off
 * to one the f16 gradients fit). At step 100 model 1 gets an inf in its
 * gradients only: its optimizer skips while model 0's steps, and the scale
 * backs off once. */
#include <amp/amp.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static amp_module *mlp(amp_generator *g) {
    amp_module *layers[] = {amp_nn_linear(8, 32, true, g), amp_nn_relu(), amp_nn_linear(32, 2, true, g)};
    return amp_nn_sequential(layers, 3);
}

int main(void) {
    amp_generator g = amp_generator_make(4);
    amp_scope *data = amp_scope_begin();
    amp_tensor *x = amp_tensor_keep(amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(256, 8), &g));
    amp_tensor *target = amp_tensor_keep(amp_tanh(amp_slice(x, 1, 0, 2, 1))); /* depends on two inputs */
    amp_scope_end(data);

    amp_module *model0 = mlp(&g), *model1 = mlp(&g);
    amp_tensor *p0[4], *p1[4];
    amp_module_parameters(model0, p0, NULL, 4);
    amp_module_parameters(model1, p1, NULL, 4);
    amp_optim_opts oo = amp_adamw_opts(3e-3);
    amp_optim *optimizer0 = amp_optim_new(p0, 4, &oo), *optimizer1 = amp_optim_new(p1, 4, &oo);
    amp_scaler *scaler = amp_scaler_new(NULL);

    double first[2] = {0}, last[2] = {0};
    int ok = 1, skipped[2] = {0};
    for (int step = 0; step < 150; step++) {
        amp_scope *s = amp_scope_begin();
        int64_t b = (step % 4) * 64;
        amp_tensor *in = amp_slice(x, 0, b, b + 64, 1), *tg = amp_slice(target, 0, b, b + 64, 1);
        amp_optim_zero_grad(optimizer0);
        amp_optim_zero_grad(optimizer1);
        amp_autocast_enter(AMP_F16);
        amp_tensor *output0 = amp_module_forward(model0, in), *output1 = amp_module_forward(model1, in);
        amp_tensor *loss0 = amp_mse_loss(amp_add(amp_mul_scalar(output0, 2), amp_mul_scalar(output1, 3)), tg, NULL);
        amp_tensor *loss1 = amp_mse_loss(amp_sub(amp_mul_scalar(output0, 3), amp_mul_scalar(output1, 5)), tg, NULL);
        amp_autocast_exit();
        amp_backward_ex(amp_scaler_scale(scaler, loss0), NULL, true); /* retain_graph: loss1 uses the same graph */
        amp_backward(amp_scaler_scale(scaler, loss1));
        if (step == 100) { /* an overflow in model 1's gradients only */
            amp_tensor *gw = amp_tensor_grad(p1[0]);
            amp_tensor_set(gw, AMP_SHAPE(0, 0), INFINITY);
        }
        float w0[4], w1[4];
        memcpy(w0, amp_tensor_data(p0[0]), sizeof w0);
        memcpy(w1, amp_tensor_data(p1[0]), sizeof w1);
        double scale = amp_scaler_get_scale(scaler);
        amp_scaler_unscale(scaler, optimizer0); /* optional: to clip or inspect optimizer0's gradients */
        bool sk0, sk1;
        amp_scaler_step(scaler, optimizer0, &sk0);
        amp_scaler_step(scaler, optimizer1, &sk1);
        amp_scaler_update(scaler);
        skipped[0] += sk0;
        skipped[1] += sk1;
        if (step == 100) {
            ok &= !sk0 && sk1;                                                 /* independent decisions */
            ok &= memcmp(w0, amp_tensor_data(p0[0]), sizeof w0) != 0;           /* model 0 stepped */
            ok &= memcmp(w1, amp_tensor_data(p1[0]), sizeof w1) == 0;           /* model 1 untouched */
            ok &= amp_scaler_get_scale(scaler) == scale / 2;                    /* one back-off */
        }
        for (int k = 0; k < 2; k++) {
            double v = amp_tensor_item(k ? loss1 : loss0);
            if (step == 0) first[k] = v;
            last[k] = v;
        }
        amp_scope_end(s);
    }
    printf("multiple_models: loss0 %.3f -> %.3f, loss1 %.3f -> %.3f; skipped steps: optimizer0 %d, optimizer1 %d; scale %g\n",
           first[0], last[0], first[1], last[1], skipped[0], skipped[1], amp_scaler_get_scale(scaler));
    amp_scaler_free(scaler);
    amp_optim_free(optimizer0);
    amp_optim_free(optimizer1);
    amp_module_free(model0);
    amp_module_free(model1);
    amp_tensor_free(x);
    amp_tensor_free(target);
    return ok && skipped[1] > skipped[0] && last[0] < 0.5 * first[0] && last[1] < 0.5 * first[1] ? 0 : 1;
}

/* Working with unscaled gradients: gradient clipping (PyTorch's AMP examples
 * page). Unscale the optimizer's gradients, clip them as usual, then step:
 * the scaler sees they were unscaled and does not unscale again. Also shows
 * a step with inf/nan gradients being skipped (the weights untouched, the
 * scale halved). */
#include <amp/amp.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static double grad_norm(amp_tensor *const *ps, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) {
        amp_tensor *g = amp_tensor_grad(ps[i]);
        for (int64_t k = 0; k < amp_tensor_numel(g); k++) {
            double v = ((const float *)amp_tensor_data(g))[k];
            s += v * v;
        }
    }
    return sqrt(s);
}

int main(void) {
    amp_generator g = amp_generator_make(1);
    amp_scope *data = amp_scope_begin();
    amp_tensor *w_true = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(8, 32), &g);
    amp_tensor *x = amp_tensor_keep(amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(512, 32), &g));
    amp_tensor *y = amp_tensor_keep(amp_tanh(amp_matmul(x, amp_transpose(w_true, 0, 1)))); /* a regression target */
    amp_scope_end(data);

    amp_module *layers[] = {amp_nn_linear(32, 64, true, &g), amp_nn_gelu(AMP_GELU_TANH), amp_nn_linear(64, 8, true, &g)};
    amp_module *model = amp_nn_sequential(layers, 3);
    amp_tensor *params[4];
    int n = amp_module_parameters(model, params, NULL, 4);
    amp_optim_opts oo = amp_sgd_opts(0.1);
    oo.momentum = 0.9;
    amp_optim *opt = amp_optim_new(params, n, &oo);
    amp_scaler *scaler = amp_scaler_new(NULL);
    const double max_norm = 0.25;
    int ok = 1, clipped = 0, skipped_steps = 0;
    double first = 0, last = 0;
    for (int step = 0; step < 120; step++) {
        amp_scope *s = amp_scope_begin();
        int64_t b = (step % 8) * 64;
        amp_tensor *xb = amp_slice(x, 0, b, b + 64, 1), *yb = amp_slice(y, 0, b, b + 64, 1);
        if (step == 60) xb = amp_mul_scalar(xb, INFINITY); /* a corrupt batch: inf/nan gradients */
        amp_optim_zero_grad(opt);
        amp_autocast_enter(AMP_F16);
        amp_tensor *loss = amp_mse_loss(amp_module_forward(model, xb), yb, NULL);
        amp_autocast_exit();
        amp_backward(amp_scaler_scale(scaler, loss));

        amp_scaler_unscale(scaler, opt);                              /* scaler.unscale_(optimizer) */
        double norm = amp_clip_grad_norm_params(params, n, max_norm); /* clip_grad_norm_(model.parameters(), max_norm) */

        /* the norm clipped is the true one: the unscaled .grad */
        if (isfinite(norm) && norm > max_norm) {
            clipped++;
            ok &= fabs(grad_norm(params, n) - max_norm) < 1e-3 * max_norm;
        }
        float before[8];
        memcpy(before, amp_tensor_data(params[0]), sizeof before);
        double scale = amp_scaler_get_scale(scaler);
        bool skipped;
        amp_scaler_step(scaler, opt, &skipped); /* unscale_ was called: step only checks and updates */
        amp_scaler_update(scaler);
        if (skipped) {
            skipped_steps++;
            ok &= step == 60 && !isfinite(norm);                                  /* only the corrupt batch */
            ok &= memcmp(before, amp_tensor_data(params[0]), sizeof before) == 0; /* weights untouched */
            ok &= amp_scaler_get_scale(scaler) == scale / 2;                    /* scale backed off */
        }
        if (step == 0) first = amp_tensor_item(loss);
        if (step != 60) last = amp_tensor_item(loss);
        amp_scope_end(s);
    }
    printf("clip_unscaled: loss %.4f -> %.4f, %d steps clipped to %g, %d skipped (the inf batch), scale %g\n", first, last,
           clipped, max_norm, skipped_steps, amp_scaler_get_scale(scaler));
    amp_scaler_free(scaler);
    amp_optim_free(opt);
    amp_module_free(model);
    amp_tensor_free(x);
    amp_tensor_free(y);
    return ok && skipped_steps == 1 && clipped > 0 && last < 0.3 * first ? 0 : 1;
}

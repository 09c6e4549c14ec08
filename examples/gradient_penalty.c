/* Working with scaled gradients: gradient penalty (PyTorch's AMP examples
 * page). The gradients of the scaled loss come from amp_grad with
 * create_graph (so they can be differentiated again), are unscaled by hand,
 * their norm is added to the loss under autocast, and the total goes through
 * the scaler as usual. The example checks that the penalty changes the
 * gradients (a port without create_graph would leave them as they were) and
 * that training lowers the penalized loss. */
#include <amp/amp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    amp_generator g = amp_generator_make(3);
    amp_scope *data = amp_scope_begin();
    amp_tensor *w_true = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(4, 16), &g);
    amp_tensor *x = amp_tensor_keep(amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(256, 16), &g));
    amp_tensor *y = amp_tensor_keep(amp_tanh(amp_matmul(x, amp_transpose(w_true, 0, 1))));
    amp_scope_end(data);

    amp_module *layers[] = {amp_nn_linear(16, 32, true, &g), amp_nn_gelu(AMP_GELU_TANH), amp_nn_linear(32, 4, true, &g)};
    amp_module *model = amp_nn_sequential(layers, 3);
    amp_tensor *params[4];
    int n = amp_module_parameters(model, params, NULL, 4);
    amp_optim_opts oo = amp_adam_opts(5e-3);
    amp_optim *opt = amp_optim_new(params, n, &oo);
    amp_scaler *scaler = amp_scaler_new(NULL);

    double first = 0, last = 0, changed = 0;
    for (int step = 0; step < 80; step++) {
        amp_scope *s = amp_scope_begin();
        int64_t b = (step % 4) * 64;
        amp_tensor *xb = amp_slice(x, 0, b, b + 64, 1), *yb = amp_slice(y, 0, b, b + 64, 1);
        amp_optim_zero_grad(opt);
        amp_autocast_enter(AMP_F16);
        amp_tensor *loss = amp_mse_loss(amp_module_forward(model, xb), yb, NULL);
        amp_autocast_exit();

        /* scaled gradients, with their own graph: torch.autograd.grad(scaler.scale(loss), params, create_graph=True) */
        amp_tensor *scaled = amp_scaler_scale(scaler, loss), *sg[4];
        amp_grad(&scaled, 1, NULL, params, n, sg, true, true);
        double inv = 1.0 / amp_scaler_get_scale(scaler); /* unscaled by hand: not amp_scaler_unscale */
        amp_autocast_enter(AMP_F16);
        amp_tensor *norm2 = NULL;
        for (int i = 0; i < n; i++) {
            amp_tensor *t = amp_sum(amp_pow(amp_mul_scalar(sg[i], inv), 2.0), NULL, 0, false);
            norm2 = norm2 ? amp_add(norm2, t) : t;
        }
        amp_tensor *total = amp_add(loss, amp_sqrt(norm2)); /* loss + the gradient norm */
        amp_autocast_exit();

        if (step == 0) {
            /* the penalty's share of the gradient: compare with the loss alone */
            amp_tensor *plain[4];
            amp_grad(&loss, 1, NULL, params, n, plain, false, true);
            amp_backward(amp_scaler_scale(scaler, total));
            amp_scaler_unscale(scaler, opt);
            double d = 0, m = 0;
            for (int i = 0; i < n; i++)
                for (int64_t k = 0; k < amp_tensor_numel(plain[i]); k++) {
                    double a = ((const float *)amp_tensor_data(amp_tensor_grad(params[i])))[k], p = ((const float *)amp_tensor_data(plain[i]))[k];
                    d += (a - p) * (a - p);
                    m += p * p;
                }
            changed = sqrt(d / m);
        } else {
            amp_backward(amp_scaler_scale(scaler, total));
        }
        amp_scaler_step(scaler, opt, NULL);
        amp_scaler_update(scaler);
        if (step == 0) first = amp_tensor_item(total);
        last = amp_tensor_item(total);
        amp_scope_end(s);
    }
    printf("gradient_penalty: the penalty changed the gradient by %.0f%% of its norm; loss + penalty %.3f -> %.3f\n",
           100 * changed, first, last);
    amp_scaler_free(scaler);
    amp_optim_free(opt);
    amp_module_free(model);
    amp_tensor_free(x);
    amp_tensor_free(y);
    return changed > 0.05 && last < 0.7 * first ? 0 : 1;
}

/* Working with scaled gradients: gradient accumulation (PyTorch's AMP
 * examples page). Each micro-batch's loss is divided by the number of
 * micro-batches and backwarded through the scaler; the gradients add up in
 * .grad; every iters_to_accumulate micro-batches, one step and one update
 * (the scale must not change within an effective batch). The example checks
 * that the accumulated gradients equal the gradient of the whole large batch
 * computed in one piece. */
#include <amp/amp.h>
#include <math.h>
#include <stdio.h>

#define MICRO 16
#define ITERS 4 /* iters_to_accumulate: an effective batch of 64 */

int main(void) {
    amp_generator g = amp_generator_make(2);
    amp_scope *data = amp_scope_begin();
    amp_tensor *centers = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(4, 16), &g);
    amp_tensor *y = amp_tensor_keep(amp_tensor_empty(AMP_I64, 1, AMP_SHAPE(1024)));
    for (int64_t i = 0; i < 1024; i++) amp_tensor_set(y, &i, (double)((i * 7) % 4));
    amp_tensor *x = amp_tensor_keep(amp_add(amp_embedding(centers, y), amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(1024, 16), &g)));
    amp_scope_end(data);

    amp_module *layers[] = {amp_nn_linear(16, 32, true, &g), amp_nn_relu(), amp_nn_linear(32, 4, true, &g)};
    amp_module *model = amp_nn_sequential(layers, 3);
    amp_tensor *params[4];
    int n = amp_module_parameters(model, params, NULL, 4);
    amp_optim_opts oo = amp_adamw_opts(5e-3);
    amp_optim *opt = amp_optim_new(params, n, &oo);
    amp_scaler *scaler = amp_scaler_new(NULL);

    double worst = 0, first = 0, last = 0;
    int updates = 0;
    for (int epoch = 0; epoch < 4; epoch++) {
        for (int i = 0; i < 1024 / MICRO; i++) {
            amp_scope *s = amp_scope_begin();
            int64_t b = (int64_t)i * MICRO;
            amp_autocast_enter(AMP_F16);
            amp_tensor *out = amp_module_forward(model, amp_slice(x, 0, b, b + MICRO, 1));
            amp_tensor *loss = amp_div_scalar(amp_cross_entropy(out, amp_slice(y, 0, b, b + MICRO, 1), NULL), ITERS);
            amp_autocast_exit();
            amp_backward(amp_scaler_scale(scaler, loss)); /* accumulates scaled gradients */
            if ((i + 1) % ITERS == 0) {
                if (epoch == 0 && i + 1 == ITERS) {
                    /* check once: unscale, then compare with the 64-sample batch in one piece (f32) */
                    amp_scaler_unscale(scaler, opt);
                    amp_tensor *big = amp_cross_entropy(amp_module_forward(model, amp_slice(x, 0, 0, MICRO * ITERS, 1)),
                                                        amp_slice(y, 0, 0, MICRO * ITERS, 1), NULL);
                    amp_tensor *ref[4];
                    amp_grad(&big, 1, NULL, params, n, ref, false, false); /* .grad is not touched */
                    for (int p = 0; p < n; p++) {
                        const float *a = amp_tensor_data(amp_tensor_grad(params[p])), *r = amp_tensor_data(ref[p]);
                        double mx = 0, d = 0;
                        for (int64_t k = 0; k < amp_tensor_numel(ref[p]); k++) {
                            mx = fmax(mx, fabs(r[k]));
                            d = fmax(d, fabs(a[k] - r[k]));
                        }
                        worst = fmax(worst, d / mx); /* relative to the largest element */
                    }
                }
                amp_scaler_step(scaler, opt, NULL);
                amp_scaler_update(scaler);
                amp_optim_zero_grad(opt);
                updates++;
            }
            if (epoch == 0 && i == 0) first = amp_tensor_item(loss) * ITERS;
            last = amp_tensor_item(loss) * ITERS;
            amp_scope_end(s);
        }
    }
    printf("grad_accumulation: %d updates of %d micro-batches; accumulated vs one batch of %d: max difference %.2e of the "
           "largest gradient (fp16 forward); loss %.3f -> %.3f\n",
           updates, ITERS, MICRO * ITERS, worst, first, last);
    amp_scaler_free(scaler);
    amp_optim_free(opt);
    amp_module_free(model);
    amp_tensor_free(x);
    amp_tensor_free(y);
    return worst < 5e-3 && last < 0.5 * first && updates == 4 * 1024 / (MICRO * ITERS) ? 0 : 1;
}

/* The typical mixed-precision training loop (PyTorch's "Automatic Mixed
 * Precision examples", first section): autocast around the forward and the
 * loss, GradScaler around backward and step. A complete program on in-memory
 * data; README.md shows this file. Build: as README.md's "Using the
 * library" says (the line is in examples/README.md). */
#include <amp/amp.h>
#include <stdio.h>

int main(void) {
    /* data: 2048 points from 4 Gaussian clusters in 16 dimensions */
    amp_generator g = amp_generator_make(0);
    amp_scope *data = amp_scope_begin();
    amp_tensor *centers = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(4, 16), &g);
    amp_tensor *y = amp_tensor_keep(amp_tensor_empty(AMP_I64, 1, AMP_SHAPE(2048)));   /* class of each point */
    for (int64_t i = 0; i < 2048; i++) amp_tensor_set(y, &i, (double)(i % 4));
    amp_tensor *noise = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(2048, 16), &g);
    amp_tensor *x = amp_tensor_keep(amp_add(amp_embedding(centers, y), amp_mul_scalar(noise, 0.8)));
    amp_scope_end(data);                                         /* x and y were kept */

    /* model and optimizer */
    amp_module *layers[] = {amp_nn_linear(16, 64, true, &g), amp_nn_relu(), amp_nn_linear(64, 4, true, &g)};
    amp_module *model = amp_nn_sequential(layers, 3);
    amp_tensor *params[4];
    int n = amp_module_parameters(model, params, NULL, 4);
    amp_optim_opts oo = amp_adamw_opts(1e-2);                    /* PyTorch's AdamW defaults */
    amp_optim *opt = amp_optim_new(params, n, &oo);
    amp_scaler *scaler = amp_scaler_new(NULL);                   /* torch's defaults: 2^16, x2 / x0.5, 2000 */

    double first = 0, last = 0;
    for (int epoch = 0; epoch < 3; epoch++) {
        for (int64_t b = 0; b < 2048; b += 64) {
            amp_scope *s = amp_scope_begin();                    /* intermediates die at scope end */
            amp_tensor *xb = amp_slice(x, 0, b, b + 64, 1), *yb = amp_slice(y, 0, b, b + 64, 1);
            amp_optim_zero_grad(opt);
            amp_autocast_enter(AMP_F16);                         /* per thread, nestable */
            amp_tensor *output = amp_module_forward(model, xb);  /* matmuls in f16 */
            amp_tensor *loss = amp_cross_entropy(output, yb, NULL); /* losses in f32 */
            amp_autocast_exit();
            amp_backward(amp_scaler_scale(scaler, loss));        /* scaled gradients */
            amp_scaler_step(scaler, opt, NULL);                  /* unscales; skips the step on inf/nan */
            amp_scaler_update(scaler);
            if (epoch == 0 && b == 0) first = amp_tensor_item(loss);
            last = amp_tensor_item(loss);
            amp_scope_end(s);
        }
    }

    /* accuracy on the training points, in inference mode */
    amp_no_grad_begin();
    amp_scope *s = amp_scope_begin();
    amp_tensor *pred = NULL;
    amp_max(amp_module_forward(model, x), 1, false, &pred);
    int correct = 0;
    for (int64_t i = 0; i < 2048; i++) correct += amp_tensor_get(pred, &i) == amp_tensor_get(y, &i);
    amp_scope_end(s);
    amp_no_grad_end();
    printf("typical_loop: loss %.3f -> %.3f, accuracy %.1f%%, loss scale %g\n", first, last, correct / 20.48,
           amp_scaler_get_scale(scaler));

    amp_scaler_free(scaler);
    amp_optim_free(opt);
    amp_module_free(model);
    amp_tensor_free(x);
    amp_tensor_free(y);
    return last < 0.5 * first && correct > 0.9 * 2048 ? 0 : 1;
}

/* The loop from README.md, as a program: fp16 autocast + GradScaler +
 * clipping on the mlp, 200 steps on the first 12800 Fashion-MNIST images,
 * then the test accuracy. Built by CMake (build/amp_loop) and run by CTest. */
#include <amp/amp.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    amp_dataset train, test;
    if (amp_fashion_mnist_load("train", 12800, &train) || amp_fashion_mnist_load("test", 1000, &test)) {
        fprintf(stderr, "amp_loop: %s\n", amp_last_error());
        return 1;
    }
    amp_generator g = amp_generator_make(0);
    amp_module *model = amp_model_build("mlp", &g);
    amp_tensor *params[8];
    int n = amp_module_parameters(model, params, NULL, 8);
    amp_loader *loader = amp_loader_new(&train, &(amp_loader_opts){.batch = 64, .shuffle = true, .seed = 1});
    int steps = 200;

    amp_scaler *sc = amp_scaler_new(NULL);                     /* torch's defaults: 2^16, x2 / x0.5, 2000 */
    amp_optim_opts oo = amp_adamw_opts(1e-3);                  /* PyTorch's AdamW defaults */
    amp_optim  *opt = amp_optim_new(params, n, &oo);
    for (int step = 0; step < steps; step++) {
        amp_scope *s = amp_scope_begin();                      /* intermediates die at scope end */
        amp_tensor *x, *y;
        if (!amp_loader_next(loader, &x, &y)) {                /* (not in the README: next epoch) */
            amp_loader_start_epoch(loader, step);
            amp_loader_next(loader, &x, &y);
        }
        amp_optim_zero_grad(opt);
        amp_autocast_enter(AMP_F16);                           /* per thread, nestable */
        amp_tensor *logits = amp_module_forward(model, x);     /* matmul/conv in f16 */
        amp_tensor *loss   = amp_cross_entropy(logits, y, NULL); /* losses in f32 */
        amp_autocast_exit();
        amp_backward(amp_scaler_scale(sc, loss));
        amp_scaler_unscale(sc, opt);                           /* optional: before clipping */
        amp_clip_grad_norm(opt, 1.0);
        amp_scaler_step(sc, opt, NULL);                        /* skipped if any grad is inf/nan */
        amp_scaler_update(sc);
        amp_scope_end(s);
    }

    /* evaluate in autocast, without gradients */
    amp_loader *tl = amp_loader_new(&test, &(amp_loader_opts){.batch = 1000});
    amp_module_train(model, false);
    amp_no_grad_begin();
    amp_scope *s = amp_scope_begin();
    amp_tensor *x, *y, *idx = NULL;
    amp_loader_next(tl, &x, &y);
    amp_autocast_enter(AMP_F16);
    amp_max(amp_module_forward(model, x), 1, false, &idx);
    amp_autocast_exit();
    int correct = 0;
    for (int i = 0; i < 1000; i++) correct += ((int64_t *)amp_tensor_data(idx))[i] == ((int64_t *)amp_tensor_data(y))[i];
    amp_scope_end(s);
    amp_no_grad_end();
    printf("amp_loop: %d steps, loss scale %g, %lld skipped, test accuracy %.1f%%\n", steps, amp_scaler_get_scale(sc),
           (long long)amp_scaler_num_skipped(sc), correct / 10.0);
    amp_loader_free(tl);
    amp_loader_free(loader);
    amp_optim_free(opt);
    amp_scaler_free(sc);
    amp_module_free(model);
    amp_dataset_free(&train);
    amp_dataset_free(&test);
    return correct >= 750 ? 0 : 1; /* 200 steps reach ~80%; far above chance (10%) */
}

/* O2 through amp_initialize (Apex's amp.initialize with opt_level="O2"):
 * one call casts the model to f16 except its normalisation layers, builds an
 * optimizer with f32 master weights for the f16 parameters and a plain one
 * for the f32 norms, creates the dynamic loss scaler and attaches the input
 * and output casts, so the training loop stays as simple as the f32 one. */
#include <amp/amp.h>
#include <math.h>
#include <stdio.h>

int main(void) {
    amp_generator g = amp_generator_make(10);
    amp_scope *data = amp_scope_begin();
    amp_tensor *centers = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(4, 16), &g);
    amp_tensor *y = amp_tensor_keep(amp_tensor_empty(AMP_I64, 1, AMP_SHAPE(1024)));
    for (int64_t i = 0; i < 1024; i++) amp_tensor_set(y, &i, (double)(i % 4));
    amp_tensor *x = amp_tensor_keep(amp_add(amp_embedding(centers, y), amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(1024, 16), &g)));
    amp_scope_end(data);

    amp_module *layers[] = {amp_nn_linear(16, 64, true, &g), amp_nn_layernorm(64, 1e-5), amp_nn_relu(), amp_nn_linear(64, 4, true, &g)};
    amp_module *model = amp_nn_sequential(layers, 4);
    amp_init_opts o = {.level = AMP_O2, .half = AMP_F16, .optim = amp_adamw_opts(1e-2)};
    amp_setup *amp = amp_initialize(&model, 1, &o);
    if (!amp) {
        fprintf(stderr, "o2_initialize: %s\n", amp_last_error());
        return 1;
    }
    int n_opt;
    amp_setup_optims(amp, &n_opt);
    printf("O2: Linear weight %s, LayerNorm weight %s (kept f32: %s), %d optimizers, master weights, scale %g\n",
           amp_dtype_name(amp_tensor_dtype(amp_module_get_parameter(model, "0.weight"))),
           amp_dtype_name(amp_tensor_dtype(amp_module_get_parameter(model, "1.weight"))),
           amp_module_is_kept_f32(amp_module_get_child(model, "1")) ? "yes" : "no", n_opt,
           amp_scaler_get_scale(amp_setup_scaler(amp)));

    double first = 0, last = 0;
    int skipped = 0;
    for (int step = 0; step < 96; step++) {
        amp_scope *s = amp_scope_begin();
        int64_t b = (step % 16) * 64;
        amp_setup_zero_grad(amp);
        amp_tensor *logits = amp_module_forward(model, amp_slice(x, 0, b, b + 64, 1)); /* f32 in, f16 inside, f32 out */
        amp_tensor *loss = amp_cross_entropy(logits, amp_slice(y, 0, b, b + 64, 1), NULL);
        amp_setup_backward(amp, loss);
        amp_setup_clip_grad_norm(amp, 5.0); /* one norm over both optimizers' (unscaled) gradients */
        bool sk;
        amp_setup_step(amp, &sk);
        skipped += sk;
        if (step == 0) first = amp_tensor_item(loss);
        last = amp_tensor_item(loss);
        amp_scope_end(s);
    }
    amp_scope *s = amp_scope_begin();
    amp_tensor *pred = NULL;
    amp_tensor *out = amp_module_forward(model, x);
    amp_max(out, 1, false, &pred);
    int correct = 0;
    for (int64_t i = 0; i < 1024; i++) correct += amp_tensor_get(pred, &i) == amp_tensor_get(y, &i);
    bool out_f32 = amp_tensor_dtype(out) == AMP_F32;
    amp_scope_end(s);
    printf("o2_initialize: loss %.3f -> %.3f, accuracy %.1f%%, %d steps skipped, loss scale %g\n", first, last,
           correct / 10.24, skipped, amp_scaler_get_scale(amp_setup_scaler(amp)));
    bool half_params = amp_tensor_dtype(amp_module_get_parameter(model, "0.weight")) == AMP_F16 &&
                       amp_tensor_dtype(amp_module_get_parameter(model, "1.weight")) == AMP_F32;
    amp_setup_free(amp);
    amp_module_free(model);
    amp_tensor_free(x);
    amp_tensor_free(y);
    return half_params && out_f32 && n_opt == 2 && last < 0.3 * first && correct > 0.85 * 1024 ? 0 : 1;
}

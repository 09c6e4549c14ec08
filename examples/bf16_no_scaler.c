/* bf16 without a GradScaler: bf16 has f32's exponent range, so gradients do
 * not underflow and no loss scaling is needed (the seeds' advice; torch's
 * autocast with dtype=torch.bfloat16 on CPU). The loop is the plain f32 one
 * with the forward inside an autocast region. The example checks that the
 * parameters and their gradients stay f32, that no gradient was lost to
 * underflow, and that it learns as well as the f32 loop on the same data. */
#include <amp/amp.h>
#include <math.h>
#include <stdio.h>

static double train(amp_tensor *x, amp_tensor *y, bool bf16, int *zero_grads, amp_dtype *grad_dtype) {
    amp_generator g = amp_generator_make(8);
    amp_module *layers[] = {amp_nn_linear(16, 64, true, &g), amp_nn_relu(), amp_nn_linear(64, 4, true, &g)};
    amp_module *model = amp_nn_sequential(layers, 3);
    amp_tensor *params[4];
    int n = amp_module_parameters(model, params, NULL, 4);
    amp_optim_opts oo = amp_adamw_opts(1e-2);
    amp_optim *opt = amp_optim_new(params, n, &oo);
    double last = 0;
    for (int step = 0; step < 96; step++) {
        amp_scope *s = amp_scope_begin();
        int64_t b = (step % 16) * 64;
        amp_optim_zero_grad(opt);
        if (bf16) amp_autocast_enter(AMP_BF16);
        amp_tensor *loss = amp_cross_entropy(amp_module_forward(model, amp_slice(x, 0, b, b + 64, 1)), amp_slice(y, 0, b, b + 64, 1), NULL);
        if (bf16) amp_autocast_exit();
        amp_backward(loss); /* no scaler */
        if (step == 0) { /* how many gradient elements came out exactly zero */
            *grad_dtype = amp_tensor_dtype(amp_tensor_grad(params[0]));
            const float *gw = amp_tensor_data(amp_tensor_grad(params[0]));
            *zero_grads = 0;
            for (int64_t k = 0; k < amp_tensor_numel(params[0]); k++) *zero_grads += gw[k] == 0.0f;
        }
        amp_optim_step(opt);
        last = amp_tensor_item(loss);
        amp_scope_end(s);
    }
    amp_scope *s = amp_scope_begin(); /* full-data loss at the end, in f32 */
    last = amp_tensor_item(amp_cross_entropy(amp_module_forward(model, x), y, NULL));
    amp_scope_end(s);
    amp_optim_free(opt);
    amp_module_free(model);
    return last;
}

int main(void) {
    amp_generator g = amp_generator_make(9);
    amp_scope *data = amp_scope_begin();
    amp_tensor *centers = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(4, 16), &g);
    amp_tensor *y = amp_tensor_keep(amp_tensor_empty(AMP_I64, 1, AMP_SHAPE(1024)));
    for (int64_t i = 0; i < 1024; i++) amp_tensor_set(y, &i, (double)((i * 5) % 4));
    amp_tensor *x = amp_tensor_keep(amp_add(amp_embedding(centers, y), amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(1024, 16), &g)));
    amp_scope_end(data);
    int zeros32, zeros16;
    amp_dtype gdt32, gdt16;
    double l32 = train(x, y, false, &zeros32, &gdt32), l16 = train(x, y, true, &zeros16, &gdt16);
    printf("bf16_no_scaler: final loss f32 %.5f, bf16 autocast %.5f; gradients %s, exact zeros in the first layer's "
           "gradient: %d (f32) vs %d (bf16)\n",
           l32, l16, amp_dtype_name(gdt16), zeros32, zeros16);
    amp_tensor_free(x);
    amp_tensor_free(y);
    /* f32 gradients for f32 parameters, no more zeros than f32 (nothing underflowed), the same quality */
    return gdt16 == AMP_F32 && zeros16 <= zeros32 && l16 < 0.4 && fabs(l16 - l32) < 0.05 + 0.2 * l32 ? 0 : 1;
}

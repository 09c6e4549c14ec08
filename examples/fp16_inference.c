/* fp16 inference from a saved checkpoint: a model trained in f32 is saved
 * (amp_checkpoint_save, as `amp train --checkpoint` does), loaded into a
 * freshly built model, cast to f16 with amp_module_to (parameters stored in
 * half: half the memory) and run under no_grad, with f32 inputs cast at the
 * model's boundary. The example checks that the f16 predictions agree with
 * the f32 ones and that the logits differ by what f16 rounding allows. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <amp/amp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static amp_module *build(uint64_t seed) {
    amp_generator g = amp_generator_make(seed);
    amp_module *layers[] = {amp_nn_linear(16, 128, true, &g), amp_nn_gelu(AMP_GELU_ERF), amp_nn_layernorm(128, 1e-5),
                            amp_nn_linear(128, 10, true, &g)};
    return amp_nn_sequential(layers, 4);
}

int main(void) {
    amp_generator g = amp_generator_make(11);
    amp_scope *data = amp_scope_begin();
    amp_tensor *centers = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(10, 16), &g);
    amp_tensor *y = amp_tensor_keep(amp_tensor_empty(AMP_I64, 1, AMP_SHAPE(2000)));
    for (int64_t i = 0; i < 2000; i++) amp_tensor_set(y, &i, (double)(i % 10));
    amp_tensor *x = amp_tensor_keep(amp_add(amp_embedding(centers, y), amp_mul_scalar(amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(2000, 16), &g), 0.6)));
    amp_scope_end(data);

    /* train in f32 and save a checkpoint */
    amp_module *model = build(1);
    amp_tensor *params[8];
    int n = amp_module_parameters(model, params, NULL, 8);
    amp_optim_opts oo = amp_adamw_opts(5e-3);
    amp_optim *opt = amp_optim_new(params, n, &oo);
    for (int step = 0; step < 120; step++) {
        amp_scope *s = amp_scope_begin();
        int64_t b = (step % 20) * 100;
        amp_optim_zero_grad(opt);
        amp_backward(amp_cross_entropy(amp_module_forward(model, amp_slice(x, 0, b, b + 100, 1)), amp_slice(y, 0, b, b + 100, 1), NULL));
        amp_optim_step(opt);
        amp_scope_end(s);
    }
    char dir[] = "/tmp/amp_fp16_inference_XXXXXX", ck[64];
    if (!mkdtemp(dir)) return 1;
    snprintf(ck, sizeof ck, "%s/ck", dir);
    amp_train_state st = {.model = model, .optims = &opt, .n_optims = 1, .step = 120};
    if (amp_checkpoint_save(ck, &st) != AMP_OK) return fprintf(stderr, "%s\n", amp_last_error()), 1;

    /* a fresh model: load the checkpoint's weights, cast to f16, f32 in and out at its boundary */
    amp_module *half = build(2);
    amp_checkpoint *c = amp_checkpoint_open(ck);
    int ok = c && amp_module_load_safetensors(half, amp_checkpoint_model_file(c)) == AMP_OK;
    amp_checkpoint_close(c);
    ok &= amp_module_to(half, AMP_F16, false) == AMP_OK;
    ok &= amp_module_set_io(half, &(amp_module_io){.input = AMP_F16, .output = AMP_F32}) == AMP_OK;
    amp_module_train(model, false);
    amp_module_train(half, false);

    amp_no_grad_begin();
    amp_scope *s = amp_scope_begin();
    amp_tensor *ref = amp_module_forward(model, x), *got = amp_module_forward(half, x);
    amp_tensor *i_ref = NULL, *i_got = NULL;
    amp_max(ref, 1, false, &i_ref);
    amp_max(got, 1, false, &i_got);
    int agree = 0, correct = 0;
    double maxdiff = 0, maxlogit = 0;
    for (int64_t i = 0; i < 2000; i++) {
        agree += amp_tensor_get(i_ref, &i) == amp_tensor_get(i_got, &i);
        correct += amp_tensor_get(i_got, &i) == amp_tensor_get(y, &i);
        for (int64_t j = 0; j < 10; j++) {
            double a = amp_tensor_get(ref, (int64_t[]){i, j}), b = amp_tensor_get(got, (int64_t[]){i, j});
            maxdiff = fmax(maxdiff, fabs(a - b));
            maxlogit = fmax(maxlogit, fabs(a));
        }
    }
    amp_mem_stats ms = amp_memory_stats();
    amp_scope_end(s);
    amp_no_grad_end();
    printf("fp16_inference: f16 parameters (%s), %d/2000 predictions equal to f32, accuracy %.1f%%, max logit difference "
           "%.2e (logits up to %.1f); parameter memory now %zu bytes\n",
           amp_dtype_name(amp_tensor_dtype(amp_module_get_parameter(half, "0.weight"))), agree, correct / 20.0, maxdiff, maxlogit,
           ms.live[AMP_MEM_PARAM]);
    char path[96];
    snprintf(path, sizeof path, "%s/model.safetensors", ck);
    remove(path);
    snprintf(path, sizeof path, "%s/training_state.safetensors", ck);
    remove(path);
    remove(ck);
    remove(dir);
    amp_optim_free(opt);
    amp_module_free(model);
    amp_module_free(half);
    amp_tensor_free(x);
    amp_tensor_free(y);
    /* f16 keeps ~3 significant digits: logits within 1e-2 relative, at most a few near-ties flip */
    return ok && agree >= 1990 && correct > 0.9 * 2000 && maxdiff < 1e-2 * maxlogit ? 0 : 1;
}

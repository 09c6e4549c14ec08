/* amp/initialize.h — amp_initialize: Apex's amp.initialize in one call.
 *
 *   amp_init_opts o = {.level = AMP_O2, .half = AMP_BF16, .optim = amp_adamw_opts(1e-3)};
 *   amp_setup *s = amp_initialize(&model, 1, &o);
 *   for (...) {
 *       amp_setup_zero_grad(s);
 *       amp_tensor *loss = amp_cross_entropy(amp_module_forward(model, x), y, NULL);
 *       amp_setup_backward(s, loss);             // scale (fp16), backward
 *       amp_setup_clip_grad_norm(s, 1.0);        // optional: unscale, one norm over every optimizer
 *       amp_setup_step(s, NULL);                 // step each optimizer (skipped on inf/nan), update the scale
 *   }
 *
 * Given the models, an opt level (or a policy string) and the optimizer's
 * options, it does what each level means (docs/amp-core.md has the table and
 * a test holds the code to it):
 *
 *   O0  f32 parameters, f32 forward.
 *   O1  f32 parameters, forward under autocast with `half`, the model's output
 *       cast to f32; dynamic loss scaling for f16.
 *   O2  parameters cast to `half` except normalisation layers (batch/layer/
 *       group norm and any module class with AMP_MODULE_NORM), which stay f32
 *       and run in f32; f32 master weights for the half parameters; the
 *       model's floating-point inputs cast to `half` (an f32 batch does not
 *       promote the forward back to f32) and its output to f32; dynamic
 *       loss scaling for f16.
 *   O3  every parameter cast to `half`, no master weights (updated in half),
 *       inputs cast to `half`, output to f32, no loss scaling.
 *
 * The input and output casts are attached to each model (amp_module_set_io)
 * so amp_module_forward(model, x) does them, as Apex patches forward. It
 * builds one optimizer for the half parameters (with master weights when
 * the level has them) and one plain optimizer for the f32 ones (O2's norms;
 * the optimizer refuses to mix), and the scaler: torch's dynamic GradScaler
 * only when the compute dtype is f16 (bf16 has f32's range). Without one,
 * amp_setup_step checks the gradients itself and skips a step whose
 * gradients hold inf/nan instead of writing them into the weights.
 *
 * A policy string ("params=bfloat16,compute=bfloat16,output=float32", see
 * amp/policy.h) instead of a level: params is the storage dtype (half
 * params get master weights and f32 norms unless overridden), compute
 * different from params means autocast with it (params must then be f32),
 * output is the output cast.
 *
 * The models stay the caller's (free them after amp_setup_free); the setup
 * owns its optimizers and scaler. */
#ifndef AMP_INITIALIZE_H
#define AMP_INITIALIZE_H

#include "amp/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { AMP_DEFAULT = 0, AMP_ON, AMP_OFF } amp_switch;

typedef struct {
    amp_opt_level level;    /* O0..O3, used when policy is NULL */
    amp_dtype half;         /* AMP_F16 or AMP_BF16 (O1-O3) */
    const char *policy;     /* instead of level: "params=...,compute=...,output=..." */
    amp_optim_opts optim;   /* the optimizer to build (amp_adamw_opts(lr) ...); master_weights is decided here */
    amp_scaler_opts scaler; /* the dynamic scaler's options (f16); zero = torch's defaults */
    /* Apex's overrides; AMP_DEFAULT keeps the level's choice */
    amp_switch keep_norm_f32; /* Apex keep_batchnorm_fp32 */
    amp_switch master_weights;
    amp_switch loss_scaling;  /* dynamic loss scaling (ON for bf16 is allowed, OFF for f16 too) */
    /* Apex cast_model_outputs: float outputs cast to this. Zero is AMP_F32,
     * the default; AMP_DTYPE_COUNT leaves the output as computed. A policy's
     * output dtype takes precedence. */
    amp_dtype output;
} amp_init_opts;

typedef struct amp_setup amp_setup;

AMP_API amp_setup *amp_initialize(amp_module *const *models, int n_models, const amp_init_opts *o);
/* Frees the optimizers and the scaler; the models stay (with their casts). */
AMP_API void amp_setup_free(amp_setup *s);

/* What was decided: parameter, compute dtype, autocast, norms, master weights, loss scaling. */
AMP_API const amp_opt_config *amp_setup_config(const amp_setup *s);
/* The model output's dtype after the cast (AMP_DTYPE_COUNT: not cast). */
AMP_API amp_dtype amp_setup_output_dtype(const amp_setup *s);
AMP_API amp_scaler *amp_setup_scaler(amp_setup *s); /* NULL without loss scaling */
/* The optimizers (1 or 2; for checkpoints: amp_train_state.optims). */
AMP_API amp_optim *const *amp_setup_optims(const amp_setup *s, int *n);

AMP_API amp_status amp_setup_zero_grad(amp_setup *s);
/* backward(scale(loss)) */
AMP_API amp_status amp_setup_backward(amp_setup *s, amp_tensor *loss);
/* Unscales every optimizer not unscaled yet and clips them to one joint
 * norm (amp_clip_grad_norm_optims); returns the norm before clipping
 * (non-finite: nothing clipped, the step will be skipped). */
AMP_API double amp_setup_clip_grad_norm(amp_setup *s, double max_norm);
/* Steps every optimizer through the scaler (a step whose gradients hold
 * inf/nan is skipped: *skipped, may be NULL) and updates the scale. */
AMP_API amp_status amp_setup_step(amp_setup *s, bool *skipped);
AMP_API amp_status amp_setup_set_lr(amp_setup *s, double lr);

#ifdef __cplusplus
}
#endif
#endif

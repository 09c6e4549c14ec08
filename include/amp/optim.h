/* amp/optim.h — SGD, Adam, AdamW (PyTorch's update formulas and defaults),
 * fp32 master weights for half parameters, gradient clipping, learning-rate
 * schedules. Optimizer state is always f32. */
#ifndef AMP_OPTIM_H
#define AMP_OPTIM_H

#include "amp/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { AMP_OPTIM_SGD = 0, AMP_OPTIM_ADAM, AMP_OPTIM_ADAMW } amp_optim_kind;

typedef enum {
    AMP_ROUND_NEAREST = 0, /* round-to-nearest-even when writing half params */
    AMP_ROUND_STOCHASTIC   /* stochastic rounding (llm.c's technique) */
} amp_round_mode;

typedef struct {
    amp_optim_kind kind;
    double lr;
    /* SGD */
    double momentum, dampening;
    bool nesterov;
    /* Adam / AdamW */
    double beta1, beta2, eps;
    /* all: L2 penalty for SGD/Adam, decoupled decay for AdamW */
    double weight_decay;
    /* Master weights (Apex O2): the parameters are f16/bf16 tensors used by
     * the forward; the optimizer keeps an f32 master copy, updates it from the
     * half gradients (taken into f32, unscaled in the same pass) and writes
     * the half copy back with `rounding`. */
    bool master_weights;
    amp_round_mode rounding;
    uint64_t seed; /* stochastic rounding stream */
} amp_optim_opts;

/* PyTorch's defaults: SGD (momentum 0, dampening 0, no nesterov, no decay);
 * Adam (betas 0.9/0.999, eps 1e-8, weight_decay 0); AdamW (same, decay 0.01). */
AMP_API amp_optim_opts amp_sgd_opts(double lr);
AMP_API amp_optim_opts amp_adam_opts(double lr);
AMP_API amp_optim_opts amp_adamw_opts(double lr);

typedef struct amp_optim amp_optim;

/* params: leaf tensors requiring grad (the optimizer keeps references).
 * Without master weights params must be f32 (or bf16/f16 updated in place,
 * which loses small updates: see docs/amp-core.md); with master
 * weights they must be f16 or bf16. */
AMP_API amp_optim *amp_optim_new(amp_tensor *const *params, int n, const amp_optim_opts *o);
AMP_API void amp_optim_free(amp_optim *opt);

/* Drops every parameter's .grad (PyTorch's set_to_none=True). */
AMP_API amp_status amp_optim_zero_grad(amp_optim *opt);
/* One update from the current gradients (no loss scaling). Parameters
 * without a gradient are skipped. */
AMP_API amp_status amp_optim_step(amp_optim *opt);
AMP_API amp_status amp_optim_set_lr(amp_optim *opt, double lr);
/* Parameter groups with their own weight decay (torch's
 * [{'params': decay, 'weight_decay': 0.1}, {'params': no_decay, 'weight_decay': 0.0}],
 * nanoGPT's and GPT-2's recipe: no decay on biases, norms and embeddings):
 * parameter i's decay, which starts as opts.weight_decay. The same checks as
 * the option (>= 0, lr * decay finite as an f32). */
AMP_API amp_status amp_optim_set_param_weight_decay(amp_optim *opt, int i, double weight_decay);
AMP_API double amp_optim_param_weight_decay(const amp_optim *opt, int i); /* NAN on bad arguments */
AMP_API double amp_optim_get_lr(const amp_optim *opt);
AMP_API int64_t amp_optim_steps(const amp_optim *opt); /* updates applied so far */
AMP_API int amp_optim_num_params(const amp_optim *opt);
AMP_API amp_tensor *amp_optim_param(const amp_optim *opt, int i);
/* The parameter the optimizer's i-th tensor belongs to: that tensor itself,
 * or, for a ZeRO-1 optimizer (amp/dist.h), whose tensors are this rank's
 * slices, the whole parameter the slice is cut from; *offset (may be NULL)
 * receives the slice's first element in it (0 for a whole parameter). */
AMP_API amp_tensor *amp_optim_param_origin(const amp_optim *opt, int i, int64_t *offset);
AMP_API const amp_optim_opts *amp_optim_get_opts(const amp_optim *opt);
/* Optimizer state of parameter i for inspection/checkpoints (f32 tensors
 * sharing the optimizer's memory, or NULL when absent): "exp_avg",
 * "exp_avg_sq", "momentum_buffer", "master". The tensor is unscoped and
 * owned by the optimizer. */
AMP_API amp_tensor *amp_optim_state(const amp_optim *opt, int i, const char *name);
/* The gradient the next step will use for parameter i: the f32 master
 * gradient after an unscale on a master-weight optimizer, else .grad. */
AMP_API amp_tensor *amp_optim_grad(const amp_optim *opt, int i);
/* Restore the step counter and per-parameter step counts (checkpoints). */
AMP_API amp_status amp_optim_set_steps(amp_optim *opt, int64_t steps);
/* Checkpoint support: parameter i's own update count (Adam's bias correction
 * uses it; parameters without a gradient in a step do not advance), the
 * stochastic-rounding stream position, and loading a state tensor ("exp_avg",
 * "exp_avg_sq", "momentum_buffer", "master") from src (same shape, converted
 * to f32), allocated when absent (momentum_buffer before the first step). */
AMP_API int64_t amp_optim_param_steps(const amp_optim *opt, int i); /* -1 on bad arguments */
AMP_API amp_status amp_optim_set_param_steps(amp_optim *opt, int i, int64_t steps);
AMP_API uint64_t amp_optim_sr_counter(const amp_optim *opt);
AMP_API amp_status amp_optim_set_sr_counter(amp_optim *opt, uint64_t counter);
AMP_API amp_status amp_optim_load_state(amp_optim *opt, int i, const char *name, const amp_tensor *src);

/* Scales the gradients so their total L2 norm (accumulated in double) is at
 * most max_norm (torch's clip_grad_norm_, eps 1e-6) and returns the norm
 * before clipping. A non-finite norm leaves the gradients alone (the scaler
 * will skip the step) and is returned as is. Negative on bad arguments. */
AMP_API double amp_clip_grad_norm(amp_optim *opt, double max_norm);
/* torch's clip_grad_norm_(parameters) over any set of tensors: one norm over
 * the .grad of params[0..n) (a tensor without a gradient is skipped, one
 * listed twice counted once), the same rule and return value. Clips .grad
 * itself: for a master-weight optimizer after amp_scaler_unscale (whose step
 * uses its f32 master gradients) use amp_clip_grad_norm_optims. */
AMP_API double amp_clip_grad_norm_params(amp_tensor *const *params, int n, double max_norm);
/* One norm across several optimizers (O2's master-weight and f32
 * optimizers, the optimizers of several models): each optimizer's gradients
 * as its next step will use them (the f32 master gradients after an
 * unscale). With an enabled scaler (sc may be NULL), every optimizer must
 * have been unscaled (amp_scaler_unscale) since the last update: clipping
 * gradients still multiplied by the scale is an error naming the optimizer
 * (torch clips them silently). */
typedef struct amp_scaler amp_scaler;
AMP_API double amp_clip_grad_norm_optims(amp_optim *const *opts, int n, double max_norm, const amp_scaler *sc);
/* Clamps every gradient element to [-clip, clip]. */
AMP_API amp_status amp_clip_grad_value(amp_optim *opt, double clip);

/* ---- learning-rate schedules ---------------------------------------------- */
typedef enum { AMP_LR_CONSTANT = 0, AMP_LR_STEP, AMP_LR_COSINE } amp_lr_kind;
typedef struct {
    amp_lr_kind kind;
    int64_t step_size;    /* AMP_LR_STEP: decay every step_size steps ... */
    double gamma;         /* ... by gamma */
    int64_t warmup_steps; /* AMP_LR_COSINE: linear warmup from 0 ... */
    int64_t total_steps;  /* ... then cosine to min_lr at total_steps */
    double min_lr;
} amp_lr_schedule;
/* Learning rate at step (0-based) for base_lr. */
AMP_API double amp_lr_at(const amp_lr_schedule *s, int64_t step, double base_lr);

#ifdef __cplusplus
}
#endif
#endif

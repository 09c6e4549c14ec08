/* Internal: the optimizer family: multi-tensor passes over an optimizer's
 * n parameters (gradients contiguous; NULL entries skipped): the fused
 * update, the gradient norm's sum of squares, the clip's scaling and
 * clip_grad_value's clamp. The
 * found_inf check and the unscale belong to the scaler family
 * (family/scaler.h). Contract: kernels/backend.h's. */
#ifndef AMP_KERNELS_FAMILY_OPTIM_H
#define AMP_KERNELS_FAMILY_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/tensor.h"

/* A device scaler's state (family/scaler.h); the update reads its found_inf flag and scale. */
typedef struct amp_dev_scaler amp_dev_scaler;

/* One parameter of a fused optimizer step (src/optim/): the tensors the
 * update reads and writes. grad is the parameter's gradient (or the f32
 * master gradient after an unscale); master/exp_avg/exp_avg_sq/momentum
 * may be NULL. */
typedef struct {
    amp_tensor *param, *grad, *master, *exp_avg, *exp_avg_sq, *momentum;
    bool first_momentum;   /* SGD: the buffer starts as the gradient (a device backend: unless the
                              optimizer's device counters say an earlier step initialised it) */
    bool write_grad;       /* store the unscaled gradient back into .grad (torch leaves it unscaled) */
    float wd;              /* this parameter's weight decay */
    float neg_step, bc2s, decay; /* Adam(W) per-parameter constants (bias corrections of its step count) */
    uint64_t sr_counter;   /* stochastic rounding: the first counter of this parameter */
    /* (added for the device backends, which learn on the device whether
     * earlier steps were skipped) */
    int index;             /* the parameter's index in its optimizer (the device counters' slot) */
    int64_t step;          /* the host's count of this parameter's steps, this one included */
} amp_optim_item;

typedef struct {
    int kind;              /* amp_optim_kind */
    /* SGD */
    float mom, one_minus_damp, neg_lr;
    bool nesterov;
    /* Adam(W) */
    float w1, b2, omb2, eps;
    /* the half copy of a master-weight parameter */
    int rounding;          /* amp_round_mode */
    uint64_t sr_seed;
    /* (added for the device backends and the guard's message) */
    double lr, beta1, beta2;
    /* A device backend's bookkeeping of skipped steps (NULL on the CPU, whose
     * host counters are exact): counts is the optimizer's block of
     * amp_optim_counts_len(n) i64 in the device's memory (see
     * AMP_OPTIM_CNT_*), which a step whose found_inf flag is set advances
     * instead of updating; pow_tab (device, 2 doubles per k: beta1^k,
     * beta2^k computed by the host's libm, k < pow_n) gives the bias
     * corrections of the device's step count
     * (item.step - counts[skipped of the item]) with the CPU's bits; past
     * pow_n the device's pow is used. sr_span: what this step advances the
     * stochastic-rounding stream by (a skipped step gives it back).
     * report_skip: a skipped step is also reported as a deferred error
     * (amp_optim_step without a scaler: a non-finite gradient). */
    int64_t *counts;
    const double *pow_tab;
    int64_t pow_n;
    uint64_t sr_span;
    bool report_skip;
    bool use_ds_scale;     /* with ds: also multiply by the device scale's reciprocal (not after an unscale) */
    bool skip_unscales;    /* with ds: a skipped step still writes write_grad items' unscaled gradients */
} amp_optim_consts_b;

/* The device counters of an optimizer with n parameters (i64 each):
 * [0] stochastic-rounding stream given back by skipped steps (u64),
 * [1] optimizer steps skipped, [2 + 2i] steps of parameter i skipped,
 * [3 + 2i] 1 once parameter i's momentum buffer was initialised on the device. */
#define AMP_OPTIM_CNT_SR 0
#define AMP_OPTIM_CNT_STEPS 1
#define AMP_OPTIM_CNT_SKIPS(i) (2 + 2 * (int64_t)(i))
#define AMP_OPTIM_CNT_MOMINIT(i) (3 + 2 * (int64_t)(i))
static inline int64_t amp_optim_counts_len(int n) { return 2 + 2 * (int64_t)n; }

#define AMP_OPTIM_ENTRIES(X, a) X(a, optim_step) X(a, optim_sumsq) X(a, optim_scale_grads) X(a, optim_clamp_grad)

typedef struct amp_optim_family {
    /* the fused update of n parameters, unscaling by inv_scale on the fly
     * (or, when ds is given, by the device scale's reciprocal times
     * inv_scale -- a clip coefficient -- and skipped entirely when its
     * found_inf flag is set, except that with c->skip_unscales write_grad
     * items still get their unscaled gradient). A non-finite result is never kept: the CPU puts
     * the tile back, stops at that parameter (those after it are not
     * updated) and returns AMP_ERR_RANGE with *bad_param its item index; a
     * device backend keeps the old values of the elements concerned and
     * reports it as a deferred error at the next synchronisation
     * (*bad_param -1). */
    amp_status (*optim_step)(const char *fn, const amp_optim_consts_b *c, amp_optim_item *items, int n,
                             float inv_scale, amp_dev_scaler *ds, int *bad_param);
    /* the L2 norm's square (double) of grads[0..n) times f, summed over the
     * tensors; device: written to *dev_out (a device double) without waiting */
    amp_status (*optim_sumsq)(const char *fn, amp_tensor *const *grads, int n, float f, double *host_out,
                              double *dev_out);
    /* g *= f for each gradient (clipping), f a host float or, when dev_f is
     * given, read on the device */
    amp_status (*optim_scale_grads)(const char *fn, amp_tensor *const *grads, int n, float f, const float *dev_f);
    /* g = min(max(g, -c), c) for each gradient (clip_grad_value; NULL
     * entries skipped), each element rounded back to g's dtype */
    amp_status (*optim_clamp_grad)(const char *fn, amp_tensor *const *grads, int n, float c);
} amp_optim_family;

#endif

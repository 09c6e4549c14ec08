/* Internal: the optimizer struct and what the GradScaler needs of it (the
 * scaler drives the optimizer through these; the optimizer knows nothing of
 * the scaler). */
#ifndef AMP_OPTIM_IMPL_H
#define AMP_OPTIM_IMPL_H

#include "amp/optim.h"
#include "kernels/backend.h"
#include "tensor/tensor_impl.h"

typedef struct {
    amp_tensor *param;      /* retained */
    amp_tensor *exp_avg;    /* Adam(W) */
    amp_tensor *exp_avg_sq; /* Adam(W) */
    amp_tensor *momentum;   /* SGD with momentum (NULL until first step) */
    amp_tensor *master;     /* f32 master copy (master weights) */
    amp_tensor *master_grad;/* f32 unscaled gradient after amp_scaler_unscale */
    int64_t step;
    double weight_decay;    /* this parameter's (torch's param group setting); starts as opts.weight_decay */
    int64_t sr_off;         /* stochastic-rounding offset of element 0 in a step's stream; -1: after the previous parameters */
    bool mom_dev_pending;   /* device: momentum made, its first applied step not yet seen by the host */
} amp_param_state;

/* An optimizer made by a data-parallel object (src/dist/ddp.c): decisions
 * and updates agreed across ranks. Unset (ctx NULL) for ordinary ones. */
typedef struct {
    void *ctx;
    /* *flag becomes the OR over ranks (the skip decision: all skip or all step) */
    amp_status (*agree)(void *ctx, bool *flag);
    /* *sumsq (this rank's part) becomes the sum over ranks; NULL when every
     * rank holds the same gradients (the local norm is the global one) */
    amp_status (*sum_sq)(void *ctx, double *sumsq);
    /* after an update was attempted (st: this rank's result): spread the
     * updated shards (ZeRO-1) and return the result agreed over ranks */
    amp_status (*after_step)(void *ctx, amp_status st);
    /* amp_optim_zero_grad: the full parameters' gradients too */
    void (*zero_grad)(void *ctx);
    void (*destroy)(void *ctx); /* amp_optim_free */
    /* amp_optim_param_origin: the full parameter slice i is part of */
    amp_tensor *(*origin)(void *ctx, int i, int64_t *offset);
} amp_optim_dist;

struct amp_optim {
    amp_optim_opts o;
    int n;
    amp_param_state *ps;
    int64_t steps;
    uint64_t sr_counter;   /* stochastic-rounding stream position */
    uint64_t sr_span;      /* stream advance per step; 0: the parameters' total size */
    bool master_grads_valid;
    amp_optim_dist dist;
    /* Optimizers on a device (kernels/family/optim.h's entries): the
     * host counts every step it queues; the device counts the ones its
     * found_inf flag skipped (dcounts, AMP_OPTIM_CNT_*), and
     * amp__optim_dev_sync takes them back from the host's counts when the
     * host asks (the getters, checkpoints). dpow: beta1^k, beta2^k from the
     * host's libm for k < dpow_n (the device's bias corrections with the
     * CPU's bits). dplain: the found_inf flag of amp_optim_step. */
    const amp_backend *dbe;
    int64_t *dcounts;
    bool dcounts_dirty;
    double *dpow;
    int64_t dpow_n;
    bool dpow_done;
    double dpow_b1, dpow_b2;
    amp_dev_scaler *dplain;
};

/* params[i] is a live, contiguous leaf that requires grad: AMP_OK, else the
 * error "fn: params[i] is NULL / must be a leaf tensor that requires grad /
 * is not contiguous" (amp_optim_new's and amp_ddp_new's first checks). */
amp_status amp__optim_check_param(const char *fn, amp_tensor *const *params, int i);
/* amp_optim_new that also accepts n = 0 (a ZeRO-1 rank may own no element
 * of an optimizer's parameters): a step then changes nothing but the counts. */
amp_optim *amp__optim_new(const char *fn, amp_tensor *const *params, int n, const amp_optim_opts *o, bool allow_empty);
/* Agreement on a skip decision across ranks (no-op for ordinary optimizers). */
amp_status amp__optim_agree(amp_optim *opt, bool *found_inf);

/* AMP_OK when every parameter, gradient and state tensor of opt is on one
 * device (*dev, may be NULL), else the error naming fn and the parameter. */
amp_status amp__optim_device(const char *fn, const amp_optim *opt, amp_device *dev);
/* AMP_OK when every tensor of opt is in host memory, else the error naming
 * fn (for what runs on the CPU only so far). */
amp_status amp__optim_on_cpu(const char *fn, const amp_optim *opt);
/* The host's step counts and stochastic-rounding position made exact after
 * device steps (waits for the device; see struct amp_optim). */
amp_status amp__optim_dev_sync(const char *fn, amp_optim *opt);
void amp__optim_dev_free(amp_optim *opt);
/* The skip decision, read-only: is every gradient element the next step
 * would use finite once multiplied by inv_scale (the unscaled value, the
 * same f32 product the update kernel computes)? *first_bad (may be NULL)
 * gets the index of the first parameter with an inf/nan (-1 if none). On a
 * device this waits for the answer. */
bool amp__optim_check_unscaled(amp_optim *opt, float inv_scale, int *first_bad);
/* The sum of squares (double) of the gradients the next step would use, each
 * element multiplied by inv_scale in f32 as the update does: inf/nan when
 * one is (then *first_bad, may be NULL, names the first such parameter, else
 * -1). One read pass: the skip check and the norm for clipping at once. */
double amp__optim_sumsq_unscaled(amp_optim *opt, float inv_scale, int *first_bad);
/* torch's _unscale_grads_, in place (into the f32 master gradients on a
 * master-weight optimizer): each element multiplied by inv_scale, and
 * *found_inf set when an unscaled value is inf/nan (amp checks after the
 * multiply: a finite gradient can unscale to inf; torch checks before).
 * *first_bad (may be NULL) as above. An f16 gradient on a non-master
 * optimizer is refused ("Attempting to unscale FP16 gradients"), as torch
 * does. On a device, ds (the scaler's device state) gives the scale and
 * receives the flag; *found_inf and *first_bad are left alone. */
amp_status amp__optim_unscale(amp_optim *opt, float inv_scale, amp_dev_scaler *ds, bool *found_inf, int *first_bad,
                              const char *fn);
/* One update, multiplying gradients by inv_scale on the fly (pass 1.0f when
 * they are already unscaled): the fused unscale + update + half write-back.
 * The caller has checked the gradients; a result that is still non-finite
 * (f32 overflow of finite values) is never kept: AMP_ERR_RANGE naming fn
 * and the parameter (see step_param). On a device: ds is the scaler's
 * device state (its found_inf flag skips the step on the device), and with
 * ds_scale the gradients are also multiplied by its scale's reciprocal;
 * skip_unscales: a skipped step still leaves the unscaled gradient in a
 * non-master optimizer's .grad (the CPU's fused path unscales them before
 * it skips; after a clip check it does not). */
amp_status amp__optim_step_scaled(amp_optim *opt, float inv_scale, amp_dev_scaler *ds, bool ds_scale, bool skip_unscales,
                                  const char *fn);
/* One norm over the gradients of opts[0..n) as their next steps will use
 * them, clipped to max_norm (amp_clip_grad_norm's rule; ZeRO-1 shards summed
 * over ranks). check (may be NULL) is asked about each optimizer, after its
 * device check, and refuses it with the error set: how the scaler, which
 * knows the optimizer and not the reverse, refuses gradients still scaled
 * (amp_clip_grad_norm_optims, amp/scaler.c). */
double amp__optim_clip_norm(const char *fn, amp_optim *const *opts, int n, double max_norm,
                            amp_status (*check)(const void *ctx, const char *fn, int k, const amp_optim *opt),
                            const void *ctx);

#endif

/* amp/scaler.h — dynamic loss scaling, exactly torch.amp.GradScaler, plus
 * the extensions DeepSpeed, Megatron and Apex use.
 *
 *   loss' = scale(loss); backward(loss')         gradients are scaled by S
 *   unscale(opt)      grads *= 1/S (f32 reciprocal computed in double),
 *                     every unscaled element checked for inf/nan
 *   step(opt)         unscale if not done; update only if all unscaled
 *                     grads are finite
 *   update()          any inf/nan: S *= backoff, tracker = 0
 *                     else tracker += 1; at growth_interval: S *= growth
 *                     unless that is inf (S stays), tracker = 0
 *                     (S is an f32; each product is computed in double and
 *                     rounded once, as torch's _amp_update_scale_ does)
 *
 * Stronger than torch (docs/amp-core.md): the check looks at the unscaled
 * value (torch checks the scaled one, so a finite gradient that unscales to
 * inf reached the weights), the scale stays in the normal f32 range
 * [2^-126, FLT_MAX] (torch's underflows to 0 after ~165 overflows in a row,
 * and the next clean step then multiplies by 1/0), and every scale or
 * factor given (init_scale, update_to, state_set, the factors and limits)
 * must be in that range: a double that would round to 0 or inf is an error.
 * The optimizer never keeps a non-finite result either (amp/optim.h).
 *
 * Errors mirror torch: a second unscale before update, unscale after step,
 * a second step before update, update with no step since the last update. */
#ifndef AMP_SCALER_H
#define AMP_SCALER_H

#include "amp/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double init_scale;       /* 0 -> 65536 (2^16) */
    double growth_factor;    /* 0 -> 2.0; must be > 1 */
    double backoff_factor;   /* 0 -> 0.5; must be in (0, 1) */
    int64_t growth_interval; /* 0 -> 2000 */
    bool disabled;           /* enabled unless set (torch's enabled=False) */
    /* extensions (zero = torch's behaviour) */
    int hysteresis;          /* back off only after this many overflows (0,1 = every one) */
    bool consecutive_hysteresis; /* DeepSpeed: a clean step restores the hysteresis budget */
    double min_scale;        /* floor for the scale (DeepSpeed uses 1); 0 = 2^-126 */
    double max_scale;        /* ceiling (Apex: 2^24); 0 = none (FLT_MAX) */
    bool static_scale;       /* never change the scale (still skips bad steps) */
} amp_scaler_opts;

typedef struct amp_scaler amp_scaler;

/* NULL opts = torch's defaults. */
AMP_API amp_scaler *amp_scaler_new(const amp_scaler_opts *o);
AMP_API void amp_scaler_free(amp_scaler *s);

/* loss * scale as a new differentiable tensor (f32 math; the output keeps
 * the loss's dtype). Disabled: returns a differentiable alias of loss. */
AMP_API amp_tensor *amp_scaler_scale(amp_scaler *s, amp_tensor *loss);
AMP_API amp_status amp_scaler_unscale(amp_scaler *s, amp_optim *opt);
/* Runs opt's step unless its gradients held inf/nan. *skipped (may be NULL)
 * says which. Disabled: a plain amp_optim_step. */
AMP_API amp_status amp_scaler_step(amp_scaler *s, amp_optim *opt, bool *skipped);
AMP_API amp_status amp_scaler_update(amp_scaler *s);

/* unscale + clip_grad_norm_ + the skip check in one read pass over the
 * gradients of opts[0..n), for the common loop
 *     amp_scaler_unscale(s, opts[k]) for each k;
 *     amp_clip_grad_norm_optims(opts, n, max_norm, s);
 *     amp_scaler_step(s, opts[k]) for each k
 * which reads the gradients five times and writes them twice (and, for
 * master weights, makes f32 copies). Returns the total L2 norm of the
 * unscaled gradients (the value clip_grad_norm_ returns) or -1 with an
 * error. The gradients in .grad are left as they are (still scaled,
 * unclipped); each optimizer's following amp_scaler_step multiplies them
 * by 1/scale and, when norm > max_norm, by max_norm / (norm + 1e-6) inside
 * its fused update, and is skipped when the norm is not finite (an inf/nan
 * gradient). The same update as the three calls, except that 1/scale and
 * the clip coefficient are one f32 factor (with a power-of-two scale and
 * normal values: the same bits). The optimizers must not have been
 * unscaled, clipped or stepped since the last update. A disabled scaler:
 * amp_clip_grad_norm_optims. */
AMP_API double amp_scaler_clip_grad_norm(amp_scaler *s, amp_optim *const *opts, int n, double max_norm);
/* torch's update(new_scale): sets the scale, leaves the growth tracker. */
AMP_API amp_status amp_scaler_update_to(amp_scaler *s, double new_scale);

AMP_API double amp_scaler_get_scale(const amp_scaler *s); /* 1.0 when disabled */
AMP_API bool amp_scaler_is_enabled(const amp_scaler *s);
AMP_API int64_t amp_scaler_growth_tracker(const amp_scaler *s);
/* Whether opt's gradients were unscaled (amp_scaler_unscale, or the unscale
 * inside amp_scaler_step) since the last update: then they are the true
 * gradients. True for a disabled scaler. */
AMP_API bool amp_scaler_is_unscaled(const amp_scaler *s, const amp_optim *opt);
/* Whether the last step of opt found inf/nan (valid between step and update). */
AMP_API bool amp_scaler_found_inf(const amp_scaler *s, const amp_optim *opt);
/* Diagnosis of an overflow storm: the index in opt's parameter list of the
 * first parameter whose unscaled gradient held inf/nan in opt's current
 * step (valid between step or unscale and update; -1 with an error when
 * there was none); how many
 * updates in a row found inf/nan (0 after a clean one); and whether the
 * scale sits at its floor (min_scale, or 2^-126), where it cannot back off
 * further. amp train stops with a report built from these. */
AMP_API int amp_scaler_overflow_param(const amp_scaler *s, const amp_optim *opt);
AMP_API int64_t amp_scaler_consecutive_overflows(const amp_scaler *s);
AMP_API bool amp_scaler_at_min_scale(const amp_scaler *s);

/* Counters: updates, steps skipped for inf/nan (per update: an update where
 * any optimizer overflowed counts once), and the scale after each update. */
AMP_API int64_t amp_scaler_num_updates(const amp_scaler *s);
AMP_API int64_t amp_scaler_num_skipped(const amp_scaler *s);
AMP_API const float *amp_scaler_scale_history(const amp_scaler *s, int64_t *n);

/* torch's state_dict(): scale, growth_factor, backoff_factor,
 * growth_interval, growth_tracker; plus amp's extensions. */
typedef struct {
    double scale, growth_factor, backoff_factor;
    int64_t growth_interval, growth_tracker;
    int hysteresis, hysteresis_left;
    double min_scale, max_scale;
    int64_t num_updates, num_skipped;
} amp_scaler_state;
AMP_API amp_status amp_scaler_state_get(const amp_scaler *s, amp_scaler_state *out);
AMP_API amp_status amp_scaler_state_set(amp_scaler *s, const amp_scaler_state *st);

#ifdef __cplusplus
}
#endif
#endif

/* amp/policy.h — precision policies (DeepMind jmp style), Apex opt levels,
 * and amp_context, the seeds' AMPContext in C.
 *
 * A policy string names three dtypes: "params=float32,compute=bfloat16,
 * output=float32" (short keys p/c/o; dtype names float32/f32/full,
 * float16/f16/half, bfloat16/bf16). Parameters are stored in `params`; the
 * forward runs under autocast with `compute` (ops on the fp32 list still run
 * in f32, unlike jmp which casts the whole forward); the model's output is
 * cast to `output`.
 *
 * Opt levels, as Apex defined them:
 *   O0  pure f32 (the baseline)
 *   O1  autocast; f32 parameters; dynamic loss scaling for f16
 *   O2  half parameters with f32 master weights; batch/layer/group norms kept
 *       f32; dynamic loss scaling for f16; no autocast
 *   O3  pure half: half parameters, no master weights, no loss scaling
 * amp_initialize (amp/initialize.h) applies a level or a policy to models. */
#ifndef AMP_POLICY_H
#define AMP_POLICY_H

#include "amp/autocast.h"
#include "amp/scaler.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    amp_dtype param, compute, output;
} amp_policy;

AMP_API amp_status amp_policy_parse(const char *s, amp_policy *out);
/* "params=float32,compute=bfloat16,output=float32" */
AMP_API char *amp_policy_str(const amp_policy *p, char *buf, size_t n);

typedef enum { AMP_O0 = 0, AMP_O1, AMP_O2, AMP_O3 } amp_opt_level;

typedef struct {
    amp_opt_level level;
    amp_dtype param_dtype;   /* parameters' storage dtype */
    amp_dtype compute_dtype; /* autocast / half dtype; f32 for O0 */
    bool autocast;
    bool keep_norm_f32;
    bool master_weights;
    bool loss_scaling;       /* dynamic loss scaling (f16 only) */
} amp_opt_config;

AMP_API amp_status amp_opt_level_parse(const char *s, amp_opt_level *out); /* "O0".."O3" */
/* half: AMP_F16 or AMP_BF16 (ignored for O0). */
AMP_API amp_status amp_opt_config_get(amp_opt_level level, amp_dtype half, amp_opt_config *out);
/* The configuration a policy implies, as amp_initialize applies it: f32
 * params + half compute = O1 (autocast); half params = O2 (f32 master
 * weights, norms kept f32, dynamic loss scaling when compute is f16), which
 * must compute in their own dtype; all f32 = O0. */
AMP_API amp_status amp_opt_config_from_policy(const amp_policy *p, amp_opt_config *out);

/* ---- amp_context ------------------------------------------------------------- */
typedef enum { AMP_SCALER_AUTO = 0, AMP_SCALER_ON, AMP_SCALER_OFF } amp_scaler_mode;

typedef struct {
    bool enabled;          /* false: exactly the plain f32 loop */
    amp_dtype dtype;       /* AMP_F16 or AMP_BF16 */
    amp_scaler_mode scaler;/* AUTO: on for f16, off for bf16 (the seeds' advice) */
    amp_scaler_opts scaler_opts;
    amp_autocast_table table;
} amp_context_opts;

typedef struct amp_context amp_context;

AMP_API amp_context *amp_context_new(const amp_context_opts *o);
AMP_API void amp_context_free(amp_context *c);
AMP_API amp_status amp_context_enter(amp_context *c);  /* autocast region (if enabled) */
AMP_API amp_status amp_context_exit(amp_context *c);
AMP_API amp_status amp_context_backward(amp_context *c, amp_tensor *loss); /* scale, backward */
/* step then update; *skipped (may be NULL) reports an inf/nan skip. */
AMP_API amp_status amp_context_step(amp_context *c, amp_optim *opt, bool *skipped);
AMP_API amp_scaler *amp_context_scaler(amp_context *c); /* NULL when not scaling */

#ifdef __cplusplus
}
#endif
#endif

/* Internal: the optimizer struct and what the GradScaler needs of it. */
#ifndef AMP_OPTIM_IMPL_H
#define AMP_OPTIM_IMPL_H

#include "amp/optim.h"
#include "tensor/tensor_impl.h"

typedef struct {
    amp_tensor *param;      /* retained */
    amp_tensor *exp_avg;    /* Adam(W) */
    amp_tensor *exp_avg_sq; /* Adam(W) */
    amp_tensor *momentum;   /* SGD with momentum (NULL until first step) */
    amp_tensor *master;     /* f32 master copy (master weights) */
    amp_tensor *master_grad;/* f32 unscaled gradient after amp_scaler_unscale */
    int64_t step;
} amp_param_state;

struct amp_optim {
    amp_optim_opts o;
    int n;
    amp_param_state *ps;
    int64_t steps;
    uint64_t sr_counter;   /* stochastic-rounding stream position */
    bool master_grads_valid;
};

/* Is the gradient the next step would use finite everywhere? (read-only) */
bool amp__optim_grads_finite(amp_optim *opt);
/* torch's _unscale_grads_: per element, check then multiply by inv_scale, in
 * place (into the f32 master gradients on a master-weight optimizer). An f16
 * gradient on a non-master optimizer is refused ("Attempting to unscale FP16
 * gradients"), as torch does. */
amp_status amp__optim_unscale(amp_optim *opt, float inv_scale, bool *found_inf, const char *fn);
/* One update, multiplying gradients by inv_scale on the fly (pass 1.0f when
 * they are already unscaled): the fused unscale + update + half write-back. */
amp_status amp__optim_step_scaled(amp_optim *opt, float inv_scale);

#endif

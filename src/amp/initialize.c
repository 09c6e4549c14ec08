/* amp_initialize: opt levels and policies applied to models in one call
 * (casts, f32 norms, the model's input/output casts, optimizers with master
 * weights, the scaler). amp/initialize.h says what each level does. */
#include <stdlib.h>
#include <string.h>

#include "amp/initialize.h"
#include "core/error.h"
#include "optim/optim_impl.h"
#include "tensor/tensor_impl.h"

#define MAX_MODELS 64

struct amp_setup {
    amp_opt_config cfg;
    amp_dtype output;
    amp_optim *opts[2];
    int n_opts;
    amp_scaler *scaler;
};

static bool is_half(amp_dtype d) { return d == AMP_F16 || d == AMP_BF16; }

static amp_status decide(const char *fn, const amp_init_opts *o, amp_opt_config *c, amp_dtype *output) {
    *output = o->output;
    if (o->output != AMP_DTYPE_COUNT && o->output != AMP_F32 && !is_half(o->output))
        return amp_error(AMP_ERR_DTYPE, "%s: output dtype %s is not f32, f16, bf16 or AMP_DTYPE_COUNT", fn,
                         amp_dtype_name(o->output));
    if (o->policy) {
        amp_policy p;
        amp_status st = amp_policy_parse(o->policy, &p);
        if (st) return amp_error_chain(st, "%s", fn);
        st = amp_opt_config_from_policy(&p, c);
        if (st) return amp_error_chain(st, "%s: policy \"%s\"", fn, o->policy);
        *output = p.output;
    } else {
        amp_status st = amp_opt_config_get(o->level, o->half, c);
        if (st) return amp_error_chain(st, "%s", fn);
    }
    if ((int)o->keep_norm_f32 < 0 || o->keep_norm_f32 > AMP_OFF || (int)o->master_weights < 0 || o->master_weights > AMP_OFF ||
        (int)o->loss_scaling < 0 || o->loss_scaling > AMP_OFF)
        return amp_error(AMP_ERR_ARG, "%s: an override is not AMP_DEFAULT, AMP_ON or AMP_OFF", fn);
    if (o->keep_norm_f32) c->keep_norm_f32 = o->keep_norm_f32 == AMP_ON;
    if (o->master_weights) c->master_weights = o->master_weights == AMP_ON;
    if (o->loss_scaling) c->loss_scaling = o->loss_scaling == AMP_ON;
    if (c->master_weights && !is_half(c->param_dtype))
        return amp_error(AMP_ERR_ARG, "%s: master weights need half parameters (level O%d keeps them f32)", fn, (int)c->level);
    if (c->keep_norm_f32 && !is_half(c->param_dtype)) c->keep_norm_f32 = false; /* nothing to keep */
    return AMP_OK;
}

void amp_setup_free(amp_setup *s) {
    if (!s) return;
    for (int i = 0; i < s->n_opts; i++) amp_optim_free(s->opts[i]);
    amp_scaler_free(s->scaler);
    free(s);
}

amp_setup *amp_initialize(amp_module *const *models, int n_models, const amp_init_opts *o) {
    static const char *fn = "amp_initialize";
    if (!o) return amp_error_null(AMP_ERR_ARG, "%s: opts is NULL", fn);
    if (!models || n_models <= 0 || n_models > MAX_MODELS)
        return amp_error_null(AMP_ERR_ARG, "%s: models is NULL or n_models %d is outside 1..%d", fn, n_models, MAX_MODELS);
    for (int i = 0; i < n_models; i++)
        if (!models[i]) return amp_error_chain_null(AMP_ERR_ARG, "%s: models[%d] is NULL", fn, i);
    amp_setup *s = calloc(1, sizeof *s);
    if (!s) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    if (decide(fn, o, &s->cfg, &s->output) != AMP_OK) goto fail;
    {   /* the optimizer options, checked before any model is cast */
        amp_tensor *probe = amp__tensor_new(fn, AMP_F32, 1, AMP_SHAPE(1), AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
        amp_optim_opts po = o->optim;
        po.master_weights = false;
        amp_optim *check = probe && amp_tensor_set_requires_grad(probe, true) == AMP_OK ? amp_optim_new(&probe, 1, &po) : NULL;
        amp__release(probe);
        if (!check) {
            amp_error_chain(AMP_OK, "%s", fn);
            goto fail;
        }
        amp_optim_free(check);
    }
    /* every parameter, once (models may share some) */
    int total = 0;
    for (int i = 0; i < n_models; i++) {
        int n = amp_module_parameters(models[i], NULL, NULL, 0);
        if (n < 0) goto fail;
        total += n;
    }
    if (total == 0) {
        amp_error(AMP_ERR_ARG, "%s: the models have no parameters to train", fn);
        goto fail;
    }
    amp_tensor **ps = calloc((size_t)total, sizeof *ps), **half = calloc((size_t)total, sizeof *half),
               **full = calloc((size_t)total, sizeof *full);
    if (!ps || !half || !full) {
        free(ps);
        free(half);
        free(full);
        amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        goto fail;
    }
    /* 1. casts and the model boundary */
    amp_status st = AMP_OK;
    for (int i = 0; i < n_models && !st; i++) {
        if (s->cfg.param_dtype != AMP_F32) st = amp_module_to(models[i], s->cfg.param_dtype, s->cfg.keep_norm_f32);
        amp_module_io io = {.input = s->cfg.param_dtype != AMP_F32 ? s->cfg.param_dtype : AMP_DTYPE_COUNT,
                            .autocast = s->cfg.autocast,
                            .autocast_dtype = s->cfg.autocast ? s->cfg.compute_dtype : AMP_F16,
                            .output = s->output};
        if (!st) st = amp_module_set_io(models[i], &io);
    }
    /* 2. optimizers: half parameters (master weights when the level has them), f32 ones apart */
    int n = 0, nh = 0, nf = 0;
    for (int i = 0; i < n_models && !st; i++) {
        int k = amp_module_parameters(models[i], ps + n, NULL, total - n);
        for (int j = n; j < n + k; j++) {
            bool dup = false;
            for (int q = 0; q < n && !dup; q++) dup = ps[q] == ps[j];
            if (dup) continue;
            if (is_half(amp_tensor_dtype(ps[j])) && s->cfg.master_weights) half[nh++] = ps[j];
            else full[nf++] = ps[j];
        }
        n += k;
    }
    amp_optim_opts oo = o->optim;
    if (!st && nh) {
        oo.master_weights = true;
        if (!(s->opts[s->n_opts++] = amp_optim_new(half, nh, &oo))) st = amp_last_status();
    }
    if (!st && nf) {
        oo.master_weights = false;
        if (!(s->opts[s->n_opts++] = amp_optim_new(full, nf, &oo))) st = amp_last_status();
    }
    free(ps);
    free(half);
    free(full);
    if (st) {
        amp_error_chain(st, "%s", fn);
        goto fail;
    }
    /* 3. the scaler: dynamic loss scaling for f16 only (amp_setup_step checks
     *    the gradients itself otherwise) */
    if (s->cfg.loss_scaling) {
        amp_scaler_opts so = o->scaler;
        so.disabled = false;
        s->scaler = amp_scaler_new(&so);
        if (!s->scaler) {
            amp_error_chain(AMP_OK, "%s", fn);
            goto fail;
        }
    }
    return s;
fail:
    amp_setup_free(s);
    return NULL;
}

const amp_opt_config *amp_setup_config(const amp_setup *s) {
    return s ? &s->cfg : amp_error_null(AMP_ERR_ARG, "amp_setup_config: setup is NULL");
}

amp_dtype amp_setup_output_dtype(const amp_setup *s) { return s ? s->output : AMP_DTYPE_COUNT; }

amp_scaler *amp_setup_scaler(amp_setup *s) {
    if (!s) return amp_error_null(AMP_ERR_ARG, "amp_setup_scaler: setup is NULL");
    return s->scaler; /* NULL without loss scaling */
}

amp_optim *const *amp_setup_optims(const amp_setup *s, int *n) {
    if (n) *n = s ? s->n_opts : 0;
    return s ? s->opts : amp_error_null(AMP_ERR_ARG, "amp_setup_optims: setup is NULL");
}

amp_status amp_setup_zero_grad(amp_setup *s) {
    if (!s) return amp_error(AMP_ERR_ARG, "amp_setup_zero_grad: setup is NULL");
    for (int i = 0; i < s->n_opts; i++) {
        amp_status st = amp_optim_zero_grad(s->opts[i]);
        if (st) return amp_error_chain(st, "amp_setup_zero_grad");
    }
    return AMP_OK;
}

amp_status amp_setup_backward(amp_setup *s, amp_tensor *loss) {
    static const char *fn = "amp_setup_backward";
    if (!s) return amp_error(AMP_ERR_ARG, "%s: setup is NULL", fn);
    if (!loss) return amp_error_chain(AMP_ERR_ARG, "%s: loss is NULL", fn);
    amp_tensor *scaled = s->scaler ? amp_scaler_scale(s->scaler, loss) : loss;
    amp_status st = scaled ? amp_backward(scaled) : amp_last_status();
    if (st) return amp_error_chain(st, "%s", fn);
    return AMP_OK;
}

double amp_setup_clip_grad_norm(amp_setup *s, double max_norm) {
    static const char *fn = "amp_setup_clip_grad_norm";
    if (!s) {
        amp_error(AMP_ERR_ARG, "%s: setup is NULL", fn);
        return -1;
    }
    for (int i = 0; i < s->n_opts && s->scaler; i++)
        if (!amp_scaler_is_unscaled(s->scaler, s->opts[i]) && amp_scaler_unscale(s->scaler, s->opts[i]) != AMP_OK) {
            amp_error_chain(AMP_OK, "%s", fn);
            return -1;
        }
    double norm = amp_clip_grad_norm_optims(s->opts, s->n_opts, max_norm, s->scaler);
    if (norm < 0 && amp_last_status() != AMP_OK) amp_error_chain(AMP_OK, "%s", fn);
    return norm;
}

amp_status amp_setup_step(amp_setup *s, bool *skipped) {
    static const char *fn = "amp_setup_step";
    if (skipped) *skipped = false;
    if (!s) return amp_error(AMP_ERR_ARG, "%s: setup is NULL", fn);
    if (!s->scaler) {
        /* no loss scaling: still never write inf/nan into the weights; all
         * optimizers skip together, as with a scaler */
        for (int i = 0; i < s->n_opts; i++)
            if (!amp__optim_check_unscaled(s->opts[i], 1.0f, NULL)) {
                if (skipped) *skipped = true;
                return AMP_OK;
            }
        for (int i = 0; i < s->n_opts; i++) {
            amp_status st = amp_optim_step(s->opts[i]);
            if (st) return amp_error_chain(st, "%s", fn);
        }
        return AMP_OK;
    }
    bool any = false;
    for (int i = 0; i < s->n_opts; i++) {
        bool sk = false;
        amp_status st = amp_scaler_step(s->scaler, s->opts[i], &sk);
        if (st) return amp_error_chain(st, "%s", fn);
        any |= sk;
    }
    amp_status st = amp_scaler_update(s->scaler);
    if (st) return amp_error_chain(st, "%s", fn);
    if (skipped) *skipped = any;
    return AMP_OK;
}

amp_status amp_setup_set_lr(amp_setup *s, double lr) {
    if (!s) return amp_error(AMP_ERR_ARG, "amp_setup_set_lr: setup is NULL");
    for (int i = 0; i < s->n_opts; i++) {
        amp_status st = amp_optim_set_lr(s->opts[i], lr);
        if (st) return amp_error_chain(st, "amp_setup_set_lr");
    }
    return AMP_OK;
}

/* SGD, Adam, AdamW with PyTorch's single-tensor update formulas, evaluated in
 * f32 in the same order as torch's CPU kernels (scalars computed in double
 * and rounded to f32, as Python floats are when they meet a float tensor).
 *
 * One pass per parameter does: widen the gradient tile to f32 (times the
 * inverse loss scale when the scaler has not unscaled yet), read the weight
 * (the f32 master, or the parameter itself), update the optimizer state and
 * the weight, and write the half copy back (round-to-nearest-even or
 * stochastic). That is the fused unscale + update + write-back pass. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/autograd.h"
#include "amp/numeric.h"
#include "core/cpu.h"
#include "amp/scaler_impl.h"
#include "kernels/backend.h"
#include "optim/optim_impl.h"


amp_optim_opts amp_sgd_opts(double lr) {
    amp_optim_opts o;
    memset(&o, 0, sizeof o);
    o.kind = AMP_OPTIM_SGD;
    o.lr = lr;
    return o;
}

amp_optim_opts amp_adam_opts(double lr) {
    amp_optim_opts o;
    memset(&o, 0, sizeof o);
    o.kind = AMP_OPTIM_ADAM;
    o.lr = lr;
    o.beta1 = 0.9;
    o.beta2 = 0.999;
    o.eps = 1e-8;
    return o;
}

amp_optim_opts amp_adamw_opts(double lr) {
    amp_optim_opts o = amp_adam_opts(lr);
    o.kind = AMP_OPTIM_ADAMW;
    o.weight_decay = 0.01;
    return o;
}

static void dev_sync_quiet(const amp_optim *opt);

static amp_tensor *state_tensor(const char *fn, const amp_tensor *like, amp_mem_category c, double fill) {
    amp_device d = amp__dev(like);
    amp_tensor *t = amp__tensor_new_on(fn, d, AMP_F32, like->ndim, like->shape, c, AMP_NEW_UNSCOPED);
    if (!t) return NULL;
    if (fill == 0 && d == AMP_DEVICE_CPU) {
        memset(t->storage->data, 0, t->storage->nbytes);
    } else if (fill == 0) {
        const amp_backend *be = amp__backend(fn, d);
        if (!be || be->dev->memset_bytes(t->storage->data, 0, t->storage->nbytes) != AMP_OK) {
            amp__release(t);
            return NULL;
        }
    } else if (amp_tensor_fill_(t, fill) != AMP_OK) {
        amp__release(t);
        return NULL;
    }
    return t;
}

/* The update runs in f32 with constants rounded from doubles: each must be
 * finite as an f32 (1e300 is inf there). */
static bool f32_finite(double v) { return isfinite(v) && fabs(v) <= FLT_MAX; }

/* lr with the other settings: the largest f32 factor it makes must be
 * finite (SGD: lr; Adam: the first step's lr / (1 - beta1); AdamW: the decay
 * 1 - lr * weight_decay). */
static amp_status check_lr(const char *fn, const amp_optim_opts *o, double lr) {
    if (!(lr >= 0) || !f32_finite(lr))
        return amp_error(AMP_ERR_ARG, "%s: lr %g must be >= 0 and finite as an f32 (at most %g)", fn, lr, (double)FLT_MAX);
    if (o->kind != AMP_OPTIM_SGD && !f32_finite(lr / (1.0 - o->beta1)))
        return amp_error(AMP_ERR_ARG, "%s: lr %g: the first Adam step size lr / (1 - beta1) = %g is not finite as an f32", fn, lr,
                         lr / (1.0 - o->beta1));
    if (!f32_finite(lr * o->weight_decay) || !f32_finite(1.0 - lr * o->weight_decay))
        return amp_error(AMP_ERR_ARG, "%s: lr %g times weight_decay %g is not finite as an f32", fn, lr, o->weight_decay);
    return AMP_OK;
}

static amp_status check_opts(const char *fn, const amp_optim_opts *o) {
    if ((int)o->kind < 0 || o->kind > AMP_OPTIM_ADAMW) return amp_error(AMP_ERR_ARG, "%s: kind %d is not an optimizer", fn, (int)o->kind);
    if (!(o->weight_decay >= 0) || !f32_finite(o->weight_decay))
        return amp_error(AMP_ERR_ARG, "%s: weight_decay %g must be >= 0 and finite as an f32", fn, o->weight_decay);
    if (o->kind == AMP_OPTIM_SGD) {
        if (!(o->momentum >= 0) || !f32_finite(o->momentum))
            return amp_error(AMP_ERR_ARG, "%s: momentum %g must be >= 0 and finite as an f32", fn, o->momentum);
        if (!f32_finite(o->dampening) || !f32_finite(1.0 - o->dampening))
            return amp_error(AMP_ERR_ARG, "%s: dampening %g must be finite as an f32", fn, o->dampening);
        if (o->nesterov && (o->momentum <= 0 || o->dampening != 0))
            return amp_error(AMP_ERR_ARG, "%s: nesterov momentum requires a momentum and zero dampening", fn);
    } else {
        if (!(o->beta1 >= 0 && o->beta1 < 1)) return amp_error(AMP_ERR_ARG, "%s: beta1 %g must be in [0, 1)", fn, o->beta1);
        if (!(o->beta2 >= 0 && o->beta2 < 1)) return amp_error(AMP_ERR_ARG, "%s: beta2 %g must be in [0, 1)", fn, o->beta2);
        /* torch allows eps = 0; then a zero gradient gives 0 / 0 = NaN */
        if (!(o->eps > 0) || !((float)o->eps >= FLT_MIN) || !f32_finite(o->eps))
            return amp_error(AMP_ERR_ARG, "%s: eps %g must be a positive normal f32 (from %g to %g): with eps 0 a zero gradient "
                                          "gives 0/0 = NaN", fn, o->eps, (double)FLT_MIN, (double)FLT_MAX);
    }
    if (check_lr(fn, o, o->lr) != AMP_OK) return amp_last_status();
    if (o->rounding != AMP_ROUND_NEAREST && o->rounding != AMP_ROUND_STOCHASTIC)
        return amp_error(AMP_ERR_ARG, "%s: rounding %d is not a rounding mode", fn, (int)o->rounding);
    return AMP_OK;
}

amp_optim *amp_optim_new(amp_tensor *const *params, int n, const amp_optim_opts *o) {
    return amp__optim_new("amp_optim_new", params, n, o, false);
}

amp_status amp__optim_check_param(const char *fn, amp_tensor *const *params, int i) {
    const amp_tensor *p = params[i];
    if (!p) return amp_error(AMP_ERR_ARG, "%s: params[%d] is NULL", fn, i);
    if (!amp__live(fn, p)) return amp_last_status();
    if (!amp_tensor_is_leaf(p) || !p->requires_grad)
        return amp_error(AMP_ERR_ARG, "%s: params[%d] must be a leaf tensor that requires grad", fn, i);
    if (!amp_tensor_is_contiguous(p)) return amp_error(AMP_ERR_ARG, "%s: params[%d] is not contiguous", fn, i);
    return AMP_OK;
}

amp_optim *amp__optim_new(const char *fn, amp_tensor *const *params, int n, const amp_optim_opts *o, bool allow_empty) {
    if (!o) return amp_error_null(AMP_ERR_ARG, "%s: opts is NULL (use amp_adamw_opts(lr) etc.)", fn);
    if (n < 0 || (n == 0 && !allow_empty)) return amp_error_null(AMP_ERR_ARG, "%s: n = %d: need at least one parameter", fn, n);
    if (!params && n > 0) return amp_error_null(AMP_ERR_ARG, "%s: params is NULL", fn);
    if (check_opts(fn, o) != AMP_OK) return NULL;
    for (int i = 0; i < n; i++) {
        const amp_tensor *p = params[i];
        if (amp__optim_check_param(fn, params, i) != AMP_OK) return NULL;
        if (amp__dev(p) != amp__dev(params[0]))
            return amp_error_null(AMP_ERR_ARG, "%s: params[%d] is on %s and params[0] on %s: an optimizer's parameters "
                                                  "must be on one device", fn, i, amp_device_name(amp__dev(p)),
                                  amp_device_name(amp__dev(params[0])));
        if (amp__dev(p) != AMP_DEVICE_CPU && !amp__backend(fn, amp__dev(p))) return NULL;
        if (o->master_weights && !amp_dtype_is_half(p->dtype))
            return amp_error_null(AMP_ERR_DTYPE, "%s: params[%d] is %s; master weights need f16 or bf16 parameters", fn, i,
                                  amp_dtype_name(p->dtype));
        if (p->dtype != AMP_F32 && !amp_dtype_is_half(p->dtype))
            return amp_error_null(AMP_ERR_DTYPE, "%s: params[%d] has dtype %s (expected f32, f16 or bf16)", fn, i,
                                  amp_dtype_name(p->dtype));
        for (int j = 0; j < i; j++)
            if (params[j] == p) return amp_error_null(AMP_ERR_ARG, "%s: params[%d] and params[%d] are the same tensor", fn, j, i);
    }
    amp_optim *opt = calloc(1, sizeof *opt);
    if (!opt) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    opt->ps = calloc((size_t)(n ? n : 1), sizeof *opt->ps);
    if (!opt->ps) {
        free(opt);
        return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    }
    opt->o = *o;
    opt->n = n;
    for (int i = 0; i < n; i++) {
        amp_param_state *ps = &opt->ps[i];
        ps->param = amp_tensor_retain(params[i]);
        ps->weight_decay = o->weight_decay;
        ps->sr_off = -1;
        bool ok = true;
        if (o->kind != AMP_OPTIM_SGD) {
            ps->exp_avg = state_tensor(fn, params[i], AMP_MEM_OPTIM, 0);
            ps->exp_avg_sq = state_tensor(fn, params[i], AMP_MEM_OPTIM, 0);
            ok = ps->exp_avg && ps->exp_avg_sq;
        }
        if (ok && o->master_weights) {
            ps->master = state_tensor(fn, params[i], AMP_MEM_OPTIM, 0);
            ok = ps->master && amp__copy_convert(ps->master, params[i]) == AMP_OK;
        }
        if (!ok) {
            opt->n = i + 1;
            amp_optim_free(opt);
            return NULL;
        }
    }
    return opt;
}

void amp_optim_free(amp_optim *opt) {
    if (!opt) return;
    if (opt->dist.destroy) opt->dist.destroy(opt->dist.ctx);
    amp__optim_dev_free(opt);
    for (int i = 0; i < opt->n; i++) {
        amp_param_state *ps = &opt->ps[i];
        amp__release(ps->param);
        amp__release(ps->exp_avg);
        amp__release(ps->exp_avg_sq);
        amp__release(ps->momentum);
        amp__release(ps->master);
        amp__release(ps->master_grad);
    }
    free(opt->ps);
    free(opt);
}

amp_status amp_optim_zero_grad(amp_optim *opt) {
    if (!opt) return amp_error(AMP_ERR_ARG, "amp_optim_zero_grad: opt is NULL");
    for (int i = 0; i < opt->n; i++) amp_tensor_set_grad(opt->ps[i].param, NULL);
    opt->master_grads_valid = false;
    if (opt->dist.zero_grad) opt->dist.zero_grad(opt->dist.ctx);
    return AMP_OK;
}

amp_status amp_optim_set_lr(amp_optim *opt, double lr) {
    if (!opt) return amp_error(AMP_ERR_ARG, "amp_optim_set_lr: opt is NULL");
    if (check_lr("amp_optim_set_lr", &opt->o, lr) != AMP_OK) return amp_last_status();
    for (int i = 0; i < opt->n; i++) { /* per-parameter weight decays too */
        amp_optim_opts o = opt->o;
        o.weight_decay = opt->ps[i].weight_decay;
        if (o.weight_decay != opt->o.weight_decay && check_lr("amp_optim_set_lr", &o, lr) != AMP_OK) return amp_last_status();
    }
    opt->o.lr = lr;
    return AMP_OK;
}

amp_status amp_optim_set_param_weight_decay(amp_optim *opt, int i, double weight_decay) {
    static const char *fn = "amp_optim_set_param_weight_decay";
    if (!opt) return amp_error(AMP_ERR_ARG, "%s: opt is NULL", fn);
    if (i < 0 || i >= opt->n) return amp_error(AMP_ERR_ARG, "%s: index %d out of range (%d parameters)", fn, i, opt->n);
    amp_optim_opts o = opt->o;
    o.weight_decay = weight_decay;
    if (!(weight_decay >= 0) || !f32_finite(weight_decay))
        return amp_error(AMP_ERR_ARG, "%s: weight_decay %g must be >= 0 and finite as an f32", fn, weight_decay);
    if (check_lr(fn, &o, o.lr) != AMP_OK) return amp_last_status();
    opt->ps[i].weight_decay = weight_decay;
    return AMP_OK;
}

double amp_optim_param_weight_decay(const amp_optim *opt, int i) {
    if (!opt || i < 0 || i >= opt->n) {
        amp_error(AMP_ERR_ARG, "amp_optim_param_weight_decay: %s", !opt ? "opt is NULL" : "index out of range");
        return NAN;
    }
    return opt->ps[i].weight_decay;
}

double amp_optim_get_lr(const amp_optim *opt) { return opt ? opt->o.lr : NAN; }
int64_t amp_optim_steps(const amp_optim *opt) {
    if (!opt) amp_error(AMP_ERR_ARG, "amp_optim_steps: opt is NULL");
    dev_sync_quiet(opt);
    return opt ? opt->steps : -1;
}
int amp_optim_num_params(const amp_optim *opt) {
    if (!opt) amp_error(AMP_ERR_ARG, "amp_optim_num_params: opt is NULL");
    return opt ? opt->n : -1;
}
const amp_optim_opts *amp_optim_get_opts(const amp_optim *opt) {
    return opt ? &opt->o : amp_error_null(AMP_ERR_ARG, "amp_optim_get_opts: opt is NULL");
}

amp_tensor *amp_optim_param(const amp_optim *opt, int i) {
    if (!opt || i < 0 || i >= opt->n) return amp_error_null(AMP_ERR_ARG, "amp_optim_param: index %d out of range", i);
    return opt->ps[i].param;
}

amp_tensor *amp_optim_state(const amp_optim *opt, int i, const char *name) {
    if (!opt || i < 0 || i >= opt->n || !name) return amp_error_null(AMP_ERR_ARG, "amp_optim_state: bad optimizer, index %d or name", i);
    const amp_param_state *ps = &opt->ps[i];
    if (!strcmp(name, "exp_avg")) return ps->exp_avg;
    if (!strcmp(name, "exp_avg_sq")) return ps->exp_avg_sq;
    if (!strcmp(name, "momentum_buffer")) return ps->momentum;
    if (!strcmp(name, "master")) return ps->master;
    return amp_error_null(AMP_ERR_ARG, "amp_optim_state: unknown state '%s' (exp_avg, exp_avg_sq, momentum_buffer, master)", name);
}

amp_tensor *amp_optim_param_origin(const amp_optim *opt, int i, int64_t *offset) {
    if (offset) *offset = -1;
    if (!opt || i < 0 || i >= opt->n) return amp_error_null(AMP_ERR_ARG, "amp_optim_param_origin: index %d out of range", i);
    if (opt->dist.origin) return opt->dist.origin(opt->dist.ctx, i, offset);
    if (offset) *offset = 0;
    return opt->ps[i].param;
}

amp_tensor *amp_optim_grad(const amp_optim *opt, int i) {
    if (!opt || i < 0 || i >= opt->n) return amp_error_null(AMP_ERR_ARG, "amp_optim_grad: index %d out of range", i);
    const amp_param_state *ps = &opt->ps[i];
    if (opt->master_grads_valid && ps->master_grad) return ps->master_grad;
    return ps->param->grad;
}

amp_status amp_optim_set_steps(amp_optim *opt, int64_t steps) {
    if (!opt || steps < 0) return amp_error(AMP_ERR_ARG, "amp_optim_set_steps: bad optimizer or steps %lld", (long long)steps);
    dev_sync_quiet(opt);
    opt->steps = steps;
    for (int i = 0; i < opt->n; i++) opt->ps[i].step = steps;
    return AMP_OK;
}

int64_t amp_optim_param_steps(const amp_optim *opt, int i) {
    if (!opt || i < 0 || i >= opt->n) {
        amp_error(AMP_ERR_ARG, "amp_optim_param_steps: bad optimizer or index %d", i);
        return -1;
    }
    dev_sync_quiet(opt);
    return opt->ps[i].step;
}

amp_status amp_optim_set_param_steps(amp_optim *opt, int i, int64_t steps) {
    if (!opt || i < 0 || i >= opt->n || steps < 0)
        return amp_error(AMP_ERR_ARG, "amp_optim_set_param_steps: bad optimizer, index %d or steps %lld", i, (long long)steps);
    dev_sync_quiet(opt);
    opt->ps[i].step = steps;
    return AMP_OK;
}

uint64_t amp_optim_sr_counter(const amp_optim *opt) {
    if (!opt) amp_error(AMP_ERR_ARG, "amp_optim_sr_counter: opt is NULL");
    dev_sync_quiet(opt);
    return opt ? opt->sr_counter : 0;
}

amp_status amp_optim_set_sr_counter(amp_optim *opt, uint64_t counter) {
    if (!opt) return amp_error(AMP_ERR_ARG, "amp_optim_set_sr_counter: opt is NULL");
    dev_sync_quiet(opt);
    opt->sr_counter = counter;
    return AMP_OK;
}

amp_status amp_optim_load_state(amp_optim *opt, int i, const char *name, const amp_tensor *src) {
    static const char *fn = "amp_optim_load_state";
    if (src && !amp__live(fn, src)) return AMP_ERR_STATE;
    if (!opt || i < 0 || i >= opt->n) return amp_error(AMP_ERR_ARG, "%s: bad optimizer or index %d", fn, i);
    if (!name || !src) return amp_error(AMP_ERR_ARG, "%s: name or src is NULL", fn);
    if (!amp__live(fn, src)) return AMP_ERR_STATE;
    amp_param_state *ps = &opt->ps[i];
    amp_tensor **slot = !strcmp(name, "exp_avg")           ? &ps->exp_avg
                        : !strcmp(name, "exp_avg_sq")      ? &ps->exp_avg_sq
                        : !strcmp(name, "momentum_buffer") ? &ps->momentum
                        : !strcmp(name, "master")          ? &ps->master
                                                           : NULL;
    if (!slot) return amp_error(AMP_ERR_ARG, "%s: unknown state '%s' (exp_avg, exp_avg_sq, momentum_buffer, master)", fn, name);
    if (!amp__same_shape(src, ps->param)) {
        char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
        return amp_error(AMP_ERR_SHAPE, "%s: %s of parameter %d: shape %s, the parameter has %s", fn, name, i,
                         amp__shape_fmt(src->ndim, src->shape, a, sizeof a),
                         amp__shape_fmt(ps->param->ndim, ps->param->shape, b, sizeof b));
    }
    if (!amp_dtype_is_float(src->dtype))
        return amp_error(AMP_ERR_DTYPE, "%s: %s of parameter %d has dtype %s; expected a float tensor", fn, name, i,
                         amp_dtype_name(src->dtype));
    if (slot == &ps->master && !opt->o.master_weights)
        return amp_error(AMP_ERR_STATE, "%s: the optimizer has no master weights", fn);
    if ((slot == &ps->exp_avg || slot == &ps->exp_avg_sq) && opt->o.kind == AMP_OPTIM_SGD)
        return amp_error(AMP_ERR_STATE, "%s: SGD has no %s", fn, name);
    if (slot == &ps->momentum && (opt->o.kind != AMP_OPTIM_SGD || opt->o.momentum == 0))
        return amp_error(AMP_ERR_STATE, "%s: the optimizer keeps no momentum_buffer", fn);
    if (!*slot) {
        *slot = state_tensor(fn, ps->param, AMP_MEM_OPTIM, 0);
        if (!*slot) return amp_last_status();
    }
    amp__bump_version(*slot);
    if (slot == &ps->momentum) ps->mom_dev_pending = false; /* a loaded buffer is not a first step's */
    return amp__copy_convert(*slot, src);
}

/* ---- element passes ------------------------------------------------------------------ */
/* ---- devices ------------------------------------------------------------------------- */
/* Every tensor of opt (parameters, gradients, state) on one device: *dev. */
amp_status amp__optim_device(const char *fn, const amp_optim *opt, amp_device *dev) {
    static const char *what[] = {"is", "has its gradient", "has its state", "has its state", "has its state",
                                 "has its master weights", "has its master gradient"};
    amp_device d = AMP_DEVICE_CPU;
    int i0 = -1;
    size_t k0 = 0;
    for (int i = 0; i < opt->n; i++) {
        const amp_param_state *ps = &opt->ps[i];
        const amp_tensor *ts[] = {ps->param, ps->param->grad, ps->exp_avg, ps->exp_avg_sq, ps->momentum, ps->master,
                                  ps->master_grad};
        for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
            if (!ts[k]) continue;
            if (i0 < 0) {
                d = amp__dev(ts[k]);
                i0 = i;
                k0 = k;
            } else if (amp__dev(ts[k]) != d) {
                return amp_error(AMP_ERR_ARG, "%s: parameter %d %s on %s but parameter %d %s on %s: an optimizer's "
                                              "parameters, gradients and state must be on one device (moved after the "
                                              "optimizer was made? move them together)",
                                 fn, i, what[k], amp_device_name(amp__dev(ts[k])), i0, what[k0], amp_device_name(d));
            }
        }
    }
    if (dev) *dev = d;
    return AMP_OK;
}

amp_status amp__optim_on_cpu(const char *fn, const amp_optim *opt) {
    for (int i = 0; i < opt->n; i++) {
        const amp_param_state *ps = &opt->ps[i];
        const amp_tensor *ts[] = {ps->param, ps->param->grad, ps->exp_avg, ps->exp_avg_sq, ps->momentum, ps->master,
                                  ps->master_grad};
        for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++)
            if (ts[k] && amp__dev(ts[k]) != AMP_DEVICE_CPU)
                return amp_error(AMP_ERR_UNSUPPORTED, "%s: parameter %d %s on %s, and %s runs on the CPU only so far "
                                                      "(docs/cuda.md)",
                                 fn, i, k == 0 ? "is" : k == 1 ? "has its gradient" : "has state", amp_device_name(amp__dev(ts[k])),
                                 fn);
    }
    return AMP_OK;
}

/* The backend of opt's device (NULL + error when mixed or unavailable). */
static const amp_backend *optim_backend(const char *fn, const amp_optim *opt, amp_device *dev) {
    amp_device d;
    if (amp__optim_device(fn, opt, &d) != AMP_OK) return NULL;
    if (dev) *dev = d;
    return amp__backend(fn, d);
}

/* The device counters (kernels/family/optim.h, AMP_OPTIM_CNT_*), made zero on first use. */
static amp_status dev_counts(const char *fn, amp_optim *opt, const amp_backend *be) {
    if (opt->dcounts) return AMP_OK;
    size_t nb = (size_t)amp_optim_counts_len(opt->n) * sizeof(int64_t);
    opt->dcounts = be->dev->raw_alloc(nb);
    if (!opt->dcounts) return amp_error_chain(AMP_OK, "%s", fn);
    opt->dbe = be;
    return be->dev->memset_bytes(opt->dcounts, 0, nb);
}

/* The host's powers of beta1 and beta2 (the CPU's pow calls), on the
 * device, for steps [0, need]: the device's bias corrections then have the
 * CPU's bits. Grown in blocks; complete once 1 - beta^k rounds to 1 for
 * both (every later k gives the same corrections). */
#define POW_BLOCK 4096
#define POW_MAX ((int64_t)1 << 20)
static amp_status dev_pow(const char *fn, amp_optim *opt, const amp_backend *be, int64_t need) {
    const amp_optim_opts *o = &opt->o;
    if (o->kind == AMP_OPTIM_SGD) return AMP_OK;
    bool same = opt->dpow && opt->dpow_b1 == o->beta1 && opt->dpow_b2 == o->beta2;
    if (same && (need < opt->dpow_n || opt->dpow_done || opt->dpow_n >= POW_MAX)) return AMP_OK;
    int64_t n = need + POW_BLOCK;
    if (n > POW_MAX) n = POW_MAX;
    double *h = malloc((size_t)n * 2 * sizeof *h);
    if (!h) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    bool done = false;
    int64_t k = 0;
    for (; k < n && !done; k++) {
        h[2 * k] = pow(o->beta1, (double)k);
        h[2 * k + 1] = pow(o->beta2, (double)k);
        done = k > 0 && 1.0 - h[2 * k] == 1.0 && 1.0 - h[2 * k + 1] == 1.0;
    }
    n = k;
    double *d = be->dev->raw_alloc((size_t)n * 2 * sizeof *d);
    if (!d) {
        free(h);
        return amp_error_chain(AMP_OK, "%s", fn);
    }
    amp_status st = be->dev->from_host(d, h, (size_t)n * 2 * sizeof *h);
    free(h);
    if (st != AMP_OK) {
        be->dev->raw_free(d, (size_t)n * 2 * sizeof *d);
        return st;
    }
    if (opt->dpow) be->dev->raw_free(opt->dpow, (size_t)opt->dpow_n * 2 * sizeof(double));
    opt->dpow = d;
    opt->dpow_n = n;
    opt->dpow_done = done;
    opt->dpow_b1 = o->beta1;
    opt->dpow_b2 = o->beta2;
    return AMP_OK;
}

/* A device optimizer's own found flag (amp_optim_step without a scaler). */
static amp_dev_scaler *dev_plain(const char *fn, amp_optim *opt, const amp_backend *be) {
    if (opt->dplain) return opt->dplain;
    opt->dplain = amp__scaler_flag_new(fn, be);
    if (opt->dplain) opt->dbe = be;
    return opt->dplain;
}

void amp__optim_dev_free(amp_optim *opt) {
    const amp_backend *be = opt->dbe;
    if (!be) return;
    if (opt->dcounts) be->dev->raw_free(opt->dcounts, (size_t)amp_optim_counts_len(opt->n) * sizeof(int64_t));
    if (opt->dpow) be->dev->raw_free(opt->dpow, (size_t)opt->dpow_n * 2 * sizeof(double));
    amp__scaler_flag_free(be, opt->dplain);
    opt->dcounts = NULL;
    opt->dpow = NULL;
    opt->dplain = NULL;
}

/* The host's counts made exact: steps the device skipped (its found_inf
 * flag was set) are taken back from the step counts and the stochastic-
 * rounding stream; the device counters restart from zero. Waits for the
 * device; nothing to do for a CPU optimizer or when no device step ran. */
amp_status amp__optim_dev_sync(const char *fn, amp_optim *opt) {
    if (!opt->dcounts || !opt->dcounts_dirty) return AMP_OK;
    const amp_backend *be = opt->dbe;
    int64_t len = amp_optim_counts_len(opt->n);
    int64_t *h = malloc((size_t)len * sizeof *h);
    if (!h) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    amp_status st = be->dev->to_host(h, opt->dcounts, (size_t)len * sizeof *h);
    /* a deferred error reported by this wait (AMP_ERR_RANGE) still leaves the copy done */
    if (st != AMP_OK && st != AMP_ERR_RANGE) {
        free(h);
        return st;
    }
    amp_status keep = st;
    char msg[1024] = "";
    if (keep != AMP_OK) snprintf(msg, sizeof msg, "%s", amp_last_error());
    opt->sr_counter -= (uint64_t)h[AMP_OPTIM_CNT_SR];
    opt->steps -= h[AMP_OPTIM_CNT_STEPS];
    h[AMP_OPTIM_CNT_SR] = h[AMP_OPTIM_CNT_STEPS] = 0;
    for (int i = 0; i < opt->n; i++) {
        opt->ps[i].step -= h[AMP_OPTIM_CNT_SKIPS(i)];
        h[AMP_OPTIM_CNT_SKIPS(i)] = 0;
        if (h[AMP_OPTIM_CNT_MOMINIT(i)]) opt->ps[i].mom_dev_pending = false;
    }
    st = be->dev->from_host(opt->dcounts, h, (size_t)len * sizeof *h);
    free(h);
    if (st != AMP_OK) return st;
    opt->dcounts_dirty = false;
    if (keep != AMP_OK) return amp_error(keep, "%s", msg);
    return AMP_OK;
}

/* for the const getters: the counts are a cache of the device's */
static void dev_sync_quiet(const amp_optim *opt) {
    if (opt && opt->dcounts && opt->dcounts_dirty) (void)amp__optim_dev_sync("amp_optim", (amp_optim *)opt);
}

static const amp_tensor *current_grad(const amp_optim *opt, const amp_param_state *ps) {
    if (opt->master_grads_valid && ps->master_grad) return ps->master_grad;
    return ps->param->grad;
}

/* the gradients the next step would use, NULL where a parameter has none */
static amp_tensor **grads_of(const char *fn, const amp_optim *opt) {
    amp_tensor **gs = calloc((size_t)(opt->n ? opt->n : 1), sizeof *gs);
    if (!gs) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    for (int i = 0; i < opt->n; i++) gs[i] = (amp_tensor *)current_grad(opt, &opt->ps[i]);
    return gs;
}

bool amp__optim_check_unscaled(amp_optim *opt, float inv_scale, int *first_bad) {
    static const char *fn = "amp_optim";
    if (first_bad) *first_bad = -1;
    amp_device dev;
    const amp_backend *be = optim_backend(fn, opt, &dev);
    if (!be) return false;
    amp_tensor **gs = grads_of(fn, opt);
    if (!gs) return false;
    int first = -1;
    /* on a device the host asks: the device's flag, read back (the optimizer's own scaler) */
    amp_dev_scaler *ds = dev == AMP_DEVICE_CPU ? NULL : dev_plain(fn, opt, be);
    amp_status st = dev != AMP_DEVICE_CPU && !ds ? amp_last_status()
                                                 : amp__scaler_first_nonfinite(fn, be, gs, opt->n, inv_scale, ds, &first);
    free(gs);
    if (st != AMP_OK) return false;
    if (first_bad) *first_bad = first;
    return first < 0;
}

amp_status amp__optim_unscale(amp_optim *opt, float inv_scale, amp_dev_scaler *ds, bool *found_inf, int *first_bad,
                              const char *fn) {
    if (first_bad) *first_bad = -1;
    if (found_inf) *found_inf = false;
    for (int i = 0; i < opt->n; i++) {
        amp_param_state *ps = &opt->ps[i];
        const amp_tensor *g = ps->param->grad;
        if (g && g->dtype == AMP_F16 && !opt->o.master_weights)
            return amp_error(AMP_ERR_DTYPE, "%s: attempting to unscale FP16 gradients (parameter %d is f16 without master "
                                            "weights; use master_weights or f32 parameters)", fn, i);
    }
    amp_device dev;
    const amp_backend *be = optim_backend(fn, opt, &dev);
    if (!be) return amp_last_status();
    amp_tensor **src = calloc((size_t)(opt->n ? opt->n : 1), sizeof *src);
    amp_tensor **dst = calloc((size_t)(opt->n ? opt->n : 1), sizeof *dst);
    if (!src || !dst) {
        free(src);
        free(dst);
        return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    }
    amp_status st = AMP_OK;
    for (int i = 0; i < opt->n && !st; i++) {
        amp_param_state *ps = &opt->ps[i];
        amp_tensor *g = ps->param->grad;
        if (!g) continue;
        amp_tensor *d = g;
        if (opt->o.master_weights) {
            if (!ps->master_grad) {
                ps->master_grad = state_tensor(fn, ps->param, AMP_MEM_GRAD, 0);
                if (!ps->master_grad) st = amp_last_status();
            }
            d = ps->master_grad;
        }
        if (!st) amp__bump_version(d);
        src[i] = g;
        dst[i] = d;
    }
    bool any = false;
    int first = -1;
    if (!st) st = amp__scaler_unscale(fn, be, src, dst, opt->n, inv_scale, dev == AMP_DEVICE_CPU ? NULL : ds, &any, &first);
    free(src);
    free(dst);
    if (st != AMP_OK) return st;
    if (opt->o.master_weights) opt->master_grads_valid = true;
    if (dev != AMP_DEVICE_CPU) return AMP_OK; /* the flag is on the device */
    if (first_bad) *first_bad = first;
    *found_inf = any;
    return amp__optim_agree(opt, found_inf); /* data parallel: all ranks skip or none */
}

static bool master_of(const amp_param_state *ps) { return ps->master != NULL; }

/* One update of every parameter with a gradient, through the backend: the
 * host counts the step (parameters' step counts, the stochastic-rounding
 * stream) and makes the per-parameter constants; the backend's fused pass
 * unscales (inv_scale, or the device scale of ds), updates and writes the
 * half copies. The CPU stops at a parameter whose update would be
 * non-finite (its tiles put back, AMP_ERR_RANGE): that parameter and those
 * after it are counted back. With ds (a device scaler or a device
 * optimizer's own flag) the device skips a step whose found_inf flag is set
 * and counts it in opt->dcounts, which amp__optim_dev_sync applies to the
 * host's counts when the host asks. */
static amp_status step_all(amp_optim *opt, float inv_scale, amp_dev_scaler *ds, bool ds_scale, bool skip_unscales,
                           bool report_skip, const char *fn) {
    amp_device dev;
    const amp_backend *be = optim_backend(fn, opt, &dev);
    if (!be) return amp_last_status();
    bool on_dev = dev != AMP_DEVICE_CPU;
    if (on_dev && !ds) return amp_error(AMP_ERR_STATE, "%s: internal: a device step without its found_inf flag", fn);
    if (on_dev && dev_counts(fn, opt, be) != AMP_OK) return amp_last_status();
    const amp_optim_opts *o = &opt->o;
    amp_optim_item *items = calloc((size_t)(opt->n ? opt->n : 1), sizeof *items);
    bool *fresh = calloc((size_t)(opt->n ? opt->n : 1), sizeof *fresh);
    if (!items || !fresh) {
        free(items);
        free(fresh);
        return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    }
    amp_optim_consts_b c;
    memset(&c, 0, sizeof c);
    c.kind = (int)o->kind;
    c.lr = o->lr;
    c.beta1 = o->beta1;
    c.beta2 = o->beta2;
    c.rounding = (int)o->rounding;
    c.sr_seed = o->seed;
    if (o->kind == AMP_OPTIM_SGD) {
        c.mom = (float)o->momentum;
        c.one_minus_damp = (float)(1.0 - o->dampening);
        c.neg_lr = (float)(-o->lr);
        c.nesterov = o->nesterov;
    } else {
        c.w1 = (float)(1.0 - o->beta1);
        c.b2 = (float)o->beta2;
        c.omb2 = (float)(1.0 - o->beta2);
        c.eps = (float)o->eps;
    }
    uint64_t base = opt->sr_counter;
    int ni = 0;
    int64_t max_step = 0;
    amp_status st = AMP_OK;
    for (int i = 0; i < opt->n && !st; i++) {
        amp_param_state *ps = &opt->ps[i];
        int64_t n = amp_tensor_numel(ps->param);
        uint64_t at = ps->sr_off >= 0 ? opt->sr_counter + (uint64_t)ps->sr_off : base;
        base += (uint64_t)n;
        const amp_tensor *g = current_grad(opt, ps);
        if (!g) continue;
        amp_optim_item *it = &items[ni];
        amp_tensor *p = ps->param;
        if (o->kind == AMP_OPTIM_SGD && o->momentum != 0 && !ps->momentum) {
            ps->momentum = state_tensor(fn, p, AMP_MEM_OPTIM, 0);
            if (!ps->momentum) {
                st = amp_last_status();
                break;
            }
            fresh[ni] = true;
            if (on_dev) { /* the device learns it was initialised when a step is applied */
                ps->mom_dev_pending = true;
                st = be->dev->memset_bytes(opt->dcounts + AMP_OPTIM_CNT_MOMINIT(i), 0, sizeof(int64_t));
            }
        }
        ps->step++;
        if (ps->step > max_step) max_step = ps->step;
        it->param = p;
        it->grad = (amp_tensor *)g;
        it->master = ps->master;
        it->exp_avg = ps->exp_avg;
        it->exp_avg_sq = ps->exp_avg_sq;
        it->momentum = ps->momentum;
        it->first_momentum = fresh[ni] || (on_dev && ps->mom_dev_pending && ps->momentum);
        /* torch leaves unscaled values in .grad after step; do the same (f32/bf16
         * gradients of non-master optimizers; a master optimizer's half .grad
         * would underflow, so it stays scaled). With a device scale the
         * factor is known on the device only. */
        it->write_grad = (inv_scale != 1.0f || (on_dev && ds_scale)) && !master_of(ps);
        it->wd = (float)ps->weight_decay;
        it->sr_counter = at;
        it->index = i;
        it->step = ps->step;
        if (o->kind != AMP_OPTIM_SGD) {
            double bc1 = 1.0 - pow(o->beta1, (double)ps->step);
            double bc2 = 1.0 - pow(o->beta2, (double)ps->step);
            it->neg_step = (float)(-(o->lr / bc1));
            it->bc2s = (float)sqrt(bc2);
            it->decay = (float)(1.0 - o->lr * ps->weight_decay);
        }
        /* the parameter (and .grad, which receives the unscaled values) change in place */
        amp__bump_version(p);
        if (it->write_grad) amp__bump_version(it->grad);
        ni++;
    }
    uint64_t next = opt->sr_span ? opt->sr_counter + opt->sr_span : base;
    if (!st && on_dev) {
        st = dev_pow(fn, opt, be, max_step);
        c.counts = opt->dcounts;
        c.pow_tab = opt->dpow;
        c.pow_n = opt->dpow ? opt->dpow_n : 0;
        c.sr_span = next - opt->sr_counter;
        c.report_skip = report_skip;
        c.use_ds_scale = ds_scale;
        c.skip_unscales = skip_unscales;
    }
    int bad = -1;
    if (!st) st = AMP_KCALL(be, optim, optim_step, fn, &c, items, ni, inv_scale, on_dev ? ds : NULL, &bad);
    if (st != AMP_OK) {
        /* not applied from item `bad` on (all of them when the call failed before any) */
        int from = bad >= 0 ? bad : 0;
        amp_status keep = st;
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", amp_last_error());
        for (int k = 0; k < ni; k++) {
            if (k < from) continue;
            amp_param_state *ps = &opt->ps[items[k].index];
            ps->step--;
            if (fresh[k]) { /* the next step is the first again */
                amp__release(ps->momentum);
                ps->momentum = NULL;
                ps->mom_dev_pending = false;
            }
        }
        free(items);
        free(fresh);
        opt->master_grads_valid = false;
        return amp_error(keep, "%s", msg);
    }
    free(items);
    free(fresh);
    opt->sr_counter = next;
    opt->steps++;
    opt->master_grads_valid = false;
    if (on_dev) opt->dcounts_dirty = true;
    return AMP_OK;
}

amp_status amp__optim_agree(amp_optim *opt, bool *found_inf) {
    if (!opt->dist.agree) return AMP_OK;
    return opt->dist.agree(opt->dist.ctx, found_inf);
}

amp_status amp__optim_step_scaled(amp_optim *opt, float inv_scale, amp_dev_scaler *ds, bool ds_scale, bool skip_unscales,
                                  const char *fn) {
    amp_status st = step_all(opt, inv_scale, ds, ds_scale, skip_unscales, false, fn);
    /* data parallel: every rank's result agreed, ZeRO-1 shards spread */
    if (opt->dist.after_step) st = opt->dist.after_step(opt->dist.ctx, st);
    return st;
}

amp_status amp_optim_step(amp_optim *opt) {
    static const char *fn = "amp_optim_step";
    if (!opt) return amp_error(AMP_ERR_ARG, "%s: opt is NULL", fn);
    amp_device dev;
    const amp_backend *be = optim_backend(fn, opt, &dev);
    if (!be) return amp_last_status();
    if (dev != AMP_DEVICE_CPU) {
        /* on the device, without waiting: the check sets the optimizer's own
         * found_inf flag, the update is skipped when it is set, and that is
         * reported as a deferred error at the next synchronisation */
        if (opt->dist.agree) return amp_error(AMP_ERR_UNSUPPORTED, "%s: data-parallel optimizers on %s are not supported yet", fn,
                                              amp_device_name(dev));
        amp_dev_scaler *ds = dev_plain(fn, opt, be);
        if (!ds) return amp_last_status();
        amp_tensor **gs = grads_of(fn, opt);
        if (!gs) return amp_last_status();
        amp_status st = amp__scaler_check(fn, be, gs, opt->n, 1.0f, ds, NULL, NULL);
        free(gs);
        if (!st) st = step_all(opt, 1.0f, ds, false, false, true, fn);
        return st;
    }
    /* amp's promise: inf/nan never reaches the weights (torch would write it) */
    int bad;
    bool found = !amp__optim_check_unscaled(opt, 1.0f, &bad), local = found;
    amp_status ast = amp__optim_agree(opt, &found);
    if (ast != AMP_OK) return ast;
    if (found && !local)
        return amp_error(AMP_ERR_RANGE, "%s: a gradient on another rank holds inf or nan; the step was not applied on any rank "
                                        "(amp_scaler_step skips such steps)", fn);
    if (found) {
        char sb[AMP_SHAPE_BUF];
        const amp_tensor *p = opt->ps[bad].param;
        return amp_error(AMP_ERR_RANGE, "%s: the gradient of parameter %d (%s %s) holds inf or nan; the step was not applied "
                                        "(amp_scaler_step skips such steps)", fn, bad, amp_dtype_name(p->dtype),
                         amp__shape_fmt(p->ndim, p->shape, sb, sizeof sb));
    }
    return amp__optim_step_scaled(opt, 1.0f, NULL, false, false, fn);
}

/* ---- clipping ---------------------------------------------------------------------------- */
/* sum of squares of one gradient tensor times f (double; inf/nan when it holds one) */
static double grad_sumsq(const char *fn, const amp_tensor *g, float f) {
    const amp_backend *be = amp__backend_of(fn, g);
    double s = NAN;
    amp_tensor *one[1] = {(amp_tensor *)g};
    if (!be || AMP_KCALL(be, optim, optim_sumsq, fn, one, 1, f, &s, NULL) != AMP_OK) return NAN;
    return s;
}

double amp__optim_sumsq_unscaled(amp_optim *opt, float inv_scale, int *first_bad) {
    static const char *fn = "amp_scaler_clip_grad_norm";
    if (first_bad) *first_bad = -1;
    amp_device dev;
    const amp_backend *be = optim_backend(fn, opt, &dev);
    if (!be) return NAN;
    if (dev != AMP_DEVICE_CPU) { /* one pass over every gradient; the first bad one is the device check's to tell */
        amp_tensor **gs = grads_of(fn, opt);
        double total = NAN;
        if (!gs || AMP_KCALL(be, optim, optim_sumsq, fn, gs, opt->n, inv_scale, &total, NULL) != AMP_OK) total = NAN;
        free(gs);
        return total;
    }
    double total = 0;
    for (int i = 0; i < opt->n; i++) {
        const amp_tensor *g = current_grad(opt, &opt->ps[i]);
        if (!g) continue;
        double s = grad_sumsq("amp_scaler_clip_grad_norm", g, inv_scale);
        if (!isfinite(s) && first_bad && *first_bad < 0) *first_bad = i;
        total += s;
    }
    return total;
}
/* The total L2 norm of gs[0..n) (NULL entries skipped, a tensor listed twice
 * counted once), accumulated in double; when it exceeds max_norm every
 * gradient is scaled by max_norm / (norm + 1e-6) (torch's
 * clip_grad_norm_). A non-finite norm leaves the gradients alone. */
/* Data parallel: sharded[i] marks gradients that are this rank's shard of
 * a ZeRO-1 optimizer (dist: the first such optimizer's hooks); their sum of
 * squares is reduced over the ranks (in double, rank order: the same norm on
 * every rank), the replicated ones' counted once. */
static double clip_list_dist(const char *fn, amp_tensor **gs, const bool *sharded, int n, double max_norm, const amp_optim_dist *dist);
static double clip_list(const char *fn, amp_tensor **gs, int n, double max_norm) {
    return clip_list_dist(fn, gs, NULL, n, max_norm, NULL);
}
static double clip_list_dist(const char *fn, amp_tensor **gs, const bool *sharded, int n, double max_norm, const amp_optim_dist *dist) {
    if (!(max_norm > 0) || !isfinite(max_norm)) {
        amp_error(AMP_ERR_ARG, "%s: max_norm %g must be finite and > 0", fn, max_norm);
        return -1;
    }
    amp_device dev = AMP_DEVICE_CPU;
    if (amp__same_device(fn, (const amp_tensor *const *)gs, NULL, n, &dev) != AMP_OK) return -1;
    for (int i = 0; i < n; i++) {
        if (!gs[i]) continue;
        for (int j = 0; j < i; j++)
            if (gs[j] == gs[i]) {
                gs[i] = NULL;
                break;
            }
        if (gs[i] && (!amp_tensor_is_contiguous(gs[i]) || !amp_dtype_is_float(gs[i]->dtype))) {
            amp_error(AMP_ERR_ARG, "%s: gradient %d is not a contiguous float tensor", fn, i);
            return -1;
        }
    }
    if (dev != AMP_DEVICE_CPU) { /* one multi-tensor norm on the device (the host waits for the norm it returns) */
        bool any_sharded = dist != NULL;
        for (int i = 0; i < n && sharded && !any_sharded; i++) any_sharded = sharded[i];
        if (any_sharded) {
            amp_error(AMP_ERR_UNSUPPORTED, "%s: data-parallel (sharded) gradients on %s are not supported yet", fn,
                      amp_device_name(dev));
            return -1;
        }
        const amp_backend *be = amp__backend(fn, dev);
        double total = NAN;
        if (!be || AMP_KCALL(be, optim, optim_sumsq, fn, gs, n, 1.0f, &total, NULL) != AMP_OK) return -1;
        double norm = sqrt(total);
        if (!isfinite(norm)) return norm;
        double coef = max_norm / (norm + 1e-6);
        if (coef >= 1.0) return norm;
        for (int i = 0; i < n; i++)
            if (gs[i]) amp__bump_version(gs[i]);
        if (AMP_KCALL(be, optim, optim_scale_grads, fn, gs, n, (float)coef, NULL) != AMP_OK) return -1;
        return norm;
    }
    double total = 0, total_sharded = 0;
    for (int i = 0; i < n; i++) {
        if (!gs[i]) continue;
        double s = grad_sumsq(fn, gs[i], 1.0f);
        if (sharded && sharded[i]) total_sharded += s;
        else total += s;
    }
    if (dist && dist->sum_sq) {
        amp_status st = dist->sum_sq(dist->ctx, &total_sharded);
        if (st != AMP_OK) return -1;
    }
    total += total_sharded;
    double norm = sqrt(total);
    if (!isfinite(norm)) return norm;
    double coef = max_norm / (norm + 1e-6);
    if (coef >= 1.0) return norm;
    float cf = (float)coef;
    for (int i = 0; i < n; i++) {
        amp_tensor *g = gs[i];
        if (!g) continue;
        amp__bump_version(g);
        amp_tensor *one[1] = {g};
        const amp_backend *be = amp__backend_of(fn, g);
        if (!be || AMP_KCALL(be, optim, optim_scale_grads, fn, one, 1, cf, NULL) != AMP_OK) return -1;
    }
    return norm;
}
static amp_tensor **optim_grads(const char *fn, amp_optim *const *opts, int n, int *count) {
    int total = 0;
    for (int k = 0; k < n; k++) total += opts[k]->n;
    amp_tensor **gs = calloc((size_t)(total ? total : 1), sizeof *gs);
    if (!gs) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    int c = 0;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < opts[k]->n; i++) gs[c++] = (amp_tensor *)current_grad(opts[k], &opts[k]->ps[i]);
    *count = c;
    return gs;
}

double amp__optim_clip_norm(const char *fn, amp_optim *const *opts, int n, double max_norm,
                            amp_status (*check)(const void *ctx, const char *fn, int k, const amp_optim *opt),
                            const void *ctx) {
    if (!opts || n <= 0) {
        amp_error(AMP_ERR_ARG, "%s: opts is NULL or n %d is not positive", fn, n);
        return -1;
    }
    for (int k = 0; k < n; k++) {
        if (!opts[k]) {
            amp_error(AMP_ERR_ARG, "%s: opts[%d] is NULL", fn, k);
            return -1;
        }
        if (amp__optim_device(fn, opts[k], NULL) != AMP_OK) return -1;
        if (check && check(ctx, fn, k, opts[k]) != AMP_OK) return -1;
    }
    int count = 0;
    amp_tensor **gs = optim_grads(fn, opts, n, &count);
    if (!gs) return -1;
    /* ZeRO-1 optimizers hold shards: their part of the norm is summed over ranks */
    const amp_optim_dist *dist = NULL;
    bool *sharded = calloc((size_t)(count ? count : 1), sizeof *sharded);
    if (!sharded) {
        free(gs);
        amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        return -1;
    }
    for (int k = 0, c = 0; k < n; k++) {
        bool sh = opts[k]->dist.sum_sq != NULL;
        if (sh && !dist) dist = &opts[k]->dist;
        for (int i = 0; i < opts[k]->n; i++) sharded[c++] = sh;
    }
    double norm = clip_list_dist(fn, gs, sharded, count, max_norm, dist);
    free(sharded);
    free(gs);
    return norm;
}

double amp_clip_grad_norm(amp_optim *opt, double max_norm) {
    if (!opt) {
        amp_error(AMP_ERR_ARG, "amp_clip_grad_norm: opt is NULL");
        return -1;
    }
    return amp__optim_clip_norm("amp_clip_grad_norm", &opt, 1, max_norm, NULL, NULL);
}

double amp_clip_grad_norm_params(amp_tensor *const *params, int n, double max_norm) {
    static const char *fn = "amp_clip_grad_norm_params";
    if (!params || n <= 0) {
        amp_error(AMP_ERR_ARG, "%s: params is NULL or n %d is not positive", fn, n);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (!amp__live(fn, params[i])) return -1;
    amp_tensor **gs = calloc((size_t)n, sizeof *gs);
    if (!gs) {
        amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (!params[i]) {
            free(gs);
            amp_error(AMP_ERR_ARG, "%s: params[%d] is NULL", fn, i);
            return -1;
        }
        gs[i] = params[i]->grad;
    }
    double norm = clip_list(fn, gs, n, max_norm);
    free(gs);
    return norm;
}

amp_status amp_clip_grad_value(amp_optim *opt, double clip) {
    if (!opt) return amp_error(AMP_ERR_ARG, "amp_clip_grad_value: opt is NULL");
    if (!(clip >= 0) || !isfinite(clip)) return amp_error(AMP_ERR_ARG, "amp_clip_grad_value: clip %g must be finite and >= 0", clip);
    static const char *fn = "amp_clip_grad_value";
    if (amp__optim_on_cpu(fn, opt) != AMP_OK) return amp_last_status();
    const amp_backend *be = optim_backend(fn, opt, NULL);
    amp_tensor **gs = be ? grads_of(fn, opt) : NULL;
    if (!gs) return amp_last_status();
    for (int i = 0; i < opt->n; i++)
        if (gs[i]) amp__bump_version(gs[i]);
    amp_status st = AMP_KCALL(be, optim, optim_clamp_grad, fn, gs, opt->n, (float)clip);
    free(gs);
    return st;
}

/* ---- schedules ------------------------------------------------------------------------------ */
double amp_lr_at(const amp_lr_schedule *s, int64_t step, double base_lr) {
    if (!s || step < 0) return base_lr;
    switch (s->kind) {
    case AMP_LR_STEP:
        if (s->step_size <= 0) return base_lr;
        return base_lr * pow(s->gamma, (double)(step / s->step_size));
    case AMP_LR_COSINE: {
        if (s->warmup_steps > 0 && step < s->warmup_steps) return base_lr * (double)(step + 1) / (double)s->warmup_steps;
        int64_t span = s->total_steps - s->warmup_steps;
        if (span <= 0) return base_lr;
        double t = (double)(step - s->warmup_steps) / (double)span;
        if (t > 1) t = 1;
        return s->min_lr + 0.5 * (base_lr - s->min_lr) * (1.0 + cos(M_PI * t));
    }
    default: return base_lr;
    }
}

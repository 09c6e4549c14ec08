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
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "amp/autograd.h"
#include "amp/numeric.h"
#include "amp/scaler.h"
#include "core/cpu.h"
#include "kernels/cpu/optim_update.h"
#include "optim/optim_impl.h"

#define TILE 1024
#define PAR_MIN 65536

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

static amp_tensor *state_tensor(const char *fn, const amp_tensor *like, amp_mem_category c, double fill) {
    amp_tensor *t = amp__tensor_new(fn, AMP_F32, like->ndim, like->shape, c, AMP_NEW_UNSCOPED);
    if (t) {
        if (fill == 0) memset(t->storage->data, 0, t->storage->nbytes);
        else amp_tensor_fill_(t, fill);
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

amp_optim *amp__optim_new(const char *fn, amp_tensor *const *params, int n, const amp_optim_opts *o, bool allow_empty) {
    if (!o) return amp_error_null(AMP_ERR_ARG, "%s: opts is NULL (use amp_adamw_opts(lr) etc.)", fn);
    if (n < 0 || (n == 0 && !allow_empty)) return amp_error_null(AMP_ERR_ARG, "%s: n = %d: need at least one parameter", fn, n);
    if (!params && n > 0) return amp_error_null(AMP_ERR_ARG, "%s: params is NULL", fn);
    if (check_opts(fn, o) != AMP_OK) return NULL;
    for (int i = 0; i < n; i++) {
        const amp_tensor *p = params[i];
        if (!p) return amp_error_null(AMP_ERR_ARG, "%s: params[%d] is NULL", fn, i);
        if (!amp__live(fn, p)) return NULL;
        if (!amp_tensor_is_leaf(p) || !p->requires_grad)
            return amp_error_null(AMP_ERR_ARG, "%s: params[%d] must be a leaf tensor that requires grad", fn, i);
        if (!amp_tensor_is_contiguous(p)) return amp_error_null(AMP_ERR_ARG, "%s: params[%d] is not contiguous", fn, i);
        if (amp__dev(p) != AMP_DEVICE_CPU)
            return amp_error_null(AMP_ERR_UNSUPPORTED, "%s: params[%d] is on %s, and the optimizers update on the CPU only so "
                                                       "far (docs/cuda.md)", fn, i, amp_device_name(amp__dev(p)));
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
    opt->steps = steps;
    for (int i = 0; i < opt->n; i++) opt->ps[i].step = steps;
    return AMP_OK;
}

int64_t amp_optim_param_steps(const amp_optim *opt, int i) {
    if (!opt || i < 0 || i >= opt->n) {
        amp_error(AMP_ERR_ARG, "amp_optim_param_steps: bad optimizer or index %d", i);
        return -1;
    }
    return opt->ps[i].step;
}

amp_status amp_optim_set_param_steps(amp_optim *opt, int i, int64_t steps) {
    if (!opt || i < 0 || i >= opt->n || steps < 0)
        return amp_error(AMP_ERR_ARG, "amp_optim_set_param_steps: bad optimizer, index %d or steps %lld", i, (long long)steps);
    opt->ps[i].step = steps;
    return AMP_OK;
}

uint64_t amp_optim_sr_counter(const amp_optim *opt) {
    if (!opt) amp_error(AMP_ERR_ARG, "amp_optim_sr_counter: opt is NULL");
    return opt ? opt->sr_counter : 0;
}

amp_status amp_optim_set_sr_counter(amp_optim *opt, uint64_t counter) {
    if (!opt) return amp_error(AMP_ERR_ARG, "amp_optim_set_sr_counter: opt is NULL");
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
    return amp__copy_convert(*slot, src);
}

/* ---- element passes ------------------------------------------------------------------ */
static void load_f32(float *dst, const void *src, amp_dtype dt, int64_t n) {
    switch (dt) {
    case AMP_F32: memcpy(dst, src, (size_t)n * 4); break;
    case AMP_F16: amp_f16_to_f32_array(dst, src, (size_t)n); break;
    case AMP_BF16: amp_bf16_to_f32_array(dst, src, (size_t)n); break;
    default: amp_convert(dst, AMP_F32, src, dt, (size_t)n, 0); break;
    }
}

static void store_f32(void *dst, amp_dtype dt, const float *src, int64_t n, amp_round_mode rm, uint64_t seed, uint64_t ctr) {
    switch (dt) {
    case AMP_F32: memcpy(dst, src, (size_t)n * 4); break;
    case AMP_F16:
        if (rm == AMP_ROUND_STOCHASTIC) amp_f32_to_f16_sr_array(dst, src, (size_t)n, seed, ctr);
        else amp_f32_to_f16_array(dst, src, (size_t)n);
        break;
    case AMP_BF16:
        if (rm == AMP_ROUND_STOCHASTIC) amp_f32_to_bf16_sr_array(dst, src, (size_t)n, seed, ctr);
        else amp_f32_to_bf16_array(dst, src, (size_t)n);
        break;
    default: amp_convert(dst, dt, src, AMP_F32, (size_t)n, 0); break;
    }
}

amp_status amp__optim_on_cpu(const char *fn, const amp_optim *opt) {
    for (int i = 0; i < opt->n; i++) {
        const amp_param_state *ps = &opt->ps[i];
        const amp_tensor *ts[] = {ps->param, ps->param->grad, ps->exp_avg, ps->exp_avg_sq, ps->momentum, ps->master,
                                  ps->master_grad};
        for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++)
            if (ts[k] && amp__dev(ts[k]) != AMP_DEVICE_CPU)
                return amp_error(AMP_ERR_UNSUPPORTED, "%s: parameter %d %s on %s (moved there after the optimizer was made?), "
                                                      "and the optimizers update on the CPU only so far (docs/cuda.md)",
                                 fn, i, k == 0 ? "is" : k == 1 ? "has its gradient" : "has state", amp_device_name(amp__dev(ts[k])));
    }
    return AMP_OK;
}

static const amp_tensor *current_grad(const amp_optim *opt, const amp_param_state *ps) {
    if (opt->master_grads_valid && ps->master_grad) return ps->master_grad;
    return ps->param->grad;
}

static const amp_optim_tile_fn g_tile_fns[AMP_CPU_PATH_COUNT] = {amp_optim_tile_scalar, amp_optim_tile_avx2,
                                                                   amp_optim_tile_avx512};
static const amp_optim_check_fn g_check_fns[AMP_CPU_PATH_COUNT] = {amp_optim_check_scalar, amp_optim_check_avx2,
                                                                     amp_optim_check_avx512};

/* exponent all ones (inf or nan) in any of m half values */
static bool half_nonfinite(const uint16_t *u, amp_dtype dt, int64_t m) {
    uint16_t e = dt == AMP_F16 ? 0x7c00u : 0x7f80u;
    uint32_t b = 0;
    for (int64_t k = 0; k < m; k++) b |= (uint32_t)((u[k] & e) == e);
    return b != 0;
}

bool amp__optim_check_unscaled(amp_optim *opt, float inv_scale, int *first_bad) {
    amp_optim_check_fn check = AMP_DISPATCH(g_check_fns);
    if (first_bad) *first_bad = -1;
    for (int i = 0; i < opt->n; i++) {
        const amp_tensor *g = current_grad(opt, &opt->ps[i]);
        if (!g) continue;
        int64_t n = amp_tensor_numel(g);
        const char *base = amp__data(g);
        size_t es = amp_dtype_size(g->dtype);
        int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n > PAR_MIN)
        for (int64_t t0 = 0; t0 < n; t0 += TILE) {
            int64_t m = n - t0 < TILE ? n - t0 : TILE;
            if (g->dtype == AMP_F32) {
                bad |= check(inv_scale, m, (const float *)(base + (size_t)t0 * es));
            } else {
                float tmp[TILE];
                load_f32(tmp, base + (size_t)t0 * es, g->dtype, m);
                bad |= check(inv_scale, m, tmp);
            }
        }
        if (bad) {
            if (first_bad) *first_bad = i;
            return false;
        }
    }
    return true;
}

amp_status amp__optim_unscale(amp_optim *opt, float inv_scale, bool *found_inf, int *first_bad, const char *fn) {
    if (first_bad) *first_bad = -1;
    for (int i = 0; i < opt->n; i++) {
        amp_param_state *ps = &opt->ps[i];
        const amp_tensor *g = ps->param->grad;
        if (g && g->dtype == AMP_F16 && !opt->o.master_weights)
            return amp_error(AMP_ERR_DTYPE, "%s: attempting to unscale FP16 gradients (parameter %d is f16 without master "
                                            "weights; use master_weights or f32 parameters)", fn, i);
    }
    bool any = false;
    for (int i = 0; i < opt->n; i++) {
        amp_param_state *ps = &opt->ps[i];
        amp_tensor *g = ps->param->grad;
        if (!g) continue;
        amp_tensor *dst = g;
        if (opt->o.master_weights) {
            if (!ps->master_grad) {
                ps->master_grad = state_tensor(fn, ps->param, AMP_MEM_GRAD, 0);
                if (!ps->master_grad) return amp_last_status();
            }
            dst = ps->master_grad;
        }
        int64_t n = amp_tensor_numel(g);
        const char *src = amp__data(g);
        char *out = amp__data(dst);
        amp__bump_version(dst);
        size_t es = amp_dtype_size(g->dtype), eo = amp_dtype_size(dst->dtype);
        int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n > PAR_MIN)
        for (int64_t t0 = 0; t0 < n; t0 += TILE) {
            float tmp[TILE];
            int64_t m = n - t0 < TILE ? n - t0 : TILE;
            load_f32(tmp, src + (size_t)t0 * es, g->dtype, m);
            int b = 0;
            for (int64_t k = 0; k < m; k++) {
                tmp[k] *= inv_scale;
                b |= !isfinite(tmp[k]); /* the unscaled value: a finite gradient can unscale to inf */
            }
            bad |= b;
            store_f32(out + (size_t)t0 * eo, dst->dtype, tmp, m, AMP_ROUND_NEAREST, 0, 0);
        }
        if (bad && !any && first_bad) *first_bad = i;
        any |= bad != 0;
    }
    if (opt->o.master_weights) opt->master_grads_valid = true;
    *found_inf = any;
    return amp__optim_agree(opt, found_inf); /* data parallel: all ranks skip or none */
}

static bool master_of(const amp_param_state *ps) { return ps->master != NULL; }

static const char *what_nonfinite(const amp_optim *opt) {
    return opt->o.kind == AMP_OPTIM_SGD ? "weights or momentum buffer" : "weights or Adam moments";
}

/* One parameter's update, tile by tile. Each tile's old weights and state
 * are kept while the kernel runs; a tile whose results hold inf/nan (finite
 * gradients with extreme weights or settings: an f32 overflow, or a master
 * value beyond the half type's range) is put back as it was and the step
 * fails with AMP_ERR_RANGE, so a non-finite value never stays in the
 * weights or the optimizer state. */
static amp_status step_param(amp_optim *opt, int idx, float inv_scale, uint64_t sr_base, const char *fn) {
    amp_param_state *ps = &opt->ps[idx];
    const amp_optim_opts *o = &opt->o;
    const amp_tensor *g = current_grad(opt, ps);
    amp_tensor *p = ps->param;
    int64_t n = amp_tensor_numel(p);
    amp_optim_consts c;
    memset(&c, 0, sizeof c);
    c.kind = (int)o->kind;
    c.inv_scale = inv_scale;
    c.wd = (float)ps->weight_decay;
    ps->step++;
    bool new_momentum = false;
    if (o->kind == AMP_OPTIM_SGD) {
        c.mom = (float)o->momentum;
        c.one_minus_damp = (float)(1.0 - o->dampening);
        c.neg_lr = (float)(-o->lr);
        c.nesterov = o->nesterov;
        if (o->momentum != 0 && !ps->momentum) {
            ps->momentum = state_tensor(fn, p, AMP_MEM_OPTIM, 0);
            if (!ps->momentum) {
                ps->step--;
                return amp_last_status();
            }
            c.first_mom = true;
            new_momentum = true;
        }
    } else {
        double bc1 = 1.0 - pow(o->beta1, (double)ps->step);
        double bc2 = 1.0 - pow(o->beta2, (double)ps->step);
        c.w1 = (float)(1.0 - o->beta1);
        c.b2 = (float)o->beta2;
        c.omb2 = (float)(1.0 - o->beta2);
        c.neg_step = (float)(-(o->lr / bc1));
        c.bc2s = (float)sqrt(bc2);
        c.eps = (float)o->eps;
        c.decay = (float)(1.0 - o->lr * ps->weight_decay);
    }
    char *gsrc = amp__data(g);
    /* torch leaves unscaled values in .grad after step; do the same (f32/bf16
     * gradients of non-master optimizers; a master optimizer's half .grad
     * would underflow, so it stays scaled). */
    bool write_grad = inv_scale != 1.0f && !master_of(ps);
    size_t ges = amp_dtype_size(g->dtype), pes = amp_dtype_size(p->dtype);
    char *pdata = amp__data(p);
    float *master = ps->master ? (float *)amp__data(ps->master) : NULL;
    float *ea = ps->exp_avg ? (float *)amp__data(ps->exp_avg) : NULL;
    float *eas = ps->exp_avg_sq ? (float *)amp__data(ps->exp_avg_sq) : NULL;
    float *mb = ps->momentum ? (float *)amp__data(ps->momentum) : NULL;
    amp_optim_tile_fn tile = AMP_DISPATCH(g_tile_fns);
    /* the parameter (and .grad, which receives the unscaled values) change in place */
    amp__bump_version(p);
    if (write_grad) amp__bump_version(g);
    bool in_place = master || p->dtype == AMP_F32; /* f32 weights are updated where they are */
    bool half_out = master || p->dtype != AMP_F32;
    int bad = 0;
    int64_t bad_at = -1;
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (int64_t t0 = 0; t0 < n; t0 += TILE) {
        int seen;
#pragma omp atomic read
        seen = bad;
        if (seen) continue; /* an earlier tile failed: leave the rest alone */
        float gt[TILE], wt[TILE], keep_w[TILE], keep_ea[TILE], keep_eas[TILE], keep_mb[TILE];
        uint16_t keep_p[TILE];
        int64_t m = n - t0 < TILE ? n - t0 : TILE;
        size_t mb4 = (size_t)m * 4;
        load_f32(gt, gsrc + (size_t)t0 * ges, g->dtype, m);
        float *w = master ? master + t0 : p->dtype == AMP_F32 ? (float *)(pdata + (size_t)t0 * pes) : wt;
        if (!in_place) load_f32(wt, pdata + (size_t)t0 * pes, p->dtype, m);
        else memcpy(keep_w, w, mb4);
        if (ea) memcpy(keep_ea, ea + t0, mb4);
        if (eas) memcpy(keep_eas, eas + t0, mb4);
        if (mb) memcpy(keep_mb, mb + t0, mb4);
        if (half_out && pes == 2) memcpy(keep_p, pdata + (size_t)t0 * pes, (size_t)m * 2);
        /* an f32 .grad receives the unscaled values inside the kernel */
        float *gsave = write_grad && g->dtype == AMP_F32 ? (float *)(gsrc + (size_t)t0 * ges) : NULL;
        if (write_grad && !gsave) { /* bf16 grads: unscale and store here */
            for (int64_t k = 0; k < m; k++) gt[k] *= inv_scale;
            store_f32(gsrc + (size_t)t0 * ges, g->dtype, gt, m, AMP_ROUND_NEAREST, 0, 0);
        }
        amp_optim_consts ct = c;
        if (write_grad && !gsave) ct.inv_scale = 1.0f;
        int b = tile(&ct, m, w, gt, ea ? ea + t0 : NULL, eas ? eas + t0 : NULL, mb ? mb + t0 : NULL, gsave);
        if (!b && half_out) {
            store_f32(pdata + (size_t)t0 * pes, p->dtype, w, m, o->rounding, o->seed, sr_base + (uint64_t)t0);
            b = pes == 2 && half_nonfinite((const uint16_t *)(pdata + (size_t)t0 * pes), p->dtype, m);
        }
        if (b) { /* put the tile back as it was */
            if (in_place) memcpy(w, keep_w, mb4);
            if (ea) memcpy(ea + t0, keep_ea, mb4);
            if (eas) memcpy(eas + t0, keep_eas, mb4);
            if (mb) memcpy(mb + t0, keep_mb, mb4);
            if (half_out && pes == 2) memcpy(pdata + (size_t)t0 * pes, keep_p, (size_t)m * 2);
#pragma omp critical(amp_optim_bad)
            {
                if (bad_at < 0 || t0 < bad_at) bad_at = t0;
                bad = 1;
            }
        }
    }
    if (bad) {
        ps->step--;
        if (new_momentum) { /* the next step is the first again */
            amp__release(ps->momentum);
            ps->momentum = NULL;
        }
        char sb[AMP_SHAPE_BUF];
        return amp_error(AMP_ERR_RANGE,
                         "%s: parameter %d (%s %s): the update would make its %s non-finite (element %lld onward; the "
                         "gradient is finite, so an f32 overflow%s with lr %g): that part was left unchanged and the step "
                         "stopped",
                         fn, idx, amp_dtype_name(p->dtype), amp__shape_fmt(p->ndim, p->shape, sb, sizeof sb), what_nonfinite(opt),
                         (long long)bad_at, half_out && pes == 2 ? " or a master value beyond the half type's range" : "", o->lr);
    }
    return AMP_OK;
}

amp_status amp__optim_agree(amp_optim *opt, bool *found_inf) {
    if (!opt->dist.agree) return AMP_OK;
    return opt->dist.agree(opt->dist.ctx, found_inf);
}

static amp_status step_all(amp_optim *opt, float inv_scale, const char *fn) {
    uint64_t base = opt->sr_counter;
    for (int i = 0; i < opt->n; i++) {
        amp_param_state *ps = &opt->ps[i];
        int64_t n = amp_tensor_numel(ps->param);
        uint64_t at = ps->sr_off >= 0 ? opt->sr_counter + (uint64_t)ps->sr_off : base;
        if (current_grad(opt, ps)) {
            amp_status st = step_param(opt, i, inv_scale, at, fn);
            if (st != AMP_OK) {
                opt->master_grads_valid = false;
                return st;
            }
        }
        base += (uint64_t)n;
    }
    opt->sr_counter = opt->sr_span ? opt->sr_counter + opt->sr_span : base;
    opt->steps++;
    opt->master_grads_valid = false;
    return AMP_OK;
}

amp_status amp__optim_step_scaled(amp_optim *opt, float inv_scale, const char *fn) {
    amp_status st = step_all(opt, inv_scale, fn);
    /* data parallel: every rank's result agreed, ZeRO-1 shards spread */
    if (opt->dist.after_step) st = opt->dist.after_step(opt->dist.ctx, st);
    return st;
}

amp_status amp_optim_step(amp_optim *opt) {
    static const char *fn = "amp_optim_step";
    if (!opt) return amp_error(AMP_ERR_ARG, "%s: opt is NULL", fn);
    if (amp__optim_on_cpu(fn, opt) != AMP_OK) return amp_last_status();
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
    return amp__optim_step_scaled(opt, 1.0f, fn);
}

/* ---- clipping ---------------------------------------------------------------------------- */
static const amp_optim_sumsq_fn g_sumsq_fns[AMP_CPU_PATH_COUNT] = {amp_optim_sumsq_scalar, amp_optim_sumsq_avx2,
                                                                     amp_optim_sumsq_avx512};

/* sum of squares of one gradient tensor times f (double; inf/nan when it holds one) */
static double grad_sumsq(const amp_tensor *g, float f) {
    int64_t cnt = amp_tensor_numel(g);
    const char *base = amp__data(g);
    size_t es = amp_dtype_size(g->dtype);
    amp_optim_sumsq_fn sumsq = AMP_DISPATCH(g_sumsq_fns);
    double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (cnt > PAR_MIN)
    for (int64_t t0 = 0; t0 < cnt; t0 += TILE) {
        float tmp[TILE];
        int64_t m = cnt - t0 < TILE ? cnt - t0 : TILE;
        const float *src = tmp;
        if (g->dtype == AMP_F32) src = (const float *)(base + (size_t)t0 * es);
        else load_f32(tmp, base + (size_t)t0 * es, g->dtype, m);
        s += sumsq(f, m, src);
    }
    return s;
}

double amp__optim_sumsq_unscaled(amp_optim *opt, float inv_scale, int *first_bad) {
    if (first_bad) *first_bad = -1;
    double total = 0;
    for (int i = 0; i < opt->n; i++) {
        const amp_tensor *g = current_grad(opt, &opt->ps[i]);
        if (!g) continue;
        double s = grad_sumsq(g, inv_scale);
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
    for (int i = 0; i < n; i++)
        if (amp__cpu_only(fn, gs[i], "a gradient") != AMP_OK) return -1;
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
    double total = 0, total_sharded = 0;
    for (int i = 0; i < n; i++) {
        if (!gs[i]) continue;
        double s = grad_sumsq(gs[i], 1.0f);
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
        int64_t cnt = amp_tensor_numel(g);
        char *base = amp__data(g);
        size_t es = amp_dtype_size(g->dtype);
#pragma omp parallel for schedule(static) if (cnt > PAR_MIN)
        for (int64_t t0 = 0; t0 < cnt; t0 += TILE) {
            float tmp[TILE];
            int64_t m = cnt - t0 < TILE ? cnt - t0 : TILE;
            load_f32(tmp, base + (size_t)t0 * es, g->dtype, m);
            for (int64_t k = 0; k < m; k++) tmp[k] *= cf;
            store_f32(base + (size_t)t0 * es, g->dtype, tmp, m, AMP_ROUND_NEAREST, 0, 0);
        }
    }
    return norm;
}

/* The gradients the next steps of opts[0..n) will use, into a new array. */
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

static double clip_optims(const char *fn, amp_optim *const *opts, int n, double max_norm, const amp_scaler *sc) {
    if (!opts || n <= 0) {
        amp_error(AMP_ERR_ARG, "%s: opts is NULL or n %d is not positive", fn, n);
        return -1;
    }
    for (int k = 0; k < n; k++) {
        if (!opts[k]) {
            amp_error(AMP_ERR_ARG, "%s: opts[%d] is NULL", fn, k);
            return -1;
        }
        if (amp__optim_on_cpu(fn, opts[k]) != AMP_OK) return -1;
        if (amp_scaler_is_enabled(sc) && !amp_scaler_is_unscaled(sc, opts[k])) {
            amp_error(AMP_ERR_STATE, "%s: the gradients of opts[%d] are still multiplied by the loss scale (%g); call "
                                     "amp_scaler_unscale on it first (the norm of scaled gradients means nothing)",
                      fn, k, amp_scaler_get_scale(sc));
            return -1;
        }
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
    return clip_optims("amp_clip_grad_norm", &opt, 1, max_norm, NULL);
}

double amp_clip_grad_norm_optims(amp_optim *const *opts, int n, double max_norm, const amp_scaler *sc) {
    return clip_optims("amp_clip_grad_norm_optims", opts, n, max_norm, sc);
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
    if (amp__optim_on_cpu("amp_clip_grad_value", opt) != AMP_OK) return amp_last_status();
    float c = (float)clip;
    for (int i = 0; i < opt->n; i++) {
        amp_tensor *g = (amp_tensor *)current_grad(opt, &opt->ps[i]);
        if (!g) continue;
        amp__bump_version(g);
        int64_t n = amp_tensor_numel(g);
        char *base = amp__data(g);
        size_t es = amp_dtype_size(g->dtype);
        for (int64_t t0 = 0; t0 < n; t0 += TILE) {
            float tmp[TILE];
            int64_t m = n - t0 < TILE ? n - t0 : TILE;
            load_f32(tmp, base + (size_t)t0 * es, g->dtype, m);
            for (int64_t k = 0; k < m; k++) tmp[k] = tmp[k] < -c ? -c : tmp[k] > c ? c : tmp[k];
            store_f32(base + (size_t)t0 * es, g->dtype, tmp, m, AMP_ROUND_NEAREST, 0, 0);
        }
    }
    return AMP_OK;
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

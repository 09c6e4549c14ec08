/* The CPU backend's optimizer entries (kernels/backend.h): the skip check,
 * the unscale, the fused update with its tile guard, the gradient norm's
 * sum of squares and the clip multiply. These are the loops src/optim/
 * ran itself before the backend split, unchanged (the same tiles, the same
 * per-path kernels of kernels/cpu/optim_update.h, the same OpenMP
 * schedule), so the results are bit for bit those of before. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "amp/numeric.h"
#include "amp/optim.h"
#include "core/cpu.h"
#include "kernels/backend.h"
#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/optim_update.h"
#include "tensor/tensor_impl.h"

#define TILE 1024
#define PAR_MIN 65536

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

static const amp_optim_tile_fn g_tile_fns[AMP_CPU_PATH_COUNT] = {amp_optim_tile_scalar, amp_optim_tile_avx2,
                                                                   amp_optim_tile_avx512};
static const amp_optim_check_fn g_check_fns[AMP_CPU_PATH_COUNT] = {amp_optim_check_scalar, amp_optim_check_avx2,
                                                                     amp_optim_check_avx512};
static const amp_optim_sumsq_fn g_sumsq_fns[AMP_CPU_PATH_COUNT] = {amp_optim_sumsq_scalar, amp_optim_sumsq_avx2,
                                                                     amp_optim_sumsq_avx512};

/* exponent all ones (inf or nan) in any of m half values */
static bool half_nonfinite(const uint16_t *u, amp_dtype dt, int64_t m) {
    uint16_t e = dt == AMP_F16 ? 0x7c00u : 0x7f80u;
    uint32_t b = 0;
    for (int64_t k = 0; k < m; k++) b |= (uint32_t)((u[k] & e) == e);
    return b != 0;
}

static amp_status amp__cpu_optim_check(const char *fn, amp_tensor *const *grads, int n, float inv_scale,
                                       amp_dev_scaler *ds, bool *found, int *first_bad) {
    AMP_UNUSED(fn);
    AMP_UNUSED(ds);
    amp_optim_check_fn check = AMP_DISPATCH(g_check_fns);
    if (first_bad) *first_bad = -1;
    if (found) *found = false;
    for (int i = 0; i < n; i++) {
        const amp_tensor *g = grads[i];
        if (!g) continue;
        int64_t cnt = amp_tensor_numel(g);
        const char *base = amp__data(g);
        size_t es = amp_dtype_size(g->dtype);
        int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) AMP_OMP_IF(cnt > PAR_MIN)
        for (int64_t t0 = 0; t0 < cnt; t0 += TILE) {
            int64_t m = cnt - t0 < TILE ? cnt - t0 : TILE;
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
            if (found) *found = true;
            return AMP_OK;
        }
    }
    return AMP_OK;
}

static amp_status amp__cpu_optim_unscale(const char *fn, amp_tensor *const *srcs, amp_tensor *const *dsts, int n,
                                         float inv_scale, amp_dev_scaler *ds, bool *found, int *first_bad) {
    AMP_UNUSED(fn);
    AMP_UNUSED(ds);
    if (first_bad) *first_bad = -1;
    bool any = false;
    for (int i = 0; i < n; i++) {
        const amp_tensor *g = srcs[i];
        amp_tensor *dst = dsts[i];
        if (!g || !dst) continue;
        int64_t cnt = amp_tensor_numel(g);
        const char *src = amp__data(g);
        char *out = amp__data(dst);
        size_t es = amp_dtype_size(g->dtype), eo = amp_dtype_size(dst->dtype);
        int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) AMP_OMP_IF(cnt > PAR_MIN)
        for (int64_t t0 = 0; t0 < cnt; t0 += TILE) {
            float tmp[TILE];
            int64_t m = cnt - t0 < TILE ? cnt - t0 : TILE;
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
    if (found) *found = any;
    return AMP_OK;
}

static const char *what_nonfinite(int kind) {
    return kind == AMP_OPTIM_SGD ? "weights or momentum buffer" : "weights or Adam moments";
}

/* One parameter's update, tile by tile. Each tile's old weights and state
 * are kept while the kernel runs; a tile whose results hold inf/nan (finite
 * gradients with extreme weights or settings: an f32 overflow, or a master
 * value beyond the half type's range) is put back as it was and the step
 * fails with AMP_ERR_RANGE, so a non-finite value never stays in the
 * weights or the optimizer state. */
static amp_status step_item(const char *fn, const amp_optim_consts_b *cb, const amp_optim_item *it, float inv_scale) {
    const amp_tensor *g = it->grad;
    amp_tensor *p = it->param;
    int64_t n = amp_tensor_numel(p);
    amp_optim_consts c;
    memset(&c, 0, sizeof c);
    c.kind = cb->kind;
    c.inv_scale = inv_scale;
    c.wd = it->wd;
    if (cb->kind == AMP_OPTIM_SGD) {
        c.mom = cb->mom;
        c.one_minus_damp = cb->one_minus_damp;
        c.neg_lr = cb->neg_lr;
        c.nesterov = cb->nesterov;
        c.first_mom = it->first_momentum;
    } else {
        c.w1 = cb->w1;
        c.b2 = cb->b2;
        c.omb2 = cb->omb2;
        c.neg_step = it->neg_step;
        c.bc2s = it->bc2s;
        c.eps = cb->eps;
        c.decay = it->decay;
    }
    char *gsrc = amp__data(g);
    bool write_grad = it->write_grad;
    size_t ges = amp_dtype_size(g->dtype), pes = amp_dtype_size(p->dtype);
    char *pdata = amp__data(p);
    float *master = it->master ? (float *)amp__data(it->master) : NULL;
    float *ea = it->exp_avg ? (float *)amp__data(it->exp_avg) : NULL;
    float *eas = it->exp_avg_sq ? (float *)amp__data(it->exp_avg_sq) : NULL;
    float *mb = it->momentum ? (float *)amp__data(it->momentum) : NULL;
    amp_optim_tile_fn tile = AMP_DISPATCH(g_tile_fns);
    bool in_place = master || p->dtype == AMP_F32; /* f32 weights are updated where they are */
    bool half_out = master || p->dtype != AMP_F32;
    amp_round_mode rounding = (amp_round_mode)cb->rounding;
    uint64_t seed = cb->sr_seed, sr_base = it->sr_counter;
    int bad = 0;
    int64_t bad_at = -1;
#pragma omp parallel for schedule(static) AMP_OMP_IF(n > PAR_MIN)
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
            store_f32(pdata + (size_t)t0 * pes, p->dtype, w, m, rounding, seed, sr_base + (uint64_t)t0);
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
        char sb[AMP_SHAPE_BUF];
        return amp_error(AMP_ERR_RANGE,
                         "%s: parameter %d (%s %s): the update would make its %s non-finite (element %lld onward; the "
                         "gradient is finite, so an f32 overflow%s with lr %g): that part was left unchanged and the step "
                         "stopped",
                         fn, it->index, amp_dtype_name(p->dtype), amp__shape_fmt(p->ndim, p->shape, sb, sizeof sb),
                         what_nonfinite(cb->kind), (long long)bad_at,
                         half_out && pes == 2 ? " or a master value beyond the half type's range" : "", cb->lr);
    }
    return AMP_OK;
}

static amp_status amp__cpu_optim_step(const char *fn, const amp_optim_consts_b *c, amp_optim_item *items, int n,
                                      float inv_scale, amp_dev_scaler *ds, int *bad_param) {
    AMP_UNUSED(ds);
    if (bad_param) *bad_param = -1;
    for (int k = 0; k < n; k++) {
        amp_status st = step_item(fn, c, &items[k], inv_scale);
        if (st != AMP_OK) {
            if (bad_param) *bad_param = k;
            return st;
        }
    }
    return AMP_OK;
}

typedef struct {
    const char *base;
    amp_dtype dt;
    float f;
    amp_optim_sumsq_fn sumsq;
} sumsq_ctx;

/* the tiles of [lo, hi) (lo a multiple of TILE), one after the other */
static double sumsq_part(const void *ctx, int64_t lo, int64_t hi) {
    const sumsq_ctx *c = ctx;
    size_t es = amp_dtype_size(c->dt);
    double s = 0;
    for (int64_t t0 = lo; t0 < hi; t0 += TILE) {
        float tmp[TILE];
        int64_t m = hi - t0 < TILE ? hi - t0 : TILE;
        const float *src = tmp;
        if (c->dt == AMP_F32) src = (const float *)(c->base + (size_t)t0 * es);
        else load_f32(tmp, c->base + (size_t)t0 * es, c->dt, m);
        s += c->sumsq(c->f, m, src);
    }
    return s;
}

/* sum of squares of one gradient tensor times f (double; inf/nan when it
 * holds one): 64 fixed chunks of whole tiles (amp_k_fixed_chunk_sum), so the
 * bits do not depend on the thread count. Up to 64 tiles, a chunk is one
 * tile: tile by tile, as one thread did. */
static double grad_sumsq(const amp_tensor *g, float f) {
    int64_t cnt = amp_tensor_numel(g);
    const sumsq_ctx c = {amp__data(g), g->dtype, f, AMP_DISPATCH(g_sumsq_fns)};
    return amp_k_fixed_chunk_sum(cnt, TILE, cnt > PAR_MIN, sumsq_part, &c);
}

double amp__cpu_grad_sumsq(const amp_tensor *g, float f) { return grad_sumsq(g, f); }

static amp_status amp__cpu_optim_sumsq(const char *fn, amp_tensor *const *grads, int n, float f, double *host_out,
                                       double *dev_out) {
    AMP_UNUSED(fn);
    AMP_UNUSED(dev_out);
    double total = 0;
    for (int i = 0; i < n; i++)
        if (grads[i]) total += grad_sumsq(grads[i], f);
    if (host_out) *host_out = total;
    return AMP_OK;
}

/* g = g * v (clamp false: clipping's scale) or min(max(g, -v), v) (clamp:
 * clip_grad_value) for each gradient, tile by tile in f32, each element
 * rounded back to g's dtype */
static void grads_in_place(amp_tensor *const *grads, int n, bool clamp, float v) {
    for (int i = 0; i < n; i++) {
        amp_tensor *g = grads[i];
        if (!g) continue;
        int64_t cnt = amp_tensor_numel(g);
        char *base = amp__data(g);
        size_t es = amp_dtype_size(g->dtype);
#pragma omp parallel for schedule(static) AMP_OMP_IF(cnt > PAR_MIN)
        for (int64_t t0 = 0; t0 < cnt; t0 += TILE) {
            float tmp[TILE];
            int64_t m = cnt - t0 < TILE ? cnt - t0 : TILE;
            load_f32(tmp, base + (size_t)t0 * es, g->dtype, m);
            if (clamp)
                for (int64_t k = 0; k < m; k++) tmp[k] = tmp[k] < -v ? -v : tmp[k] > v ? v : tmp[k];
            else
                for (int64_t k = 0; k < m; k++) tmp[k] *= v;
            store_f32(base + (size_t)t0 * es, g->dtype, tmp, m, AMP_ROUND_NEAREST, 0, 0);
        }
    }
}

static amp_status amp__cpu_optim_scale_grads(const char *fn, amp_tensor *const *grads, int n, float cf,
                                             const float *dev_f) {
    AMP_UNUSED(fn);
    AMP_UNUSED(dev_f);
    grads_in_place(grads, n, false, cf);
    return AMP_OK;
}

static amp_status amp__cpu_optim_clamp_grad(const char *fn, amp_tensor *const *grads, int n, float c) {
    AMP_UNUSED(fn);
    grads_in_place(grads, n, true, c);
    return AMP_OK;
}

const amp_optim_family amp__cpu_optim_family = {
    .optim_step = amp__cpu_optim_step,
    .optim_sumsq = amp__cpu_optim_sumsq,
    .optim_scale_grads = amp__cpu_optim_scale_grads,
    .optim_clamp_grad = amp__cpu_optim_clamp_grad,
};

/* the CPU's scaler is host arithmetic (src/amp/scaler.c): only the check and the unscale */
const amp_scaler_family amp__cpu_scaler_family = {
    .optim_check = amp__cpu_optim_check,
    .optim_unscale = amp__cpu_optim_unscale,
};

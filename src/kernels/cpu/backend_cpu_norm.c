/* The CPU backend's normalisation entries (kernels/backend.h): the
 * CPU-specific staging that src/ops/norm.c did (f32 views of inputs in other
 * dtypes or strides, f32 output buffers rounded once into half outputs)
 * around the kernels of kernels/cpu/norm.h. Statistics in f32 from sums in
 * double; the arithmetic is the kernels'. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/norm.h"
#include "tensor/f32_util.h"

/* ---- norm.h's kernels ---------------------------------------------------------------------------
 * Normalisation kernels: dispatch to the active CPU path's build of
 * norm.inc (norm_scalar.c, norm_avx2.c and norm_avx512.c). Parallel over
 * rows / channels when the work is large. */
AMP_K_PATH_DISPATCH(norm_k, amp_norm_kernels, amp_norm_kernels)

void amp_k_row_stats(const float *x, int64_t rows, int64_t len, double eps, float *mean, float *rstd) {
    norm_k()->row_stats(x, rows, len, eps, mean, rstd);
}

void amp_k_layer_norm(const void *x, amp_dtype xdt, const float *w, const float *b, int64_t M, int64_t D, double eps,
                      void *y, amp_dtype ydt, float *mean, float *rstd) {
    norm_k()->layer_norm(x, xdt, w, b, M, D, eps, y, ydt, mean, rstd);
}

void amp_k_rms_norm(const void *x, amp_dtype xdt, const float *w, int64_t M, int64_t D, double eps, void *y,
                    amp_dtype ydt, float *rstd) {
    norm_k()->rms_norm(x, xdt, w, M, D, eps, y, ydt, rstd);
}

void amp_k_layer_norm_backward(const float *x, const float *g, const float *w, const float *mean, const float *rstd,
                               int64_t M, int64_t D, float *gx, float *gw, float *gb) {
    norm_k()->layer_norm_backward(x, g, w, mean, rstd, M, D, gx, gw, gb);
}

void amp_k_channel_stats(const void *x, amp_dtype dt, int64_t N, int64_t C, int64_t L, float *mean, float *var) {
    norm_k()->channel_stats(x, dt, N, C, L, mean, var);
}

void amp_k_channel_affine(const void *x, amp_dtype xdt, int64_t N, int64_t C, int64_t L, const float *mean,
                          const float *scale, const float *shift, void *y, amp_dtype ydt) {
    norm_k()->channel_affine(x, xdt, N, C, L, mean, scale, shift, y, ydt);
}

void amp_k_channel_norm(const void *x, amp_dtype xdt, int64_t N, int64_t C, int64_t L, double eps, const float *w,
                        const float *b, float *mean, float *var, float *rstd, void *y, amp_dtype ydt) {
    norm_k()->channel_norm(x, xdt, N, C, L, eps, w, b, mean, var, rstd, y, ydt);
}

void amp_k_channel_grad_sums(const void *x, amp_dtype xdt, const void *g, amp_dtype gdt, int64_t N, int64_t C, int64_t L,
                             const float *mean, const float *rstd, double *sg, double *sgxhat) {
    norm_k()->channel_grad_sums(x, xdt, g, gdt, N, C, L, mean, rstd, sg, sgxhat);
}

void amp_k_batch_norm_backward_x(const void *x, amp_dtype xdt, const void *g, amp_dtype gdt, int64_t N, int64_t C,
                                 int64_t L, const float *mean, const float *rstd, const float *w, const double *sg,
                                 const double *sgxhat, bool training, void *gx, amp_dtype gxdt) {
    norm_k()->batch_norm_backward_x(x, xdt, g, gdt, N, C, L, mean, rstd, w, sg, sgxhat, training, gx, gxdt);
}

void amp_k_group_norm(const float *x, const float *w, const float *b, int64_t N, int64_t C, int64_t L, int64_t G,
                      double eps, float *y, float *mean, float *rstd) {
    norm_k()->group_norm(x, w, b, N, C, L, G, eps, y, mean, rstd);
}

void amp_k_group_norm_backward(const float *x, const float *g, const float *w, const float *mean, const float *rstd,
                               int64_t N, int64_t C, int64_t L, int64_t G, float *gx, float *gw, float *gb) {
    norm_k()->group_norm_backward(x, g, w, mean, rstd, N, C, L, G, gx, gw, gb);
}

/* f32 views of up to 4 optional tensors; on failure releases what it took. */
typedef struct {
    const float *p[4];
    bool owned[4];
    const amp_tensor *t[4];
    int n;
} views;

static bool views_get(views *v, int n, const amp_tensor *const *ts) {
    memset(v, 0, sizeof *v);
    v->n = n;
    for (int i = 0; i < n; i++) {
        v->t[i] = ts[i];
        if (!ts[i]) continue;
        v->p[i] = amp__f32_view(ts[i], &v->owned[i]);
        if (!v->p[i]) {
            for (int j = 0; j < i; j++)
                if (v->p[j]) amp__f32_done(v->t[j], v->p[j], v->owned[j]);
            memset(v, 0, sizeof *v);
            return false;
        }
    }
    return true;
}

static void views_done(views *v) {
    for (int i = 0; i < v->n; i++)
        if (v->p[i]) amp__f32_done(v->t[i], v->p[i], v->owned[i]);
    memset(v, 0, sizeof *v);
}

static float *gdata(amp_tensor *t) { return t ? (float *)amp__data(t) : NULL; }

/* f32 gradient tensors (uninitialised) of the given shapes where need[i];
 * false (and none kept) on failure */
static bool grads_new(int count, const bool *need, const int *nd, const int64_t *const *shape, amp_tensor **gin) {
    for (int i = 0; i < count; i++) {
        gin[i] = NULL;
        if (!need[i]) continue;
        gin[i] = amp__f32_grad(nd[i], shape[i], false);
        if (!gin[i]) {
            for (int j = 0; j < i; j++) {
                amp__release(gin[j]);
                gin[j] = NULL;
            }
            return false;
        }
    }
    return true;
}

/* A backward's start: f32 views of x, w (optional) and the output gradient g
 * into v (p[0], p[1], p[2]) and the gradients grads_new makes; false (and
 * nothing kept) on failure. */
static bool backward_begin(views *v, const amp_tensor *x, const amp_tensor *w, const amp_tensor *g, const bool *need,
                           const int *nd, const int64_t *const *shape, amp_tensor **gin) {
    const amp_tensor *ts[3] = {x, w, g};
    if (!views_get(v, 3, ts)) return false;
    if (!grads_new(3, need, nd, shape, gin)) {
        views_done(v);
        return false;
    }
    return true;
}

/* ---- layer_norm, rms_norm ---------------------------------------------------------------- */
/* Both forwards (rms: mean and b NULL): x straight from its memory when it
 * is contiguous f32, or contiguous half with rows the kernel widens one at
 * a time; else an f32 copy */
static amp_status rows_forward(const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w, const amp_tensor *b,
                               amp_tensor *y, amp_tensor *mean, amp_tensor *rstd, bool rms) {
    int64_t M = a->M, D = a->D;
    bool direct = amp_tensor_is_contiguous(x) &&
                  (x->dtype == AMP_F32 || ((x->dtype == AMP_F16 || x->dtype == AMP_BF16) && D <= AMP_K_ROW_MAX));
    views v;
    const amp_tensor *ts[3] = {direct ? NULL : x, w, b};
    if (!views_get(&v, 3, ts)) return amp_last_status();
    const void *px = direct ? amp__data(x) : (const void *)v.p[0];
    amp_dtype pxdt = direct ? x->dtype : AMP_F32;
    void *po = direct ? amp__data(y) : amp__f32_out_begin(y);
    if (!po) {
        views_done(&v);
        return amp_last_status();
    }
    amp_dtype podt = direct ? y->dtype : AMP_F32;
    if (rms) amp_k_rms_norm(px, pxdt, v.p[1], M, D, a->eps, po, podt, amp__data(rstd));
    else amp_k_layer_norm(px, pxdt, v.p[1], v.p[2], M, D, a->eps, po, podt, amp__data(mean), amp__data(rstd));
    if (!direct) amp__f32_out_end(y, po);
    views_done(&v);
    return AMP_OK;
}

/* Both backwards: gradients of x, w (and b unless rms) [x's last k dims] */
static amp_status rows_backward(const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w, const amp_tensor *mean,
                                const amp_tensor *rstd, const amp_tensor *g, const bool *need, amp_tensor **gin) {
    int lead = x->ndim - a->k;
    int nd[3] = {x->ndim, a->k, a->k};
    const int64_t *shp[3] = {x->shape, x->shape + lead, x->shape + lead};
    bool nd3[3] = {need[0], need[1], mean && need[2]}; /* rms: need and gin have two entries */
    amp_tensor *g3[3];
    views v;
    if (!backward_begin(&v, x, w, g, nd3, nd, shp, g3)) return amp_last_status();
    amp_k_layer_norm_backward(v.p[0], v.p[2], v.p[1], mean ? (const float *)amp__data(mean) : NULL, amp__data(rstd),
                              a->M, a->D, gdata(g3[0]), gdata(g3[1]), gdata(g3[2]));
    views_done(&v);
    for (int i = 0; i < (mean ? 3 : 2); i++) gin[i] = g3[i];
    return AMP_OK;
}

static amp_status amp__cpu_layer_norm(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                                      const amp_tensor *b, amp_tensor *y, amp_tensor *mean, amp_tensor *rstd) {
    AMP_UNUSED(fn);
    return rows_forward(a, x, w, b, y, mean, rstd, false);
}

static amp_status amp__cpu_layer_norm_backward(const char *fn, const amp_norm_args *a, const amp_tensor *x,
                                               const amp_tensor *w, const amp_tensor *mean, const amp_tensor *rstd,
                                               const amp_tensor *g, const bool *need, amp_tensor **gin) {
    AMP_UNUSED(fn);
    return rows_backward(a, x, w, mean, rstd, g, need, gin);
}

static amp_status amp__cpu_rms_norm(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                                    amp_tensor *y, amp_tensor *rstd) {
    AMP_UNUSED(fn);
    return rows_forward(a, x, w, NULL, y, NULL, rstd, true);
}

static amp_status amp__cpu_rms_norm_backward(const char *fn, const amp_norm_args *a, const amp_tensor *x,
                                             const amp_tensor *w, const amp_tensor *rstd, const amp_tensor *g,
                                             const bool *need, amp_tensor **gin) {
    AMP_UNUSED(fn);
    return rows_backward(a, x, w, NULL, rstd, g, need, gin);
}

/* ---- batch_norm -------------------------------------------------------------------------------- */
/* Write n f32 values into t (any strides, any float dtype), rounding. */
static amp_status write_f32(amp_tensor *t, float *src) {
    amp_tensor tmp;
    amp_storage st;
    amp__buffer_tensor(&tmp, &st, AMP_F32, src, t);
    return amp__copy_convert(t, &tmp);
}

static bool f32_or_half(amp_dtype dt) { return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16; }

static amp_status amp__cpu_batch_norm(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                                      const amp_tensor *b, amp_tensor *running_mean, amp_tensor *running_var,
                                      amp_tensor *y, amp_tensor *mean, amp_tensor *rstd) {
    AMP_UNUSED(fn);
    int64_t N = a->N, C = a->C, L = a->L;
    double eps = a->eps, momentum = a->momentum;
    bool training = a->training;
    size_t cb = (size_t)(C ? C : 1) * sizeof(float);
    float *scale = amp__ws_alloc(cb), *shift = scale ? amp__ws_alloc(cb) : NULL;
    float *var = shift ? amp__ws_alloc(cb) : NULL;
    amp_status st = AMP_OK;
    views v, rs;
    bool have_v = false, have_rs = false;
    /* x straight from its memory when contiguous f32/f16/bf16 (halves are
     * widened in blocks by the kernels); else an f32 copy */
    bool direct = amp_tensor_is_contiguous(x) && f32_or_half(x->dtype);
    const amp_tensor *ts[3] = {direct ? NULL : x, w, b};
    const amp_tensor *rts[2] = {running_mean, running_var};
    if (!var || !(have_v = views_get(&v, 3, ts)) || !(have_rs = views_get(&rs, 2, rts))) {
        st = amp_last_status();
        goto done;
    }
    const void *px = direct ? amp__data(x) : (const void *)v.p[0];
    amp_dtype pxdt = direct ? x->dtype : AMP_F32;
    float *pm = amp__data(mean), *pr = amp__data(rstd);
    /* training: statistics and normalisation in one kernel (one visit per
     * channel when there are enough channels); eval: the running statistics */
    if (!training) {
        for (int64_t c = 0; c < C; c++) {
            pm[c] = rs.p[0][c];
            pr[c] = (float)(1.0 / sqrt((double)rs.p[1][c] + eps));
            scale[c] = pr[c] * (v.p[1] ? v.p[1][c] : 1.0f);
            shift[c] = v.p[2] ? v.p[2][c] : 0.0f;
        }
    }
    float *po = direct ? amp__data(y) : amp__f32_out_begin(y);
    if (!po) {
        st = amp_last_status();
        goto done;
    }
    amp_dtype podt = direct ? y->dtype : AMP_F32;
    if (training) amp_k_channel_norm(px, pxdt, N, C, L, eps, v.p[1], v.p[2], pm, var, pr, po, podt);
    else amp_k_channel_affine(px, pxdt, N, C, L, pm, scale, shift, po, podt);
    if (!direct) amp__f32_out_end(y, po);
    /* running statistics, in place: running = (1 - m) * running + m * batch
     * statistic, with the unbiased variance (as torch) */
    if (training && running_mean) {
        double cnt = (double)N * (double)L;
        float *nm = scale, *nv = shift; /* reuse the scratch */
        bool finite = true;
        for (int64_t c = 0; c < C; c++) {
            nm[c] = (float)((1.0 - momentum) * rs.p[0][c] + momentum * (double)pm[c]);
            nv[c] = (float)((1.0 - momentum) * rs.p[1][c] + momentum * (double)var[c] * cnt / (cnt - 1.0));
            finite &= isfinite(nm[c]) && isfinite(nv[c]);
        }
        views_done(&rs);
        have_rs = false;
        /* a batch whose statistics are not finite (an inf in x, or a variance
         * beyond f32) leaves the running statistics as they were: amp never
         * stores them (torch does, and every later eval forward is NaN) */
        if (finite) {
            amp_tensor_will_modify(running_mean); /* counted, and undone if the step is skipped */
            amp_tensor_will_modify(running_var);
            if ((st = write_f32(running_mean, nm)) == AMP_OK) st = write_f32(running_var, nv);
        }
    }
done:
    if (have_rs) views_done(&rs);
    if (have_v) views_done(&v);
    amp__ws_free(scale, cb);
    amp__ws_free(shift, cb);
    amp__ws_free(var, cb);
    return st;
}

static amp_status amp__cpu_batch_norm_backward(const char *fn, const amp_norm_args *a, const amp_tensor *x,
                                               const amp_tensor *w, const amp_tensor *mean, const amp_tensor *rstd,
                                               const amp_tensor *gy, const bool *need, amp_tensor **gin) {
    AMP_UNUSED(fn);
    int64_t N = a->N, C = a->C, L = a->L;
    int64_t cs[1] = {C};
    int nd[3] = {x->ndim, 1, 1};
    const int64_t *shp[3] = {x->shape, cs, cs};
    size_t nb = (size_t)(C ? C : 1) * sizeof(double);
    const float *pm = amp__data(mean), *pr = amp__data(rstd);
    if (L <= AMP_K_NORM_ROW_MAX && amp_tensor_is_contiguous(x) && amp_tensor_is_contiguous(gy) && f32_or_half(x->dtype) &&
        f32_or_half(gy->dtype) && (x->dtype != AMP_F32 || gy->dtype != AMP_F32) &&
        (!w || (w->dtype == AMP_F32 && amp_tensor_is_contiguous(w)))) {
        /* half x or dy read as stored, rows widened in the kernels, and a half
         * x's gradient written in its dtype (what the engine's cast of the f32
         * gradient would give): no f32 copies of the activations */
        double *sg = amp__ws_alloc(nb), *sgx = sg ? amp__ws_alloc(nb) : NULL;
        bool need12[3] = {false, need[1], need[2]};
        amp_tensor *gx = NULL;
        if (sgx && need[0])
            gx = amp__tensor_new("amp_backward", x->dtype, x->ndim, x->shape, amp__mem_current(AMP_MEM_WORKSPACE),
                                 AMP_NEW_UNSCOPED);
        if (!sgx || (need[0] && !gx) || !grads_new(3, need12, nd, shp, gin)) {
            amp__release(gx);
            amp__ws_free(sg, nb);
            amp__ws_free(sgx, nb);
            return amp_last_status();
        }
        gin[0] = gx;
        amp_k_channel_grad_sums(amp__data(x), x->dtype, amp__data(gy), gy->dtype, N, C, L, pm, pr, sg, sgx);
        if (gx)
            amp_k_batch_norm_backward_x(amp__data(x), x->dtype, amp__data(gy), gy->dtype, N, C, L, pm, pr,
                                        w ? (const float *)amp__data(w) : NULL, sg, sgx, a->training, amp__data(gx),
                                        gx->dtype);
        for (int64_t ch = 0; ch < C; ch++) {
            if (gin[1]) gdata(gin[1])[ch] = (float)sgx[ch];
            if (gin[2]) gdata(gin[2])[ch] = (float)sg[ch];
        }
        amp__ws_free(sg, nb);
        amp__ws_free(sgx, nb);
        return AMP_OK;
    }
    views v;
    const amp_tensor *ts[3] = {x, w, gy};
    if (!views_get(&v, 3, ts)) return amp_last_status();
    double *sg = amp__ws_alloc(nb), *sgx = sg ? amp__ws_alloc(nb) : NULL;
    if (!sgx || !grads_new(3, need, nd, shp, gin)) {
        amp__ws_free(sg, nb);
        amp__ws_free(sgx, nb);
        views_done(&v);
        return amp_last_status();
    }
    amp_k_channel_grad_sums(v.p[0], AMP_F32, v.p[2], AMP_F32, N, C, L, pm, pr, sg, sgx);
    if (gin[0])
        amp_k_batch_norm_backward_x(v.p[0], AMP_F32, v.p[2], AMP_F32, N, C, L, pm, pr, v.p[1], sg, sgx, a->training,
                                    amp__data(gin[0]), AMP_F32);
    for (int64_t ch = 0; ch < C; ch++) {
        if (gin[1]) gdata(gin[1])[ch] = (float)sgx[ch];
        if (gin[2]) gdata(gin[2])[ch] = (float)sg[ch];
    }
    amp__ws_free(sg, nb);
    amp__ws_free(sgx, nb);
    views_done(&v);
    return AMP_OK;
}

/* ---- group_norm ------------------------------------------------------------------------------ */
static amp_status amp__cpu_group_norm(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                                      const amp_tensor *b, amp_tensor *y, amp_tensor *mean, amp_tensor *rstd) {
    AMP_UNUSED(fn);
    views v;
    const amp_tensor *ts[3] = {x, w, b};
    if (!views_get(&v, 3, ts)) return amp_last_status();
    float *po = amp__f32_out_begin(y);
    if (!po) {
        views_done(&v);
        return amp_last_status();
    }
    amp_k_group_norm(v.p[0], v.p[1], v.p[2], a->N, a->C, a->L, a->G, a->eps, po, amp__data(mean), amp__data(rstd));
    amp__f32_out_end(y, po);
    views_done(&v);
    return AMP_OK;
}

static amp_status amp__cpu_group_norm_backward(const char *fn, const amp_norm_args *a, const amp_tensor *x,
                                               const amp_tensor *w, const amp_tensor *mean, const amp_tensor *rstd,
                                               const amp_tensor *g, const bool *need, amp_tensor **gin) {
    AMP_UNUSED(fn);
    int64_t cs[1] = {a->C};
    int nd[3] = {x->ndim, 1, 1};
    const int64_t *shp[3] = {x->shape, cs, cs};
    views v;
    if (!backward_begin(&v, x, w, g, need, nd, shp, gin)) return amp_last_status();
    amp_k_group_norm_backward(v.p[0], v.p[2], v.p[1], amp__data(mean), amp__data(rstd), a->N, a->C, a->L, a->G,
                              gdata(gin[0]), gdata(gin[1]), gdata(gin[2]));
    views_done(&v);
    return AMP_OK;
}

const amp_norm_family amp__cpu_norm_family = {
    .layer_norm = amp__cpu_layer_norm, .layer_norm_backward = amp__cpu_layer_norm_backward,
    .rms_norm = amp__cpu_rms_norm, .rms_norm_backward = amp__cpu_rms_norm_backward,
    .batch_norm = amp__cpu_batch_norm, .batch_norm_backward = amp__cpu_batch_norm_backward,
    .group_norm = amp__cpu_group_norm, .group_norm_backward = amp__cpu_group_norm_backward,
};

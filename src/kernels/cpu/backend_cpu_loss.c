/* The CPU backend's loss entries (kernels/backend.h): the class-index
 * losses cross_entropy and nll_loss, and the pointwise losses (mse, l1,
 * smooth_l1, binary_cross_entropy_with_logits, kl_div), as src/ops/loss.c
 * computed them. The row path
 * (a->rows: [N, C] logits, no weights or smoothing) goes row by row through
 * kernels/cpu/softmax.h's fused log-softmax (no [N, C] f32 buffer, half
 * logits widened in the kernel, the gradient in the logits' dtype); the
 * general path (N, C, L) works on f32 views. Per-sample terms in f32, sums
 * in double. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/softmax.h"
#include "tensor/f32_util.h"

/* Upstream gradient per sample: g[i] (none), g (sum) or g / W (mean). */
static double sample_grad(amp_reduction r, double W, const float *g, int64_t i) {
    switch (r) {
    case AMP_REDUCTION_NONE: return g[i];
    case AMP_REDUCTION_SUM: return g[0];
    default: return g[0] / W;
    }
}

/* Per-thread work rows of the row path: 2 C floats each. */
static float *xent_work(int64_t C, size_t *bytes) {
    int nt = amp_get_num_threads();
    *bytes = (size_t)(nt > 0 ? nt : 1) * 2 * (size_t)C * sizeof(float);
    return amp__ws_alloc(*bytes);
}

/* ---- the row path ---------------------------------------------------------------------------- */
static amp_status rows_forward(const amp_cls_args *a, const amp_tensor *x, const amp_tensor *target, amp_tensor *out,
                               amp_tensor *wsum) {
    int64_t N = a->N, C = a->C;
    size_t wb = 0, nb = (size_t)(N ? N : 1);
    int64_t *t = amp__cpu_indices_i64(target, N);
    double *li = t ? amp__ws_alloc(nb * sizeof(double)) : NULL;
    float *work = li ? xent_work(C, &wb) : NULL;
    amp_status st = work ? AMP_OK : amp_last_status();
    if (work) {
        amp_k_xent_rows(amp__data(x), x->dtype, N, C, t, a->ignore_index, li, work);
        double W = 0, total = 0;
        for (int64_t i = 0; i < N; i++) {
            if (t[i] == a->ignore_index) continue;
            W += 1.0;
            total += li[i];
        }
        if (a->reduction == AMP_REDUCTION_NONE)
            for (int64_t i = 0; i < N; i++) amp__store(amp__elem_ptr(out, i), out->dtype, (float)li[i]);
        else
            amp__store(amp__data(out), out->dtype, a->reduction == AMP_REDUCTION_SUM ? total : total / W);
        *(double *)amp__data(wsum) = W;
    }
    amp__ws_free(work, wb);
    amp__ws_free(li, nb * sizeof(double));
    amp__ws_free(t, nb * sizeof(int64_t));
    return st;
}

static amp_status rows_backward(const amp_cls_args *a, const amp_tensor *x, const amp_tensor *target, double W,
                                const amp_tensor *g, amp_tensor **gxo) {
    int64_t N = a->N, C = a->C;
    size_t nb = (size_t)(N ? N : 1);
    amp_tensor *gx = amp__tensor_new("amp_backward", x->dtype, 2, x->shape, amp__mem_current(AMP_MEM_WORKSPACE), AMP_NEW_UNSCOPED);
    int64_t *t = gx ? amp__cpu_indices_i64(target, N) : NULL;
    double *gr = t ? amp__ws_alloc(nb * sizeof(double)) : NULL;
    bool og = false;
    const float *pg = gr ? amp__f32_view(g, &og) : NULL;
    size_t wb = 0;
    float *work = pg ? xent_work(C, &wb) : NULL;
    amp_status st = work ? AMP_OK : amp_last_status();
    if (work) {
        for (int64_t i = 0; i < N; i++) gr[i] = sample_grad(a->reduction, W, pg, i);
        amp_k_xent_rows_backward(amp__data(x), x->dtype, N, C, t, a->ignore_index, gr, amp__data(gx), gx->dtype, work);
        *gxo = gx;
        gx = NULL;
    }
    amp__ws_free(work, wb);
    if (pg) amp__f32_done(g, pg, og);
    amp__ws_free(gr, nb * sizeof(double));
    amp__ws_free(t, nb * sizeof(int64_t));
    amp__release(gx);
    return st;
}

/* ---- the general path --------------------------------------------------------------------------- */
static amp_status general_forward(const amp_cls_args *a, const amp_tensor *x, const amp_tensor *target,
                                  const amp_tensor *w, amp_tensor *out, amp_tensor *wsum) {
    int64_t N = a->N, C = a->C, L = a->L, ns = N * L;
    size_t tbytes = (size_t)(ns ? ns : 1) * sizeof(int64_t);
    int64_t *t = amp__cpu_indices_i64(target, ns);
    if (!t) return amp_last_status();
    bool ox = false, ow = false;
    const float *px = amp__f32_view(x, &ox);
    const float *pw = (px && w) ? amp__f32_view(w, &ow) : NULL;
    float *lp = NULL;
    size_t lpb = (size_t)(N * C * L) * sizeof(float);
    if (px && (!w || pw)) {
        if (a->ce) {
            lp = amp__ws_alloc(lpb);
            if (lp) amp_k_softmax(px, N, C, L, lp, true);
        }
    }
    const float *logp = a->ce ? lp : px;
    double *li = logp ? amp__ws_alloc((size_t)(ns ? ns : 1) * sizeof(double)) : NULL;
    amp_status st = li ? AMP_OK : amp_last_status();
    if (li) {
        double e = a->smoothing, ca = 1.0 - e, cb = e / (double)C, W = 0, total = 0;
        for (int64_t nn = 0; nn < N; nn++) {
            for (int64_t l = 0; l < L; l++) {
                int64_t i = nn * L + l, ti = t[i];
                if (ti == a->ignore_index) {
                    li[i] = 0;
                    continue;
                }
                const float *row = logp + nn * C * L + l;
                double wt = pw ? pw[ti] : 1.0;
                double v = -wt * row[ti * L];
                if (cb != 0) {
                    double s = 0;
                    for (int64_t k = 0; k < C; k++) s += (pw ? pw[k] : 1.0) * row[k * L];
                    v = ca * v - cb * s;
                }
                li[i] = v;
                W += wt;
                total += v;
            }
        }
        if (a->reduction == AMP_REDUCTION_NONE) {
            float *po = amp__f32_out_begin(out);
            if (po) {
                for (int64_t i = 0; i < ns; i++) po[i] = (float)li[i];
                amp__f32_out_end(out, po);
            } else {
                st = amp_last_status();
            }
        } else {
            amp__store(amp__data(out), out->dtype, a->reduction == AMP_REDUCTION_SUM ? total : total / W);
        }
        *(double *)amp__data(wsum) = W;
        amp__ws_free(li, (size_t)(ns ? ns : 1) * sizeof(double));
    }
    if (px) amp__f32_done(x, px, ox);
    if (pw) amp__f32_done(w, pw, ow);
    amp__ws_free(lp, lpb);
    amp__ws_free(t, tbytes);
    return st;
}

static amp_status general_backward(const amp_cls_args *a, const amp_tensor *x, const amp_tensor *tg,
                                   const amp_tensor *w, double W, const amp_tensor *g, amp_tensor **gxo) {
    int64_t N = a->N, C = a->C, L = a->L, ns = N * L;
    amp_tensor *gx = amp__f32_grad(x->ndim, x->shape, true);
    if (!gx) return amp_last_status();
    int64_t *t = amp__cpu_indices_i64(tg, ns);
    bool og = false, ow = false;
    const float *pg = t ? amp__f32_view(g, &og) : NULL;
    const float *pw = (pg && w) ? amp__f32_view(w, &ow) : NULL;
    float *p = NULL; /* softmax of the logits */
    size_t pb = (size_t)(N * C * L) * sizeof(float);
    if (pg && (!w || pw) && a->ce) {
        bool ox;
        const float *px = amp__f32_view(x, &ox);
        p = px ? amp__ws_alloc(pb) : NULL;
        if (p) amp_k_softmax(px, N, C, L, p, false);
        if (px) amp__f32_done(x, px, ox);
    }
    if (!pg || (w && !pw) || (a->ce && !p)) {
        if (pg) amp__f32_done(g, pg, og);
        if (pw) amp__f32_done(w, pw, ow);
        amp__ws_free(t, (size_t)(ns ? ns : 1) * sizeof(int64_t));
        amp__release(gx);
        return amp_last_status();
    }
    float *q = amp__data(gx);
    double ca = 1.0 - a->smoothing, cb = a->smoothing / (double)C, wsum = 0;
    if (a->ce && cb != 0)
        for (int64_t k = 0; k < C; k++) wsum += pw ? pw[k] : 1.0;
    for (int64_t nn = 0; nn < N; nn++) {
        for (int64_t l = 0; l < L; l++) {
            int64_t i = nn * L + l, ti = t[i];
            if (ti == a->ignore_index) continue;
            double gi = sample_grad(a->reduction, W, pg, i);
            double wt = pw ? pw[ti] : 1.0;
            float *qc = q + nn * C * L + l;
            if (!a->ce) {
                qc[ti * L] = (float)(-wt * gi);
                continue;
            }
            const float *pc = p + nn * C * L + l;
            for (int64_t k = 0; k < C; k++) {
                double pk = pc[k * L];
                double d = ca * wt * (pk - (k == ti ? 1.0 : 0.0));
                if (cb != 0) d += cb * (pk * wsum - (pw ? pw[k] : 1.0));
                qc[k * L] = (float)(gi * d);
            }
        }
    }
    amp__f32_done(g, pg, og);
    if (pw) amp__f32_done(w, pw, ow);
    amp__ws_free(p, pb);
    amp__ws_free(t, (size_t)(ns ? ns : 1) * sizeof(int64_t));
    *gxo = gx;
    return AMP_OK;
}

static amp_status amp__cpu_class_loss(const char *fn, const amp_cls_args *a, const amp_tensor *x,
                                      const amp_tensor *target, const amp_tensor *weight, amp_tensor *out,
                                      amp_tensor *wsum) {
    AMP_UNUSED(fn);
    if (a->rows) return rows_forward(a, x, target, out, wsum);
    return general_forward(a, x, target, weight, out, wsum);
}

static amp_status amp__cpu_class_loss_backward(const char *fn, const amp_cls_args *a, const amp_tensor *x,
                                               const amp_tensor *target, const amp_tensor *weight,
                                               const amp_tensor *wsum, const amp_tensor *g, amp_tensor **gx) {
    AMP_UNUSED(fn);
    double W = *(const double *)amp__data(wsum);
    if (a->rows) return rows_backward(a, x, target, W, g, gx);
    return general_backward(a, x, target, weight, W, g, gx);
}

/* ---- pointwise losses --------------------------------------------------------------------------- */
/* Every term in f32 from the inputs broadcast to the loss shape (a->shape)
 * as contiguous f32 buffers; 'sum'/'mean' add the terms in double
 * (amp_k_sum); the gradients are the upstream gradient times the term's
 * derivative, summed to each input's shape in double. */

/* An f32 tensor wrapper over a buffer (no ownership). */
static void wrap_f32(amp_tensor *t, amp_storage *st, float *buf, int ndim, const int64_t *shape) {
    memset(t, 0, sizeof *t);
    memset(st, 0, sizeof *st);
    st->data = buf;
    t->dtype = AMP_F32;
    t->storage = st;
    t->ndim = ndim;
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    amp__contig_strides(ndim, t->shape, t->stride);
}

/* t's values broadcast to shape, as a contiguous f32 workspace buffer. */
static float *bcast_f32(const amp_tensor *t, int ndim, const int64_t *shape) {
    int64_t n = amp__numel(ndim, shape);
    float *buf = amp__ws_alloc((size_t)(n ? n : 1) * sizeof(float));
    if (!buf) return NULL;
    amp_tensor src = *t;
    src.ndim = ndim;
    memcpy(src.shape, shape, sizeof(int64_t) * (size_t)ndim);
    amp__broadcast_strides(t, ndim, shape, src.stride);
    amp_tensor dst;
    amp_storage st;
    wrap_f32(&dst, &st, buf, ndim, shape);
    if (amp__copy_convert(&dst, &src) != AMP_OK) {
        amp__ws_free(buf, (size_t)(n ? n : 1) * sizeof(float));
        return NULL;
    }
    return buf;
}

static inline float sgnf(float d) { return d > 0 ? 1.0f : d < 0 ? -1.0f : 0.0f; }
/* log(1 + exp(-x)), stable */
static inline float softplus_neg(float x) { return log1pf(expf(-fabsf(x))) + fmaxf(-x, 0.0f); }

static float pw_value(const amp_pw_args *c, float x, float y, float pw) {
    float d = x - y;
    switch (c->kind) {
    case AMP_PW_MSE: return d * d;
    case AMP_PW_L1: return fabsf(d);
    case AMP_PW_SMOOTH_L1: {
        float ad = fabsf(d), beta = (float)c->beta;
        return ad < beta ? 0.5f * d * d / beta : ad - 0.5f * beta;
    }
    case AMP_PW_BCE: {
        float lw = 1.0f + (pw - 1.0f) * y;
        return (1.0f - y) * x + lw * softplus_neg(x);
    }
    case AMP_PW_KL:
        if (c->log_target) return expf(y) * (y - x);
        return (y == 0 ? 0.0f : y * logf(y)) - y * x;
    }
    return 0;
}

/* d loss / d input (which = 0), d target (1), d pos_weight (2). */
static float pw_grad(const amp_pw_args *c, int which, float x, float y, float pw) {
    float d = x - y;
    switch (c->kind) {
    case AMP_PW_MSE: return which == 0 ? 2 * d : -2 * d;
    case AMP_PW_L1: return which == 0 ? sgnf(d) : -sgnf(d);
    case AMP_PW_SMOOTH_L1: {
        float beta = (float)c->beta;
        float gx = fabsf(d) < beta ? d / beta : sgnf(d);
        return which == 0 ? gx : -gx;
    }
    case AMP_PW_BCE: {
        float sp = softplus_neg(x);
        if (which == 0) {
            float lw = 1.0f + (pw - 1.0f) * y;
            /* sigmoid(-x), stable */
            float s = x >= 0 ? expf(-x) / (1.0f + expf(-x)) : 1.0f / (1.0f + expf(x));
            return (1.0f - y) - lw * s;
        }
        if (which == 1) return -x + (pw - 1.0f) * sp;
        return y * sp;
    }
    case AMP_PW_KL:
        if (c->log_target) return which == 0 ? -expf(y) : expf(y) * (y - x + 1.0f);
        if (which == 0) return -y;
        return y == 0 ? 0.0f : logf(y) + 1.0f - x;
    }
    return 0;
}

static amp_status amp__cpu_pw_loss(const char *fn, const amp_pw_args *a, const amp_tensor *x, const amp_tensor *y,
                                   const amp_tensor *pos_weight, amp_tensor *out) {
    AMP_UNUSED(fn);
    int64_t cnt = amp__numel(a->ndim, a->shape);
    size_t nb = (size_t)(cnt ? cnt : 1) * sizeof(float);
    float *bx = bcast_f32(x, a->ndim, a->shape);
    float *by = bx ? bcast_f32(y, a->ndim, a->shape) : NULL;
    float *bp = (by && pos_weight) ? bcast_f32(pos_weight, a->ndim, a->shape) : NULL;
    amp_status st = (!by || (pos_weight && !bp)) ? amp_last_status() : AMP_OK;
    if (st == AMP_OK) {
        for (int64_t i = 0; i < cnt; i++) bx[i] = pw_value(a, bx[i], by[i], bp ? bp[i] : 1.0f);
        if (a->reduction == AMP_REDUCTION_NONE) {
            amp__from_f32(out, bx);
        } else {
            double s = amp_k_sum(bx, cnt);
            if (a->reduction == AMP_REDUCTION_MEAN) s /= (double)cnt;
            amp__store(amp__data(out), out->dtype, s);
        }
    }
    amp__ws_free(bx, nb);
    amp__ws_free(by, nb);
    amp__ws_free(bp, nb);
    return st;
}

static amp_status amp__cpu_pw_loss_backward(const char *fn, const amp_pw_args *a, const amp_tensor *x,
                                            const amp_tensor *y, const amp_tensor *pos_weight, const amp_tensor *g,
                                            const bool *need, amp_tensor **gin) {
    AMP_UNUSED(fn);
    const amp_tensor *ins[3] = {x, y, pos_weight};
    int64_t cnt = amp__numel(a->ndim, a->shape);
    size_t nb = (size_t)(cnt ? cnt : 1) * sizeof(float);
    float *bx = bcast_f32(x, a->ndim, a->shape);
    float *by = bx ? bcast_f32(y, a->ndim, a->shape) : NULL;
    float *bp = (by && pos_weight) ? bcast_f32(pos_weight, a->ndim, a->shape) : NULL;
    bool og = false;
    const float *pg = (by && (!pos_weight || bp)) ? amp__f32_view(g, &og) : NULL;
    float *buf = pg ? amp__ws_alloc(nb) : NULL;
    amp_status st = buf ? AMP_OK : amp_last_status();
    double scale = a->reduction == AMP_REDUCTION_MEAN ? 1.0 / (double)cnt : 1.0;
    for (int k = 0; k < 3 && st == AMP_OK; k++) {
        if (!need[k] || !ins[k]) continue;
        for (int64_t i = 0; i < cnt; i++) {
            float gi = a->reduction == AMP_REDUCTION_NONE ? pg[i] : (float)(pg[0] * scale);
            buf[i] = gi * pw_grad(a, k, bx[i], by[i], bp ? bp[i] : 1.0f);
        }
        const amp_tensor *t = ins[k];
        if (t->ndim == a->ndim && memcmp(t->shape, a->shape, sizeof(int64_t) * (size_t)a->ndim) == 0) {
            /* the loss shape: the values as they are */
            gin[k] = amp__tensor_new("amp_backward", AMP_F32, a->ndim, a->shape, amp__mem_current(AMP_MEM_WORKSPACE), 0);
            if (gin[k]) memcpy(amp__data(gin[k]), buf, (size_t)cnt * sizeof(float));
            else st = amp_last_status();
        } else {
            amp_tensor bt;
            amp_storage bs;
            wrap_f32(&bt, &bs, buf, a->ndim, a->shape);
            st = amp__cpu_sum_to_shape("amp_backward", &bt, t->ndim, t->shape, &gin[k]);
        }
    }
    if (pg) amp__f32_done(g, pg, og);
    amp__ws_free(buf, nb);
    amp__ws_free(bx, nb);
    amp__ws_free(by, nb);
    amp__ws_free(bp, nb);
    return st;
}

const amp_loss_family amp__cpu_loss_family = {
    .class_loss = amp__cpu_class_loss, .class_loss_backward = amp__cpu_class_loss_backward,
    .pw_loss = amp__cpu_pw_loss, .pw_loss_backward = amp__cpu_pw_loss_backward,
};

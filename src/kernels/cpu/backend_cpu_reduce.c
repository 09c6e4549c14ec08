/* The CPU backend's reductions (kernels/backend.h: sum, sum_backward,
 * sum_to_shape, prod, prod_backward, cumsum, max, max_backward, norm,
 * norm_backward): the arithmetic the
 * ops in src/ops/reduce.c and the engine's broadcasting backward had before
 * they dispatched through the backend, moved here unchanged (f32 blocks
 * summed in double, each reduction pass rounded to f32; sum_to_shape sums
 * in double). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/numeric.h"
#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/reduce.h"
#include "tensor/f32_util.h"
#include "tensor/tensor_impl.h"

/* ---- reduce.h's kernels -------------------------------------------------------------------------
 * Reduction kernels: sums, max, products, cumulative sums, broadcast-back.
 * Dispatch to the active CPU path's build of reduce.inc (reduce_scalar.c,
 * reduce_avx2.c and reduce_avx512.c). Deterministic: partial sums are
 * combined in a fixed order, so results depend neither on the number of
 * OpenMP threads nor on the path. */
AMP_K_PATH_DISPATCH(reduce_k, amp_reduce_kernels, amp_reduce_kernels)

double amp_k_sum(const float *x, int64_t n) { return reduce_k()->sum(x, AMP_F32, n); }
double amp_k_sum_any(const void *x, amp_dtype dt, int64_t n) { return reduce_k()->sum(x, dt, n); }

void amp_k_sum_dim(const float *x, int64_t outer, int64_t len, int64_t inner, float *out) {
    reduce_k()->sum_dim(x, AMP_F32, outer, len, inner, out);
}

void amp_k_sum_dim_any(const void *x, amp_dtype dt, int64_t outer, int64_t len, int64_t inner, float *out) {
    reduce_k()->sum_dim(x, dt, outer, len, inner, out);
}

void amp_k_max_dim(const float *x, int64_t outer, int64_t len, int64_t inner, float *out, int64_t *idx) {
    reduce_k()->max_dim(x, outer, len, inner, out, idx);
}

void amp_k_prod_dim(const float *x, int64_t outer, int64_t len, int64_t inner, float *out) {
    reduce_k()->prod_dim(x, outer, len, inner, out);
}

void amp_k_prod_backward(const float *x, const float *g, int64_t outer, int64_t len, int64_t inner, float *gx) {
    reduce_k()->prod_backward(x, g, outer, len, inner, gx);
}

void amp_k_cumsum(const float *x, int64_t outer, int64_t len, int64_t inner, float *out, bool reverse) {
    reduce_k()->cumsum(x, outer, len, inner, out, reverse);
}

void amp_k_broadcast(const float *src, const int64_t *sstride, int ndim, const int64_t *shape, float scale, float *dst) {
    reduce_k()->broadcast(src, sstride, ndim, shape, scale, dst);
}

/* ---- helpers ---------------------------------------------------------------------- */
/* Reduces the contiguous values x (f32, or f16/bf16 for a sum: widened
 * block by block) of `shape` over the dims with red[d] set, innermost
 * reduced group first, each pass rounded to f32 (sums: f32 blocks added in
 * double, kernels/cpu/reduce.h). Returns a workspace buffer of numel(kept)
 * floats; free it with amp__ws_free(p, *nbytes_out). */
enum { AMP_CPU_RED_SUM, AMP_CPU_RED_MAX };
static float *amp__cpu_reduce_multi(const void *x, amp_dtype xdt, int ndim, const int64_t *shape, const bool *red, int op,
                                    size_t *nbytes_out) {
    int64_t sz[AMP_MAX_DIMS];
    bool rd[AMP_MAX_DIMS];
    int nd = 0;
    int64_t n = 1, kept = 1;
    for (int i = 0; i < ndim; i++) {
        n *= shape[i];
        if (!red[i]) kept *= shape[i];
        if (shape[i] == 1) continue;
        if (nd > 0 && rd[nd - 1] == red[i]) {
            sz[nd - 1] *= shape[i];
        } else {
            sz[nd] = shape[i];
            rd[nd] = red[i];
            nd++;
        }
    }
    const void *cur = x;
    amp_dtype cur_dt = xdt;
    float *owned = NULL;
    size_t owned_bytes = 0;
    for (;;) {
        int k = -1;
        for (int i = nd - 1; i >= 0; i--)
            if (rd[i]) {
                k = i;
                break;
            }
        if (k < 0) break;
        int64_t outer = 1, inner = 1;
        for (int i = 0; i < k; i++) outer *= sz[i];
        for (int i = k + 1; i < nd; i++) inner *= sz[i];
        size_t nb = (size_t)(outer * inner) * sizeof(float);
        float *o = amp__ws_alloc(nb);
        if (!o) {
            amp__ws_free(owned, owned_bytes);
            return NULL;
        }
        if (op == AMP_CPU_RED_SUM) amp_k_sum_dim_any(cur, cur_dt, outer, sz[k], inner, o);
        else amp_k_max_dim(cur, outer, sz[k], inner, o, NULL);
        amp__ws_free(owned, owned_bytes);
        cur = owned = o;
        cur_dt = AMP_F32;
        owned_bytes = nb;
        /* drop group k; merge its kept neighbours */
        if (k > 0 && k + 1 < nd) {
            sz[k - 1] *= sz[k + 1];
            for (int i = k; i + 2 < nd; i++) {
                sz[i] = sz[i + 2];
                rd[i] = rd[i + 2];
            }
            nd -= 2;
        } else {
            for (int i = k; i + 1 < nd; i++) {
                sz[i] = sz[i + 1];
                rd[i] = rd[i + 1];
            }
            nd -= 1;
        }
    }
    if (!owned) { /* nothing reduced (or all reduced dims have size 1) */
        owned_bytes = (size_t)kept * sizeof(float);
        owned = amp__ws_alloc(owned_bytes);
        if (!owned) return NULL;
        if (xdt == AMP_F32) memcpy(owned, x, (size_t)n * sizeof(float));
        else amp_convert(owned, AMP_F32, x, xdt, (size_t)n, 0);
    }
    *nbytes_out = owned_bytes;
    return owned;
}

static float *reduce_multi(const float *x, int ndim, const int64_t *shape, const bool *red, int op, size_t *nbytes_out) {
    return amp__cpu_reduce_multi(x, AMP_F32, ndim, shape, red, op, nbytes_out);
}

/* Strides (in elements of the contiguous keepdim-shaped reduced result) that
 * broadcast it back over x's shape: 0 on reduced dims. */
static void amp__cpu_back_strides(int ndim, const int64_t *xshape, const bool *red, int64_t *st) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        if (red[i]) {
            st[i] = 0;
        } else {
            st[i] = s;
            s *= xshape[i];
        }
    }
}

/* The reduced-shape f32 tensor t, broadcast to x's shape times scale, into a
 * new f32 tensor of x's shape. */
static amp_tensor *broadcast_back(const amp_tensor *g, int ndim, const int64_t *xshape, const bool *red, float scale) {
    amp_tensor *gx = amp__f32_grad(ndim, xshape, false);
    if (!gx) return NULL;
    bool owned;
    const float *pg = amp__f32_view(g, &owned);
    if (!pg) {
        amp__release(gx);
        return NULL;
    }
    int64_t st[AMP_MAX_DIMS];
    amp__cpu_back_strides(ndim, xshape, red, st);
    amp_k_broadcast(pg, st, ndim, xshape, scale, amp__data(gx));
    amp__f32_done(g, pg, owned);
    return gx;
}

/* ---- sum / mean ------------------------------------------------------------------- */
static amp_status amp__cpu_sum(const char *fn, const amp_tensor *x, const bool *red, bool mean, amp_tensor *out) {
    AMP_UNUSED(fn);
    int64_t cnt = amp__reduced_count(x, red);
    size_t nb;
    float *r;
    if (amp_tensor_is_contiguous(x) && (x->dtype == AMP_F16 || x->dtype == AMP_BF16)) {
        /* halves straight from x's memory, widened block by block */
        r = amp__cpu_reduce_multi(amp__data(x), x->dtype, x->ndim, x->shape, red, AMP_CPU_RED_SUM, &nb);
    } else {
        bool owned;
        const float *px = amp__f32_view(x, &owned);
        if (!px) return amp_last_status();
        r = reduce_multi(px, x->ndim, x->shape, red, AMP_CPU_RED_SUM, &nb);
        amp__f32_done(x, px, owned);
    }
    if (!r) return amp_last_status();
    int64_t on = amp_tensor_numel(out);
    if (mean)
        for (int64_t i = 0; i < on; i++) r[i] = cnt ? (float)((double)r[i] / (double)cnt) : NAN;
    amp__from_f32(out, r);
    amp__ws_free(r, nb);
    return AMP_OK;
}

static amp_status amp__cpu_sum_backward(const char *fn, const amp_tensor *g, const bool *red, float scale, int ndim,
                                        const int64_t *xshape, amp_tensor **gx) {
    AMP_UNUSED(fn);
    *gx = broadcast_back(g, ndim, xshape, red, scale);
    return *gx ? AMP_OK : amp_last_status();
}

/* ---- sum_to_shape ------------------------------------------------------------------ */
amp_status amp__cpu_sum_to_shape(const char *fn, const amp_tensor *g, int ndim, const int64_t *shape, amp_tensor **res) {
    AMP_UNUSED(fn);
    *res = NULL;
    int64_t tn = amp__numel(ndim, shape);
    double *acc = calloc((size_t)(tn ? tn : 1), sizeof *acc);
    if (!acc) return amp_error(AMP_ERR_NOMEM, "amp_backward: out of memory");
    /* stride of each g dim into the target (0 where broadcast) */
    int64_t tstride[AMP_MAX_DIMS] = {0}, cs[AMP_MAX_DIMS];
    amp__contig_strides(ndim, shape, cs);
    int off = g->ndim - ndim;
    for (int i = 0; i < g->ndim; i++) {
        int ti = i - off;
        tstride[i] = (ti >= 0 && shape[ti] == g->shape[i]) ? cs[ti] : 0;
    }
    bool owned = false;
    const float *pg = NULL;
    const double *pd = NULL; /* f64 gradients are summed from their double values */
    amp_tensor *gd = NULL;
    if (g->dtype == AMP_F64 && amp_tensor_is_contiguous(g)) {
        pd = amp__data(g);
    } else if (g->dtype == AMP_F64) {
        gd = amp__tensor_new("amp_backward", AMP_F64, g->ndim, g->shape, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
        if (gd && amp__copy_convert(gd, g) == AMP_OK) pd = amp__data(gd);
    } else {
        pg = amp__f32_view(g, &owned);
    }
    if (!pg && !pd) {
        amp__release(gd);
        free(acc);
        return amp_last_status();
    }
    int64_t n = amp_tensor_numel(g);
    int64_t idx[AMP_MAX_DIMS] = {0};
    int64_t t = 0;
    for (int64_t f = 0; f < n; f++) {
        acc[t] += pd ? pd[f] : pg[f];
        for (int i = g->ndim - 1; i >= 0; i--) {
            idx[i]++;
            t += tstride[i];
            if (idx[i] < g->shape[i]) break;
            t -= tstride[i] * idx[i];
            idx[i] = 0;
        }
    }
    if (pg) amp__f32_done(g, pg, owned);
    amp__release(gd);
    amp_tensor *out = amp__tensor_new("amp_backward", g->dtype, ndim, shape, amp__mem_current(AMP_MEM_WORKSPACE), 0);
    if (out && g->dtype == AMP_F64) {
        memcpy(amp__data(out), acc, (size_t)tn * sizeof(double));
    } else if (out) {
        float *tmp = amp__ws_alloc((size_t)(tn ? tn : 1) * sizeof(float));
        if (!tmp) {
            amp__release(out);
            out = NULL;
        } else {
            for (int64_t i = 0; i < tn; i++) tmp[i] = (float)acc[i];
            amp__from_f32(out, tmp);
            amp__ws_free(tmp, (size_t)(tn ? tn : 1) * sizeof(float));
        }
    }
    free(acc);
    *res = out;
    return out ? AMP_OK : amp_last_status();
}

/* ---- prod and cumsum over one dim ------------------------------------------------- */
/* f32 views of the inputs, the per-path kernels of kernels/cpu/reduce.h
 * (products in double), each result rounded once to out's dtype */
static void prod_k(const float *x, int64_t outer, int64_t len, int64_t inner, float *out, bool unused) {
    AMP_UNUSED(unused);
    amp_k_prod_dim(x, outer, len, inner, out);
}

/* out = k(x viewed as f32, split (outer, len, inner) around dim) */
static amp_status along_dim(const amp_tensor *x, int dim, amp_tensor *out,
                            void (*k)(const float *, int64_t, int64_t, int64_t, float *, bool), bool flag) {
    int64_t outer, len, inner;
    amp__split_dim(x, dim, &outer, &len, &inner);
    amp__cpu_f32_io io;
    if (!amp__cpu_f32_io_begin(&io, x, out)) return amp_last_status();
    k(io.in, outer, len, inner, io.o, flag);
    amp__cpu_f32_io_end(&io);
    return AMP_OK;
}

static amp_status amp__cpu_prod(const char *fn, const amp_tensor *x, int dim, amp_tensor *out) {
    AMP_UNUSED(fn);
    return along_dim(x, dim, out, prod_k, false);
}

static amp_status amp__cpu_prod_backward(const char *fn, const amp_tensor *x, const amp_tensor *g, int dim,
                                         amp_tensor **gxo) {
    AMP_UNUSED(fn);
    *gxo = NULL;
    int64_t outer, len, inner;
    amp__split_dim(x, dim, &outer, &len, &inner);
    amp_tensor *gx = amp__f32_grad(x->ndim, x->shape, false);
    if (!gx) return amp_last_status();
    bool ox, og;
    const float *px = amp__f32_view(x, &ox);
    const float *pg = px ? amp__f32_view(g, &og) : NULL;
    if (!px || !pg) {
        if (px) amp__f32_done(x, px, ox);
        amp__release(gx);
        return amp_last_status();
    }
    amp_k_prod_backward(px, pg, outer, len, inner, amp__data(gx));
    amp__f32_done(x, px, ox);
    amp__f32_done(g, pg, og);
    *gxo = gx;
    return AMP_OK;
}

static amp_status amp__cpu_cumsum(const char *fn, const amp_tensor *x, int dim, bool reverse, amp_tensor *out) {
    AMP_UNUSED(fn);
    return along_dim(x, dim, out, amp_k_cumsum, reverse);
}

/* ---- max over one dim ------------------------------------------------------------- */
static amp_status amp__cpu_max(const char *fn, const amp_tensor *x, int dim, amp_tensor *out, amp_tensor *idx) {
    AMP_UNUSED(fn);
    int64_t outer, len, inner;
    amp__split_dim(x, dim, &outer, &len, &inner);
    bool owned = false;
    const float *px = amp__f32_view(x, &owned);
    float *po = NULL;
    if (px) po = out->dtype == AMP_F32 ? (float *)amp__data(out) : amp__ws_alloc((size_t)amp_tensor_numel(out) * sizeof(float));
    if (!po) {
        if (px) amp__f32_done(x, px, owned);
        return amp_last_status();
    }
    amp_k_max_dim(px, outer, len, inner, po, amp__data(idx));
    if (out->dtype != AMP_F32) {
        amp__from_f32(out, po);
        amp__ws_free(po, (size_t)amp_tensor_numel(out) * sizeof(float));
    }
    amp__f32_done(x, px, owned);
    return AMP_OK;
}

static amp_status amp__cpu_max_backward(const char *fn, const amp_tensor *idx, const amp_tensor *g, int dim, int ndim,
                                        const int64_t *xshape, amp_tensor **gxo) {
    AMP_UNUSED(fn);
    *gxo = NULL;
    int64_t outer, len, inner;
    amp__split_shape(ndim, xshape, dim, &outer, &len, &inner);
    amp_tensor *gx = amp__f32_grad(ndim, xshape, true);
    if (!gx) return amp_last_status();
    bool og;
    const float *pg = amp__f32_view(g, &og);
    if (!pg) {
        amp__release(gx);
        return amp_last_status();
    }
    const int64_t *pi = amp__data(idx);
    float *q = amp__data(gx);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) q[(o * len + pi[o * inner + i]) * inner + i] += pg[o * inner + i];
    amp__f32_done(g, pg, og);
    *gxo = gx;
    return AMP_OK;
}

/* ---- norm -------------------------------------------------------------------------- */
static amp_status amp__cpu_norm(const char *fn, const amp_tensor *x, double p, const bool *red, amp_tensor *out) {
    AMP_UNUSED(fn);
    int64_t N = amp_tensor_numel(x);
    float *y = amp__to_f32(x);
    if (!y) return amp_last_status();
    int op = AMP_CPU_RED_SUM;
    if (p == 2) {
        for (int64_t i = 0; i < N; i++) y[i] *= y[i];
    } else if (p == 1) {
        for (int64_t i = 0; i < N; i++) y[i] = fabsf(y[i]);
    } else if (p == 0) {
        for (int64_t i = 0; i < N; i++) y[i] = y[i] != 0 ? 1.0f : 0.0f;
    } else if (isinf(p)) {
        op = AMP_CPU_RED_MAX;
        for (int64_t i = 0; i < N; i++) y[i] = p > 0 ? fabsf(y[i]) : -fabsf(y[i]);
    } else {
        for (int64_t i = 0; i < N; i++) y[i] = (float)pow(fabs((double)y[i]), p);
    }
    size_t nb;
    float *r = reduce_multi(y, x->ndim, x->shape, red, op, &nb);
    amp__ws_free(y, (size_t)N * sizeof(float));
    if (!r) return amp_last_status();
    int64_t on = amp_tensor_numel(out);
    for (int64_t i = 0; i < on; i++) {
        if (p == 2) r[i] = sqrtf(r[i]);
        else if (isinf(p) && p < 0) r[i] = -r[i];
        else if (p != 1 && p != 0 && !isinf(p)) r[i] = (float)pow((double)r[i], 1.0 / p);
    }
    amp__from_f32(out, r);
    amp__ws_free(r, nb);
    return AMP_OK;
}

static amp_status amp__cpu_norm_backward(const char *fn, const amp_tensor *x, const amp_tensor *nrm,
                                         const amp_tensor *g, double p, const bool *red, amp_tensor **gxo) {
    AMP_UNUSED(fn);
    *gxo = NULL;
    amp_status st = AMP_OK;
    if (p == 0) { /* piecewise constant */
        *gxo = amp__f32_grad(x->ndim, x->shape, true);
        return *gxo ? AMP_OK : amp_last_status();
    }
    amp_tensor *gx = broadcast_back(g, x->ndim, x->shape, red, 1.0f);
    amp_tensor *nb = gx ? broadcast_back(nrm, x->ndim, x->shape, red, 1.0f) : NULL;
    bool ox = false;
    const float *px = nb ? amp__f32_view(x, &ox) : NULL;
    if (!px) {
        amp__release(gx);
        amp__release(nb);
        return amp_last_status();
    }
    float *q = amp__data(gx);
    const float *pn = amp__data(nb);
    int64_t N = amp_tensor_numel(x);
    if (p == 2) {
        for (int64_t i = 0; i < N; i++) q[i] = pn[i] == 0 ? 0.0f : q[i] * px[i] / pn[i];
    } else if (p == 1) {
        for (int64_t i = 0; i < N; i++) q[i] = px[i] > 0 ? q[i] : px[i] < 0 ? -q[i] : 0.0f;
    } else if (isinf(p)) {
        /* the gradient is shared evenly by the elements attaining the norm */
        float *m = amp__ws_alloc((size_t)N * sizeof(float));
        if (!m) {
            st = amp_last_status();
            goto out;
        }
        for (int64_t i = 0; i < N; i++) m[i] = (fabsf(px[i]) == pn[i] || isnan(px[i])) ? 1.0f : 0.0f;
        size_t cb;
        float *cnt = reduce_multi(m, x->ndim, x->shape, red, AMP_CPU_RED_SUM, &cb);
        float *pc = cnt ? amp__ws_alloc((size_t)N * sizeof(float)) : NULL;
        if (!pc) {
            amp__ws_free(cnt, cb);
            amp__ws_free(m, (size_t)N * sizeof(float));
            st = amp_last_status();
            goto out;
        }
        int64_t bst[AMP_MAX_DIMS];
        amp__cpu_back_strides(x->ndim, x->shape, red, bst);
        amp_k_broadcast(cnt, bst, x->ndim, x->shape, 1.0f, pc);
        amp__ws_free(cnt, cb);
        for (int64_t i = 0; i < N; i++) {
            float s = px[i] > 0 ? 1.0f : px[i] < 0 ? -1.0f : 0.0f;
            q[i] = m[i] != 0 ? s * q[i] / pc[i] : 0.0f;
        }
        amp__ws_free(pc, (size_t)N * sizeof(float));
        amp__ws_free(m, (size_t)N * sizeof(float));
    } else {
        for (int64_t i = 0; i < N; i++) {
            if (pn[i] == 0 || px[i] == 0) { /* torch: 0 (not 0 * inf) at x = 0 for any p */
                q[i] = 0;
                continue;
            }
            double a = fabs((double)px[i]);
            double s = px[i] > 0 ? 1.0 : px[i] < 0 ? -1.0 : 0.0;
            q[i] = (float)(s * pow(a, p - 1) * q[i] / pow(pn[i], p - 1));
        }
    }
out:
    amp__f32_done(x, px, ox);
    amp__release(nb);
    if (st != AMP_OK) {
        amp__release(gx);
        return st;
    }
    *gxo = gx;
    return AMP_OK;
}

const amp_reduce_family amp__cpu_reduce_family = {
    .sum = amp__cpu_sum, .sum_backward = amp__cpu_sum_backward,
    .sum_to_shape = amp__cpu_sum_to_shape,
    .prod = amp__cpu_prod, .prod_backward = amp__cpu_prod_backward,
    .cumsum = amp__cpu_cumsum,
    .max = amp__cpu_max, .max_backward = amp__cpu_max_backward,
    .norm = amp__cpu_norm, .norm_backward = amp__cpu_norm_backward,
};

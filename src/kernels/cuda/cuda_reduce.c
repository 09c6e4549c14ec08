/* The CUDA backend's reductions (kernels/backend.h: sum, sum_backward,
 * sum_to_shape, max, max_backward, norm, norm_backward): host-side
 * descriptors around reduce_ieee.cu's kernels (launch_reduce.h).
 *
 * Arithmetic: sums, means and norms accumulate in double in a fixed order
 * (deterministic run to run), so they differ from the CPU's (f32 blocks
 * added in double, each pass rounded to f32) by rounding only; the results
 * are rounded to the output dtype as the CPU rounds them (through f32 for
 * halves). max and its indices, and the backward formulas, are the CPU's
 * bit for bit except where they call pow. tests/test_cuda_ops_core.c states
 * the bounds. */
#include <math.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/launch_reduce.h"

extern const amp_backend amp__cuda_table; /* cuda_backend.c */
amp_status amp__cu_memset(void *p, int byte, size_t n); /* cuda_ctx.c */

static amp_status run_reduce(const char *fn, const amp_cu_reduce_args *a) {
    size_t nb = amp_cu_reduce_scratch(a);
    void *scr = NULL;
    if (nb) {
        scr = amp__cu_scratch(nb);
        if (!scr) return amp_last_status();
    }
    amp_status st = AMP_CU(fn, amp_cu_reduce(amp__cu.stream, a, scr));
    if (scr) amp__cu_scratch_free(scr); /* one stream: later work cannot overtake the kernels using it */
    return st;
}

/* x's dims split into kept (red[d] false) and reduced ones */
static void split_red(amp_cu_reduce_args *a, const amp_tensor *x, const bool *red) {
    memset(a, 0, sizeof *a);
    a->x = amp__data(x);
    a->x_dtype = (int)x->dtype;
    for (int i = 0; i < x->ndim; i++) {
        if (red[i]) {
            a->rshape[a->nr] = x->shape[i];
            a->rstride[a->nr++] = x->stride[i];
        } else {
            a->kshape[a->nk] = x->shape[i];
            a->kstride[a->nk++] = x->stride[i];
        }
    }
}

/* Strides that show t (a reduction's result: x's shape without, or with
 * size-1, reduced dims) at x's rank: 0 on the reduced dims. */
static void reduced_view_strides(const amp_tensor *t, int ndim, const bool *red, int64_t *st) {
    for (int i = 0, j = 0; i < ndim; i++) {
        if (t->ndim == ndim) st[i] = red[i] ? 0 : t->stride[i];
        else st[i] = red[i] ? 0 : t->stride[j++];
    }
}

static amp_tensor *f32_grad(int ndim, const int64_t *shape) {
    return amp__tensor_new_on("amp_backward", AMP_DEVICE_CUDA, AMP_F32, ndim, shape, amp__mem_current(AMP_MEM_WORKSPACE),
                              AMP_NEW_UNSCOPED);
}

/* ---- sum / mean ------------------------------------------------------------------------ */
amp_status amp__cu_sum(const char *fn, const amp_tensor *x, const bool *red, bool mean, amp_tensor *out) {
    amp_cu_reduce_args a;
    split_red(&a, x, red);
    double cnt = 1;
    for (int i = 0; i < a.nr; i++) cnt *= (double)a.rshape[i];
    a.post = mean ? AMP_CU_POST_MEAN : AMP_CU_POST_NONE;
    a.count = cnt;
    a.out = amp__data(out);
    a.out_dtype = (int)out->dtype;
    a.via_f32 = out->dtype != AMP_F64;
    return run_reduce(fn, &a);
}

amp_status amp__cu_sum_backward(const char *fn, const amp_tensor *g, const bool *red, float scale, int ndim,
                                const int64_t *xshape, amp_tensor **gx) {
    *gx = NULL;
    amp_tensor *t = f32_grad(ndim, xshape);
    if (!t) return amp_last_status();
    /* g broadcast back times scale: the elementwise kernel's f32 product,
     * the CPU's amp_k_broadcast bit for bit */
    amp_ew_operand in;
    memset(&in, 0, sizeof in);
    in.data = amp__data(g);
    in.dtype = g->dtype;
    reduced_view_strides(g, ndim, red, in.stride);
    amp_ew_params p;
    memset(&p, 0, sizeof p);
    p.s0 = scale;
    amp_status st = amp__cuda_table.ew->ew(fn, AMP_EW_MUL_S, &p, ndim, xshape, amp__data(t), AMP_F32, 1, &in);
    if (st != AMP_OK) {
        amp__release(t);
        return st;
    }
    *gx = t;
    return AMP_OK;
}

/* ---- sum_to_shape ----------------------------------------------------------------------- */
amp_status amp__cu_sum_to_shape(const char *fn, const amp_tensor *g, int ndim, const int64_t *shape, amp_tensor **out) {
    *out = NULL;
    amp_cu_reduce_args a;
    memset(&a, 0, sizeof a);
    a.x = amp__data(g);
    a.x_dtype = (int)g->dtype;
    int off = g->ndim - ndim;
    bool ok = off >= 0;
    for (int i = 0; ok && i < g->ndim; i++) {
        int ti = i - off;
        if (ti >= 0 && shape[ti] == g->shape[i]) {
            a.kshape[a.nk] = g->shape[i];
            a.kstride[a.nk++] = g->stride[i];
        } else if (ti < 0 || shape[ti] == 1) {
            a.rshape[a.nr] = g->shape[i];
            a.rstride[a.nr++] = g->stride[i];
        } else {
            ok = false;
        }
    }
    if (!ok) {
        char b1[AMP_SHAPE_BUF], b2[AMP_SHAPE_BUF];
        return amp_error(AMP_ERR_SHAPE, "%s: internal error: a gradient of shape %s cannot be summed to shape %s", fn,
                         amp__shape_fmt(g->ndim, g->shape, b1, sizeof b1), amp__shape_fmt(ndim, shape, b2, sizeof b2));
    }
    /* made as the CPU entry makes it: scoped outside the engine */
    amp_tensor *o = amp__tensor_new_on(fn, AMP_DEVICE_CUDA, g->dtype, ndim, shape, amp__mem_current(AMP_MEM_WORKSPACE), 0);
    if (!o) return amp_last_status();
    a.out = amp__data(o);
    a.out_dtype = (int)g->dtype;
    a.via_f32 = g->dtype != AMP_F64;
    amp_status st = run_reduce(fn, &a);
    if (st != AMP_OK) {
        amp__release(o);
        return st;
    }
    *out = o;
    return AMP_OK;
}

/* ---- max over one dim ------------------------------------------------------------------- */
static void split_at(int ndim, const int64_t *shape, int d, int64_t *outer, int64_t *len, int64_t *inner) {
    int64_t o = 1, n = 1, in = 1;
    for (int i = 0; i < ndim; i++) {
        if (i < d) o *= shape[i];
        else if (i == d) n = shape[i];
        else in *= shape[i];
    }
    *outer = o;
    *len = n;
    *inner = in;
}

amp_status amp__cu_max(const char *fn, const amp_tensor *x, int dim, amp_tensor *out, amp_tensor *idx) {
    amp_cu_argmax_args a;
    memset(&a, 0, sizeof a);
    a.x = amp__data(x);
    a.x_dtype = (int)x->dtype;
    a.len = 1;
    for (int i = 0; i < x->ndim; i++) {
        if (i == dim) {
            a.len = x->shape[i];
            a.len_stride = x->stride[i];
        } else {
            a.kshape[a.nk] = x->shape[i];
            a.kstride[a.nk++] = x->stride[i];
        }
    }
    a.out = amp__data(out);
    a.out_dtype = (int)out->dtype;
    a.idx = (long long *)amp__data(idx);
    return AMP_CU(fn, amp_cu_argmax(amp__cu.stream, &a));
}

amp_status amp__cu_max_backward(const char *fn, const amp_tensor *idx, const amp_tensor *g, int dim, int ndim,
                                const int64_t *xshape, amp_tensor **gx) {
    *gx = NULL;
    if (idx->dtype != AMP_I64 || !amp_tensor_is_contiguous(idx))
        return amp_error(AMP_ERR_STATE, "%s: internal error: max's saved indices are not contiguous i64", fn);
    int64_t outer, len, inner;
    split_at(ndim, xshape, dim, &outer, &len, &inner);
    amp_tensor *t = f32_grad(ndim, xshape);
    if (!t) return amp_last_status();
    amp_cu_tensor gd = amp__cu_desc(g);
    amp_status st = amp__cu_memset(amp__data(t), 0, (size_t)amp_tensor_numel(t) * sizeof(float));
    if (st == AMP_OK)
        st = AMP_CU(fn, amp_cu_argmax_backward(amp__cu.stream, amp__data(t), outer, len, inner,
                                               (const long long *)amp__data(idx), &gd));
    if (st != AMP_OK) {
        amp__release(t);
        return st;
    }
    *gx = t;
    return AMP_OK;
}

/* ---- norm -------------------------------------------------------------------------------- */
amp_status amp__cu_norm(const char *fn, const amp_tensor *x, double p, const bool *red, amp_tensor *out) {
    amp_cu_reduce_args a;
    split_red(&a, x, red);
    a.p = p;
    if (p == 2) {
        a.pre = AMP_CU_PRE_SQUARE;
        a.post = AMP_CU_POST_SQRT;
    } else if (p == 1) {
        a.pre = AMP_CU_PRE_ABS;
    } else if (p == 0) {
        a.pre = AMP_CU_PRE_NONZERO;
    } else if (isinf(p)) {
        a.max = 1;
        a.pre = p > 0 ? AMP_CU_PRE_ABS : AMP_CU_PRE_NEGABS;
        a.post = p > 0 ? AMP_CU_POST_NONE : AMP_CU_POST_NEG;
    } else {
        a.pre = AMP_CU_PRE_POW;
        a.post = AMP_CU_POST_ROOT;
    }
    a.out = amp__data(out);
    a.out_dtype = (int)out->dtype;
    a.via_f32 = out->dtype != AMP_F64;
    return run_reduce(fn, &a);
}

amp_status amp__cu_norm_backward(const char *fn, const amp_tensor *x, const amp_tensor *nrm, const amp_tensor *g,
                                 double p, const bool *red, amp_tensor **gx) {
    *gx = NULL;
    amp_tensor *t = f32_grad(x->ndim, x->shape);
    if (!t) return amp_last_status();
    size_t tn = (size_t)amp_tensor_numel(t);
    amp_status st = AMP_OK;
    float *cnt = NULL;
    if (p == 0) { /* piecewise constant */
        st = amp__cu_memset(amp__data(t), 0, tn * sizeof(float));
        goto out;
    }
    amp_cu_norm_bw_args b;
    memset(&b, 0, sizeof b);
    b.ndim = x->ndim;
    for (int i = 0; i < x->ndim; i++) {
        b.shape[i] = x->shape[i];
        b.xstride[i] = x->stride[i];
    }
    b.x = amp__data(x);
    b.x_dtype = (int)x->dtype;
    b.g = amp__data(g);
    b.g_dtype = (int)g->dtype;
    reduced_view_strides(g, x->ndim, red, b.gstride);
    b.nrm = amp__data(nrm);
    b.nrm_dtype = (int)nrm->dtype;
    reduced_view_strides(nrm, x->ndim, red, b.nstride);
    b.p = p;
    b.gx = amp__data(t);
    if (isinf(p)) {
        /* how many elements attain each norm (the gradient is shared evenly) */
        amp_cu_reduce_args a;
        split_red(&a, x, red);
        int64_t kept = 1;
        for (int i = 0; i < a.nk; i++) kept *= a.kshape[i];
        cnt = amp__cu_scratch((size_t)(kept > 0 ? kept : 1) * sizeof(float));
        if (!cnt) {
            st = amp_last_status();
            goto out;
        }
        if (amp_tensor_numel(nrm) != kept || !amp_tensor_is_contiguous(nrm)) {
            st = amp_error(AMP_ERR_STATE, "%s: internal error: the saved norm is not a contiguous reduction of x", fn);
            goto out;
        }
        a.pre = AMP_CU_PRE_ATTAIN;
        a.aux = amp__data(nrm);
        a.aux_dtype = (int)nrm->dtype;
        a.out = cnt;
        a.out_dtype = AMP_F32;
        a.via_f32 = 1;
        st = run_reduce(fn, &a);
        if (st != AMP_OK) goto out;
        int64_t s = 1;
        for (int i = x->ndim - 1; i >= 0; i--) {
            if (red[i]) {
                b.cstride[i] = 0;
            } else {
                b.cstride[i] = s;
                s *= x->shape[i];
            }
        }
        b.cnt = cnt;
    }
    st = AMP_CU(fn, amp_cu_norm_backward(amp__cu.stream, &b));
out:
    if (cnt) amp__cu_scratch_free(cnt);
    if (st != AMP_OK) {
        amp__release(t);
        return st;
    }
    *gx = t;
    return AMP_OK;
}

/* The CUDA backend's normalisation, softmax and class-loss entries
 * (kernels/backend.h) around the launchers of launch_norm.h: inputs with
 * other strides are first copied to contiguous scratch of their dtype (the
 * kernels read rows of f32, f16 or bf16 and widen them as they load);
 * outputs are the caller's contiguous tensors; gradients are new tensors on
 * the device. Everything is queued on the backend's stream; nothing waits. */
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_norm.h"
#include "kernels/cuda/launch_norm.h"

static bool half_or_f32(amp_dtype dt) { return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16; }

static amp_status dtype_error(const char *fn, const char *what, amp_dtype dt) {
    return amp_error(AMP_ERR_DTYPE, "%s: %s has dtype %s; the CUDA kernels take f32, f16 or bf16", fn, what,
                     amp_dtype_name(dt));
}

/* t's data as contiguous device memory of its dtype: its own memory, or a
 * copy in backend scratch (*tmp, freed with amp__cu_scratch_free; the
 * stream orders the free after the kernels queued before it). */
static amp_status contig(const char *fn, const amp_tensor *t, const void **p, void **tmp) {
    *tmp = NULL;
    if (amp_tensor_is_contiguous(t)) {
        *p = amp__data(t);
        return AMP_OK;
    }
    int64_t n = amp_tensor_numel(t);
    size_t nb = (size_t)(n ? n : 1) * amp_dtype_size(t->dtype);
    void *s = amp__cu_scratch(nb);
    if (!s) return amp_last_status();
    amp_cu_tensor d, src = amp__cu_desc(t);
    memset(&d, 0, sizeof d);
    d.p = s;
    d.dtype = (int)t->dtype;
    d.ndim = t->ndim;
    int64_t st = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        d.shape[i] = t->shape[i];
        d.stride[i] = st;
        st *= t->shape[i];
    }
    amp_status r = AMP_CU(fn, amp_cu_copy(amp__cu.stream, &d, &src));
    if (r != AMP_OK) {
        amp__cu_scratch_free(s);
        return r;
    }
    *p = s;
    *tmp = s;
    return AMP_OK;
}

static void tmp_free(void *p) {
    if (p) amp__cu_scratch_free(p);
}

/* a new gradient tensor on the device (unscoped, category from the context) */
static amp_tensor *grad_new(amp_dtype dt, int nd, const int64_t *shape) {
    return amp__tensor_new_on("amp_backward", AMP_DEVICE_CUDA, dt, nd, shape, amp__mem_current(AMP_MEM_WORKSPACE),
                              AMP_NEW_UNSCOPED);
}

static void split_dim(const amp_tensor *x, int d, int64_t *outer, int64_t *len, int64_t *inner) {
    int64_t o = 1, n = 1, in = 1;
    for (int i = 0; i < x->ndim; i++) {
        if (i < d) o *= x->shape[i];
        else if (i == d) n = x->shape[i];
        else in *= x->shape[i];
    }
    *outer = o, *len = n, *inner = in;
}

/* ---- layer_norm ---------------------------------------------------------------------------- */
amp_status amp__cu_layer_norm(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                              const amp_tensor *b, amp_tensor *y, amp_tensor *mean, amp_tensor *rstd) {
    if (!half_or_f32(x->dtype)) return dtype_error(fn, "x", x->dtype);
    if (!half_or_f32(y->dtype)) return dtype_error(fn, "the output", y->dtype);
    const void *px = NULL, *pw = NULL, *pb = NULL;
    void *tx = NULL, *tw = NULL, *tb = NULL;
    amp_status st = contig(fn, x, &px, &tx);
    if (st == AMP_OK && w) st = contig(fn, w, &pw, &tw);
    if (st == AMP_OK && b) st = contig(fn, b, &pb, &tb);
    if (st == AMP_OK) {
        amp_cu_ln_args la;
        memset(&la, 0, sizeof la);
        la.x = px, la.xdt = (int)x->dtype;
        la.w = pw, la.wdt = w ? (int)w->dtype : (int)AMP_F32;
        la.b = pb, la.bdt = b ? (int)b->dtype : (int)AMP_F32;
        la.y = amp__data(y), la.ydt = (int)y->dtype;
        la.mean = amp__data(mean), la.rstd = amp__data(rstd);
        la.M = a->M, la.D = a->D, la.eps = a->eps;
        st = AMP_CU(fn, amp_cu_layer_norm(amp__cu.stream, &la));
    }
    tmp_free(tx);
    tmp_free(tw);
    tmp_free(tb);
    return st;
}

amp_status amp__cu_layer_norm_backward(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                                       const amp_tensor *mean, const amp_tensor *rstd, const amp_tensor *g,
                                       const bool *need, amp_tensor **gin) {
    for (int i = 0; i < 3; i++) gin[i] = NULL;
    if (!half_or_f32(x->dtype)) return dtype_error(fn, "x", x->dtype);
    if (!half_or_f32(g->dtype)) return dtype_error(fn, "the upstream gradient", g->dtype);
    const void *px = NULL, *pw = NULL, *pg = NULL;
    void *tx = NULL, *tw = NULL, *tg = NULL;
    float *partial = NULL;
    int lead = x->ndim - a->k;
    amp_status st = contig(fn, x, &px, &tx);
    if (st == AMP_OK && w) st = contig(fn, w, &pw, &tw);
    if (st == AMP_OK) st = contig(fn, g, &pg, &tg);
    for (int i = 0; i < 3 && st == AMP_OK; i++) {
        if (!need[i]) continue;
        gin[i] = i == 0 ? grad_new(AMP_F32, x->ndim, x->shape) : grad_new(AMP_F32, a->k, x->shape + lead);
        if (!gin[i]) st = amp_last_status();
    }
    int nblk = amp_cu_layer_norm_bwd_blocks(a->M, amp__cu.prop.multiProcessorCount);
    if (st == AMP_OK && (need[1] || need[2]) && nblk > 0) {
        size_t nb = (size_t)nblk * 2 * (size_t)(a->D ? a->D : 1) * sizeof(float);
        partial = amp__cu_scratch(nb);
        if (!partial) st = amp_last_status();
    }
    if (st == AMP_OK) {
        amp_cu_ln_bwd_args la;
        memset(&la, 0, sizeof la);
        la.x = px, la.xdt = (int)x->dtype;
        la.g = pg, la.gdt = (int)g->dtype;
        la.w = pw, la.wdt = w ? (int)w->dtype : (int)AMP_F32;
        la.mean = amp__data(mean), la.rstd = amp__data(rstd);
        la.M = a->M, la.D = a->D;
        la.gx = gin[0] ? amp__data(gin[0]) : NULL;
        la.gw = gin[1] ? amp__data(gin[1]) : NULL;
        la.gb = gin[2] ? amp__data(gin[2]) : NULL;
        la.partial = partial;
        la.nblk = nblk;
        st = AMP_CU(fn, amp_cu_layer_norm_backward(amp__cu.stream, &la));
    }
    tmp_free(partial);
    tmp_free(tx);
    tmp_free(tw);
    tmp_free(tg);
    if (st != AMP_OK)
        for (int i = 0; i < 3; i++) {
            amp__release(gin[i]);
            gin[i] = NULL;
        }
    return st;
}

/* ---- softmax --------------------------------------------------------------------------------- */
amp_status amp__cu_softmax(const char *fn, const amp_tensor *x, int dim, bool log, amp_tensor *y) {
    if (!half_or_f32(x->dtype)) return dtype_error(fn, "x", x->dtype);
    if (!half_or_f32(y->dtype)) return dtype_error(fn, "the output", y->dtype);
    const void *px = NULL;
    void *tx = NULL;
    amp_status st = contig(fn, x, &px, &tx);
    if (st == AMP_OK) {
        amp_cu_softmax_args sa;
        memset(&sa, 0, sizeof sa);
        sa.x = px, sa.xdt = (int)x->dtype;
        sa.y = amp__data(y), sa.ydt = (int)y->dtype;
        split_dim(x, dim, &sa.outer, &sa.len, &sa.inner);
        sa.log = log;
        st = AMP_CU(fn, amp_cu_softmax(amp__cu.stream, &sa));
    }
    tmp_free(tx);
    return st;
}

amp_status amp__cu_softmax_backward(const char *fn, const amp_tensor *y, const amp_tensor *g, int dim, bool log,
                                    amp_tensor **gx) {
    *gx = NULL;
    if (!half_or_f32(y->dtype)) return dtype_error(fn, "the saved output", y->dtype);
    if (!half_or_f32(g->dtype)) return dtype_error(fn, "the upstream gradient", g->dtype);
    const void *py = NULL, *pg = NULL;
    void *ty = NULL, *tg = NULL;
    amp_tensor *t = NULL;
    amp_status st = contig(fn, y, &py, &ty);
    if (st == AMP_OK) st = contig(fn, g, &pg, &tg);
    if (st == AMP_OK && !(t = grad_new(AMP_F32, y->ndim, y->shape))) st = amp_last_status();
    if (st == AMP_OK) {
        amp_cu_softmax_bwd_args sa;
        memset(&sa, 0, sizeof sa);
        sa.y = py, sa.ydt = (int)y->dtype;
        sa.g = pg, sa.gdt = (int)g->dtype;
        sa.gx = amp__data(t);
        split_dim(y, dim, &sa.outer, &sa.len, &sa.inner);
        sa.log = log;
        st = AMP_CU(fn, amp_cu_softmax_backward(amp__cu.stream, &sa));
    }
    tmp_free(ty);
    tmp_free(tg);
    if (st != AMP_OK) {
        amp__release(t);
        return st;
    }
    *gx = t;
    return AMP_OK;
}

/* ---- class-index losses ------------------------------------------------------------------------- */
static amp_status general_missing(const char *fn) {
    return amp_error(AMP_ERR_UNSUPPORTED,
                     "%s: class weights, label smoothing, nll_loss and (N, C, d1, ...) inputs are not implemented on cuda "
                     "yet (the row path is: [N, C] contiguous logits without weights or smoothing; docs/cuda.md)",
                     fn);
}

amp_status amp__cu_class_loss(const char *fn, const amp_cls_args *a, const amp_tensor *x, const amp_tensor *target,
                              const amp_tensor *weight, amp_tensor *out, amp_tensor *wsum) {
    AMP_UNUSED(weight);
    if (!a->rows) return general_missing(fn);
    if (!half_or_f32(x->dtype)) return dtype_error(fn, "logits", x->dtype);
    if (!amp_tensor_is_contiguous(x) || !amp_tensor_is_contiguous(out) || target->ndim != 1)
        return amp_error(AMP_ERR_ARG, "%s: the row path takes contiguous [N, C] logits and [N] targets", fn);
    size_t nb = (size_t)(a->N ? a->N : 1) * sizeof(double);
    double *li = amp__cu_scratch(nb);
    if (!li) return amp_last_status();
    amp_cu_xent_args xa;
    memset(&xa, 0, sizeof xa);
    xa.x = amp__data(x), xa.xdt = (int)x->dtype;
    xa.t = amp__data(target), xa.tdt = (int)target->dtype, xa.tstride = target->stride[0];
    xa.N = a->N, xa.C = a->C, xa.ignore = a->ignore_index;
    xa.reduction = (int)a->reduction;
    xa.li = li;
    xa.out = amp__data(out), xa.odt = (int)out->dtype;
    xa.wsum = amp__data(wsum);
    amp_status st = AMP_CU(fn, amp_cu_xent_rows(amp__cu.stream, &xa));
    amp__cu_scratch_free(li);
    return st;
}

amp_status amp__cu_class_loss_backward(const char *fn, const amp_cls_args *a, const amp_tensor *x,
                                       const amp_tensor *target, const amp_tensor *weight, const amp_tensor *wsum,
                                       const amp_tensor *g, amp_tensor **gx) {
    AMP_UNUSED(weight);
    *gx = NULL;
    if (!a->rows) return general_missing(fn);
    if (!half_or_f32(x->dtype)) return dtype_error(fn, "logits", x->dtype);
    if (!half_or_f32(g->dtype) && g->dtype != AMP_F64) return dtype_error(fn, "the upstream gradient", g->dtype);
    amp_tensor *t = grad_new(x->dtype, 2, x->shape);
    if (!t) return amp_last_status();
    amp_cu_xent_bwd_args xa;
    memset(&xa, 0, sizeof xa);
    xa.x = amp__data(x), xa.xdt = (int)x->dtype;
    xa.t = amp__data(target), xa.tdt = (int)target->dtype, xa.tstride = target->stride[0];
    xa.N = a->N, xa.C = a->C, xa.ignore = a->ignore_index;
    xa.reduction = (int)a->reduction;
    xa.g = amp__data(g), xa.gdt = (int)g->dtype, xa.gstride = g->ndim == 1 ? g->stride[0] : 0;
    xa.wsum = amp__data(wsum);
    xa.gx = amp__data(t), xa.gxdt = (int)t->dtype;
    amp_status st = AMP_CU(fn, amp_cu_xent_rows_backward(amp__cu.stream, &xa));
    if (st != AMP_OK) {
        amp__release(t);
        return st;
    }
    *gx = t;
    return AMP_OK;
}

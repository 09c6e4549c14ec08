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
#include "tensor/f32_util.h"

static bool half_or_f32(amp_dtype dt) { return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16; }

static amp_status dtype_error(const char *fn, const char *what, amp_dtype dt) {
    return amp_error(AMP_ERR_DTYPE, "%s: %s has dtype %s; the CUDA kernels take f32, f16 or bf16", fn, what,
                     amp_dtype_name(dt));
}

/* t's values copied, converted to dt, into new contiguous backend scratch
 * (*out, freed with amp__cu_scratch_free; the stream orders the free after
 * the kernels queued before it). */
static amp_status scratch_copy(const char *fn, const amp_tensor *t, amp_dtype dt, void **out) {
    int64_t n = amp_tensor_numel(t);
    void *s = amp__cu_scratch((size_t)(n ? n : 1) * amp_dtype_size(dt));
    if (!s) return amp_last_status();
    amp_cu_tensor d, src = amp__cu_desc(t);
    memset(&d, 0, sizeof d);
    d.p = s;
    d.dtype = (int)dt;
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
    *out = s;
    return AMP_OK;
}

/* t's data as contiguous device memory of its dtype: its own memory, or a
 * copy in backend scratch (*tmp, see scratch_copy). */
static amp_status contig(const char *fn, const amp_tensor *t, const void **p, void **tmp) {
    *tmp = NULL;
    if (amp_tensor_is_contiguous(t)) {
        *p = amp__data(t);
        return AMP_OK;
    }
    amp_status r = scratch_copy(fn, t, t->dtype, tmp);
    if (r == AMP_OK) *p = *tmp;
    return r;
}

static void tmp_free(void *p) {
    if (p) amp__cu_scratch_free(p);
}

/* Up to three inputs (x, then w, then b or g) as contiguous device memory
 * (contig), in that order, stopping at the first failure; a NULL tensor's p
 * stays NULL. staged_free frees the copies. */
typedef struct {
    const void *p[3];
    void *tmp[3];
} staged;

static amp_status stage3(const char *fn, const amp_tensor *t0, const amp_tensor *t1, const amp_tensor *t2, staged *s) {
    const amp_tensor *ts[3] = {t0, t1, t2};
    memset(s, 0, sizeof *s);
    amp_status st = AMP_OK;
    for (int i = 0; i < 3 && st == AMP_OK; i++)
        if (ts[i]) st = contig(fn, ts[i], &s->p[i], &s->tmp[i]);
    return st;
}

static void staged_free(staged *s) {
    for (int i = 0; i < 3; i++) tmp_free(s->tmp[i]);
}

/* a new gradient tensor on the device (unscoped, category from the context) */
static amp_tensor *grad_new(amp_dtype dt, int nd, const int64_t *shape) {
    return amp__tensor_new_on("amp_backward", AMP_DEVICE_CUDA, dt, nd, shape, amp__mem_current(AMP_MEM_WORKSPACE),
                              AMP_NEW_UNSCOPED);
}

/* A normalisation's gradients where need[i]: gin[0] of dtype dt0 and x's
 * shape, gin[1] and gin[2] f32 of (nd, shape); stops at the first failure
 * (grads_release frees what was made). */
static amp_status grads_new(const bool *need, amp_dtype dt0, const amp_tensor *x, int nd, const int64_t *shape,
                            amp_tensor **gin) {
    amp_status st = AMP_OK;
    for (int i = 0; i < 3 && st == AMP_OK; i++) {
        if (!need[i]) continue;
        gin[i] = i == 0 ? grad_new(dt0, x->ndim, x->shape) : grad_new(AMP_F32, nd, shape);
        if (!gin[i]) st = amp_last_status();
    }
    return st;
}

static void grads_release(amp_tensor **gin) {
    for (int i = 0; i < 3; i++) {
        amp__release(gin[i]);
        gin[i] = NULL;
    }
}

/* ---- layer_norm ---------------------------------------------------------------------------- */
amp_status amp__cu_layer_norm(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                              const amp_tensor *b, amp_tensor *y, amp_tensor *mean, amp_tensor *rstd) {
    if (!half_or_f32(x->dtype)) return dtype_error(fn, "x", x->dtype);
    if (!half_or_f32(y->dtype)) return dtype_error(fn, "the output", y->dtype);
    staged in; /* x, w, b */
    amp_status st = stage3(fn, x, w, b, &in);
    if (st == AMP_OK) {
        amp_cu_ln_args la;
        memset(&la, 0, sizeof la);
        la.x = in.p[0], la.xdt = (int)x->dtype;
        la.w = in.p[1], la.wdt = w ? (int)w->dtype : (int)AMP_F32;
        la.b = in.p[2], la.bdt = b ? (int)b->dtype : (int)AMP_F32;
        la.y = amp__data(y), la.ydt = (int)y->dtype;
        la.mean = amp__data(mean), la.rstd = amp__data(rstd);
        la.M = a->M, la.D = a->D, la.eps = a->eps;
        st = AMP_CU(fn, amp_cu_layer_norm(amp__cu.stream, &la));
    }
    staged_free(&in);
    return st;
}

amp_status amp__cu_layer_norm_backward(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                                       const amp_tensor *mean, const amp_tensor *rstd, const amp_tensor *g,
                                       const bool *need, amp_tensor **gin) {
    for (int i = 0; i < 3; i++) gin[i] = NULL;
    if (!half_or_f32(x->dtype)) return dtype_error(fn, "x", x->dtype);
    if (!half_or_f32(g->dtype)) return dtype_error(fn, "the upstream gradient", g->dtype);
    staged in; /* x, w, g */
    float *partial = NULL;
    int lead = x->ndim - a->k;
    amp_status st = stage3(fn, x, w, g, &in);
    if (st == AMP_OK) st = grads_new(need, AMP_F32, x, a->k, x->shape + lead, gin);
    int nblk = amp_cu_layer_norm_bwd_blocks(a->M, amp__cu.prop.multiProcessorCount);
    if (st == AMP_OK && (need[1] || need[2]) && nblk > 0) {
        size_t nb = (size_t)nblk * 2 * (size_t)(a->D ? a->D : 1) * sizeof(float);
        partial = amp__cu_scratch(nb);
        if (!partial) st = amp_last_status();
    }
    if (st == AMP_OK) {
        amp_cu_ln_bwd_args la;
        memset(&la, 0, sizeof la);
        la.x = in.p[0], la.xdt = (int)x->dtype;
        la.g = in.p[2], la.gdt = (int)g->dtype;
        la.w = in.p[1], la.wdt = w ? (int)w->dtype : (int)AMP_F32;
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
    staged_free(&in);
    if (st != AMP_OK) grads_release(gin);
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
        amp__split_dim(x, dim, &sa.outer, &sa.len, &sa.inner);
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
        amp__split_dim(y, dim, &sa.outer, &sa.len, &sa.inner);
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

/* the targets as contiguous i64 scratch */
static amp_status targets_i64(const char *fn, const amp_tensor *t, void **out) {
    return scratch_copy(fn, t, AMP_I64, out);
}

static amp_status general_forward(const char *fn, const amp_cls_args *a, const amp_tensor *x, const amp_tensor *target,
                                  const amp_tensor *weight, amp_tensor *out, amp_tensor *wsum) {
    if (!half_or_f32(x->dtype)) return dtype_error(fn, "the input", x->dtype);
    staged in; /* x, weight */
    void *pt = NULL;
    double *scr = NULL;
    int64_t ns = a->N * a->L;
    amp_status st = stage3(fn, x, weight, NULL, &in);
    if (st == AMP_OK) st = targets_i64(fn, target, &pt);
    if (st == AMP_OK && !(scr = amp__cu_scratch(2 * (size_t)(ns ? ns : 1) * sizeof(double)))) st = amp_last_status();
    if (st == AMP_OK) {
        amp_cu_cls_args ca;
        memset(&ca, 0, sizeof ca);
        ca.x = in.p[0], ca.xdt = (int)x->dtype;
        ca.t = pt;
        ca.w = in.p[1], ca.wdt = weight ? (int)weight->dtype : (int)AMP_F32;
        ca.N = a->N, ca.C = a->C, ca.L = a->L, ca.ignore = a->ignore_index;
        ca.smoothing = a->ce ? a->smoothing : 0.0;
        ca.ce = a->ce, ca.reduction = (int)a->reduction;
        ca.li = scr, ca.wt = scr + (ns ? ns : 1);
        ca.out = amp__data(out), ca.odt = (int)out->dtype;
        ca.wsum = amp__data(wsum);
        st = AMP_CU(fn, amp_cu_class_loss(amp__cu.stream, &ca));
    }
    tmp_free(scr);
    tmp_free(pt);
    staged_free(&in);
    return st;
}

static amp_status general_backward(const char *fn, const amp_cls_args *a, const amp_tensor *x, const amp_tensor *target,
                                   const amp_tensor *weight, const amp_tensor *wsum, const amp_tensor *g,
                                   amp_tensor **gx) {
    if (!half_or_f32(x->dtype)) return dtype_error(fn, "the input", x->dtype);
    staged in; /* x, weight, g */
    void *pt = NULL;
    amp_tensor *t = NULL;
    amp_status st = stage3(fn, x, weight, g, &in);
    if (st == AMP_OK) st = targets_i64(fn, target, &pt);
    if (st == AMP_OK && !(t = grad_new(AMP_F32, x->ndim, x->shape))) st = amp_last_status();
    if (st == AMP_OK) {
        amp_cu_cls_bwd_args ca;
        memset(&ca, 0, sizeof ca);
        ca.x = in.p[0], ca.xdt = (int)x->dtype;
        ca.t = pt;
        ca.w = in.p[1], ca.wdt = weight ? (int)weight->dtype : (int)AMP_F32;
        ca.N = a->N, ca.C = a->C, ca.L = a->L, ca.ignore = a->ignore_index;
        ca.smoothing = a->ce ? a->smoothing : 0.0;
        ca.ce = a->ce, ca.reduction = (int)a->reduction;
        ca.g = in.p[2], ca.gdt = (int)g->dtype, ca.gstride = 1;
        ca.wsum = amp__data(wsum);
        ca.gx = amp__data(t);
        st = AMP_CU(fn, amp_cu_class_loss_backward(amp__cu.stream, &ca));
    }
    tmp_free(pt);
    staged_free(&in);
    if (st != AMP_OK) {
        amp__release(t);
        return st;
    }
    *gx = t;
    return AMP_OK;
}

/* ---- class-index losses ------------------------------------------------------------------------- */
amp_status amp__cu_class_loss(const char *fn, const amp_cls_args *a, const amp_tensor *x, const amp_tensor *target,
                              const amp_tensor *weight, amp_tensor *out, amp_tensor *wsum) {
    if (!a->rows) return general_forward(fn, a, x, target, weight, out, wsum);
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
    *gx = NULL;
    if (!a->rows) return general_backward(fn, a, x, target, weight, wsum, g, gx);
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

/* ---- batch_norm, group_norm ------------------------------------------------------------------------ */
amp_status amp__cu_batch_norm(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                              const amp_tensor *b, amp_tensor *running_mean, amp_tensor *running_var, amp_tensor *y,
                              amp_tensor *mean, amp_tensor *rstd) {
    if (!half_or_f32(x->dtype)) return dtype_error(fn, "x", x->dtype);
    if (!half_or_f32(y->dtype)) return dtype_error(fn, "the output", y->dtype);
    if ((running_mean && running_mean->ndim != 1) || (running_var && running_var->ndim != 1))
        return amp_error(AMP_ERR_SHAPE, "%s: running_mean and running_var must be 1-d", fn);
    staged in; /* x, w, b */
    float *var = NULL;
    amp_status st = stage3(fn, x, w, b, &in);
    if (st == AMP_OK && !(var = amp__cu_scratch((size_t)(a->C ? a->C : 1) * sizeof(float)))) st = amp_last_status();
    if (st == AMP_OK) {
        amp_cu_bn_args ba;
        memset(&ba, 0, sizeof ba);
        ba.x = in.p[0], ba.xdt = (int)x->dtype;
        ba.w = in.p[1], ba.wdt = w ? (int)w->dtype : (int)AMP_F32;
        ba.b = in.p[2], ba.bdt = b ? (int)b->dtype : (int)AMP_F32;
        if (running_mean && running_var) {
            /* counted, and undone if the step is skipped (written on the
             * device only when every new value is finite) */
            if (a->training) {
                amp_tensor_will_modify(running_mean);
                amp_tensor_will_modify(running_var);
            }
            ba.rm = amp__data(running_mean), ba.rmdt = (int)running_mean->dtype, ba.rms = running_mean->stride[0];
            ba.rv = amp__data(running_var), ba.rvdt = (int)running_var->dtype, ba.rvs = running_var->stride[0];
        }
        ba.y = amp__data(y), ba.ydt = (int)y->dtype;
        ba.mean = amp__data(mean), ba.rstd = amp__data(rstd), ba.var = var;
        ba.N = a->N, ba.C = a->C, ba.L = a->L;
        ba.eps = a->eps, ba.momentum = a->momentum;
        ba.training = a->training;
        st = AMP_CU(fn, amp_cu_batch_norm(amp__cu.stream, &ba));
    }
    tmp_free(var);
    staged_free(&in);
    return st;
}

amp_status amp__cu_batch_norm_backward(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                                       const amp_tensor *mean, const amp_tensor *rstd, const amp_tensor *g,
                                       const bool *need, amp_tensor **gin) {
    for (int i = 0; i < 3; i++) gin[i] = NULL;
    if (!half_or_f32(x->dtype)) return dtype_error(fn, "x", x->dtype);
    if (!half_or_f32(g->dtype)) return dtype_error(fn, "the upstream gradient", g->dtype);
    staged in; /* x, w, g */
    double *sums = NULL;
    int64_t cs[1] = {a->C};
    amp_status st = stage3(fn, x, w, g, &in);
    /* gx in x's dtype: the f32 result rounded once, as the cast of an f32 gradient would be */
    if (st == AMP_OK) st = grads_new(need, x->dtype, x, 1, cs, gin);
    if (st == AMP_OK && !(sums = amp__cu_scratch(2 * (size_t)(a->C ? a->C : 1) * sizeof(double)))) st = amp_last_status();
    if (st == AMP_OK) {
        amp_cu_bn_bwd_args ba;
        memset(&ba, 0, sizeof ba);
        ba.x = in.p[0], ba.xdt = (int)x->dtype;
        ba.g = in.p[2], ba.gdt = (int)g->dtype;
        ba.w = in.p[1], ba.wdt = w ? (int)w->dtype : (int)AMP_F32;
        ba.mean = amp__data(mean), ba.rstd = amp__data(rstd);
        ba.N = a->N, ba.C = a->C, ba.L = a->L, ba.training = a->training;
        ba.sg = sums, ba.sgx = sums + (a->C ? a->C : 1);
        ba.gx = gin[0] ? amp__data(gin[0]) : NULL, ba.gxdt = (int)x->dtype;
        ba.gw = gin[1] ? amp__data(gin[1]) : NULL;
        ba.gb = gin[2] ? amp__data(gin[2]) : NULL;
        st = AMP_CU(fn, amp_cu_batch_norm_backward(amp__cu.stream, &ba));
    }
    tmp_free(sums);
    staged_free(&in);
    if (st != AMP_OK) grads_release(gin);
    return st;
}

amp_status amp__cu_group_norm(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                              const amp_tensor *b, amp_tensor *y, amp_tensor *mean, amp_tensor *rstd) {
    if (!half_or_f32(x->dtype)) return dtype_error(fn, "x", x->dtype);
    if (!half_or_f32(y->dtype)) return dtype_error(fn, "the output", y->dtype);
    staged in; /* x, w, b */
    amp_status st = stage3(fn, x, w, b, &in);
    if (st == AMP_OK) {
        amp_cu_gn_args ga;
        memset(&ga, 0, sizeof ga);
        ga.x = in.p[0], ga.xdt = (int)x->dtype;
        ga.w = in.p[1], ga.wdt = w ? (int)w->dtype : (int)AMP_F32;
        ga.b = in.p[2], ga.bdt = b ? (int)b->dtype : (int)AMP_F32;
        ga.y = amp__data(y), ga.ydt = (int)y->dtype;
        ga.mean = amp__data(mean), ga.rstd = amp__data(rstd);
        ga.N = a->N, ga.C = a->C, ga.L = a->L, ga.G = a->G, ga.eps = a->eps;
        st = AMP_CU(fn, amp_cu_group_norm(amp__cu.stream, &ga));
    }
    staged_free(&in);
    return st;
}

amp_status amp__cu_group_norm_backward(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                                       const amp_tensor *mean, const amp_tensor *rstd, const amp_tensor *g,
                                       const bool *need, amp_tensor **gin) {
    for (int i = 0; i < 3; i++) gin[i] = NULL;
    if (!half_or_f32(x->dtype)) return dtype_error(fn, "x", x->dtype);
    if (!half_or_f32(g->dtype)) return dtype_error(fn, "the upstream gradient", g->dtype);
    staged in; /* x, w, g */
    int64_t cs[1] = {a->C};
    amp_status st = stage3(fn, x, w, g, &in);
    if (st == AMP_OK) st = grads_new(need, AMP_F32, x, 1, cs, gin);
    if (st == AMP_OK) {
        amp_cu_gn_bwd_args ga;
        memset(&ga, 0, sizeof ga);
        ga.x = in.p[0], ga.xdt = (int)x->dtype;
        ga.g = in.p[2], ga.gdt = (int)g->dtype;
        ga.w = in.p[1], ga.wdt = w ? (int)w->dtype : (int)AMP_F32;
        ga.mean = amp__data(mean), ga.rstd = amp__data(rstd);
        ga.N = a->N, ga.C = a->C, ga.L = a->L, ga.G = a->G;
        ga.gx = gin[0] ? amp__data(gin[0]) : NULL;
        ga.gw = gin[1] ? amp__data(gin[1]) : NULL;
        ga.gb = gin[2] ? amp__data(gin[2]) : NULL;
        st = AMP_CU(fn, amp_cu_group_norm_backward(amp__cu.stream, &ga));
    }
    staged_free(&in);
    if (st != AMP_OK) grads_release(gin);
    return st;
}

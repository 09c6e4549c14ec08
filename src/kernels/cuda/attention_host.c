/* The CUDA backend's fused attention entries (kernels/backend.h: attention,
 * attention_backward): operand descriptors around attention.cu's kernels.
 * q, k, v are read where they are (any batch strides, e.g. the GPT's
 * [B, nh, T, hs] views of its fused qkv projection, rows 3C apart); only an
 * operand whose columns are not contiguous is copied first, and a gradient
 * g that is not contiguous f32/f16/bf16. */
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_ops.h"

extern const amp_backend amp__cuda_table; /* cuda_backend.c */

static bool att_dtype_ok(amp_dtype dt) { return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16; }

/* t (a device tensor [..., r, c]) as a kernel operand over the batch dims
 * (nbd of them, broadcast where t has fewer or size 1); a contiguous copy
 * in *tmp when its columns are strided. */
static amp_status att_operand(const char *fn, const amp_tensor *t, int nbd, amp_cu_att_operand *o, amp_tensor **tmp) {
    *tmp = NULL;
    memset(o, 0, sizeof *o);
    if (t->ndim < 2 || t->ndim - 2 > nbd || nbd > AMP_CU_MAX_DIMS)
        return amp_error(AMP_ERR_SHAPE, "%s: attention operand with %d dims over %d batch dims", fn, t->ndim, nbd);
    if (t->stride[t->ndim - 1] != 1 && t->shape[t->ndim - 1] > 1) {
        amp_tensor *c = amp__tensor_new_on(fn, AMP_DEVICE_CUDA, t->dtype, t->ndim, t->shape, AMP_MEM_WORKSPACE,
                                           AMP_NEW_UNSCOPED);
        if (!c) return amp_last_status();
        amp_status st = amp__cuda_table.dev->copy(fn, c, t);
        if (st != AMP_OK) {
            amp__release(c);
            return st;
        }
        *tmp = c;
        t = c;
    }
    o->p = amp__data(t);
    o->dtype = (int)t->dtype;
    int tb = t->ndim - 2;
    for (int d = 0; d < nbd; d++) {
        int td = d - (nbd - tb);
        o->bstride[d] = (td >= 0 && t->shape[td] != 1) ? t->stride[td] : 0;
    }
    o->ld = t->stride[t->ndim - 2];
    return AMP_OK;
}

/* every tensor an entry reads or writes must be device memory (a host
 * pointer would fault in the kernels) */
static amp_status on_cuda(const char *fn, const amp_tensor *const *t, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (t[i] && amp__dev(t[i]) != AMP_DEVICE_CUDA)
            return amp_error(AMP_ERR_ARG, "%s: attention's %s is on %s; the CUDA entry takes cuda tensors only", fn,
                             names[i], amp_device_name(amp__dev(t[i])));
    return AMP_OK;
}

/* the common part of both entries: checks, sizes, q/k/v/bias descriptors */
static amp_status att_setup(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                            const amp_tensor *v, const amp_tensor *bias, amp_cu_att_args *ca, amp_tensor **tmp) {
    memset(ca, 0, sizeof *ca);
    for (int i = 0; i < 4; i++) tmp[i] = NULL;
    const amp_tensor *ts[4] = {q, k, v, bias};
    static const char *const tn[4] = {"q", "k", "v", "bias"};
    if (on_cuda(fn, ts, tn, 4) != AMP_OK) return amp_last_status();
    if (!att_dtype_ok(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype)
        return amp_error(AMP_ERR_DTYPE, "%s: attention on cuda takes f32, f16 or bf16 q, k, v of one dtype (got %s, %s, %s)",
                         fn, amp_dtype_name(q->dtype), amp_dtype_name(k->dtype), amp_dtype_name(v->dtype));
    if (a->group > 1)
        return amp_error(AMP_ERR_UNSUPPORTED,
                         "%s: grouped-query attention (enable_gqa: %lld query heads per key/value head) is not "
                         "implemented on cuda yet", fn, (long long)a->group);
    if (a->E > AMP_CU_ATT_MAX_HEAD || a->Ev > AMP_CU_ATT_MAX_HEAD)
        return amp_error(AMP_ERR_UNSUPPORTED,
                         "%s: head dims above %d are not implemented on cuda yet (E = %lld, Ev = %lld)", fn,
                         AMP_CU_ATT_MAX_HEAD, (long long)a->E, (long long)a->Ev);
    /* one-dimensional grids of nb * tiles blocks (tiles of 32 rows at the smallest) */
    int64_t tiles = ((a->L > a->S ? a->L : a->S) + 31) / 32;
    if (tiles > 0 && a->nb > (int64_t)0x7fffffff / tiles)
        return amp_error(AMP_ERR_UNSUPPORTED, "%s: %lld batch items x %lld rows is too large for one launch on cuda", fn,
                         (long long)a->nb, (long long)(a->L > a->S ? a->L : a->S));
    if (bias && bias->dtype != AMP_F32)
        return amp_error(AMP_ERR_DTYPE, "%s: the attention bias must be f32 (got %s)", fn, amp_dtype_name(bias->dtype));
    const int nbd = q->ndim - 2;
    ca->nb = a->nb;
    ca->L = a->L;
    ca->S = a->S;
    ca->E = a->E;
    ca->Ev = a->Ev;
    ca->nbd = nbd;
    for (int d = 0; d < nbd; d++) ca->bshape[d] = q->shape[d];
    ca->scale = a->scale;
    ca->causal = a->causal;
    ca->dropout = a->dropout_p > 0.0;
    ca->keep = (float)(1.0 - a->dropout_p);
    ca->seed = a->seed;
    ca->offset = a->offset;
    ca->thresh = a->thresh;
    amp_status st = att_operand(fn, q, nbd, &ca->q, &tmp[0]);
    if (st == AMP_OK) st = att_operand(fn, k, nbd, &ca->k, &tmp[1]);
    if (st == AMP_OK) st = att_operand(fn, v, nbd, &ca->v, &tmp[2]);
    if (st == AMP_OK && bias) st = att_operand(fn, bias, nbd, &ca->bias, &tmp[3]);
    return st;
}

static void att_done(amp_tensor **tmp, int n) {
    for (int i = 0; i < n; i++) amp__release(tmp[i]);
}

amp_status amp__cu_attention(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                             const amp_tensor *v, const amp_tensor *bias, amp_tensor *out, amp_tensor *lse) {
    amp_cu_att_args ca;
    amp_tensor *tmp[4];
    amp_status st = att_setup(fn, a, q, k, v, bias, &ca, tmp);
    if (st == AMP_OK) {
        const amp_tensor *ts[2] = {out, lse};
        static const char *const tn[2] = {"out", "lse"};
        st = on_cuda(fn, ts, tn, 2);
    }
    if (st == AMP_OK && a->L > 0 && a->Ev > 0) {
        if (a->S == 0) {
            st = amp__cuda_table.dev->fill(fn, out, 0.0);
        } else {
            ca.out = amp__data(out);
            ca.out_dtype = (int)out->dtype;
            ca.lse = amp__data(lse);
            st = AMP_CU(fn, amp_cu_attention_fwd(amp__cu.stream, &ca));
        }
    }
    att_done(tmp, 4); /* freed in stream order: reused only by work queued after the kernels */
    return st;
}

amp_status amp__cu_attention_backward(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                                      const amp_tensor *v, const amp_tensor *bias, const amp_tensor *out,
                                      const amp_tensor *lse, const amp_tensor *g, amp_tensor **gin) {
    amp_cu_att_args ca;
    amp_tensor *tmp[5] = {NULL, NULL, NULL, NULL, NULL}, *d[3] = {NULL, NULL, NULL};
    float *dsum = NULL;
    amp_status st = att_setup(fn, a, q, k, v, bias, &ca, tmp);
    if (st != AMP_OK) goto done;
    const amp_tensor *ts[3] = {out, lse, g};
    static const char *const tn[3] = {"out", "lse", "gradient"};
    if ((st = on_cuda(fn, ts, tn, 3)) != AMP_OK) goto done;
    const amp_tensor *src[3] = {q, k, v};
    for (int i = 0; i < 3; i++) {
        d[i] = amp__tensor_new_on(fn, AMP_DEVICE_CUDA, AMP_F32, src[i]->ndim, src[i]->shape,
                                  amp__mem_current(AMP_MEM_WORKSPACE), AMP_NEW_UNSCOPED);
        if (!d[i]) {
            st = amp_last_status();
            goto done;
        }
    }
    if (amp_tensor_numel(d[0]) + amp_tensor_numel(d[1]) + amp_tensor_numel(d[2]) > 0) {
        /* d out as the kernels read it: contiguous f32/f16/bf16 */
        if (!amp_tensor_is_contiguous(g) || !att_dtype_ok(g->dtype)) {
            amp_dtype gd = att_dtype_ok(g->dtype) ? g->dtype : AMP_F32;
            tmp[4] = amp__tensor_new_on(fn, AMP_DEVICE_CUDA, gd, g->ndim, g->shape, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
            if (!tmp[4]) {
                st = amp_last_status();
                goto done;
            }
            st = amp__cuda_table.dev->copy(fn, tmp[4], g);
            if (st != AMP_OK) goto done;
            g = tmp[4];
        }
        if (a->S == 0 || a->Ev == 0) {
            /* no weights (or nothing weighted): every gradient is 0 */
            for (int i = 0; i < 3 && st == AMP_OK; i++) st = amp__cuda_table.dev->fill(fn, d[i], 0.0);
        } else if (a->L == 0) {
            for (int i = 1; i < 3 && st == AMP_OK; i++) st = amp__cuda_table.dev->fill(fn, d[i], 0.0);
        } else {
            dsum = amp__cu_scratch((size_t)(a->nb * a->L) * sizeof(float));
            if (!dsum) {
                st = amp_last_status();
                goto done;
            }
            ca.out = amp__data(out);
            ca.out_dtype = (int)out->dtype;
            ca.lse = amp__data(lse);
            ca.dout = amp__data(g);
            ca.dout_dtype = (int)g->dtype;
            ca.dq = amp__data(d[0]);
            ca.dk = amp__data(d[1]);
            ca.dv = amp__data(d[2]);
            ca.dsum = dsum;
            st = AMP_CU(fn, amp_cu_attention_bwd(amp__cu.stream, &ca));
        }
        if (st != AMP_OK) goto done;
    }
    for (int i = 0; i < 3; i++) {
        gin[i] = d[i];
        d[i] = NULL;
    }
done:
    if (dsum) amp__cu_scratch_free(dsum);
    for (int i = 0; i < 3; i++) amp__release(d[i]);
    att_done(tmp, 5);
    return st;
}

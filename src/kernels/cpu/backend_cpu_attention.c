/* The CPU backend's fused attention entries (kernels/backend.h): the
 * operands as the CPU kernel reads them (columns contiguous, else a
 * contiguous copy; per batch item offsets, broadcast batch dims of the bias
 * at offset 0), then kernels/cpu/attention.h's flash-style forward and its
 * recomputing backward. Moved from ops/attention.c unchanged: the same
 * kernel calls on the same buffers, so the results are the same bits. */
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/attention.h"
#include "tensor/tensor_impl.h"

amp_status amp__cpu_attention(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                              const amp_tensor *v, const amp_tensor *bias, amp_tensor *out, amp_tensor *lse);
amp_status amp__cpu_attention_backward(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                                       const amp_tensor *v, const amp_tensor *bias, const amp_tensor *out,
                                       const amp_tensor *lse, const amp_tensor *g, amp_tensor **gin);

/* Offsets of the nb batch items of t ([..., r, c], batch dims nbd) in
 * row-major batch order; bstrides may be broadcast (0). */
static void batch_offsets(const amp_tensor *t, int nbd, const int64_t *bshape, int64_t *off, int64_t nb) {
    int64_t st[AMP_MAX_DIMS] = {0};
    int tb = t->ndim - 2;
    for (int d = 0; d < nbd; d++) {
        int td = d - (nbd - tb);
        st[d] = (td >= 0 && t->shape[td] != 1) ? t->stride[td] : 0;
    }
    for (int64_t b = 0; b < nb; b++) {
        int64_t rem = b, o = t->offset;
        for (int d = nbd - 1; d >= 0; d--) {
            o += (rem % bshape[d]) * st[d];
            rem /= bshape[d];
        }
        off[b] = o - t->offset; /* relative to amp__data(t) */
    }
}

static amp_k_att_in att_in(const amp_tensor *t, const int64_t *boff) {
    return (amp_k_att_in){amp__data(t), t->dtype, boff, t->ndim >= 2 ? t->stride[t->ndim - 2] : 0};
}

/* The operand as the kernel reads it: columns contiguous (else a contiguous
 * copy, *tmp set, not part of the graph). */
static const amp_tensor *kernel_view(const char *fn, const amp_tensor *t, amp_tensor **tmp) {
    *tmp = NULL;
    if (t->stride[t->ndim - 1] == 1 || t->shape[t->ndim - 1] <= 1) return t;
    amp_tensor *c = amp__tensor_new(fn, t->dtype, t->ndim, t->shape, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
    if (!c) return NULL;
    if (amp__copy_convert(c, t) != AMP_OK) {
        amp__release(c);
        return NULL;
    }
    *tmp = c;
    return c;
}

static amp_k_att_args k_args(const amp_att_args *a) {
    return (amp_k_att_args){.nb = a->nb, .L = a->L, .S = a->S, .E = a->E, .Ev = a->Ev, .scale = a->scale,
                            .causal = a->causal, .dropout_p = a->dropout_p, .seed = a->seed, .offset = a->offset,
                            .thresh = a->thresh, .precision = a->precision};
}

/* The kernel views of q, k, v (temporaries in t[0..2]) and the 4 * nb batch
 * offsets (q, k, v, bias) into *boff (malloc'd). */
static amp_status operands(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                           const amp_tensor *v, const amp_tensor *bias, const amp_tensor **kv, amp_tensor **t,
                           int64_t **boff) {
    int64_t nb = a->nb;
    size_t cnt = (size_t)nb * 4 * sizeof(int64_t); /* nb <= numel(q): no overflow */
    t[0] = t[1] = t[2] = NULL;
    *boff = malloc(cnt ? cnt : 1);
    if (!*boff) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    kv[0] = kernel_view(fn, q, &t[0]);
    kv[1] = kv[0] ? kernel_view(fn, k, &t[1]) : NULL;
    kv[2] = kv[1] ? kernel_view(fn, v, &t[2]) : NULL;
    if (!kv[2]) return amp_last_status();
    int nbd = q->ndim - 2;
    batch_offsets(kv[0], nbd, q->shape, *boff, nb);
    batch_offsets(kv[1], nbd, q->shape, *boff + nb, nb);
    batch_offsets(kv[2], nbd, q->shape, *boff + 2 * nb, nb);
    if (bias) batch_offsets(bias, nbd, q->shape, *boff + 3 * nb, nb);
    return AMP_OK;
}

static void operands_done(amp_tensor **t, int64_t *boff) {
    free(boff);
    for (int i = 0; i < 3; i++) amp__release(t[i]);
}

amp_status amp__cpu_attention(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                              const amp_tensor *v, const amp_tensor *bias, amp_tensor *out, amp_tensor *lse) {
    const amp_tensor *kv[3];
    amp_tensor *t[3];
    int64_t *boff = NULL;
    amp_status st = operands(fn, a, q, k, v, bias, kv, t, &boff);
    if (st == AMP_OK) {
        int64_t nb = a->nb;
        amp_k_att_in iq = att_in(kv[0], boff), ik = att_in(kv[1], boff + nb), iv = att_in(kv[2], boff + 2 * nb), ib;
        amp_k_att_args ka = k_args(a);
        if (bias) {
            ib = att_in(bias, boff + 3 * nb);
            ka.bias = &ib;
        }
        st = amp_k_attention_forward(&ka, &iq, &ik, &iv, amp__data(out), out->dtype, amp__data(lse));
    }
    operands_done(t, boff);
    return st;
}

amp_status amp__cpu_attention_backward(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                                       const amp_tensor *v, const amp_tensor *bias, const amp_tensor *out,
                                       const amp_tensor *lse, const amp_tensor *g, amp_tensor **gin) {
    const amp_tensor *kv[3];
    amp_tensor *t[3], *d[3] = {NULL, NULL, NULL};
    int64_t *boff = NULL;
    const float *pg = NULL;
    bool og = false;
    amp_status st = operands(fn, a, q, k, v, bias, kv, t, &boff);
    if (st != AMP_OK) goto out;
    for (int i = 0; i < 3; i++) {
        d[i] = amp__tensor_new(fn, AMP_F32, kv[i]->ndim, kv[i]->shape, amp__mem_current(AMP_MEM_WORKSPACE),
                               AMP_NEW_UNSCOPED);
        if (!d[i]) {
            st = amp_last_status();
            goto out;
        }
    }
    pg = amp__f32_view(g, &og);
    if (!pg) {
        st = amp_last_status();
        goto out;
    }
    int64_t nb = a->nb;
    amp_k_att_in iq = att_in(kv[0], boff), ik = att_in(kv[1], boff + nb), iv = att_in(kv[2], boff + 2 * nb), ib;
    amp_k_att_args ka = k_args(a);
    if (bias) {
        ib = att_in(bias, boff + 3 * nb);
        ka.bias = &ib;
    }
    st = amp_k_attention_backward(&ka, &iq, &ik, &iv, amp__data(out), out->dtype, pg, amp__data(lse),
                                  amp__data(d[0]), amp__data(d[1]), amp__data(d[2]));
    if (st == AMP_OK)
        for (int i = 0; i < 3; i++) {
            gin[i] = d[i];
            d[i] = NULL;
        }
out:
    if (pg) amp__f32_done(g, pg, og);
    for (int i = 0; i < 3; i++) amp__release(d[i]);
    operands_done(t, boff);
    return st;
}

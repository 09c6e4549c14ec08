/* scaled_dot_product_attention, as torch.nn.functional's:
 *
 *   q [..., L, E], k [..., S, E], v [..., S, Ev] -> [..., L, Ev]
 *   out = dropout(softmax(q k^T * scale + mask), p) v
 *
 * scale defaults to 1/sqrt(E); is_causal keeps key j <= query i (top-left
 * aligned when L != S, as torch); attn_mask is bool (u8: true = take part)
 * or float (added), broadcastable to [..., L, S]. The batch dims of q, k, v
 * must be equal. Autocast: lower precision (torch's CPU and CUDA lists).
 *
 * The fused kernel (kernels/cpu/attention.h) never materialises the L x S
 * weights; amp_scaled_dot_product_attention_math is the naive composition
 * (matmul, scale, mask, softmax, dropout, matmul) kept as its reference. Both
 * draw the dropout mask from the same counter positions, so with the same
 * generator state they drop the same weights. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "ops/f32_util.h"

typedef struct {
    amp_k_att_args a;
    int64_t nb;
    amp_tensor *bias;  /* f32 additive mask (owned), or NULL */
    int64_t *boff;     /* 4 * nb offsets: q, k, v, bias */
} sdpa_ctx;

static void sdpa_ctx_free(void *p) {
    sdpa_ctx *c = p;
    amp__release(c->bias);
    free(c->boff);
}

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

static amp_status sdpa_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    sdpa_ctx *c = n->ctx;
    const amp_tensor *q0 = n->saved[0], *k0 = n->saved[1], *v0 = n->saved[2], *o = n->saved[3], *lse = n->saved[4];
    amp_tensor *tq, *tk, *tv;
    const amp_tensor *q = kernel_view("amp_backward", q0, &tq), *k = q ? kernel_view("amp_backward", k0, &tk) : NULL,
                     *v = k ? kernel_view("amp_backward", v0, &tv) : NULL;
    amp_status st = AMP_OK;
    amp_tensor *dq = NULL, *dk = NULL, *dv = NULL;
    const float *pg = NULL;
    bool og = false;
    if (!v) {
        st = amp_last_status();
        goto out;
    }
    dq = amp__f32_grad(q->ndim, q->shape, false);
    dk = dq ? amp__f32_grad(k->ndim, k->shape, false) : NULL;
    dv = dk ? amp__f32_grad(v->ndim, v->shape, false) : NULL;
    pg = dv ? amp__f32_view(gout[0], &og) : NULL;
    if (!pg) {
        st = amp_last_status();
        goto out;
    }
    int64_t nb = c->nb;
    amp_k_att_in iq = att_in(q, c->boff), ik = att_in(k, c->boff + nb), iv = att_in(v, c->boff + 2 * nb), ib;
    amp_k_att_args a = c->a;
    a.precision = amp_matmul_precision_get(); /* the setting in force when the backward runs, as the other ops */
    if (c->bias) {
        ib = att_in(c->bias, c->boff + 3 * nb);
        a.bias = &ib;
    }
    st = amp_k_attention_backward(&a, &iq, &ik, &iv, amp__data(o), o->dtype, pg, amp__data(lse), amp__data(dq),
                                  amp__data(dk), amp__data(dv));
    if (st == AMP_OK) {
        for (int i = 0; i < 3; i++) {
            amp_tensor *g = i == 0 ? dq : i == 1 ? dk : dv;
            if (n->inputs[i].needs_grad) {
                gin[i] = g;
                if (i == 0) dq = NULL;
                else if (i == 1) dk = NULL;
                else dv = NULL;
            }
        }
    }
out:
    if (pg) amp__f32_done(gout[0], pg, og);
    amp__release(dq);
    amp__release(dk);
    amp__release(dv);
    if (tq) amp__release(tq);
    if (q && tk) amp__release(tk);
    if (k && v && tv) amp__release(tv);
    return st;
}

/* Shape checks shared by the fused op and the math reference. */
static amp_status sdpa_check(const char *fn, const amp_tensor *q, const amp_tensor *k, const amp_tensor *v,
                             const amp_sdpa_opts *o) {
    char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF], cbuf[AMP_SHAPE_BUF];
    if (!amp__check_float(fn, q, "q") || !amp__check_float(fn, k, "k") || !amp__check_float(fn, v, "v"))
        return amp_last_status();
    if (q->dtype != k->dtype || q->dtype != v->dtype)
        return amp_error(AMP_ERR_DTYPE, "%s: q, k and v must have the same dtype (got %s, %s, %s)", fn,
                         amp_dtype_name(q->dtype), amp_dtype_name(k->dtype), amp_dtype_name(v->dtype));
    if (q->ndim < 2 || q->ndim != k->ndim || q->ndim != v->ndim)
        return amp_error(AMP_ERR_SHAPE, "%s: q %s, k %s and v %s must have the same number of dims (at least 2)", fn,
                         amp__shape_fmt(q->ndim, q->shape, a, sizeof a), amp__shape_fmt(k->ndim, k->shape, b, sizeof b),
                         amp__shape_fmt(v->ndim, v->shape, cbuf, sizeof cbuf));
    int nd = q->ndim;
    bool ok = q->shape[nd - 1] == k->shape[nd - 1] && k->shape[nd - 2] == v->shape[nd - 2];
    for (int d = 0; d < nd - 2; d++) ok = ok && q->shape[d] == k->shape[d] && q->shape[d] == v->shape[d];
    if (!ok)
        return amp_error(AMP_ERR_SHAPE,
                         "%s: q %s, k %s, v %s: expected q [..., L, E], k [..., S, E], v [..., S, Ev] with equal "
                         "batch dims", fn, amp__shape_fmt(q->ndim, q->shape, a, sizeof a),
                         amp__shape_fmt(k->ndim, k->shape, b, sizeof b), amp__shape_fmt(v->ndim, v->shape, cbuf, sizeof cbuf));
    if (!(o->dropout_p >= 0.0 && o->dropout_p < 1.0))
        return amp_error(AMP_ERR_ARG, "%s: dropout_p = %g is outside [0, 1)", fn, o->dropout_p);
    if (!isfinite(o->scale) && !isnan(o->scale))
        return amp_error(AMP_ERR_ARG, "%s: scale = %g is not finite", fn, o->scale);
    if (o->attn_mask) {
        const amp_tensor *m = o->attn_mask;
        if (m->dtype != AMP_U8 && !amp__check_float(fn, m, "attn_mask")) return amp_last_status();
        if (o->is_causal)
            return amp_error(AMP_ERR_ARG, "%s: attn_mask and is_causal are exclusive (as torch)", fn);
        if (m->requires_grad)
            return amp_error(AMP_ERR_ARG, "%s: attn_mask requires grad; a gradient for the mask is not supported", fn);
        bool bok = m->ndim <= nd;
        for (int d = 0; bok && d < m->ndim; d++) {
            int qd = nd - m->ndim + d;
            int64_t want = qd == nd - 1 ? k->shape[nd - 2] : q->shape[qd];
            bok = m->shape[d] == want || m->shape[d] == 1;
        }
        if (!bok)
            return amp_error(AMP_ERR_SHAPE, "%s: attn_mask %s does not broadcast to [..., L, S] = %s x %s", fn,
                             amp__shape_fmt(m->ndim, m->shape, a, sizeof a),
                             amp__shape_fmt(nd - 1, q->shape, b, sizeof b),
                             amp__shape_fmt(1, &k->shape[nd - 2], cbuf, sizeof cbuf));
    }
    return AMP_OK;
}

static double sdpa_scale(const amp_sdpa_opts *o, int64_t E) {
    return (o->scale == 0.0 || isnan(o->scale)) ? 1.0 / sqrt((double)(E > 0 ? E : 1)) : o->scale;
}

/* The mask as an additive tensor of dtype dt with shape [mb..., L, S] (the
 * mask's batch dims, left-padded with 1s to q's), 0 / -inf for a bool mask,
 * the values for a float one; or, for is_causal, [L, S] (batch dims 1). */
static amp_tensor *mask_bias(const char *fn, const amp_tensor *q, const amp_tensor *k, const amp_sdpa_opts *o,
                             amp_dtype dt, amp_mem_category cat) {
    int nd = q->ndim;
    int64_t L = q->shape[nd - 2], S = k->shape[nd - 2], shape[AMP_MAX_DIMS];
    for (int d = 0; d < nd - 2; d++) shape[d] = 1;
    shape[nd - 2] = L;
    shape[nd - 1] = S;
    const amp_tensor *m = o->attn_mask;
    if (m)
        for (int d = 0; d < m->ndim - 2; d++) shape[nd - m->ndim + d] = m->shape[d];
    amp_tensor *t = amp__tensor_new(fn, AMP_F32, nd, shape, cat, AMP_NEW_UNSCOPED);
    if (!t) return NULL;
    float *p = amp__data(t);
    int64_t n = amp_tensor_numel(t);
    if (!m) {
        for (int64_t e = 0; e < n; e++) {
            int64_t j = e % S, i = (e / S) % L;
            p[e] = j <= i ? 0.0f : -INFINITY;
        }
    } else {
        amp_tensor src = *m;
        src.ndim = nd;
        memcpy(src.shape, shape, sizeof(int64_t) * (size_t)nd);
        amp__broadcast_strides(m, nd, shape, src.stride);
        for (int64_t e = 0; e < n; e++) {
            double x = amp__load(amp__elem_ptr(&src, e), m->dtype);
            p[e] = m->dtype == AMP_U8 ? (x != 0.0 ? 0.0f : -INFINITY) : (float)x;
        }
    }
    if (dt != AMP_F32) {
        amp_tensor *h = amp__tensor_new(fn, dt, nd, shape, cat, AMP_NEW_UNSCOPED);
        if (!h || amp__copy_convert(h, t) != AMP_OK) {
            amp__release(h);
            amp__release(t);
            return NULL;
        }
        amp__release(t);
        return h;
    }
    return t;
}

static amp_tensor *sdpa_fused(const char *fn, amp_tensor *q, amp_tensor *k, amp_tensor *v, const amp_sdpa_opts *o) {
    if (!amp__arg(fn, q, "q") || !amp__arg(fn, k, "k") || !amp__arg(fn, v, "v")) return NULL;
    amp_sdpa_opts dflt = AMP_SDPA_DEFAULTS;
    if (!o) o = &dflt;
    if (sdpa_check(fn, q, k, v, o) != AMP_OK) return NULL;
    amp_tensor *in[3] = {q, k, v};
    int mask = amp__autocast(AMP_OP_SDPA, in, 3);
    if (mask < 0) return NULL;
    q = in[0], k = in[1], v = in[2];
    const int nd = q->ndim;
    const int64_t L = q->shape[nd - 2], S = k->shape[nd - 2], E = q->shape[nd - 1], Ev = v->shape[nd - 1];
    amp_ck ck = AMP_CK(fn, "batch size");
    int64_t nb = amp_ck_numel(&ck, nd - 2, q->shape); /* sizes of q: cannot fail */
    int64_t oshape[AMP_MAX_DIMS];
    memcpy(oshape, q->shape, sizeof(int64_t) * (size_t)nd);
    oshape[nd - 1] = Ev;
    amp_tensor *out = NULL, *lse = NULL, *tq = NULL, *tk = NULL, *tv = NULL, *bias = NULL;
    sdpa_ctx c;
    memset(&c, 0, sizeof c);
    amp_generator *g = o->generator ? o->generator : amp_default_generator();
    size_t cnt = (size_t)nb * 4 * sizeof(int64_t); /* nb <= numel(q): no overflow */
    out = amp__empty_out(fn, q->dtype, nd, oshape);
    if (!out) goto fail;
    if (amp_tensor_numel(out) == 0) goto done_ok;
    if (S == 0) { /* softmax over nothing, then a product over nothing: zeros */
        memset(amp__data(out), 0, (size_t)amp_tensor_numel(out) * amp_dtype_size(out->dtype));
        goto done_ok;
    }
    {
        int64_t lshape[1] = {nb * L};
        lse = amp__f32_tensor(fn, 1, lshape, AMP_MEM_ACTIVATION);
        c.boff = malloc(cnt ? cnt : 1);
        if (!lse || !c.boff) {
            if (!c.boff) amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
            goto fail;
        }
        if (o->attn_mask) {
            bias = mask_bias(fn, q, k, o, AMP_F32, AMP_MEM_ACTIVATION);
            if (!bias) goto fail;
        }
        const amp_tensor *kq = kernel_view(fn, q, &tq), *kk = kq ? kernel_view(fn, k, &tk) : NULL,
                         *kv = kk ? kernel_view(fn, v, &tv) : NULL;
        if (!kv) goto fail;
        batch_offsets(kq, nd - 2, q->shape, c.boff, nb);
        batch_offsets(kk, nd - 2, q->shape, c.boff + nb, nb);
        batch_offsets(kv, nd - 2, q->shape, c.boff + 2 * nb, nb);
        if (bias) batch_offsets(bias, nd - 2, q->shape, c.boff + 3 * nb, nb);
        c.nb = nb;
        c.a = (amp_k_att_args){.nb = nb, .L = L, .S = S, .E = E, .Ev = Ev, .scale = (float)sdpa_scale(o, E),
                               .causal = o->is_causal, .dropout_p = o->dropout_p,
                               .precision = amp_matmul_precision_get()};
        if (o->dropout_p > 0.0) {
            c.a.seed = g->seed;
            c.a.offset = amp__gen_reserve(g, (uint64_t)nb * (uint64_t)L * (uint64_t)S); /* atomic: generators may be shared; a counter, wraps by design */
            c.a.thresh = (uint64_t)ceil(o->dropout_p * 4294967296.0);
        }
        amp_k_att_in iq = att_in(kq, c.boff), ik = att_in(kk, c.boff + nb), iv = att_in(kv, c.boff + 2 * nb), ib;
        amp_k_att_args a = c.a;
        if (bias) {
            ib = att_in(bias, c.boff + 3 * nb);
            a.bias = &ib;
        }
        if (amp_k_attention_forward(&a, &iq, &ik, &iv, amp__data(out), out->dtype, amp__data(lse)) != AMP_OK)
            goto fail;
    }
    if (amp__needs_grad(3, in)) {
        amp_node *node = amp__node_new(fn, sdpa_backward, 3, in, sizeof(sdpa_ctx));
        if (!node) goto fail;
        amp__node_save(node, in[0]);
        amp__node_save(node, in[1]);
        amp__node_save(node, in[2]);
        amp__node_save(node, out);
        amp__node_save(node, lse);
        c.bias = bias;
        bias = NULL;
        *(sdpa_ctx *)node->ctx = c;
        c.boff = NULL;
        node->ctx_free = sdpa_ctx_free;
        amp__node_attach(node, out);
    }
done_ok:
    free(c.boff);
    amp__release(lse);
    amp__release(bias);
    amp__release(tq);
    amp__release(tk);
    amp__release(tv);
    amp__autocast_done(in, 3, mask);
    return out;
fail:
    free(c.boff);
    amp__release(lse);
    amp__release(bias);
    amp__release(tq);
    amp__release(tk);
    amp__release(tv);
    amp_tensor_free(out);
    amp__autocast_done(in, 3, mask);
    return NULL;
}

amp_tensor *amp_scaled_dot_product_attention_ex(amp_tensor *q, amp_tensor *k, amp_tensor *v, const amp_sdpa_opts *o) {
    return sdpa_fused("amp_scaled_dot_product_attention_ex", q, k, v, o);
}

amp_tensor *amp_scaled_dot_product_attention(amp_tensor *q, amp_tensor *k, amp_tensor *v, bool is_causal,
                                             double dropout_p, double scale) {
    amp_sdpa_opts o = AMP_SDPA_DEFAULTS;
    o.is_causal = is_causal;
    o.dropout_p = dropout_p;
    o.scale = scale;
    return sdpa_fused("amp_scaled_dot_product_attention", q, k, v, &o);
}

/* ---- the naive composition (reference) ---------------------------------------------------------- */
amp_tensor *amp_scaled_dot_product_attention_math(amp_tensor *q, amp_tensor *k, amp_tensor *v,
                                                  const amp_sdpa_opts *o) {
    static const char *fn = "amp_scaled_dot_product_attention_math";
    if (!amp__arg(fn, q, "q") || !amp__arg(fn, k, "k") || !amp__arg(fn, v, "v")) return NULL;
    amp_sdpa_opts dflt = AMP_SDPA_DEFAULTS;
    if (!o) o = &dflt;
    if (sdpa_check(fn, q, k, v, o) != AMP_OK) return NULL;
    /* autocast as the fused op (q, k, v to the region's dtype), then the
     * composition in that dtype with autocast off, as torch's math kernel
     * runs below the autocast dispatch */
    amp_tensor *in[3] = {q, k, v};
    int mask = amp__autocast(AMP_OP_SDPA, in, 3);
    if (mask < 0) return NULL;
    amp_autocast_opts off = {false, AMP_BF16, true, AMP_AUTOCAST_TABLE_DEFAULT};
    bool ac = amp_autocast_depth() > 0;
    if (ac && amp_autocast_enter_opts(&off) != AMP_OK) {
        amp__autocast_done(in, 3, mask);
        return NULL;
    }
    const int nd = in[0]->ndim;
    const int64_t E = in[0]->shape[nd - 1];
    amp_tensor *out = NULL;
    amp_scope *s = amp_scope_begin();
    if (s) {
        amp_tensor *w = amp_mul_scalar(amp_matmul(in[0], amp_transpose(in[1], -2, -1)), sdpa_scale(o, E));
        if (w && (o->is_causal || o->attn_mask)) {
            amp_tensor *bias = mask_bias(fn, in[0], in[1], o, in[0]->dtype, AMP_MEM_DATA);
            if (bias) amp__scope_register(bias);
            w = bias ? amp_add(w, bias) : NULL;
        }
        w = amp_softmax(w, -1);
        if (w && o->dropout_p > 0.0) w = amp_dropout(w, o->dropout_p, true, o->generator);
        out = amp_matmul(w, in[2]);
        if (out) amp_tensor_keep(out);
        amp_scope_end(s);
        if (out) amp__scope_register(out);
    }
    if (ac) amp_autocast_exit();
    amp__autocast_done(in, 3, mask);
    return out;
}

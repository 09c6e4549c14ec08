/* scaled_dot_product_attention, as torch.nn.functional's:
 *
 *   q [..., L, E], k [..., S, E], v [..., S, Ev] -> [..., L, Ev]
 *   out = dropout(softmax(q k^T * scale + mask), p) v
 *
 * scale defaults to 1/sqrt(E); is_causal keeps key j <= query i (top-left
 * aligned when L != S, as torch); attn_mask is bool (u8: true = take part)
 * or float (added), broadcastable to [..., L, S]. The batch dims of q, k, v
 * must be equal (with enable_gqa, but the heads: k and v have a divisor of
 * q's heads, each serving a group of query heads), and so must their
 * dtypes, outside autocast. Autocast: lower
 * precision (torch's CPU and CUDA lists): q, k, v and a float mask are cast to
 * the region's dtype first, as torch's cached_cast does for every floating
 * tensor argument, so mixed input dtypes meet there.
 *
 * The fused op is checks + autocast + one call of its device's backend
 * (kernels/family/attention.h: attention, attention_backward; the CPU's is
 * kernels/cpu/attention.h, CUDA's kernels/cuda/attention.cu), which never
 * materialises the L x S weights; amp_scaled_dot_product_attention_math is
 * the naive composition
 * (matmul, scale, mask, softmax, dropout, matmul) kept as its reference. Both
 * draw the dropout mask from the same counter positions, so with the same
 * generator state they drop the same weights. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "ops/op_util.h"
#include "tensor/f32_util.h"

typedef struct {
    amp_att_args a;
    amp_tensor *bias;  /* f32 additive mask (owned), or NULL */
} sdpa_ctx;

static void sdpa_ctx_free(void *p) {
    sdpa_ctx *c = p;
    amp__release(c->bias);
}

/* One backend call on the saved tensors' device: dq, dk, dv (f32, the
 * shapes of q, k, v) recomputed from q, k, v, the output and its row
 * logsumexp (kernels/family/attention.h: attention_backward). */
static amp_status sdpa_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    static const char *fn = "amp_backward";
    sdpa_ctx *c = n->ctx;
    const amp_tensor *q = n->saved[0], *k = n->saved[1], *v = n->saved[2], *o = n->saved[3], *lse = n->saved[4];
    const amp_backend *be = amp__backend_of(fn, q);
    if (!be) return amp_last_status();
    amp_att_args a = c->a;
    a.precision = amp_matmul_precision_get(); /* the setting in force when the backward runs, as the other ops */
    amp_tensor *g[3] = {NULL, NULL, NULL};
    amp_status st = AMP_KCALL(be, attention, attention_backward, fn, &a, q, k, v, c->bias, o, lse, gout[0], g);
    for (int i = 0; i < 3; i++) {
        if (st == AMP_OK && n->inputs[i].needs_grad) gin[i] = g[i];
        else amp__release(g[i]);
    }
    return st;
}

/* Shape checks shared by the fused op and the math reference. */
static amp_status sdpa_check(const char *fn, const amp_tensor *q, const amp_tensor *k, const amp_tensor *v,
                             const amp_sdpa_opts *o) {
    char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF], cbuf[AMP_SHAPE_BUF];
    if (!amp__check_float(fn, q, "q") || !amp__check_float(fn, k, "k") || !amp__check_float(fn, v, "v"))
        return amp_last_status();
    if (q->ndim < 2 || q->ndim != k->ndim || q->ndim != v->ndim)
        return amp_error(AMP_ERR_SHAPE, "%s: q %s, k %s and v %s must have the same number of dims (at least 2)", fn,
                         amp__shape_fmt(q->ndim, q->shape, a, sizeof a), amp__shape_fmt(k->ndim, k->shape, b, sizeof b),
                         amp__shape_fmt(v->ndim, v->shape, cbuf, sizeof cbuf));
    int nd = q->ndim;
    if (o->enable_gqa && nd < 3)
        return amp_error(AMP_ERR_SHAPE, "%s: enable_gqa needs q, k, v with a heads dim: [..., H, L, E] (got q %s)", fn,
                         amp__shape_fmt(q->ndim, q->shape, a, sizeof a));
    bool ok = q->shape[nd - 1] == k->shape[nd - 1] && k->shape[nd - 2] == v->shape[nd - 2];
    for (int d = 0; d < nd - 2; d++) {
        if (o->enable_gqa && d == nd - 3) continue; /* the heads: below */
        ok = ok && q->shape[d] == k->shape[d] && q->shape[d] == v->shape[d];
    }
    if (!ok)
        return amp_error(AMP_ERR_SHAPE,
                         "%s: q %s, k %s, v %s: expected q [..., L, E], k [..., S, E], v [..., S, Ev] with equal "
                         "batch dims%s", fn, amp__shape_fmt(q->ndim, q->shape, a, sizeof a),
                         amp__shape_fmt(k->ndim, k->shape, b, sizeof b), amp__shape_fmt(v->ndim, v->shape, cbuf, sizeof cbuf),
                         o->enable_gqa ? " (but the heads, third from last)" : "");
    if (o->enable_gqa) {
        int64_t hq = q->shape[nd - 3], hk = k->shape[nd - 3], hv = v->shape[nd - 3];
        if (hk != hv || hk == 0 || hq % hk != 0)
            return amp_error(AMP_ERR_SHAPE,
                             "%s: enable_gqa: q has %lld heads, k %lld and v %lld: k and v need the same number of "
                             "heads, a divisor of q's (q %s, k %s, v %s)", fn, (long long)hq, (long long)hk, (long long)hv,
                             amp__shape_fmt(q->ndim, q->shape, a, sizeof a), amp__shape_fmt(k->ndim, k->shape, b, sizeof b),
                             amp__shape_fmt(v->ndim, v->shape, cbuf, sizeof cbuf));
    }
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

/* Autocast, then the dtype check: as torch, a region casts q, k, v and a
 * float attn_mask to its dtype (lower precision), so inputs of mixed dtypes
 * meet in it; outside a region (or with an f64 input, never cast) q, k and v
 * must already agree. in[0..3] = q, k, v, the mask (NULL when none); on
 * success the replaced entries (mask returned, as amp__autocast's) and *oc,
 * o with the cast mask, are what the op computes with. dev: NULL for the
 * CPU-only reference, else where the fused op runs. */
static int sdpa_autocast(const char *fn, amp_tensor **in, const amp_sdpa_opts *o, amp_sdpa_opts *oc, amp_device *dev) {
    amp_dtype given[3] = {in[0]->dtype, in[1]->dtype, in[2]->dtype};
    in[3] = o->attn_mask; /* a u8 mask is not castable: left alone */
    int mask = dev ? amp__autocast_dev(AMP_OP_SDPA, in, 4, dev) : amp__autocast(AMP_OP_SDPA, in, 4);
    if (mask < 0) return -1;
    if (in[0]->dtype != in[1]->dtype || in[0]->dtype != in[2]->dtype) {
        amp__autocast_done(in, 4, mask);
        amp_error(AMP_ERR_DTYPE, "%s: q, k and v must have the same dtype (got %s, %s, %s)%s", fn, amp_dtype_name(given[0]),
                  amp_dtype_name(given[1]), amp_dtype_name(given[2]),
                  amp__autocast_category(AMP_OP_SDPA) != AMP_CAST_NONE ? "; autocast casts f32, f16 and bf16 only" : "");
        return -1;
    }
    *oc = *o;
    oc->attn_mask = in[3];
    return mask;
}

/* query heads per key/value head: 1 without enable_gqa */
static int64_t sdpa_group(const amp_tensor *q, const amp_tensor *k, const amp_sdpa_opts *o) {
    return o->enable_gqa ? q->shape[q->ndim - 3] / k->shape[k->ndim - 3] : 1;
}

/* k or v [..., Hkv, S, E] with each head repeated group times in place,
 * [..., Hkv * group, S, E] (torch's repeat_interleave on the heads: query
 * head h meets kv head h / group), through ops so that the gradient sums
 * over the group */
static amp_tensor *gqa_expand(amp_tensor *x, int64_t group) {
    if (group == 1) return x;
    int nd = x->ndim;
    int64_t es[AMP_MAX_DIMS + 1], rs[AMP_MAX_DIMS];
    for (int d = 0; d < nd - 2; d++) es[d] = rs[d] = x->shape[d];
    es[nd - 2] = group;
    es[nd - 1] = x->shape[nd - 2];
    es[nd] = x->shape[nd - 1];
    rs[nd - 3] = x->shape[nd - 3] * group;
    rs[nd - 2] = x->shape[nd - 2];
    rs[nd - 1] = x->shape[nd - 1];
    return amp_reshape(amp_expand(amp_unsqueeze(x, nd - 2), nd + 1, es), nd, rs);
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

/* The fused op's f32 bias on a device other than the CPU, computed there
 * (the mask is device memory): [mb..., L, S] as mask_bias's, a float
 * mask's values (copy: widened exactly, f64 rounded once as (float)x), a
 * bool mask's 0 / -inf as log(0 or 1) of its values converted to f32. */
static amp_tensor *mask_bias_dev(const char *fn, const amp_backend *be, amp_device dev, const amp_tensor *q,
                                 const amp_tensor *k, const amp_tensor *m) {
    int nd = q->ndim;
    int64_t shape[AMP_MAX_DIMS];
    for (int d = 0; d < nd - 2; d++) shape[d] = 1;
    shape[nd - 2] = q->shape[nd - 2];
    shape[nd - 1] = k->shape[nd - 2];
    for (int d = 0; d < m->ndim - 2; d++) shape[nd - m->ndim + d] = m->shape[d];
    amp_tensor *t = amp__tensor_new_on(fn, dev, AMP_F32, nd, shape, AMP_MEM_ACTIVATION, AMP_NEW_UNSCOPED);
    if (!t) return NULL;
    amp_tensor src = *m;
    src.ndim = nd;
    memcpy(src.shape, shape, sizeof(int64_t) * (size_t)nd);
    amp__broadcast_strides(m, nd, shape, src.stride);
    amp_status st = AMP_KCALL(be, dev, copy, fn, t, &src);
    if (st == AMP_OK && m->dtype == AMP_U8) {
        amp_ew_operand in;
        memset(&in, 0, sizeof in);
        in.data = amp__data(t);
        in.dtype = AMP_F32;
        int64_t s = 1;
        for (int d = nd - 1; d >= 0; d--) {
            in.stride[d] = s;
            s *= shape[d];
        }
        st = AMP_KCALL(be, ew, ew, fn, AMP_EW_LOG, NULL, nd, shape, amp__data(t), AMP_F32, 1, &in);
    }
    if (st != AMP_OK) {
        amp__release(t);
        return NULL;
    }
    return t;
}

static amp_tensor *sdpa_fused(const char *fn, amp_tensor *q, amp_tensor *k, amp_tensor *v, const amp_sdpa_opts *o) {
    if (!amp__arg(fn, q, "q") || !amp__arg(fn, k, "k") || !amp__arg(fn, v, "v")) return NULL;
    amp_sdpa_opts dflt = AMP_SDPA_DEFAULTS;
    if (!o) o = &dflt;
    if (sdpa_check(fn, q, k, v, o) != AMP_OK) return NULL;
    if (o->attn_mask) {
        const amp_tensor *dm[2] = {q, o->attn_mask};
        const char *names[2] = {"q", "attn_mask"};
        if (amp__same_device(fn, dm, names, 2, NULL) != AMP_OK) return NULL;
    }
    amp_tensor *in[4] = {q, k, v, NULL};
    amp_sdpa_opts oc;
    amp_device dev;
    int mask = sdpa_autocast(fn, in, o, &oc, &dev);
    if (mask < 0) return NULL;
    q = in[0], k = in[1], v = in[2];
    o = &oc;
    const int nd = q->ndim;
    const int64_t L = q->shape[nd - 2], S = k->shape[nd - 2], E = q->shape[nd - 1], Ev = v->shape[nd - 1];
    amp_ck ck = AMP_CK(fn, "batch size");
    int64_t nb = amp_ck_numel(&ck, nd - 2, q->shape); /* sizes of q: cannot fail */
    int64_t oshape[AMP_MAX_DIMS];
    memcpy(oshape, q->shape, sizeof(int64_t) * (size_t)nd);
    oshape[nd - 1] = Ev;
    amp_tensor *out = NULL, *lse = NULL, *bias = NULL;
    sdpa_ctx c;
    memset(&c, 0, sizeof c);
    amp_generator *g = o->generator ? o->generator : amp_default_generator();
    const amp_backend *be = amp__backend(fn, dev);
    if (!be) goto fail;
    out = amp__empty_out_on(fn, dev, q->dtype, nd, oshape);
    if (!out) goto fail;
    if (amp_tensor_numel(out) == 0) goto done_ok;
    if (S == 0) { /* softmax over nothing, then a product over nothing: zeros */
        if (dev == AMP_DEVICE_CPU) memset(amp__data(out), 0, (size_t)amp_tensor_numel(out) * amp_dtype_size(out->dtype));
        else if (AMP_KCALL(be, dev, fill, fn, out, 0.0) != AMP_OK) goto fail;
        goto done_ok;
    }
    {
        int64_t lshape[1] = {nb * L};
        lse = amp__tensor_new_on(fn, dev, AMP_F32, 1, lshape, amp__mem_current(AMP_MEM_ACTIVATION), AMP_NEW_UNSCOPED);
        if (!lse) goto fail;
        if (o->attn_mask) {
            bias = dev == AMP_DEVICE_CPU ? mask_bias(fn, q, k, o, AMP_F32, AMP_MEM_ACTIVATION)
                                         : mask_bias_dev(fn, be, dev, q, k, o->attn_mask);
            if (!bias) goto fail;
        }
        c.a = (amp_att_args){.nb = nb, .L = L, .S = S, .E = E, .Ev = Ev, .scale = (float)sdpa_scale(o, E),
                             .causal = o->is_causal, .dropout_p = o->dropout_p,
                             .precision = amp_matmul_precision_get(), .group = sdpa_group(q, k, o)};
        if (o->dropout_p > 0.0) {
            c.a.seed = g->seed;
            c.a.offset = amp__gen_reserve(g, (uint64_t)nb * (uint64_t)L * (uint64_t)S); /* atomic: generators may be shared; a counter, wraps by design */
            c.a.thresh = (uint64_t)ceil(o->dropout_p * 4294967296.0);
        }
        if (AMP_KCALL(be, attention, attention, fn, &c.a, q, k, v, bias, out, lse) != AMP_OK) goto fail;
    }
    if (amp__needs_grad(3, in)) {
        c.bias = bias;
        amp_node_spec spec = {.backward = sdpa_backward, .ctx = &c, .ctx_size = sizeof c, .nsave = 5,
                              .save = {in[0], in[1], in[2], out, lse}, .ctx_free = sdpa_ctx_free};
        if (amp__node_record(fn, out, in, 3, &spec) != AMP_OK) goto fail;
        bias = NULL; /* the node's */
    }
done_ok:
    return amp__op_end(fn, true, out, in, 4, mask, NULL, (amp_tensor *[]){lse, bias}, 2);
fail:
    return amp__op_end(fn, false, out, in, 4, mask, NULL, (amp_tensor *[]){lse, bias}, 2);
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
    amp_tensor *in[4] = {q, k, v, NULL};
    amp_sdpa_opts oc;
    int mask = sdpa_autocast(fn, in, o, &oc, NULL);
    if (mask < 0) return NULL;
    o = &oc;
    amp_autocast_opts off = {false, AMP_BF16, true, AMP_AUTOCAST_TABLE_DEFAULT};
    bool ac = amp_autocast_depth() > 0;
    if (ac && amp_autocast_enter_opts(&off) != AMP_OK) {
        amp__autocast_done(in, 4, mask);
        return NULL;
    }
    const int nd = in[0]->ndim;
    const int64_t E = in[0]->shape[nd - 1];
    amp_tensor *out = NULL;
    amp_scope *s = amp_scope_begin();
    if (s) {
        const int64_t group = sdpa_group(in[0], in[1], o);
        amp_tensor *kk = gqa_expand(in[1], group), *vv = gqa_expand(in[2], group);
        amp_tensor *w = amp_mul_scalar(amp_matmul(in[0], amp_transpose(kk, -2, -1)), sdpa_scale(o, E));
        if (w && (o->is_causal || o->attn_mask)) {
            amp_tensor *bias = mask_bias(fn, in[0], in[1], o, in[0]->dtype, AMP_MEM_DATA);
            if (bias) amp__scope_register(bias);
            w = bias ? amp_add(w, bias) : NULL;
        }
        w = amp_softmax(w, -1);
        if (w && o->dropout_p > 0.0) w = amp_dropout(w, o->dropout_p, true, o->generator);
        out = amp_matmul(w, vv);
        if (out) amp_tensor_keep(out);
        amp_scope_end(s);
        if (out) amp__scope_register(out);
    }
    if (ac) amp_autocast_exit();
    amp__autocast_done(in, 4, mask);
    return out;
}

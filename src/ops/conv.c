/* conv2d and conv1d (NCHW / NCL; conv1d is conv2d with H = 1 and a 1 x k
 * kernel): argument checks, the output size (checked arithmetic), autocast
 * and the graph node here; the forward and the backward are one call each
 * into the backend of the tensors' device (kernels/backend.h: conv,
 * conv_backward; the CPU's im2col + GEMM: kernels/cpu/backend_cpu_conv.c).
 * The geometry, amp_conv_args, is also the node's context. */
#include <string.h>

#include "kernels/backend.h"
#include "ops/op_util.h"

static amp_status conv_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin);

static amp_tensor *conv_impl(const char *fn, amp_op_id op, amp_tensor *x, amp_tensor *w, amp_tensor *b,
                             const amp_conv_params *p, bool one_d) {
    if (!amp__arg(fn, x, "x") || !amp__arg(fn, w, "w")) return NULL;
    if (!amp__check_float(fn, x, "x") || !amp__check_float(fn, w, "w")) return NULL;
    if (b && !amp__check_float(fn, b, "b")) return NULL;
    const int sp = one_d ? 1 : 2; /* spatial dims */
    char s1[AMP_SHAPE_BUF], s2[AMP_SHAPE_BUF];
    if (x->ndim != sp + 1 && x->ndim != sp + 2)
        return amp_error_null(AMP_ERR_SHAPE, "%s: x must be %d-d (unbatched) or %d-d (batched), got shape %s", fn, sp + 1,
                              sp + 2, amp__shape_fmt(x->ndim, x->shape, s1, sizeof s1));
    if (w->ndim != sp + 2)
        return amp_error_null(AMP_ERR_SHAPE, "%s: w must be %d-d [out, in/groups, %s], got shape %s", fn, sp + 2,
                              one_d ? "k" : "kh, kw", amp__shape_fmt(w->ndim, w->shape, s1, sizeof s1));
    /* parameters (index 0 only for conv1d) */
    amp_conv_params q = p ? *p : (amp_conv_params){{0, 0}, {0, 0}, {0, 0}, 0};
    for (int i = 0; i < sp; i++) {
        if (q.stride[i] < 0 || q.padding[i] < 0 || q.dilation[i] < 0)
            return amp_error_null(AMP_ERR_ARG, "%s: stride %lld, padding %lld, dilation %lld: none may be negative", fn,
                                  (long long)q.stride[i], (long long)q.padding[i], (long long)q.dilation[i]);
        if (q.stride[i] == 0) q.stride[i] = 1;
        if (q.dilation[i] == 0) q.dilation[i] = 1;
    }
    if (q.groups < 0) return amp_error_null(AMP_ERR_ARG, "%s: groups %lld is negative", fn, (long long)q.groups);
    if (q.groups == 0) q.groups = 1;
    amp_tensor *in[3] = {x, w, b};
    amp_device dev;
    int mask = amp__autocast_dev(op, in, 3, &dev);
    if (mask < 0) return NULL;
    x = in[0], w = in[1], b = in[2];
    amp_tensor *out = NULL;
    amp_conv_args c;
    memset(&c, 0, sizeof c);
    const bool unbatched = x->ndim == sp + 1;
    int xo = unbatched ? 0 : 1; /* index of C in x */
    c.N = unbatched ? 1 : x->shape[0];
    c.C = x->shape[xo];
    c.O = w->shape[0];
    c.G = q.groups;
    amp_conv_args *g = &c; /* the geometry */
    if (one_d) {
        g->H = 1, g->W = x->shape[xo + 1];
        g->kh = 1, g->kw = w->shape[2];
        g->sh = 1, g->sw = q.stride[0];
        g->ph = 0, g->pw = q.padding[0];
        g->dh = 1, g->dw = q.dilation[0];
    } else {
        g->H = x->shape[xo + 1], g->W = x->shape[xo + 2];
        g->kh = w->shape[2], g->kw = w->shape[3];
        g->sh = q.stride[0], g->sw = q.stride[1];
        g->ph = q.padding[0], g->pw = q.padding[1];
        g->dh = q.dilation[0], g->dw = q.dilation[1];
    }
    amp__shape_fmt(x->ndim, x->shape, s1, sizeof s1);
    amp__shape_fmt(w->ndim, w->shape, s2, sizeof s2);
    if (c.C % c.G != 0 || c.O % c.G != 0) {
        amp_error(AMP_ERR_SHAPE, "%s: groups %lld must divide the %lld input and %lld output channels (x %s, w %s)", fn,
                  (long long)c.G, (long long)c.C, (long long)c.O, s1, s2);
        goto done;
    }
    if (w->shape[1] * c.G != c.C) {
        amp_error(AMP_ERR_SHAPE, "%s: x %s has %lld channels but w %s expects %lld (in/groups %lld x groups %lld)", fn, s1,
                  (long long)c.C, s2, (long long)(w->shape[1] * c.G), (long long)w->shape[1], (long long)c.G);
        goto done;
    }
    if (b && (b->ndim != 1 || b->shape[0] != c.O)) {
        amp_error(AMP_ERR_SHAPE, "%s: b has shape %s; expected [%lld] for w %s", fn,
                  amp__shape_fmt(b->ndim, b->shape, s1, sizeof s1), (long long)c.O, s2);
        goto done;
    }
    /* padded input and dilated kernel extents, checked: a dilation of
     * INT64_MAX must not wrap into a plausible output size */
    amp_ck cpad = AMP_CK(fn, "padding"), cdil = AMP_CK(fn, "dilation");
    int64_t hp = amp_ck_add(&cpad, g->H, amp_ck_mul(&cpad, 2, g->ph)), wp = amp_ck_add(&cpad, g->W, amp_ck_mul(&cpad, 2, g->pw));
    int64_t kh_ext = g->kh < 1 ? 0 : amp_ck_add(&cdil, amp_ck_mul(&cdil, g->dh, g->kh - 1), 1);
    int64_t kw_ext = g->kw < 1 ? 0 : amp_ck_add(&cdil, amp_ck_mul(&cdil, g->dw, g->kw - 1), 1);
    if (!cpad.ok || !cdil.ok) goto done;
    if (hp > AMP_MAX_BYTES || wp > AMP_MAX_BYTES || kh_ext > AMP_MAX_BYTES || kw_ext > AMP_MAX_BYTES) {
        amp_error(AMP_ERR_ARG, "%s: x %s, w %s: padded input %lld x %lld or dilated kernel %lld x %lld is too large (padding and "
                               "dilation must keep them below 2^62)", fn, s1, s2, (long long)hp, (long long)wp, (long long)kh_ext,
                  (long long)kw_ext);
        goto done;
    }
    if (hp < kh_ext || wp < kw_ext || g->kh < 1 || g->kw < 1) {
        amp_error(AMP_ERR_SHAPE, "%s: x %s (padded %lld x %lld) is smaller than the dilated kernel %lld x %lld of w %s", fn,
                  s1, (long long)hp, (long long)wp, (long long)kh_ext, (long long)kw_ext, s2);
        goto done;
    }
    g->OH = (hp - kh_ext) / g->sh + 1;
    g->OW = (wp - kw_ext) / g->sw + 1;
    {
        /* one image's column matrix [C*kh*kw, OH*OW] (f32 in backward) must fit */
        amp_ck ccol = AMP_CK(fn, "column matrix (channels x kernel x output size)");
        int64_t per = amp_ck_mul(&ccol, amp_ck_mul(&ccol, amp_ck_mul(&ccol, c.C, g->kh), g->kw), amp_ck_mul(&ccol, g->OH, g->OW));
        per = amp_ck_mul(&ccol, per, 4);
        if (!ccol.ok) goto done;
        if (per > AMP_MAX_BYTES) {
            amp_error(AMP_ERR_ARG, "%s: x %s, w %s: one image's column matrix would take %lld bytes (at most 2^62)", fn, s1, s2,
                      (long long)per);
            goto done;
        }
    }
    int64_t oshape[4];
    int ond = 0;
    if (!unbatched) oshape[ond++] = c.N;
    oshape[ond++] = c.O;
    if (!one_d) oshape[ond++] = g->OH;
    oshape[ond++] = g->OW;
    amp_dtype odt = amp__promote(x->dtype, w->dtype);
    if (b) odt = amp__promote(odt, b->dtype);
    const amp_backend *be = amp__backend(fn, dev);
    if (!be || !(out = amp__empty_out_on(fn, dev, odt, ond, oshape))) goto done;
    c.precision = amp_matmul_precision_get();
    if (AMP_KCALL(be, conv, conv, fn, &c, x, w, b, out) != AMP_OK) goto fail;
    if (amp__needs_grad(3, in)) {
        amp_node_spec spec = {.backward = conv_backward, .ctx = &c, .ctx_size = sizeof c, .nsave = 2, .save = {x, w}};
        if (amp__node_record(fn, out, in, 3, &spec) != AMP_OK) goto fail;
    }
done:
    return amp__op_end(fn, out != NULL, out, in, 3, mask, NULL, NULL, 0);
fail:
    return amp__op_end(fn, false, out, in, 3, mask, NULL, NULL, 0);
}

/* through the backend of the saved tensors' device, with the matmul
 * precision in effect now (as the products of any backward) */
static amp_status conv_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    amp_conv_args a = *(const amp_conv_args *)n->ctx;
    const amp_backend *be = amp__backend_of(n->name, n->saved[0]);
    if (!be) return amp_last_status();
    a.precision = amp_matmul_precision_get();
    bool need[3] = {n->inputs[0].needs_grad, n->inputs[1].needs_grad, n->inputs[2].needs_grad};
    return AMP_KCALL(be, conv, conv_backward, n->name, &a, n->saved[0], n->saved[1], gout[0], need, gin);
}

amp_tensor *amp_conv2d(amp_tensor *x, amp_tensor *w, amp_tensor *b, const amp_conv_params *p) {
    return conv_impl("amp_conv2d", AMP_OP_CONV2D, x, w, b, p, false);
}

amp_tensor *amp_conv1d(amp_tensor *x, amp_tensor *w, amp_tensor *b, const amp_conv_params *p) {
    return conv_impl("amp_conv1d", AMP_OP_CONV1D, x, w, b, p, true);
}

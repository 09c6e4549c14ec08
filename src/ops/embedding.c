/* embedding: rows of weight [V, D] gathered by i32/i64 indices of any shape
 * -> [..., D] in weight's dtype. The gradient scatter-adds the upstream rows
 * into a [V, D] weight gradient (f32 accumulation). */
#include <string.h>

#include "ops/f32_util.h"

static int64_t index_at(const amp_tensor *idx, int64_t flat) {
    const void *p = amp__elem_ptr(idx, flat);
    return idx->dtype == AMP_I64 ? *(const int64_t *)p : (int64_t) * (const int32_t *)p;
}

/* Indices as a contiguous i64 array (workspace, n entries). */
static int64_t *indices_i64(const amp_tensor *idx, int64_t n) {
    int64_t *v = amp__ws_alloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!v) return NULL;
    if (idx->dtype == AMP_I64 && amp_tensor_is_contiguous(idx)) {
        memcpy(v, amp__data(idx), (size_t)n * sizeof(int64_t));
    } else {
        for (int64_t i = 0; i < n; i++) v[i] = index_at(idx, i);
    }
    return v;
}

static amp_status embedding_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const amp_tensor *idx = n->saved[0];
    amp_edge *e = &n->inputs[0];
    int64_t D = e->shape[1], cnt = amp_tensor_numel(idx);
    amp_tensor *gw = amp__f32_grad(2, e->shape, true);
    if (!gw) return amp_last_status();
    int64_t *iv = indices_i64(idx, cnt);
    bool og = false;
    const float *pg = iv ? amp__f32_view(gout[0], &og) : NULL;
    if (!pg) {
        amp__ws_free(iv, (size_t)(cnt ? cnt : 1) * sizeof(int64_t));
        amp__release(gw);
        return amp_last_status();
    }
    float *q = amp__data(gw);
    for (int64_t i = 0; i < cnt; i++) {
        float *row = q + iv[i] * D;
        const float *src = pg + i * D;
        for (int64_t d = 0; d < D; d++) row[d] += src[d];
    }
    amp__f32_done(gout[0], pg, og);
    amp__ws_free(iv, (size_t)(cnt ? cnt : 1) * sizeof(int64_t));
    gin[0] = gw;
    return AMP_OK;
}

amp_tensor *amp_embedding(amp_tensor *weight, amp_tensor *indices) {
    static const char *fn = "amp_embedding";
    if (!amp__check_float(fn, weight, "weight") || !amp__check_index(fn, indices, "indices")) return NULL;
    if (!amp__check_ndim(fn, weight, "weight", 2, 2)) return NULL;
    if (indices->ndim + 1 > AMP_MAX_DIMS)
        return amp_error_null(AMP_ERR_SHAPE, "%s: indices have %d dims; the result would have more than %d", fn,
                              indices->ndim, AMP_MAX_DIMS);
    int64_t V = weight->shape[0], D = weight->shape[1], cnt = amp_tensor_numel(indices);
    int64_t *iv = indices_i64(indices, cnt);
    if (!iv) return NULL;
    size_t ivb = (size_t)(cnt ? cnt : 1) * sizeof(int64_t);
    for (int64_t i = 0; i < cnt; i++) {
        if (iv[i] < 0 || iv[i] >= V) {
            char b[AMP_SHAPE_BUF];
            amp_error(AMP_ERR_RANGE, "%s: index %lld (element %lld of indices) is out of range for weight of shape %s "
                                     "(valid: 0 to %lld)", fn, (long long)iv[i], (long long)i,
                      amp__shape_fmt(weight->ndim, weight->shape, b, sizeof b), (long long)V - 1);
            amp__ws_free(iv, ivb);
            return NULL;
        }
    }
    amp_tensor *in[2] = {weight, indices};
    int mask = amp__autocast(AMP_OP_EMBEDDING, in, 2);
    if (mask < 0) {
        amp__ws_free(iv, ivb);
        return NULL;
    }
    weight = in[0];
    int64_t shape[AMP_MAX_DIMS];
    memcpy(shape, indices->shape, sizeof(int64_t) * (size_t)indices->ndim);
    shape[indices->ndim] = D;
    amp_tensor *out = amp__empty_out(fn, weight->dtype, indices->ndim + 1, shape);
    if (!out) goto done;
    if (amp_tensor_is_contiguous(weight)) {
        /* plain row copies in the weight's own dtype: no conversion */
        size_t es = amp_dtype_size(weight->dtype);
        const char *src = amp__data(weight);
        char *dst = amp__data(out);
        for (int64_t i = 0; i < cnt; i++) memcpy(dst + (size_t)(i * D) * es, src + (size_t)(iv[i] * D) * es, (size_t)D * es);
    } else {
        for (int64_t i = 0; i < cnt; i++) {
            int64_t wst[1] = {weight->stride[1]}, ost[1] = {1}, len[1] = {D};
            amp_tensor *sv = amp__view(weight, 1, len, wst, weight->offset + iv[i] * weight->stride[0]);
            amp_tensor *dv = sv ? amp__view(out, 1, len, ost, i * D) : NULL;
            amp_status st = dv ? amp__copy_convert(dv, sv) : amp_last_status();
            amp_tensor_free(sv);
            amp_tensor_free(dv);
            if (st != AMP_OK) {
                amp_tensor_free(out);
                out = NULL;
                goto done;
            }
        }
    }
    if (amp__needs_grad(1, in)) {
        amp_node *node = amp__node_new(fn, embedding_backward, 1, in, 0);
        if (!node) {
            amp_tensor_free(out);
            out = NULL;
            goto done;
        }
        amp__node_save(node, indices);
        amp__node_attach(node, out);
    }
done:
    amp__ws_free(iv, ivb);
    amp__autocast_done(in, 2, mask);
    return out;
}

/* embedding: rows of weight [V, D] gathered by i32/i64 indices of any shape
 * -> [..., D] in weight's dtype. The gradient scatter-adds the upstream rows
 * into a [V, D] weight gradient (f32 accumulation). */
#include <string.h>

#include "amp/numeric.h"
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

/* The gradient [V, D] in the weight's dtype: zero except the rows of the
 * indices, each summed in f32 over its occurrences (in order) and rounded
 * once, which are the values of an f32 scatter-add rounded to the weight's
 * dtype. A half weight's gradient is made in its dtype directly (GPT-2's
 * [50257, 768] table: half the bytes to zero and no conversion pass). */
static amp_status embedding_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const amp_tensor *idx = n->saved[0];
    amp_edge *e = &n->inputs[0];
    int64_t V = e->shape[0], D = e->shape[1], cnt = amp_tensor_numel(idx);
    amp_dtype gdt = amp_dtype_is_half(e->dtype) ? e->dtype : AMP_F32;
    amp_tensor *gw = amp__tensor_new("amp_backward", gdt, 2, e->shape, amp__mem_current(AMP_MEM_WORKSPACE), AMP_NEW_UNSCOPED);
    if (!gw) return amp_last_status();
    memset(amp__data(gw), 0, gw->storage->nbytes);
    int64_t *iv = indices_i64(idx, cnt);
    bool og = false;
    const float *pg = iv ? amp__f32_view(gout[0], &og) : NULL;
    /* half: rows accumulated in f32 (one per distinct index, first-use order), then rounded */
    int64_t *slot = NULL, *rows = NULL;
    float *acc = NULL;
    size_t slot_b = (size_t)V * sizeof(int64_t), rows_b = (size_t)(cnt ? cnt : 1) * sizeof(int64_t), acc_b = 0;
    int64_t nd = 0;
    if (pg && gdt != AMP_F32) {
        slot = amp__ws_alloc(slot_b);
        rows = slot ? amp__ws_alloc(rows_b) : NULL;
        if (rows) {
            for (int64_t i = 0; i < cnt; i++) slot[iv[i]] = -1;
            for (int64_t i = 0; i < cnt; i++)
                if (slot[iv[i]] < 0) {
                    slot[iv[i]] = nd;
                    rows[nd++] = iv[i];
                }
            acc_b = (size_t)(nd ? nd : 1) * (size_t)D * sizeof(float);
            acc = amp__ws_alloc(acc_b);
        }
    }
    if (!pg || (gdt != AMP_F32 && !acc)) {
        if (pg) amp__f32_done(gout[0], pg, og);
        amp__ws_free(acc, acc_b);
        amp__ws_free(rows, rows_b);
        amp__ws_free(slot, slot_b);
        amp__ws_free(iv, (size_t)(cnt ? cnt : 1) * sizeof(int64_t));
        amp__release(gw);
        return amp_last_status();
    }
    if (gdt == AMP_F32) {
        float *q = amp__data(gw);
        for (int64_t i = 0; i < cnt; i++) {
            float *row = q + iv[i] * D;
            const float *src = pg + i * D;
            for (int64_t d = 0; d < D; d++) row[d] += src[d];
        }
    } else {
        memset(acc, 0, acc_b);
        for (int64_t i = 0; i < cnt; i++) {
            float *row = acc + slot[iv[i]] * D;
            const float *src = pg + i * D;
            for (int64_t d = 0; d < D; d++) row[d] += src[d];
        }
        size_t es = amp_dtype_size(gdt);
        char *q = amp__data(gw);
        for (int64_t r = 0; r < nd; r++) amp_convert(q + (size_t)(rows[r] * D) * es, gdt, acc + r * D, AMP_F32, (size_t)D, 0);
    }
    amp__f32_done(gout[0], pg, og);
    amp__ws_free(acc, acc_b);
    amp__ws_free(rows, rows_b);
    amp__ws_free(slot, slot_b);
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

/* The CPU backend's gathering entries (kernels/backend.h): embedding rows
 * and their scatter-add, gathers by flat source positions (index_select,
 * gather) and their scatter-add, and the masks of tril/triu/masked_fill.
 * Moved from src/ops/embedding.c and src/ops/indexing.c with the same
 * arithmetic (the suite checks the bits against torch golden data). */
#include <string.h>

#include "amp/numeric.h"
#include "kernels/cpu/backend_cpu.h"
#include "tensor/tensor_impl.h"

static int64_t index_at(const amp_tensor *idx, int64_t flat) {
    const void *p = amp__elem_ptr(idx, flat);
    return idx->dtype == AMP_I64 ? *(const int64_t *)p : (int64_t) * (const int32_t *)p;
}

/* Indices as a contiguous i64 array (workspace, n entries). */
int64_t *amp__cpu_indices_i64(const amp_tensor *idx, int64_t n) {
    int64_t *v = amp__ws_alloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!v) return NULL;
    if (idx->dtype == AMP_I64 && amp_tensor_is_contiguous(idx)) {
        memcpy(v, amp__data(idx), (size_t)n * sizeof(int64_t));
    } else {
        for (int64_t i = 0; i < n; i++) v[i] = index_at(idx, i);
    }
    return v;
}

/* ---- embedding -------------------------------------------------------------------------- */
/* out [cnt, D] (contiguous, weight's dtype) = rows idx of weight (checked) */
static amp_status amp__cpu_embedding(const char *fn, const amp_tensor *weight, const amp_tensor *idx, amp_tensor *out) {
    AMP_UNUSED(fn);
    int64_t D = weight->shape[1], cnt = amp_tensor_numel(idx);
    int64_t *iv = amp__cpu_indices_i64(idx, cnt);
    if (!iv) return amp_last_status();
    size_t ivb = (size_t)(cnt ? cnt : 1) * sizeof(int64_t);
    amp_status st = AMP_OK;
    if (amp_tensor_is_contiguous(weight)) {
        /* plain row copies in the weight's own dtype: no conversion */
        size_t es = amp_dtype_size(weight->dtype);
        const char *src = amp__data(weight);
        char *dst = amp__data(out);
        for (int64_t i = 0; i < cnt; i++) memcpy(dst + (size_t)(i * D) * es, src + (size_t)(iv[i] * D) * es, (size_t)D * es);
    } else {
        for (int64_t i = 0; i < cnt && st == AMP_OK; i++) {
            int64_t wst[1] = {weight->stride[1]}, ost[1] = {1}, len[1] = {D};
            amp_tensor *sv = amp__view(weight, 1, len, wst, weight->offset + iv[i] * weight->stride[0]);
            amp_tensor *dv = sv ? amp__view(out, 1, len, ost, out->offset + i * D) : NULL;
            st = dv ? amp__copy_convert(dv, sv) : amp_last_status();
            amp_tensor_free(sv);
            amp_tensor_free(dv);
        }
    }
    amp__ws_free(iv, ivb);
    return st;
}

/* The gradient [V, D] in the weight's dtype: zero except the rows of the
 * indices, each summed in f32 over its occurrences (in order) and rounded
 * once, which are the values of an f32 scatter-add rounded to the weight's
 * dtype. A half weight's gradient is made in its dtype directly (GPT-2's
 * [50257, 768] table: half the bytes to zero and no conversion pass). */
static amp_status amp__cpu_embedding_backward(const char *fn, const amp_tensor *idx, const amp_tensor *g, int64_t V,
                                              int64_t D, amp_dtype wdtype, amp_tensor **gw_out) {
    AMP_UNUSED(fn);
    int64_t cnt = amp_tensor_numel(idx);
    int64_t wshape[2] = {V, D};
    amp_dtype gdt = amp_dtype_is_half(wdtype) ? wdtype : AMP_F32;
    amp_tensor *gw = amp__tensor_new("amp_backward", gdt, 2, wshape, amp__mem_current(AMP_MEM_WORKSPACE), AMP_NEW_UNSCOPED);
    if (!gw) return amp_last_status();
    memset(amp__data(gw), 0, gw->storage->nbytes);
    int64_t *iv = amp__cpu_indices_i64(idx, cnt);
    bool og = false;
    const float *pg = iv ? amp__f32_view(g, &og) : NULL;
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
        if (pg) amp__f32_done(g, pg, og);
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
    amp__f32_done(g, pg, og);
    amp__ws_free(acc, acc_b);
    amp__ws_free(rows, rows_b);
    amp__ws_free(slot, slot_b);
    amp__ws_free(iv, (size_t)(cnt ? cnt : 1) * sizeof(int64_t));
    *gw_out = gw;
    return AMP_OK;
}

/* ---- gathers by flat position ------------------------------------------------------------ */
/* out[e] = x[src[e]] (src: contiguous i64 flat row-major positions in x; out contiguous, x's dtype) */
static amp_status amp__cpu_gather_flat(const char *fn, const amp_tensor *x, const amp_tensor *src, amp_tensor *out) {
    AMP_UNUSED(fn);
    int64_t n = amp_tensor_numel(out);
    const int64_t *s = amp__data(src);
    size_t es = amp_dtype_size(x->dtype);
    char *dst = amp__data(out);
    for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * es, amp__elem_ptr(x, s[i]), es);
    return AMP_OK;
}

/* gx (f32 zeros of xshape) [src[e]] += g[e], in e order */
static amp_status amp__cpu_gather_flat_backward(const char *fn, const amp_tensor *src, const amp_tensor *g, int ndim,
                                                const int64_t *xshape, amp_tensor **gx_out) {
    AMP_UNUSED(fn);
    amp_tensor *gx = amp__tensor_new("amp_backward", AMP_F32, ndim, xshape, amp__mem_current(AMP_MEM_WORKSPACE),
                                     AMP_NEW_UNSCOPED);
    if (!gx) return amp_last_status();
    memset(amp__data(gx), 0, (size_t)amp_tensor_numel(gx) * sizeof(float));
    bool og = false;
    const float *pg = amp__f32_view(g, &og);
    if (!pg) {
        amp__release(gx);
        return amp_last_status();
    }
    float *q = amp__data(gx);
    const int64_t *s = amp__data(src);
    int64_t n = amp_tensor_numel(src);
    for (int64_t i = 0; i < n; i++) q[s[i]] += pg[i];
    amp__f32_done(g, pg, og);
    *gx_out = gx;
    return AMP_OK;
}

/* ---- masks ------------------------------------------------------------------------------------ */
/* keep element e of a tensor whose last two dims are rows x cols? (kind 0 tril, 1 triu) */
static inline bool tri_keep(int kind, int64_t diagonal, int64_t e, int64_t rows, int64_t cols) {
    int64_t j = e % cols, i = (e / cols) % rows;
    return kind == 0 ? j - i <= diagonal : j - i >= diagonal;
}

/* out = x where kept, else value. out (contiguous) in x's dtype: the kept
 * elements copied as they are; out f32 (a gradient): x widened. mask (kind
 * 2): u8 of x's shape (broadcast strides allowed), nonzero = fill. */
static amp_status amp__cpu_mask_fill(const char *fn, const amp_tensor *x, int kind, int64_t diagonal,
                                     const amp_tensor *mask, double value, amp_tensor *out) {
    int64_t cnt = amp_tensor_numel(x);
    int64_t rows = x->ndim >= 2 ? x->shape[x->ndim - 2] : 1, cols = x->ndim >= 1 ? x->shape[x->ndim - 1] : 1;
    if (kind == 2 && (!mask || mask->dtype != AMP_U8))
        return amp_error(AMP_ERR_ARG, "%s: mask_fill: the mask must be a u8 tensor", fn);
    if (out->dtype == x->dtype) {
        size_t es = amp_dtype_size(x->dtype);
        char fill[8];
        amp__store(fill, x->dtype, value);
        char *dst = amp__data(out);
        for (int64_t i = 0; i < cnt; i++) {
            bool keep = kind == 2 ? *(const uint8_t *)amp__elem_ptr(mask, i) == 0 : tri_keep(kind, diagonal, i, rows, cols);
            memcpy(dst + (size_t)i * es, keep ? amp__elem_ptr(x, i) : fill, es);
        }
        return AMP_OK;
    }
    if (out->dtype != AMP_F32)
        return amp_error(AMP_ERR_DTYPE, "%s: mask_fill from %s into %s (x's dtype or f32 only)", fn,
                         amp_dtype_name(x->dtype), amp_dtype_name(out->dtype));
    bool og = false;
    const float *px = amp__f32_view(x, &og);
    if (!px) return amp_last_status();
    float *q = amp__data(out), fv = (float)value;
    for (int64_t i = 0; i < cnt; i++) {
        bool keep = kind == 2 ? *(const uint8_t *)amp__elem_ptr(mask, i) == 0 : tri_keep(kind, diagonal, i, rows, cols);
        q[i] = keep ? px[i] : fv;
    }
    amp__f32_done(x, px, og);
    return AMP_OK;
}

const amp_gather_family amp__cpu_gather_family = {
    .embedding = amp__cpu_embedding, .embedding_backward = amp__cpu_embedding_backward,
    .gather_flat = amp__cpu_gather_flat, .gather_flat_backward = amp__cpu_gather_flat_backward,
    .mask_fill = amp__cpu_mask_fill,
};

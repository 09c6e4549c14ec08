/* The CUDA backend's entries for the matrix-product ops' helpers and for
 * gathering (kernels/backend.h): host-side checks and descriptors around
 * the launchers of launch_gather.h. */
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/launch_gather.h"

/* linear's bias gradient: deterministic f32 column sums (matmul_aux.cu) */
amp_status amp__cu_bias_grad(const char *fn, const amp_tensor *g, int64_t rows, int64_t n, amp_tensor *out) {
    if (g->dtype != AMP_F32 && g->dtype != AMP_F16 && g->dtype != AMP_BF16)
        return amp_error(AMP_ERR_DTYPE, "%s: bias gradient of dtype %s (f32, f16 or bf16 only)", fn, amp_dtype_name(g->dtype));
    /* an empty g reads nothing, whatever its strides ([5, 0] made on the
     * device need not have the strides amp_tensor_is_contiguous expects) */
    bool empty = rows == 0 || n == 0;
    if (rows < 0 || n < 0 || (!empty && !amp_tensor_is_contiguous(g)) || out->dtype != AMP_F32 || amp_tensor_numel(out) != n ||
        amp_tensor_numel(g) != rows * n)
        return amp_error(AMP_ERR_ARG, "%s: bias gradient: g must be contiguous [%lld, %lld] and out f32 [%lld]", fn,
                         (long long)rows, (long long)n, (long long)n);
    if (n == 0) return AMP_OK; /* rows == 0: the sums below are zeros */
    int64_t chunk;
    int64_t nchunks = amp_cu_colsum_chunks(rows, n, &chunk);
    float *part = NULL;
    if (nchunks > 1) {
        part = amp__cu_scratch((size_t)(nchunks * n) * sizeof(float));
        if (!part) return amp_last_status();
    }
    amp_status st =
        AMP_CU(fn, amp_cu_colsum(amp__cu.stream, amp__data(g), (int)g->dtype, rows, n, chunk, part, (float *)amp__data(out)));
    if (part) amp__cu_scratch_free(part); /* the stream orders its reuse after the sums */
    return st;
}

/* ---- embedding ------------------------------------------------------------------------- */
static bool is_float3(amp_dtype dt) { return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16; }

amp_status amp__cu_embedding(const char *fn, const amp_tensor *weight, const amp_tensor *idx, amp_tensor *out) {
    if (idx->dtype != AMP_I32 && idx->dtype != AMP_I64)
        return amp_error(AMP_ERR_DTYPE, "%s: indices have dtype %s; expected i32 or i64", fn, amp_dtype_name(idx->dtype));
    if (weight->ndim != 2 || out->dtype != weight->dtype || !amp_tensor_is_contiguous(out))
        return amp_error(AMP_ERR_ARG, "%s: embedding: weight must be 2-d and out contiguous in its dtype", fn);
    amp_cu_tensor d = amp__cu_desc(idx);
    return AMP_CU(fn, amp_cu_embedding(amp__cu.stream, amp__data(weight), (int)amp_dtype_size(weight->dtype), weight->shape[0],
                                       weight->shape[1], weight->stride[0], weight->stride[1], &d, amp__data(out)));
}

/* gw [V, D]: f32 (atomics straight into it), or a half weight's dtype (f32
 * sums in scratch, each rounded once into gw) */
amp_status amp__cu_embedding_backward(const char *fn, const amp_tensor *idx, const amp_tensor *g, int64_t V, int64_t D,
                                      amp_dtype wdtype, amp_tensor **gw_out) {
    if (!is_float3(g->dtype))
        return amp_error(AMP_ERR_DTYPE, "%s: embedding gradient of dtype %s (f32, f16 or bf16 only)", fn,
                         amp_dtype_name(g->dtype));
    int64_t cnt = amp_tensor_numel(idx);
    if (amp_tensor_numel(g) != cnt * D)
        return amp_error(AMP_ERR_SHAPE, "%s: embedding gradient has %lld elements; expected %lld x %lld", fn,
                         (long long)amp_tensor_numel(g), (long long)cnt, (long long)D);
    amp_dtype gdt = amp_dtype_is_half(wdtype) ? wdtype : AMP_F32;
    int64_t wshape[2] = {V, D};
    amp_tensor *gw = amp__tensor_new_on("amp_backward", AMP_DEVICE_CUDA, gdt, 2, wshape, amp__mem_current(AMP_MEM_WORKSPACE),
                                        AMP_NEW_UNSCOPED);
    if (!gw) return amp_last_status();
    amp_tensor *gc = NULL; /* g made contiguous when it is not */
    float *acc = gdt == AMP_F32 ? (float *)amp__data(gw) : NULL;
    size_t accb = (size_t)(V * D) * sizeof(float);
    amp_status st = AMP_OK;
    if (!acc && !(acc = amp__cu_scratch(accb ? accb : 4))) st = amp_last_status();
    if (st == AMP_OK && accb) st = AMP_CU(fn, cudaMemsetAsync(acc, 0, accb, amp__cu.stream));
    const amp_tensor *gg = g;
    if (st == AMP_OK && !amp_tensor_is_contiguous(g)) {
        gc = amp__tensor_new_on(fn, AMP_DEVICE_CUDA, g->dtype, g->ndim, g->shape, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
        st = gc ? amp__copy_convert(gc, g) : amp_last_status();
        gg = gc;
    }
    if (st == AMP_OK) {
        amp_cu_tensor d = amp__cu_desc(idx);
        st = AMP_CU(fn, amp_cu_embedding_backward(amp__cu.stream, &d, amp__data(gg), (int)gg->dtype, D, 1, V, D, acc));
    }
    if (st == AMP_OK && gdt != AMP_F32 && V * D > 0) { /* round the f32 sums once into gw */
        amp_cu_tensor dd, ss;
        memset(&dd, 0, sizeof dd);
        memset(&ss, 0, sizeof ss);
        dd.ndim = ss.ndim = 1;
        dd.shape[0] = ss.shape[0] = V * D;
        dd.stride[0] = ss.stride[0] = 1;
        dd.p = amp__data(gw), dd.dtype = (int)gdt;
        ss.p = acc, ss.dtype = AMP_F32;
        st = AMP_CU(fn, amp_cu_copy(amp__cu.stream, &dd, &ss));
    }
    if (gdt != AMP_F32 && acc) amp__cu_scratch_free(acc); /* the stream orders its reuse */
    amp__release(gc);
    if (st != AMP_OK) {
        amp__release(gw);
        return st;
    }
    *gw_out = gw;
    return AMP_OK;
}

/* ---- gathers by flat position ------------------------------------------------------------ */
amp_status amp__cu_gather_flat(const char *fn, const amp_tensor *x, const amp_tensor *src, amp_tensor *out) {
    if (src->dtype != AMP_I64 || !amp_tensor_is_contiguous(src) || !amp_tensor_is_contiguous(out) || out->dtype != x->dtype ||
        amp_tensor_numel(src) != amp_tensor_numel(out))
        return amp_error(AMP_ERR_ARG, "%s: gather: src must be contiguous i64 with one position per element of out", fn);
    amp_cu_tensor d = amp__cu_desc(x);
    return AMP_CU(fn, amp_cu_gather_flat(amp__cu.stream, &d, amp__data(src), amp_tensor_numel(src), amp__data(out)));
}

amp_status amp__cu_gather_flat_backward(const char *fn, const amp_tensor *src, const amp_tensor *g, int ndim,
                                        const int64_t *xshape, amp_tensor **gx_out) {
    if (src->dtype != AMP_I64 || !amp_tensor_is_contiguous(src) || amp_tensor_numel(src) != amp_tensor_numel(g) ||
        !amp_dtype_is_float(g->dtype))
        return amp_error(AMP_ERR_ARG, "%s: gather backward: src must be contiguous i64 with one position per gradient element",
                         fn);
    amp_tensor *gx = amp__tensor_new_on("amp_backward", AMP_DEVICE_CUDA, AMP_F32, ndim, xshape,
                                        amp__mem_current(AMP_MEM_WORKSPACE), AMP_NEW_UNSCOPED);
    if (!gx) return amp_last_status();
    size_t nb = (size_t)amp_tensor_numel(gx) * sizeof(float);
    amp_status st = nb ? AMP_CU(fn, cudaMemsetAsync(amp__data(gx), 0, nb, amp__cu.stream)) : AMP_OK;
    if (st == AMP_OK) {
        amp_cu_tensor d = amp__cu_desc(g);
        st = AMP_CU(fn, amp_cu_gather_flat_backward(amp__cu.stream, amp__data(src), &d, amp_tensor_numel(src), amp__data(gx)));
    }
    if (st != AMP_OK) {
        amp__release(gx);
        return st;
    }
    *gx_out = gx;
    return AMP_OK;
}

/* ---- masks ------------------------------------------------------------------------------------ */
amp_status amp__cu_mask_fill(const char *fn, const amp_tensor *x, int kind, int64_t diagonal, const amp_tensor *mask,
                             double value, amp_tensor *out) {
    if (kind < 0 || kind > 2 || (kind == 2 && (!mask || mask->dtype != AMP_U8 || mask->ndim != x->ndim)))
        return amp_error(AMP_ERR_ARG, "%s: mask_fill: kind %d (0 tril, 1 triu, 2 a u8 mask of x's shape)", fn, kind);
    if (!amp_tensor_is_contiguous(out) || amp_tensor_numel(out) != amp_tensor_numel(x) ||
        (out->dtype != x->dtype && out->dtype != AMP_F32))
        return amp_error(AMP_ERR_ARG, "%s: mask_fill: out must be contiguous, x's size, in x's dtype or f32", fn);
    amp_cu_mask_args a;
    memset(&a, 0, sizeof a);
    a.kind = kind;
    a.diagonal = diagonal;
    a.rows = x->ndim >= 2 ? x->shape[x->ndim - 2] : 1;
    a.cols = x->ndim >= 1 ? x->shape[x->ndim - 1] : 1;
    a.n = amp_tensor_numel(x);
    unsigned char fill[8] = {0};
    amp__store(fill, out->dtype, value);
    memcpy(&a.fill_bits, fill, sizeof fill);
    a.fill = (float)value;
    a.out_dtype = (int)out->dtype;
    a.out = amp__data(out);
    /* the output's flat order is x's: a contiguous descriptor beside x's and the mask's, coalesced */
    amp_cu_tensor o = amp__cu_desc(out), xd = amp__cu_desc(x), md;
    o.ndim = x->ndim;
    amp__contig_strides(x->ndim, x->shape, o.stride);
    for (int i = 0; i < x->ndim; i++) o.shape[i] = x->shape[i];
    amp_cu_tensor *ts[3] = {&o, &xd, &md};
    int nt = 2;
    if (kind == 2) {
        md = amp__cu_desc(mask);
        nt = 3;
    }
    amp__cu_coalesce(ts, nt);
    return AMP_CU(fn, amp_cu_mask_fill(amp__cu.stream, &a, &xd, kind == 2 ? &md : NULL));
}

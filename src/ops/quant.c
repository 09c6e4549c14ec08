/* Quantized weights as ops (amp/quant.h): amp_quantize / amp_dequantize
 * between float tensors and amp_qtensor, the weight-only quantized linear
 * (autograd for x and b through the dequantized weight) and the quantized
 * embedding gather. The arithmetic is the backend's quant family
 * (kernels/family/quant.h); the block formats are numeric/quant.c's. */
#include <stdlib.h>
#include <string.h>

#include "numeric/quant_impl.h"
#include "ops/op_util.h"
#include "tensor/f32_util.h"

static bool check_q(const char *fn, const amp_qtensor *q, const char *name) {
    if (!q) {
        amp_error_chain(AMP_ERR_ARG, "%s: %s is NULL", fn, name);
        return false;
    }
    return true;
}

static bool check_out_dtype(const char *fn, amp_dtype dt) {
    if (dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16) return true;
    amp_error(AMP_ERR_DTYPE, "%s: dt is %s; expected f32, f16 or bf16", fn, amp_dtype_name(dt));
    return false;
}

static void free_blocks(void *p) { free(p); }

amp_qtensor *amp_quantize(amp_tensor *w, amp_qtype t) {
    static const char *fn = "amp_quantize";
    if (!amp__arg(fn, w, "w") || !amp__check_float(fn, w, "w") || !amp__check_ndim(fn, w, "w", 2, 2)) return NULL;
    if ((int)t < 0 || t >= AMP_QTYPE_COUNT)
        return amp_error_null(AMP_ERR_ARG, "%s: t is %d, not a quantized type (0 to %d)", fn, (int)t, AMP_QTYPE_COUNT - 1);
    if (t != AMP_Q8_0 && t != AMP_Q4_0 && t != AMP_Q4_1)
        return amp_error_null(AMP_ERR_UNSUPPORTED, "%s: quantizing to %s is not implemented (q8_0, q4_0 and q4_1 are)",
                              fn, amp_qtype_name(t));
    int64_t R = w->shape[0], C = w->shape[1], be = amp_qtype_block_elems(t);
    if (C % be != 0)
        return amp_error_null(AMP_ERR_SHAPE, "%s: w is [%lld,%lld]: its %lld columns are not a multiple of %s's block of %lld",
                              fn, (long long)R, (long long)C, (long long)C, amp_qtype_name(t), (long long)be);
    const amp_backend *bk = amp__backend_of(fn, w);
    if (!bk) return NULL;
    size_t nbytes = (size_t)R * amp__qrow_bytes(t, C);
    void *blocks = malloc(nbytes ? nbytes : 1);
    if (!blocks) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory for %zu bytes of %s blocks", fn, nbytes, amp_qtype_name(t));
    if (R * C > 0 && AMP_KCALL(bk, quant, quantize, fn, w, t, blocks) != AMP_OK) {
        free(blocks);
        return NULL;
    }
    amp_qtensor *q = amp_qtensor_wrap(t, R, C, blocks, nbytes, free_blocks, blocks);
    if (!q) {
        free(blocks);
        return amp_error_chain_null(AMP_ERR_NOMEM, "%s: could not wrap the blocks", fn);
    }
    return q;
}

amp_tensor *amp_dequantize(const amp_qtensor *q, amp_dtype dt) {
    static const char *fn = "amp_dequantize";
    if (!check_q(fn, q, "q") || !check_out_dtype(fn, dt)) return NULL;
    const amp_backend *bk = amp__backend(fn, AMP_DEVICE_CPU);
    if (!bk) return NULL;
    int64_t shape[2] = {q->rows, q->cols};
    amp_tensor *out = amp__empty_out_on(fn, AMP_DEVICE_CPU, dt, 2, shape);
    if (!out) return NULL;
    if (q->rows * q->cols > 0 && AMP_KCALL(bk, quant, dequantize, fn, q, out) != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

/* ---- qlinear ------------------------------------------------------------------------------------ */
typedef struct {
    amp_qtensor *w;
} qlinear_ctx;

static void qlinear_ctx_free(void *p) { amp_qtensor_free(((qlinear_ctx *)p)->w); }

static amp_status qlinear_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const qlinear_ctx *c = n->ctx;
    const char *fn = n->name;
    amp_tensor *g = gout[0];
    const amp_backend *be = amp__backend_of(fn, g);
    if (!be) return amp_last_status();
    if (n->inputs[0].needs_grad) {
        const amp_edge *e = &n->inputs[0];
        amp_status st = AMP_KCALL(be, quant, qlinear_backward_x, fn, g, c->w, e->ndim, e->shape, &gin[0]);
        if (st != AMP_OK) return st;
    }
    if (n->inputs[1].needs_grad) {
        int64_t N = c->w->rows, R = N ? amp_tensor_numel(g) / N : 0;
        amp_tensor *gc = g, *gb = NULL;
        if (!amp_tensor_is_contiguous(g)) {
            gc = amp__tensor_new_on(fn, amp__dev(g), g->dtype, g->ndim, g->shape, amp__mem_current(AMP_MEM_WORKSPACE),
                                    AMP_NEW_UNSCOPED);
            if (!gc || amp__copy_convert(gc, g) != AMP_OK) {
                if (gc) amp__release(gc);
                return amp_last_status();
            }
        }
        gb = amp__f32_tensor(fn, 1, &N, AMP_MEM_WORKSPACE);
        amp_status st = gb ? AMP_KCALL(be, gemm, bias_grad, fn, gc, R, N, gb) : amp_last_status();
        if (gc != g) amp__release(gc);
        if (amp__grad_result(st, gb, &gin[1]) != AMP_OK) return st;
    }
    return AMP_OK;
}

amp_tensor *amp_qlinear(amp_tensor *x, const amp_qtensor *w, amp_tensor *b) {
    static const char *fn = "amp_qlinear";
    if (!amp__arg(fn, x, "x") || !check_q(fn, w, "w")) return NULL;
    if (!amp__check_float(fn, x, "x") || !amp__check_ndim(fn, x, "x", 1, AMP_MAX_DIMS)) return NULL;
    if (b && (!amp__check_float(fn, b, "b") || !amp__check_ndim(fn, b, "b", 1, 1))) return NULL;
    int64_t N = w->rows, K = w->cols;
    if (x->shape[x->ndim - 1] != K) {
        char s[AMP_SHAPE_BUF];
        return amp_error_null(AMP_ERR_SHAPE, "%s: x is %s but w (%s) is [%lld,%lld]: x's last dim must be %lld", fn,
                              amp__shape_fmt(x->ndim, x->shape, s, sizeof s), amp_qtype_name(w->type), (long long)N,
                              (long long)K, (long long)K);
    }
    if (b && b->shape[0] != N)
        return amp_error_null(AMP_ERR_SHAPE, "%s: b has %lld values but w has %lld rows", fn, (long long)b->shape[0],
                              (long long)N);
    amp_tensor *in[2] = {x, b};
    amp_device dev;
    int mask = amp__autocast_dev(AMP_OP_QLINEAR, in, b ? 2 : 1, &dev);
    if (mask < 0) return NULL;
    x = in[0];
    amp_tensor *out = NULL;
    const amp_backend *be = amp__backend(fn, dev);
    bool ok = false;
    if (be) {
        amp_dtype odt = x->dtype; /* as linear: f32, or the region's dtype when autocast cast x */
        int64_t shape[AMP_MAX_DIMS];
        memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
        shape[x->ndim - 1] = N;
        out = amp__empty_out_on(fn, dev, odt, x->ndim, shape);
        ok = out && AMP_KCALL(be, quant, qlinear, fn, x, w, in[1], out) == AMP_OK;
    }
    qlinear_ctx ctx = {.w = (amp_qtensor *)w};
    amp_node_spec spec = {.backward = qlinear_backward, .ctx = &ctx, .ctx_size = sizeof ctx, .ctx_free = qlinear_ctx_free};
    bool need = ok && amp__needs_grad(b ? 2 : 1, in);
    if (need) amp_qtensor_retain(ctx.w);
    amp_tensor *r = amp__op_end(fn, ok, out, in, b ? 2 : 1, mask, need ? &spec : NULL, NULL, 0);
    return r;
}

amp_tensor *amp_qembedding(const amp_qtensor *w, amp_tensor *idx, amp_dtype dt) {
    static const char *fn = "amp_qembedding";
    if (!check_q(fn, w, "w") || !amp__arg(fn, idx, "idx") || !amp__check_index(fn, idx, "idx") ||
        !check_out_dtype(fn, dt))
        return NULL;
    if (idx->ndim + 1 > AMP_MAX_DIMS)
        return amp_error_null(AMP_ERR_SHAPE, "%s: idx has %d dims; the result would have more than %d", fn, idx->ndim,
                              AMP_MAX_DIMS);
    int64_t cnt = amp_tensor_numel(idx);
    for (int64_t i = 0; i < cnt; i++) {
        const void *p = amp__elem_ptr(idx, i);
        int64_t v = idx->dtype == AMP_I64 ? *(const int64_t *)p : (int64_t) * (const int32_t *)p;
        if (v < 0 || v >= w->rows)
            return amp_error_null(AMP_ERR_RANGE, "%s: index %lld (element %lld of idx) is out of range for w's %lld rows",
                                  fn, (long long)v, (long long)i, (long long)w->rows);
    }
    const amp_backend *be = amp__backend(fn, AMP_DEVICE_CPU);
    if (!be) return NULL;
    int64_t shape[AMP_MAX_DIMS];
    memcpy(shape, idx->shape, sizeof(int64_t) * (size_t)idx->ndim);
    shape[idx->ndim] = w->cols;
    amp_tensor *out = amp__empty_out_on(fn, AMP_DEVICE_CPU, dt, idx->ndim + 1, shape);
    if (!out) return NULL;
    if (cnt * w->cols > 0 && AMP_KCALL(be, quant, qembedding, fn, w, idx, out) != AMP_OK) {
        amp_tensor_free(out);
        return NULL;
    }
    return out;
}

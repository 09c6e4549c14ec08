/* The CPU backend's softmax / log_softmax entries (kernels/backend.h): the
 * staging src/ops/softmax.c did around the kernels of kernels/cpu/softmax.h
 * (contiguous rows straight from the tensor's memory, else an f32 copy and
 * an f32 result rounded once into y). */
#include "kernels/cpu/backend_cpu_norm.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/softmax.h"
#include "tensor/f32_util.h"

amp_status amp__cpu_softmax(const char *fn, const amp_tensor *x, int dim, bool log, amp_tensor *y) {
    AMP_UNUSED(fn);
    int64_t outer, len, inner;
    amp__split_dim(x, dim, &outer, &len, &inner);
    if (inner == 1 && x->dtype != AMP_F64 && amp_tensor_is_contiguous(x) &&
        (x->dtype == AMP_F32 || len <= AMP_K_ROW_MAX)) {
        /* rows straight from x's memory: half rows are widened one at a
         * time in the kernel (same values as the f32 copy below) */
        amp_k_softmax_rows(amp__data(x), x->dtype, outer, len, amp__data(y), y->dtype, log);
        return AMP_OK;
    }
    bool owned;
    const float *px = amp__f32_view(x, &owned);
    float *po = px ? amp__f32_out_begin(y) : NULL;
    if (!po) {
        if (px) amp__f32_done(x, px, owned);
        return amp_last_status();
    }
    amp_k_softmax(px, outer, len, inner, po, log);
    amp__f32_out_end(y, po);
    amp__f32_done(x, px, owned);
    return AMP_OK;
}

amp_status amp__cpu_softmax_backward(const char *fn, const amp_tensor *y, const amp_tensor *g, int dim, bool log,
                                     amp_tensor **gx) {
    AMP_UNUSED(fn);
    int64_t outer, len, inner;
    amp__split_dim(y, dim, &outer, &len, &inner);
    amp_tensor *t = amp__f32_grad(y->ndim, y->shape, false);
    if (!t) return amp_last_status();
    bool oy, og = false;
    const float *py = amp__f32_view(y, &oy);
    const float *pg = py ? amp__f32_view(g, &og) : NULL;
    if (!pg) {
        if (py) amp__f32_done(y, py, oy);
        amp__release(t);
        return amp_last_status();
    }
    amp_k_softmax_backward(py, pg, outer, len, inner, amp__data(t), log);
    amp__f32_done(y, py, oy);
    amp__f32_done(g, pg, og);
    *gx = t;
    return AMP_OK;
}

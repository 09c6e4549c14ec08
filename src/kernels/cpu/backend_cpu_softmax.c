/* The CPU backend's softmax / log_softmax entries (kernels/backend.h): the
 * staging src/ops/softmax.c did around the kernels of kernels/cpu/softmax.h
 * (contiguous rows straight from the tensor's memory, else an f32 copy and
 * an f32 result rounded once into y). */
#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/softmax.h"
#include "tensor/f32_util.h"

/* ---- softmax.h's kernels ------------------------------------------------------------------------
 * Softmax kernels: dispatch to the active CPU path's build of softmax.inc
 * (softmax_scalar.c, softmax_avx2.c and softmax_avx512.c).
 *
 * Rows (the innermost-dim case): a max pass, an exp pass that stores
 * exp(x - max) and sums it in 16 lanes, and a scale pass; the row stays in
 * L1 between passes, so memory sees one read and one write. log_softmax is
 * (x - max) - log(sum), exact near the max. The strided case works on
 * chunks of columns so the inner loop is contiguous. */
AMP_K_PATH_DISPATCH(softmax_k, amp_softmax_kernels, amp_softmax_kernels)

void amp_k_softmax(const float *x, int64_t outer, int64_t len, int64_t inner, float *y, bool log) {
    softmax_k()->softmax(x, outer, len, inner, y, log);
}

void amp_k_softmax_rows(const void *x, amp_dtype xdt, int64_t rows, int64_t len, void *y, amp_dtype ydt, bool log) {
    softmax_k()->rows(x, xdt, rows, len, y, ydt, log);
}

void amp_k_softmax_backward(const float *y, const float *g, int64_t outer, int64_t len, int64_t inner, float *gx,
                            bool log) {
    softmax_k()->backward(y, g, outer, len, inner, gx, log);
}

void amp_k_xent_rows(const void *x, amp_dtype xdt, int64_t rows, int64_t len, const int64_t *t, int64_t ignore, double *loss,
                     float *work) {
    softmax_k()->xent(x, xdt, rows, len, t, ignore, loss, work);
}

void amp_k_xent_rows_backward(const void *x, amp_dtype xdt, int64_t rows, int64_t len, const int64_t *t, int64_t ignore,
                              const double *g, void *gx, amp_dtype gdt, float *work) {
    softmax_k()->xent_backward(x, xdt, rows, len, t, ignore, g, gx, gdt, work);
}

static amp_status amp__cpu_softmax(const char *fn, const amp_tensor *x, int dim, bool log, amp_tensor *y) {
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
    amp__cpu_f32_io io;
    if (!amp__cpu_f32_io_begin(&io, x, y)) return amp_last_status();
    amp_k_softmax(io.in, outer, len, inner, io.o, log);
    amp__cpu_f32_io_end(&io);
    return AMP_OK;
}

static amp_status amp__cpu_softmax_backward(const char *fn, const amp_tensor *y, const amp_tensor *g, int dim, bool log,
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

const amp_softmax_family amp__cpu_softmax_family = {.softmax = amp__cpu_softmax,
                                                    .softmax_backward = amp__cpu_softmax_backward};

/* The CPU backend's pooling entries (kernels/backend.h: max_pool2d,
 * max_pool2d_backward, avg_pool2d, avg_pool2d_backward) and their choice of
 * kernel path. The loops are kernels/cpu/pool_scalar.c's (f32 planes: half inputs
 * widened, each result rounded once), with the AVX-512 2 x 2 / stride 2 max
 * pool of pool_avx512.c, which reads and writes the tensor's own dtype and
 * keeps one-byte window slots for the backward instead of 8-byte indices. */
#include <string.h>

#include "core/cpu.h"
#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/pool.h"
#include "tensor/f32_util.h"

/* pool.h's per-path dispatch of the slot backward: the AVX-512 form where
 * the path has it and it applies (it returns false otherwise), else the
 * plain loops */
void amp_max_pool2d_backward_k2slot(const void *dy, amp_dtype dt, const uint8_t *slot, void *dx, int64_t planes,
                                    const amp_pool_geom *g) {
    if (amp_cpu_active() >= AMP_CPU_AVX512 && amp_max_pool2d_backward_k2slot_avx512(dy, dt, slot, dx, planes, g)) return;
    amp_max_pool2d_backward_k2slot_scalar(dy, dt, slot, dx, planes, g);
}

static amp_pool_geom geom_of(const amp_pool_args *a) {
    amp_pool_geom g = {.H = a->H, .W = a->W, .OH = a->OH, .OW = a->OW, .kh = a->kh, .kw = a->kw, .sh = a->sh,
                       .sw = a->sw, .ph = a->ph, .pw = a->pw, .dh = a->dh, .dw = a->dw};
    return g;
}

/* x's shape with the last two dims (H, W) replaced by (OH, OW): the pooled shape */
static void pooled_shape(const amp_tensor *x, const amp_pool_args *a, int64_t *shape) {
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 2] = a->OH;
    shape[x->ndim - 1] = a->OW;
}

/* The f32 backward loops: *gx = a new f32 gradient of xshape from dy widened
 * to f32; idx: max pool's flat indices, NULL for the average pools. */
static amp_status f32_backward(const amp_tensor *gy, int ndim, const int64_t *xshape, const amp_pool_args *a,
                               const amp_tensor *idx, amp_tensor **gx) {
    const amp_pool_geom g = geom_of(a);
    amp_tensor *dx = amp__tensor_new("amp_backward", AMP_F32, ndim, xshape, amp__mem_current(AMP_MEM_WORKSPACE), 0);
    if (!dx) return amp_last_status();
    bool owned;
    const float *dy = amp__f32_view(gy, &owned);
    if (!dy) {
        amp__release(dx);
        return amp_last_status();
    }
    if (idx)
        amp_max_pool2d_backward_f32(dy, amp__data(idx), amp__data(dx), a->planes, &g);
    else if (a->adaptive)
        amp_adaptive_avg_pool2d_backward_f32(dy, amp__data(dx), a->planes, g.H, g.W, g.OH, g.OW);
    else
        amp_avg_pool2d_backward_f32(dy, amp__data(dx), a->planes, &g, a->include_pad);
    amp__f32_done(gy, dy, owned);
    *gx = dx;
    return AMP_OK;
}

/* ---- max pool ------------------------------------------------------------------------- */
/* windows that never overlap: each input position gets at most one dy */
static bool disjoint(const amp_pool_geom *g) { return g->dh == 1 && g->dw == 1 && g->kh <= g->sh && g->kw <= g->sw; }

static amp_status amp__cpu_max_pool2d(const char *fn, const amp_pool_args *a, const amp_tensor *x, amp_tensor *y,
                                      amp_tensor **idxp) {
    const amp_pool_geom g = geom_of(a);
    /* The 2 x 2 / stride 2 path in the tensor's dtype (AVX-512). Unless the
     * caller asks for the indices, it keeps only what the backward needs: the
     * window position of each max in one byte (none without autograd),
     * instead of an 8-byte flat index. */
    const bool k2 = amp_cpu_active() >= AMP_CPU_AVX512 && amp_tensor_is_contiguous(x) && amp_max_pool2d_k2_ok(&g) &&
                    (x->dtype == AMP_F32 || x->dtype == AMP_F16 || x->dtype == AMP_BF16);
    amp_tensor *idx = idxp ? *idxp : NULL, *made = NULL;
    if (!idx && (!k2 || idxp)) {
        /* the indices the general loop writes (kept for the backward when asked), or the 2 x 2 path's slots */
        int64_t shape[AMP_MAX_DIMS];
        pooled_shape(x, a, shape);
        amp_mem_category c = amp__mem_current(amp__engine_depth ? AMP_MEM_WORKSPACE : AMP_MEM_ACTIVATION); /* an op output's */
        idx = made = amp__tensor_new_on(fn, AMP_DEVICE_CPU, k2 ? AMP_U8 : AMP_I64, x->ndim, shape, c, AMP_NEW_UNSCOPED);
        if (!idx) return amp_last_status();
    }
    if (k2) {
        const bool slots = idx && idx->dtype == AMP_U8;
        amp_max_pool2d_k2_avx512(amp__data(x), x->dtype, amp__data(y), idx && !slots ? amp__data(idx) : NULL,
                                 slots ? amp__data(idx) : NULL, a->planes, &g);
    } else {
        amp__cpu_f32_io io;
        if (!amp__cpu_f32_io_begin(&io, x, y)) {
            amp__release(made);
            return amp_last_status();
        }
        amp_max_pool2d_f32(io.in, io.o, amp__data(idx), a->planes, &g);
        amp__cpu_f32_io_end(&io);
    }
    if (idxp && !*idxp) *idxp = made;
    else amp__release(made);
    return AMP_OK;
}

static amp_status amp__cpu_max_pool2d_backward(const char *fn, const amp_pool_args *a, const amp_tensor *idx,
                                               const amp_tensor *gy, int ndim, const int64_t *xshape, amp_tensor **gx) {
    AMP_UNUSED(fn);
    *gx = NULL;
    const amp_pool_geom g = geom_of(a);
    if (disjoint(&g) && amp_tensor_is_contiguous(gy) &&
        (gy->dtype == AMP_F32 || gy->dtype == AMP_F16 || gy->dtype == AMP_BF16)) {
        /* the gradient in dy's dtype, written once (no f32 buffer, no cast after) */
        amp_tensor *dx = amp__tensor_new("amp_backward", gy->dtype, ndim, xshape, amp__mem_current(AMP_MEM_WORKSPACE), 0);
        if (!dx) return amp_last_status();
        if (idx->dtype == AMP_U8) /* the 2 x 2 path's window slots */
            amp_max_pool2d_backward_k2slot(amp__data(gy), gy->dtype, amp__data(idx), amp__data(dx), a->planes, &g);
        else
            amp_max_pool2d_backward_disjoint(amp__data(gy), gy->dtype, amp__data(idx), amp__data(dx), a->planes, &g);
        *gx = dx;
        return AMP_OK;
    }
    return f32_backward(gy, ndim, xshape, a, idx, gx);
}

/* ---- average pools (a->adaptive: adaptive_avg_pool2d) ---------------------------------- */
static amp_status amp__cpu_avg_pool2d(const char *fn, const amp_pool_args *a, const amp_tensor *x, amp_tensor *y) {
    AMP_UNUSED(fn);
    const amp_pool_geom g = geom_of(a);
    amp__cpu_f32_io io;
    if (!amp__cpu_f32_io_begin(&io, x, y)) return amp_last_status();
    if (a->adaptive)
        amp_adaptive_avg_pool2d_f32(io.in, io.o, a->planes, g.H, g.W, g.OH, g.OW);
    else
        amp_avg_pool2d_f32(io.in, io.o, a->planes, &g, a->include_pad);
    amp__cpu_f32_io_end(&io);
    return AMP_OK;
}

static amp_status amp__cpu_avg_pool2d_backward(const char *fn, const amp_pool_args *a, const amp_tensor *gy, int ndim,
                                               const int64_t *xshape, amp_tensor **gx) {
    AMP_UNUSED(fn);
    *gx = NULL;
    return f32_backward(gy, ndim, xshape, a, NULL, gx);
}

const amp_pool_family amp__cpu_pool_family = {
    .max_pool2d = amp__cpu_max_pool2d, .max_pool2d_backward = amp__cpu_max_pool2d_backward,
    .avg_pool2d = amp__cpu_avg_pool2d, .avg_pool2d_backward = amp__cpu_avg_pool2d_backward,
};

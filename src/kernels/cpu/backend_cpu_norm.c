/* The CPU backend's normalisation entries (kernels/backend.h): the
 * CPU-specific staging that src/ops/norm.c did (f32 views of inputs in other
 * dtypes or strides, f32 output buffers rounded once into half outputs)
 * around the kernels of kernels/cpu/norm.h. Statistics in f32 from sums in
 * double; the arithmetic is the kernels'. */
#include <string.h>

#include "kernels/cpu/backend_cpu_norm.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/norm.h"
#include "ops/f32_util.h"

/* f32 views of up to 4 optional tensors; on failure releases what it took. */
typedef struct {
    const float *p[4];
    bool owned[4];
    const amp_tensor *t[4];
    int n;
} views;

static bool views_get(views *v, int n, const amp_tensor *const *ts) {
    memset(v, 0, sizeof *v);
    v->n = n;
    for (int i = 0; i < n; i++) {
        v->t[i] = ts[i];
        if (!ts[i]) continue;
        v->p[i] = amp__f32_view(ts[i], &v->owned[i]);
        if (!v->p[i]) {
            for (int j = 0; j < i; j++)
                if (v->p[j]) amp__f32_done(v->t[j], v->p[j], v->owned[j]);
            memset(v, 0, sizeof *v);
            return false;
        }
    }
    return true;
}

static void views_done(views *v) {
    for (int i = 0; i < v->n; i++)
        if (v->p[i]) amp__f32_done(v->t[i], v->p[i], v->owned[i]);
    memset(v, 0, sizeof *v);
}

static float *gdata(amp_tensor *t) { return t ? (float *)amp__data(t) : NULL; }

/* f32 gradient tensors (uninitialised) of the given shapes where need[i];
 * false (and none kept) on failure */
static bool grads_new(int count, const bool *need, const int *nd, const int64_t *const *shape, amp_tensor **gin) {
    for (int i = 0; i < count; i++) {
        gin[i] = NULL;
        if (!need[i]) continue;
        gin[i] = amp__f32_grad(nd[i], shape[i], false);
        if (!gin[i]) {
            for (int j = 0; j < i; j++) {
                amp__release(gin[j]);
                gin[j] = NULL;
            }
            return false;
        }
    }
    return true;
}

/* ---- layer_norm ---------------------------------------------------------------------------- */
amp_status amp__cpu_layer_norm(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                               const amp_tensor *b, amp_tensor *y, amp_tensor *mean, amp_tensor *rstd) {
    AMP_UNUSED(fn);
    int64_t M = a->M, D = a->D;
    /* x straight from its memory when it is contiguous f32, or contiguous
     * half with rows the kernel widens one at a time; else an f32 copy */
    bool direct = amp_tensor_is_contiguous(x) &&
                  (x->dtype == AMP_F32 || ((x->dtype == AMP_F16 || x->dtype == AMP_BF16) && D <= AMP_K_ROW_MAX));
    views v;
    const amp_tensor *ts[3] = {direct ? NULL : x, w, b};
    if (!views_get(&v, 3, ts)) return amp_last_status();
    if (direct) {
        amp_k_layer_norm(amp__data(x), x->dtype, v.p[1], v.p[2], M, D, a->eps, amp__data(y), y->dtype, amp__data(mean),
                         amp__data(rstd));
    } else {
        float *po = amp__f32_out_begin(y);
        if (!po) {
            views_done(&v);
            return amp_last_status();
        }
        amp_k_layer_norm(v.p[0], AMP_F32, v.p[1], v.p[2], M, D, a->eps, po, AMP_F32, amp__data(mean), amp__data(rstd));
        amp__f32_out_end(y, po);
    }
    views_done(&v);
    return AMP_OK;
}

amp_status amp__cpu_layer_norm_backward(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                                        const amp_tensor *mean, const amp_tensor *rstd, const amp_tensor *g,
                                        const bool *need, amp_tensor **gin) {
    AMP_UNUSED(fn);
    views v;
    const amp_tensor *ts[3] = {x, w, g};
    if (!views_get(&v, 3, ts)) return amp_last_status();
    int lead = x->ndim - a->k;
    int nd[3] = {x->ndim, a->k, a->k};
    const int64_t *shp[3] = {x->shape, x->shape + lead, x->shape + lead};
    if (!grads_new(3, need, nd, shp, gin)) {
        views_done(&v);
        return amp_last_status();
    }
    amp_k_layer_norm_backward(v.p[0], v.p[2], v.p[1], amp__data(mean), amp__data(rstd), a->M, a->D, gdata(gin[0]),
                              gdata(gin[1]), gdata(gin[2]));
    views_done(&v);
    return AMP_OK;
}

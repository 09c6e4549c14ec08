/* The CPU backend's rope entry (kernels/backend.h): the angle table (one
 * function, so every path rotates by the same cos/sin) and the rotation of
 * kernels/cpu/rope.h, reading x in place when its last dim is contiguous
 * and its rows fit the kernel's stack buffer, else from an f32 copy. */
#include <math.h>

#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/rope.h"
#include "tensor/f32_util.h"

AMP_K_PATH_DISPATCH(rope_k, amp_rope_kernels, amp_rope_kernels)

void amp_k_rope(const void *x, amp_dtype xdt, const int64_t *shape, const int64_t *sx, const float *cs, int layout,
                bool inverse, void *y, amp_dtype ydt) {
    rope_k()->rope(x, xdt, shape, sx, cs, layout, inverse, y, ydt);
}

void amp_k_rope_table(int64_t T, int64_t D, int64_t pos0, double theta, int layout, float *cs) {
    const int64_t n = D / 2;
    const float base = (float)theta;
    if (layout == 1) { /* Hugging Face: inv_freq in f32, then pos * inv_freq in f32 */
        for (int64_t i = 0; i < n; i++) {
            const float inv = 1.0f / powf(base, (float)(2 * i) / (float)D);
            for (int64_t t = 0; t < T; t++) {
                const float a = (float)(pos0 + t) * inv;
                cs[t * D + 2 * i] = (float)cos((double)a);
                cs[t * D + 2 * i + 1] = (float)sin((double)a);
            }
        }
        return;
    }
    const float s = powf(base, -2.0f / (float)D); /* llama.cpp: theta_scale, then repeated f32 products */
    for (int64_t t = 0; t < T; t++) {
        float a = (float)(pos0 + t);
        for (int64_t i = 0; i < n; i++) {
            cs[t * D + 2 * i] = (float)cos((double)a);
            cs[t * D + 2 * i + 1] = (float)sin((double)a);
            a *= s;
        }
    }
}

static amp_status amp__cpu_rope(const char *fn, const amp_rope_args *a, const amp_tensor *x, amp_tensor *y) {
    AMP_UNUSED(fn);
    const int64_t T = x->shape[2], D = x->shape[3];
    size_t cb = (size_t)(T * D > 0 ? T * D : 1) * sizeof(float);
    float *cs = amp__ws_alloc(cb);
    if (!cs) return amp_last_status();
    amp_k_rope_table(T, D, a->pos0, a->theta, a->layout, cs);
    const bool direct = (x->stride[3] == 1 || D == 1) &&
                        (x->dtype == AMP_F32 || ((x->dtype == AMP_F16 || x->dtype == AMP_BF16) && D <= AMP_K_ROW_MAX));
    const bool ydirect = y->dtype == AMP_F32 || D <= AMP_K_ROW_MAX;
    if (direct && ydirect) {
        amp_k_rope(amp__data(x), x->dtype, x->shape, x->stride, cs, a->layout, a->inverse, amp__data(y), y->dtype);
    } else { /* an f32 copy of x (contiguous), an f32 output rounded into y */
        bool owned;
        const float *px = amp__f32_view(x, &owned);
        float *po = px ? amp__f32_out_begin(y) : NULL;
        if (!po) {
            if (px) amp__f32_done(x, px, owned);
            amp__ws_free(cs, cb);
            return amp_last_status();
        }
        const int64_t sc[3] = {x->shape[1] * T * D, T * D, D};
        amp_k_rope(px, AMP_F32, x->shape, sc, cs, a->layout, a->inverse, po, AMP_F32);
        amp__f32_out_end(y, po);
        amp__f32_done(x, px, owned);
    }
    amp__ws_free(cs, cb);
    return AMP_OK;
}

const amp_rope_family amp__cpu_rope_family = {.rope = amp__cpu_rope};

/* im2col / col2im for convolutions (see conv.h). Plain loops over contiguous
 * rows; the valid range of each output row is computed once so the inner
 * copies are branch-free. OpenMP over rows (im2col) or channels (col2im)
 * when the work is large. */
#include "kernels/cpu/conv.h"

#include "amp/base.h"

#include <stdbool.h>
#include <string.h>

#include "core/threads.h"

/* OpenMP only above this many elements moved or added (light, memory-bound
 * loops: a parallel region costs more than a few thousand of them). */
#define PAR_MIN 131072

/* [lo, hi): the ow whose input column ow*sw + off lies in [0, W) */
static inline int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); } /* a >= 0, b > 0; no a + b - 1 to wrap */

static inline void valid_range(int64_t off, int64_t W, int64_t sw, int64_t OW, int64_t *lo, int64_t *hi) {
    int64_t l = off >= 0 ? 0 : ceil_div(-off, sw);
    int64_t h = W - off <= 0 ? 0 : ceil_div(W - off, sw);
    if (h > OW) h = OW;
    if (l > h) l = h;
    *lo = l;
    *hi = h;
}

#define DEFINE_IM2COL(NAME, T)                                                                                  \
    static void NAME(const T *x, T *col, int64_t ldcol, const amp_conv_geom *g) {                               \
        const int64_t kk = g->kh * g->kw, K = g->C * kk, S = g->OH * g->OW;                                     \
        _Pragma("omp parallel for schedule(static) AMP_OMP_IF(K * S > PAR_MIN)")                                \
        for (int64_t r = 0; r < K; r++) {                                                                       \
            const int64_t c = r / kk, i = (r / g->kw) % g->kh, j = r % g->kw;                                   \
            const T *xc = x + c * g->H * g->W;                                                                  \
            T *dst = col + r * ldcol;                                                                           \
            const int64_t off = j * g->dw - g->pw;                                                              \
            int64_t lo, hi;                                                                                     \
            valid_range(off, g->W, g->sw, g->OW, &lo, &hi);                                                     \
            for (int64_t oh = 0; oh < g->OH; oh++) {                                                            \
                T *d = dst + oh * g->OW;                                                                        \
                const int64_t ih = oh * g->sh - g->ph + i * g->dh;                                              \
                if (ih < 0 || ih >= g->H) {                                                                     \
                    memset(d, 0, sizeof(T) * (size_t)g->OW);                                                    \
                    continue;                                                                                   \
                }                                                                                               \
                const T *xr = xc + ih * g->W;                                                                   \
                for (int64_t ow = 0; ow < lo; ow++) d[ow] = 0;                                                  \
                if (g->sw == 1 && hi > lo)                                                                      \
                    memcpy(d + lo, xr + lo + off, sizeof(T) * (size_t)(hi - lo));                               \
                else                                                                                            \
                    for (int64_t ow = lo; ow < hi; ow++) d[ow] = xr[ow * g->sw + off];                          \
                for (int64_t ow = hi; ow < g->OW; ow++) d[ow] = 0;                                              \
            }                                                                                                   \
        }                                                                                                       \
    }

DEFINE_IM2COL(im2col_32, uint32_t)
DEFINE_IM2COL(im2col_16, uint16_t)

void amp_im2col_scalar(const void *x, void *col, int64_t ldcol, const amp_conv_geom *g, int esize) {
    if (esize == 4)
        im2col_32(x, col, ldcol, g);
    else
        im2col_16(x, col, ldcol, g);
}

void amp_col2im_f32_scalar(const float *col, float *dx, const amp_conv_geom *g) {
    const int64_t kk = g->kh * g->kw, S = g->OH * g->OW;
#pragma omp parallel for schedule(static) AMP_OMP_IF(g->C * kk * S > PAR_MIN)
    for (int64_t c = 0; c < g->C; c++) {
        float *xc = dx + c * g->H * g->W;
        for (int64_t i = 0; i < g->kh; i++) {
            for (int64_t j = 0; j < g->kw; j++) {
                const float *src = col + ((c * g->kh + i) * g->kw + j) * S;
                const int64_t off = j * g->dw - g->pw;
                int64_t lo, hi;
                valid_range(off, g->W, g->sw, g->OW, &lo, &hi);
                for (int64_t oh = 0; oh < g->OH; oh++) {
                    const int64_t ih = oh * g->sh - g->ph + i * g->dh;
                    if (ih < 0 || ih >= g->H) continue;
                    float *xr = xc + ih * g->W;
                    const float *s = src + oh * g->OW;
                    if (g->sw == 1)
                        for (int64_t ow = lo; ow < hi; ow++) xr[ow + off] += s[ow];
                    else
                        for (int64_t ow = lo; ow < hi; ow++) xr[ow * g->sw + off] += s[ow];
                }
            }
        }
    }
}

/* ---- reference loops ---------------------------------------------------------------- */
void amp_im2col_reference(const void *x, void *col, int64_t ldcol, const amp_conv_geom *g, int esize) {
    for (int64_t c = 0; c < g->C; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++)
                for (int64_t oh = 0; oh < g->OH; oh++)
                    for (int64_t ow = 0; ow < g->OW; ow++) {
                        int64_t r = (c * g->kh + i) * g->kw + j, ih = oh * g->sh - g->ph + i * g->dh,
                                iw = ow * g->sw - g->pw + j * g->dw;
                        bool in = ih >= 0 && ih < g->H && iw >= 0 && iw < g->W;
                        int64_t src = (c * g->H + ih) * g->W + iw, dst = r * ldcol + oh * g->OW + ow;
                        if (esize == 4)
                            ((uint32_t *)col)[dst] = in ? ((const uint32_t *)x)[src] : 0;
                        else
                            ((uint16_t *)col)[dst] = in ? ((const uint16_t *)x)[src] : 0;
                    }
}

void amp_col2im_reference_f32(const float *col, float *dx, const amp_conv_geom *g) {
    const int64_t S = g->OH * g->OW;
    for (int64_t c = 0; c < g->C; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++)
                for (int64_t oh = 0; oh < g->OH; oh++)
                    for (int64_t ow = 0; ow < g->OW; ow++) {
                        int64_t ih = oh * g->sh - g->ph + i * g->dh, iw = ow * g->sw - g->pw + j * g->dw;
                        if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W) continue;
                        dx[(c * g->H + ih) * g->W + iw] += col[((c * g->kh + i) * g->kw + j) * S + oh * g->OW + ow];
                    }
}

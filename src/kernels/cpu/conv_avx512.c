/* im2col and col2im for convolutions whose columns are contiguous along the
 * width (stride 1, no dilation across it: every 3x3 / 5x5 "same" conv) in
 * AVX-512 registers: one row of a column matrix is the input row shifted,
 * with zeros where the window hangs over the padding, so each (row, oh) is
 * one masked load (lanes outside the input are masked off, and masked-off
 * lanes are never read) and one store, instead of a memcpy call and two
 * zero fills. col2im adds the same shifted rows back in the same order as
 * the plain loop (channel, kernel row, kernel column, output row), so the
 * f32 sums are the same bits. */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/cpu/conv.h"

#define PAR_MIN 131072

static inline void valid_range(int64_t off, int64_t W, int64_t OW, int64_t *lo, int64_t *hi) {
    int64_t l = off >= 0 ? 0 : -off;
    int64_t h = W - off <= 0 ? 0 : W - off;
    if (h > OW) h = OW;
    if (l > h) l = h;
    *lo = l;
    *hi = h;
}

/* lanes [lo, hi) of a chunk of n lanes starting at lane c0 */
static inline uint32_t lane_mask(int64_t c0, int64_t n, int64_t lo, int64_t hi) {
    int64_t a = lo - c0, b = hi - c0;
    if (a < 0) a = 0;
    if (b > n) b = n;
    if (b <= a) return 0;
    const uint32_t upto = b >= 32 ? 0xffffffffu : (1u << b) - 1u;
    const uint32_t below = a >= 32 ? 0xffffffffu : (1u << a) - 1u;
    return upto & ~below;
}

bool amp_im2col_avx512(const void *x, void *col, int64_t ldcol, const amp_conv_geom *g, int esize) {
    if (g->sw != 1 || g->dw != 1 || (esize != 2 && esize != 4)) return false;
    const int64_t kk = g->kh * g->kw, K = g->C * kk, OW = g->OW;
    const int64_t VLn = esize == 2 ? 32 : 16;
#pragma omp parallel for schedule(static) if (K * g->OH * OW > PAR_MIN)
    for (int64_t r = 0; r < K; r++) {
        const int64_t c = r / kk, i = (r / g->kw) % g->kh, j = r % g->kw;
        const char *xc = (const char *)x + (size_t)(c * g->H * g->W) * (size_t)esize;
        char *dst = (char *)col + (size_t)(r * ldcol) * (size_t)esize;
        const int64_t off = j - g->pw;
        int64_t lo, hi;
        valid_range(off, g->W, OW, &lo, &hi);
        for (int64_t oh = 0; oh < g->OH; oh++) {
            char *d = dst + (size_t)(oh * OW) * (size_t)esize;
            const int64_t ih = oh * g->sh - g->ph + i * g->dh;
            const bool in = ih >= 0 && ih < g->H;
            /* lane ow reads src[ow] = x[ih][ow + off] (lanes outside [lo, hi) masked off) */
            const char *src = in ? xc + (ih * g->W + off) * (int64_t)esize : xc;
            for (int64_t c0 = 0; c0 < OW; c0 += VLn) {
                const int64_t n = OW - c0 < VLn ? OW - c0 : VLn;
                const uint32_t ld = in ? lane_mask(c0, n, lo, hi) : 0;
                const uint32_t st = n >= 32 ? 0xffffffffu : (1u << n) - 1u;
                if (esize == 2) {
                    const __m512i v = _mm512_maskz_loadu_epi16(ld, src + c0 * 2);
                    _mm512_mask_storeu_epi16(d + c0 * 2, st, v);
                } else {
                    const __m512 v = _mm512_maskz_loadu_ps((__mmask16)ld, src + c0 * 4);
                    _mm512_mask_storeu_ps(d + c0 * 4, (__mmask16)st, v);
                }
            }
        }
    }
    return true;
}

bool amp_col2im_f32_avx512(const float *col, float *dx, const amp_conv_geom *g) {
    if (g->sw != 1 || g->dw != 1) return false;
    const int64_t S = g->OH * g->OW, OW = g->OW;
#pragma omp parallel for schedule(static) if (g->C * g->kh * g->kw * S > PAR_MIN)
    for (int64_t c = 0; c < g->C; c++) {
        float *xc = dx + c * g->H * g->W;
        for (int64_t i = 0; i < g->kh; i++) {
            for (int64_t j = 0; j < g->kw; j++) {
                const float *src = col + ((c * g->kh + i) * g->kw + j) * S;
                const int64_t off = j - g->pw;
                int64_t lo, hi;
                valid_range(off, g->W, OW, &lo, &hi);
                for (int64_t oh = 0; oh < g->OH; oh++) {
                    const int64_t ih = oh * g->sh - g->ph + i * g->dh;
                    if (ih < 0 || ih >= g->H) continue;
                    float *xr = xc + ih * g->W + off; /* lane ow adds into xr[ow] */
                    const float *s = src + oh * OW;
                    for (int64_t c0 = lo - lo % 16; c0 < hi; c0 += 16) {
                        const __mmask16 m = (__mmask16)lane_mask(c0, 16, lo, hi);
                        const __m512 a = _mm512_maskz_loadu_ps(m, xr + c0), b = _mm512_maskz_loadu_ps(m, s + c0);
                        _mm512_mask_storeu_ps(xr + c0, m, _mm512_add_ps(a, b));
                    }
                }
            }
        }
    }
    return true;
}

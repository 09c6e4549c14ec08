/* 2-D pooling kernels (see pool.h): plain loops per plane, OpenMP over
 * planes when the work is large. Sums accumulate in f32. */
#include "kernels/cpu/pool.h"

#include <math.h>
#include <string.h>

#include "core/threads.h"

/* OpenMP only above this much work: window operations for the forward
 * passes, element touches for the light, memory-bound backward scatters. */
#define PAR_MIN 32768
#define PAR_MIN_LIGHT 262144

void amp_max_pool2d_f32(const float *x, float *y, int64_t *idx, int64_t planes, const amp_pool_geom *g) {
    const int64_t HW = g->H * g->W, S = g->OH * g->OW;
#pragma omp parallel for schedule(static) AMP_OMP_IF((double)planes * (double)S * (double)g->kh * (double)g->kw > PAR_MIN)
    for (int64_t p = 0; p < planes; p++) {
        const float *xp = x + p * HW;
        for (int64_t oh = 0; oh < g->OH; oh++) {
            int64_t h0 = oh * g->sh - g->ph;
            int64_t h1 = h0 + (g->kh - 1) * g->dh + 1;
            if (h1 > g->H) h1 = g->H;
            if (h0 < 0) h0 += ((-h0 - 1) / g->dh) * g->dh + g->dh; /* first tap inside, without a loop over the padding */
            for (int64_t ow = 0; ow < g->OW; ow++) {
                int64_t w0 = ow * g->sw - g->pw;
                int64_t w1 = w0 + (g->kw - 1) * g->dw + 1;
                if (w1 > g->W) w1 = g->W;
                if (w0 < 0) w0 += ((-w0 - 1) / g->dw) * g->dw + g->dw;
                /* an empty window (only with dilation over padding) gives -inf, index -1 */
                int64_t best = (h0 < h1 && w0 < w1) ? h0 * g->W + w0 : -1;
                float m = -INFINITY;
                for (int64_t h = h0; h < h1; h += g->dh)
                    for (int64_t w = w0; w < w1; w += g->dw) {
                        float v = xp[h * g->W + w];
                        if (v > m || isnan(v)) {
                            m = v;
                            best = h * g->W + w;
                        }
                    }
                y[p * S + oh * g->OW + ow] = m;
                idx[p * S + oh * g->OW + ow] = best;
            }
        }
    }
}

void amp_max_pool2d_backward_f32(const float *dy, const int64_t *idx, float *dx, int64_t planes, const amp_pool_geom *g) {
    const int64_t HW = g->H * g->W, S = g->OH * g->OW;
#pragma omp parallel for schedule(static) AMP_OMP_IF((double)planes * (double)(S + HW) > PAR_MIN_LIGHT)
    for (int64_t p = 0; p < planes; p++) {
        float *dp = dx + p * HW;
        memset(dp, 0, sizeof(float) * (size_t)HW);
        const float *gp = dy + p * S;
        const int64_t *ip = idx + p * S;
        for (int64_t s = 0; s < S; s++)
            if (ip[s] >= 0) dp[ip[s]] += gp[s];
    }
}

bool amp_max_pool2d_k2_ok(const amp_pool_geom *g) {
    return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && !g->ph && !g->pw && g->dh == 1 && g->dw == 1 &&
           2 * g->OH <= g->H && 2 * g->OW <= g->W && g->H * g->W < ((int64_t)1 << 30);
}

/* 0 + v in dt: f32 -0 -> +0; half -0 -> +0 and a NaN quiet */
static inline uint16_t half_plus_zero(uint16_t h, amp_dtype dt) {
    const uint16_t exp = dt == AMP_BF16 ? 0x7f80 : 0x7c00, quiet = dt == AMP_BF16 ? 0x40 : 0x200;
    if ((h & 0x7fff) == 0) return 0;
    if ((h & exp) == exp && (h & (uint16_t)~(exp | 0x8000))) h |= quiet;
    return h;
}

void amp_max_pool2d_backward_k2slot_scalar(const void *dy, amp_dtype dt, const uint8_t *slot, void *dx, int64_t planes,
                                           const amp_pool_geom *g) {
    const int64_t W = g->W, HW = g->H * W, OW = g->OW, S = g->OH * OW;
#pragma omp parallel for schedule(static) AMP_OMP_IF(planes * (S + HW) > PAR_MIN_LIGHT)
    for (int64_t p = 0; p < planes; p++) {
        const uint8_t *sp = slot + p * S;
        if (dt == AMP_F32) {
            float *dp = (float *)dx + p * HW;
            const float *gp = (const float *)dy + p * S;
            memset(dp, 0, sizeof(float) * (size_t)HW);
            for (int64_t oh = 0; oh < g->OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    const int k = sp[oh * OW + ow];
                    dp[(2 * oh + (k >> 1)) * W + 2 * ow + (k & 1)] = 0.0f + gp[oh * OW + ow];
                }
        } else {
            uint16_t *dp = (uint16_t *)dx + p * HW;
            const uint16_t *gp = (const uint16_t *)dy + p * S;
            memset(dp, 0, sizeof(uint16_t) * (size_t)HW);
            for (int64_t oh = 0; oh < g->OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    const int k = sp[oh * OW + ow];
                    dp[(2 * oh + (k >> 1)) * W + 2 * ow + (k & 1)] = half_plus_zero(gp[oh * OW + ow], dt);
                }
        }
    }
}

void amp_max_pool2d_backward_disjoint(const void *dy, amp_dtype dt, const int64_t *idx, void *dx, int64_t planes,
                                      const amp_pool_geom *g) {
    const int64_t HW = g->H * g->W, S = g->OH * g->OW;
#pragma omp parallel for schedule(static) AMP_OMP_IF(planes * (S + HW) > PAR_MIN_LIGHT)
    for (int64_t p = 0; p < planes; p++) {
        const int64_t *ip = idx + p * S;
        if (dt == AMP_F32) {
            float *dp = (float *)dx + p * HW;
            const float *gp = (const float *)dy + p * S;
            memset(dp, 0, sizeof(float) * (size_t)HW);
            for (int64_t s = 0; s < S; s++)
                if (ip[s] >= 0) dp[ip[s]] = 0.0f + gp[s];
        } else {
            /* 0 + v in the half format: -0 -> +0, a NaN quiet, else v */
            uint16_t *dp = (uint16_t *)dx + p * HW;
            const uint16_t *gp = (const uint16_t *)dy + p * S;
            memset(dp, 0, sizeof(uint16_t) * (size_t)HW);
            for (int64_t s = 0; s < S; s++)
                if (ip[s] >= 0) dp[ip[s]] = half_plus_zero(gp[s], dt);
        }
    }
}

/* Window [a, b) of output index o along one dim, clipped to the input;
 * *span_pad is its size clipped to the padded input instead. */
static inline void avg_window(int64_t o, int64_t s, int64_t p, int64_t k, int64_t n, int64_t *a, int64_t *b,
                              int64_t *span_pad) {
    int64_t lo = o * s - p, hi = lo + k;
    if (hi > n + p) hi = n + p;
    *span_pad = hi - lo;
    if (lo < 0) lo = 0;
    if (hi > n) hi = n;
    *a = lo;
    *b = hi;
}

void amp_avg_pool2d_f32(const float *x, float *y, int64_t planes, const amp_pool_geom *g, bool count_include_pad) {
    const int64_t HW = g->H * g->W, S = g->OH * g->OW;
#pragma omp parallel for schedule(static) AMP_OMP_IF((double)planes * (double)S * (double)g->kh * (double)g->kw > PAR_MIN)
    for (int64_t p = 0; p < planes; p++) {
        const float *xp = x + p * HW;
        for (int64_t oh = 0; oh < g->OH; oh++) {
            int64_t h0, h1, hp;
            avg_window(oh, g->sh, g->ph, g->kh, g->H, &h0, &h1, &hp);
            for (int64_t ow = 0; ow < g->OW; ow++) {
                int64_t w0, w1, wp;
                avg_window(ow, g->sw, g->pw, g->kw, g->W, &w0, &w1, &wp);
                float *out = &y[p * S + oh * g->OW + ow];
                if (h0 >= h1 || w0 >= w1) {
                    *out = 0.0f;
                    continue;
                }
                float acc = 0.0f;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) acc += xp[h * g->W + w];
                int64_t div = count_include_pad ? hp * wp : (h1 - h0) * (w1 - w0);
                *out = acc / (float)div;
            }
        }
    }
}

void amp_avg_pool2d_backward_f32(const float *dy, float *dx, int64_t planes, const amp_pool_geom *g,
                                 bool count_include_pad) {
    const int64_t HW = g->H * g->W, S = g->OH * g->OW;
#pragma omp parallel for schedule(static) AMP_OMP_IF((double)planes * ((double)S * (double)g->kh * (double)g->kw + (double)HW) > PAR_MIN)
    for (int64_t p = 0; p < planes; p++) {
        float *dp = dx + p * HW;
        memset(dp, 0, sizeof(float) * (size_t)HW);
        for (int64_t oh = 0; oh < g->OH; oh++) {
            int64_t h0, h1, hp;
            avg_window(oh, g->sh, g->ph, g->kh, g->H, &h0, &h1, &hp);
            for (int64_t ow = 0; ow < g->OW; ow++) {
                int64_t w0, w1, wp;
                avg_window(ow, g->sw, g->pw, g->kw, g->W, &w0, &w1, &wp);
                if (h0 >= h1 || w0 >= w1) continue;
                int64_t div = count_include_pad ? hp * wp : (h1 - h0) * (w1 - w0);
                float v = dy[p * S + oh * g->OW + ow] / (float)div;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) dp[h * g->W + w] += v;
            }
        }
    }
}

/* torch's start/end index of adaptive window o (in 128 bits: o * n may pass 2^63) */
static inline int64_t ad_start(int64_t o, int64_t n, int64_t on) { return (int64_t)(((__int128)o * n) / on); }
static inline int64_t ad_end(int64_t o, int64_t n, int64_t on) { return (int64_t)(((__int128)(o + 1) * n + on - 1) / on); }

void amp_adaptive_avg_pool2d_f32(const float *x, float *y, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                 int64_t OW) {
#pragma omp parallel for schedule(static) AMP_OMP_IF((double)planes * ((double)H * (double)W + (double)OH * (double)OW) > PAR_MIN)
    for (int64_t p = 0; p < planes; p++) {
        const float *xp = x + p * H * W;
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t h0 = ad_start(oh, H, OH), h1 = ad_end(oh, H, OH);
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t w0 = ad_start(ow, W, OW), w1 = ad_end(ow, W, OW);
                float acc = 0.0f;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) acc += xp[h * W + w];
                y[(p * OH + oh) * OW + ow] = acc / (float)((h1 - h0) * (w1 - w0));
            }
        }
    }
}

void amp_adaptive_avg_pool2d_backward_f32(const float *dy, float *dx, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                          int64_t OW) {
#pragma omp parallel for schedule(static) AMP_OMP_IF((double)planes * ((double)H * (double)W + (double)OH * (double)OW) > PAR_MIN)
    for (int64_t p = 0; p < planes; p++) {
        float *dp = dx + p * H * W;
        memset(dp, 0, sizeof(float) * (size_t)(H * W));
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t h0 = ad_start(oh, H, OH), h1 = ad_end(oh, H, OH);
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t w0 = ad_start(ow, W, OW), w1 = ad_end(ow, W, OW);
                float v = dy[(p * OH + oh) * OW + ow] / (float)((h1 - h0) * (w1 - w0));
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) dp[h * W + w] += v;
            }
        }
    }
}

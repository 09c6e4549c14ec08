/* max_pool2d with a 2 x 2 window and stride 2 (no padding, no dilation) on
 * f32, f16 or bf16 planes in AVX-512 registers, reading and writing the
 * tensors' own dtype: the CNN case, where the general f32 loop (and the
 * widening and rounding passes around it for half tensors) cost more than
 * the convolution next to it. Same results as amp_max_pool2d_f32 on the
 * widened input, rounded: the four candidates are taken in its order (row
 * by row) with its rule (a larger value, or any NaN, replaces the current
 * one), and the max is one of the inputs, so rounding it back is exact (a
 * NaN leaves quiet, as the widening makes it). The backward from the
 * window slots writes each pair of input rows whole (the max's position
 * takes dy, the other three zero) in the half dtype. */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/half_avx512.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/pool.h"

#define AI static inline __attribute__((always_inline))

/* 16 windows' left (even column) and right (odd column) values of one input
 * row, from 2n (n <= 16) elements at p */
AI void load_pairs(const void *p, amp_dtype dt, int n, __m512 *even, __m512 *odd) {
    const __mmask32 m = n >= 16 ? ~(__mmask32)0 : (__mmask32)((1u << (2 * n)) - 1u);
    if (dt == AMP_F32) {
        const float *f = p;
        const __m512 lo = _mm512_maskz_loadu_ps((__mmask16)m, f), hi = _mm512_maskz_loadu_ps((__mmask16)(m >> 16), f + 16);
        const __m512i ie = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        const __m512i io = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
        *even = _mm512_permutex2var_ps(lo, ie, hi);
        *odd = _mm512_permutex2var_ps(lo, io, hi);
        return;
    }
    const __m512i w = _mm512_maskz_loadu_epi16(m, p);
    if (dt == AMP_BF16) {
        /* exact widening; a signalling NaN stays signalling here and is
         * quieted on the way out, as the widening would have done */
        *even = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
        *odd = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xffff0000u)));
    } else {
        *even = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w));
        *odd = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(w, 16)));
    }
}

/* the scan rule of amp_max_pool2d_f32: v replaces m when v > m or v is NaN */
AI void take(__m512 v, int k, __m512 *m, __m512i *kk) {
    const __mmask16 t = _mm512_cmp_ps_mask(v, *m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    *m = _mm512_mask_mov_ps(*m, t, v);
    *kk = _mm512_mask_mov_epi32(*kk, t, _mm512_set1_epi32(k));
}

AI void store_out(void *y, amp_dtype dt, __m512 m, __mmask16 k) {
    if (dt == AMP_F32) {
        _mm512_mask_storeu_ps(y, k, m);
    } else if (dt == AMP_BF16) {
        /* the top half of the selected value; a NaN leaves quiet */
        const __mmask16 nan = _mm512_cmp_ps_mask(m, m, _CMP_UNORD_Q);
        __m512i u = _mm512_srli_epi32(_mm512_castps_si512(m), 16);
        u = _mm512_mask_or_epi32(u, nan, u, _mm512_set1_epi32(0x40));
        _mm256_mask_storeu_epi16(y, k, _mm512_cvtepi32_epi16(u));
    } else {
        /* an f16 value widened and narrowed again is itself (NaNs quiet) */
        _mm256_mask_storeu_epi16(y, k, _mm512_cvtps_ph(m, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
}

bool amp_max_pool2d_k2_avx512(const void *x, amp_dtype dt, void *y, int64_t *idx, uint8_t *slot, int64_t planes,
                              const amp_pool_geom *g) {
    if (!amp_max_pool2d_k2_ok(g)) return false;
    const int64_t H = g->H, W = g->W, OH = g->OH, OW = g->OW, HW = H * W, S = OH * OW;
    const size_t es = dt == AMP_F32 ? 4 : 2;
    AMP_K_FOR(p, planes, planes * S > 65536, {
        const char *xp = (const char *)x + (size_t)(p * HW) * es;
        char *yp = (char *)y + (size_t)(p * S) * es;
        int64_t *ip = idx ? idx + p * S : NULL;
        uint8_t *sp = slot ? slot + p * S : NULL;
        for (int64_t oh = 0; oh < OH; oh++) {
            const char *r0 = xp + (size_t)(2 * oh * W) * es, *r1 = r0 + (size_t)W * es;
            for (int64_t ow = 0; ow < OW; ow += 16) {
                const int n = (int)(OW - ow < 16 ? OW - ow : 16);
                __m512 a, b, c, d;
                load_pairs(r0 + (size_t)(2 * ow) * es, dt, n, &a, &b);
                load_pairs(r1 + (size_t)(2 * ow) * es, dt, n, &c, &d);
                __m512 m = a;
                __m512i kk = _mm512_setzero_si512();
                take(b, 1, &m, &kk);
                take(c, 2, &m, &kk);
                take(d, 3, &m, &kk);
                const __mmask16 k = (__mmask16)((1u << n) - 1u);
                store_out(yp + (size_t)(oh * OW + ow) * es, dt, m, k);
                if (sp) _mm_mask_storeu_epi8(sp + oh * OW + ow, k, _mm512_cvtepi32_epi8(kk));
                if (!ip) continue;
                /* flat index: 2oh*W + 2(ow+lane) + (k & 1) + (k >> 1) * W */
                const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
                __m512i fi = _mm512_add_epi32(_mm512_set1_epi32((int)(2 * oh * W + 2 * ow)), _mm512_slli_epi32(lane, 1));
                fi = _mm512_add_epi32(fi, _mm512_and_si512(kk, _mm512_set1_epi32(1)));
                fi = _mm512_add_epi32(fi, _mm512_mullo_epi32(_mm512_srli_epi32(kk, 1), _mm512_set1_epi32((int)W)));
                int64_t *io = ip + oh * OW + ow;
                _mm512_mask_storeu_epi64(io, (__mmask8)k, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(fi)));
                _mm512_mask_storeu_epi64(io + 8, (__mmask8)(k >> 8), _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(fi, 1)));
            }
        }
    });
    return true;
}

/* 0 + v for 32 bf16/f16 lanes: -0 -> +0, a NaN made quiet (as adding the f32
 * zero and rounding back would) */
AI __m512i half_plus_zero(__m512i h, amp_dtype dt) {
    const __m512i abs = _mm512_and_si512(h, _mm512_set1_epi16(0x7fff));
    const __mmask32 zero = _mm512_cmpeq_epi16_mask(abs, _mm512_setzero_si512());
    const __mmask32 nan = _mm512_cmpgt_epu16_mask(abs, _mm512_set1_epi16(dt == AMP_BF16 ? 0x7f80 : 0x7c00));
    h = _mm512_mask_mov_epi16(h, zero, _mm512_setzero_si512());
    return _mm512_mask_mov_epi16(h, nan, _mm512_or_si512(h, _mm512_set1_epi16(dt == AMP_BF16 ? 0x40 : 0x200)));
}

bool amp_max_pool2d_backward_k2slot_avx512(const void *dy, amp_dtype dt, const uint8_t *slot, void *dx, int64_t planes,
                                           const amp_pool_geom *g) {
    if (!amp_max_pool2d_k2_ok(g) || dt == AMP_F32) return false;
    const int64_t W = g->W, H = g->H, OW = g->OW, OH = g->OH, HW = H * W, S = OH * OW;
    /* interleave two 16-lane halves a (even columns) and b (odd): lanes 2c = a[c], 2c+1 = b[c] */
    const __m512i idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37, 5,
                                         36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    AMP_K_FOR(p, planes, planes * (S + HW) > 262144, {
        const uint16_t *gp = (const uint16_t *)dy + p * S;
        const uint8_t *sp = slot + p * S;
        uint16_t *dp = (uint16_t *)dx + p * HW;
        for (int64_t oh = 0; oh < OH; oh++) {
            uint16_t *r0 = dp + 2 * oh * W, *r1 = r0 + W;
            for (int64_t ow = 0; ow < OW; ow += 16) {
                const int n = (int)(OW - ow < 16 ? OW - ow : 16);
                const __mmask16 m = (__mmask16)((1u << n) - 1u);
                const __m256i v = _mm256_maskz_loadu_epi16(m, gp + oh * OW + ow);
                const __m512i vv = half_plus_zero(_mm512_castsi256_si512(v), dt);
                const __m128i k = _mm_maskz_loadu_epi8(m, sp + oh * OW + ow);
                const __m256i k16 = _mm256_cvtepu8_epi16(k);
                const __m256i z = _mm256_setzero_si256(), w = _mm512_castsi512_si256(vv);
                const __m256i s0 = _mm256_mask_mov_epi16(z, _mm256_cmpeq_epi16_mask(k16, _mm256_set1_epi16(0)), w);
                const __m256i s1 = _mm256_mask_mov_epi16(z, _mm256_cmpeq_epi16_mask(k16, _mm256_set1_epi16(1)), w);
                const __m256i s2 = _mm256_mask_mov_epi16(z, _mm256_cmpeq_epi16_mask(k16, _mm256_set1_epi16(2)), w);
                const __m256i s3 = _mm256_mask_mov_epi16(z, _mm256_cmpeq_epi16_mask(k16, _mm256_set1_epi16(3)), w);
                const __m512i row0 = _mm512_permutex2var_epi16(_mm512_castsi256_si512(s0), idx, _mm512_castsi256_si512(s1));
                const __m512i row1 = _mm512_permutex2var_epi16(_mm512_castsi256_si512(s2), idx, _mm512_castsi256_si512(s3));
                const __mmask32 m2 = n >= 16 ? ~(__mmask32)0 : (__mmask32)((1u << (2 * n)) - 1u);
                _mm512_mask_storeu_epi16(r0 + 2 * ow, m2, row0);
                _mm512_mask_storeu_epi16(r1 + 2 * ow, m2, row1);
            }
            /* a last odd column (floor mode) takes no gradient */
            if (W > 2 * OW) r0[W - 1] = r1[W - 1] = 0;
        }
        /* input rows past the last window take no gradient */
        if (H > 2 * OH) memset(dp + 2 * OH * W, 0, sizeof(uint16_t) * (size_t)((H - 2 * OH) * W));
    });
    return true;
}

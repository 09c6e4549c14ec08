/* AVX-512 vector primitives of the GEMM kernels (16 f32 lanes), shared by
 * gemm_avx512.c (the widened f32 kernels, through gemm_simd.inc) and
 * gemm_avx512bf16.c (the vdpbf16ps kernels). Include only from files built
 * for AVX-512. See gemm_simd.inc for what each primitive must do. */
#ifndef AMP_KERNELS_CPU_GEMM_AVX512_H
#define AMP_KERNELS_CPU_GEMM_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#include "amp/base.h"
#include "numeric/bf16_avx512.h"

#define AI static inline __attribute__((always_inline))
#define VL 16
typedef __m512 V;

#define v_zero() _mm512_setzero_ps()
#define v_set1(x) _mm512_set1_ps(x)
#define v_load(p) _mm512_loadu_ps(p)
#define v_store(p, x) _mm512_storeu_ps((p), (x))
#define v_fma(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define v_mul(a, b) _mm512_mul_ps((a), (b))
#define v_add(a, b) _mm512_add_ps((a), (b))
#define v_hsum(x) _mm512_reduce_add_ps(x)
#define v_lane0(x) _mm512_cvtss_f32(x)
#define v_prefetch(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)

AI V v_load_h(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

/* bf16 -> f32 without quieting a signalling NaN (the values only feed
 * products, which quiet it: numeric/bf16_avx512.h's bf512_load_arith) */
AI V bf16_widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
#define v_load_b(p) bf512_load_arith(p)

/* f32 -> bf16, round to nearest even; NaN stays a quiet NaN with its sign
 * (numeric/bf16_avx512.h's integer way) */
AI __m256i bf16_narrow(V x) { return _mm512_cvtepi32_epi16(bf512_round_u32(x)); }

AI __m256i f16_narrow(V x) { return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

AI void v_store_t(void *p, amp_dtype dt, V x) {
    if (dt == AMP_F32)
        _mm512_storeu_ps(p, x);
    else if (dt == AMP_F16)
        _mm256_storeu_si256((__m256i *)p, f16_narrow(x));
    else
        _mm256_storeu_si256((__m256i *)p, bf16_narrow(x));
}

AI V v_load_part(const void *p, amp_dtype dt, int n) {
    const __mmask16 m = (__mmask16)((1u << n) - 1u);
    if (dt == AMP_F32) return _mm512_maskz_loadu_ps(m, p);
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return dt == AMP_F16 ? _mm512_cvtph_ps(h) : bf16_widen(h);
}

AI void v_store_part(void *p, amp_dtype dt, V x, int n) {
    const __mmask16 m = (__mmask16)((1u << n) - 1u);
    if (dt == AMP_F32)
        _mm512_mask_storeu_ps(p, m, x);
    else
        _mm256_mask_storeu_epi16(p, m, dt == AMP_F16 ? f16_narrow(x) : bf16_narrow(x));
}

AI void v_transpose(V r[16]) {
    V t[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    V u[16];
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
        const __m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
        u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    /* u[4g+q], 128-bit lane L: rows 4g..4g+3 of column 4L+q. */
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        const V v0 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x44);
        const V v1 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xEE);
        const V w0 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x44);
        const V w1 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xEE);
        r[q] = _mm512_shuffle_f32x4(v0, w0, 0x88);
        r[4 + q] = _mm512_shuffle_f32x4(v0, w0, 0xDD);
        r[8 + q] = _mm512_shuffle_f32x4(v1, w1, 0x88);
        r[12 + q] = _mm512_shuffle_f32x4(v1, w1, 0xDD);
    }
}

#endif

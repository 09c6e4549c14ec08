/* GEMM kernels for the AVX2 path (AVX2 + FMA + F16C). The code lives in
 * gemm_simd.inc; this file supplies the 8-wide vector primitives and the
 * blocking. Micro-tile MR x NR = 6 x 16 (12 ymm accumulators, 2 B vectors,
 * 1 A broadcast: 15 of the 16 registers). KC = 256, NC = 512, MC = 1200:
 * measured on Zen 4 (AMP_CPU=avx2) against 4 x 24, KC 384 and NC 256/384. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/gemm_internal.h"

#define AI static inline __attribute__((always_inline))
#define VL 8
typedef __m256 V;

#ifndef AMP_GEMM256_MR
#define AMP_GEMM256_MR 6
#endif
#ifndef AMP_GEMM256_NV
#define AMP_GEMM256_NV 2
#endif
#ifndef AMP_GEMM256_MC
#define AMP_GEMM256_MC 1200
#endif
#ifndef AMP_GEMM256_KC
#define AMP_GEMM256_KC 256
#endif
#ifndef AMP_GEMM256_NC
#define AMP_GEMM256_NC 512
#endif
#define MR AMP_GEMM256_MR
#define NV AMP_GEMM256_NV
#define MC AMP_GEMM256_MC
#define KC AMP_GEMM256_KC
#define NC AMP_GEMM256_NC
#define GEMV_ROWS 4
#define AXPY_NV 2
#define KERNEL_VAR amp_gemm_kernel_avx2
#define KERNEL_NAME "avx2"

#define v_zero() _mm256_setzero_ps()
#define v_set1(x) _mm256_set1_ps(x)
#define v_load(p) _mm256_loadu_ps(p)
#define v_store(p, x) _mm256_storeu_ps((p), (x))
#define v_fma(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define v_mul(a, b) _mm256_mul_ps((a), (b))
#define v_add(a, b) _mm256_add_ps((a), (b))
#define v_lane0(x) _mm256_cvtss_f32(x)
#define v_prefetch(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)

AI float v_hsum(V x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AI V v_load_h(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
AI V bf16_widen(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
AI V v_load_b(const uint16_t *p) { return bf16_widen(_mm_loadu_si128((const __m128i *)p)); }

/* f32 -> bf16, round to nearest even; NaN stays a quiet NaN with its sign. */
AI __m128i bf16_narrow(V x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    r = _mm256_blendv_epi8(r, q, nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

AI __m128i f16_narrow(V x) { return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

AI void v_store_t(void *p, amp_dtype dt, V x) {
    if (dt == AMP_F32)
        _mm256_storeu_ps(p, x);
    else if (dt == AMP_F16)
        _mm_storeu_si128((__m128i *)p, f16_narrow(x));
    else
        _mm_storeu_si128((__m128i *)p, bf16_narrow(x));
}

AI __m256i lane_mask(int n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

AI V v_load_part(const void *p, amp_dtype dt, int n) {
    if (dt == AMP_F32) return _mm256_maskload_ps(p, lane_mask(n));
    uint16_t tmp[8] = {0};
    memcpy(tmp, p, (size_t)n * 2);
    const __m128i h = _mm_loadu_si128((const __m128i *)tmp);
    return dt == AMP_F16 ? _mm256_cvtph_ps(h) : bf16_widen(h);
}

AI void v_store_part(void *p, amp_dtype dt, V x, int n) {
    if (dt == AMP_F32) {
        _mm256_maskstore_ps(p, lane_mask(n), x);
        return;
    }
    uint16_t tmp[8];
    _mm_storeu_si128((__m128i *)tmp, dt == AMP_F16 ? f16_narrow(x) : bf16_narrow(x));
    memcpy(p, tmp, (size_t)n * 2);
}

AI void v_transpose(V r[8]) {
    const V t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const V t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const V t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const V t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const V u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const V u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const V u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const V u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

#include "kernels/cpu/gemm_simd.inc"

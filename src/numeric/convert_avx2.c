/* AVX2 + F16C + FMA conversion kernels. Compiled with AVX2 flags; only called
 * when the active CPU path is avx2 or better.
 *
 * The lane arithmetic is convert_simd.inc's, shared with the AVX-512 kernels
 * (see convert_impl.h), 8 lanes at a time; here its bindings, the RNE of
 * magnitudes, Philox, loads, stores and tails. AVX2 has no masked byte/word
 * stores, so the last n % 8 elements go through a small zero-padded buffer
 * and the same vector code. */
#include <immintrin.h>

#include "numeric/convert_impl.h"
#include "numeric/philox.h"

#define V1(x) _mm256_set1_epi32((int)(x))

/* Unsigned a > b for 32-bit lanes. */
static inline __m256i cmpgt_u32(__m256i a, __m256i b) {
    const __m256i bias = V1(0x80000000u);
    return _mm256_cmpgt_epi32(_mm256_xor_si256(a, bias), _mm256_xor_si256(b, bias));
}

static inline __m256i sel(__m256i mask, __m256i if_false, __m256i if_true) {
    return _mm256_blendv_epi8(if_false, if_true, mask);
}

/* the bindings of convert_simd.inc (32-bit lanes; masks are all-ones lanes) */
#define VI __m256i
#define IMASK __m256i
#define I_AND _mm256_and_si256
#define I_OR _mm256_or_si256
#define I_ADD _mm256_add_epi32
#define I_SUB _mm256_sub_epi32
#define I_SRLI _mm256_srli_epi32
#define I_SLLI _mm256_slli_epi32
#define I_SRL _mm256_srl_epi32
#define I_SLL _mm256_sll_epi32
#define I_SRLV _mm256_srlv_epi32
#define I_SLLV _mm256_sllv_epi32
#define I_MAXU _mm256_max_epu32
#define I_MINU _mm256_min_epu32
#define I_ZERO _mm256_setzero_si256()
#define I_GT _mm256_cmpgt_epi32
#define I_GTU cmpgt_u32
#define I_EQ _mm256_cmpeq_epi32
#define I_MOV(q, m, v) sel(m, q, v)
#define I_OR_IF(x, m, v) _mm256_or_si256(x, _mm256_and_si256(m, v))
#define I_OR_UNLESS(x, m, v) _mm256_or_si256(x, _mm256_andnot_si256(m, v))
#define I_CLEAR(v, m) _mm256_andnot_si256(m, v)
#define I_INC_IF(t, m) _mm256_sub_epi32(t, m) /* m is -1 where true */
#define I_CVT_F32_BITS(v) _mm256_castps_si256(_mm256_cvtepi32_ps(v))

/* RNE of magnitudes a (no NaN) to (bias, mbits); see amp_cv_rne_mag32 and
 * the AVX-512 version. Subnormal target range: |x| * 2^(bias - 1 + mbits)
 * (exact; |x| is clamped first so that no lane can overflow) rounded with
 * vroundps' explicit nearest-even mode, then truncated (exact) to int. */
static inline __m256i rne_mag(__m256i a, int bias, int mbits) {
    const __m256i one = V1(1);
    const int s = 23 - mbits;
    const __m128i sc = _mm_cvtsi32_si128(s);
    __m256i r = _mm256_sub_epi32(a, V1((uint32_t)(127 - bias) << 23));
    __m256i odd = _mm256_and_si256(_mm256_srl_epi32(r, sc), one);
    __m256i qn = _mm256_srl_epi32(_mm256_add_epi32(_mm256_add_epi32(r, V1((1u << (s - 1)) - 1u)), odd), sc);

    const __m256i min_normal = V1((uint32_t)(128 - bias) << 23);
    /* a <= 0x7fffffff, so a signed compare is an unsigned one here */
    __m256i sub = _mm256_cmpgt_epi32(min_normal, a);
    if (_mm256_testz_si256(sub, sub)) return qn;
    __m256 x = _mm256_min_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(min_normal));
    __m256 y = _mm256_mul_ps(x, _mm256_castsi256_ps(V1((uint32_t)(127 + bias - 1 + mbits) << 23)));
    __m256i qs = _mm256_cvttps_epi32(_mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return sel(sub, qn, qs);
}

/* ---- per-vector conversions (8 lanes, 32-bit results) --------------------- */
static inline __m256i cv_f32_bf16(__m256i u) {
    __m256i a = _mm256_and_si256(u, V1(0x7fffffff));
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), V1(1));
    __m256i q = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, V1(0x7fff)), odd), 16);
    __m256i nan = _mm256_cmpgt_epi32(a, V1(0x7f800000));
    return sel(nan, q, _mm256_or_si256(_mm256_srli_epi32(u, 16), V1(0x0040)));
}

/* ---- loads / stores of 8 lanes -------------------------------------------- */
static inline void store_u16x8(uint16_t *p, __m256i v) {
    __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storeu_si128((__m128i *)p, w);
}
static inline void store_u8x8(uint8_t *p, __m256i v) {
    __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64((__m128i *)p, _mm_packus_epi16(w, w));
}
static inline __m256i load_u16x8(const uint16_t *p) { return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256i load_u8x8(const uint8_t *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }
static inline __m256i load_f32x8(const float *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline void store_f32x8(float *p, __m256i v) { _mm256_storeu_si256((__m256i *)p, v); }

/* A kernel body: full vectors, then the tail through padded buffers. */
#define K_GENERIC(name, DT, ST, LOAD, STORE, fn)                        \
    static void name(void *dst_, const void *src_, size_t n) {          \
        DT *dst = dst_;                                                 \
        const ST *src = src_;                                           \
        size_t i = 0;                                                   \
        for (; i + 8 <= n; i += 8) STORE(dst + i, fn(LOAD(src + i)));   \
        if (i < n) {                                                    \
            ST sb[16];                                                  \
            DT db[16];                                                  \
            memset(sb, 0, sizeof sb);                                   \
            memcpy(sb, src + i, (n - i) * sizeof(ST));                  \
            STORE(db, fn(LOAD(sb)));                                    \
            memcpy(dst + i, db, (n - i) * sizeof(DT));                  \
        }                                                               \
    }

static inline __m256i cv_f32_f16(__m256i u) {
    return _mm256_cvtepu16_epi32(_mm256_cvtps_ph(_mm256_castsi256_ps(u), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
static inline __m256i cv_f16_f32(__m256i h) {
    __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    return _mm256_castps_si256(_mm256_cvtph_ps(w));
}


/* f16 directly with F16C, no detour through 32-bit lanes. */
static void k_f32_f16(void *dst_, const void *src_, size_t n) {
    uint16_t *dst = dst_;
    const float *src = src_;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (i < n) {
        float sb[8] = {0};
        uint16_t db[8];
        memcpy(sb, src + i, (n - i) * sizeof(float));
        store_u16x8(db, cv_f32_f16(load_f32x8(sb)));
        memcpy(dst + i, db, (n - i) * sizeof(uint16_t));
    }
}

static void k_f16_f32(void *dst_, const void *src_, size_t n) {
    float *dst = dst_;
    const uint16_t *src = src_;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    if (i < n) {
        uint16_t sb[8] = {0};
        float db[8];
        memcpy(sb, src + i, (n - i) * sizeof(uint16_t));
        store_f32x8(db, cv_f16_f32(load_u16x8(sb)));
        memcpy(dst + i, db, (n - i) * sizeof(float));
    }
}

/* ---- stochastic rounding -------------------------------------------------- */
/* Philox4x32-10 on 8 consecutive blocks; out[j] lane l = random word of
 * element 4*block0 + 8j + l (see the AVX-512 version). */
static inline void philox_x8(uint64_t key, uint64_t block0, __m256i out[4]) {
    __m256i lo = V1((uint32_t)block0);
    __m256i c0 = _mm256_add_epi32(lo, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i c1 = _mm256_sub_epi32(V1((uint32_t)(block0 >> 32)), cmpgt_u32(lo, c0)); /* carry */
    __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
    const __m256i M0 = _mm256_set1_epi64x(0xD2511F53), M1 = _mm256_set1_epi64x(0xCD9E8D57);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        __m256i pe0 = _mm256_mul_epu32(c0, M0), po0 = _mm256_mul_epu32(_mm256_srli_epi64(c0, 32), M0);
        __m256i pe1 = _mm256_mul_epu32(c2, M1), po1 = _mm256_mul_epu32(_mm256_srli_epi64(c2, 32), M1);
        __m256i lo0 = _mm256_blend_epi32(pe0, _mm256_slli_epi64(po0, 32), 0xAA);
        __m256i hi0 = _mm256_blend_epi32(_mm256_srli_epi64(pe0, 32), po0, 0xAA);
        __m256i lo1 = _mm256_blend_epi32(pe1, _mm256_slli_epi64(po1, 32), 0xAA);
        __m256i hi1 = _mm256_blend_epi32(_mm256_srli_epi64(pe1, 32), po1, 0xAA);
        c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), V1(k0));
        c1 = lo1;
        c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), V1(k1));
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpacklo_epi32(c2, c3);
    __m256i t2 = _mm256_unpackhi_epi32(c0, c1), t3 = _mm256_unpackhi_epi32(c2, c3);
    __m256i e0 = _mm256_unpacklo_epi64(t0, t1), e1 = _mm256_unpackhi_epi64(t0, t1);
    __m256i e2 = _mm256_unpacklo_epi64(t2, t3), e3 = _mm256_unpackhi_epi64(t2, t3);
    out[0] = _mm256_permute2x128_si256(e0, e1, 0x20); /* blocks 0, 1 */
    out[1] = _mm256_permute2x128_si256(e2, e3, 0x20); /* blocks 2, 3 */
    out[2] = _mm256_permute2x128_si256(e0, e1, 0x31); /* blocks 4, 5 */
    out[3] = _mm256_permute2x128_si256(e2, e3, 0x31); /* blocks 6, 7 */
}

/* the last n - i < 32 elements through a zero-padded buffer */
#define SR_TAIL(vfn)                                                                        \
    do {                                                                                    \
        float sb[32] = {0};                                                                 \
        uint16_t db[32];                                                                    \
        memcpy(sb, src + i, (n - i) * sizeof(float));                                       \
        for (int j = 0; j < 4; j++) store_u16x8(db + 8 * j, vfn(load_f32x8(sb + 8 * j), r[j])); \
        memcpy(dst + i, db, (n - i) * sizeof(uint16_t));                                    \
    } while (0)
#define CW 8
#define PHILOX_X philox_x8
#define LOAD_F32 load_f32x8
#define STORE_U16 store_u16x8
#define CV_TABLE amp_cv_avx2_kernels
#define CV_PATH "avx2"
#include "numeric/convert_simd.inc"

K_GENERIC(k_f32_bf16, uint16_t, float, load_f32x8, store_u16x8, cv_f32_bf16)
K_GENERIC(k_bf16_f32, float, uint16_t, load_u16x8, store_f32x8, cv_bf16_f32)
K_GENERIC(k_f32_e4m3, uint8_t, float, load_f32x8, store_u8x8, cv_f32_e4m3_rne)
K_GENERIC(k_f32_e4m3_sat, uint8_t, float, load_f32x8, store_u8x8, cv_f32_e4m3_sat)
K_GENERIC(k_e4m3_f32, float, uint8_t, load_u8x8, store_f32x8, cv_e4m3_f32)
K_GENERIC(k_f32_e5m2, uint8_t, float, load_f32x8, store_u8x8, cv_f32_e5m2_rne)
K_GENERIC(k_f32_e5m2_sat, uint8_t, float, load_f32x8, store_u8x8, cv_f32_e5m2_sat)
K_GENERIC(k_e5m2_f32, float, uint8_t, load_u8x8, store_f32x8, cv_e5m2_f32)

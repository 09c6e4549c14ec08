/* AVX-512 (F/BW/VL/DQ) + F16C conversion kernels. Compiled with AVX-512 flags;
 * only called when the active CPU path is avx512.
 *
 * f16 uses the hardware vcvtps2ph (round to nearest even) / vcvtph2ps, whose
 * NaN handling (quiet bit set, top payload bits kept, sign kept) is the rule
 * the scalar code follows. bf16 and fp8 use the integer rounding of
 * convert_impl.h, lane by lane. Tails use masked loads and stores, so any
 * length and alignment works and nothing past the arrays is touched. */
#include <immintrin.h>

#include "core/cpu.h"
#include "numeric/bf16_avx512.h"
#include "numeric/convert_impl.h"
#include "numeric/philox.h"

#define V1(x) _mm512_set1_epi32((int)(x))

static inline __mmask16 tail_mask(size_t r) { return (__mmask16)((1u << r) - 1u); }

/* RNE of magnitudes a (f32 bits, no NaN) to (bias, mbits); see
 * amp_cv_rne_mag32. Normal target range: the integer rebias-and-round.
 * Subnormal target range: |x| * 2^(bias - 1 + mbits) is exact (a power-of-two
 * scale of a value far from overflow), and converting it to an integer with
 * embedded round-to-nearest-even gives the subnormal encoding directly (a
 * carry into 2^mbits is the smallest normal). The rounding mode is in the
 * instruction, not MXCSR; under DAZ/FTZ the only inputs affected are f32
 * subnormals, which round to zero either way. Lanes outside the range are
 * masked off (no floating-point exceptions from them). */
static inline __m512i rne_mag(__m512i a, int bias, int mbits) {
    const __m512i one = V1(1);
    const int s = 23 - mbits;
    const __m128i sc = _mm_cvtsi32_si128(s);
    __m512i r = _mm512_sub_epi32(a, V1((uint32_t)(127 - bias) << 23));
    __m512i odd = _mm512_and_si512(_mm512_srl_epi32(r, sc), one);
    __m512i qn = _mm512_srl_epi32(_mm512_add_epi32(_mm512_add_epi32(r, V1((1u << (s - 1)) - 1u)), odd), sc);

    __mmask16 sub = _mm512_cmplt_epu32_mask(a, V1((uint32_t)(128 - bias) << 23));
    if (!sub) return qn;
    const __m512 scale = _mm512_castsi512_ps(V1((uint32_t)(127 + bias - 1 + mbits) << 23));
    __m512 y = _mm512_maskz_mul_ps(sub, _mm512_castsi512_ps(a), scale);
    __m512i qs = _mm512_cvt_roundps_epi32(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_mask_blend_epi32(sub, qn, qs);
}

/* Stochastic rounding of finite magnitudes a; see amp_cv_sr_mag32. */
static inline __m512i sr_mag(__m512i a, int bias, int mbits, __m512i rbits) {
    const __m512i one = V1(1);
    const int s = 23 - mbits;
    __m512i r = _mm512_sub_epi32(a, V1((uint32_t)(127 - bias) << 23));
    __m512i tn = _mm512_srl_epi32(r, _mm_cvtsi32_si128(s));
    __m512i fn = _mm512_sll_epi32(r, _mm_cvtsi32_si128(32 - s));

    __m512i e = _mm512_srli_epi32(a, 23);
    __m512i m = _mm512_and_si512(a, V1(0x007fffff));
    m = _mm512_mask_or_epi32(m, _mm512_test_epi32_mask(e, e), m, V1(0x00800000));
    e = _mm512_max_epu32(e, one);
    __m512i sh = _mm512_sub_epi32(V1(151 - bias - mbits), e);
    __m512i ts = _mm512_srlv_epi32(m, sh);
    __m512i fs = _mm512_or_si512(_mm512_sllv_epi32(m, _mm512_sub_epi32(V1(32), sh)),
                                 _mm512_srlv_epi32(m, _mm512_sub_epi32(sh, V1(32))));

    __mmask16 normal = _mm512_cmpge_epu32_mask(a, V1((uint32_t)(128 - bias) << 23));
    __m512i t = _mm512_mask_blend_epi32(normal, ts, tn);
    __m512i frac = _mm512_mask_blend_epi32(normal, fs, fn);
    __mmask16 up = _mm512_cmplt_epu32_mask(rbits, frac);
    return _mm512_mask_add_epi32(t, up, t, one);
}

/* ---- per-vector conversions (16 lanes, 32-bit results) -------------------- */
static inline __m512i cv_bf16_f32(__m512i h) {
    __m512i u = _mm512_slli_epi32(h, 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, V1(0x7fffffff)), V1(0x7f800000));
    return _mm512_mask_or_epi32(u, nan, u, V1(0x00400000));
}

static inline __m512i cv_f32_e4m3(__m512i u, int sat) {
    __m512i a = _mm512_and_si512(u, V1(0x7fffffff));
    __m512i s = _mm512_and_si512(_mm512_srli_epi32(u, 24), V1(0x80));
    __m512i q = rne_mag(a, 7, 3);
    q = _mm512_mask_mov_epi32(q, _mm512_cmpgt_epu32_mask(q, V1(0x7e)), V1(sat ? 0x7e : 0x7f));
    q = _mm512_mask_mov_epi32(q, _mm512_cmpgt_epu32_mask(a, V1(0x7f800000)), V1(0x7f));
    return _mm512_or_si512(q, s);
}

static inline __m512i cv_f32_e5m2(__m512i u, int sat) {
    __m512i a = _mm512_and_si512(u, V1(0x7fffffff));
    __m512i s = _mm512_and_si512(_mm512_srli_epi32(u, 24), V1(0x80));
    __m512i q = rne_mag(a, 15, 2);
    q = _mm512_mask_mov_epi32(q, _mm512_cmpgt_epu32_mask(q, V1(0x7b)), V1(sat ? 0x7b : 0x7c));
    __m512i nanv = _mm512_or_si512(V1(0x7e), _mm512_and_si512(_mm512_srli_epi32(a, 21), V1(3)));
    q = _mm512_mask_mov_epi32(q, _mm512_cmpgt_epu32_mask(a, V1(0x7f800000)), nanv);
    return _mm512_or_si512(q, s);
}

/* fp8 byte lanes b (0..255) -> f32 bits. Subnormals: the mantissa as an
 * integer converted to float (exact), then the exponent lowered by
 * bias - 1 + mbits: pure integer work on normal floats, independent of
 * MXCSR's flush-to-zero / denormals-are-zero bits. */
static inline __m512i cv_fp8_f32(__m512i b, int bias, int mbits) {
    __m512i s = _mm512_slli_epi32(_mm512_and_si512(b, V1(0x80)), 24);
    __m512i mag = _mm512_and_si512(b, V1(0x7f));
    __m512i normal = _mm512_add_epi32(_mm512_sll_epi32(mag, _mm_cvtsi32_si128(23 - mbits)),
                                      V1((uint32_t)(127 - bias) << 23));
    __m512i sub = _mm512_sub_epi32(_mm512_castps_si512(_mm512_cvtepi32_ps(mag)), V1((uint32_t)(bias - 1 + mbits) << 23));
    __mmask16 is_sub = _mm512_cmplt_epu32_mask(mag, V1(1u << mbits));
    __m512i r = _mm512_mask_blend_epi32(is_sub, normal, sub);
    r = _mm512_mask_mov_epi32(r, _mm512_cmpeq_epi32_mask(mag, _mm512_setzero_si512()), _mm512_setzero_si512());
    return _mm512_or_si512(r, s);
}

static inline __m512i cv_e4m3_f32(__m512i b) {
    __m512i r = cv_fp8_f32(b, 7, 3);
    __mmask16 nan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(b, V1(0x7f)), V1(0x7f));
    return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_and_si512(r, V1(0x80000000)), V1(0x7fc00000)));
}

static inline __m512i cv_e5m2_f32(__m512i b) {
    __m512i r = cv_fp8_f32(b, 15, 2);
    __m512i mag = _mm512_and_si512(b, V1(0x7f));
    __m512i m = _mm512_and_si512(b, V1(3));
    __m512i sp = _mm512_or_si512(V1(0x7f800000), _mm512_slli_epi32(m, 21));
    sp = _mm512_mask_or_epi32(sp, _mm512_test_epi32_mask(m, m), sp, V1(0x00400000));
    sp = _mm512_or_si512(sp, _mm512_and_si512(r, V1(0x80000000)));
    return _mm512_mask_mov_epi32(r, _mm512_cmpge_epu32_mask(mag, V1(0x7c)), sp);
}

/* ---- kernels ------------------------------------------------------------ */
static void k_f32_f16(void *dst_, const void *src_, size_t n) {
    uint16_t *dst = dst_;
    const float *src = src_;
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (i < n) {
        __mmask16 k = tail_mask(n - i);
        __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(k, src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_mask_storeu_epi16(dst + i, k, h);
    }
}

static void k_f16_f32(void *dst_, const void *src_, size_t n) {
    float *dst = dst_;
    const uint16_t *src = src_;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    if (i < n) {
        __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(dst + i, k, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, src + i)));
    }
}

/* f32 -> 16-bit formats through an integer lane function. */
#define K_F32_TO_U16(name, fn)                                                              \
    static void name(void *dst_, const void *src_, size_t n) {                              \
        uint16_t *dst = dst_;                                                               \
        const float *src = src_;                                                            \
        size_t i = 0;                                                                       \
        for (; i + 16 <= n; i += 16)                                                        \
            _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(fn(_mm512_loadu_si512(src + i)))); \
        if (i < n) {                                                                        \
            __mmask16 k = tail_mask(n - i);                                                 \
            _mm512_mask_cvtepi32_storeu_epi16(dst + i, k, fn(_mm512_maskz_loadu_epi32(k, src + i))); \
        }                                                                                   \
    }

#define K_U16_TO_F32(name, fn)                                                              \
    static void name(void *dst_, const void *src_, size_t n) {                              \
        float *dst = dst_;                                                                  \
        const uint16_t *src = src_;                                                         \
        size_t i = 0;                                                                       \
        for (; i + 16 <= n; i += 16)                                                        \
            _mm512_storeu_si512(dst + i, fn(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i))))); \
        if (i < n) {                                                                        \
            __mmask16 k = tail_mask(n - i);                                                 \
            _mm512_mask_storeu_epi32(dst + i, k, fn(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, src + i)))); \
        }                                                                                   \
    }

#define K_F32_TO_U8(name, fn)                                                               \
    static void name(void *dst_, const void *src_, size_t n) {                              \
        uint8_t *dst = dst_;                                                                \
        const float *src = src_;                                                            \
        size_t i = 0;                                                                       \
        for (; i + 16 <= n; i += 16)                                                        \
            _mm_storeu_si128((__m128i *)(dst + i), _mm512_cvtepi32_epi8(fn(_mm512_loadu_si512(src + i)))); \
        if (i < n) {                                                                        \
            __mmask16 k = tail_mask(n - i);                                                 \
            _mm512_mask_cvtepi32_storeu_epi8(dst + i, k, fn(_mm512_maskz_loadu_epi32(k, src + i))); \
        }                                                                                   \
    }

#define K_U8_TO_F32(name, fn)                                                               \
    static void name(void *dst_, const void *src_, size_t n) {                              \
        float *dst = dst_;                                                                  \
        const uint8_t *src = src_;                                                          \
        size_t i = 0;                                                                       \
        for (; i + 16 <= n; i += 16)                                                        \
            _mm512_storeu_si512(dst + i, fn(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(src + i))))); \
        if (i < n) {                                                                        \
            __mmask16 k = tail_mask(n - i);                                                 \
            _mm512_mask_storeu_epi32(dst + i, k, fn(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, src + i)))); \
        }                                                                                   \
    }

static inline __m512i cv_f32_e4m3_rne(__m512i u) { return cv_f32_e4m3(u, 0); }
static inline __m512i cv_f32_e4m3_sat(__m512i u) { return cv_f32_e4m3(u, 1); }
static inline __m512i cv_f32_e5m2_rne(__m512i u) { return cv_f32_e5m2(u, 0); }
static inline __m512i cv_f32_e5m2_sat(__m512i u) { return cv_f32_e5m2(u, 1); }

/* f32 -> bf16, 32 lanes per step through bf512_store2 (vcvtne2ps2bf16 where
 * the CPU has it, else the integer rounding: the same bits) */
static void k_f32_bf16(void *dst_, const void *src_, size_t n) {
    uint16_t *dst = dst_;
    const float *src = src_;
    const bool nat = amp__cpu_bf16cvt();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) bf512_store2(dst + i, _mm512_loadu_ps(src + i), _mm512_loadu_ps(src + i + 16), nat);
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : tail_mask(n - i);
        bf512_mask_store(dst + i, k, _mm512_maskz_loadu_ps(k, src + i), nat);
    }
}
K_U16_TO_F32(k_bf16_f32, cv_bf16_f32)
K_F32_TO_U8(k_f32_e4m3, cv_f32_e4m3_rne)
K_F32_TO_U8(k_f32_e4m3_sat, cv_f32_e4m3_sat)
K_F32_TO_U8(k_f32_e5m2, cv_f32_e5m2_rne)
K_F32_TO_U8(k_f32_e5m2_sat, cv_f32_e5m2_sat)
K_U8_TO_F32(k_e4m3_f32, cv_e4m3_f32)
K_U8_TO_F32(k_e5m2_f32, cv_e5m2_f32)

/* ---- stochastic rounding -------------------------------------------------- */
/* Philox4x32-10 on 16 consecutive blocks block0 .. block0+15 (key seed,
 * counter high word 0), returned in element order: out[j] lane l is word
 * (16j + l) & 3 of block block0 + (16j + l) / 4, i.e. the random word of
 * element 4*block0 + 16j + l, as amp_philox_u32_at gives it. */
static inline void philox_x16(uint64_t key, uint64_t block0, __m512i out[4]) {
    const __m512i one = V1(1);
    __m512i lo = V1((uint32_t)block0);
    __m512i c0 = _mm512_add_epi32(lo, _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    __m512i c1 = V1((uint32_t)(block0 >> 32));
    c1 = _mm512_mask_add_epi32(c1, _mm512_cmplt_epu32_mask(c0, lo), c1, one); /* carry */
    __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
    const __m512i M0 = _mm512_set1_epi64(0xD2511F53), M1 = _mm512_set1_epi64(0xCD9E8D57);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        __m512i pe0 = _mm512_mul_epu32(c0, M0), po0 = _mm512_mul_epu32(_mm512_srli_epi64(c0, 32), M0);
        __m512i pe1 = _mm512_mul_epu32(c2, M1), po1 = _mm512_mul_epu32(_mm512_srli_epi64(c2, 32), M1);
        __m512i lo0 = _mm512_mask_blend_epi32(0xAAAA, pe0, _mm512_slli_epi64(po0, 32));
        __m512i hi0 = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe0, 32), po0);
        __m512i lo1 = _mm512_mask_blend_epi32(0xAAAA, pe1, _mm512_slli_epi64(po1, 32));
        __m512i hi1 = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe1, 32), po1);
        c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), V1(k0));
        c1 = lo1;
        c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), V1(k1));
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    /* 4x4 transpose inside each 128-bit lane: e_j lane L = block 4L+j. */
    __m512i t0 = _mm512_unpacklo_epi32(c0, c1), t1 = _mm512_unpacklo_epi32(c2, c3);
    __m512i t2 = _mm512_unpackhi_epi32(c0, c1), t3 = _mm512_unpackhi_epi32(c2, c3);
    __m512i e0 = _mm512_unpacklo_epi64(t0, t1), e1 = _mm512_unpackhi_epi64(t0, t1);
    __m512i e2 = _mm512_unpacklo_epi64(t2, t3), e3 = _mm512_unpackhi_epi64(t2, t3);
    /* out[q] = [e0.lane q, e1.lane q, e2.lane q, e3.lane q] */
    __m512i a01 = _mm512_shuffle_i32x4(e0, e1, _MM_SHUFFLE(1, 0, 1, 0));
    __m512i a23 = _mm512_shuffle_i32x4(e2, e3, _MM_SHUFFLE(1, 0, 1, 0));
    __m512i b01 = _mm512_shuffle_i32x4(e0, e1, _MM_SHUFFLE(3, 2, 3, 2));
    __m512i b23 = _mm512_shuffle_i32x4(e2, e3, _MM_SHUFFLE(3, 2, 3, 2));
    out[0] = _mm512_shuffle_i32x4(a01, a23, _MM_SHUFFLE(2, 0, 2, 0));
    out[1] = _mm512_shuffle_i32x4(a01, a23, _MM_SHUFFLE(3, 1, 3, 1));
    out[2] = _mm512_shuffle_i32x4(b01, b23, _MM_SHUFFLE(2, 0, 2, 0));
    out[3] = _mm512_shuffle_i32x4(b01, b23, _MM_SHUFFLE(3, 1, 3, 1));
}

static inline __m512i sr_f32_bf16(__m512i u, __m512i rbits) {
    __m512i a = _mm512_and_si512(u, V1(0x7fffffff));
    __m512i t = _mm512_srli_epi32(u, 16); /* sign stays on top of the magnitude */
    __mmask16 up = _mm512_cmplt_epu32_mask(rbits, _mm512_slli_epi32(u, 16));
    __m512i q = _mm512_mask_add_epi32(t, up, t, V1(1));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(a, V1(0x7f800000));
    return _mm512_mask_or_epi32(q, nan, t, V1(0x0040));
}

static inline __m512i sr_f32_f16(__m512i u, __m512i rbits) {
    __m512i a = _mm512_and_si512(u, V1(0x7fffffff));
    __m512i s = _mm512_and_si512(_mm512_srli_epi32(u, 16), V1(0x8000));
    __m512i q = _mm512_min_epu32(sr_mag(a, 15, 10, rbits), V1(0x7c00));
    __m512i nanv = _mm512_or_si512(V1(0x7e00), _mm512_and_si512(_mm512_srli_epi32(a, 13), V1(0x3ff)));
    q = _mm512_mask_mov_epi32(q, _mm512_cmpgt_epu32_mask(a, V1(0x7f800000)), nanv);
    return _mm512_or_si512(q, s);
}

#define K_SR(name, vfn, sfn)                                                                  \
    static void name(uint16_t *dst, const float *src, size_t n, uint64_t seed, uint64_t counter) { \
        size_t i = 0, head = (size_t)((4u - (unsigned)(counter & 3u)) & 3u);                  \
        if (head > n) head = n;                                                               \
        for (; i < head; i++) dst[i] = sfn(src[i], amp_philox_u32_at(seed, counter + i));     \
        for (; i + 64 <= n; i += 64) {                                                        \
            __m512i r[4];                                                                     \
            philox_x16(seed, (counter + i) >> 2, r);                                          \
            for (int j = 0; j < 4; j++)                                                       \
                _mm256_storeu_si256((__m256i *)(dst + i + 16 * j),                            \
                                    _mm512_cvtepi32_epi16(vfn(_mm512_loadu_si512(src + i + 16 * j), r[j]))); \
        }                                                                                     \
        if (i < n) {                                                                          \
            __m512i r[4];                                                                     \
            philox_x16(seed, (counter + i) >> 2, r);                                          \
            for (int j = 0; j < 4 && i + 16 * (size_t)j < n; j++) {                           \
                size_t rem = n - i - 16 * (size_t)j;                                          \
                __mmask16 k = rem >= 16 ? (__mmask16)0xffff : tail_mask(rem);                 \
                _mm512_mask_cvtepi32_storeu_epi16(dst + i + 16 * j, k,                        \
                                                  vfn(_mm512_maskz_loadu_epi32(k, src + i + 16 * j), r[j])); \
            }                                                                                 \
        }                                                                                     \
    }

K_SR(k_sr_bf16, sr_f32_bf16, amp_f32_to_bf16_sr)
K_SR(k_sr_f16, sr_f32_f16, amp_f32_to_f16_sr)

const amp_cv_kernels amp_cv_avx512_kernels = {
    .path = "avx512",
    .cv = {
        [AMP_CV_F32_F16] = k_f32_f16,
        [AMP_CV_F16_F32] = k_f16_f32,
        [AMP_CV_F32_BF16] = k_f32_bf16,
        [AMP_CV_BF16_F32] = k_bf16_f32,
        [AMP_CV_F32_E4M3] = k_f32_e4m3,
        [AMP_CV_F32_E4M3_SAT] = k_f32_e4m3_sat,
        [AMP_CV_E4M3_F32] = k_e4m3_f32,
        [AMP_CV_F32_E5M2] = k_f32_e5m2,
        [AMP_CV_F32_E5M2_SAT] = k_f32_e5m2_sat,
        [AMP_CV_E5M2_F32] = k_e5m2_f32,
    },
    .sr_bf16 = k_sr_bf16,
    .sr_f16 = k_sr_f16,
};

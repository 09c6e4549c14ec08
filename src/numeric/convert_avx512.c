/* AVX-512 (F/BW/VL/DQ) + F16C conversion kernels. Compiled with AVX-512 flags;
 * only called when the active CPU path is avx512.
 *
 * f16 uses the hardware vcvtps2ph (round to nearest even) / vcvtph2ps, whose
 * NaN handling (quiet bit set, top payload bits kept, sign kept) is the rule
 * the scalar code follows. bf16 and fp8 use the integer rounding of
 * convert_impl.h, lane by lane: convert_simd.inc's lane arithmetic, shared
 * with the AVX2 kernels; here its bindings, the RNE of magnitudes, Philox,
 * loads, stores and tails. Tails use masked loads and stores, so any length
 * and alignment works and nothing past the arrays is touched. */
#include <immintrin.h>

#include "core/cpu.h"
#include "numeric/bf16_avx512.h"
#include "numeric/convert_impl.h"
#include "numeric/philox.h"

#define V1(x) _mm512_set1_epi32((int)(x))

static inline __mmask16 tail_mask(size_t r) { return (__mmask16)((1u << r) - 1u); }

/* the bindings of convert_simd.inc (32-bit lanes, __mmask16 masks) */
#define VI __m512i
#define IMASK __mmask16
#define I_AND _mm512_and_si512
#define I_OR _mm512_or_si512
#define I_ADD _mm512_add_epi32
#define I_SUB _mm512_sub_epi32
#define I_SRLI _mm512_srli_epi32
#define I_SLLI _mm512_slli_epi32
#define I_SRL _mm512_srl_epi32
#define I_SLL _mm512_sll_epi32
#define I_SRLV _mm512_srlv_epi32
#define I_SLLV _mm512_sllv_epi32
#define I_MAXU _mm512_max_epu32
#define I_MINU _mm512_min_epu32
#define I_ZERO _mm512_setzero_si512()
#define I_GT _mm512_cmpgt_epu32_mask
#define I_GTU _mm512_cmpgt_epu32_mask
#define I_EQ _mm512_cmpeq_epi32_mask
#define I_MOV(q, m, v) _mm512_mask_mov_epi32(q, m, v)
#define I_OR_IF(x, m, v) _mm512_mask_or_epi32(x, m, x, v)
#define I_OR_UNLESS(x, m, v) _mm512_mask_or_epi32(x, (__mmask16)~(m), x, v)
#define I_CLEAR(v, m) _mm512_mask_mov_epi32(v, m, _mm512_setzero_si512())
#define I_INC_IF(t, m) _mm512_mask_add_epi32(t, m, t, V1(1))
#define I_CVT_F32_BITS(v) _mm512_castps_si512(_mm512_cvtepi32_ps(v))

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

#define CW 16
#define PHILOX_X philox_x16
#define LOAD_F32(p) _mm512_loadu_si512(p)
#define STORE_U16(p, v) _mm256_storeu_si256((__m256i *)(p), _mm512_cvtepi32_epi16(v))
/* the last n - i < 64 elements with masked loads and stores */
#define SR_TAIL(vfn)                                                                              \
    for (int j = 0; j < 4 && i + 16 * (size_t)j < n; j++) {                                       \
        size_t rem = n - i - 16 * (size_t)j;                                                      \
        __mmask16 k = rem >= 16 ? (__mmask16)0xffff : tail_mask(rem);                             \
        _mm512_mask_cvtepi32_storeu_epi16(dst + i + 16 * j, k, vfn(_mm512_maskz_loadu_epi32(k, src + i + 16 * j), r[j])); \
    }
#define CV_TABLE amp_cv_avx512_kernels
#define CV_PATH "avx512"
static inline void philox_x16(uint64_t key, uint64_t block0, __m512i out[4]);
#include "numeric/convert_simd.inc"

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

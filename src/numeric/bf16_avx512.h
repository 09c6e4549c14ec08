/* Internal: bf16 <-> f32 for 16 or 32 lanes in AVX-512 registers, shared by
 * the conversion kernels and the fused kernels that widen on load and round
 * on store. Include only from files built for AVX-512 (*_avx512.c).
 *
 * Widening is exact: the bf16 bits become the top half of the f32, and a
 * signalling NaN gets its quiet bit (amp_bf16_to_f32's rule).
 *
 * Rounding is round-to-nearest-even with quiet NaNs (amp_f32_to_bf16's
 * rule: NaN -> top half | 0x0040). Two ways, the same bits:
 *   - integer: u + 0x7fff + ((u >> 16) & 1), top half; NaN lanes blended;
 *   - vcvtne2ps2bf16 (AVX512_BF16), one instruction for 32 lanes, when the
 *     caller passes nat = amp__cpu_bf16cvt(). It rounds to nearest even and
 *     quiets NaNs the same way, but treats f32 subnormal inputs as zero, so
 *     a pair of vectors holding any subnormal takes the integer way. It is
 *     emitted with inline assembly so the files need no AVX512_BF16 target
 *     flag (the instruction only runs when cpuid reported it). */
#ifndef AMP_NUMERIC_BF16_AVX512_H
#define AMP_NUMERIC_BF16_AVX512_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#define BF512_INLINE static inline __attribute__((always_inline))

/* 16 bf16 (in the low 16 bits of each 32-bit lane, upper bits ignored) -> f32 */
BF512_INLINE __m512 bf512_widen_u32(__m512i h) {
    __m512i u = _mm512_slli_epi32(h, 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    return _mm512_castsi512_ps(_mm512_mask_or_epi32(u, nan, u, _mm512_set1_epi32(0x00400000)));
}

/* 16 bf16 at p (any alignment) -> f32 */
BF512_INLINE __m512 bf512_load(const uint16_t *p) {
    return bf512_widen_u32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)));
}
/* the first k lanes of p, zeros elsewhere (nothing past them is read) */
BF512_INLINE __m512 bf512_maskz_load(__mmask16 k, const uint16_t *p) {
    return bf512_widen_u32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, p)));
}

/* 16 bf16 at p -> f32 without quieting signalling NaNs, for values that only
 * feed arithmetic: an arithmetic instruction quiets a signalling NaN operand
 * keeping its payload and sign, which is what the widening would have done,
 * so the results have the same bits (a compare, min, max or blend does not
 * quiet: such a value must reach the result through arithmetic). Two
 * instructions instead of five (measured on Zen 4: bf16 exp in registers
 * 0.30 -> 0.24 ns per element together with the cheaper subnormal test). */
BF512_INLINE __m512 bf512_load_arith(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

/* f32 bits -> rounded f32 bits whose top half is the bf16 (integer way) */
BF512_INLINE __m512i bf512_round_hi(__m512i u) {
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i q = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_or_epi32(q, nan, u, _mm512_set1_epi32(0x00400000));
}

/* 16 lanes -> 16 bf16 in the low 16 bits of each 32-bit lane (integer way) */
BF512_INLINE __m512i bf512_round_u32(__m512 v) { return _mm512_srli_epi32(bf512_round_hi(_mm512_castps_si512(v)), 16); }

/* any lane of a or b an f32 subnormal: exponent bits zero (vptestnmd) and,
 * of those lanes, mantissa bits not zero (vptestmd under that mask). With
 * integer bit tests because vfpclassps honours MXCSR.DAZ (it would call a
 * subnormal zero under DAZ, and the result must not depend on MXCSR). */
BF512_INLINE bool bf512_any_subnormal(__m512 a, __m512 b) {
    const __m512i ex = _mm512_set1_epi32(0x7f800000), man = _mm512_set1_epi32(0x007fffff);
    const __m512i ua = _mm512_castps_si512(a), ub = _mm512_castps_si512(b);
    __mmask16 sa = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(ua, ex), ua, man);
    __mmask16 sb = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(ub, ex), ub, man);
    return (sa | sb) != 0;
}

/* a (elements 0..15) and b (16..31) -> 32 bf16, in order (integer way) */
BF512_INLINE __m512i bf512_narrow2_int(__m512 a, __m512 b) {
    const __m512i idx = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25,
                                         23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    return _mm512_permutex2var_epi16(bf512_round_hi(_mm512_castps_si512(a)), idx,
                                     bf512_round_hi(_mm512_castps_si512(b)));
}
/* the same out of line, for the rare subnormal pair of the instruction way:
 * a loop that inlines only the instruction keeps its registers for the math */
static __attribute__((noinline, cold, unused)) __m512i bf512_narrow2_int_cold(__m512 a, __m512 b) {
    return bf512_narrow2_int(a, b);
}

/* a and b -> 32 bf16 by vcvtne2ps2bf16 alone: only where the CPU has it
 * and the caller knows that no lane of a or b is an f32 subnormal */
BF512_INLINE __m512i bf512_narrow2_nosub(__m512 a, __m512 b) {
    __m512i r;
    __asm__("vcvtne2ps2bf16 %2, %1, %0" : "=v"(r) : "v"(b), "v"(a));
    return r;
}

/* a (elements 0..15) and b (16..31) -> 32 bf16, in order */
BF512_INLINE __m512i bf512_narrow2(__m512 a, __m512 b, bool nat) {
    if (nat) {
        if (__builtin_expect(!bf512_any_subnormal(a, b), 1)) return bf512_narrow2_nosub(a, b);
        return bf512_narrow2_int_cold(a, b);
    }
    return bf512_narrow2_int(a, b);
}

/* 32 bf16 in a 512-bit vector split into f32 without moving them between
 * lanes: the even elements (0, 2, .., 30) shifted up, the odd ones masked
 * in place. For lane-wise ops; bf512_merge_eo puts the results back in
 * order. No NaN quieting: as bf512_load_arith, or the caller rounds the
 * results to bf16, which quiets a NaN the same way. */
BF512_INLINE __m512 bf512_even(__m512i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }
BF512_INLINE __m512 bf512_odd(__m512i v) {
    return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u)));
}
/* e (elements 0, 2, .., 30) and o (1, 3, .., 31) -> 32 bf16 in order,
 * rounded as bf512_narrow2 rounds */
BF512_INLINE __m512i bf512_merge_eo(__m512 e, __m512 o, bool nat) {
    if (nat && __builtin_expect(!bf512_any_subnormal(e, o), 1)) {
        const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                             21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        return _mm512_permutexvar_epi16(idx, bf512_narrow2_nosub(e, o));
    }
    /* integer way: the even results' bf16 into the low halves, the odd into the high */
    return _mm512_ternarylogic_epi32(bf512_round_hi(_mm512_castps_si512(o)),
                                     _mm512_srli_epi32(bf512_round_hi(_mm512_castps_si512(e)), 16),
                                     _mm512_set1_epi32((int)0xffff0000u), 0xe4); /* mask ? o : e */
}

/* 16 lanes -> 16 bf16 */
BF512_INLINE __m256i bf512_narrow1(__m512 v, bool nat) {
    return _mm512_castsi512_si256(bf512_narrow2(v, v, nat));
}

BF512_INLINE void bf512_store2(uint16_t *p, __m512 a, __m512 b, bool nat) {
    _mm512_storeu_si512(p, bf512_narrow2(a, b, nat));
}
BF512_INLINE void bf512_store(uint16_t *p, __m512 v, bool nat) {
    _mm256_storeu_si256((__m256i *)p, bf512_narrow1(v, nat));
}
/* the first k lanes only (nothing past them is written) */
BF512_INLINE void bf512_mask_store(uint16_t *p, __mmask16 k, __m512 v, bool nat) {
    _mm256_mask_storeu_epi16(p, k, bf512_narrow1(v, nat));
}

#endif

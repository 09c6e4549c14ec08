/* Internal: AVX-512 versions of the vmath.h functions, 16 lanes at a time.
 * Include only from files built for AVX-512 (*_avx512.c).
 *
 * Each function performs the same IEEE operations in the same order as its
 * scalar twin in vmath.h (vfmadd/vfmsub/vfnmadd where it calls fmaf, no
 * other fusing, no reassociation, no approximate reciprocals), so each lane
 * equals the scalar result bit for bit. Two steps
 * use a single instruction with the same result:
 *   - (v + 1.5*2^23) - 1.5*2^23 rounds v to the nearest integer (ties to
 *     even) for |v| < 2^22: vrndscaleps with round-to-nearest;
 *   - (p * 2^n1) * 2^n2 with n1 = n/2, n2 = n - n1 and p in [0.7, 1.5]: the
 *     first product is exact (normal), so the result is p * 2^n rounded
 *     once, which is what vscalefps computes (overflow to inf, gradual
 *     underflow, NaN propagates).
 * Selects `c ? a : b` become compare masks and blends; the clamps
 * `x > k ? k : x` become vminps(k, x) (which returns x when x is NaN, as the
 * select does), `x < k ? k : x` vmaxps(k, x). */
#ifndef AMP_KERNELS_CPU_VMATH_AVX512_H
#define AMP_KERNELS_CPU_VMATH_AVX512_H

#include <immintrin.h>

#define VM512_INLINE static inline __attribute__((always_inline))
#define VM512_K(c) _mm512_set1_ps(c)

VM512_INLINE __m512 vm512_abs(__m512 x) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff))); }
/* copysignf(mag, sgn) */
VM512_INLINE __m512 vm512_copysign(__m512 mag, __m512 sgn) {
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(mag), _mm512_castps_si512(sgn),
                                                         _mm512_set1_epi32(0x7fffffff), 0xe4)); /* c ? a : b bitwise */
}
/* x < 0 (ordered: false for NaN) */
VM512_INLINE __mmask16 vm512_ltz(__m512 x) { return _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ); }

/* vm_expf for x <= 100 or NaN (its upper clamp is then the identity):
 * callers that know their argument is at most 100 skip an instruction */
VM512_INLINE __m512 vm512_expf_le100(__m512 x) {
    __m512 xc = _mm512_max_ps(VM512_K(-104.0f), x);
    __m512 fn = _mm512_roundscale_ps(_mm512_mul_ps(xc, VM512_K(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(fn, VM512_K(0.693359375f), xc);
    r = _mm512_fnmadd_ps(fn, VM512_K(-2.12194440e-4f), r);
    __m512 p = VM512_K(1.38368461e-3f);
    p = _mm512_fmadd_ps(p, r, VM512_K(8.37481580e-3f));
    p = _mm512_fmadd_ps(p, r, VM512_K(4.16682256e-2f));
    p = _mm512_fmadd_ps(p, r, VM512_K(1.66664202e-1f));
    p = _mm512_fmadd_ps(p, r, VM512_K(4.99999921e-1f));
    p = _mm512_fmadd_ps(p, r, VM512_K(1.0f));
    p = _mm512_fmadd_ps(p, r, VM512_K(1.0f));
    return _mm512_scalef_ps(p, fn);
}

/* vm_expf */
VM512_INLINE __m512 vm512_expf(__m512 x) { return vm512_expf_le100(_mm512_min_ps(VM512_K(100.0f), x)); }

/* vm_sigmoidf */
VM512_INLINE __m512 vm512_sigmoidf(__m512 x) {
    __m512 na = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
    __m512 e = vm512_expf(na);
    __m512 s = _mm512_div_ps(VM512_K(1.0f), _mm512_add_ps(VM512_K(1.0f), e));
    __m512 num = _mm512_mask_blend_ps(vm512_ltz(x), VM512_K(1.0f), e);
    return _mm512_mul_ps(num, s);
}

/* vm_tanhf */
VM512_INLINE __m512 vm512_tanhf(__m512 x) {
    __m512 a = vm512_abs(x), t = _mm512_mul_ps(a, a);
    __m512 p = VM512_K(-0.005772202046132548f);
    p = _mm512_fmadd_ps(p, t, VM512_K(0.020692378769468736f));
    p = _mm512_fmsub_ps(p, t, VM512_K(0.05375282467037401f));
    p = _mm512_fmadd_ps(p, t, VM512_K(0.13331528597171044f));
    p = _mm512_fmsub_ps(p, t, VM512_K(0.3333327797534768f));
    p = _mm512_fmadd_ps(p, t, VM512_K(0.999999997264233f));
    __m512 small = _mm512_mul_ps(a, p);
    __m512 e = vm512_expf(_mm512_mul_ps(VM512_K(2.0f), a));
    __m512 big = _mm512_sub_ps(VM512_K(1.0f), _mm512_div_ps(VM512_K(2.0f), _mm512_add_ps(VM512_K(1.0f), e)));
    __mmask16 lt = _mm512_cmp_ps_mask(a, VM512_K(0.625f), _CMP_LT_OQ);
    return vm512_copysign(_mm512_mask_blend_ps(lt, big, small), x);
}

/* vm_phif */
VM512_INLINE __m512 vm512_phif(__m512 x) {
    __m512 t = _mm512_div_ps(VM512_K(1.0f),
                             _mm512_add_ps(VM512_K(1.0f), _mm512_mul_ps(vm512_abs(x), VM512_K(0.35355339059327376220f))));
    __m512 p = VM512_K(0.17087277f);
    p = _mm512_fmsub_ps(p, t, VM512_K(0.82215223f));
    p = _mm512_fmadd_ps(p, t, VM512_K(1.48851587f));
    p = _mm512_fmsub_ps(p, t, VM512_K(1.13520398f));
    p = _mm512_fmadd_ps(p, t, VM512_K(0.27886807f));
    p = _mm512_fmsub_ps(p, t, VM512_K(0.18628806f));
    p = _mm512_fmadd_ps(p, t, VM512_K(0.09678418f));
    p = _mm512_fmadd_ps(p, t, VM512_K(0.37409196f));
    p = _mm512_fmadd_ps(p, t, VM512_K(1.00002368f));
    p = _mm512_fmsub_ps(p, t, VM512_K(1.26551223f));
    __m512 s = _mm512_fmadd_ps(_mm512_mul_ps(VM512_K(-0.5f), x), x, p);
    __m512 h = _mm512_mul_ps(_mm512_mul_ps(VM512_K(0.5f), t), vm512_expf(s));
    return _mm512_mask_blend_ps(vm512_ltz(x), _mm512_sub_ps(VM512_K(1.0f), h), h);
}

#endif

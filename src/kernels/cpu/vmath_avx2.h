/* Internal: AVX2 versions of the vmath.h functions, 8 lanes at a time.
 * Include only from files built for AVX2 (*_avx2.c).
 *
 * Each function performs the same IEEE operations in the same order as its
 * scalar twin in vmath.h (vfmadd/vfmsub/vfnmadd where it calls fmaf, no
 * other fusing, no reassociation, no approximate reciprocals), so each lane
 * equals the scalar result bit for bit:
 *   - (v + 1.5*2^23) - 1.5*2^23 (round to nearest, ties to even, for
 *     |v| < 2^22) is vroundps with round-to-nearest;
 *   - the integer steps of the 2^n scaling are the C code's: n from the
 *     NaN-free copy of fn, n1 = n / 2 rounded toward zero, n2 = n - n1,
 *     2^n1 and 2^n2 built in the exponent field, two multiplies;
 *   - selects `c ? a : b` are compare masks and vblendvps; the clamps
 *     `x > k ? k : x` are vminps(k, x) (x when x is NaN, as the select),
 *     `x < k ? k : x` vmaxps(k, x). */
#ifndef AMP_KERNELS_CPU_VMATH_AVX2_H
#define AMP_KERNELS_CPU_VMATH_AVX2_H

#include <immintrin.h>

#define VM256_INLINE static inline __attribute__((always_inline))
#define VM256_K(c) _mm256_set1_ps(c)

VM256_INLINE __m256 vm256_abs(__m256 x) {
    return _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}
/* copysignf(mag, sgn) */
VM256_INLINE __m256 vm256_copysign(__m256 mag, __m256 sgn) {
    __m256 sb = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    return _mm256_or_ps(_mm256_andnot_ps(sb, mag), _mm256_and_ps(sb, sgn));
}
/* x < 0 (ordered: false for NaN), as a lane mask */
VM256_INLINE __m256 vm256_ltz(__m256 x) { return _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ); }

/* vm_expf */
VM256_INLINE __m256 vm256_expf(__m256 x) {
    __m256 xc = _mm256_min_ps(VM256_K(100.0f), x);
    xc = _mm256_max_ps(VM256_K(-104.0f), xc);
    __m256 fn = _mm256_round_ps(_mm256_mul_ps(xc, VM256_K(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fn, VM256_K(0.693359375f), xc);
    r = _mm256_fnmadd_ps(fn, VM256_K(-2.12194440e-4f), r);
    __m256 p = VM256_K(1.38368461e-3f);
    p = _mm256_fmadd_ps(p, r, VM256_K(8.37481580e-3f));
    p = _mm256_fmadd_ps(p, r, VM256_K(4.16682256e-2f));
    p = _mm256_fmadd_ps(p, r, VM256_K(1.66664202e-1f));
    p = _mm256_fmadd_ps(p, r, VM256_K(4.99999921e-1f));
    p = _mm256_fmadd_ps(p, r, VM256_K(1.0f));
    p = _mm256_fmadd_ps(p, r, VM256_K(1.0f));
    __m256 fnn = _mm256_and_ps(fn, _mm256_cmp_ps(fn, fn, _CMP_ORD_Q)); /* fn == fn ? fn : 0 */
    __m256i n = _mm256_cvttps_epi32(fnn);
    __m256i n1 = _mm256_srai_epi32(_mm256_add_epi32(n, _mm256_srli_epi32(n, 31)), 1); /* n / 2, toward zero */
    __m256i n2 = _mm256_sub_epi32(n, n1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

/* vm_sigmoidf */
VM256_INLINE __m256 vm256_sigmoidf(__m256 x) {
    __m256 na = _mm256_or_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)));
    __m256 e = vm256_expf(na);
    __m256 s = _mm256_div_ps(VM256_K(1.0f), _mm256_add_ps(VM256_K(1.0f), e));
    __m256 num = _mm256_blendv_ps(VM256_K(1.0f), e, vm256_ltz(x));
    return _mm256_mul_ps(num, s);
}

/* vm_tanhf */
VM256_INLINE __m256 vm256_tanhf(__m256 x) {
    __m256 a = vm256_abs(x), t = _mm256_mul_ps(a, a);
    __m256 p = VM256_K(-0.005772202046132548f);
    p = _mm256_fmadd_ps(p, t, VM256_K(0.020692378769468736f));
    p = _mm256_fmsub_ps(p, t, VM256_K(0.05375282467037401f));
    p = _mm256_fmadd_ps(p, t, VM256_K(0.13331528597171044f));
    p = _mm256_fmsub_ps(p, t, VM256_K(0.3333327797534768f));
    p = _mm256_fmadd_ps(p, t, VM256_K(0.999999997264233f));
    __m256 small = _mm256_mul_ps(a, p);
    __m256 e = vm256_expf(_mm256_mul_ps(VM256_K(2.0f), a));
    __m256 big = _mm256_sub_ps(VM256_K(1.0f), _mm256_div_ps(VM256_K(2.0f), _mm256_add_ps(VM256_K(1.0f), e)));
    __m256 lt = _mm256_cmp_ps(a, VM256_K(0.625f), _CMP_LT_OQ);
    return vm256_copysign(_mm256_blendv_ps(big, small, lt), x);
}

/* vm_phif */
VM256_INLINE __m256 vm256_phif(__m256 x) {
    __m256 t = _mm256_div_ps(VM256_K(1.0f),
                             _mm256_add_ps(VM256_K(1.0f), _mm256_mul_ps(vm256_abs(x), VM256_K(0.35355339059327376220f))));
    __m256 p = VM256_K(0.17087277f);
    p = _mm256_fmsub_ps(p, t, VM256_K(0.82215223f));
    p = _mm256_fmadd_ps(p, t, VM256_K(1.48851587f));
    p = _mm256_fmsub_ps(p, t, VM256_K(1.13520398f));
    p = _mm256_fmadd_ps(p, t, VM256_K(0.27886807f));
    p = _mm256_fmsub_ps(p, t, VM256_K(0.18628806f));
    p = _mm256_fmadd_ps(p, t, VM256_K(0.09678418f));
    p = _mm256_fmadd_ps(p, t, VM256_K(0.37409196f));
    p = _mm256_fmadd_ps(p, t, VM256_K(1.00002368f));
    p = _mm256_fmsub_ps(p, t, VM256_K(1.26551223f));
    __m256 s = _mm256_fmadd_ps(_mm256_mul_ps(VM256_K(-0.5f), x), x, p);
    __m256 h = _mm256_mul_ps(_mm256_mul_ps(VM256_K(0.5f), t), vm256_expf(s));
    return _mm256_blendv_ps(_mm256_sub_ps(VM256_K(1.0f), h), h, vm256_ltz(x));
}

#endif

/* Internal: AVX2 versions of the vmath.h functions, 8 lanes at a time:
 * vm256_expf, vm256_expf_le100, vm256_sigmoidf, vm256_tanhf, vm256_phif,
 * vm256_abs, vm256_copysign, vm256_ltz. Include only from files built for
 * AVX2 (*_avx2.c).
 *
 * The functions are vmath_simd.inc's (shared with vmath_avx512.h), which
 * evaluate exactly the operations of vmath.h; here the steps it leaves to
 * the instruction set:
 *   - (v + 1.5*2^23) - 1.5*2^23 (round to nearest, ties to even, for
 *     |v| < 2^22) is vroundps with round-to-nearest;
 *   - the integer steps of the 2^n scaling are the C code's: n from the
 *     NaN-free copy of fn, n1 = n / 2 rounded toward zero, n2 = n - n1,
 *     2^n1 and 2^n2 built in the exponent field, two multiplies;
 *   - selects `c ? a : b` are compare masks and vblendvps. */
#ifndef AMP_KERNELS_CPU_VMATH_AVX2_H
#define AMP_KERNELS_CPU_VMATH_AVX2_H

#include <immintrin.h>

#define VM256_INLINE static inline __attribute__((always_inline))

VM256_INLINE __m256 vm256_abs(__m256 x) {
    return _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}
/* copysignf(mag, sgn) */
VM256_INLINE __m256 vm256_copysign(__m256 mag, __m256 sgn) {
    __m256 sb = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    return _mm256_or_ps(_mm256_andnot_ps(sb, mag), _mm256_and_ps(sb, sgn));
}
/* (p * 2^n1) * 2^n2, n = fn (0 for NaN), n1 = n / 2 toward zero, n2 = n - n1 */
VM256_INLINE __m256 vm256_scale2n_(__m256 p, __m256 fn) {
    __m256 fnn = _mm256_and_ps(fn, _mm256_cmp_ps(fn, fn, _CMP_ORD_Q)); /* fn == fn ? fn : 0 */
    __m256i n = _mm256_cvttps_epi32(fnn);
    __m256i n1 = _mm256_srai_epi32(_mm256_add_epi32(n, _mm256_srli_epi32(n, 31)), 1); /* n / 2, toward zero */
    __m256i n2 = _mm256_sub_epi32(n, n1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

#define VF __m256
#define VMASK __m256
#define VM_(name) vm256_##name
#define VM_INL VM256_INLINE
#define VK(c) _mm256_set1_ps(c)
#define VADD _mm256_add_ps
#define VSUB _mm256_sub_ps
#define VMUL _mm256_mul_ps
#define VDIV _mm256_div_ps
#define VMIN _mm256_min_ps
#define VMAX _mm256_max_ps
#define VFMADD _mm256_fmadd_ps
#define VFMSUB _mm256_fmsub_ps
#define VFNMADD _mm256_fnmadd_ps
#define VROUND(v) _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VLT(a, b) _mm256_cmp_ps(a, b, _CMP_LT_OQ)
#define VBLEND(m, f, t) _mm256_blendv_ps(f, t, m)
#define VNEGABS(v) _mm256_or_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)))
#define VSCALE2N vm256_scale2n_
#define VW 8 /* lanes */
#define VLOADU _mm256_loadu_ps
#define VSTOREU _mm256_storeu_ps
#include "kernels/cpu/vmath_simd.inc"

#endif

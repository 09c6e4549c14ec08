/* Internal: AVX-512 versions of the vmath.h functions, 16 lanes at a time:
 * vm512_expf, vm512_expf_le100, vm512_sigmoidf, vm512_tanhf, vm512_phif,
 * vm512_abs, vm512_copysign, vm512_ltz. Include only from files built for
 * AVX-512 (*_avx512.c).
 *
 * The functions are vmath_simd.inc's (shared with vmath_avx2.h), which
 * evaluate exactly the operations of vmath.h; two steps use a single
 * instruction with the same result:
 *   - (v + 1.5*2^23) - 1.5*2^23 rounds v to the nearest integer (ties to
 *     even) for |v| < 2^22: vrndscaleps with round-to-nearest;
 *   - (p * 2^n1) * 2^n2 with n1 = n/2, n2 = n - n1 and p in [0.7, 1.5]: the
 *     first product is exact (normal), so the result is p * 2^n rounded
 *     once, which is what vscalefps computes (overflow to inf, gradual
 *     underflow, NaN propagates).
 * Selects `c ? a : b` become compare masks and blends. */
#ifndef AMP_KERNELS_CPU_VMATH_AVX512_H
#define AMP_KERNELS_CPU_VMATH_AVX512_H

#include <immintrin.h>

#define VM512_INLINE static inline __attribute__((always_inline))

VM512_INLINE __m512 vm512_abs(__m512 x) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff))); }
/* copysignf(mag, sgn) */
VM512_INLINE __m512 vm512_copysign(__m512 mag, __m512 sgn) {
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(mag), _mm512_castps_si512(sgn),
                                                         _mm512_set1_epi32(0x7fffffff), 0xe4)); /* c ? a : b bitwise */
}

#define VF __m512
#define VMASK __mmask16
#define VM_(name) vm512_##name
#define VM_INL VM512_INLINE
#define VK(c) _mm512_set1_ps(c)
#define VADD _mm512_add_ps
#define VSUB _mm512_sub_ps
#define VMUL _mm512_mul_ps
#define VDIV _mm512_div_ps
#define VMIN _mm512_min_ps
#define VMAX _mm512_max_ps
#define VFMADD _mm512_fmadd_ps
#define VFMSUB _mm512_fmsub_ps
#define VFNMADD _mm512_fnmadd_ps
#define VROUND(v) _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VLT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ)
#define VBLEND(m, f, t) _mm512_mask_blend_ps(m, f, t)
#define VNEGABS(v) _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u)))
#define VSCALE2N _mm512_scalef_ps
#define VW 16 /* lanes */
#define VLOADU _mm512_loadu_ps
#define VSTOREU _mm512_storeu_ps
#include "kernels/cpu/vmath_simd.inc"

#endif

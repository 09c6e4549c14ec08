/* Internal: 16 elements of an f32, f16 or bf16 array widened to f32 in an
 * AVX-512 register, and rounded back on store (f16 with vcvtps2ph, bf16 with
 * numeric/bf16_avx512.h; nat = amp__cpu_bf16cvt()). The kernels that read
 * and write half rows in registers (elementwise, softmax, layer_norm) share
 * these. Include only from files built for AVX-512. */
#ifndef AMP_KERNELS_CPU_HALF_AVX512_H
#define AMP_KERNELS_CPU_HALF_AVX512_H

#include "amp/base.h"
#include "numeric/bf16_avx512.h"

#define H512_INLINE static inline __attribute__((always_inline))
#define H512_F16(v) _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* elements j .. j+15 of p */
H512_INLINE __m512 h512_load(const void *p, amp_dtype dt, int64_t j) {
    switch (dt) {
    case AMP_F32: return _mm512_loadu_ps((const float *)p + j);
    case AMP_F16: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + j)));
    default: return bf512_load((const uint16_t *)p + j);
    }
}
/* the same for values that only meet arithmetic: a bf16 signalling NaN is not
 * quieted on the way (bf512_load_arith), which the arithmetic does with the
 * same bits */
H512_INLINE __m512 h512_load_arith(const void *p, amp_dtype dt, int64_t j) {
    return dt == AMP_BF16 ? bf512_load_arith((const uint16_t *)p + j) : h512_load(p, dt, j);
}
/* the lanes of k only (zeros elsewhere; nothing else is read) */
H512_INLINE __m512 h512_maskz_load(const void *p, amp_dtype dt, int64_t j, __mmask16 k) {
    switch (dt) {
    case AMP_F32: return _mm512_maskz_loadu_ps(k, (const float *)p + j);
    case AMP_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const uint16_t *)p + j));
    default: return bf512_maskz_load(k, (const uint16_t *)p + j);
    }
}
/* v into elements j .. j+15 of p, the lanes of k only */
H512_INLINE void h512_mask_store(void *p, amp_dtype dt, int64_t j, __mmask16 k, __m512 v, bool nat) {
    switch (dt) {
    case AMP_F32: _mm512_mask_storeu_ps((float *)p + j, k, v); return;
    case AMP_F16: _mm256_mask_storeu_epi16((uint16_t *)p + j, k, H512_F16(v)); return;
    default: bf512_mask_store((uint16_t *)p + j, k, v, nat); return;
    }
}
/* a, b into elements j .. j+31 of p (bf16: one 32-lane rounding) */
H512_INLINE void h512_store2(void *p, amp_dtype dt, int64_t j, __m512 a, __m512 b, bool nat) {
    if (dt == AMP_BF16) {
        bf512_store2((uint16_t *)p + j, a, b, nat);
    } else {
        h512_mask_store(p, dt, j, 0xffff, a, nat);
        h512_mask_store(p, dt, j + 16, 0xffff, b, nat);
    }
}

#endif

/* amp/numeric.h — exact conversions between f32 and the narrow formats.
 *
 * f16   IEEE binary16: 1 sign, 5 exponent, 10 mantissa bits, max 65504, has inf.
 * bf16  bfloat16: 1/8/7, fp32's exponent range, has inf.
 * e4m3  OCP float8 E4M3FN: 1/4/3, bias 7, no infinities, NaN = S.1111.111,
 *       max 448. Overflow gives NaN; the _sat variant clamps to ±448 (as
 *       Transformer Engine casts do; ±inf too, like CUDA's .satfinite).
 * e5m2  OCP float8 E5M2: 1/5/2, bias 15, IEEE-like, max 57344, has inf.
 *       Overflow gives ±inf; the _sat variant clamps to ±57344 (±inf too).
 * tf32  fp32 with a 10-bit mantissa (the low 13 bits rounded away).
 *
 * All f32 -> narrow conversions round to nearest, ties to even; handle ±0,
 * produce and consume subnormals; NaN stays NaN (quiet, sign kept) and never
 * becomes inf. Overflow follows IEEE: a value rounds to inf only when it is at
 * or beyond the midpoint between the largest finite value and the next power
 * of the format (e.g. 65520 for f16; 61440 for e5m2; for e4m3, beyond 464
 * gives NaN and 464 itself rounds to 448).
 *
 * NaN payloads: every path (scalar, AVX2, AVX-512) gives the same bits, those
 * of the x86 F16C instructions: narrowing keeps the top mantissa bits and sets
 * the quiet bit (e4m3 has the single NaN S.1111.111); widening shifts the
 * mantissa up and sets the quiet bit. Results never depend on the caller's
 * floating-point environment (rounding mode, FTZ/DAZ).
 */
#ifndef AMP_NUMERIC_H
#define AMP_NUMERIC_H

#include "amp/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- scalar conversions -------------------------------------------------- */
AMP_API uint16_t amp_f32_to_f16(float x);
AMP_API float amp_f16_to_f32(uint16_t h);
AMP_API uint16_t amp_f32_to_bf16(float x);
AMP_API float amp_bf16_to_f32(uint16_t h);
AMP_API uint8_t amp_f32_to_e4m3(float x);
AMP_API uint8_t amp_f32_to_e4m3_sat(float x);
AMP_API float amp_e4m3_to_f32(uint8_t b);
AMP_API uint8_t amp_f32_to_e5m2(float x);
AMP_API uint8_t amp_f32_to_e5m2_sat(float x);
AMP_API float amp_e5m2_to_f32(uint8_t b);
/* f64 -> narrow formats, rounded once (no double rounding through f32). */
AMP_API float amp_f64_to_f32(double x);
AMP_API uint16_t amp_f64_to_f16(double x);
AMP_API uint16_t amp_f64_to_bf16(double x);
/* Round an f32 to tf32 precision (10 mantissa bits, RNE); result is an f32. */
AMP_API float amp_f32_round_tf32(float x);

/* ---- stochastic rounding ----------------------------------------------- */
/* Rounds x to one of its two neighbouring representable values, up with
 * probability equal to the distance from the lower one over the gap, using
 * the caller's random bits (uniform 32-bit): away from zero iff rbits is below
 * the discarded fraction scaled to 2^32 (so the probability is exact to
 * 2^-32). E[result] = x. NaN/inf pass through; exactly representable values
 * are returned unchanged. Overflow: past the largest finite value the upper
 * neighbour is inf (f16: x in (65504, 65536) becomes inf with probability
 * (|x| - 65504) / 32; |x| >= 65536 is always inf). */
AMP_API uint16_t amp_f32_to_bf16_sr(float x, uint32_t rbits);
AMP_API uint16_t amp_f32_to_f16_sr(float x, uint32_t rbits);
/* Array forms: element i uses random bits derived from (seed, counter + i) by a
 * counter-based generator, so results do not depend on thread count. */
AMP_API void amp_f32_to_bf16_sr_array(uint16_t *dst, const float *src, size_t n, uint64_t seed, uint64_t counter);
AMP_API void amp_f32_to_f16_sr_array(uint16_t *dst, const float *src, size_t n, uint64_t seed, uint64_t counter);

/* ---- array conversions ------------------------------------------------- */
/* Vectorised for the active CPU path (AVX-512, AVX2+F16C, scalar), OpenMP
 * across cores for large n; bit-identical to the scalar functions above. Any
 * alignment, any length; src and dst must not overlap. */
AMP_API void amp_f32_to_f16_array(uint16_t *dst, const float *src, size_t n);
AMP_API void amp_f16_to_f32_array(float *dst, const uint16_t *src, size_t n);
AMP_API void amp_f32_to_bf16_array(uint16_t *dst, const float *src, size_t n);
AMP_API void amp_bf16_to_f32_array(float *dst, const uint16_t *src, size_t n);
AMP_API void amp_f32_to_e4m3_array(uint8_t *dst, const float *src, size_t n);
AMP_API void amp_f32_to_e4m3_sat_array(uint8_t *dst, const float *src, size_t n);
AMP_API void amp_e4m3_to_f32_array(float *dst, const uint8_t *src, size_t n);
AMP_API void amp_f32_to_e5m2_array(uint8_t *dst, const float *src, size_t n);
AMP_API void amp_f32_to_e5m2_sat_array(uint8_t *dst, const float *src, size_t n);
AMP_API void amp_e5m2_to_f32_array(float *dst, const uint8_t *src, size_t n);

/* Generic element conversion between any two dtypes (floats, f64 and the
 * integer types). Floats -> integers truncate toward zero as C casts do and
 * reject NaN/out-of-range values with AMP_ERR_RANGE. Narrow float targets
 * round once (RNE), overflow as documented above. */
#define AMP_CONVERT_SATURATE 1u /* fp8 targets clamp instead of NaN/inf */
AMP_API amp_status amp_convert(void *dst, amp_dtype dst_dtype, const void *src, amp_dtype src_dtype, size_t n,
                       unsigned flags);

/* ---- format properties ------------------------------------------------- */
typedef enum {
    AMP_FMT_F32 = 0,
    AMP_FMT_TF32,
    AMP_FMT_F16,
    AMP_FMT_BF16,
    AMP_FMT_E4M3,
    AMP_FMT_E5M2,
    AMP_FMT_COUNT
} amp_format;

typedef struct {
    const char *name;      /* "fp32", "tf32", "fp16", "bf16", "fp8 e4m3", "fp8 e5m2" */
    int total_bits;        /* storage bits (tf32: 19 significant) */
    int sign_bits, exponent_bits, mantissa_bits;
    double max;            /* largest finite */
    double min_normal;     /* smallest positive normal */
    double min_subnormal;  /* smallest positive subnormal */
    double epsilon;        /* next value after 1.0, minus 1.0 */
    double decimal_digits; /* log10(2^(mantissa_bits+1)) */
    bool has_inf;
    bool needs_loss_scaling; /* exponent range narrower than fp32's */
} amp_format_info;

/* Computed from the conversion code (decoding bit patterns), not typed in. */
AMP_API amp_status amp_format_get_info(amp_format fmt, amp_format_info *out);
/* Nearest value of x in fmt (RNE; e4m3 saturating when saturate is true).
 * Returns the decoded value (may be inf or NaN on overflow). */
AMP_API double amp_format_round(amp_format fmt, float x, bool saturate);
/* Bit pattern of the nearest value of x in fmt, rounded once from double
 * (RNE; fp8 formats clamp when saturate is true). Patterns are the format's
 * storage: 32 bits for fp32 and tf32 (tf32 = f32 bits with the low 13 bits
 * zero), 16 for fp16/bf16, 8 for fp8. Returns 0 for an invalid fmt. */
AMP_API uint32_t amp_format_encode(amp_format fmt, double x, bool saturate);
/* Value of a bit pattern of fmt (layout as amp_format_encode); NaN for an
 * invalid fmt. */
AMP_API double amp_format_decode(amp_format fmt, uint32_t bits);

#ifdef __cplusplus
}
#endif
#endif
